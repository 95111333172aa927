"""What every operation works with: the settings, the store and the pools (one value, made once)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from service.config import Settings
from service.errors import Busy
from service.kagent.store import Store
from service.kagent.store.base import CONNECTION_ERRORS, PoolBusy, check_not_holding, pooled_connection


def _busy(seconds: float) -> Busy:
    return Busy(
        f"the service is busy: no database connection was free within {seconds:g} s (DB_POOL_WAIT_SECONDS); retry"
    )


def lock_pool_size(settings: Settings) -> int:
    """Keyed starts in progress at once in one replica: half the request pool, so that they never take
    every request connection (each holds at most one at a time) and other users' requests go on."""
    return max(1, settings.pool_max_size // 2)


@dataclass(frozen=True, kw_only=True)
class Services:
    settings: Settings
    store: Store
    pool: asyncpg.Pool
    # Connections that only hold an Idempotency-Key's advisory lock for a start that takes several request
    # connections one after another (what-ifs, experiments): never a request connection, so that a start never
    # holds one pooled connection while it waits for another. None: keyed starts are refused (a tool's pool).
    locks: asyncpg.Pool | None = None

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        """A pooled connection, checked first, waited for at most DB_POOL_WAIT_SECONDS (store.pooled_connection):
        past it, 503 with Retry-After."""
        try:
            async with pooled_connection(self.pool, self.settings.db_pool_wait_seconds) as conn:
                yield conn
        except PoolBusy as exc:
            raise _busy(exc.seconds) from None

    @asynccontextmanager
    async def key_lock(self, scope: str, key: str) -> AsyncIterator[None]:
        """(scope, key)'s advisory lock, held on a lock connection for the block, in every replica; its
        holder takes request connections one at a time. Both waits are bounded: PoolBusy for a lock
        connection, or a key another request holds, past DB_POOL_WAIT_SECONDS: 503 with Retry-After."""
        if self.locks is None:
            raise RuntimeError("these services have no lock pool: keyed starts need one (services.open_lock_pool)")
        check_not_holding("a lock connection")
        wait = self.settings.db_pool_wait_seconds
        try:
            conn = await self.locks.acquire(timeout=wait)
        except TimeoutError:
            raise _busy(wait) from None
        try:
            try:
                async with asyncio.timeout(wait):
                    await self.store.lineage.lock_key(conn, scope, key)
            except TimeoutError:
                raise Busy(
                    f"a request with this Idempotency-Key is still running after {wait:g} s "
                    "(DB_POOL_WAIT_SECONDS): retry with the same key for its answer"
                ) from None
            try:
                yield
            finally:
                if not conn.is_closed():
                    with contextlib.suppress(*CONNECTION_ERRORS):  # a dead connection's locks went with it
                        await self.store.lineage.unlock_key(conn, scope, key)
        finally:
            # A lock left behind (a cancelled block, a statement timed out after it was granted) goes with
            # the pool's reset, which unlocks every advisory lock of the connection.
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.locks.release(conn)


async def open_lock_pool(settings: Settings, dsn: str) -> asyncpg.Pool:
    """The keyed starts' lock connections: made on demand, at most lock_pool_size, each only ever holding a lock."""
    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn, min_size=0, max_size=lock_pool_size(settings), timeout=settings.db_connect_timeout_seconds
    )
    return pool
