"""The first touch of a session (issue 37): a session kagent wrote before anyone asked about it has no turn map,
and its first listing page, dry run or whole fork is answered from kagent's rows while the map is built after
the answer, in the background (turn_map.first_touch_exact). Each first-touch answer equals the same answer read
with the map built (docs/turn-map.md, "The first touch")."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import msgspec
import pytest

from bench.generate import SessionSpec, insert_session
from service.branches import turns
from service.config import Settings
from service.errors import BadRequest, Unprocessable
from service.identity import Caller
from service.kagent import dialects, turn_map
from service.kagent.migrate import migrate
from service.kagent.store import Store
from service.kagent.store.base import NOT_JSON_ERRORS
from service.kagent.store.events import EventHead
from service.operations import copying, forking
from service.schemas import ForkRequest
from service.services import Services
from tests.conftest import SAMPLES, create_database, drop_database
from tests.helpers import seed
from tests.support import answers as reading
from tests.test_server_copy import event_rows, task_rows


@pytest.fixture
async def svc(server_url: str) -> AsyncIterator[Services]:
    url = await create_database(server_url)
    pool = await asyncpg.create_pool(url, min_size=1, max_size=6)
    try:
        settings = Settings(database_url=url)
        async with pool.acquire() as conn:
            await migrate(conn, settings.service_schema)
        store = Store(settings.service_schema)
        store.turn_map_min_tasks = 0  # every session mapped (the service's default: 200 tasks or more)
        assert store.turn_map_background  # the service's default
        yield Services(settings=settings, store=store, pool=pool)
        await turn_map.settled()
    finally:
        await pool.close()
        await drop_database(server_url, url)


async def _forget(svc: Services, session_id: str, owner: str) -> None:
    """The session as kagent-fork finds a chat it never read: no map at all."""
    async with svc.pool.acquire() as conn:
        await svc.store.turn_maps.forget(conn, session_id, owner, rows=True)


@pytest.fixture
def deferred(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The builds the operations defer, noted instead of started: every ask stays a first touch until the test
    builds the map itself."""
    noted: list[tuple[str, str]] = []
    monkeypatch.setattr(turn_map, "_start", lambda store, connect, sid, owner: noted.append((sid, owner)))
    return noted


async def _same_first_and_mapped(
    svc: Services, deferred: list[tuple[str, str]], session_id: str, owner: str, ask: Any
) -> None:
    """`ask()` on a session without a map (answered from kagent's rows, its build deferred), then with the map
    built and trusted: the same answer."""
    async with svc.pool.acquire() as conn:
        await svc.store.turn_maps.forget(conn, session_id, owner, rows=True)  # as kagent-fork finds an unread chat
    deferred.clear()
    first = await ask()
    assert (session_id, owner) in deferred  # deferred: the answer was read without a map
    async with svc.pool.acquire() as conn:
        assert await turn_map.ensure(svc.store, conn, session_id, owner)
    deferred.clear()
    mapped = await ask()
    assert not deferred
    async with svc.pool.acquire() as conn:
        assert await turn_map.usable(svc.store, conn, session_id, owner)  # the second answer could read it
    assert first == mapped


def _plan(svc: Services, caller: Caller, session_id: str, invocation_id: str | None) -> Any:
    async def ask() -> Any:
        req = ForkRequest(rewind_before_invocation_id=invocation_id, dry_run=True)
        return reading.stable(msgspec.to_builtins((await forking.fork(svc, caller, session_id, req)).data))

    return ask


async def _same_pages(svc: Services, deferred: list[tuple[str, str]], conv: Any, limits: tuple[int, ...]) -> None:
    """Every page of each size in `limits`, first without a map and then with it: the same."""
    caller = Caller(user_id=conv.user_id)
    for limit in limits:
        await _same_first_and_mapped(
            svc, deferred, conv.session_id, conv.user_id, _pages(svc, caller, conv.session_id, limit)
        )


def _pages(svc: Services, caller: Caller, session_id: str, limit: int) -> Any:
    async def ask() -> Any:
        return await reading.pages(svc, caller, session_id, limit)

    return ask


CONVERSATIONS = [
    {"dialect": "legacy", "turns": 4, "tool_calls": True, "approval_turn": 1},
    {"dialect": "v1", "turns": 5, "tool_calls": True, "running_last_turn": True},
    {"dialect": "v1", "turns": 3, "event_style": "go", "metadata_style": "kagent"},
    {"dialect": "legacy", "turns": 3, "runtime_events": True},
]


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
@pytest.mark.parametrize("shape", CONVERSATIONS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
async def test_a_first_listing_and_dry_run_answer_as_with_the_map(
    svc: Services, deferred: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch, shape: dict[str, Any], large: bool
) -> None:
    """`large`: read as a session of 200 tasks or more is (a dry run without a map counts the events on a second
    connection while it reads the tasks)."""
    monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0 if large else 10**9)
    conv = await seed(svc.pool, **shape)
    caller, sid, owner = Caller(user_id=conv.user_id), conv.session_id, conv.user_id
    for limit in (1, 2, 100):
        await _same_first_and_mapped(svc, deferred, sid, owner, _pages(svc, caller, sid, limit))
    for invocation_id in [*conv.invocation_ids, None, "e-not-a-turn"]:
        await _same_first_and_mapped(svc, deferred, sid, owner, _plan(svc, caller, sid, invocation_id))


async def test_a_first_dry_run_reads_the_tasks_once_and_answers_as_with_the_map(
    svc: Services, deferred: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large v1 session's first dry run reads its tasks once, in order, up to the first that carries the boundary
    (forking._streamed_plan), counting each as it comes. Tasks that test it: one that is not JSON (refused only when
    the cut keeps it), one created at the same time as a boundary task, a later task carrying the first turn again
    (the first one is the boundary task), and a turn whose task is gone (no task carries it: every task is counted,
    and those from its first event on are taken off again)."""
    monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0)
    streamed: list[bool] = []
    plan_it = forking._streamed_plan

    async def noted(*args: Any) -> Any:
        try:
            answer = await plan_it(*args)
        except Unprocessable:
            streamed.append(True)  # it read the tasks, and refused one the cut keeps
            raise
        streamed.append(answer is not None)
        return answer

    monkeypatch.setattr(forking, "_streamed_plan", noted)
    conv = await seed(svc.pool, dialect="v1", turns=6, tool_calls=True)
    caller, sid, owner = Caller(user_id=conv.user_id), conv.session_id, conv.user_id
    async with svc.pool.acquire() as conn:
        tasks = await conn.fetch("SELECT * FROM task WHERE session_id = $1 ORDER BY created_at", sid)
        insert = (
            "INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id) "
            "VALUES ($1, $2, $2, $3, $4, $5, $6)"
        )
        for at, data in (
            (tasks[4]["created_at"] - timedelta(microseconds=1), "{not json"),
            (tasks[2]["created_at"], tasks[1]["data"].replace(tasks[1]["id"], "twin-of-the-second")),
            (tasks[-1]["created_at"] + timedelta(seconds=1), tasks[0]["data"].replace(tasks[0]["id"], "late-first")),
        ):
            await conn.execute(insert, str(uuid.uuid4()), at, data, sid, tasks[0]["protocol_version"], owner)
        await conn.execute("DELETE FROM task WHERE id = $1", tasks[3]["id"])

    def plan_or_refusal(invocation_id: str | None) -> Any:
        ask = _plan(svc, caller, sid, invocation_id)

        async def answer() -> Any:
            try:
                return await ask()
            except Unprocessable as exc:
                return f"422: {exc}"

        return answer

    answers = []
    for invocation_id in [*conv.invocation_ids, None]:
        streamed.clear()
        await _same_first_and_mapped(svc, deferred, sid, owner, plan_or_refusal(invocation_id))
        answers.append(await plan_or_refusal(invocation_id)())
        assert streamed[0] is (invocation_id is not None)  # the first ask (no map) streamed, if a turn is named
    refused = [isinstance(a, str) for a in answers]
    assert refused == [False] * 4 + [True] * 3  # the task that is not JSON is kept from the fifth turn's cut on


async def test_a_long_session_first_touch_answers_as_with_the_map(
    svc: Services, deferred: list[tuple[str, str]]
) -> None:
    """A generated session of 1,200 events: its first pages, and a dry run before its 90 % turn."""
    async with svc.pool.acquire() as conn:
        s = await insert_session(conn, SessionSpec(turns=120))
    caller, sid, owner = Caller(user_id=s.user_id), s.session_id, s.user_id
    for limit in (7, 100):
        await _same_first_and_mapped(svc, deferred, sid, owner, _pages(svc, caller, sid, limit))
    await _same_first_and_mapped(svc, deferred, sid, owner, _plan(svc, caller, sid, s.invocation_ids[108]))


async def test_a_first_page_reads_only_the_tasks_that_can_change_it_and_answers_as_with_the_map(
    svc: Services, deferred: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing decodes only the tasks whose text could carry a turn of the page or a turn the events do not
    show (dialects.invocation_id_candidates). Tasks that test each way around it: a turn only a task shows (early:
    it takes a place in the first page), the last task carrying the first turn too (a merged task: the first
    turn's task ids and chat marks must count it), and a task whose text holds a \\u escape (its text cannot
    tell). Every page of every size answers as with the map, and fewer tasks are decoded than the session has."""
    conv = await seed(svc.pool, dialect="v1", turns=6, tool_calls=True)
    caller, sid, owner = Caller(user_id=conv.user_id), conv.session_id, conv.user_id
    first, last = conv.invocation_ids[0], conv.invocation_ids[-1]
    async with svc.pool.acquire() as conn:
        tasks = await conn.fetch("SELECT id, created_at, data FROM task WHERE session_id = $1 ORDER BY created_at", sid)
        assert len(tasks) == len(conv.invocation_ids)
        only = msgspec.json.decode(tasks[1]["data"].replace(conv.invocation_ids[1], "e-only-a-task-shows"))
        only["id"] = str(uuid.uuid4())
        await conn.execute(
            "INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id) "
            "SELECT $1, $2, $2, $3, session_id, protocol_version, user_id FROM task WHERE id = $4",
            only["id"], conv.turns[0].started_at + timedelta(microseconds=1), msgspec.json.encode(only).decode(),
            tasks[1]["id"],
        )  # fmt: skip
        merged = msgspec.json.decode(tasks[-1]["data"])
        merged["artifacts"] = [*msgspec.json.decode(tasks[0]["data"])["artifacts"], *merged["artifacts"]]
        escaped = msgspec.json.decode(tasks[2]["data"])
        escaped["metadata"] = {**escaped.get("metadata", {}), "note": "café"}
        for task_id, text in (
            (tasks[-1]["id"], msgspec.json.encode(merged).decode()),
            (tasks[2]["id"], json.dumps(escaped)),
        ):
            await conn.execute("UPDATE task SET data = $2 WHERE id = $1", task_id, text)  # json.dumps: the \\u escape
    assert "\\u00e9" in json.dumps(escaped)
    assert [
        dialects.invocation_id_candidates(t) is None for t in (msgspec.json.encode(only).decode(), json.dumps(escaped))
    ] == [False, True]
    decoded: list[str] = []
    carried = dialects.invocation_ids
    monkeypatch.setattr(dialects, "invocation_ids", lambda task: decoded.append(task.get("id")) or carried(task))
    for limit in (1, 2, 3, 100):
        await _same_first_and_mapped(svc, deferred, sid, owner, _pages(svc, caller, sid, limit))
    decoded.clear()
    await _forget(svc, sid, owner)
    page = await turns.invocations(svc, caller, sid, limit=2)
    assert [t.invocation_id for t in page.items] == [first, "e-only-a-task-shows"]
    assert tasks[-1]["id"] in page.items[0].task_ids  # the merged task, read although its own turn is the last
    assert tasks[3]["id"] not in decoded  # a task of later turns only: not decoded
    assert last not in [t.invocation_id for t in page.items]


async def test_invocations_that_may_hold_a_message_but_hold_none_answer_as_with_the_map(
    svc: Services, deferred: list[tuple[str, str]]
) -> None:
    """The first pass takes an invocation whose events have a first content part as one that may be a turn; only
    the page's places are read exactly (event_heads). Invocations that test it: one whose only event holds a
    thought (no message: no turn) among the first turns; one whose parts are empty (no turn, known from the first
    pass); one holding a thought late in the session whose task is early (no turn of the events, so its task
    shows it as a turn at the task's time, in the first page). Every page of every size, and `after` naming the
    thought, answer as with the map."""
    conv = await seed(svc.pool, dialect="v1", turns=6, tool_calls=True)
    caller, sid, owner = Caller(user_id=conv.user_id), conv.session_id, conv.user_id
    async with svc.pool.acquire() as conn:
        event = await conn.fetchrow("SELECT * FROM event WHERE session_id = $1 ORDER BY created_at DESC LIMIT 1", sid)
        task = await conn.fetchrow("SELECT * FROM task WHERE session_id = $1 ORDER BY created_at LIMIT 1", sid)
        doc = msgspec.json.decode(event["data"])
        for invocation_id, parts, at in (
            (
                "e-a-thought",
                [{"text": "thinking", "thought": True}],
                conv.turns[1].started_at + timedelta(microseconds=1),
            ),
            ("e-no-parts", [], conv.turns[2].started_at + timedelta(microseconds=1)),
            ("e-late-thought", [{"text": "later", "thought": True}], event["created_at"] + timedelta(seconds=1)),
        ):
            data = {**doc, "id": str(uuid.uuid4()), "invocation_id": invocation_id,
                    "content": {"role": "model", "parts": parts}}  # fmt: skip
            await conn.execute(
                "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data) "
                "VALUES ($1, $2, $3, $4, $4, $5)",
                data["id"], owner, sid, at, msgspec.json.encode(data).decode(),
            )  # fmt: skip
        carried = task["data"].replace(conv.invocation_ids[0], "e-late-thought")
        await conn.execute(
            "INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id) "
            "VALUES ($1, $2, $2, $3, $4, $5, $6)",
            str(uuid.uuid4()), conv.turns[0].started_at + timedelta(microseconds=2), carried, sid,
            task["protocol_version"], task["user_id"],
        )  # fmt: skip
    for limit in (1, 2, 3, 100):
        await _same_first_and_mapped(svc, deferred, sid, owner, _pages(svc, caller, sid, limit))
    await _forget(svc, sid, owner)
    page = await turns.invocations(svc, caller, sid, limit=3)
    assert [t.invocation_id for t in page.items] == [conv.invocation_ids[0], "e-late-thought", conv.invocation_ids[1]]

    async def after_a_thought() -> str:
        with pytest.raises(BadRequest) as refused:
            await turns.invocations(svc, caller, sid, limit=2, after="e-a-thought")
        return str(refused.value)

    await _same_first_and_mapped(svc, deferred, sid, owner, after_a_thought)


async def test_a_first_page_decodes_its_oldest_tasks_as_it_scans_them(
    svc: Services, deferred: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first page's tasks are the oldest (a task a turn): they are decoded as the tasks are scanned, none is
    read again after the events' pass; a later page reads its tasks again by id. The speculated tasks that the page
    does not need (the second page's, here) change nothing: the same pages as with the map."""
    conv = await seed(svc.pool, dialect="v1", turns=6, tool_calls=True)
    caller, sid, owner = Caller(user_id=conv.user_id), conv.session_id, conv.user_id
    read_again: list[list[str]] = []
    by_id = svc.store.turn_maps.tasks_by_id

    async def noted(conn: Any, session_id: str, owner: str, ids: list[str]) -> Any:
        read_again.append(ids)
        return await by_id(conn, session_id, owner, ids)

    monkeypatch.setattr(svc.store.turn_maps, "tasks_by_id", noted)
    await _forget(svc, sid, owner)
    first = await turns.invocations(svc, caller, sid, limit=3)
    assert [t.invocation_id for t in first.items] == conv.invocation_ids[:3]
    assert read_again == []  # the 4 oldest tasks decoded as scanned: the page's and the one after it
    later = await turns.invocations(svc, caller, sid, limit=2, after=conv.invocation_ids[2])
    assert [t.invocation_id for t in later.items] == conv.invocation_ids[3:5]
    assert read_again  # a later page reads its tasks again
    for limit in (1, 3):
        await _same_first_and_mapped(svc, deferred, sid, owner, _pages(svc, caller, sid, limit))


# User events of each shape the first pass may meet, each the user event(s) of an invocation of its own: the parts
# of each of its user events (none: no user event), and whether the first pass knows the turn without reading it again.
_PLAIN = 'A question \u00e9\u00e9 \\"quoted\\" ' + "x" * 300  # over 200 characters, escapes in its JSON
USER_SHAPES: list[tuple[str, list[Any], bool]] = [
    ("e-plain", [[{"text": _PLAIN}]], True),
    ("e-plain-after-empty", [[], [{"text": "asked once"}]], True),
    ("e-two-texts", [[{"text": "first"}, {"text": "second"}]], False),
    ("e-two-user-events", [[{"text": "one"}], [{"text": "two"}]], False),
    ("e-thought", [[{"text": "hm", "thought": True}]], False),
    ("e-user-response", [[{"function_response": {"id": "c1", "name": "t", "response": {"ok": True}}}]], False),
    ("e-null-call-key", [[{"text": "a call key, null", "function_call": None}]], False),
    ("e-number-text", [[{"text": 5}]], False),
    ("e-parts-object", [{"text": "not a list"}], False),
    ("e-no-user-event", [], False),
]


async def test_a_user_text_known_from_the_first_pass_answers_as_with_the_map(
    svc: Services, deferred: list[tuple[str, str]]
) -> None:
    """The first pass knows a turn whose one user event with parts is one plain text part (its user text that
    text); every other shape is read exactly. Invocations of each shape among the first turns (each with an agent
    reply): every page answers as with the map, and the first pass knows exactly the plain ones."""
    conv = await seed(svc.pool, dialect="v1", turns=4, tool_calls=True)
    caller, sid, owner = Caller(user_id=conv.user_id), conv.session_id, conv.user_id
    async with svc.pool.acquire() as conn:
        event = await conn.fetchrow("SELECT * FROM event WHERE session_id = $1 ORDER BY created_at DESC LIMIT 1", sid)
        doc = msgspec.json.decode(event["data"])
        at = conv.turns[1].started_at
        for invocation_id, user_parts, _ in USER_SHAPES:
            reply = [{"text": f"the answer to {invocation_id}"}]
            for author, parts in [*(("user", p) for p in user_parts), ("agent", reply)]:
                at += timedelta(microseconds=1)
                data = {**doc, "id": str(uuid.uuid4()), "invocation_id": invocation_id, "author": author,
                        "content": {"role": "user" if author == "user" else "model", "parts": parts}}  # fmt: skip
                await conn.execute(
                    "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data) "
                    "VALUES ($1, $2, $3, $4, $4, $5)",
                    data["id"], owner, sid, at, json.dumps(data),
                )  # fmt: skip
        async with conn.transaction(isolation="repeatable_read"):
            known = {s.invocation_id for s in await svc.store.events.event_spans([conn], sid, owner)
                     if isinstance(s, EventHead)}  # fmt: skip
            exact = {t.invocation_id: t.user_text for t in await svc.store.events.event_turns(conn, sid, owner)}
    assert {i for i, _, plain in USER_SHAPES if plain} <= known
    assert not {i for i, _, plain in USER_SHAPES if not plain} & known
    assert exact["e-plain"] == _PLAIN[:200] and exact["e-two-texts"] == "first\nsecond"
    for limit in (1, 3, 100):
        await _same_first_and_mapped(svc, deferred, sid, owner, _pages(svc, caller, sid, limit))


@pytest.mark.parametrize("lent", [0, 1], ids=["no-reader", "one-reader"])
async def test_a_first_listing_with_fewer_readers_answers_as_with_the_map(
    svc: Services, deferred: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch, lent: int
) -> None:
    """A pool that lends no second connection (the events read first, on the listing's own) or only one (the
    events' pass in one part): the same pages."""
    lend = copying.snapshot_reader
    open_readers: list[Any] = []
    lent_most = [0]

    @contextlib.asynccontextmanager
    async def fewer(svc: Services, conn: Any, *, wanted: bool) -> AsyncIterator[Any]:
        async with lend(svc, conn, wanted=wanted and len(open_readers) < lent) as reader:
            if reader is not None:
                open_readers.append(reader)
            lent_most[0] = max(lent_most[0], len(open_readers))
            try:
                yield reader
            finally:
                if reader is not None:
                    open_readers.remove(reader)

    monkeypatch.setattr(copying, "snapshot_reader", fewer)
    conv = await seed(svc.pool, dialect="legacy", turns=4, tool_calls=True, approval_turn=1)
    await _same_pages(svc, deferred, conv, (1, 3, 100))
    assert lent_most[0] == lent  # as many readers as the pool lent, no more


async def test_a_user_text_before_the_year_1000_is_the_events_text(
    svc: Services, deferred: list[tuple[str, str]]
) -> None:
    """A year before 1000 is written with fewer digits by Python than by PostgreSQL, so a time taken as text does
    not sort as the time does (an earlier reading of the first pass took a turn's user text so): the page's turns
    still answer their events' user text, not their tasks', and the same pages as with the map."""
    conv = await seed(svc.pool, dialect="v1", turns=3, tool_calls=True)
    args = (conv.session_id, conv.user_id)
    async with svc.pool.acquire() as conn:
        for table in ("event", "task"):
            await conn.execute(
                f"UPDATE {table} SET created_at = created_at - interval '1100 years' WHERE session_id = $1",
                conv.session_id,
            )
        async with conn.transaction():
            events_say = {t.invocation_id: t.user_text for t in await svc.store.events.event_turns(conn, *args)}
        for text in filter(None, events_say.values()):  # the tasks say otherwise: only the events' text is right
            await conn.execute("UPDATE task SET data = replace(data, $2, $2 || ' (the task)') WHERE session_id = $1",
                               conv.session_id, text)  # fmt: skip
    await _same_pages(svc, deferred, conv, (2, 100))
    await _forget(svc, conv.session_id, conv.user_id)
    page = await reading.pages(svc, Caller(user_id=conv.user_id), conv.session_id, 100)
    assert {item["invocation_id"]: item["user_text"] for item in page[0][:-1]} == events_say  # not the tasks' text


def test_the_candidates_of_a_task_hold_every_invocation_it_carries() -> None:
    """invocation_id_candidates never misses an invocation invocation_ids reads, whatever the text's spacing,
    and gives up (None) where the text could hide one (a \\u escape, a value holding an escape)."""
    quoted = {"text": 'invocation_id": "no"'}
    history = [{"metadata": {"kagent_invocation_id": "e-2"}}]
    task = {"id": "t", "metadata": {"adk_invocation_id": "e-1"}, "history": history,
            "artifacts": [{"metadata": {"adk_invocation_id": "e-3"}, "parts": [quoted]}]}  # fmt: skip
    for text in (json.dumps(task), json.dumps(task, indent=2), msgspec.json.encode(task).decode()):
        candidates = dialects.invocation_id_candidates(text)
        assert candidates is not None and set(dialects.invocation_ids(dialects.decode(text))) <= candidates
        assert "no" not in candidates  # a quote inside a string is escaped: never taken for a key
    assert dialects.invocation_id_candidates('{"metadata": {"adk_invocation_id": "e-\\"1"}}') is None
    assert dialects.invocation_id_candidates('{"metadata": {"adk_invocation\\u005fid": "e-1"}}') is None
    for sample in ("a2a_task.json", "a2a_task_v0_3.json"):
        text = (SAMPLES / sample).read_text()
        candidates = dialects.invocation_id_candidates(text)
        assert candidates is None or set(dialects.invocation_ids(dialects.decode(text))) <= candidates


# Rows that are not JSONB, each placed inside the second turn: text that is not JSON, and JSON that JSONB
# refuses (the \u0000 escape).
NOT_JSONB = ["this row is not JSON {", '{"invocation_id": "e-x", "author": "user", "text": "nul \\u0000 here"}']


@pytest.mark.parametrize("bad", NOT_JSONB, ids=["not-json", "nul-escape"])
async def test_a_row_that_is_not_jsonb_answers_as_with_the_map(
    svc: Services, deferred: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    """The listing's and the dry run's passes cast each event to JSONB as it is and, when one is not, ask the
    same query with try_jsonb (store.base.fetch_parsed): the answers are those of the map, which skips it."""
    monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0)  # the dry run counts on its reader, as a large one
    conv = await seed(svc.pool, dialect="v1", turns=3, tool_calls=True)
    caller, sid, owner = Caller(user_id=conv.user_id), conv.session_id, conv.user_id
    async with svc.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data) VALUES ($1, $2, $3, $4, $4, $5)",
            str(uuid.uuid4()), owner, sid, conv.turns[1].started_at + timedelta(microseconds=1), bad,
        )  # fmt: skip
        q = svc.store.queries.q
        async with conn.transaction():  # the cast fails: the tolerant query answered
            for name, args in (("event_turns", (sid, owner)), ("count_events_before", (sid, owner, None))):
                with pytest.raises(NOT_JSON_ERRORS):
                    async with conn.transaction():
                        await conn.fetch(q[name], *args)
    await _same_first_and_mapped(svc, deferred, sid, owner, _pages(svc, caller, sid, 100))
    for invocation_id in [*conv.invocation_ids, None]:
        await _same_first_and_mapped(svc, deferred, sid, owner, _plan(svc, caller, sid, invocation_id))


@pytest.mark.parametrize("shape", CONVERSATIONS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
async def test_the_cast_passes_answer_as_the_tolerant_ones(svc: Services, shape: dict[str, Any]) -> None:
    """Where every row is JSONB, event_turns and count_events_before (each row cast) answer what their
    try_jsonb forms answer, at every turn's start."""
    conv = await seed(svc.pool, **shape)
    q, args = svc.store.queries.q, (conv.session_id, conv.user_id)
    async with svc.pool.acquire() as conn:
        turns = await conn.fetch(q["event_turns"], *args)
        assert len(turns) == len(conv.invocation_ids)  # the comparison compares turns
        assert turns == await conn.fetch(q["event_turns_tolerant"], *args)
        for before in [*(t.started_at for t in conv.turns), None]:
            counted = await conn.fetch(q["count_events_before"], *args, before)
            assert counted == await conn.fetch(q["count_events_before_tolerant"], *args, before)


async def _whole_fork(svc: Services, caller: Caller, session_id: str) -> tuple[Any, Any, Any]:
    outcome = await forking.fork(svc, caller, session_id, ForkRequest())
    assert outcome.created and outcome.session_id is not None
    info = reading.stable(msgspec.to_builtins(outcome.data))
    for row in (rows := await task_rows(svc.pool, outcome.session_id)):
        row.pop("updated_at")
    events = await event_rows(svc.pool, outcome.session_id)
    assert rows and events  # the fork holds tasks and events: the comparison compares something
    return info, rows, events


@pytest.mark.parametrize("shape", CONVERSATIONS[:2], ids=["legacy", "v1-running"])
async def test_a_first_whole_fork_writes_what_it_writes_with_the_map(
    svc: Services, deferred: list[tuple[str, str]], shape: dict[str, Any]
) -> None:
    conv = await seed(svc.pool, **shape)
    caller = Caller(user_id=conv.user_id)

    async def ask() -> Any:
        return await _whole_fork(svc, caller, conv.session_id)

    await _same_first_and_mapped(svc, deferred, conv.session_id, conv.user_id, ask)


async def test_the_map_is_built_after_the_first_answer(svc: Services) -> None:
    """Not deferred for ever: the first listing page starts the build once it has answered, and the next ask
    reads the map."""
    conv = await seed(svc.pool, dialect="v1", turns=4, tool_calls=True)
    caller, key = Caller(user_id=conv.user_id), (conv.session_id, conv.user_id)
    first = await reading.pages(svc, caller, conv.session_id, 100)
    assert key in turn_map._building  # started after the answer, not yet run
    await turn_map.settled()
    async with svc.pool.acquire() as conn:
        assert await turn_map.usable(svc.store, conn, *key)
    assert await reading.pages(svc, caller, conv.session_id, 100) == first
    assert key not in turn_map._building
