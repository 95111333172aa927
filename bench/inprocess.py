"""What the in-process measures (bench.breakdown, bench.pieces, bench.write_cost) share: a throw-away
database holding kagent's tables, and the service's parts opened on it the way the app opens them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import asyncpg

from bench.run import DEFAULT_SERVER, bench_database

if TYPE_CHECKING:
    from service.services import Services


@contextlib.asynccontextmanager
async def kagent_database() -> AsyncIterator[tuple[str, asyncpg.Connection]]:
    """A database of its own on BENCH_DATABASE_URL's server with kagent's tables, and a connection to it."""
    from service.embedded.server import install_kagent_schema

    async with bench_database(os.environ.get("BENCH_DATABASE_URL", DEFAULT_SERVER), keep=False) as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await install_kagent_schema(conn)
            yield dsn, conn
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def service_parts(dsn: str) -> AsyncIterator[Services]:
    """The settings, store and pool the app would open on `dsn` (its schema migrated, the invocation index's
    state read)."""
    from service import services
    from service.config import from_env
    from service.database import open_pool, prepare_database
    from service.kagent.store import Store

    settings = from_env({"DATABASE_URL": dsn})
    store = Store(settings.service_schema, max_fork_events=settings.max_fork_events)
    pool = await open_pool(settings, dsn)
    try:
        await prepare_database(settings, store, pool)
        yield services.Services(settings=settings, store=store, pool=pool)
    finally:
        await pool.close()
