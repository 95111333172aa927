"""Suite runs and their cases (migration 0023): a suite's cases continued on each agent, one verdict across them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.kagent.store.base import Connection, Queries


@dataclass(frozen=True, kw_only=True)
class RunRow:
    id: str
    suite_id: str
    user_id: str  # its creator
    run_user: str  # whose rows its branches are
    request: str  # JSON: the run's request as accepted
    estimated_usd: float | None
    status: str  # running, judging, completed, stopped, cancelled, failed
    reason: str | None
    runner: str
    heartbeat_at: datetime
    verdict: str | None  # JSON, once it ended
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class RunCase:
    case_id: str
    ordinal: int
    session_id: str
    spec: str  # JSON: the experiments' requests for this case, one per agent
    branches: int  # its experiments' branches
    experiment_ids: list[str]  # empty until started
    status: str  # waiting, running, done, failed, skipped
    error: str | None
    result: str | None  # JSON, once it ended
    spent_usd: float | None


@dataclass(frozen=True, kw_only=True)
class NewCase:
    case_id: str
    session_id: str
    spec: str
    branches: int
    status: str  # waiting; skipped when it cannot run (its error says why)
    error: str | None


def _run(r: object) -> RunRow:
    row = dict(r)  # type: ignore[call-overload]
    return RunRow(**row)


class SuiteRuns:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, queries: Queries) -> None:
        self.q = queries

    async def insert_run(
        self, conn: Connection, run: tuple[str, str, str, str], request: str, estimated_usd: float | None, runner: str
    ) -> datetime:
        """`run`: (id, suite id, creator, run user)."""
        created: datetime = await conn.fetchval(self.q["insert_run"], *run, request, estimated_usd, runner)
        return created

    async def insert_cases(self, conn: Connection, run_id: str, cases: list[NewCase]) -> None:
        columns = (
            [c.case_id for c in cases], [c.session_id for c in cases], [c.spec for c in cases],
            [c.branches for c in cases], [c.status for c in cases], [c.error for c in cases],
        )  # fmt: skip
        await conn.execute(self.q["insert_run_cases"], run_id, *columns)

    async def run(self, conn: Connection, run_id: str, suite_id: str, user_id: str) -> RunRow | None:
        r = await conn.fetchrow(self.q["run"], run_id, suite_id, user_id)
        return None if r is None else _run(r)

    async def run_by_id(self, conn: Connection, run_id: str) -> RunRow | None:
        r = await conn.fetchrow(self.q["run_by_id"], run_id)
        return None if r is None else _run(r)

    async def runs_of_suite(self, conn: Connection, suite_id: str, user_id: str, limit: int) -> list[RunRow]:
        return [_run(r) for r in await conn.fetch(self.q["runs_of_suite"], suite_id, user_id, limit)]

    async def cases(self, conn: Connection, run_id: str) -> list[RunCase]:
        return [
            RunCase(**{**dict(r), "experiment_ids": list(r["experiment_ids"])})
            for r in await conn.fetch(self.q["run_cases"], run_id)
        ]

    async def beat(self, conn: Connection, run_id: str, runner: str) -> str | None:
        """The run's status while `runner` still drives it; None once another took it over or it ended."""
        status: str | None = await conn.fetchval(self.q["run_beat"], run_id, runner)
        return status

    async def claim_stale(self, conn: Connection, runner: str, seconds: float) -> list[str]:
        return [r["id"] for r in await conn.fetch(self.q["run_claim_stale"], runner, seconds)]

    async def case_started(self, conn: Connection, run_id: str, case_id: str, experiment_ids: list[str]) -> None:
        await conn.execute(self.q["run_case_started"], run_id, case_id, experiment_ids)

    async def case_ended(
        self, conn: Connection, run_id: str, case_id: str, status: str, error: str | None, result: str | None,
        spent_usd: float | None,
    ) -> None:  # fmt: skip
        await conn.execute(self.q["run_case_ended"], run_id, case_id, status, error, result, spent_usd)

    async def set_status(
        self, conn: Connection, run_id: str, status: str, reason: str | None = None, verdict: str | None = None
    ) -> str | None:
        """The run moved to `status` (None: it had ended already, and stays as it ended)."""
        moved: str | None = await conn.fetchval(self.q["run_status"], run_id, status, reason, verdict)
        return moved

    async def set_verdict(self, conn: Connection, run_id: str, verdict: str) -> None:
        await conn.execute(self.q["run_verdict"], run_id, verdict)
