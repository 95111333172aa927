"""Rewinds: hiding rows with one stamp, the rewind records, and undo."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.kagent.store.base import (
    Connection,
    Queries,
    row_count,
)


@dataclass(frozen=True, kw_only=True)
class Rewind:
    id: str
    session_id: str
    user_id: str
    rewind_before_invocation_id: str | None
    deleted_at: datetime
    events_removed: int
    tasks_removed: int
    replaced_task_id: str | None
    replacement_task_id: str | None
    requested_by: str
    summary: str | None  # the branch summary as stored (JSON), None when the rewind hid no event
    created_at: datetime
    undone_at: datetime | None
    rewind_before_task_id: str | None = None
    # The user whose rows the rewind hid when not the owner's (a runtime that wrote under kagent's default user).
    rows_user_id: str | None = None

    @property
    def keeper(self) -> str:
        return self.rows_user_id or self.user_id


class Rewinds:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def hide_from(
        self,
        conn: Connection,
        session_id: str,
        owner: str,
        *,
        events_from: datetime,
        tasks_from: datetime,
        stamp: datetime,
    ) -> tuple[int, int]:
        """Soft-delete events and tasks from the given times with one stamp; (events, tasks) hidden."""
        events = row_count(await conn.execute(self.q["hide_events_from"], session_id, owner, events_from, stamp))
        tasks = row_count(await conn.execute(self.q["hide_tasks_from"], session_id, owner, tasks_from, stamp))
        return events, tasks

    async def rewind_stamp(self, conn: Connection, session_id: str, owner: str) -> datetime:
        """The stamp of a rewind of this (locked) session: later than the session's earlier ones."""
        value: datetime = await conn.fetchval(self.q["rewind_stamp"], session_id, owner)
        return value

    async def insert_rewind(self, conn: Connection, r: Rewind) -> datetime:
        created: datetime = await conn.fetchval(
            self.q["insert_rewind"], r.id, r.session_id, r.user_id, r.rewind_before_invocation_id, r.deleted_at,
            r.events_removed, r.tasks_removed, r.replaced_task_id, r.replacement_task_id, r.requested_by,
            r.summary, r.rewind_before_task_id, r.rows_user_id,
        )  # fmt: skip
        return created

    async def get_rewind(self, conn: Connection, rewind_id: str, session_id: str, owner: str) -> Rewind | None:
        row = await conn.fetchrow(self.q["get_rewind"], rewind_id, session_id, owner)
        return None if row is None else Rewind(**dict(row))

    async def list_rewinds(self, conn: Connection, session_id: str, owner: str) -> list[Rewind]:
        return [Rewind(**dict(r)) for r in await conn.fetch(self.q["list_rewinds"], session_id, owner)]

    async def later_rewind_pending(self, conn: Connection, r: Rewind) -> bool:
        return bool(await conn.fetchval(self.q["later_rewind_pending"], r.session_id, r.user_id, r.created_at, r.id))

    async def activity_since(self, conn: Connection, r: Rewind) -> bool:
        return bool(
            await conn.fetchval(self.q["activity_since"], r.session_id, r.keeper, r.deleted_at, r.replacement_task_id)
        )

    async def restore(self, conn: Connection, r: Rewind) -> tuple[int, int]:
        events = row_count(await conn.execute(self.q["restore_events"], r.session_id, r.keeper, r.deleted_at))
        tasks = row_count(await conn.execute(self.q["restore_tasks"], r.session_id, r.keeper, r.deleted_at))
        if r.replacement_task_id is not None:
            await conn.execute(self.q["hide_task"], r.replacement_task_id)
        return events, tasks

    async def mark_undone(self, conn: Connection, rewind_id: str) -> datetime:
        value: datetime = await conn.fetchval(self.q["mark_undone"], rewind_id)
        return value
