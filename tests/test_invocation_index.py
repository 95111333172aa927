"""The optional invocation index (service/kagent/invocation_index.py): install, status, repair, uninstall; kagent's
writes never fail because of it; every boundary search answers the same with it as without, and uses it.

Each test works in a database of its own: the index changes kagent's tables for everyone on them."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest
from litestar.testing import AsyncTestClient

from bench.generate import SessionSpec, insert_session
from bench.kagent_writes import INSERT_EVENT, UPSERT_TASK
from service.app import create_app
from service.branches import transcript, turns
from service.config import Settings
from service.identity import Caller
from service.kagent import invocation_index
from service.kagent.migrate import migrate
from service.kagent.store import Store
from service.operations import forking, rewind
from service.schemas import ForkRequest, RewindRequest
from service.services import Services
from tests.conftest import create_database, drop_database
from tests.helpers import digest, new_user, seed, session_rows
from tests.test_cli import cli, ok_json


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


CANDIDATES = "kagent_fork.task_invocation_candidates(data)"


async def _set_index(svc: Services, wanted: bool) -> invocation_index.IndexStatus:
    async with svc.pool.acquire() as conn:
        await (invocation_index.install if wanted else invocation_index.uninstall)(svc.store, conn)
        return await invocation_index.refresh(svc.store, conn)


async def test_install_status_repair_uninstall(svc: Services, own_db: str) -> None:
    await seed(svc.pool, dialect="v1", turns=3)
    absent = ok_json(cli(own_db, "index", "status", "--json"))
    assert absent["state"] == "absent"
    assert {i["state"] for i in absent["indexes"]} == {"missing"}

    done = cli(own_db, "index", "install")
    assert done.returncode == 0, done.stderr
    assert "invocation index: installed" in done.stdout
    assert "building (CREATE INDEX CONCURRENTLY" in done.stderr
    installed = ok_json(cli(own_db, "index", "status", "--json"))
    assert installed["state"] == "installed"
    assert [i["name"] for i in installed["indexes"]] == [
        "kagent_fork_event_invocation", "kagent_fork_event_time", "kagent_fork_task_invocations",
    ]  # fmt: skip
    assert all(i["bytes"] > 0 for i in installed["indexes"])

    # An interrupted CREATE INDEX CONCURRENTLY leaves an invalid index behind: here a build that failed
    # half way (a unique index over duplicate values) under one of the service's names.
    async with svc.pool.acquire() as conn:
        await conn.execute("DROP INDEX kagent_fork_event_time")
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute("CREATE UNIQUE INDEX CONCURRENTLY kagent_fork_event_time ON event (session_id)")
        now = await invocation_index.refresh(svc.store, conn)
    assert now.state == "incomplete"
    assert {i.index: i.state for i in now.indexes}["event_time"] == "invalid"
    assert svc.store.index_use.event_invocation and not svc.store.index_use.event_time
    text = cli(own_db, "index", "status")
    assert "kagent_fork_event_time on event: invalid" in text.stdout
    assert "kagent-fork index install builds what is missing" in text.stdout

    # An index of another version (its comment) is outdated and rebuilt too: here the task index as
    # version 1 built it (over task_invocation_ids, migration 0006); the current event indexes are kept.
    async with svc.pool.acquire() as conn:
        await conn.execute("DROP INDEX kagent_fork_task_invocations")
        await conn.execute("CREATE INDEX kagent_fork_task_invocations ON task "
                           "USING gin (kagent_fork.task_invocation_ids(data)) WHERE deleted_at IS NULL")  # fmt: skip
        await conn.execute("COMMENT ON INDEX kagent_fork_task_invocations IS 'kagent-fork invocation index 1'")
        kept = await conn.fetchval("SELECT 'kagent_fork_event_invocation'::regclass::oid")
        now = await invocation_index.refresh(svc.store, conn)
    assert {i.index: i.state for i in now.indexes}["task_invocations"] == "outdated"
    assert not svc.store.index_use.task_invocations
    repaired = ok_json(cli(own_db, "index", "install", "--json"))
    assert repaired["state"] == "installed"
    async with svc.pool.acquire() as conn:
        definition = await conn.fetchval("SELECT pg_get_indexdef('kagent_fork_task_invocations'::regclass)")
        assert "task_invocation_candidates(data)" in definition
        assert "fastupdate=off" in definition  # no pending list for every search to read
        assert await conn.fetchval("SELECT 'kagent_fork_event_invocation'::regclass::oid") == kept
        assert (
            await conn.fetchval(
                "SELECT indisunique FROM pg_index WHERE indexrelid = 'kagent_fork_event_time'::regclass"
            )
            is False
        )

    gone = ok_json(cli(own_db, "index", "uninstall", "--json"))
    assert gone["state"] == "absent"
    async with svc.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'kagent_fork_%'") == 0


async def test_readyz_says_which_indexes_the_service_uses(svc: Services, own_db: str) -> None:
    app = create_app(Settings(database_url=own_db), own_db)
    async with AsyncTestClient(app=app) as client:
        first = (await client.get("/readyz")).json()["data"]
        assert first["invocation_index"]["state"] == "absent"
        await _set_index(svc, True)
        second = (await client.get("/readyz")).json()["data"]
        assert second["invocation_index"]["state"] == "installed"
        assert app.state.services.store.index_use.task_invocations


# Rows kagent may store that no JSON reader of PostgreSQL accepts, or that are not what the service
# expects: none may fail kagent's write once the index is there.
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


async def test_kagent_writes_never_fail_on_hostile_rows(svc: Services) -> None:
    await _set_index(svc, True)
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
        readable = await conn.fetch(f"SELECT data, {CANDIDATES} AS ids FROM task WHERE session_id = $1", session_id)
    by_data = {r["data"]: r["ids"] for r in readable}
    # What PostgreSQL cannot read is a candidate of every search ('' in the index); what it reads as
    # something that holds no invocation id key carries no id.
    for name in ("not json", "empty", "nested too deep", "nul escape"):
        assert by_data[HOSTILE[name]] == [""], name
    for name in ("array", "string", "null", "numbers as ids"):
        assert by_data[HOSTILE[name]] == [], name
    assert by_data[big] == []  # an event's shape, not a task's: no metadata


async def test_task_ids_match_the_service_reader(svc: Services) -> None:
    """The task index's candidates hold every id dialects.invocation_ids reads (the service confirms each
    candidate with its own reader, so more is harmless, less would lose a task), on every shape of task
    the fixtures hold (both dialects, both metadata prefixes, approvals, runtime events, running turns)."""
    from service.kagent import dialects

    convs = [
        await seed(svc.pool, dialect="legacy", turns=4, tool_calls=True, approval_turn=1),
        await seed(svc.pool, dialect="v1", turns=4, tool_calls=True, metadata_style="kagent", running_last_turn=True),
        await seed(svc.pool, dialect="v1", turns=3, event_style="go", runtime_events=True),
    ]
    checked = 0
    async with svc.pool.acquire() as conn:
        for conv in convs:
            for row in await conn.fetch(
                f"SELECT data, {CANDIDATES} AS ids FROM task WHERE session_id = $1", conv.session_id
            ):
                read = dialects.invocation_ids(dialects.decode(row["data"]))
                assert set(read) <= set(row["ids"])
                checked += 1
        # Variants of the metadata rules (adk_ first unless null, kagent_ else, strings only, every place)
        # and of the JSON (keys spelled with escapes, ids with escapes): what the reader reads, the
        # candidates hold; the candidates may hold more.
        for text, read, candidates in [
            (json.dumps({"metadata": {"adk_invocation_id": None, "kagent_invocation_id": "e-1"}}), ["e-1"], ["e-1"]),
            (json.dumps({"metadata": {"adk_invocation_id": "e-2", "kagent_invocation_id": "e-1"}}), ["e-2"],
             ["e-2", "e-1"]),
            (json.dumps({"metadata": {"adk_invocation_id": 5, "kagent_invocation_id": "e-1"}}), [], ["e-1"]),
            (json.dumps({"history": [{"metadata": {"kagent_invocation_id": "e-h"}}, 7, None]}), ["e-h"], ["e-h"]),
            (json.dumps({"status": {"message": {"metadata": {"adk_invocation_id": "e-s"}}}}), ["e-s"], ["e-s"]),
            (json.dumps({"artifacts": [{"metadata": {"adk_invocation_id": "e-a"}}], "history": "no"}), ["e-a"],
             ["e-a"]),
            (json.dumps({"metadata": {"args": {"adk_invocation_id": "e-nested"}}}), [], []),
            (json.dumps({"history": {"metadata": {"adk_invocation_id": "e-obj"}}}), [], ["e-obj"]),
            ('{"metadata": {"adk\\u005finvocation_id": "e-\\u0041"}}', ["e-A"], ["e-A"]),
        ]:  # fmt: skip
            assert dialects.invocation_ids(dialects.decode(text)) == read, text
            assert await conn.fetchval(f"SELECT {CANDIDATES.replace('data', '$1')}", text) == candidates
    assert checked == sum(len(c.invocation_ids) for c in convs)


def _stable(value: Any) -> Any:
    """An answer without what differs between two runs of the same operation (new ids, times)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in {"id", "created_at", "updated_at", "deleted_at"}}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


async def _answers(svc: Services, caller: Caller, session_id: str, invocations: list[str]) -> dict[str, Any]:
    """Everything a boundary search decides, for every turn of one session: fork and rewind dry runs, a
    real fork's rows, what-if's source turn, the transcript before the turn, the turn listing's pages."""
    out: dict[str, Any] = {}
    for inv in [*invocations, "e-not-a-turn"]:
        plan = await forking.fork(svc, caller, session_id, ForkRequest(rewind_before_invocation_id=inv, dry_run=True))
        out[f"fork plan {inv}"] = _stable(msgspec.to_builtins(plan.data))
        try:
            undo = await rewind.rewind(
                svc, caller, session_id, RewindRequest(rewind_before_invocation_id=inv, dry_run=True)
            )
            out[f"rewind plan {inv}"] = _stable(msgspec.to_builtins(undo))
        except Exception as exc:  # a refusal is an answer too
            out[f"rewind plan {inv}"] = repr(exc)
        try:
            text = await transcript.read(svc, caller, session_id, before=inv)
            out[f"transcript before {inv}"] = _stable(msgspec.to_builtins(text))
        except Exception as exc:
            out[f"transcript before {inv}"] = repr(exc)
    middle = invocations[len(invocations) // 2]
    forked = await forking.fork(svc, caller, session_id, ForkRequest(rewind_before_invocation_id=middle))
    data = msgspec.to_builtins(forked.data)
    out["fork"] = _stable(data["fork"])
    rows = await session_rows(svc.pool, data["id"], caller.user_id)
    out["fork rows"] = {table: len(found) for table, found in rows.items()}
    out["fork event data"] = digest(sorted(r["data"] for r in rows["events"]))
    for limit in (1, 2, 100):
        out[f"pages of {limit}"] = await _pages(svc, caller, session_id, limit)
    return out


async def test_every_boundary_search_answers_the_same_with_the_index(svc: Services) -> None:
    convs = [
        await seed(svc.pool, dialect="legacy", turns=4, tool_calls=True, approval_turn=1),
        await seed(svc.pool, dialect="v1", turns=5, tool_calls=True, running_last_turn=True),
        await seed(svc.pool, dialect="v1", turns=3, event_style="go", metadata_style="kagent"),
        await seed(svc.pool, dialect="legacy", turns=3, runtime_events=True),
    ]
    without = {}
    for conv in convs:
        caller = Caller(user_id=conv.user_id)
        without[conv.session_id] = await _answers(svc, caller, conv.session_id, conv.invocation_ids)
    assert (await _set_index(svc, True)).state == "installed"
    for conv in convs:
        caller = Caller(user_id=conv.user_id)
        indexed = await _answers(svc, caller, conv.session_id, conv.invocation_ids)
        for key, answer in without[conv.session_id].items():
            assert indexed[key] == answer, key


async def _pages(svc: Services, caller: Caller, session_id: str, limit: int) -> list[Any]:
    pages: list[Any] = []
    after = None
    while True:
        page = await turns.invocations(svc, caller, session_id, limit=limit, after=after)
        pages.append([*msgspec.to_builtins(page.items), page.last])
        if page.last or not page.items:
            return pages
        after = page.items[-1].invocation_id


async def test_the_listing_pages_of_a_long_session_are_the_same_with_the_index(svc: Services) -> None:
    """Turns of 10 events each, so that a page's walks end inside turns and are sized from what they
    found; pages that end on the session's last turn, and one past it."""
    async with svc.pool.acquire() as conn:
        s = await insert_session(conn, SessionSpec(turns=120))
    caller = Caller(user_id=s.user_id)
    without = {limit: await _pages(svc, caller, s.session_id, limit) for limit in (7, 40, 120, 200)}
    assert len(without[7]) == 18 and len(without[200]) == 1
    await _set_index(svc, True)
    for limit, pages in without.items():
        assert await _pages(svc, caller, s.session_id, limit) == pages, limit


async def test_the_searches_use_the_index_on_a_large_session(svc: Services) -> None:
    """On a session large enough for the planner to care (2,000 events, 200 tasks, among other users'
    chats), each search's plan names the service's index: none reads the whole session."""
    async with svc.pool.acquire() as conn:
        s = await insert_session(conn, SessionSpec(turns=200))
        for i in range(30):
            await insert_session(conn, SessionSpec(turns=2, user_id=f"other{i}@example.com", seed=i))
    await _set_index(svc, True)
    q = svc.store.q
    async with svc.pool.acquire() as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")  # as a prepared statement's plan
        for query, args in [
            ("boundary_event", [s.session_id, s.user_id, s.invocation_ids[150], True]),
            ("tasks_carrying_any", [s.session_id, s.user_id, [s.invocation_ids[150]], None, None]),
        ]:
            stmt = await conn.prepare(q[query])
            plan = json.dumps(await stmt.explain(*args))
            index = "kagent_fork_event_invocation" if query == "boundary_event" else "kagent_fork_task_invocations"
            assert index in plan, (query, plan)
