"""The turn map (service/kagent/turn_map.py): every answer a boundary search, a listing page or a dry run
gives is the same read from the map as read from kagent's rows; and a map that was deleted, corrupted or
left behind by kagent's own writes (new events, task upserts, soft deletes) is found out by its guard and
made true again, so that the answers stay exact. The service's rewinds and undos keep it true.

Each test works in a database of its own, with the map made for every session (turn_map_min_tasks = 0)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from bench.generate import SessionSpec, insert_session
from bench.kagent_writes import INSERT_EVENT, UPSERT_TASK
from service.config import Settings
from service.errors import Unprocessable
from service.identity import Caller
from service.kagent import turn_map
from service.kagent.migrate import migrate
from service.kagent.store import Store
from service.operations import forking, rewind
from service.schemas import ForkRequest, RewindRequest
from service.services import Services
from tests.conftest import create_database, drop_database
from tests.helpers import new_user, seed, table_fingerprint
from tests.support import answers as reading
from tests.support.conversations import build_conversation, insert_conversation
from tests.test_server_copy import ODDITIES, _oddity, copies, same_fork_both_ways


@pytest.fixture
async def own_db(server_url: str) -> AsyncIterator[str]:
    url = await create_database(server_url)
    try:
        yield url
    finally:
        await drop_database(server_url, url)


@pytest.fixture
async def svc(own_db: str) -> AsyncIterator[Services]:
    settings = Settings(database_url=own_db, turn_map_fork_copy=True)  # the forks' map copied (TURN_MAP_FORK_COPY)
    pool = await asyncpg.create_pool(own_db, min_size=1, max_size=6)
    async with pool.acquire() as conn:
        await migrate(conn, settings.service_schema)
    store = Store(settings.service_schema)
    store.turn_map_min_tasks = 0
    store.turn_map_background = False  # the map made inside the operation that asks (test_first_touch: after)
    try:
        yield Services(settings=settings, store=store, pool=pool)
    finally:
        await pool.close()


async def _exact(svc: Services, caller: Caller, session_id: str, invocations: list[str]) -> dict[str, Any]:
    """The answers read from kagent's rows, the map left alone."""
    svc.store.turn_map_min_tasks = None
    try:
        return await reading.answers(svc, caller, session_id, invocations)
    finally:
        svc.store.turn_map_min_tasks = 0


async def _mapped(svc: Services, caller: Caller, session_id: str, invocations: list[str]) -> dict[str, Any]:
    """The answers with the map, which must be trusted after the first of them made it true."""
    answers = await reading.answers(svc, caller, session_id, invocations)
    async with svc.pool.acquire() as conn:
        assert await turn_map.usable(svc.store, conn, session_id, caller.user_id)
    return answers


def _same(mapped: dict[str, Any], exact: dict[str, Any]) -> None:
    assert mapped.keys() == exact.keys()
    for key, answer in exact.items():
        assert mapped[key] == answer, key


async def _state(svc: Services, session_id: str, user_id: str) -> Any:
    async with svc.pool.acquire() as conn:
        return await svc.store.turn_maps.state(conn, session_id, user_id)


async def test_every_answer_is_the_same_read_from_the_map(svc: Services) -> None:
    convs = [
        await seed(svc.pool, dialect="legacy", turns=4, tool_calls=True, approval_turn=1),
        await seed(svc.pool, dialect="v1", turns=5, tool_calls=True, running_last_turn=True),
        await seed(svc.pool, dialect="v1", turns=3, event_style="go", metadata_style="kagent"),
        await seed(svc.pool, dialect="legacy", turns=3, runtime_events=True),
    ]
    for conv in convs:
        caller = Caller(user_id=conv.user_id)
        exact = await _exact(svc, caller, conv.session_id, conv.invocation_ids)
        assert await _state(svc, conv.session_id, conv.user_id) is None  # the exact answers made no map
        _same(await _mapped(svc, caller, conv.session_id, conv.invocation_ids), exact)


async def test_a_long_session_lists_and_counts_the_same_from_the_map(svc: Services) -> None:
    async with svc.pool.acquire() as conn:
        s = await insert_session(conn, SessionSpec(turns=120))
    caller = Caller(user_id=s.user_id)
    svc.store.turn_map_min_tasks = None
    exact = {limit: await reading.pages(svc, caller, s.session_id, limit) for limit in (7, 40, 120, 200)}
    svc.store.turn_map_min_tasks = 0
    for limit, pages in exact.items():
        assert await reading.pages(svc, caller, s.session_id, limit) == pages, limit
    state = await _state(svc, s.session_id, s.user_id)
    assert (state.events, state.runs) == (1200, 120)


async def _corruptions(conn: asyncpg.Connection, schema: str, session_id: str) -> list[str]:
    return [
        f"DELETE FROM {schema}.turn_map WHERE session_id = '{session_id}'",
        f"DELETE FROM {schema}.turn_map_run WHERE session_id = '{session_id}'"
        f" AND seq = (SELECT max(seq) FROM {schema}.turn_map_run WHERE session_id = '{session_id}')",
        f"UPDATE {schema}.turn_map SET events = events + 1 WHERE session_id = '{session_id}'",
        f"UPDATE {schema}.turn_map SET version = 0 WHERE session_id = '{session_id}'",
        f"DELETE FROM {schema}.turn_map_run WHERE session_id = '{session_id}'",
    ]


async def test_a_deleted_or_corrupted_map_is_rebuilt(svc: Services) -> None:
    conv = await seed(svc.pool, dialect="v1", turns=4, tool_calls=True)
    caller = Caller(user_id=conv.user_id)
    exact = await _exact(svc, caller, conv.session_id, conv.invocation_ids)
    schema = svc.store.schema
    async with svc.pool.acquire() as conn:
        corruptions = await _corruptions(conn, schema, conv.session_id)
    for corruption in corruptions:
        await _mapped(svc, caller, conv.session_id, conv.invocation_ids)  # a true map
        async with svc.pool.acquire() as conn:
            await conn.execute(corruption)
            assert not await turn_map.usable(svc.store, conn, conv.session_id, conv.user_id), corruption
        _same(await _mapped(svc, caller, conv.session_id, conv.invocation_ids), exact)


def _event(invocation_id: str, author: str, text: str) -> str:
    return json.dumps({
        "invocation_id": invocation_id, "author": author, "id": str(uuid.uuid4()), "timestamp": 1.0,
        "content": {"role": "user" if author == "user" else "model", "parts": [{"text": text}]},
    })  # fmt: skip


async def test_kagent_writes_left_behind_are_found_and_mapped(svc: Services) -> None:
    """kagent appends a turn (InsertEvent, UpsertTask twice: working, then completed), soft-deletes an
    event and a task of its own: each time the answers read with the map are the exact ones."""
    conv = await seed(svc.pool, dialect="v1", turns=3, tool_calls=True)
    caller = Caller(user_id=conv.user_id)
    sid, owner = conv.session_id, conv.user_id
    await _mapped(svc, caller, sid, conv.invocation_ids)
    new_turn = "e-" + str(uuid.uuid4())
    task_id = str(uuid.uuid4())

    def task(state: str) -> str:
        return json.dumps({
            "id": task_id, "contextId": sid, "status": {"state": state},
            "history": [{"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "one more"}],
                         "taskId": task_id, "contextId": sid}],
            "metadata": {"adk_invocation_id": new_turn},
        })  # fmt: skip

    async with svc.pool.acquire() as conn:
        writes = [
            (UPSERT_TASK, (task_id, task("TASK_STATE_WORKING"), sid, "1.0", owner)),
            (INSERT_EVENT, (str(uuid.uuid4()), owner, sid, _event(new_turn, "user", "one more"))),
            (INSERT_EVENT, (str(uuid.uuid4()), owner, sid, _event(new_turn, "k8s_agent", "done"))),
            (UPSERT_TASK, (task_id, task("TASK_STATE_COMPLETED"), sid, "1.0", owner)),
            # kagent's SoftDeleteEvent and SoftDeleteTask (neither moves session.updated_at)
            ("UPDATE event SET deleted_at = NOW() WHERE id = (SELECT id FROM event WHERE session_id = $1"
             " AND deleted_at IS NULL ORDER BY created_at DESC LIMIT 1) AND deleted_at IS NULL", (sid,)),
            ("UPDATE task SET deleted_at = NOW() WHERE id = $1 AND deleted_at IS NULL", (task_id,)),
        ]  # fmt: skip
    invocations = [*conv.invocation_ids, new_turn]
    for statement, args in writes:
        async with svc.pool.acquire() as conn:
            await conn.execute(statement, *args)
            assert not await turn_map.usable(svc.store, conn, sid, owner), statement
        exact = await _exact(svc, caller, sid, invocations)
        _same(await _mapped(svc, caller, sid, invocations), exact)


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_rewinds_and_undos_keep_the_map_true(svc: Services, dialect: str) -> None:
    """Two rewinds, then their undos newest first: after each, the map is still trusted (cut by the rewind,
    extended by the undo, never rebuilt) and every answer is the exact one."""
    conv = await seed(svc.pool, dialect=dialect, turns=6, tool_calls=True)
    caller = Caller(user_id=conv.user_id)
    sid, invocations = conv.session_id, conv.invocation_ids
    await _mapped(svc, caller, sid, invocations)
    done = []
    for keep in (4, 2):
        answer = await rewind.rewind(svc, caller, sid, RewindRequest(rewind_before_invocation_id=invocations[keep]))
        assert isinstance(answer, rewind.RewindResult) and answer.rewind.id is not None
        done.append(answer.rewind.id)
        async with svc.pool.acquire() as conn:
            assert await turn_map.usable(svc.store, conn, sid, conv.user_id)  # cut by the rewind, not rebuilt
        _same(await _mapped(svc, caller, sid, invocations[:keep]), await _exact(svc, caller, sid, invocations[:keep]))
    for rewind_id, keep in zip(reversed(done), (4, 6), strict=True):
        await rewind.undo(svc, caller, sid, rewind_id)
        async with svc.pool.acquire() as conn:
            assert await turn_map.usable(svc.store, conn, sid, conv.user_id)  # extended by the undo
        _same(await _mapped(svc, caller, sid, invocations[:keep]), await _exact(svc, caller, sid, invocations[:keep]))


@pytest.mark.parametrize("metadata_style", ["sample", "kagent"])
async def test_a_mapped_large_fork_is_copied_by_postgresql_alone_and_writes_what_python_writes(
    svc: Services, monkeypatch: pytest.MonkeyPatch, metadata_style: str
) -> None:
    """The map proves every kept task exact for PostgreSQL's text copy: the fork is the two INSERT ... SELECT
    (path "map"), and writes the rows the Python rewrite writes."""
    conv = await seed(svc.pool, dialect="v1", turns=6, tool_calls=True, metadata_style=metadata_style)
    path, _ = await same_fork_both_ways(svc, svc.pool, monkeypatch, conv, task_layout="per_task")
    assert path == "map"


@pytest.mark.parametrize("oddity", ODDITIES)
async def test_tasks_the_map_finds_the_text_copy_would_get_wrong_are_rewritten_at_once(
    svc: Services, monkeypatch: pytest.MonkeyPatch, oddity: str
) -> None:
    """A kept task the text copy would get wrong: the map says so, and the fork is written by the Python
    rewrite without trying PostgreSQL's copy first (path "python", one attempt)."""
    conv = build_conversation(dialect="v1", turns=5, tool_calls=True, user_id=new_user())
    _oddity(oddity, conv)
    async with svc.pool.acquire() as conn:
        await insert_conversation(conn, conv, schema_version_ok=False)
    server_tries = copies("server")
    path, rows = await same_fork_both_ways(svc, svc.pool, monkeypatch, conv)
    assert path == "python" and copies("server") == server_tries
    assert rows[1]["data"]["id"] == "<own id>"


async def _spans(svc: Services, caller: Caller, session_id: str, invocations: list[str]) -> dict[str, Any]:
    """A what-if's and an experiment's span (replay.span.span_of) of every turn, "all" turns: what each answers."""
    from service.agents.replay import span as spans
    from service.agents.replay.terms import Boundary
    from service.identity import settle

    out: dict[str, Any] = {}
    for inv in invocations:
        async with svc.pool.acquire() as conn:
            try:
                boundary = Boundary(invocation_id=inv, task_id=None)
                seen = await settle(svc, conn, caller, session_id)
                span = await spans.span_of(svc, conn, seen, boundary, "all")
            except Exception as exc:  # the refusal itself must be the same
                out[inv] = (type(exc).__name__, str(exc))
                continue
        turns = [(t.invocation_id, t.message, t.started_at) for t in span.turns]
        out[inv] = (turns, span.tokens, span.position, span.dialect)
    return out


async def test_a_whatif_span_is_the_same_read_from_the_map(svc: Services) -> None:
    """The cost gate's tokens, the turns re-asked and the turn's number: the same with and without the map."""
    convs = [
        await seed(svc.pool, dialect="legacy", turns=4, tool_calls=True, approval_turn=1),
        await seed(svc.pool, dialect="v1", turns=5, tool_calls=True, running_last_turn=True),
        await seed(svc.pool, dialect="legacy", turns=3, runtime_events=True),
    ]
    for conv in convs:
        caller = Caller(user_id=conv.user_id)
        svc.store.turn_map_min_tasks = None
        exact = await _spans(svc, caller, conv.session_id, conv.invocation_ids)
        svc.store.turn_map_min_tasks = 0
        exact_reads: list[str] = []
        event_turns = svc.store.events.event_turns

        async def counted(*args: Any, reads: list[str] = exact_reads, read: Any = event_turns, **kwargs: Any) -> Any:
            reads.append(args[1])
            return await read(*args, **kwargs)

        svc.store.events.event_turns = counted  # type: ignore[method-assign]
        try:
            mapped = await _spans(svc, caller, conv.session_id, conv.invocation_ids)
        finally:
            del svc.store.events.event_turns
        assert exact_reads == [], "every span was read from the map"
        async with svc.pool.acquire() as conn:
            assert await turn_map.usable(svc.store, conn, conv.session_id, conv.user_id)
        assert any(isinstance(answer[0], list) and len(answer[0]) > 1 for answer in exact.values())
        _same(mapped, exact)


async def _reltuples(conn: asyncpg.Connection, schema: str) -> float:
    value: float = await conn.fetchval(
        "SELECT reltuples FROM pg_class WHERE oid = $1::regclass", f"{schema}.turn_map_run"
    )
    return value


async def test_a_new_map_is_read_with_statistics_that_describe_it(svc: Services) -> None:
    """The first map built in a database gathers the map tables' planner statistics (read with those of
    empty tables, the rewind's cut would scan every run instead of probing turn_map_run_first); a map
    much smaller than what they describe leaves them as they are."""
    schema = svc.settings.service_schema
    async with svc.pool.acquire() as conn:
        big = await insert_session(conn, SessionSpec(turns=300))
        small = await insert_session(conn, SessionSpec(turns=20))
        assert await _reltuples(conn, schema) < 0  # never gathered
        assert await turn_map.prepare(svc.store, conn, big.session_id, big.user_id)
        gathered = await _reltuples(conn, schema)
        assert gathered >= 300  # one run a turn in these sessions
        assert await turn_map.prepare(svc.store, conn, small.session_id, small.user_id)
        assert await _reltuples(conn, schema) == gathered


async def _kagent_table_shape(conn: asyncpg.Connection) -> dict[str, list[str]]:
    """Everything on kagent's tables that a write pays for: their indexes, triggers, rules and constraints."""
    return {
        "indexes": [r[0] for r in await conn.fetch(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename IN ('event', 'task', 'session') "
            "ORDER BY indexdef")],
        "triggers": [r[0] for r in await conn.fetch(
            "SELECT tgname FROM pg_trigger WHERE tgrelid IN ('event'::regclass, 'task'::regclass, 'session'::regclass) "
            "ORDER BY tgname")],
        "rules": [r[0] for r in await conn.fetch(
            "SELECT rulename FROM pg_rules WHERE tablename IN ('event', 'task', 'session') ORDER BY rulename")],
        "constraints": [r[0] for r in await conn.fetch(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid IN ('event'::regclass, 'task'::regclass, 'session'::regclass) ORDER BY 1")],
    }  # fmt: skip


async def test_nothing_is_added_to_kagent_tables(server_url: str) -> None:
    """kagent's write path stays as kagent made it: the service's migrations, a turn map built, kept through a
    rewind and its undo, and a fork leave kagent's tables with exactly the indexes, triggers, rules and
    constraints its own schema gives them (issue 23: 1.00x on kagent's writes, by construction)."""
    url = await create_database(server_url)
    try:
        conn = await asyncpg.connect(url)
        try:
            from service.embedded.server import install_kagent_schema

            await install_kagent_schema(conn)
            kagent_only = await _kagent_table_shape(conn)
            assert kagent_only["indexes"]  # kagent's own: the test reads something
            settings = Settings(database_url=url)
            await migrate(conn, settings.service_schema)
            pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
            try:
                store = Store(settings.service_schema)
                store.turn_map_min_tasks = 0
                store.turn_map_background = False
                svc = Services(settings=settings, store=store, pool=pool)
                conv = await seed(pool, dialect="v1", turns=4, tool_calls=True)
                caller = Caller(user_id=conv.user_id)
                await reading.answers(svc, caller, conv.session_id, conv.invocation_ids)  # the map made and read
                done = await rewind.rewind(
                    svc, caller, conv.session_id, RewindRequest(rewind_before_invocation_id=conv.invocation_ids[2])
                )
                assert isinstance(done, rewind.RewindResult) and done.rewind.id is not None
                await rewind.undo(svc, caller, conv.session_id, done.rewind.id)
                async with pool.acquire() as c:
                    assert await turn_map.usable(store, c, conv.session_id, conv.user_id)
            finally:
                await pool.close()
            assert await _kagent_table_shape(conn) == kagent_only
        finally:
            await conn.close()
    finally:
        await drop_database(server_url, url)


async def _map_rows(svc: Services, session_id: str, user_id: str) -> dict[str, Any]:
    """The session's map as rows: its claims (but built_at), its runs, tasks and turns in key order. The
    runs' event ids are left out but for the last run's (a fork's map keeps its source's: docs/turn-map.md,
    "A fork"), and so are the turns' first event ids; `_consistent` checks those within the map."""
    schema = svc.store.schema
    where = "WHERE session_id = $1 AND user_id = $2"
    async with svc.pool.acquire() as conn:
        state = await conn.fetchrow(f"SELECT * FROM {schema}.turn_map {where}", session_id, user_id)
        runs = await conn.fetch(f"SELECT * FROM {schema}.turn_map_run {where} ORDER BY seq", session_id, user_id)
        tasks = await conn.fetch(f"SELECT * FROM {schema}.turn_map_task {where} ORDER BY task_id", session_id, user_id)
        turns = await conn.fetch(
            f"SELECT * FROM {schema}.turn_map_turn {where} ORDER BY invocation_id", session_id, user_id
        )
    assert state is not None
    last = len(runs)
    return {
        "state": {k: v for k, v in dict(state).items() if k != "built_at"},
        "runs": [
            {k: v for k, v in dict(r).items() if r["seq"] == last or k not in ("first_id", "last_id")} for r in runs
        ],
        "tasks": [dict(r) for r in tasks],
        "turns": [{k: v for k, v in dict(r).items() if k != "event_first_id"} for r in turns],
    }


async def _consistent(svc: Services, session_id: str, user_id: str) -> list[str]:
    """Every turn's first event is the first event of one of its runs (what map_opening joins on); the
    runs' first event ids (all but the last run's may be the source's)."""
    schema = svc.store.schema
    async with svc.pool.acquire() as conn:
        unmatched = await conn.fetchval(
            f"""SELECT count(*) FROM {schema}.turn_map_turn AS t
                WHERE t.session_id = $1 AND t.user_id = $2 AND t.event_first_id IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM {schema}.turn_map_run AS r
                    WHERE r.session_id = t.session_id AND r.user_id = t.user_id AND r.invocation_id = t.invocation_id
                      AND (r.first_at, r.first_id) = (t.event_first_at, t.event_first_id))""",
            session_id,
            user_id,
        )
        ids = await conn.fetch(
            f"SELECT first_id FROM {schema}.turn_map_run WHERE session_id = $1 AND user_id = $2 ORDER BY seq",
            session_id,
            user_id,
        )
    assert unmatched == 0
    return [r["first_id"] for r in ids]


async def _event_ids(svc: Services, session_id: str, user_id: str) -> set[str]:
    async with svc.pool.acquire() as conn:
        rows = await conn.fetch("SELECT id FROM event WHERE session_id = $1 AND user_id = $2", session_id, user_id)
    return {r["id"] for r in rows}


async def _rebuilt(svc: Services, session_id: str, user_id: str) -> dict[str, Any]:
    """The map a rebuild makes of the session now (the one it has dropped first)."""
    async with svc.pool.acquire() as conn:
        async with conn.transaction():
            await svc.store.turn_maps.forget(conn, session_id, user_id, rows=True)
        assert await turn_map.prepare(svc.store, conn, session_id, user_id)
    return await _map_rows(svc, session_id, user_id)


async def _fork_of(svc: Services, caller: Caller, conv: Any, keep: int, by: str, **req: Any) -> str:
    turn = conv.turns[keep]
    named = (
        {"rewind_before_task_id": turn.task_id} if by == "task" else {"rewind_before_invocation_id": turn.invocation_id}
    )
    outcome = await forking.fork(svc, caller, conv.session_id, ForkRequest(**named, **req))
    assert outcome.session_id is not None
    return outcome.session_id


async def _append_turn(svc: Services, session_id: str, owner: str) -> str:
    """kagent writes a turn to the session: its task upserted working, two events, the task completed."""
    new_turn = "e-" + str(uuid.uuid4())
    task_id = str(uuid.uuid4())

    def task(state: str) -> str:
        return json.dumps({
            "id": task_id, "contextId": session_id, "status": {"state": state},
            "history": [{"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "one more"}],
                         "taskId": task_id, "contextId": session_id}],
            "metadata": {"adk_invocation_id": new_turn},
        })  # fmt: skip

    async with svc.pool.acquire() as conn:
        await conn.execute(UPSERT_TASK, task_id, task("TASK_STATE_WORKING"), session_id, "1.0", owner)
        await conn.execute(INSERT_EVENT, str(uuid.uuid4()), owner, session_id, _event(new_turn, "user", "one more"))
        await conn.execute(INSERT_EVENT, str(uuid.uuid4()), owner, session_id, _event(new_turn, "k8s_agent", "done"))
        await conn.execute(UPSERT_TASK, task_id, task("TASK_STATE_COMPLETED"), session_id, "1.0", owner)
    return new_turn


@pytest.mark.parametrize(
    ("dialect", "by"), [("v1", "invocation"), ("v1", "task"), ("legacy", "invocation"), ("legacy", "task")]
)
async def test_a_fork_is_given_its_sources_map_cut_at_the_boundary(svc: Services, dialect: str, by: str) -> None:
    """A per_task fork by the owner of a mapped session: its map, trusted as soon as the fork commits, is the
    map a rebuild of the fork makes (but for run ids only the map compares), every answer read with it is
    exact, and kagent's writes to the fork extend it (not a rebuild) exactly."""
    # Legacy with kagent 0.10.x's runtime events: a header_update run before every turn, one invocation
    # whose rows lie on both sides of every cut (its turn is made again for the fork).
    conv = await seed(svc.pool, dialect=dialect, turns=6, tool_calls=True, runtime_events=dialect == "legacy")
    caller = Caller(user_id=conv.user_id)
    owner, keep = conv.user_id, 4
    await _mapped(svc, caller, conv.session_id, conv.invocation_ids)
    fork_id = await _fork_of(svc, caller, conv, keep, by, task_layout="per_task")
    async with svc.pool.acquire() as conn:
        assert await turn_map.usable(svc.store, conn, fork_id, owner)  # copied with the fork, no rebuild
    copied = await _map_rows(svc, fork_id, owner)
    assert ("header_update" in {t["invocation_id"] for t in copied["turns"]}) == (dialect == "legacy")
    assert copied["state"]["events"] == len(await _event_ids(svc, fork_id, owner)) > 0
    source_ids = await _consistent(svc, fork_id, owner)
    assert source_ids[-1] in await _event_ids(svc, fork_id, owner)  # the last run's: the fork's own row
    assert set(source_ids[:-1]) <= await _event_ids(svc, conv.session_id, owner)  # the others: the source's
    kept = conv.invocation_ids[:keep]
    _same(await _mapped(svc, caller, fork_id, kept), await _exact(svc, caller, fork_id, kept))
    assert copied == await _rebuilt(svc, fork_id, owner)

    # kagent writes to a fork whose map is the copy: extended from its last run, exactly.
    fork_id = await _fork_of(svc, caller, conv, keep, by, task_layout="per_task")
    new_turn = await _append_turn(svc, fork_id, owner)
    async with svc.pool.acquire() as conn:
        assert not await turn_map.usable(svc.store, conn, fork_id, owner)
        assert await turn_map.prepare(svc.store, conn, fork_id, owner)
    extended = await _map_rows(svc, fork_id, owner)
    first_ids = await _consistent(svc, fork_id, owner)
    assert first_ids[0] in await _event_ids(svc, conv.session_id, owner)  # extended, not rebuilt
    invocations = [*kept, new_turn]
    _same(await _mapped(svc, caller, fork_id, invocations), await _exact(svc, caller, fork_id, invocations))
    assert extended == await _rebuilt(svc, fork_id, owner)


async def _unmapped_fork_answers_exactly(svc: Services, caller: Caller, conv: Any, fork_id: str, keep: int) -> None:
    async with svc.pool.acquire() as conn:
        assert await _state(svc, fork_id, caller.user_id) is None
        assert not await turn_map.usable(svc.store, conn, fork_id, caller.user_id)
    kept = conv.invocation_ids[:keep]
    _same(await _mapped(svc, caller, fork_id, kept), await _exact(svc, caller, fork_id, kept))


async def test_with_the_copy_off_a_fork_is_mapped_on_its_first_ask(svc: Services) -> None:
    """TURN_MAP_FORK_COPY off (the default): the same per_task fork by the owner of a mapped session writes no map
    row, and its first ask maps it; every answer is exact."""
    off = dataclasses.replace(svc, settings=dataclasses.replace(svc.settings, turn_map_fork_copy=False))
    conv = await seed(off.pool, dialect="v1", turns=5, tool_calls=True)
    caller = Caller(user_id=conv.user_id)
    await _mapped(off, caller, conv.session_id, conv.invocation_ids)
    fork_id = await _fork_of(off, caller, conv, 3, "invocation", task_layout="per_task")
    await _unmapped_fork_answers_exactly(off, caller, conv, fork_id, 3)
    async with off.pool.acquire() as conn:
        assert await turn_map.usable(off.store, conn, fork_id, conv.user_id)  # mapped by that first ask


async def test_a_fork_the_map_cannot_be_cut_for_is_left_unmapped_and_answers_exactly(svc: Services) -> None:
    """Two kept events at one instant (the fork's new ids would order them), a merged fork (its task is the
    service's own), a share visitor's fork (the tasks are rewritten in Python): no map is copied, the fork
    is mapped on its first ask and answers exactly."""
    conv = await seed(svc.pool, dialect="v1", turns=5, tool_calls=True)
    caller = Caller(user_id=conv.user_id)
    async with svc.pool.acquire() as conn:
        await conn.execute(
            "UPDATE event SET created_at = (SELECT min(created_at) FROM event WHERE session_id = $1)"
            " WHERE id = (SELECT id FROM event WHERE session_id = $1 ORDER BY created_at, id OFFSET 1 LIMIT 1)",
            conv.session_id,
        )
    await _mapped(svc, caller, conv.session_id, conv.invocation_ids)
    fork_id = await _fork_of(svc, caller, conv, 3, "invocation")
    await _unmapped_fork_answers_exactly(svc, caller, conv, fork_id, 3)

    legacy = await seed(svc.pool, dialect="legacy", turns=5, tool_calls=True)
    caller = Caller(user_id=legacy.user_id)
    await _mapped(svc, caller, legacy.session_id, legacy.invocation_ids)
    fork_id = await _fork_of(svc, caller, legacy, 3, "invocation", task_layout="merged")
    await _unmapped_fork_answers_exactly(svc, caller, legacy, fork_id, 3)

    conv = await seed(svc.pool, dialect="v1", turns=5, tool_calls=True)
    token = f"t-{conv.session_id}"
    async with svc.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO session_share (token, session_id, user_id, read_only) VALUES ($1, $2, $3, true)",
            token, conv.session_id, conv.user_id,
        )  # fmt: skip
    await _mapped(svc, Caller(user_id=conv.user_id), conv.session_id, conv.invocation_ids)
    visitor = Caller(user_id=new_user(), share_token=token)
    fork_id = await _fork_of(svc, visitor, conv, 3, "invocation")
    await _unmapped_fork_answers_exactly(svc, Caller(user_id=visitor.user_id), conv, fork_id, 3)


async def test_a_mapped_fork_over_the_event_cap_writes_nothing(own_db: str) -> None:
    """MAX_FORK_EVENTS holds for a fork given its map: the 422 rolls back its rows and its map's."""
    settings = Settings(database_url=own_db, max_fork_events=10, turn_map_fork_copy=True)
    pool = await asyncpg.create_pool(own_db, min_size=1, max_size=4)
    try:
        async with pool.acquire() as conn:
            await migrate(conn, settings.service_schema)
        store = Store(settings.service_schema, max_fork_events=10)
        store.turn_map_min_tasks = 0
        store.turn_map_background = False
        svc = Services(settings=settings, store=store, pool=pool)
        conv = await seed(pool, dialect="v1", turns=6, tool_calls=True)
        caller = Caller(user_id=conv.user_id)
        async with pool.acquire() as conn:
            assert await turn_map.prepare(store, conn, conv.session_id, conv.user_id)
        before = await table_fingerprint(pool)
        copies: list[int] = []
        copy = store.turn_maps.forks.copy_events_mapping

        async def counted(*args: Any, **kwargs: Any) -> Any:
            copies.append(1)
            return await copy(*args, **kwargs)

        store.turn_maps.forks.copy_events_mapping = counted  # type: ignore[method-assign]
        with pytest.raises(Unprocessable, match="more than 10 events"):
            await _fork_of(svc, caller, conv, 4, "invocation", task_layout="per_task")
        assert copies == [1]  # the fork that copies the map
        assert await table_fingerprint(pool) == before
        async with pool.acquire() as conn:
            schema = settings.service_schema
            assert await conn.fetchval(f"SELECT count(*) FROM {schema}.turn_map") == 1  # the source's only
    finally:
        await pool.close()


@pytest.mark.parametrize("dialect", ["v1", "legacy"])
async def test_a_rewound_fork_with_a_copied_map_answers_exactly_after_kagent_writes(
    svc: Services, dialect: str
) -> None:
    """A rewind of the fork cuts its copied map (its last run now one whose ids are the source's): trusted
    and exact; then kagent writes a turn, and the map extended or rebuilt answers exactly too."""
    conv = await seed(svc.pool, dialect=dialect, turns=6, tool_calls=True, runtime_events=dialect == "legacy")
    caller = Caller(user_id=conv.user_id)
    owner, invocations = conv.user_id, conv.invocation_ids
    await _mapped(svc, caller, conv.session_id, invocations)
    fork_id = await _fork_of(svc, caller, conv, 4, "invocation", task_layout="per_task")
    answer = await rewind.rewind(svc, caller, fork_id, RewindRequest(rewind_before_invocation_id=invocations[2]))
    assert isinstance(answer, rewind.RewindResult) and answer.rewind.id is not None
    async with svc.pool.acquire() as conn:
        assert await turn_map.usable(svc.store, conn, fork_id, owner)  # cut by the rewind
    kept = invocations[:2]
    _same(await _mapped(svc, caller, fork_id, kept), await _exact(svc, caller, fork_id, kept))
    new_turn = await _append_turn(svc, fork_id, owner)
    now = [*kept, new_turn]
    _same(await _mapped(svc, caller, fork_id, now), await _exact(svc, caller, fork_id, now))
    assert await _map_rows(svc, fork_id, owner) == await _rebuilt(svc, fork_id, owner)
