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


# JIT compilation: every statement of the service reads one session's rows (at most a few hundred thousand),
# but the service's SQL functions make the planner's estimates pass jit_above_cost, and compiling took longer
# than running: a dry run's count of 100,000 events spent 2.4 s of 8.2 s compiling (docs/turn-map.md, "The
# first touch"). Off, unless the operator chose a value (server, database, role or connection string).
_JIT_CHOSEN = "SELECT source <> 'default' FROM pg_settings WHERE name = 'jit'"


async def connection_setup(dsn: str, connect_seconds: float) -> str | None:
    """The SET statement every pooled connection runs when it is made and again after each reset (the
    pool's RESET ALL would undo it), or None when there is nothing to set."""
    conn = await asyncpg.connect(dsn, timeout=connect_seconds)
    try:
        lz4 = bool(await conn.fetchval(_LZ4_CHOOSABLE))
        jit_chosen = bool(await conn.fetchval(_JIT_CHOSEN))
    finally:
        await conn.close()
    sets = [*(["default_toast_compression = lz4"] if lz4 else []), *([] if jit_chosen else ["jit = off"])]
    return "; ".join(f"SET {s}" for s in sets) or None


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
