"""The turns of a conversation, in order, so that a person or a UI can pick a fork point."""

from __future__ import annotations

import math
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
from service.operations import plan
from service.schemas import rfc3339
from service.services import Services

MAX_PAGE = 1000
# Pages up to this many turns are read through the invocation index (44 ms for 100 turns of a 100,000-event
# session, against 2.0 s to read all of it); a larger page looks up so many turns that one pass over the
# whole session is as fast (1,000 turns: 2.8 s by lookups, 2.6 s in one pass; bench/README.md).
INDEXED_PAGE_MAX = 200
USER_TEXT_CHARS = 200
# A page walks the session's events in time order; its first walk assumes this many events a turn (the
# next ones use what it found), and no walk reads more than WALK_MAX events at once.
WALK_FIRST_EVENTS_PER_TURN = 4
WALK_MAX = 1000
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


async def _indexed_page(
    svc: Services, conn: Connection, source: SessionRow, limit: int, after: str | None
) -> tuple[list[TurnInfo], bool]:
    """One page of the listing read through the invocation index: the events of the page's turns and the
    tasks of its time span, not the whole session. The same page as sorting turn_index, but for turns
    that start at the same instant as `after` (those all follow it here)."""
    store, sid, owner = svc.store, source.id, source.user_id
    await store.database.custom_plans(conn)
    start = None
    if after is not None:
        known = {t.invocation_id: _turn_info(t) for t in await store.events.event_turns(conn, sid, owner, [after])}
        for row in await store.tasks.tasks_carrying_any(conn, sid, owner, [after]):
            _complete(known, row, {after})
        if after not in known:
            raise BadRequest(f"after names no turn of this session: {after}")
        start = known[after].started_at
    # The event turns in start order, from `start`, until one more than the page holds (each turn
    # measured whole by its invocation id: its events may lie beyond the part walked).
    found: dict[str, TurnInfo] = {}
    seen: set[str] = set()
    walked = 0
    waiting: list[str] = []  # walked, not yet measured: in the order they first appear
    cursor: tuple[datetime, str] | None = (start, "") if start is not None else None
    exhausted = False
    while len(found) <= limit:
        if not waiting:
            # As many events as the turns still wanted hold, at the events per turn walked so far.
            per_turn = walked / len(seen) if seen else WALK_FIRST_EVENTS_PER_TURN
            count = min(WALK_MAX, math.ceil((limit + 1 - len(found)) * per_turn * 1.1) + 10)
            batch = await store.events.event_walk(conn, sid, owner, cursor, count)
            if not batch:
                exhausted = True
                break
            walked += len(batch)
            cursor = (batch[-1][1], batch[-1][0])
            waiting = list(dict.fromkeys(inv for _, _, inv in batch if inv is not None and inv not in seen))
            seen.update(waiting)
            continue
        # Only as many as the page still needs: a turn first seen later starts later.
        wanted, waiting = waiting[: limit + 1 - len(found)], waiting[limit + 1 - len(found) :]
        for t in await store.events.event_turns(conn, sid, owner, wanted):
            if t.invocation_id != after and (start is None or t.started_at >= start):
                found[t.invocation_id] = _turn_info(t)
    ordered = sorted(found.values(), key=lambda t: t.started_at)[: limit + 1]
    end = ordered[limit].started_at if len(ordered) > limit and not exhausted else None
    # The turns only tasks know whose first task lies in the span: such a turn starts at that task.
    window: dict[str, TurnInfo] = {}
    spanned = await store.tasks.tasks_between(conn, sid, owner, start, end)
    for row in spanned:
        _complete(window, row, None)
    candidates = [i for i in window if i not in found and i != after]
    if candidates:
        event_turns = {t.invocation_id for t in await store.events.event_turns(conn, sid, owner, candidates)}
        firsts: dict[str, TurnInfo] = {}
        wanted_ids = set(candidates)
        for row in await store.tasks.tasks_carrying_any(conn, sid, owner, candidates):
            _complete(firsts, row, wanted_ids)
        for inv in candidates:
            first = firsts.get(inv)
            if inv not in event_turns and first is not None and first.started_at == window[inv].started_at:
                ordered.append(window[inv])
    ordered.sort(key=lambda t: t.started_at)
    page = ordered[:limit]
    # Each turn of the page completed by its tasks, as with_tasks does over every task: those of the span,
    # read above, and those outside it that carry one of the page's turns.
    ids = [t.invocation_id for t in page]
    by_id = {t.invocation_id: t for t in page}
    outside = await store.tasks.tasks_carrying_any(conn, sid, owner, ids, besides=(start, end)) if ids else []
    for row in sorted([*spanned, *outside], key=lambda r: r.created_at):
        _complete(by_id, row, by_id)
    return page, len(ordered) <= limit


async def invocations(
    svc: Services, caller: Caller, session_id: str, *, limit: int = 100, after: str | None = None
) -> Page:
    """Every turn, in order, a page at a time. One snapshot."""
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}")
    store = svc.store
    async with svc.connection() as conn:
        # The session's turn map is made true first (its own short transaction), then read in the
        # listing's snapshot if its guard holds there.
        source, _ = await visible_session(svc, conn, caller, session_id)
        mapped = await turn_map.prepare(store, conn, source.id, source.user_id)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            source, _ = await visible_session(svc, conn, caller, session_id)
            framework = await frameworks.detect(store, conn, source.id, source.user_id)
            # The turn map and the invocation index know turns by invocation id: an agent that writes none
            # (every framework but ADK) has its turns read from its tasks.
            adk = framework in ("adk", "adk-go", "unknown")
            if adk and mapped and await turn_map.usable(store, conn, source.id, source.user_id):
                return await _mapped_page(svc, conn, source, limit, after, framework)
            return await _read_page(svc, conn, source, limit, after, framework, indexed=adk)


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
    svc: Services, conn: Connection, source: SessionRow, limit: int, after: str | None, framework: str, *, indexed: bool
) -> Page:
    """A page read from kagent's rows: through the invocation index when it is there, else all of them."""
    use = svc.store.index_use
    if indexed and use.event_invocation and use.event_time and use.task_invocations and limit <= INDEXED_PAGE_MAX:
        page, last = await _indexed_page(svc, conn, source, limit, after)
        return Page(items=[_item(t, framework) for t in page], last=last)
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
    else:
        # Every task is a turn, also those its runtime wrote under kagent's default user (docs/frameworks.md).
        users = frameworks.runtime_users(source.user_id)
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
