"""The runner's database steps, steady through a transient loss (issue 32, item 5): a step that loses its
connection (a restart, a failover, `pg_terminate_backend`) or finds no pooled connection free within
DB_POOL_WAIT_SECONDS is run again on a fresh connection, so that a branch fails only for what its agent did.
Each step is one statement or one transaction that may run twice (a retry of a step whose commit was lost
finds its own write: see the runner's stamps)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from service.errors import Busy, DatabaseUnavailable
from service.kagent.store.base import CONNECTION_ERRORS, Connection
from service.services import Services

log = logging.getLogger("kagent_fork")
T = TypeVar("T")
TRANSIENT: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, Busy, DatabaseUnavailable)
FIRST_PAUSE = 0.05
LONGEST_PAUSE = 2.0


async def steady(svc: Services, step: Callable[[Connection, bool], Awaitable[T]], what: str) -> T:
    """`step(conn, again)` on a pooled connection, run again after a transient loss until it answers (`again`:
    an earlier try may have committed). Only a cancel (a job's time limit, a shutdown) ends the waiting."""
    pause, again = FIRST_PAUSE, False
    while True:
        try:
            async with svc.connection() as conn:
                return await step(conn, again)
        except TRANSIENT as exc:
            log.warning("%s: database step lost (%s), tried again in %.2f s", what, type(exc).__name__, pause)
        await asyncio.sleep(pause)
        pause, again = min(pause * 2, LONGEST_PAUSE), True
