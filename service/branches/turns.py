"""The turns of a conversation, in order, so that a person or a UI can pick a fork point."""

from __future__ import annotations

import asyncio
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from service.errors import BadRequest
from service.identity import Caller, visible_session
from service.kagent import dialects, frameworks, turn_map
from service.kagent.store.base import Connection
from service.kagent.store.events import EventTurn
from service.kagent.store.sessions import SessionRow
from service.kagent.store.tasks import TaskRow
from service.kagent.store.turn_map import MapTurn
from service.operations import copying, plan
from service.schemas import rfc3339
from service.services import Services

MAX_PAGE = 1000
USER_TEXT_CHARS = 200
# The key of a turn known only by its task (its agent writes no invocation id) among the turns keyed by
# invocation id: PostgreSQL text holds no NUL, so no invocation id starts with one.
TASK_TURN = "\x00task:"


class Invocation(msgspec.Struct, frozen=True, kw_only=True):
    invocation_id: str | None  # None: a turn of an agent that writes no invocation id, known by its task
    task_id: str | None
    framework: str
    state: str | None
    started_at: str
    user_text: str | None
    event_count: int
    # What of the turn survives on the messages kagent's chat renders (dialects.chat_marks), so that a UI
    # can tell which turn a message belongs to: every task holding it, its history messages' ids, the
    # function calls it makes and answers, the agent text messages kagent shows for it.
    task_ids: list[str]
    message_ids: list[str]
    call_ids: list[str]
    response_ids: list[str]
    text_count: int


@dataclass(frozen=True, kw_only=True)
class Page:
    items: list[Invocation]
    last: bool


@dataclass(kw_only=True)
class TurnInfo:
    """A turn as the listing knows it: from its events, completed by its task."""

    invocation_id: str  # TASK_TURN + the task's id for a turn known only by its task
    started_at: datetime
    event_count: int = 0
    user_text: str | None = None
    task_id: str | None = None
    state: str | None = None
    task_ids: list[str] = field(default_factory=list)
    marks: dialects.ChatMarks = field(default_factory=dialects.ChatMarks)
    text_chars: int = 0  # a turn known only by its task: its chat's characters (dialects.chat_text_chars)


async def turn_index(svc: Services, conn: Connection, source: SessionRow) -> dict[str, TurnInfo]:
    """Every turn of the session by invocation id: from the events (Python and Go ADK, parsed in
    PostgreSQL), completed by the tasks (task id, state, and turns known only to the tasks), streamed.
    Needs a transaction."""
    turns = {
        t.invocation_id: _turn_info(t) for t in await svc.store.events.event_turns(conn, source.id, source.user_id)
    }
    return await with_tasks(svc, conn, source, turns)


async def with_tasks(
    svc: Services, conn: Connection, source: SessionRow, turns: dict[str, TurnInfo]
) -> dict[str, TurnInfo]:
    """`turns` completed by the session's tasks (streamed): each turn's first task and its state, the
    user text when the events had none, and the turns only tasks know (started at the task's time)."""
    async for row in svc.store.tasks.stream_tasks_before(conn, source.id, source.user_id, None):
        _complete(turns, row, None)
    return turns


@dataclass(frozen=True, kw_only=True)
class _Carried:
    """What the listing's order needs of one task, read before the turns are: the turns it carries, its state."""

    id: str
    created_at: datetime
    state: str | None
    carried: list[str]


def _carried(row: TaskRow) -> _Carried | None:
    """None: a task that is not JSON (skipped, as `_complete` skips it)."""
    try:
        data = dialects.decode(row.data)
    except dialects.TaskFormatError:
        return None
    plan.dialect_of(row)  # an unknown protocol_version is refused here, as `_complete` refuses it
    return _Carried(id=row.id, created_at=row.created_at, state=dialects.state(data),
                    carried=dialects.invocation_ids(data))  # fmt: skip


async def _adk_order(svc: Services, conn: Connection, source: SessionRow) -> tuple[dict[str, TurnInfo], list[str]]:
    """Every turn of an ADK session as turn_index makes it but for what only a page needs (its chat marks, and its
    user text when its events have none: `_with_page_tasks`), and the task ids in the order read. The events are
    read on a second connection in the same snapshot while the tasks are read here (each side reads all of the
    session's rows of its table: at once, on two cores)."""
    store, sid, owner = svc.store, source.id, source.user_id
    async with copying.snapshot_reader(svc, conn, wanted=True) as reader:
        events = asyncio.ensure_future(store.events.event_turns(reader or conn, sid, owner))
        try:
            if reader is None:
                await asyncio.wait((events,))  # one connection: the events first
            read = [c async for row in store.tasks.stream_tasks_before(conn, sid, owner, None) if (c := _carried(row))]
            turns = {t.invocation_id: _turn_info(t) for t in await events}
        finally:
            await copying.cancelled(events)
    for task in read:
        for invocation_id in task.carried:
            turn = turns.setdefault(invocation_id, TurnInfo(invocation_id=invocation_id, started_at=task.created_at))
            if task.id not in turn.task_ids:
                turn.task_ids.append(task.id)
            if turn.task_id is None:
                turn.task_id, turn.state = task.id, task.state
    return turns, [task.id for task in read]


async def _with_page_tasks(
    svc: Services, conn: Connection, source: SessionRow, page: list[TurnInfo], order: list[str]
) -> None:
    """The page's turns completed as `_complete` completes them (each one's chat marks from every task carrying
    it, its user text from its tasks when its events have none), the page's tasks read again by id, in `order`."""
    wanted = {t.invocation_id: t for t in page}
    rank = {task_id: index for index, task_id in enumerate(order)}
    ids = sorted({task_id for t in page for task_id in t.task_ids})
    rows = await svc.store.turn_maps.tasks_by_id(conn, source.id, source.user_id, ids)
    for row in sorted(rows, key=lambda r: rank[r.id]):
        data = dialects.decode(row.data)  # JSON: `_carried` read it
        dialect = plan.dialect_of(TaskRow(id=row.id, created_at=row.created_at, protocol_version=row.protocol_version,
                                          data=""))  # fmt: skip
        marks = dialects.chat_marks(data, dialect)
        for invocation_id in dialects.invocation_ids(data):
            turn = wanted.get(invocation_id)
            if turn is None:
                continue
            mark = marks[invocation_id]
            turn.marks.message_ids += mark.message_ids
            turn.marks.call_ids += mark.call_ids
            turn.marks.response_ids += mark.response_ids
            turn.marks.text_count += mark.text_count
            if turn.user_text is None:
                text = dialects.first_user_text(data, dialect, invocation_id)
                turn.user_text = text[:USER_TEXT_CHARS] if text else None


def _task_turn(row: TaskRow) -> TurnInfo:
    """A turn known only by its task: it starts with the task, which holds its user text and state."""
    turn = TurnInfo(invocation_id=TASK_TURN + row.id, started_at=row.created_at, task_id=row.id, task_ids=[row.id])
    try:
        data = dialects.decode(row.data)
    except dialects.TaskFormatError:
        return turn
    dialect = plan.dialect_of(row)
    text = dialects.first_user_text(data, dialect)
    turn.user_text, turn.state = (text[:USER_TEXT_CHARS] if text else None), dialects.state(data)
    turn.text_chars = dialects.chat_text_chars(data, dialect)
    return turn


async def with_tasks_from(
    svc: Services, conn: Connection, source: SessionRow, turns: dict[str, TurnInfo], since: datetime
) -> dict[str, TurnInfo]:
    """`turns` (and only they) completed by the session's tasks created from `since` on (streamed)."""
    only = set(turns)
    async for row in svc.store.tasks.stream_tasks_from(conn, source.id, source.user_id, since):
        _complete(turns, row, only)
    return turns


def _complete(turns: dict[str, TurnInfo], row: TaskRow, only: Container[str] | None) -> bool:
    """What one task (fed oldest first) tells of the turns it carries (of `only`'s, when given); whether
    it carries any (a task that is not JSON is skipped as if it did)."""
    try:
        data = dialects.decode(row.data)
    except dialects.TaskFormatError:
        return True
    dialect = plan.dialect_of(row)
    marks = dialects.chat_marks(data, dialect)
    carried = dialects.invocation_ids(data)
    for invocation_id in carried:
        if only is not None and invocation_id not in only:
            continue
        turn = turns.setdefault(invocation_id, TurnInfo(invocation_id=invocation_id, started_at=row.created_at))
        if row.id not in turn.task_ids:
            turn.task_ids.append(row.id)
            mark = marks[invocation_id]
            turn.marks.message_ids += mark.message_ids
            turn.marks.call_ids += mark.call_ids
            turn.marks.response_ids += mark.response_ids
            turn.marks.text_count += mark.text_count
        if turn.task_id is None:
            turn.task_id, turn.state = row.id, dialects.state(data)
        if turn.user_text is None:
            text = dialects.first_user_text(data, dialect, invocation_id)
            turn.user_text = text[:USER_TEXT_CHARS] if text else None
    return bool(carried)


def _turn_info(t: EventTurn) -> TurnInfo:
    return TurnInfo(invocation_id=t.invocation_id, started_at=t.started_at, event_count=t.event_count,
                    user_text=t.user_text)  # fmt: skip


async def invocations(
    svc: Services, caller: Caller, session_id: str, *, limit: int = 100, after: str | None = None
) -> Page:
    """Every turn, in order, a page at a time. One snapshot."""
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}")
    store = svc.store
    # A session never asked about is listed from kagent's rows and mapped after (turn_map.first_touch_exact).
    async with turn_map.first_touch_exact(store, svc.connection), svc.connection() as conn:
        # The session's turn map is made true first (its own short transaction), then read in the
        # listing's snapshot if its guard holds there.
        source, _ = await visible_session(svc, conn, caller, session_id)
        mapped = await turn_map.prepare(store, conn, source.id, source.user_id)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            source, _ = await visible_session(svc, conn, caller, session_id)
            framework = await frameworks.detect(store, conn, source.id, source.user_id)
            # The turn map knows turns by invocation id: an agent that writes none (every framework but ADK)
            # has its turns read from its tasks.
            adk = framework in ("adk", "adk-go", "unknown")
            if adk and mapped and await turn_map.usable(store, conn, source.id, source.user_id):
                return await _mapped_page(svc, conn, source, limit, after, framework)
            return await _read_page(svc, conn, source, limit, after, framework)


async def _mapped_page(
    svc: Services, conn: Connection, source: SessionRow, limit: int, after: str | None, framework: str
) -> Page:
    """A page read from the turn map: the turns in the listing's order, as turn_index would make them."""
    maps, sid, owner = svc.store.turn_maps, source.id, source.user_id
    start = None
    if after is not None:
        start = await maps.turn(conn, sid, owner, after)
        if start is None or start.started_at is None:
            raise BadRequest(f"after names no turn of this session: {after}")
    rows = await maps.turn_page(conn, sid, owner, start, limit + 1)
    page = {t.invocation_id: _mapped(t) for t in rows[:limit]}
    # Each turn's tasks and chat marks, oldest task first, as with_tasks gathers them.
    for task_id, marks in await maps.turn_tasks(conn, sid, owner, list(page)) if page else []:
        for invocation_id, (message_ids, call_ids, response_ids, text_count) in msgspec.json.decode(marks).items():
            turn = page.get(invocation_id)
            if turn is not None and task_id not in turn.task_ids:
                turn.task_ids.append(task_id)
                turn.marks.message_ids += message_ids
                turn.marks.call_ids += call_ids
                turn.marks.response_ids += response_ids
                turn.marks.text_count += text_count
    return Page(items=[_item(t, framework) for t in page.values()], last=len(rows) <= limit)


def _mapped(t: MapTurn) -> TurnInfo:
    assert t.started_at is not None  # a page holds turns only
    # A turn with a message is an event turn (with_tasks completes its text from its tasks); an invocation
    # only its tasks show as a turn has no events in the listing.
    text = t.event_user_text if t.has_messages else None
    return TurnInfo(
        invocation_id=t.invocation_id, started_at=t.started_at, event_count=t.events if t.has_messages else 0,
        user_text=text if text is not None else t.task_user_text, task_id=t.task_id, state=t.task_state,
    )  # fmt: skip


async def _read_page(
    svc: Services, conn: Connection, source: SessionRow, limit: int, after: str | None, framework: str
) -> Page:
    """A page read from kagent's rows: all of them, sorted (an ADK session's chat marks, and its tasks' user texts,
    only for the page's turns)."""
    order = None
    if framework in ("adk", "adk-go"):
        turns, order = await _adk_order(svc, conn, source)
        ordered = sorted(turns.values(), key=lambda t: t.started_at)
    else:
        ordered = await ordered_turns(svc, conn, source, framework)
    start = 0
    if after is not None:
        # A turn is named by its invocation id, or by its task when it has none.
        index = next(
            (i for i, t in enumerate(ordered) if after in (t.invocation_id, t.invocation_id.replace(TASK_TURN, "", 1))),
            None,
        )
        if index is None:
            raise BadRequest(f"after names no turn of this session: {after}")
        start = index + 1
    page = ordered[start : start + limit]
    if order is not None:
        await _with_page_tasks(svc, conn, source, page, order)
    return Page(items=[_item(t, framework) for t in page], last=start + limit >= len(ordered))


async def ordered_turns(svc: Services, conn: Connection, source: SessionRow, framework: str) -> list[TurnInfo]:
    """Every turn of the session in the listing's order, read from all of its rows (no map, no index): for an
    agent that writes no invocation id, one turn per task (keyed TASK_TURN + its id), in the tasks' order.
    Needs a transaction."""
    turns = {
        t.invocation_id: _turn_info(t) for t in await svc.store.events.event_turns(conn, source.id, source.user_id)
    }
    if framework in ("adk", "adk-go"):
        # A task without an invocation id is a turn just started here (its events name it).
        await with_tasks(svc, conn, source, turns)
        return sorted(turns.values(), key=lambda t: t.started_at)
    # Every task is a turn, also those its runtime wrote under kagent's default user (docs/frameworks.md).
    users = await frameworks.runtime_users(svc.store, conn, source.id, source.user_id)
    async for row in svc.store.tasks.stream_runtime_tasks(conn, source.id, source.user_id, users):
        # A task that carries no invocation id is a turn of its own, keyed TASK_TURN + its id.
        if not _complete(turns, row, None):
            turns[TASK_TURN + row.id] = _task_turn(row)
    return sorted(turns.values(), key=lambda t: t.started_at)


def _item(t: TurnInfo, framework: str) -> Invocation:
    return Invocation(
        invocation_id=None if t.invocation_id.startswith(TASK_TURN) else t.invocation_id, task_id=t.task_id,
        framework=framework, state=t.state,
        started_at=rfc3339(t.started_at),
        user_text=t.user_text, event_count=t.event_count, task_ids=t.task_ids,
        message_ids=t.marks.message_ids, call_ids=t.marks.call_ids, response_ids=t.marks.response_ids,
        text_count=t.marks.text_count,
    )  # fmt: skip
