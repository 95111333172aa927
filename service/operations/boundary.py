"""The turn a request names, by its invocation or by its task, and a mapped session's boundary: what forks,
rewinds, transcripts and replays all read before they cut (none of them writes here)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.kagent import dialects
from service.kagent.store.base import Connection
from service.kagent.store.sessions import SessionRow
from service.kagent.store.tasks import TaskRow
from service.operations import plan
from service.services import Services


@dataclass(frozen=True, kw_only=True)
class NamedTurn:
    """The turn a request names, by its invocation or by its task (`rewind_before_task_id`)."""

    invocation_id: str | None  # as asked, or the first turn the named task carries
    task: TaskRow | None = None  # the named task, when it carries no invocation id: the turn starts at it
    missing: str | None = None  # the task id asked for, when no live task of the session has it
    # With `task`: where the turn's events begin (its input event in an OpenAI Agents SDK session, else the
    # task's creation), and why the task's creation was taken when the input event could not be told.
    events_from: datetime | None = None
    note: str | None = None


async def named_turn(
    svc: Services, conn: Connection, source: SessionRow, invocation_id: str | None, task_id: str | None
) -> NamedTurn:
    """The turn named by `invocation_id` or `task_id` (one_boundary checked that not both). A task names
    the first turn it carries; a task of an agent that writes no invocation id (every framework but ADK)
    names the turn that starts with it."""
    if task_id is None:
        return NamedTurn(invocation_id=invocation_id)
    row = await svc.store.tasks.owned_task(conn, source.id, source.user_id, task_id)
    if row is None:
        return NamedTurn(invocation_id=None, missing=task_id)
    try:
        invocation = dialects.first_turn_invocation(dialects.decode(row.data))
    except dialects.TaskFormatError:
        invocation = None
    if invocation is not None:
        return NamedTurn(invocation_id=invocation)
    # A turn known by its task alone. In an OpenAI Agents SDK session its events begin at its input event,
    # which kagent-openai writes a few ms after the task, or before it (docs/frameworks.md, "Naming a turn").
    found = await svc.store.events.turn_input(conn, source.id, source.user_id, row.id)
    note = None
    if found.inputs and not found.paired:
        note = (
            f"the session's turn inputs do not pair one to one with its tasks: the turn of task {row.id} is cut "
            "at the task's creation, not at its input event"
        )
    return NamedTurn(invocation_id=None, task=row, events_from=found.at or row.created_at, note=note)


async def mapped_boundary(
    svc: Services, conn: Connection, source: SessionRow, invocation_id: str
) -> tuple[datetime | None, list[TaskRow]]:
    """The turn's first event and the candidates for its task, as the exact searches find them, read from
    the session's turn map (which the caller found trusted in its snapshot)."""
    store, sid, owner = svc.store, source.id, source.user_id
    turn = await store.turn_maps.turn(conn, sid, owner, invocation_id)
    if turn is None:
        return None, []
    at = turn.event_first_at
    if at is not None and turn.event_first_id is not None:
        # A turn begins at the header_update just before its first event (plan.turn_start, boundary_event's rule).
        opening = await store.turn_maps.opening(conn, sid, owner, (at, turn.event_first_id))
        if opening is not None and opening[0] == at:  # an earlier event at the same instant: ask kagent's rows
            at = await store.events.boundary_event_at(
                conn, sid, owner, invocation_id, prefilter=dialects.verbatim_in_json(invocation_id)
            )
        elif opening is not None and plan.turn_start([opening[1], invocation_id], invocation_id) == 0:
            at = opening[0]
    rows = await store.turn_maps.tasks_by_id(conn, sid, owner, [turn.task_id] if turn.task_id else [])
    tasks = [TaskRow(id=r.id, created_at=r.created_at, protocol_version=r.protocol_version, data=r.data) for r in rows]
    return at, tasks
