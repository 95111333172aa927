"""Suites and their cases (migration 0022): a named set of points of real conversations to continue from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.kagent.store.base import Connection, Queries
from service.kagent.store.sessions import SessionRow, _session


@dataclass(frozen=True, kw_only=True)
class SuiteRow:
    id: str
    user_id: str
    name: str
    created_at: datetime
    cases: int = 0  # how many cases it holds (in the list of suites)


@dataclass(frozen=True, kw_only=True)
class CaseRow:
    id: str
    ordinal: int
    session_id: str
    rewind_before_invocation_id: str | None  # exactly one of the two names the turn
    rewind_before_task_id: str | None
    turns: str  # "all" or a whole number
    message: str | None  # the edited first question
    user_text: str | None  # the turn's question as the case was saved
    agent_id: str | None  # the session's agent (kagent's id) as the case was saved
    created_at: datetime | None = None


class Suites:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, queries: Queries) -> None:
        self.q = queries

    async def insert_suite(self, conn: Connection, suite_id: str, user_id: str, name: str) -> SuiteRow:
        created_at = await conn.fetchval(self.q["insert_suite"], suite_id, user_id, name)
        return SuiteRow(id=suite_id, user_id=user_id, name=name, created_at=created_at)

    async def suite(self, conn: Connection, suite_id: str, user_id: str, *, lock: bool = False) -> SuiteRow | None:
        row = await conn.fetchrow(self.q["suite_lock" if lock else "suite"], suite_id, user_id)
        if row is None:
            return None
        return SuiteRow(id=row["id"], user_id=row["user_id"], name=row["name"], created_at=row["created_at"])

    async def suites_of(self, conn: Connection, user_id: str, limit: int) -> list[SuiteRow]:
        return [
            SuiteRow(id=r["id"], user_id=r["user_id"], name=r["name"], created_at=r["created_at"], cases=r["cases"])
            for r in await conn.fetch(self.q["suites_of_user"], user_id, limit)
        ]

    async def insert_cases(self, conn: Connection, suite_id: str, cases: list[CaseRow]) -> None:
        columns = (
            [c.id for c in cases], [c.session_id for c in cases], [c.rewind_before_invocation_id for c in cases],
            [c.rewind_before_task_id for c in cases], [c.turns for c in cases], [c.message for c in cases],
            [c.user_text for c in cases], [c.agent_id for c in cases],
        )  # fmt: skip
        await conn.execute(self.q["insert_cases"], suite_id, *columns)

    async def cases(self, conn: Connection, suite_id: str) -> list[CaseRow]:
        return [
            CaseRow(
                id=r["id"],
                ordinal=r["ordinal"],
                session_id=r["session_id"],
                rewind_before_invocation_id=r["rewind_before_invocation_id"],
                rewind_before_task_id=r["rewind_before_task_id"],
                turns=r["turns"],
                message=r["message"],
                user_text=r["user_text"],
                agent_id=r["agent_id"],
                created_at=r["created_at"],
            )
            for r in await conn.fetch(self.q["suite_cases"], suite_id)
        ]

    async def delete_case(self, conn: Connection, suite_id: str, case_id: str) -> bool:
        return str(await conn.execute(self.q["delete_case"], suite_id, case_id)) == "DELETE 1"

    async def select_sessions(
        self, conn: Connection, user_id: str, agent_id: str, since: datetime | None, until: datetime | None, limit: int
    ) -> list[SessionRow]:
        rows = await conn.fetch(self.q["select_sessions"], user_id, agent_id, since, until, limit)
        return [_session(r) for r in rows]
