"""The turns of a conversation, in order, so that a person or a UI can pick a fork point."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import msgspec

from service import fork as plan
from service import tasks
from service.errors import BadRequest
from service.identity import Caller
from service.operations import visible_session
from service.schemas import rfc3339
from service.services import Services
from service.store import Connection, SessionRow

MAX_PAGE = 1000
USER_TEXT_CHARS = 200


class Invocation(msgspec.Struct, frozen=True, kw_only=True):
    invocation_id: str
    task_id: str | None
    state: str | None
    started_at: str
    user_text: str | None
    event_count: int


@dataclass(frozen=True, kw_only=True)
class Page:
    items: list[Invocation]
    last: bool


@dataclass(kw_only=True)
class TurnInfo:
    """A turn as the listing knows it: from its events, completed by its task."""

    invocation_id: str
    started_at: datetime
    event_count: int = 0
    user_text: str | None = None
    task_id: str | None = None
    state: str | None = None


async def turn_index(svc: Services, conn: Connection, source: SessionRow) -> dict[str, TurnInfo]:
    """Every turn of the session by invocation id: from the events (Python and Go ADK, parsed in
    PostgreSQL), completed by the tasks (task id, state, and turns known only to the tasks), streamed.
    Needs a transaction."""
    turns = {
        t.invocation_id: TurnInfo(
            invocation_id=t.invocation_id, started_at=t.started_at, event_count=t.event_count,
            user_text=t.user_text,
        )
        for t in await svc.store.event_turns(conn, source.id, source.user_id)
    }  # fmt: skip
    return await with_tasks(svc, conn, source, turns)


async def with_tasks(
    svc: Services, conn: Connection, source: SessionRow, turns: dict[str, TurnInfo]
) -> dict[str, TurnInfo]:
    """`turns` completed by the session's tasks (streamed): each turn's first task and its state, the
    user text when the events had none, and the turns only tasks know (started at the task's time)."""
    async for row in svc.store.stream_tasks_before(conn, source.id, source.user_id, None):
        try:
            data = tasks.decode(row.data)
        except tasks.TaskFormatError:
            continue
        dialect = plan.dialect_of(row)
        for invocation_id in tasks.invocation_ids(data):
            turn = turns.setdefault(invocation_id, TurnInfo(invocation_id=invocation_id, started_at=row.created_at))
            if turn.task_id is None:
                turn.task_id, turn.state = row.id, tasks.state(data)
            if turn.user_text is None:
                text = tasks.first_user_text(data, dialect, invocation_id)
                turn.user_text = text[:USER_TEXT_CHARS] if text else None
    return turns


async def invocations(
    svc: Services, caller: Caller, session_id: str, *, limit: int = 100, after: str | None = None
) -> Page:
    """Every turn, in order, a page at a time. One snapshot."""
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}")
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, _ = await visible_session(svc, conn, caller, session_id)
        turns = await turn_index(svc, conn, source)
    ordered = sorted(turns.values(), key=lambda t: t.started_at)
    start = 0
    if after is not None:
        index = next((i for i, t in enumerate(ordered) if t.invocation_id == after), None)
        if index is None:
            raise BadRequest(f"after names no turn of this session: {after}")
        start = index + 1
    page = ordered[start : start + limit]
    return Page(
        items=[
            Invocation(
                invocation_id=t.invocation_id, task_id=t.task_id, state=t.state, started_at=rfc3339(t.started_at),
                user_text=t.user_text, event_count=t.event_count,
            )
            for t in page
        ],
        last=start + limit >= len(ordered),
    )  # fmt: skip
