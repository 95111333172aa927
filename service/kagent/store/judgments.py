"""Judgments of experiments and of what-ifs (keyed on the job: migration 0019): their rows (a job of the runner:
runner, heartbeat, takeover), their calls to the judge (each sent once), and people's blind votes on the same pairs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.kagent.store.base import Connection, Queries


@dataclass(frozen=True, kw_only=True)
class JudgmentRow:
    id: str
    experiment_id: str | None  # exactly one of experiment_id and job_id is set (a what-if's judgment: its job)
    user_id: str
    judge_agent_ref: str
    judge_card: str | None  # JSON
    criteria: str | None
    dialect: str
    status: str  # waiting, running, completed, failed, cancelled
    runner: str
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    job_id: str | None = None

    @property
    def judged(self) -> str:
        """What it judges: its experiment's id, or its what-if's job id."""
        subject = self.experiment_id or self.job_id
        assert subject is not None
        return subject


@dataclass(frozen=True, kw_only=True)
class JudgeCall:
    judgment_id: str
    ordinal: int
    left_job: str | None  # None: the source's own continuation
    right_job: str
    swapped: bool  # False: A is the left one
    message: str  # the A2A message (v1.0 JSON), exactly as sent
    context_id: str
    sent_at: datetime | None
    task_id: str | None
    answer: str | None
    winner: str | None  # A, B, tie, invalid
    reason: str | None
    error: str | None
    ended_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class Vote:
    user_id: str
    left_job: str  # '' for the source
    right_job: str
    winner: str  # left, right, tie


class Judgments:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def insert(self, conn: Connection, j: JudgmentRow) -> datetime:
        created: datetime = await conn.fetchval(
            self.q["insert_judgment"], j.id, j.experiment_id, j.user_id, j.judge_agent_ref, j.judge_card, j.criteria,
            j.dialect, j.status, j.runner, j.job_id,
        )  # fmt: skip
        return created

    async def of_experiment(self, conn: Connection, experiment_id: str) -> list[JudgmentRow]:
        return [JudgmentRow(**dict(r)) for r in await conn.fetch(self.q["experiment_judgments"], experiment_id)]

    async def of_job(self, conn: Connection, job_id: str) -> list[JudgmentRow]:
        """A what-if's judgments, oldest first."""
        return [JudgmentRow(**dict(r)) for r in await conn.fetch(self.q["job_judgments"], job_id)]

    async def calls(self, conn: Connection, judgment_id: str) -> list[JudgeCall]:
        return [JudgeCall(**dict(r)) for r in await conn.fetch(self.q["judge_calls"], judgment_id)]

    async def insert_calls(self, conn: Connection, judgment_id: str, runner: str, calls: list[JudgeCall]) -> None:
        await conn.execute(
            self.q["insert_judge_calls"], judgment_id, [c.ordinal for c in calls], [c.left_job for c in calls],
            [c.right_job for c in calls], [c.swapped for c in calls], [c.message for c in calls],
            [c.context_id for c in calls], runner, [c.error for c in calls],
        )  # fmt: skip

    async def start_waiting(self, conn: Connection, experiment_id: str, runner: str) -> list[JudgmentRow]:
        rows = await conn.fetch(self.q["judgment_start_waiting"], experiment_id, runner)
        return [JudgmentRow(**dict(r)) for r in rows]

    async def start_waiting_job(self, conn: Connection, job_id: str, runner: str) -> list[JudgmentRow]:
        """The what-if's waiting judgment, taken to run now (its job ended)."""
        rows = await conn.fetch(self.q["judgment_start_waiting_job"], job_id, runner)
        return [JudgmentRow(**dict(r)) for r in rows]

    async def heartbeat(self, conn: Connection, judgment_id: str, runner: str) -> bool:
        return await conn.fetchval(self.q["judgment_heartbeat"], judgment_id, runner) is not None

    async def finish(self, conn: Connection, judgment_id: str, status: str, error: str | None) -> datetime | None:
        value: datetime | None = await conn.fetchval(self.q["judgment_finish"], judgment_id, status, error)
        return value

    async def claim_stale(self, conn: Connection, runner: str, stale_seconds: float) -> list[JudgmentRow]:
        rows = await conn.fetch(self.q["judgment_claim_stale"], runner, stale_seconds)
        return [JudgmentRow(**dict(r)) for r in rows]

    async def call_sending(self, conn: Connection, judgment_id: str, ordinal: int, runner: str) -> datetime | None:
        value: datetime | None = await conn.fetchval(self.q["judge_call_sending"], judgment_id, ordinal, runner)
        return value

    async def call_task(self, conn: Connection, judgment_id: str, ordinal: int, task_id: str) -> bool:
        return bool(await conn.fetchval(self.q["judge_call_task"], judgment_id, ordinal, task_id))

    async def call_end(
        self, conn: Connection, judgment_id: str, ordinal: int, *, answer: str | None, winner: str | None,
        reason: str | None, error: str | None,
    ) -> None:  # fmt: skip
        await conn.execute(self.q["judge_call_end"], judgment_id, ordinal, answer, winner, reason, error)

    async def close_calls(self, conn: Connection, judgment_id: str, error: str) -> list[str]:
        """Close the calls left open: the judge's tasks of those that were sent (to cancel them)."""
        rows = await conn.fetch(self.q["judge_calls_close"], judgment_id, error)
        return [r["task_id"] for r in rows if r["task_id"] is not None]

    async def being_judged(self, conn: Connection, experiment_ids: list[str]) -> set[str]:
        """Which of these experiments have a judgment that waits or runs."""
        rows = await conn.fetch(self.q["experiments_being_judged"], experiment_ids)
        return {r["experiment_id"] for r in rows}

    async def jobs_being_judged(self, conn: Connection, job_ids: list[str]) -> set[str]:
        """Which of these what-if jobs have a judgment that waits or runs."""
        rows = await conn.fetch(self.q["jobs_being_judged"], job_ids)
        return {r["job_id"] for r in rows}

    async def vote(self, conn: Connection, experiment_id: str, v: Vote) -> None:
        await conn.execute(self.q["upsert_judge_vote"], experiment_id, v.user_id, v.left_job, v.right_job, v.winner)

    async def votes(self, conn: Connection, experiment_id: str) -> list[Vote]:
        return [Vote(**dict(r)) for r in await conn.fetch(self.q["judge_votes"], experiment_id)]
