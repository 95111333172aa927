"""kagent 0.10.x's LangGraph checkpoint rows (lg_checkpoint, lg_checkpoint_write) and the task ids a fork of
them maps; docs/frameworks.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from service.kagent.store.base import Connection, Queries, row_count


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """A checkpoint's key, parent and metadata (its blob stays in PostgreSQL)."""

    user_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    metadata: str  # base64 of the checkpoint's JSON metadata, as kagent stores it


def _keys(rows: Sequence[Checkpoint]) -> tuple[list[str], list[str], list[str]]:
    return [c.user_id for c in rows], [c.checkpoint_ns for c in rows], [c.checkpoint_id for c in rows]


class LangGraph:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def checkpoints(self, conn: Connection, thread_id: str, users: list[str]) -> list[Checkpoint]:
        rows = await conn.fetch(self.q["lg_checkpoints"], thread_id, users)
        return [Checkpoint(**dict(r)) for r in rows]

    async def copy(self, conn: Connection, thread_id: str, new_thread_id: str, rows: Sequence[Checkpoint]) -> int:
        """Copy `rows` (their metadata already the fork's) to the new thread inside PostgreSQL, with the writes of
        each; how many writes were copied."""
        copied = row_count(
            await conn.execute(
                self.q["copy_lg_checkpoints"], thread_id, new_thread_id, *_keys(rows), [c.metadata for c in rows]
            )
        )
        if copied != len(rows):  # the fork's snapshot holds them all: anything else is no copy to keep
            raise LookupError(f"{copied} of {len(rows)} checkpoints copied")
        return row_count(await conn.execute(self.q["copy_lg_writes"], thread_id, new_thread_id, *_keys(rows)))

    async def hide(self, conn: Connection, thread_id: str, rows: Sequence[Checkpoint], stamp: datetime) -> int:
        """Soft-delete the checkpoints and their writes with one stamp; how many checkpoints."""
        row = await conn.fetchrow(self.q["hide_lg_checkpoints"], thread_id, stamp, *_keys(rows))
        return int(row["checkpoints"]) if row is not None else 0

    async def restore(self, conn: Connection, thread_id: str, stamp: datetime) -> int:
        row = await conn.fetchrow(self.q["restore_lg_checkpoints"], thread_id, stamp)
        return int(row["checkpoints"]) if row is not None else 0

    async def task_ids_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None
    ) -> list[tuple[str, datetime]]:
        return [
            (r["id"], r["created_at"]) for r in await conn.fetch(self.q["task_ids_before"], session_id, owner, before)
        ]

    async def task_ids_hidden(self, conn: Connection, session_id: str, stamp: datetime) -> set[str]:
        return {r["id"] for r in await conn.fetch(self.q["task_ids_hidden"], session_id, stamp)}
