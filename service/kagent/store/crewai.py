"""kagent 0.10.x's CrewAI rows (crewai_agent_memory, crewai_flow_state); docs/frameworks.md."""

from __future__ import annotations

from datetime import datetime

from service.kagent.store.base import Connection, Queries


class CrewAI:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def last_change(self, conn: Connection, thread_id: str, users: list[str]) -> datetime | None:
        changed: datetime | None = await conn.fetchval(self.q["crewai_last_change"], thread_id, users)
        return changed

    async def copy(self, conn: Connection, thread_id: str, users: list[str], new_thread_id: str) -> tuple[int, int]:
        """Copy the thread's memory and flow-state rows to the new thread; (memory rows, flow-state rows)."""
        row = await conn.fetchrow(self.q["copy_crewai"], thread_id, users, new_thread_id)
        return (int(row["memory"]), int(row["flows"])) if row is not None else (0, 0)
