"""The retired invocation index (service/kagent/invocation_index.py, docs/invocation-index.md): `kagent-fork index
install` is refused and adds nothing; an index that an earlier version left on kagent's tables (built here by
hand from tests/fixtures/retired_invocation_index.sql, as that version's install did) is reported by `index
status` and /readyz, warned about at start-up, removed by `index uninstall`, and changes no answer while it
is there; kagent's own writes never fail because of it, whatever they store."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from bench.kagent_writes import INSERT_EVENT, UPSERT_TASK
from service.app import create_app
from service.config import Settings
from service.identity import Caller
from service.kagent import invocation_index
from service.kagent.migrate import migrate
from service.kagent.store import Store
from service.kagent.store.base import load_queries
from service.services import Services
from tests.conftest import create_database, drop_database
from tests.helpers import new_user, seed
from tests.support import answers as reading
from tests.test_cli import cli, ok_json

LEFT_BEHIND = Path(__file__).parent / "fixtures" / "retired_invocation_index.sql"


@pytest.fixture
async def own_db(server_url: str) -> AsyncIterator[str]:
    url = await create_database(server_url)
    try:
        yield url
    finally:
        await drop_database(server_url, url)


@pytest.fixture
async def svc(own_db: str) -> AsyncIterator[Services]:
    settings = Settings(database_url=own_db)
    pool = await asyncpg.create_pool(own_db, min_size=1, max_size=6)
    async with pool.acquire() as conn:
        await migrate(conn, settings.service_schema)
    try:
        yield Services(settings=settings, store=Store(settings.service_schema), pool=pool)
    finally:
        await pool.close()


async def _left_behind(svc: Services) -> None:
    """The three indexes as an earlier version's `index install` left them: built, commented, analyzed."""
    statements = load_queries(LEFT_BEHIND, svc.store.schema)
    async with svc.pool.acquire() as conn:
        for index in invocation_index.INDEXES:
            await conn.execute(statements[index])
            name = invocation_index.full_name(svc.store, index)
            await conn.execute(f"COMMENT ON INDEX {name} IS '{invocation_index.VERSIONS[index]}'")
        await conn.execute("ANALYZE event, task")


async def _kagent_fork_indexes(svc: Services) -> int:
    async with svc.pool.acquire() as conn:
        count: int = await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'kagent_fork_%'")
        return count


async def test_install_is_refused_and_a_left_index_is_reported_and_removed(svc: Services, own_db: str) -> None:
    await seed(svc.pool, dialect="v1", turns=3)
    refused = cli(own_db, "index", "install")
    assert refused.returncode == 6, refused  # refused, as a 422
    assert "retired" in refused.stderr and "nothing was installed" in refused.stderr
    assert await _kagent_fork_indexes(svc) == 0
    assert ok_json(cli(own_db, "index", "status", "--json"))["state"] == "absent"

    await _left_behind(svc)
    left = ok_json(cli(own_db, "index", "status", "--json"))
    assert left["state"] == "installed"
    assert [i["name"] for i in left["indexes"]] == [
        "kagent_fork_event_invocation", "kagent_fork_event_time", "kagent_fork_task_invocations",
    ]  # fmt: skip
    text = cli(own_db, "index", "status").stdout
    assert "invocation index (retired): installed" in text and "kagent-fork index uninstall removes it" in text

    # An interrupted CREATE INDEX CONCURRENTLY of that version left an invalid index: reported, and removed too.
    async with svc.pool.acquire() as conn:
        await conn.execute("DROP INDEX kagent_fork_event_time")
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute("CREATE UNIQUE INDEX CONCURRENTLY kagent_fork_event_time ON event (session_id)")
        now = await invocation_index.status(svc.store, conn)
    assert now.state == "incomplete"
    assert {i.index: i.state for i in now.indexes}["event_time"] == "invalid"

    gone = cli(own_db, "index", "uninstall")
    assert gone.returncode == 0, gone.stderr
    assert "dropping (DROP INDEX CONCURRENTLY)" in gone.stderr
    assert ok_json(cli(own_db, "index", "status", "--json"))["state"] == "absent"
    assert await _kagent_fork_indexes(svc) == 0


async def test_readyz_and_the_start_say_an_index_was_left_behind(
    svc: Services, own_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(Settings(database_url=own_db), own_db)
    async with AsyncTestClient(app=app) as client:
        assert (await client.get("/readyz")).json()["data"]["invocation_index"]["state"] == "absent"
    assert "invocation index is retired" not in caplog.text
    await _left_behind(svc)
    with caplog.at_level(logging.WARNING, logger="kagent_fork"):
        async with AsyncTestClient(app=create_app(Settings(database_url=own_db), own_db)) as client:
            assert (await client.get("/readyz")).json()["data"]["invocation_index"]["state"] == "installed"
    assert "invocation index is retired" in caplog.text and "kagent_fork_task_invocations" in caplog.text


async def test_every_answer_is_the_same_with_an_index_left_behind(svc: Services) -> None:
    """PostgreSQL's planner may still read a left index for the queries it fits (a turn's first event by
    invocation id): every answer a boundary search decides is the same with it as without."""
    convs = [
        await seed(svc.pool, dialect="legacy", turns=4, tool_calls=True, approval_turn=1),
        await seed(svc.pool, dialect="v1", turns=5, tool_calls=True, running_last_turn=True),
        await seed(svc.pool, dialect="v1", turns=3, event_style="go", metadata_style="kagent"),
    ]
    without = {
        c.session_id: await reading.answers(svc, Caller(user_id=c.user_id), c.session_id, c.invocation_ids)
        for c in convs
    }
    await _left_behind(svc)
    for conv in convs:
        left = await reading.answers(svc, Caller(user_id=conv.user_id), conv.session_id, conv.invocation_ids)
        for key, answer in without[conv.session_id].items():
            assert left[key] == answer, key


# Rows kagent may store that no JSON reader of PostgreSQL accepts, or that are not what the service
# expects: none may fail kagent's write while a left index computes its expressions on them.
HOSTILE = {
    "not json": "this row is not JSON {",
    "empty": "",
    "array": "[1, 2, 3]",
    "string": '"e-not-an-object"',
    "null": "null",
    "nested too deep": "[" * 400_000 + "]" * 400_000,
    "nul escape": '{"invocation_id": "e-nul", "x": "\\u0000"}',
    "lone surrogate": '{"invocation_id": "e-sur", "x": "\\ud800"}',
    "numbers as ids": '{"invocation_id": 12, "metadata": {"adk_invocation_id": 12}}',
}


async def test_kagent_writes_never_fail_on_hostile_rows_while_an_index_is_left(svc: Services) -> None:
    await _left_behind(svc)
    user, session_id = new_user(), str(uuid.uuid4())
    big = json.dumps({"invocation_id": "e-big", "author": "user", "content": {"parts": [{"text": "x" * 30_000_000}]}})
    async with svc.pool.acquire() as conn:
        await conn.execute("INSERT INTO session (id, user_id, created_at, updated_at) VALUES ($1, $2, NOW(), NOW())",
                           session_id, user)  # fmt: skip
        for data in [*HOSTILE.values(), big]:
            await conn.execute(INSERT_EVENT, str(uuid.uuid4()), user, session_id, data)
            task_id = str(uuid.uuid4())
            await conn.execute(UPSERT_TASK, task_id, data, session_id, "1.0", user)
            await conn.execute(UPSERT_TASK, task_id, data, session_id, "1.0", user)  # the update path too
        written = await conn.fetchval("SELECT count(*) FROM event WHERE session_id = $1", session_id)
    assert written == len(HOSTILE) + 1
