"""The turns of a conversation, in order, so that a person or a UI can pick a fork point."""

from __future__ import annotations

import asyncio
from collections.abc import Container
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from service.errors import BadRequest
from service.identity import Caller, Seen, settle
from service.kagent import dialects, turn_map
from service.kagent.store.base import Connection
from service.kagent.store.events import EventHead, EventSpan, EventTurn
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
    """What the listing's order needs of one task, read before the turns are: the turns it carries, its state;
    and the task decoded, for its chat marks if it carries a page's turn."""

    id: str
    created_at: datetime
    state: str | None
    carried: list[str]
    data: dialects.JSON
    dialect: dialects.TaskDialect


def _carried(row: TaskRow) -> _Carried | None:
    """None: a task that is not JSON (skipped, as `_complete` skips it)."""
    try:
        data = dialects.decode(row.data)
    except dialects.TaskFormatError:
        return None
    dialect = plan.dialect_of(row)  # an unknown protocol_version is refused here, as `_complete` refuses it
    return _Carried(id=row.id, created_at=row.created_at, state=dialects.state(data),
                    carried=dialects.invocation_ids(data), data=data, dialect=dialect)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class _Scanned:
    """A task as the listing first reads it, without decoding it: the invocation ids its text could carry
    (dialects.invocation_id_candidates; None: only decoding it tells, as for a protocol_version unknown here)."""

    id: str
    created_at: datetime
    candidates: set[str] | None


def _scanned(row: TaskRow) -> _Scanned:
    known = dialects.TaskDialect.of(row.protocol_version) is not None
    return _Scanned(id=row.id, created_at=row.created_at,
                    candidates=dialects.invocation_id_candidates(row.data) if known else None)  # fmt: skip


def _wanted(heads: list[EventSpan], after: str | None, limit: int) -> set[str] | None:
    """The event turns a page could hold: the `limit` first after `after` (turns only tasks show may take some
    of their places, never bring others in). None: `after` names no turn of the events, so every task is read."""
    start = 0
    if after is not None:
        index = next((i for i, h in enumerate(heads) if h.invocation_id == after), None)
        if index is None:
            return None
        start = index + 1
    return {h.invocation_id for h in heads[start : start + limit]}


def _needed(task: _Scanned, events: Container[str], wanted: set[str] | None) -> bool:
    """Whether a task can change the page: it may carry a wanted turn, or a turn the events do not show
    (a turn only tasks show, which takes a place in the order). Any other task only completes turns the
    page does not hold."""
    if task.candidates is None or wanted is None:
        return True
    return any(c in wanted or c not in events for c in task.candidates)


async def _adk_page(
    svc: Services, conn: Connection, source: SessionRow, limit: int, after: str | None, framework: str
) -> Page:
    """A page of an ADK session read from kagent's rows, as `ordered_turns` orders them, in two passes over the
    events. The first (event_spans: each invocation's first and last time and its events, and whether it may be a
    turn) runs in two parts on two more connections in the same snapshot while the tasks' texts are scanned here
    (each side reads all of the session's rows of its table: at once, on two cores); for the first page, the oldest
    tasks are decoded as they come. Then only the other tasks that can change the page are read again and decoded,
    and only the page's invocations not known from the first pass are read exactly (event_heads:
    whether each is a turn, its user text), until every place of the page (and the one after it) is a turn known
    exactly (`_unread`)."""
    store, sid, owner = svc.store, source.id, source.user_id
    async with (
        copying.snapshot_reader(svc, conn, wanted=True) as reader,
        copying.snapshot_reader(svc, conn, wanted=reader is not None) as second,
    ):
        readers = [r for r in (reader, second) if r is not None]
        spans_read = asyncio.ensure_future(store.events.event_spans(readers or [conn], sid, owner))
        try:
            if reader is None:
                await asyncio.wait((spans_read,))  # one connection: the events first
            scanned: list[_Scanned] = []
            decoded: dict[str, _Carried | None] = {}  # the tasks decoded (None: not JSON)
            async with aclosing(store.tasks.read_ahead_tasks_before(conn, sid, owner, None)) as batches:
                async for rows in batches:
                    for row in rows:
                        scanned.append(_scanned(row))
                        if after is None and len(decoded) <= limit:
                            # The first page's turns are the oldest, and so, in a session of a task a turn, are
                            # its tasks: the oldest are decoded as they are scanned, while the events' pass still
                            # runs, not read again after it. Any other task is harmless here (_order_of and
                            # _with_page_tasks take only what it carries that the page needs).
                            decoded[row.id] = _carried(row)
            spans = await spans_read
        finally:
            await copying.cancelled(spans_read)
        exact: dict[str, EventHead | None] = {}  # the invocations read exactly (None: no turn)
        while True:
            heads = [h for s in spans if (h := exact.get(s.invocation_id, s)) is not None]
            events = {h.invocation_id for h in heads}
            wanted = _wanted(heads, after, limit + 1)
            needed = [t.id for t in scanned if t.id not in decoded and _needed(t, events, wanted)]
            tasks = [c for t in scanned if (c := decoded.get(t.id)) is not None]  # in the order scanned
            keys, places, start = _order_of(heads, tasks, after)
            unread = _unread(keys, places, start, limit, scanned, decoded) if start is not None else []
            if not needed and not unread:
                break
            # Both at once: the tasks here, the invocations on a reader (the first time round, the places the events
            # alone give: the tasks' turns can move the page, rarely, and then the next round reads what it needs).
            reading = asyncio.ensure_future(store.events.event_heads(reader or conn, sid, owner, unread))
            try:
                if reader is None:
                    await asyncio.wait((reading,))
                for r in await store.turn_maps.tasks_by_id(conn, sid, owner, needed) if needed else []:
                    decoded[r.id] = _carried(
                        TaskRow(id=r.id, created_at=r.created_at, protocol_version=r.protocol_version, data=r.data)
                    )
                exact |= await reading
            finally:
                await copying.cancelled(reading)
    if start is None:
        raise BadRequest(f"after names no turn of this session: {after}")
    page = [_turn_of(places[key]) for key in keys[start : start + limit]]
    _with_page_tasks(page, tasks)
    return Page(items=[_item(t, framework) for t in page], last=start + limit >= len(keys))


_Place = EventSpan | TurnInfo  # a place in the order: an invocation of the events (a turn if an EventHead), or a
# turn only tasks show


def _order_of(
    heads: list[EventSpan], tasks: list[_Carried], after: str | None
) -> tuple[list[str], dict[str, _Place], int | None]:
    """The keys of the turns (and invocations that may be turns) of `heads` (in order) and of the turns only
    `tasks` show (at their first task's time), ordered as `ordered_turns` sorts them (by start, the events'
    turns first among equals); each key's place; and where a page after `after` starts (None: `after` names
    none of them)."""
    places: dict[str, _Place] = {h.invocation_id: h for h in heads}
    order = [(h.started_at, i, h.invocation_id) for i, h in enumerate(heads)]
    for task in tasks:
        for invocation_id in task.carried:
            if invocation_id not in places:
                places[invocation_id] = TurnInfo(invocation_id=invocation_id, started_at=task.created_at)
                order.append((task.created_at, len(order), invocation_id))
    order.sort()
    keys = [key for _, _, key in order]
    return keys, places, _found_start(keys, after)


def _unread(
    keys: list[str], places: dict[str, _Place], start: int, limit: int, scanned: list[_Scanned],
    decoded: dict[str, _Carried | None],
) -> list[EventSpan]:  # fmt: skip
    """The invocations to read exactly before the page is known: those of its places and the one after it (is
    there a turn after it?) and the one before it (`after`, which must name a turn) that may not be turns; and any
    that may not be a turn carried by a task of the page's time (if it is none, the task shows it as a turn
    there): by its text's candidates, or, for a text that could not tell, by the task read again."""

    def maybe(key: str) -> EventSpan | None:
        place = places.get(key)
        return place if isinstance(place, EventSpan) and not isinstance(place, EventHead) else None

    window = keys[max(start - 1, 0) : start + limit + 1]
    unread = {key: span for key in window if (span := maybe(key)) is not None}
    if window:
        low = places[keys[start - 1]].started_at if start > 0 else None
        high = places[window[-1]].started_at
        for task in scanned:
            if (low is None or task.created_at >= low) and task.created_at <= high:
                read = decoded.get(task.id)
                carried = task.candidates if task.candidates is not None else read.carried if read else ()
                for key in carried:
                    if (span := maybe(key)) is not None:
                        unread[key] = span
    return list(unread.values())


def _turn_of(place: _Place) -> TurnInfo:
    """A page's turn as its place knows it (its tasks come from _with_page_tasks)."""
    if isinstance(place, TurnInfo):
        return place
    assert isinstance(place, EventHead)  # _unread read every place of the page
    return TurnInfo(invocation_id=place.invocation_id, started_at=place.started_at, event_count=place.event_count,
                    user_text=place.user_text)  # fmt: skip


def _with_page_tasks(page: list[TurnInfo], tasks: list[_Carried]) -> None:
    """The page's turns completed as `_complete` completes them (each one's tasks, the first one's state, its chat
    marks from every task carrying it, and the user text of its first task holding one: the caller keeps its
    events' text if it has one), from `tasks` (every task carrying a page's turn among them), in the order read.
    Only the tasks carrying a page's turn are asked for their marks."""
    wanted = {t.invocation_id: t for t in page}
    for task in tasks:
        carried = [(inv, turn) for inv in task.carried if (turn := wanted.get(inv)) is not None]
        if not carried:
            continue
        data, dialect = task.data, task.dialect
        marks = dialects.chat_marks(data, dialect)
        for invocation_id, turn in carried:
            if task.id not in turn.task_ids:
                turn.task_ids.append(task.id)
            if turn.task_id is None:
                turn.task_id, turn.state = task.id, task.state
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
        # The session's access is settled once, first (identity.Seen).
        seen = await settle(svc, conn, caller, session_id)
        source, framework = seen.row, seen.framework
        mapped = await turn_map.prepare(store, conn, source.id, source.user_id)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            # The turn map knows turns by invocation id: an agent that writes none (every framework but ADK)
            # has its turns read from its tasks.
            adk = framework in ("adk", "adk-go", "unknown")
            if adk and mapped and await turn_map.usable(store, conn, source.id, source.user_id):
                return await _mapped_page(svc, conn, source, limit, after, framework)
            return await _read_page(svc, conn, seen, limit, after)


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


async def _read_page(svc: Services, conn: Connection, seen: Seen, limit: int, after: str | None) -> Page:
    """A page read from kagent's rows: all of them, sorted."""
    source, framework = seen.row, seen.framework
    if framework in ("adk", "adk-go"):
        return await _adk_page(svc, conn, source, limit, after, framework)
    ordered = await ordered_turns(svc, conn, source, framework, seen.users)
    start = _start(ordered, after)
    return Page(items=[_item(t, framework) for t in ordered[start : start + limit]],
                last=start + limit >= len(ordered))  # fmt: skip


def _start(ordered: list[TurnInfo], after: str | None) -> int:
    """Where a page after `after` starts in `ordered`."""
    return _start_of([t.invocation_id for t in ordered], after)


def _start_of(keys: list[str], after: str | None) -> int:
    """Where a page after `after` starts among the turns keyed `keys`, in order. A turn is named by its
    invocation id, or by its task when it has none."""
    start = _found_start(keys, after)
    if start is None:
        raise BadRequest(f"after names no turn of this session: {after}")
    return start


def _found_start(keys: list[str], after: str | None) -> int | None:
    """_start_of, None where `after` names no turn."""
    if after is None:
        return 0
    index = next((i for i, key in enumerate(keys) if after in (key, key.replace(TASK_TURN, "", 1))), None)
    return None if index is None else index + 1


async def ordered_turns(
    svc: Services, conn: Connection, source: SessionRow, framework: str, users: tuple[str, ...]
) -> list[TurnInfo]:
    """Every turn of the session in the listing's order, read from all of its rows (no map, no index): for an
    agent that writes no invocation id, one turn per task (keyed TASK_TURN + its id), in the tasks' order.
    `users`: whose rows of it are its owner's (frameworks.runtime_users, settled by the caller). Needs a
    transaction."""
    turns = {
        t.invocation_id: _turn_info(t) for t in await svc.store.events.event_turns(conn, source.id, source.user_id)
    }
    if framework in ("adk", "adk-go"):
        # A task without an invocation id is a turn just started here (its events name it).
        await with_tasks(svc, conn, source, turns)
        return sorted(turns.values(), key=lambda t: t.started_at)
    # Every task is a turn, also those its runtime wrote under kagent's default user (docs/frameworks.md).
    async for row in svc.store.tasks.stream_runtime_tasks(conn, source.id, source.user_id, list(users)):
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
