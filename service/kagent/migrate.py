"""The service's own schema: created and migrated at start-up; kagent's schema is only checked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.kagent.store import Store
from service.kagent.store.base import Connection, sql_dir

# The columns kagent-fork reads or writes (kagent's core migrations 1-7); more columns are fine.
REQUIRED_COLUMNS = {
    "session": {"id", "user_id", "name", "created_at", "updated_at", "deleted_at", "agent_id", "source"},
    "event": {"id", "user_id", "session_id", "created_at", "updated_at", "deleted_at", "data"},
    "task": {
        "id",
        "created_at",
        "updated_at",
        "deleted_at",
        "data",
        "session_id",
        "protocol_version",
        "user_id",
    },
    "session_share": {"token", "session_id", "user_id", "read_only"},
}
MAIN_LINE_FIRST_MIGRATION = 8  # migrations 8-13 exist only on kagent's main line

# Tables that only kagent 1.x's schema holds with its conversations in them: the first unreleased 1.0 baseline's
# AgentInstance tables, and the later baseline's once AgentInstance was renamed Session (kagent's
# go/core/pkg/migrations/core/000001_initial.sql). kagent main before 1.0 has agent_instance and its task tables
# too (its migrations 9 and 11) beside session, event and task, so these name the line only when kagent-fork's
# own tables are not there.
KAGENT_1X_TABLES = frozenset(
    {
        "agent_instance",
        "agent_history",
        "agent_instance_task",
        "agent_instance_task_event",
        "agent_instance_checkpoint",
        "a2a_context",
        "runtime_instance",
        "session_task",
        "session_task_event",
        "session_checkpoint",
    }
)
# goose's ledger columns: kagent 1.x migrates with goose (kagent PR #2667), whose ledger has these where
# golang-migrate's (kagent before 1.0) has version and dirty.
GOOSE_LEDGER_COLUMNS = {"version_id", "is_applied"}
GOOSE_LEDGERS: tuple[Literal["goose_db_version", "schema_migrations"], ...] = ("goose_db_version", "schema_migrations")
SERVED_LINES = (
    "kagent-fork serves kagent 0.10.x and kagent main before 1.0, whose session, event and task tables "
    "(core migrations 1-7) hold the conversations"
)


class SchemaError(RuntimeError):
    """The database is not a kagent database this service can work on."""

    hint = "check DATABASE_URL: it must name kagent's database"


class KagentTooNew(SchemaError):
    """The database is kagent 1.x's: its conversations are not in the tables kagent-fork works on."""

    hint = "check DATABASE_URL: it names a kagent 1.x database; see docs/kagent-1.0.md"


@dataclass(frozen=True, kw_only=True)
class KagentSchema:
    migration_version: int | None
    product_line: str  # "main", "0.10.x" or "unknown"


async def check_kagent_schema(store: Store, conn: Connection) -> KagentSchema:
    """Refuse a database without kagent's tables (saying so in other words when it is kagent 1.x's), or whose kagent
    migration is half applied."""
    tables = await store.database.kagent_columns(conn, {*REQUIRED_COLUMNS, *GOOSE_LEDGERS, *KAGENT_1X_TABLES})
    problems = [
        f"table {name} lacks columns {sorted(columns - tables.get(name, set()))}"
        if name in tables
        else f"table {name} is missing"
        for name, columns in REQUIRED_COLUMNS.items()
        if not columns <= tables.get(name, set())
    ]
    if problems:
        # A kagent 1.x database has a session and a session_share table of its own (other columns), so the list
        # of problems alone would read as a broken kagent 0.x database: say which kagent it is instead.
        newer = sorted(KAGENT_1X_TABLES & tables.keys())
        ledger = await _goose_ledger(store, conn, tables)
        if newer or ledger is not None:
            found = ", ".join(newer) if newer else "none of its conversation tables"
            migrations = ledger or await _golang_migrate_ledger(store, conn, tables)
            raise KagentTooNew(f"this is kagent 1.x's schema ({found}; {migrations}): {SERVED_LINES}")
        raise SchemaError("this database does not hold kagent's tables (core migrations 1-7): " + "; ".join(problems))
    state = await store.database.schema_migrations(conn) if _is_golang_migrate(tables) else None
    if state is None:
        return KagentSchema(migration_version=None, product_line="unknown")
    version, dirty = state
    if dirty:
        raise SchemaError(
            f"kagent's schema_migrations says migration {version} is dirty (half applied): "
            "repair kagent's database before starting kagent-fork"
        )
    line = "main" if version >= MAIN_LINE_FIRST_MIGRATION else "0.10.x"
    return KagentSchema(migration_version=version, product_line=line)


def _is_golang_migrate(tables: dict[str, set[str]]) -> bool:
    return {"version", "dirty"} <= tables.get("schema_migrations", set())


async def _goose_ledger(store: Store, conn: Connection, tables: dict[str, set[str]]) -> str | None:
    """'<ledger> version N' when a goose ledger is there; kagent's runner may name it schema_migrations (the name
    its golang-migrate ledger had) or leave goose's default, goose_db_version, so both are read."""
    for ledger in GOOSE_LEDGERS:
        if tables.get(ledger, set()) >= GOOSE_LEDGER_COLUMNS:
            version = await store.database.goose_version(conn, ledger)
            return f"{ledger} version {'none' if version is None else version}"
    return None


async def _golang_migrate_ledger(store: Store, conn: Connection, tables: dict[str, set[str]]) -> str:
    state = await store.database.schema_migrations(conn) if _is_golang_migrate(tables) else None
    if state is None:
        return "no migration ledger"
    version, dirty = state
    return f"schema_migrations version {version}{' (dirty)' if dirty else ''}"


async def migrate(conn: Connection, schema: str) -> int:
    """Apply sql/migrations/*.sql not yet applied to the service's schema; return the version (the highest).

    Each file whose number is not recorded is applied, also one numbered below the highest applied: parallel
    work lands out of order (0016 after 0018 on a database that already has 0018), and every migration is
    written to be applied on its own (IF NOT EXISTS). An advisory lock makes replicas that start together apply
    each migration once. The numbers have a gap (no 0017 was ever shipped): it is harmless, and a shipped file is
    never renumbered, since databases record the numbers they applied (0018 renamed 0017 would run again).
    """
    files = sorted((sql_dir() / "migrations").glob("*.sql"))
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('kagent-fork:migrate', 0))")
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {schema}.schema_version (version INTEGER NOT NULL PRIMARY KEY, "
            "applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW())"
        )
        applied = {int(r["version"]) for r in await conn.fetch(f"SELECT version FROM {schema}.schema_version")}
        for path in files:
            version = int(path.name.split("_", 1)[0])
            if version in applied:
                continue
            await conn.execute(path.read_text().replace("{schema}", schema))
            await conn.execute(f"INSERT INTO {schema}.schema_version (version) VALUES ($1)", version)
            applied.add(version)
        return max(applied, default=0)
