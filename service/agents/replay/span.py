"""What a replay re-asks: the span of source turns from the boundary on, each with the user message to send
again and the estimated context before it. From the invocations (the turn listing's event turns, or the
source's turn map when it is trusted), or, for an agent that writes no invocation id, from the tasks (the
listing's one turn per task)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from datetime import datetime

from service.agents.replay.terms import MAX_BRANCHES, Boundary, Replay, SourceTurn, Span, whole
from service.branches import turns as turn_listing
from service.errors import NotFound, Unprocessable
from service.identity import Seen
from service.kagent import dialects, frameworks, turn_map
from service.kagent.store.agents import agent_ref_of
from service.kagent.store.base import Connection
from service.kagent.store.sessions import SessionRow
from service.kagent.store.tasks import TaskRow
from service.operations import boundary as boundaries
from service.operations import plan
from service.services import Services


async def start_turn(svc: Services, conn: Connection, seen: Seen, replay: Replay) -> Boundary:
    """The turn a replay starts from, named by invocation or by task (one of the two: the engine checked it).
    A task of an ADK agent names its invocation's turn; a task of an agent that writes no invocation id names
    the turn that starts with it."""
    invocation_id, task_id, session_id = replay.invocation_id, replay.task_id, replay.session_id
    if task_id is None:
        return Boundary(invocation_id=invocation_id, task_id=None)
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        rows = await runtime_rows(svc, conn, seen)
        named = await boundaries.named_turn(svc, conn, rows, None, task_id)
    if named.missing is not None:
        raise NotFound(f"task {task_id} not found in session {session_id}")
    if named.invocation_id is None:
        return Boundary(invocation_id=None, task_id=task_id)
    return Boundary(invocation_id=named.invocation_id, task_id=None)


async def turns_read_from(
    svc: Services, conn: Connection, source: SessionRow
) -> tuple[str, SessionRow, tuple[str, ...]]:
    """The framework of a session read by no caller (an experiment's source, its creator's), where its turns are
    read (its runtime's own row when the runtime wrote them under kagent's default user, frameworks.runtime_session;
    else the session's), and whose rows of it are the owner's (frameworks.runtime_users), each asked once."""
    users = tuple(await frameworks.runtime_users(svc.store, conn, source.id, source.user_id))
    framework = await frameworks.detect(svc.store, conn, source.id, source.user_id, users)
    return framework, await frameworks.runtime_session(svc.store, conn, source, framework, users) or source, users


async def runtime_rows(svc: Services, conn: Connection, seen: Seen) -> SessionRow:
    """turns_read_from's row for a session whose access the door settled (its framework and users known)."""
    return await frameworks.runtime_session(svc.store, conn, seen.row, seen.framework, seen.users) or seen.row


def _count(wanted: int | float | str, available: int, boundary: str) -> int:
    """How many turns `wanted` asks for, of the `available` ones from the boundary on (422 out of range)."""
    count = available if wanted == "all" else whole(float(wanted), "turns")
    if count < 1:
        raise Unprocessable(f'turns must be 1 or more, or "all", got {count}')
    if count > available:
        raise Unprocessable(
            f"turns: the source holds {available} turn{'s' if available != 1 else ''} from {boundary} on, not {count}"
        )
    return count


async def task_span(svc: Services, conn: Connection, seen: Seen, task_id: str, wanted: int | float | str) -> Span:
    """The span of a turn known by its task alone (an agent without invocation ids): that turn and the later
    ones as the turn listing gives them (one turn per task, in the tasks' order), each re-asked with its task's
    first user message. Needs a (repeatable read) transaction."""
    source, session_id = seen.row, seen.row.id
    rows = await runtime_rows(svc, conn, seen)
    listed = await turn_listing.ordered_turns(svc, conn, source, seen.framework, seen.users)
    keys = [t.invocation_id for t in listed]
    at = keys.index(turn_listing.TASK_TURN + task_id) if turn_listing.TASK_TURN + task_id in keys else None
    if at is None:
        # Not a turn of its own in the listing (an ADK turn just started: its task carries no invocation id
        # yet, its events name the turn): it is re-asked alone.
        named = await svc.store.tasks.owned_task(conn, rows.id, rows.user_id, task_id)
        if named is None:
            raise NotFound(f"task {task_id} not found in session {session_id}")
        _count(wanted, 1, task_id)
        ids, found = [task_id], {task_id: named}
    else:
        # The turns from it on, as long as they are known by their tasks.
        ids = []
        for t in listed[at:]:
            if not t.invocation_id.startswith(turn_listing.TASK_TURN) or t.task_id is None:
                break
            ids.append(t.task_id)
        ids = ids[: _count(wanted, len(ids), task_id)]
        users = list(seen.users)
        found = {
            r.id: r for r in await svc.store.tasks.runtime_tasks_by_id(conn, source.id, source.user_id, users, ids)
        }
    turns: list[SourceTurn] = []
    for tid in ids:
        row, message = found.get(tid), None
        if row is not None:
            try:
                message = dialects.first_user_message(dialects.decode(row.data), plan.dialect_of(row))
            except dialects.TaskFormatError:
                message = None
        if row is None or message is None:
            raise Unprocessable(f"the turn of task {tid} has no user message to send")
        turns.append(SourceTurn(invocation_id=tid, message=message, started_at=row.created_at, task_id=tid))
    if at is None:
        chars = await svc.store.events.text_chars_before_each(conn, rows.id, rows.user_id, [turns[0].started_at])
        tokens = [math.ceil(chars.get(turns[0].started_at, 0) / 4)]
    else:
        # The context before each turn: the chat text of the turns before it (their events hold no ADK text).
        before = list(itertools.accumulate((t.text_chars for t in listed[at : at + len(turns) - 1]), initial=0))
        chars_before = sum(t.text_chars for t in listed[:at])
        tokens = [math.ceil((chars_before + n) / 4) for n in before]
    return Span(
        source=source, dialect=plan.dialect_of(found[task_id]), turns=turns, tokens=tokens,
        position=None if at is None else at + 1,
    )  # fmt: skip


async def _boundary_task(
    svc: Services, conn: Connection, source: SessionRow, invocation_id: str
) -> tuple[plan.BoundaryTask, dialects.TaskDialect, dialects.JSON]:
    prefilter = dialects.verbatim_in_json(invocation_id)
    candidates = await svc.store.tasks.tasks_mentioning(
        conn, source.id, source.user_id, invocation_id, prefilter=prefilter
    )
    found = plan.find_boundary_task(candidates, invocation_id)
    if found is None:
        if await svc.store.events.boundary_event_at(
            conn, source.id, source.user_id, invocation_id, prefilter=prefilter
        ):
            raise Unprocessable(f"no task of the session holds the turn {invocation_id}'s user message to send")
        raise NotFound(f"invocation {invocation_id} not found in session {source.id}")
    dialect = plan.dialect_of(found.row)
    message = dialects.user_message(dialects.decode(found.row.data), dialect, invocation_id)
    if message is None:
        raise Unprocessable(f"the turn {invocation_id} has no user message to send")
    return found, dialect, message


@dataclass(frozen=True, kw_only=True)
class _From:
    """The boundary turn's task and message, and the turns the events show from it on (the listing's)."""

    found: plan.BoundaryTask  # the boundary's task (`task`) and where its history is cut
    dialect: dialects.TaskDialect
    first: dialects.JSON
    later: list[tuple[str, datetime]]  # (invocation id, start): empty for a turn only its task knows
    position: int | None
    count: int | None = None  # how many turns are re-asked, when known before the task was looked for

    @property
    def task(self) -> TaskRow:
        return self.found.row


async def _exact_from(
    svc: Services, conn: Connection, source: SessionRow, boundary: str, wanted: int | float | str
) -> _From:
    """The turns the events show from the boundary on, how many of them are re-asked (when the events know the
    turn: the task search, the last step, is not made for a count out of range), then the boundary's task."""
    listed = await svc.store.events.event_turns(conn, source.id, source.user_id)
    ids = [t.invocation_id for t in listed]
    at = ids.index(boundary) if boundary in ids else None
    later = [(t.invocation_id, t.started_at) for t in listed[at:]] if at is not None else []
    count = _count(wanted, len(later), boundary) if later else None
    found, dialect, first = await _boundary_task(svc, conn, source, boundary)
    return _From(
        found=found, dialect=dialect, first=first, later=later, position=None if at is None else at + 1, count=count
    )


async def _mapped_from(svc: Services, conn: Connection, source: SessionRow, boundary: str) -> _From | None:
    """_exact_from read from the source's turn map (trusted in this snapshot); None: the exact path answers
    (a turn the map does not know, or whose task does not carry it as the reader sees it)."""
    maps, sid, owner = svc.store.turn_maps, source.id, source.user_id
    turn = await maps.turn(conn, sid, owner, boundary)
    if turn is None or turn.task_id is None or turn.started_at is None:
        return None
    row = await svc.store.tasks.task_by_id(conn, turn.task_id, sid)
    found = plan.find_boundary_task([row], boundary) if row is not None else None
    if row is None or found is None:
        return None
    dialect = plan.dialect_of(row)
    first = dialects.user_message(dialects.decode(row.data), dialect, boundary)
    if first is None:
        raise Unprocessable(f"the turn {boundary} has no user message to send")
    if not turn.has_messages:
        return _From(found=found, dialect=dialect, first=first, later=[], position=None)
    rest = await maps.turn_page(conn, sid, owner, turn, 1 << 30)
    later = [(turn.invocation_id, turn.started_at)]
    later += [(t.invocation_id, t.started_at) for t in rest if t.has_messages and t.started_at is not None]
    position = await maps.figures.event_turns_before(conn, sid, owner, turn) + 1
    return _From(found=found, dialect=dialect, first=first, later=later, position=position)


async def _tokens_before(
    svc: Services, conn: Connection, source: SessionRow, times: list[datetime], mapped: bool
) -> list[int]:
    """The transcript's estimated_context_tokens before each time: the map's running sums, else the events."""
    sid, owner = source.id, source.user_id
    if mapped:
        figures = [await svc.store.turn_maps.figures.figures_before(conn, sid, owner, at) for at in times]
        if all(f is not None for f in figures):
            return [math.ceil(f[2] / 4) for f in figures if f is not None]
    chars = await svc.store.events.text_chars_before_each(conn, sid, owner, sorted(set(times)))
    return [math.ceil(chars.get(at, 0) / 4) for at in times]


async def span_of(svc: Services, conn: Connection, seen: Seen, boundary: Boundary, wanted: int | float | str) -> Span:
    """The span from the boundary (read_span, or task_span for a turn known by its task alone) in a read-only
    snapshot of its own, the source's turn map made true first (outside it)."""
    if boundary.task_id is not None:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            return await task_span(svc, conn, seen, boundary.task_id, wanted)
    mapped = await turn_map.prepare(svc.store, conn, seen.row.id, seen.owner)
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        return await read_span(svc, conn, seen, boundary.key, wanted, mapped=mapped)


async def read_span(
    svc: Services,
    conn: Connection,
    seen: Seen,
    boundary: str,
    wanted: int | float | str,
    *,
    mapped: bool = False,
) -> Span:
    """The source turns from `boundary` on (`wanted` of them, or "all"), each with the user message to send
    again and the estimated context before it. Needs a (repeatable read) transaction; `mapped`: the
    source's turn map was prepared before it (read if its guard holds here)."""
    source = seen.row
    mapped = mapped and await turn_map.usable(svc.store, conn, source.id, source.user_id)
    found = await _mapped_from(svc, conn, source, boundary) if mapped else None
    if found is None:
        found = await _exact_from(svc, conn, source, boundary, wanted)
    task, dialect, later = found.task, found.dialect, found.later
    # A turn only its task knows (no events) can be asked; nothing after it is known.
    count = found.count if found.count is not None else _count(wanted, max(len(later), 1), boundary)
    turns = [
        SourceTurn(invocation_id=boundary, message=found.first, started_at=later[0][1] if later else task.created_at)
    ]
    wanted_ids = dict(later[1:count])
    messages: dict[str, dialects.JSON] = {}
    if wanted_ids:
        async for row in svc.store.tasks.stream_tasks_from(conn, source.id, source.user_id, task.created_at):
            try:
                data = dialects.decode(row.data)
            except dialects.TaskFormatError:
                continue
            for inv in dialects.invocation_ids(data):
                if inv in wanted_ids and inv not in messages:
                    message = dialects.user_message(data, plan.dialect_of(row), inv)
                    if message is not None:
                        messages[inv] = message
    for inv, started_at in later[1:count]:
        if inv not in messages:
            raise Unprocessable(f"the turn {inv} has no user message to send")
        turns.append(SourceTurn(invocation_id=inv, message=messages[inv], started_at=started_at))
    tokens = await _tokens_before(svc, conn, source, [t.started_at for t in turns], mapped)
    return Span(
        source=source, dialect=dialect, turns=turns, tokens=tokens, position=found.position, found=found.found,
    )  # fmt: skip


def with_control(replay: Replay, source: SessionRow) -> Replay:
    """The replay with the source's own agent among its agents when `control` asks for it: its verdict against the
    source is the noise floor, what running the same agent again scores against itself. Resolved here, where the
    source's agent is first known (its row, settled at the door), and counted against the branch limit (it is one
    more agent)."""
    if not replay.control or replay.agents is None:  # no agents named: the source's own agent is the only one
        return replay
    own = agent_ref_of(source.agent_id) if source.agent_id else None
    if own is None:
        raise Unprocessable(
            f"control: the source session's agent {source.agent_id!r} is not namespace/name, so it cannot "
            "be run again as the control"
        )
    if own in replay.agents:
        return replay
    agents, repeats = [*replay.agents, own], int(replay.repeats)
    if len(agents) * repeats > MAX_BRANCHES:
        raise Unprocessable(
            f"{len(agents)} agents (the control among them) x {repeats} repeats is {len(agents) * repeats} branches, "
            f"over {MAX_BRANCHES}"
        )
    return dataclasses.replace(replay, agents=agents)
