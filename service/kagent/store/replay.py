"""The replay endpoint's rows (migration 0018): the lease that says which turn a replay twin serves, and every
call the endpoint answered, with its branch and turn (docs/replay-twins.md)."""

from __future__ import annotations

from dataclasses import dataclass

from service.kagent.store.base import Connection, Queries


@dataclass(frozen=True, kw_only=True)
class Holder:
    """The turn a twin's calls belong to: a job (a branch) and the ordinal of its turn."""

    job_id: str
    ordinal: int


@dataclass(frozen=True, kw_only=True)
class ReplayCall:
    job_id: str
    ordinal: int
    tool: str
    arguments: str  # JSON, as the arm sent them
    tool_class: str  # asks | reads | acts
    answered_from: str  # recorded | live | refused


class Replay:
    def __init__(self, q: Queries) -> None:
        self.q = q

    async def take_lease(
        self, conn: Connection, twin: str, user_id: str, holder: Holder, runner: str, seconds: float
    ) -> bool:
        """Whether the turn holds twin's lease for the user now (taken, or renewed when it was its own)."""
        got = await conn.fetchval(
            self.q["take_replay_lease"], twin, user_id, holder.job_id, holder.ordinal, runner, float(seconds)
        )
        return got is not None

    async def give_leases(self, conn: Connection, holder: Holder) -> None:
        await conn.execute(self.q["give_replay_lease"], holder.job_id, holder.ordinal)

    async def lease_holder(self, conn: Connection, twin: str, user_id: str) -> Holder | None:
        row = await conn.fetchrow(self.q["replay_lease_holder"], twin, user_id)
        return None if row is None else Holder(job_id=row["job_id"], ordinal=int(row["ordinal"]))

    async def insert_call(
        self, conn: Connection, holder: Holder, *, twin: str, server: str, tool: str, arguments: str,
        tool_class: str, answered_from: str,
    ) -> None:  # fmt: skip
        await conn.execute(
            self.q["insert_replay_call"], holder.job_id, holder.ordinal, twin, server, tool, arguments, tool_class,
            answered_from,
        )  # fmt: skip

    async def calls_of_jobs(self, conn: Connection, job_ids: list[str]) -> list[ReplayCall]:
        rows = await conn.fetch(self.q["replay_calls_of_jobs"], job_ids)
        return [
            ReplayCall(
                job_id=r["job_id"], ordinal=int(r["ordinal"]), tool=r["tool"], arguments=r["arguments"],
                tool_class=r["tool_class"], answered_from=r["answered_from"],
            )
            for r in rows
        ]  # fmt: skip
