"""kagent's task rows: candidates for a turn's task, streams of kept tasks, and writing new ones."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from asyncpg import Record

from service.kagent.store.base import (
    TASK_COLUMNS,
    TASK_FETCH_BATCH,
    TASK_TEXT_COLUMNS,
    Connection,
    Queries,
)


@dataclass(frozen=True, kw_only=True)
class TaskRow:
    id: str
    created_at: datetime
    protocol_version: str | None
    data: str


@dataclass(frozen=True, kw_only=True)
class RecentTasks:
    """Of the session's newest tasks, those that mention a text (oldest first), and the oldest's time."""

    candidates: list[TaskRow]
    oldest: datetime | None


@dataclass(frozen=True, kw_only=True)
class NewTask:
    id: str
    created_at: datetime
    data: str
    session_id: str
    protocol_version: str | None
    user_id: str
    updated_at: datetime


def _task(row: Any) -> TaskRow:
    return TaskRow(
        id=row["id"], created_at=row["created_at"], protocol_version=row["protocol_version"], data=row["data"]
    )


class Tasks:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def tasks_mentioning(
        self, conn: Connection, session_id: str, owner: str, invocation_id: str, *, prefilter: bool
    ) -> list[TaskRow]:
        """The candidates for the tasks that carry the invocation, oldest first (the caller confirms
        in the parsed JSON): every task that mentions the id (each decompressed)."""
        rows = await conn.fetch(self.q["tasks_mentioning"], session_id, owner, invocation_id, prefilter)
        return [_task(r) for r in rows]

    async def tasks_mentioning_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None, text: str
    ) -> list[TaskRow]:
        rows = await conn.fetch(self.q["tasks_mentioning_before"], session_id, owner, before, text)
        return [_task(r) for r in rows]

    async def recent_tasks_mentioning(
        self, conn: Connection, session_id: str, owner: str, text: str, *, prefilter: bool
    ) -> RecentTasks:
        rows = await conn.fetch(self.q["recent_tasks_mentioning"], session_id, owner, text, prefilter)
        return RecentTasks(candidates=[_task(r) for r in rows], oldest=rows[0]["oldest"] if rows else None)

    async def task_by_id(self, conn: Connection, task_id: str, session_id: str) -> TaskRow | None:
        row = await conn.fetchrow(self.q["task_by_id"], task_id, session_id)
        return None if row is None else _task(row)

    async def owned_task(self, conn: Connection, session_id: str, owner: str, task_id: str) -> TaskRow | None:
        row = await conn.fetchrow(self.q["owned_task"], session_id, owner, task_id)
        return None if row is None else _task(row)

    async def task_holding_text(self, conn: Connection, session_id: str, text: str) -> TaskRow | None:
        row = await conn.fetchrow(self.q["task_holding_text"], session_id, text)
        return None if row is None else _task(row)

    async def first_task(self, conn: Connection, session_id: str, owner: str) -> TaskRow | None:
        row = await conn.fetchrow(self.q["first_task"], session_id, owner)
        return None if row is None else _task(row)

    async def last_task_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None
    ) -> TaskRow | None:
        row = await conn.fetchrow(self.q["last_task_before"], session_id, owner, before)
        return None if row is None else _task(row)

    async def count_tasks(self, conn: Connection, session_id: str, owner: str) -> int:
        value: int = await conn.fetchval(self.q["count_tasks"], session_id, owner)
        return value

    async def stream_tasks_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None
    ) -> AsyncIterator[TaskRow]:
        """The tasks in created_at order through a server-side cursor (needs a transaction)."""
        async for row in self._stream(conn, "tasks_before", session_id, owner, before):
            yield row

    async def read_ahead_tasks_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None
    ) -> AsyncGenerator[list[TaskRow], None]:
        """stream_tasks_before a batch at a time, the next batch asked for before this one is given: PostgreSQL
        reads it (decompressing each text) while the caller works on this one. The caller runs nothing else on
        `conn` until the last batch (needs a transaction)."""
        cursor = await conn.cursor(self.q["tasks_before"], session_id, owner, before)
        pending: asyncio.Future[list[Record]] | None = asyncio.ensure_future(cursor.fetch(TASK_FETCH_BATCH))
        try:
            while pending is not None:
                rows = await pending
                pending = None
                if len(rows) == TASK_FETCH_BATCH:
                    pending = asyncio.ensure_future(cursor.fetch(TASK_FETCH_BATCH))
                    await asyncio.sleep(0)  # its request sent before this batch is worked on
                if rows:
                    yield [_task(r) for r in rows]
        finally:
            if pending is not None:  # waited for, not cancelled: a cancelled statement would abort the transaction
                await asyncio.wait((pending,))

    async def stream_runtime_tasks(
        self, conn: Connection, session_id: str, owner: str, users: list[str]
    ) -> AsyncIterator[TaskRow]:
        """The tasks the owner owns or `users` wrote, in created_at order (server-side cursor)."""
        async for row in self._stream(conn, "runtime_tasks", session_id, owner, users):
            yield row

    async def runtime_tasks_by_id(
        self, conn: Connection, session_id: str, owner: str, users: list[str], task_ids: list[str]
    ) -> list[TaskRow]:
        """Of the tasks stream_runtime_tasks reads, those of `task_ids`, oldest first."""
        rows = await conn.fetch(self.q["runtime_tasks_by_id"], session_id, owner, users, task_ids)
        return [_task(r) for r in rows]

    async def stream_tasks_from(
        self, conn: Connection, session_id: str, owner: str, start: datetime
    ) -> AsyncIterator[TaskRow]:
        """The tasks created at or after `start`, oldest first, through a server-side cursor."""
        async for row in self._stream(conn, "tasks_from", session_id, owner, start):
            yield row

    async def _stream(self, conn: Connection, query: str, *args: object) -> AsyncIterator[TaskRow]:
        async for row in conn.cursor(self.q[query], *args, prefetch=TASK_FETCH_BATCH):
            yield _task(row)

    async def task_versions_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None
    ) -> dict[str | None, int]:
        """How many kept tasks there are of each protocol_version."""
        rows = await conn.fetch(self.q["task_versions_before"], session_id, owner, before)
        return {r["protocol_version"]: int(r["tasks"]) for r in rows}

    async def stream_new_tasks(self, conn: Connection, tasks: AsyncIterator[NewTask]) -> None:
        """Write new task rows with one COPY fed while they are made (bounded memory)."""

        async def records() -> AsyncIterator[tuple[object, ...]]:
            async for t in tasks:
                yield (t.id, t.created_at, t.updated_at, t.data, t.session_id, t.protocol_version, t.user_id)

        await conn.copy_records_to_table("task", records=records(), columns=TASK_COLUMNS)

    async def copy_task_text(self, conn: Connection, text: AsyncIterator[bytes]) -> None:
        """Write task rows given as COPY text in TASK_TEXT_COLUMNS, read from `text` while it is made
        (nothing when it gives nothing)."""
        await conn.copy_to_table("task", source=text, columns=TASK_TEXT_COLUMNS, format="text")

    async def insert_tasks(self, conn: Connection, tasks: list[NewTask]) -> None:
        """Write new task rows with COPY; session.updated_at is the caller's to set."""
        if not tasks:
            return
        await conn.copy_records_to_table(
            "task",
            records=[
                (t.id, t.created_at, t.updated_at, t.data, t.session_id, t.protocol_version, t.user_id) for t in tasks
            ],
            columns=TASK_COLUMNS,
        )
