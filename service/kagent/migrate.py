"""The service's own schema: created and migrated at start-up; kagent's schema is only checked."""

from __future__ import annotations

from dataclasses import dataclass

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


class SchemaError(RuntimeError):
    """The database is not a kagent database this service can work on."""


@dataclass(frozen=True, kw_only=True)
class KagentSchema:
    migration_version: int | None
    product_line: str  # "main", "0.10.x" or "unknown"


async def check_kagent_schema(store: Store, conn: Connection) -> KagentSchema:
    """Refuse a database without kagent's tables, or whose kagent migration is half applied."""
    tables = await store.database.kagent_columns(conn)
    problems = [
        f"table {name} lacks columns {sorted(columns - tables.get(name, set()))}"
        if name in tables
        else f"table {name} is missing"
        for name, columns in REQUIRED_COLUMNS.items()
        if not columns <= tables.get(name, set())
    ]
    if problems:
        raise SchemaError("this database does not hold kagent's tables (core migrations 1-7): " + "; ".join(problems))
    state = await store.database.schema_migrations(conn) if "schema_migrations" in tables else None
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


async def migrate(conn: Connection, schema: str) -> int:
    """Apply sql/migrations/*.sql not yet applied to the service's schema; return the version (the highest).

    Each file whose number is not recorded is applied, also one numbered below the highest applied: parallel
    work lands out of order (0016 after 0018 on a database that already has 0018), and every migration is
    written to be applied on its own (IF NOT EXISTS). An advisory lock makes replicas that start together apply
    each migration once.
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
