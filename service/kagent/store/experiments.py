"""Experiments: their rows (the branches are what-if jobs, store.jobs), the baseline column once computed,
their end, and the discards that hide their branches' forks and bring them back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.kagent.store.base import Connection, Queries
from service.kagent.store.jobs import WhatifJob


@dataclass(frozen=True, kw_only=True)
class ExperimentRow:
    id: str
    user_id: str
    source_session_id: str
    source_user_id: str
    source_agent_ref: str | None
    rewind_before_invocation_id: str | None  # None: a turn known by its task alone
    turns_requested: str  # "all" or a number, as asked
    turns: int
    message: str | None  # JSON {text}
    on_approval: str
    repeats: int
    source_turns: str | None  # JSON, once computed
    status: str
    created_at: datetime
    finished_at: datetime | None
    rewind_before_task_id: str | None = None  # the turn's task, when it has no invocation id (migration 0012)
    tool_policy: str | None = None  # JSON {mode, reads} (migration 0015; None on rows written before: all live)
    arms: str | None = None  # JSON, each agent's tools by class, as the start found them


@dataclass(frozen=True, kw_only=True)
class DiscardRow:
    id: str
    experiment_id: str
    user_id: str
    kept_session_id: str | None  # None: every branch discarded
    session_ids: list[str]  # the branch forks it hid
    deleted_at: datetime  # the stamp it set on them
    created_at: datetime
    undone_at: datetime | None
    restored_ids: list[str] | None  # the forks its undo brought back


class Experiments:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def insert_experiment(self, conn: Connection, e: ExperimentRow) -> datetime:
        created: datetime = await conn.fetchval(
            self.q["insert_experiment"], e.id, e.user_id, e.source_session_id, e.source_user_id, e.source_agent_ref,
            e.rewind_before_invocation_id, e.turns_requested, e.turns, e.message, e.on_approval, e.repeats,
            e.rewind_before_task_id, e.tool_policy, e.arms,
        )  # fmt: skip
        return created

    async def experiment(self, conn: Connection, experiment_id: str, user_id: str) -> ExperimentRow | None:
        row = await conn.fetchrow(self.q["get_experiment"], experiment_id, user_id)
        return None if row is None else ExperimentRow(**dict(row))

    async def experiment_to_vote(self, conn: Connection, experiment_id: str) -> ExperimentRow | None:
        """The experiment whoever created it: only for a vote, whose caller must be able to read its source."""
        row = await conn.fetchrow(self.q["get_experiment_to_vote"], experiment_id)
        return None if row is None else ExperimentRow(**dict(row))

    async def locked_experiment(self, conn: Connection, experiment_id: str, user_id: str) -> ExperimentRow | None:
        """The experiment, its row locked until the transaction ends (needs one)."""
        row = await conn.fetchrow(self.q["lock_experiment"], experiment_id, user_id)
        return None if row is None else ExperimentRow(**dict(row))

    async def experiments(self, conn: Connection, session_id: str, owner: str, user_id: str) -> list[ExperimentRow]:
        rows = await conn.fetch(self.q["list_experiments"], session_id, owner, user_id)
        return [ExperimentRow(**dict(r)) for r in rows]

    async def branches(self, conn: Connection, experiment_id: str) -> list[WhatifJob]:
        return [WhatifJob(**dict(r)) for r in await conn.fetch(self.q["experiment_jobs"], experiment_id)]

    async def keep_source_turns(self, conn: Connection, experiment_id: str, turns: str) -> None:
        await conn.execute(self.q["experiment_source_turns"], experiment_id, turns)

    async def settle(self, conn: Connection, experiment_id: str, status: str | None = None) -> str | None:
        """End the experiment when none of its branches runs any more: its status, or None (still running,
        or ended before)."""
        row = await conn.fetchrow(self.q["experiment_settle"], experiment_id, status)
        return None if row is None else str(row["status"])

    async def latest_discard(self, conn: Connection, experiment_id: str) -> DiscardRow | None:
        row = await conn.fetchrow(self.q["latest_discard"], experiment_id)
        return None if row is None else DiscardRow(**dict(row))

    async def discard_stamp(self, conn: Connection) -> datetime:
        value: datetime = await conn.fetchval(self.q["discard_stamp"])
        return value

    async def hide_sessions(self, conn: Connection, session_ids: list[str], owner: str, stamp: datetime) -> list[str]:
        """Hide the owner's visible sessions among these with one stamp: the ones hidden."""
        return [r["id"] for r in await conn.fetch(self.q["hide_sessions"], session_ids, owner, stamp)]

    async def insert_discard(self, conn: Connection, d: DiscardRow) -> datetime:
        created: datetime = await conn.fetchval(
            self.q["insert_discard"], d.id, d.experiment_id, d.user_id, d.kept_session_id, d.session_ids, d.deleted_at
        )
        return created

    async def restore_sessions(self, conn: Connection, d: DiscardRow) -> list[str]:
        """Bring back the sessions the discard hid that still carry its stamp: the ones brought back."""
        return [r["id"] for r in await conn.fetch(self.q["restore_sessions"], d.session_ids, d.user_id, d.deleted_at)]

    async def mark_discard_undone(self, conn: Connection, discard_id: str, restored: list[str]) -> datetime | None:
        value: datetime | None = await conn.fetchval(self.q["mark_discard_undone"], discard_id, restored)
        return value
