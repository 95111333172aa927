"""What-if jobs and their turns: the rows, heartbeats, each turn's sending and end, and the claim of a
dead replica's jobs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.kagent.store.base import (
    Connection,
    Queries,
)


@dataclass(frozen=True, kw_only=True)
class WhatifJob:
    id: str
    user_id: str
    parent_session_id: str
    parent_user_id: str
    session_id: str
    rewind_before_invocation_id: str | None  # None: a turn known by its task alone (rewind_before_task_id)
    agent_ref: str
    dialect: str
    message: str  # the first turn's A2A message, v1.0 JSON
    status: str
    task_id: str | None  # the agent's task of the turn running (or the last one)
    error: str | None
    result: str | None  # JSON
    runner: str
    created_at: datetime
    finished_at: datetime | None
    experiment_id: str | None = None
    repeat: int = 1
    agent_card: str | None = None  # JSON
    on_approval: str = "stop"
    stopped_at: str | None = None
    turns_total: int = 1
    turns_done: int = 0
    rewind_before_task_id: str | None = None
    # JSON, migration 0015 (None on rows written before, which ran every tool live): the policy the job runs with,
    # {mode, reads}, and what its agent could do, its tools by class (service/agents/replay/tools.py)
    tool_policy: str | None = None
    arm_tools: str | None = None


@dataclass(frozen=True, kw_only=True)
class JobTurn:
    job_id: str
    ordinal: int
    invocation_id: str  # the source turn it re-asks: its invocation id, or its task id when it has none
    message: str  # the A2A message (v1.0 JSON), exactly as sent
    sent_at: datetime | None
    task_id: str | None
    state: str | None
    reply: str | None  # a rejection sent to the agent (v1.0 JSON)
    reply_sent_at: datetime | None
    rejected_tool_calls: int
    figures: str | None  # JSON
    ended_at: datetime | None
    agent_found_at: datetime | None = None  # the agent first answered a tasks/get of the task (migration 0020)


class Jobs:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def insert_whatif_job(self, conn: Connection, job: WhatifJob) -> datetime:
        created: datetime = await conn.fetchval(
            self.q["insert_whatif_job"], job.id, job.user_id, job.parent_session_id, job.parent_user_id,
            job.session_id, job.rewind_before_invocation_id, job.agent_ref, job.dialect, job.message, job.runner,
            job.experiment_id, job.repeat, job.agent_card, job.on_approval, job.turns_total, job.rewind_before_task_id,
            job.tool_policy, job.arm_tools,
        )  # fmt: skip
        return created

    async def insert_whatif_turns(self, conn: Connection, job_id: str, turns: list[tuple[str, str]]) -> None:
        """The job's turns: (source invocation id, message JSON) each, in order."""
        await conn.execute(
            self.q["insert_whatif_turns"], job_id, list(range(len(turns))), [t[0] for t in turns],
            [t[1] for t in turns],
        )  # fmt: skip

    async def whatif_job(self, conn: Connection, job_id: str, user_id: str) -> WhatifJob | None:
        row = await conn.fetchrow(self.q["get_whatif_job"], job_id, user_id)
        return None if row is None else WhatifJob(**dict(row))

    async def whatif_jobs(self, conn: Connection, session_id: str, owner: str, user_id: str) -> list[WhatifJob]:
        rows = await conn.fetch(self.q["list_whatif_jobs"], session_id, owner, user_id)
        return [WhatifJob(**dict(r)) for r in rows]

    async def whatif_turns(self, conn: Connection, job_id: str) -> list[JobTurn]:
        return [JobTurn(**dict(r)) for r in await conn.fetch(self.q["whatif_turns"], job_id)]

    async def whatif_turns_of_jobs(self, conn: Connection, job_ids: list[str]) -> dict[str, list[JobTurn]]:
        out: dict[str, list[JobTurn]] = {j: [] for j in job_ids}
        for r in await conn.fetch(self.q["whatif_turns_of_jobs"], job_ids):
            out[r["job_id"]].append(JobTurn(**dict(r)))
        return out

    async def whatif_task(self, conn: Connection, job_id: str, task_id: str, ordinal: int = 0) -> bool:
        """Record the turn's task id: whether the job still runs."""
        return bool(await conn.fetchval(self.q["whatif_task"], job_id, task_id, ordinal))

    async def whatif_turn_sending(self, conn: Connection, job_id: str, ordinal: int, runner: str) -> datetime | None:
        """Stamp the turn as sent before sending it: the stamp, or None when it was stamped before (or the
        job is not this runner's any more), and then it must not be sent."""
        value: datetime | None = await conn.fetchval(self.q["whatif_turn_sending"], job_id, ordinal, runner)
        return value

    async def whatif_turn_found(self, conn: Connection, job_id: str, ordinal: int) -> None:
        """The agent answered a tasks/get of turn `ordinal`'s task: its "not found" later means it lost it."""
        await conn.execute(self.q["whatif_turn_found"], job_id, ordinal)

    async def whatif_turn_reply(
        self, conn: Connection, job_id: str, ordinal: int, reply: str, rejected: int, runner: str
    ) -> bool:
        value = await conn.fetchval(self.q["whatif_turn_reply"], job_id, ordinal, reply, rejected, runner)
        return value is not None

    async def whatif_turn_end(
        self, conn: Connection, job_id: str, ordinal: int, state: str, figures: str, stopped_at: str | None
    ) -> None:
        await conn.execute(self.q["whatif_turn_end"], job_id, ordinal, state, figures, stopped_at)

    async def whatif_turn_close(self, conn: Connection, job_id: str, ordinal: int, state: str, figures: str) -> None:
        """Close a sent turn its ended job left open (never one whose end was written)."""
        await conn.execute(self.q["whatif_turn_close"], job_id, ordinal, state, figures)

    async def whatif_heartbeat(self, conn: Connection, job_id: str, runner: str) -> bool:
        """Whether the job is still this runner's and running."""
        return await conn.fetchval(self.q["whatif_heartbeat"], job_id, runner) is not None

    async def whatif_finish(
        self, conn: Connection, job_id: str, status: str, *, error: str | None, result: str | None
    ) -> datetime | None:
        """The job's end time, or None when it had already ended."""
        value: datetime | None = await conn.fetchval(self.q["whatif_finish"], job_id, status, error, result)
        return value

    async def whatif_claim_stale(self, conn: Connection, runner: str, stale_seconds: float) -> list[WhatifJob]:
        rows = await conn.fetch(self.q["whatif_claim_stale"], runner, stale_seconds)
        return [WhatifJob(**dict(r)) for r in rows]
