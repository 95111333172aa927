"""What-if jobs: their rows, heartbeats, ends and the claim of a dead replica's jobs."""

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
    rewind_before_invocation_id: str
    agent_ref: str
    dialect: str
    message: str  # the A2A message sent, v1.0 JSON
    status: str
    task_id: str | None
    error: str | None
    result: str | None  # JSON
    runner: str
    created_at: datetime
    finished_at: datetime | None


class Jobs:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def insert_whatif_job(self, conn: Connection, job: WhatifJob) -> datetime:
        created: datetime = await conn.fetchval(
            self.q["insert_whatif_job"], job.id, job.user_id, job.parent_session_id, job.parent_user_id,
            job.session_id, job.rewind_before_invocation_id, job.agent_ref, job.dialect, job.message, job.runner,
        )  # fmt: skip
        return created

    async def whatif_job(self, conn: Connection, job_id: str, user_id: str) -> WhatifJob | None:
        row = await conn.fetchrow(self.q["get_whatif_job"], job_id, user_id)
        return None if row is None else WhatifJob(**dict(row))

    async def whatif_jobs(self, conn: Connection, session_id: str, owner: str, user_id: str) -> list[WhatifJob]:
        rows = await conn.fetch(self.q["list_whatif_jobs"], session_id, owner, user_id)
        return [WhatifJob(**dict(r)) for r in rows]

    async def whatif_task(self, conn: Connection, job_id: str, task_id: str) -> None:
        await conn.execute(self.q["whatif_task"], job_id, task_id)

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
