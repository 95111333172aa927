"""The pool and the database's check at start-up: what the server and the CLI both open before they serve.

Part of the frame: kagent's data only, so that a CLI command that reads opens the database without loading the
server's stack (the web framework, the MCP SDK, the A2A client).
"""

from __future__ import annotations

import logging

import asyncpg

from service.config import Settings
from service.kagent import invocation_index
from service.kagent.migrate import check_kagent_schema, migrate
from service.kagent.store import Store

log = logging.getLogger("kagent_fork")


# The task rows a fork rewrites are new TOAST values: lz4 compresses them several times faster than
# PostgreSQL's default pglz, and kagent reads either. A method the operator chose (server, database,
# role or connection string) is kept.
_LZ4_CHOOSABLE = """
SELECT EXISTS (
    SELECT 1 FROM pg_settings
    WHERE name = 'default_toast_compression' AND source = 'default' AND 'lz4' = ANY(enumvals)
)
"""


async def connection_setup(dsn: str, connect_seconds: float) -> str | None:
    """The SET statement every pooled connection runs when it is made and again after each reset (the
    pool's RESET ALL would undo it), or None when there is nothing to set."""
    conn = await asyncpg.connect(dsn, timeout=connect_seconds)
    try:
        lz4 = bool(await conn.fetchval(_LZ4_CHOOSABLE))
    finally:
        await conn.close()
    return "SET default_toast_compression = lz4" if lz4 else None


async def open_pool(settings: Settings, dsn: str) -> asyncpg.Pool:
    setup = await connection_setup(dsn, settings.db_connect_timeout_seconds)

    async def init(conn: asyncpg.Connection) -> None:
        if setup is not None:
            await conn.execute(setup)

    async def reset(conn: asyncpg.Connection) -> None:
        await conn.reset()
        await init(conn)

    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        command_timeout=None,
        timeout=settings.db_connect_timeout_seconds,  # asyncpg's own default waits 60 s for a silent server
        init=init,
        reset=reset,
    )
    return pool


async def prepare_database(settings: Settings, store: Store, pool: asyncpg.Pool) -> None:
    """Refuse a database that is not kagent's; create or migrate the service's own schema."""
    async with pool.acquire() as conn:
        schema = await check_kagent_schema(store, conn)
        version = await migrate(conn, settings.service_schema)
        await invocation_index.warn_if_present(store, conn)
    log.info(
        "kagent database: line %s (migration %s); service schema %s at version %s",
        schema.product_line,
        schema.migration_version,
        settings.service_schema,
        version,
    )
