"""Rewind to here, and its undo: the same session loses a turn and everything after it, reversibly.

Both run in one READ COMMITTED transaction that first locks the session row (FOR UPDATE): rewinds
and undos of one session run one at a time, and each sees what the previous one committed, so two
rewinds at once can never hide the same rows twice. A fork reads one REPEATABLE READ snapshot and
never waits for them: it holds the conversation either before or after a concurrent rewind.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime

import msgspec

from service.errors import Conflict, Forbidden, NotFound, Unprocessable
from service.identity import Caller, Seen, settle, visible_session
from service.kagent import dialects, frameworks, turn_map
from service.kagent.store.base import Connection
from service.kagent.store.rewinds import Rewind
from service.kagent.store.sessions import SessionRow
from service.kagent.store.tasks import NewTask
from service.operations import checkpoints, copying, crewai_state, plan, summary
from service.operations.boundary import NamedTurn, mapped_boundary, named_turn
from service.schemas import RewindRequest, Session, Summary, one_boundary, rfc3339, session_json
from service.services import Services


class RewindInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: str | None
    rewind_before_invocation_id: str | None
    rewind_before_task_id: str | None
    events_removed: int
    tasks_removed: int
    created_at: str | None
    summary: Summary | None
    undone_at: str | None = None
    # What the rewind could not do as asked: an OpenAI Agents SDK turn whose input event could not be told
    # from the session's (its inputs do not pair with its tasks) is cut at its task's creation instead.
    warnings: tuple[str, ...] = ()


class RewindEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A rewind as the session's rewinds list shows it."""

    id: str
    rewind_before_invocation_id: str | None
    rewind_before_task_id: str | None
    events_removed: int
    tasks_removed: int
    created_at: str
    requested_by: str
    undone_at: str | None
    undoable: bool
    summary: Summary | None


class RewindResult(msgspec.Struct, frozen=True, kw_only=True):
    session: Session
    rewind: RewindInfo


class RewindPlan(msgspec.Struct, frozen=True, kw_only=True):
    dry_run: bool
    rewind: RewindInfo


# Agents whose memory a rewind of kagent's event and task rows would not change (docs/frameworks.md).
_KEPT_ELSEWHERE: dict[str, str] = {
    "claude": "its Claude Agent SDK agent keeps its conversation in its own pod",
}


@dataclass(frozen=True, kw_only=True)
class _Boundary:
    events_from: datetime
    tasks_from: datetime
    partial: plan.BoundaryTask | None  # a task holding turns before the boundary: replaced by its kept part


async def _boundary(
    svc: Services, conn: Connection, reader: Connection | None, source: SessionRow, named: NamedTurn, *, mapped: bool
) -> _Boundary:
    store, sid, owner = svc.store, source.id, source.user_id
    if named.task is not None:  # a turn known by its task alone: from the task, its events from its input
        events_from = named.events_from or named.task.created_at
        return _Boundary(events_from=events_from, tasks_from=named.task.created_at, partial=None)
    invocation_id = named.invocation_id
    if invocation_id is None:  # a destructive call never guesses
        raise NotFound(f"task {named.missing} not found in session {source.id}")
    prefilter = dialects.verbatim_in_json(invocation_id)
    if mapped:  # the turn map answers both searches
        event_at, candidates = await mapped_boundary(svc, conn, source, invocation_id)
    elif reader is not None:
        # Both searches read all of the session's rows of their table: at once, on two connections.
        event_at, candidates = await copying.together(
            store.events.boundary_event_at(conn, sid, owner, invocation_id, prefilter=prefilter),
            store.tasks.tasks_mentioning(reader, sid, owner, invocation_id, prefilter=prefilter),
        )
    else:
        event_at = await store.events.boundary_event_at(conn, sid, owner, invocation_id, prefilter=prefilter)
        candidates = await store.tasks.tasks_mentioning(conn, sid, owner, invocation_id, prefilter=prefilter)
    task = plan.find_boundary_task(candidates, invocation_id)
    if event_at is None and task is None:
        # A destructive call never guesses.
        raise NotFound(f"invocation {invocation_id} not found in session {source.id}")
    task_at = task.row.created_at if task is not None else event_at
    assert task_at is not None
    return _Boundary(
        events_from=event_at or task_at,
        tasks_from=task_at,
        partial=task if task is not None and task.cut > 0 else None,
    )


async def _tasks_hidden(
    svc: Services, conn: Connection, source: SessionRow, start: datetime, *, mapped: bool
) -> tuple[int, list[str]]:
    """How many tasks a rewind from `start` hides, and which of them the agent is still running (from the
    turn map when it is trusted: the states its tasks had when last read, which its guard holds true)."""
    if mapped:
        hidden = await svc.store.turn_maps.figures.tasks_from(conn, source.id, source.user_id, start)
        return len(hidden), [
            f"{task_id} ({state})" for task_id, state, terminal in hidden if terminal is False and state is not None
        ]
    count, running = 0, []
    async for row in svc.store.tasks.stream_tasks_from(conn, source.id, source.user_id, start):
        count += 1
        state = dialects.state_of(row.data)
        if state is not None and not dialects.is_terminal_state(state, plan.dialect_of(row)):
            running.append(f"{row.id} ({state})")
    return count, running


def _replacement(partial: plan.BoundaryTask, source: SessionRow, now: datetime) -> NewTask:
    """The kept part of a task that holds turns before the boundary, under a new id (kagent never
    writes a soft-deleted task id again, and the original stays for undo)."""
    dialect = plan.dialect_of(partial.row)
    data = dialects.cut(dialects.decode(partial.row.data), dialect, partial.cut)
    rw = dialects.Rewrite(task_id=str(uuid.uuid4()), context_id=source.id, user_id=source.user_id)
    text = dialects.encode(dialects.rewrite(data, rw))
    return NewTask(
        id=rw.task_id, created_at=partial.row.created_at, updated_at=now, data=text,
        session_id=source.id, protocol_version=partial.row.protocol_version, user_id=source.user_id,
    )  # fmt: skip


async def rewind(svc: Services, caller: Caller, session_id: str, req: RewindRequest) -> RewindResult | RewindPlan:
    one_boundary(req.rewind_before_invocation_id, req.rewind_before_task_id, required=True)
    store = svc.store
    async with svc.connection() as conn:
        # The session's turn map, made true first (its own transaction), read if its guard holds once the
        # session row is locked.
        # The session's access, settled once for the rewind (identity.Seen).
        seen = await settle(svc, conn, caller, session_id)
        mapped = await turn_map.prepare(store, conn, seen.row.id, seen.owner)
        async with conn.transaction():
            return await _rewind_locked(svc, conn, seen, req, mapped=mapped)


async def _rewind_locked(
    svc: Services, conn: Connection, seen: Seen, req: RewindRequest, *, mapped: bool
) -> RewindResult | RewindPlan:
    store, caller, framework = svc.store, seen.caller, seen.framework
    if seen.access.read_only:
        raise Forbidden("This share link is read-only")
    # The row locked (the access settled before, not asked again): one rewind of a session at a time.
    source = await store.sessions.get_session(conn, seen.row.id, seen.owner, lock=True)
    if source is None:
        raise NotFound("Session not found")
    sid, owner = source.id, source.user_id
    if framework in _KEPT_ELSEWHERE:
        raise Unprocessable(f"this session cannot be rewound: {_KEPT_ELSEWHERE[framework]}")
    if framework == "crewai" and await crewai_state.flow_in_pod(store, conn, sid, seen.users):
        raise Unprocessable(
            f"this session cannot be rewound: {crewai_state.FLOW_IN_POD}, where it keeps the hidden turns"
        )
    if framework == "langgraph" and not seen.checkpoints:
        raise Unprocessable(
            "this session cannot be rewound: its LangGraph agent keeps its state in its graph's own checkpointer, "
            "not in kagent's database (kagent main)"
        )
    # The rows are hidden where the agent's runtime wrote them: under kagent's default user in its own row of
    # the session (kagent-openai 0.10.4), else the owner's; the record stays the owner's (docs/frameworks.md).
    runtime = await frameworks.runtime_session(store, conn, source, framework, seen.users)
    rows = runtime or source
    keeper = rows.user_id
    named = await named_turn(svc, conn, rows, req.rewind_before_invocation_id, req.rewind_before_task_id)
    invocation_id, task_id = named.invocation_id, req.rewind_before_task_id
    mapped = mapped and await turn_map.usable(store, conn, sid, owner)
    large = not mapped and await store.tasks.count_tasks(conn, sid, keeper) >= copying.LARGE_FORK_TASKS
    # A large session's second connection, in the snapshot taken after the row lock: the boundary
    # searches run at once, then the summary of what the rewind hides reads the rows as they were
    # while this connection checks the turns' states and the UPDATEs hide them.
    # With the turn map both searches and the summary are reads of it: no second connection.
    async with copying.snapshot_reader(svc, conn, wanted=large) as reader:
        boundary = await _boundary(svc, conn, reader, rows, named, mapped=mapped)
        if framework == "crewai":  # its memory stays as it is: only if it did not change from the turn on
            await crewai_state.check_cut(store, conn, sid, seen.users, boundary.tasks_from, "a rewind")
        telling = None
        if framework in frameworks.TASK_CHAT:
            # Its chat is in its tasks: told from them (docs/frameworks.md), read here before they are hidden.
            told = await summary.summarize_tasks(store, conn, sid, keeper, boundary.tasks_from)
            telling = asyncio.ensure_future(asyncio.sleep(0, told))
        elif reader is not None:
            telling = asyncio.ensure_future(summary.summarize_events(store, reader, sid, keeper, boundary.events_from))
        try:
            hidden_count, running = await _tasks_hidden(svc, conn, rows, boundary.tasks_from, mapped=mapped)
            if running and not req.force:
                raise Conflict(
                    f"the agent is still running a turn at or after the boundary (tasks {', '.join(running)}); "
                    "wait for it, or send force: true"
                )
            if telling is None or req.dry_run:
                # Told before it is hidden: after the UPDATE this transaction no longer sees the rows.
                hides = await (
                    telling or summary.summarize_events(store, conn, sid, keeper, boundary.events_from, mapped=mapped)
                )
            if req.dry_run:
                info = RewindInfo(
                    id=None, rewind_before_invocation_id=invocation_id, rewind_before_task_id=task_id,
                    events_removed=hides.events if hides else 0,
                    tasks_removed=hidden_count, created_at=None, summary=hides, warnings=_noted(named),
                )  # fmt: skip
                return RewindPlan(dry_run=True, rewind=info)
            stamp = await store.rewinds.rewind_stamp(conn, sid, owner)
            events, hidden = await store.rewinds.hide_from(
                conn, sid, keeper, events_from=boundary.events_from, tasks_from=boundary.tasks_from, stamp=stamp
            )
            if framework == "langgraph":  # the graph's state of the hidden turns, with the same stamp
                keepers = seen.users if runtime is None else (keeper,)
                await checkpoints.hide_hidden_turns(store, conn, sid, keepers, stamp)
            if telling is not None:
                hides = await telling
        finally:
            if telling is not None:
                await copying.cancelled(telling)
    replacement = _replacement(boundary.partial, source, stamp) if boundary.partial else None
    if replacement is not None:
        await store.tasks.insert_tasks(conn, [replacement])
    session = await store.sessions.touch_session(conn, sid, owner)
    await turn_map.after_rewind(
        store, conn, sid, owner, events_from=boundary.events_from, tasks_from=boundary.tasks_from,
        hidden=(events, hidden), session_updated_at=session.updated_at,
        replacement=(replacement.id, replacement.created_at, replacement.updated_at, replacement.protocol_version,
                     replacement.data) if replacement else None,
        was_trusted=mapped,
    )  # fmt: skip
    record = Rewind(
        id=str(uuid.uuid4()), session_id=sid, user_id=owner, rewind_before_invocation_id=invocation_id,
        deleted_at=stamp, events_removed=events, tasks_removed=hidden,
        replaced_task_id=boundary.partial.row.id if boundary.partial else None,
        replacement_task_id=replacement.id if replacement else None, requested_by=caller.user_id,
        summary=summary.stored(hides), created_at=stamp, undone_at=None, rewind_before_task_id=task_id,
        rows_user_id=runtime.user_id if runtime else None,
    )  # fmt: skip
    created = await store.rewinds.insert_rewind(conn, record)
    return RewindResult(session=session_json(session), rewind=_info(record, created_at=created, warnings=_noted(named)))


def _noted(named: NamedTurn) -> tuple[str, ...]:
    return (named.note,) if named.note else ()


def _info(
    r: Rewind, *, created_at: datetime | None = None, undone_at: datetime | None = None, warnings: tuple[str, ...] = ()
) -> RewindInfo:
    undone = undone_at or r.undone_at
    return RewindInfo(
        id=r.id, rewind_before_invocation_id=r.rewind_before_invocation_id,
        rewind_before_task_id=r.rewind_before_task_id, events_removed=r.events_removed,
        tasks_removed=r.tasks_removed, created_at=rfc3339(created_at or r.created_at),
        summary=summary.loaded(r.summary), undone_at=rfc3339(undone) if undone else None, warnings=warnings,
    )  # fmt: skip


async def undo(svc: Services, caller: Caller, session_id: str, rewind_id: str) -> RewindResult:
    """Restore exactly the rows a rewind hid, if nothing has happened in the session since."""
    store = svc.store
    async with svc.connection() as conn, conn.transaction():
        source, access = await visible_session(svc, conn, caller, session_id, lock=True)
        if access.read_only:
            raise Forbidden("This share link is read-only")
        record = await store.rewinds.get_rewind(conn, rewind_id, source.id, source.user_id)
        if record is None:
            raise NotFound(f"rewind {rewind_id} not found in session {session_id}")
        if (refusal := await _undo_refusal(svc, conn, record)) is not None:
            raise Conflict(refusal)
        mapped = await turn_map.usable(store, conn, source.id, source.user_id)
        restored = await store.rewinds.restore(conn, record)
        await store.langgraph.restore(conn, source.id, record.deleted_at)  # a LangGraph rewind's checkpoints
        session = await store.sessions.touch_session(conn, source.id, source.user_id)
        await turn_map.after_undo(
            store, conn, source.id, source.user_id, restored=restored,
            replacement_hidden=record.replacement_task_id is not None, session_updated_at=session.updated_at,
            was_trusted=mapped,
        )  # fmt: skip
        undone = await store.rewinds.mark_undone(conn, record.id)
        return RewindResult(session=session_json(session), rewind=_info(record, undone_at=undone))


async def _undo_refusal(svc: Services, conn: Connection, record: Rewind) -> str | None:
    """Why an undo of this rewind would be refused now (409), or None: the one rule for undo and for
    the rewinds list's `undoable`."""
    if record.undone_at is not None:
        return f"rewind {record.id} was already undone"
    if await svc.store.rewinds.later_rewind_pending(conn, record):
        return "a later rewind of this session is not undone: undo that one first"
    if await svc.store.rewinds.activity_since(conn, record):
        return "the session has new events or tasks since this rewind: it can no longer be undone"
    return None


async def rewinds(svc: Services, caller: Caller, session_id: str) -> list[RewindEntry]:
    """The session's rewinds, newest first; `undoable`: this caller's undo would succeed now."""
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, access = await visible_session(svc, conn, caller, session_id)
        entries = []
        for r in await svc.store.rewinds.list_rewinds(conn, source.id, source.user_id):
            undoable = not access.read_only and await _undo_refusal(svc, conn, r) is None
            entries.append(
                RewindEntry(
                    id=r.id, rewind_before_invocation_id=r.rewind_before_invocation_id,
                    rewind_before_task_id=r.rewind_before_task_id,
                    events_removed=r.events_removed, tasks_removed=r.tasks_removed,
                    created_at=rfc3339(r.created_at), requested_by=r.requested_by,
                    undone_at=rfc3339(r.undone_at) if r.undone_at else None, undoable=undoable,
                    summary=summary.loaded(r.summary),
                )
            )  # fmt: skip
        return entries
