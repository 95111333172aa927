"""kagent's schema as the service finds it, snapshots, the retired invocation index's removal, and the planner's
statistics of the turn map's tables."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from service.kagent.store.base import (
    SNAPSHOT_ID,
    Connection,
    Queries,
)


@dataclass(frozen=True, kw_only=True)
class IndexRow:
    name: str
    valid: bool
    comment: str | None
    bytes: int


class Database:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def kagent_columns(self, conn: Connection, names: Iterable[str]) -> dict[str, set[str]]:
        """The columns of each of these tables that exists in the connection's schema."""
        tables: dict[str, set[str]] = {}
        for row in await conn.fetch(self.q["kagent_tables"], sorted(names)):
            tables.setdefault(row["table_name"], set()).add(row["column_name"])
        return tables

    async def schema_migrations(self, conn: Connection) -> tuple[int, bool] | None:
        row = await conn.fetchrow(self.q["schema_migrations"])
        return None if row is None else (int(row["version"]), bool(row["dirty"]))

    async def goose_version(
        self, conn: Connection, ledger: Literal["schema_migrations", "goose_db_version"]
    ) -> int | None:
        """The newest migration a goose ledger (kagent 1.x's runner) records as applied; None when it records none."""
        value: int | None = await conn.fetchval(self.q[f"goose_version_{ledger}"])
        return value

    async def now(self, conn: Connection) -> datetime:
        value: datetime = await conn.fetchval(self.q["now"])
        return value

    async def export_snapshot(self, conn: Connection) -> str:
        value: str = await conn.fetchval(self.q["export_snapshot"])
        return value

    async def use_snapshot(self, conn: Connection, snapshot: str) -> None:
        """Make this (fresh REPEATABLE READ) transaction see the exported snapshot. SET takes no bind
        parameter, so the id is checked against PostgreSQL's format before it is written into SQL."""
        if not SNAPSHOT_ID.fullmatch(snapshot):
            raise ValueError(f"not a snapshot id: {snapshot!r}")
        await conn.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")

    async def custom_plans(self, conn: Connection) -> None:
        """Plan every statement of this transaction for its own parameters, and never JIT-compile one: a
        prepared statement's generic plan (from its sixth run) assumes a session of a few rows, and a custom
        plan's estimate for a large session's rows can pass jit_above_cost, whose compilation then took most
        of the statement's time (50 ms of a fork's map copy at 100,000 events)."""
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL jit = off")

    async def index_rows(self, conn: Connection, names: list[str]) -> list[IndexRow]:
        rows = await conn.fetch(self.q["index_states"], names)
        return [IndexRow(name=r["name"], valid=r["valid"], comment=r["comment"], bytes=int(r["bytes"])) for r in rows]

    async def drop_index(self, conn: Connection, name: str) -> None:
        # DDL takes no bind parameter: the name is the service's schema (validated at start-up) and a
        # constant of invocation_index.py.
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")

    async def refresh_map_statistics(self, conn: Connection, runs: int) -> bool:
        """Outside a transaction, after a map of `runs` runs was built: the planner's statistics of the map's
        tables gathered again when they lag behind it (map_statistics_stale); whether they were."""
        if not await conn.fetchval(self.q["map_statistics_stale"], runs):
            return False
        schema = self.q.schema
        await conn.execute(f"ANALYZE {schema}.turn_map_run, {schema}.turn_map_task, {schema}.turn_map_turn")
        return True
