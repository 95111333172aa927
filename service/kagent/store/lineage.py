"""The service's lineage of forks, idempotent answers, key locks and the fork rate."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from service.kagent.store.base import (
    CONNECTION_ERRORS,
    Connection,
    Queries,
)


@dataclass(frozen=True, kw_only=True)
class Lineage:
    session_id: str
    user_id: str
    parent_session_id: str
    parent_user_id: str
    root_session_id: str
    root_user_id: str
    depth: int
    rewind_before_invocation_id: str | None
    rewind_before_task_id: str | None
    framework: str | None
    boundary_found: bool
    events_copied: int
    tasks_copied: int
    messages_copied: int
    task_layout: str
    warnings: str  # a JSON array, as stored
    summary: str | None  # the branch summary as stored (JSON), None when the fork left nothing behind
    created_at: datetime


class LineageStore:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def lineage_of(self, conn: Connection, session_id: str, user_id: str) -> Lineage | None:
        row = await conn.fetchrow(self.q["lineage_of"], session_id, user_id)
        return None if row is None else Lineage(**dict(row))

    async def insert_lineage(self, conn: Connection, record: Lineage, *, created_by: str) -> None:
        await conn.execute(
            self.q["insert_lineage"],
            record.session_id, record.user_id, record.parent_session_id, record.parent_user_id,
            record.root_session_id, record.root_user_id, record.depth, record.rewind_before_invocation_id,
            record.boundary_found, record.events_copied, record.tasks_copied, record.messages_copied,
            record.task_layout, record.warnings, record.summary, created_by, record.rewind_before_task_id,
            record.framework,
        )  # fmt: skip

    async def idempotent_answer(
        self, conn: Connection, user_id: str, key: str, ttl_seconds: int
    ) -> tuple[str, str] | None:
        """(request hash, stored answer as JSON text) of a fresh record for this caller's key."""
        row = await conn.fetchrow(self.q["idempotency_get"], user_id, key, float(ttl_seconds))
        return None if row is None else (row["request_hash"], row["response"])

    async def remember_answer(
        self,
        conn: Connection,
        *,
        user_id: str,
        key: str,
        request_hash: str,
        session_id: str,
        answer: str,
        ttl_seconds: int,
    ) -> None:
        await conn.execute(self.q["idempotency_purge"], float(ttl_seconds))
        await conn.execute(self.q["idempotency_put"], user_id, key, request_hash, session_id, answer)

    @contextlib.asynccontextmanager
    async def key_lock(self, conn: Connection, scope: str, key: str) -> AsyncIterator[None]:
        """A session-level advisory lock on (scope, key), held for the block. A connection that died
        took its locks with it (so its unlock failing is no failure of the block: work the block committed
        stays answered as committed), and the pool's reset unlocks whatever a cancelled block left."""
        await self.lock_key(conn, scope, key)
        try:
            yield
        finally:
            if not conn.is_closed():
                with contextlib.suppress(*CONNECTION_ERRORS):
                    await self.unlock_key(conn, scope, key)

    async def fork_exists(self, conn: Connection, session_id: str, user_id: str) -> bool:
        return bool(await conn.fetchval(self.q["fork_exists"], session_id, user_id))

    async def lock_key(self, conn: Connection, scope: str, key: str) -> None:
        await conn.execute(self.q["advisory_lock"], f"{scope}\n{key}")

    async def unlock_key(self, conn: Connection, scope: str, key: str) -> None:
        await conn.execute(self.q["advisory_unlock"], f"{scope}\n{key}")

    async def fork_rate_wait(self, conn: Connection, user_id: str, rate: int) -> float | None:
        """None if the user made fewer than `rate` forks in the last minute, else the seconds to wait."""
        wait = await conn.fetchval(self.q["fork_rate_wait"], user_id, rate)
        return None if wait is None else max(float(wait), 0.0)

    async def forks_of(self, conn: Connection, session_id: str, user_id: str) -> list[Lineage]:
        return [Lineage(**dict(r)) for r in await conn.fetch(self.q["forks_of"], session_id, user_id)]
