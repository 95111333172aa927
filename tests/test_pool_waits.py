"""No burst stalls the service (issue 32, item 1): a keyed what-if or experiment start never holds a pooled
connection while it waits for another, every wait for a pooled connection is bounded (503 in kagent's
envelope), and while three times the pool's size of keyed starts arrive at once another user's read answers
within a second. Real PostgreSQL, real a2a-sdk agents, the service on a real server with a pool of 4."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from service.app import create_app
from service.config import Settings
from service.errors import Busy
from service.kagent.store import Store
from service.kagent.store.base import NestedConnection
from service.services import Services
from tests.helpers import seed
from tests.support.a2a_agent import LEGACY, NAMESPACE, Seen, running_agents
from tests.support.live_server import live_server

POOL = 4


@pytest.fixture(scope="module")
def agents(database_url: str) -> Iterator[tuple[str, Seen]]:
    with running_agents(database_url) as served:
        yield served


@pytest.fixture(scope="module")
async def small(settings: Settings, database_url: str, agents: tuple[str, Seen]) -> AsyncIterator[Any]:
    """The service on a real uvicorn server with a pool of 4, and a client that sends at once."""
    tight = dataclasses.replace(
        settings, kagent_a2a_url=agents[0], whatif_heartbeat_seconds=0.2, pool_max_size=POOL, db_pool_wait_seconds=5
    )
    with live_server(create_app(tight, database_url)) as url:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
            yield client


async def _read_meanwhile(client: Any, session_id: str, user: str, burst: asyncio.Future[Any]) -> list[float]:
    """Another user's listing, timed, again and again while the burst runs."""
    times = []
    while not burst.done():
        began = time.monotonic()
        r = await client.get(f"/api/sessions/{session_id}/invocations", headers={"X-User-Id": user})
        times.append(time.monotonic() - began)
        assert r.status_code == 200, r.text
        await asyncio.sleep(0.05)
    return times


@pytest.mark.parametrize("kind", ["whatif", "experiments"])
async def test_a_burst_of_keyed_starts_stalls_no_one(small: Any, pool: asyncpg.Pool, kind: str) -> None:
    conv = await seed(pool, dialect="legacy", turns=2)
    other = await seed(pool, dialect="legacy", turns=3)
    ref = f"{NAMESPACE}/{LEGACY}"
    body: dict[str, Any] = {"rewind_before_invocation_id": conv.invocation_ids[1]}
    body |= {"agent_ref": ref} if kind == "whatif" else {"agents": [ref]}
    path = f"/api/sessions/{conv.session_id}/{kind}"
    # 3x the pool: a third under one key, the rest under keys of their own.
    keys = ["same"] * POOL + [f"k-{i}" for i in range(2 * POOL)]

    async def one(key: str) -> Any:
        return await small.post(path, json=body, headers={"X-User-Id": conv.user_id, "Idempotency-Key": key})

    async with asyncio.timeout(60):  # before the fix: every request hung here for ever
        burst = asyncio.ensure_future(asyncio.gather(*(one(k) for k in keys)))
        reads = asyncio.ensure_future(_read_meanwhile(small, other.session_id, other.user_id, burst))
        answers = await burst
        times = await reads
    assert times and max(times) < 1.0, times
    codes = [a.status_code for a in answers]
    assert set(codes) <= {200, 202, 503}, [(a.status_code, a.text) for a in answers]
    for a in answers:
        if a.status_code == 503:  # a bounded wait: said in kagent's envelope, with when to retry
            assert "error" in a.json() and a.headers.get("retry-after"), a.text
    # The same key made one start, which every answer under it that is not a 503 names.
    thing = "job" if kind == "whatif" else "experiment"
    same = {
        a.json()["data"][thing]["id"]
        for a, k in zip(answers, keys, strict=True)
        if k == "same" and a.status_code != 503
    }
    assert len(same) <= 1
    # Every 503 wrote nothing: the forks made are exactly the starts answered.
    made = {a.json()["data"][thing]["id"] for a in answers if a.status_code in (200, 202)}
    assert made, "no start got through: the burst was refused whole"
    async with pool.acquire() as conn:
        if kind == "whatif":
            jobs = await conn.fetchval(
                "SELECT count(*) FROM kagent_fork.whatif_job WHERE parent_session_id = $1 AND experiment_id IS NULL",
                conv.session_id,
            )
        else:
            jobs = await conn.fetchval(
                "SELECT count(*) FROM kagent_fork.experiment WHERE source_session_id = $1", conv.session_id
            )
    assert jobs == len(made)
    # And the service is still whole: another user's read, at once.
    r = await small.get(f"/api/sessions/{other.session_id}/invocations", headers={"X-User-Id": other.user_id})
    assert r.status_code == 200


async def test_a_pool_wait_is_bounded_and_said_as_503(settings: Settings, database_url: str) -> None:
    """Every connection of the pool lent out for longer than the wait: a request for one is refused with 503
    and Retry-After after DB_POOL_WAIT_SECONDS, not a hang; once one is back it is lent again."""
    tight = dataclasses.replace(settings, db_pool_wait_seconds=1)
    small_pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    svc = Services(settings=tight, store=Store(tight.service_schema), pool=small_pool)
    try:
        held = await small_pool.acquire()
        began = time.monotonic()
        with pytest.raises(Busy) as refused:
            async with svc.connection():
                pass
        waited = time.monotonic() - began
        await small_pool.release(held)
        assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "1"}
        assert "DB_POOL_WAIT_SECONDS" in refused.value.message
        assert 0.9 < waited < 5
        async with svc.connection() as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await small_pool.close()


async def test_a_task_holding_a_pooled_connection_may_not_wait_for_another(services: Services) -> None:
    """The rule the burst test stands on, enforced in every test (KAGENT_FORK_POOL_STRICT, conftest.py)."""
    async with services.connection():
        with pytest.raises(NestedConnection):
            async with services.connection():
                pass
    async with services.connection() as conn:  # one at a time is fine
        assert await conn.fetchval("SELECT 1") == 1
