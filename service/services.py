"""What every operation works with: the settings, the store and the pool (one value, made once)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from service.config import Settings
from service.kagent.store import Store
from service.kagent.store.base import pooled_connection


@dataclass(frozen=True, kw_only=True)
class Services:
    settings: Settings
    store: Store
    pool: asyncpg.Pool

    def connection(self) -> AbstractAsyncContextManager[PoolConnectionProxy[asyncpg.Record]]:
        """A pooled connection, checked first (see store.pooled_connection)."""
        return pooled_connection(self.pool)
