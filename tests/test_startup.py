"""Start-up: the service refuses a database that is not kagent's, migrates its own schema once, and its
served OpenAPI document is the committed one and matches the routes and request types."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest
import yaml
from litestar.testing import AsyncTestClient

from service.agents.discard import DiscardRequest
from service.agents.experiments import ExperimentRequest, JudgeRequest, VoteRequest
from service.agents.suites.cases import CaseSpec, Select, SuiteFile, SuiteRequest
from service.agents.suites.ledger import RunRequest
from service.agents.whatif import WhatifRequest
from service.app import create_app
from service.config import ConfigError, Settings, from_env
from service.database import open_pool, prepare_database
from service.doors import experiments_http, suite_runs_http, suites_http
from service.doors.api import handlers
from service.kagent.migrate import SERVED_LINES, KagentTooNew, SchemaError, check_kagent_schema, migrate
from service.kagent.store import Store
from service.schemas import EmptyRequest, ForkRequest, RewindRequest
from tests.conftest import create_database, create_kagent_1x_database, drop_database

ROOT = Path(__file__).resolve().parents[1]


async def test_refuses_a_database_without_kagents_tables(server_url: str) -> None:
    url = await create_database(server_url)
    try:
        conn = await asyncpg.connect(url)
        await conn.execute("DROP TABLE task")
        await conn.close()
        settings = Settings(database_url=url)
        pool = await open_pool(settings, url)
        try:
            with pytest.raises(SchemaError, match="table task is missing"):
                await prepare_database(settings, Store(settings.service_schema), pool)
        finally:
            await pool.close()
        # and `kagent-fork serve` stops with the reason instead of serving
        env = {**os.environ, "DATABASE_URL": url}
        serve = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "service", "serve", "--port", "0"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert serve.returncode != 0
        assert "table task is missing" in serve.stdout + serve.stderr
    finally:
        await drop_database(server_url, url)


# kagent 1.x's two layouts (tests/fixtures/kagent_1x/README.md) and what the one line says of each.
KAGENT_1X_LINES = [
    (
        "sessions",
        "this is kagent 1.x's schema (a2a_context, runtime_instance, session_checkpoint, session_task, "
        "session_task_event; goose_db_version version 1)",
    ),
    (
        "agent_instances",
        "this is kagent 1.x's schema (agent_history, agent_instance, agent_instance_checkpoint, agent_instance_task, "
        "agent_instance_task_event; schema_migrations version 1)",
    ),
]


@pytest.mark.parametrize(("layout", "which"), KAGENT_1X_LINES)
async def test_refuses_kagent_1x_saying_which_kagent_it_is(server_url: str, layout: str, which: str) -> None:
    """kagent 1.x has a session and a session_share table of its own and no event or task table: the refusal says
    which kagent this is and which lines kagent-fork serves, in one line, and writes nothing (issue 45, item 5)."""
    url = await create_kagent_1x_database(server_url, layout)
    try:
        settings = Settings(database_url=url)
        pool = await open_pool(settings, url)
        try:
            with pytest.raises(KagentTooNew) as refused:
                await prepare_database(settings, Store(settings.service_schema), pool)
            assert str(refused.value) == f"{which}: {SERVED_LINES}"
            assert await pool.fetchval("SELECT to_regnamespace($1) IS NULL", settings.service_schema)
        finally:
            await pool.close()
        serve = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "service", "serve", "--port", "0"],
            env={**os.environ, "DATABASE_URL": url}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert serve.returncode == 2 and "Traceback" not in serve.stdout + serve.stderr
        refusal = f"kagent-fork: cannot start: {which}: {SERVED_LINES} ({KagentTooNew.hint})"
        assert serve.stderr.strip().splitlines() == [refusal]
    finally:
        await drop_database(server_url, url)


async def test_the_kagent_1x_line_names_whatever_ledger_is_there(server_url: str) -> None:
    """Which ledger kagent 1.x's runner keeps is read, not assumed: golang-migrate's (kagent before its goose
    switch), goose's under either name, none; a goose ledger alone, with none of 1.x's tables, is 1.x's too."""
    url = await create_kagent_1x_database(server_url, "agent_instances")
    store = Store("kagent_fork")
    conn = await asyncpg.connect(url)
    tables = "agent_history, agent_instance, agent_instance_checkpoint, agent_instance_task, agent_instance_task_event"

    async def refusal() -> str:
        with pytest.raises(KagentTooNew) as refused:
            await check_kagent_schema(store, conn)
        return str(refused.value).removesuffix(f": {SERVED_LINES}")

    try:
        assert await refusal() == f"this is kagent 1.x's schema ({tables}; schema_migrations version 1)"
        await conn.execute("DROP TABLE schema_migrations")
        assert await refusal() == f"this is kagent 1.x's schema ({tables}; no migration ledger)"
        await conn.execute(
            "CREATE TABLE schema_migrations (version BIGINT NOT NULL PRIMARY KEY, dirty BOOLEAN NOT NULL)"
        )
        await conn.execute("INSERT INTO schema_migrations VALUES (16, true)")
        assert await refusal() == f"this is kagent 1.x's schema ({tables}; schema_migrations version 16 (dirty))"
        await conn.execute(
            "DROP TABLE schema_migrations; DROP TABLE agent_instance_task_event, agent_instance_task, "
            "agent_instance_checkpoint, agent_instance CASCADE; DROP TABLE agent_history CASCADE; "
            "CREATE TABLE goose_db_version (id SERIAL PRIMARY KEY, version_id BIGINT NOT NULL, is_applied BOOLEAN "
            "NOT NULL, tstamp TIMESTAMP NOT NULL DEFAULT NOW())"
        )
        assert (
            await refusal()
            == "this is kagent 1.x's schema (none of its conversation tables; goose_db_version version none)"
        )
    finally:
        await conn.close()
        await drop_database(server_url, url)


async def test_refuses_a_dirty_kagent_migration_and_recognises_both_lines(server_url: str) -> None:
    url = await create_database(server_url, migration_version=7)
    try:
        conn = await asyncpg.connect(url)
        store = Store("kagent_fork")
        try:
            assert (await check_kagent_schema(store, conn)).product_line == "0.10.x"
            await conn.execute("UPDATE schema_migrations SET version = 13")
            assert (await check_kagent_schema(store, conn)).product_line == "main"
            # kagent main's AgentInstance tables (its migrations 9 and 11) beside session, event and task: still main
            await conn.execute("CREATE TABLE agent_instance (id TEXT PRIMARY KEY)")
            await conn.execute("CREATE TABLE agent_instance_task_event (sequence BIGINT PRIMARY KEY)")
            assert (await check_kagent_schema(store, conn)).product_line == "main"
            await conn.execute("UPDATE schema_migrations SET dirty = true")
            with pytest.raises(SchemaError, match="dirty"):
                await check_kagent_schema(store, conn)
        finally:
            await conn.close()
    finally:
        await drop_database(server_url, url)


async def test_migrations_run_once_even_from_two_replicas(server_url: str) -> None:
    url = await create_database(server_url)
    try:
        conns = [await asyncpg.connect(url) for _ in range(2)]
        versions = await asyncio.gather(*(migrate(c, "kagent_fork_replicas") for c in conns))
        assert versions[0] == versions[1] >= 1
        rows = await conns[0].fetchval("SELECT count(*) FROM kagent_fork_replicas.schema_version")
        files = sorted((ROOT / "sql" / "migrations").glob("*.sql"))
        # each migration applied once, by one replica (numbers are handed out ahead: one may not be merged yet)
        assert rows == len(files) and versions[0] == int(files[-1].name.split("_", 1)[0])
        kagent_columns = await conns[0].fetchval(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'task'"
        )
        assert kagent_columns == 8, "kagent's tables are never altered"
        # a migration numbered below the highest applied (parallel work landing out of order) is applied too
        await conns[0].execute("DELETE FROM kagent_fork_replicas.schema_version WHERE version = 16")
        await conns[0].execute("DROP TABLE kagent_fork_replicas.judge_vote")
        assert await migrate(conns[0], "kagent_fork_replicas") == versions[0]
        assert await conns[0].fetchval("SELECT to_regclass('kagent_fork_replicas.judge_vote') IS NOT NULL")
        assert await conns[0].fetchval("SELECT count(*) FROM kagent_fork_replicas.schema_version") == rows
        for c in conns:
            await c.close()
    finally:
        await drop_database(server_url, url)


async def test_the_app_leaves_what_it_made_to_start_out_of_full_collections(
    settings: Settings, database_url: str, pool: asyncpg.Pool
) -> None:
    """While it serves, the objects the app made to start are frozen (gc.freeze: a full collection walked them all,
    75 ms in the middle of a request); at shutdown they are given back to the collector."""
    async with AsyncTestClient(app=create_app(settings, database_url)) as client:
        assert (await client.get("/readyz")).status_code == 200
        assert gc.get_freeze_count() > 10_000
    assert gc.get_freeze_count() == 0


def test_settings_from_env_fail_with_the_variable_named() -> None:
    assert from_env({}).auth_mode == "unsecure"
    assert from_env({"AUTH_MODE": "trusted-proxy", "MAX_FORK_DEPTH": "3"}).max_fork_depth == 3
    assert not from_env({}).turn_map_fork_copy and from_env({"TURN_MAP_FORK_COPY": "on"}).turn_map_fork_copy
    assert (from_env({}).response_memory_bytes, from_env({}).response_disk_bytes) == (64 << 20, 1 << 30)
    assert from_env({"RESPONSE_DISK_BYTES": "0"}).response_disk_bytes == 0
    for env, name in [
        ({"TURN_MAP_FORK_COPY": "yes please"}, "TURN_MAP_FORK_COPY"),
        ({"AUTH_MODE": "oidc"}, "AUTH_MODE"),
        ({"MAX_FORK_DEPTH": "many"}, "MAX_FORK_DEPTH"),
        ({"MAX_FORK_DEPTH": "0"}, "MAX_FORK_DEPTH"),
        ({"KAGENT_FORK_SCHEMA": "public; drop"}, "KAGENT_FORK_SCHEMA"),
        ({"DB_POOL_MIN_SIZE": "5", "DB_POOL_MAX_SIZE": "2"}, "DB_POOL_MIN_SIZE"),
        ({"RESPONSE_MEMORY_BYTES": "64Mi"}, "RESPONSE_MEMORY_BYTES"),
        ({"RESPONSE_DISK_BYTES": "-1"}, "RESPONSE_DISK_BYTES"),
    ]:
        with pytest.raises(ConfigError, match=name):
            from_env(env)


def test_database_url_from_a_file_wins_as_kagents_does(tmp_path: Path) -> None:
    """DATABASE_URL_FILE (the chart's database.postgres.urlFile, a mounted Secret) is read once, trimmed, and wins
    over DATABASE_URL, as kagent's POSTGRES_DATABASE_URL_FILE does; a missing or empty file stops start-up."""
    url = tmp_path / "url"
    url.write_text("postgresql://kagent:secret@db:5432/kagent\n")
    env = {"DATABASE_URL_FILE": str(url), "DATABASE_URL": "postgresql://other@db/kagent"}
    assert from_env(env).database_url == "postgresql://kagent:secret@db:5432/kagent"
    assert from_env({"DATABASE_URL": "postgresql://other@db/kagent"}).database_url == "postgresql://other@db/kagent"
    (tmp_path / "empty").write_text(" \n")
    for path in (tmp_path / "missing", tmp_path / "empty"):
        with pytest.raises(ConfigError, match="DATABASE_URL_FILE"):
            from_env({"DATABASE_URL_FILE": str(path)})


async def test_served_openapi_is_the_committed_one(client: Any) -> None:
    r = await client.get("/openapi.yaml")
    assert r.status_code == 200 and r.content == (ROOT / "openapi.yaml").read_bytes()


def test_openapi_documents_every_route_and_request_type() -> None:
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    # Litestar serves a path with and without its trailing slash (the page's address is /ui/)
    documented = {(path.rstrip("/") or "/", method.upper()) for path, ops in spec["paths"].items() for method in ops}
    served = {
        (path.replace(":str", ""), method)
        for handler in [*handlers(), *experiments_http.handlers(), *suites_http.handlers(), *suite_runs_http.handlers()]
        for path in handler.paths
        for method in handler.http_methods
    }
    assert served == documented
    for struct, name in [
        (ForkRequest, "ForkRequest"),
        (RewindRequest, "RewindRequest"),
        (EmptyRequest, "EmptyRequest"),
        (ExperimentRequest, "ExperimentRequest"),
        (WhatifRequest, "WhatifRequest"),
        (DiscardRequest, "DiscardRequest"),
        (JudgeRequest, "JudgeRequest"),
        (VoteRequest, "VoteRequest"),
        (SuiteRequest, "SuiteRequest"),
        (CaseSpec, "SuiteCaseSpec"),
        (Select, "SuiteSelect"),
        (SuiteFile, "SuiteFile"),
        (RunRequest, "SuiteRunRequest"),
    ]:
        code = msgspec.json.schema(struct)
        code_fields = set(code["$defs"][struct.__name__]["properties"]) if "$defs" in code else set(code["properties"])
        doc = spec["components"]["schemas"][name]
        assert set(doc["properties"]) == code_fields, name
        assert doc["additionalProperties"] is False
    fork_props = spec["components"]["schemas"]["ForkRequest"]["properties"]
    assert fork_props["task_layout"]["enum"] == ["auto", "merged", "per_task"]
    assert fork_props["if_boundary_missing"]["enum"] == ["copy_all", "error"]


def _serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args], env={**os.environ, **env}, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


def test_a_database_that_refuses_is_one_clear_line() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _serve({"DATABASE_URL": f"postgresql://kagent@127.0.0.1:{port}/kagent"}, "serve", "--port", "0")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kagent-fork: cannot start: cannot connect to the database")
    assert "check DATABASE_URL" in lines[0] and "Traceback" not in done.stderr + done.stdout


class SilentDatabase:
    """A port that accepts connections and never says a word; it notes when the first connection came, so
    that a test measures the wait for the database, not the interpreter's start-up (slow under load)."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.port: int = self.socket.getsockname()[1]
        self.connected: float | None = None
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.socket.accept()
            except OSError:
                return  # closed
            if self.connected is None:
                self.connected = time.monotonic()
            self.held.append(conn)

    def waited(self) -> float:
        """Seconds from the first connection to now; then forget it, for the next run."""
        assert self.connected is not None, "the service never connected"
        seconds, self.connected = time.monotonic() - self.connected, None
        return seconds

    def close(self) -> None:
        self.socket.close()
        for conn in self.held:
            conn.close()


def test_a_database_that_never_answers_fails_within_the_connect_timeout() -> None:
    silent = SilentDatabase()
    env = {"DATABASE_URL": f"postgresql://kagent@127.0.0.1:{silent.port}/kagent", "DB_CONNECT_TIMEOUT_SECONDS": "1"}
    # From its connection to its exit, a 1 s timeout: well under asyncpg's own 60 s wait, even on a loaded
    # machine (the process's exit after the timeout is not instant there).
    limit = 15
    try:
        done = _serve(env, "serve", "--port", "0")
        waited = silent.waited()
        assert done.returncode == 2 and waited < limit, (waited, done.stderr)
        assert "did not answer within 1 s" in done.stderr and "DB_CONNECT_TIMEOUT_SECONDS" in done.stderr
        operator = _serve(env, "tree", "some-session")
        waited = silent.waited()
        assert operator.returncode == 8 and waited < limit, (waited, operator.stderr)
    finally:
        silent.close()


def _postmaster(pgdata: Path) -> int | None:
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def _gone(pgdata: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _postmaster(pgdata) is None:
            return True
        time.sleep(0.2)
    return False


def _serving(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, int]:
    """`kagent-fork serve` on its embedded database in tmp_path, once it answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pgdata = tmp_path / "pg"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DATABASE_URL", "KAGENT_A2A_URL")}
    env["KAGENT_FORK_DATA_DIR"] = str(pgdata)
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port)], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, pgdata, port
        except OSError:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("serve did not start")


def test_a_hard_killed_serve_leaves_no_embedded_database_running(tmp_path: Path) -> None:
    proc, pgdata, _ = _serving(tmp_path)
    assert _postmaster(pgdata) is not None
    proc.kill()  # SIGKILL: no exit handler runs
    proc.wait(10)
    assert _gone(pgdata, 30), "the embedded PostgreSQL outlived its only user"
    # and its stale pid in pgserver's list of users no longer keeps the next one's database running
    handles = json.loads((pgdata / ".handle_pids.json").read_text())
    assert proc.pid not in handles
    (pgdata / ".handle_pids.json").write_text(json.dumps([proc.pid]))  # as a hard stop used to leave it
    again, _, _ = _serving(tmp_path)
    again.send_signal(signal.SIGINT)
    assert again.wait(60) == 0, again.stdout.read() if again.stdout else ""
    assert _gone(pgdata, 30), "a stale pid kept the database running after a clean exit"


def test_sighup_is_logged_and_shuts_down_cleanly(tmp_path: Path) -> None:
    proc, pgdata, _ = _serving(tmp_path)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(60) == 0
    output = proc.stdout.read() if proc.stdout else ""
    assert "SIGHUP received" in output and "demo session demo-v1-session, turns e-" in output
    assert _gone(pgdata, 30)


def test_serve_on_the_embedded_demo_runs_a_whatif_out_of_the_box(tmp_path: Path) -> None:
    """Issue 25, 5: `kagent-fork serve` without DATABASE_URL (what ./scripts/serve runs) starts the demo's
    scripted A2A agent, points KAGENT_A2A_URL at it, and says where the embedded database is."""
    import httpx

    proc, pgdata, port = _serving(tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        turns = httpx.get(f"{base}/api/sessions/demo-v1-session/invocations", timeout=30).json()["data"]
        started = httpx.post(
            f"{base}/api/sessions/demo-v1-session/whatif",
            json={
                "rewind_before_invocation_id": turns[1]["invocation_id"],
                "agent_ref": "kagent/scripted-agent",
                "reads": "live",
            },
            timeout=30,
        )
        assert started.status_code == 202, started.text
        job_id = started.json()["data"]["job"]["id"]
        deadline = time.monotonic() + 60
        while (job := httpx.get(f"{base}/api/whatif/{job_id}", timeout=10).json()["data"])["status"] == "running":
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
        assert job["status"] == "completed", job["error"]
        assert job["result"]["last_agent_text"] == "It is 11°C and cloudy in Berlin."
        # the second demo agent answers too, with more tool calls, and every column is priced by the demo's
        # `agent` rows; the demo judge serves its card
        started = httpx.post(
            f"{base}/api/sessions/demo-v1-session/experiments", timeout=30,
            json={"rewind_before_invocation_id": turns[1]["invocation_id"], "turns": "all", "tools": "live",
                  "agents": ["kagent/k8s-agent", "kagent/thorough-agent"]},
        )  # fmt: skip
        assert started.status_code == 202, started.text
        path = f"{base}/api/experiments/{started.json()['data']['experiment']['id']}"
        while (grid := httpx.get(path, timeout=10).json()["data"])["status"] == "running":
            assert time.monotonic() < deadline + 60, grid
            time.sleep(0.2)
        assert grid["status"] == "completed", grid
        plain, thorough = (b["totals"] for b in grid["branches"])
        assert thorough["tool_calls"] > plain["tool_calls"] and thorough["duration_seconds"] > plain["duration_seconds"]
        assert all(t["cost_usd"] for t in (plain, thorough, grid["source"]["totals"])), grid
        judge = httpx.post(
            f"{base}/api/sessions/demo-v1-session/experiments", timeout=30,
            json={"rewind_before_invocation_id": turns[1]["invocation_id"], "agents": ["kagent/no-such-judge"]},
        )  # fmt: skip
        assert judge.status_code == 422  # an agent the demo does not serve is refused at its card ...
        card = httpx.post(
            f"{base}/api/sessions/demo-v1-session/whatif", timeout=30,
            json={"rewind_before_invocation_id": turns[1]["invocation_id"], "agent_ref": "kagent/demo-judge"},
        )  # fmt: skip
        assert card.status_code == 202, card.text  # ... and the judge answers its card as any agent
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    output = proc.stdout.read() if proc.stdout else ""
    assert "embedded database: postgresql://" in output
    assert "demo A2A agents (answer from scripts, no model)" in output and "kagent/thorough-agent" in output
    assert "demo judge (prefers the continuation with fewer tool calls): kagent/demo-judge" in output
    assert _gone(pgdata, 30)


def test_each_migration_has_a_version_of_its_own() -> None:
    """Two branches may each add the next migration; merged, two files of one version would leave one unapplied
    wherever the other ran first (a version is applied once)."""
    versions = [int(p.name.split("_", 1)[0]) for p in sorted((ROOT / "sql" / "migrations").glob("*.sql"))]
    assert len(versions) == len(set(versions)), sorted(versions)
