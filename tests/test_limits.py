"""Configurable caps with clear refusals: the body size (413), the events one synchronous fork may copy
(MAX_FORK_EVENTS, 422, refused before anything is written), and forks per user per minute
(FORK_RATE_PER_MINUTE, 429 with Retry-After), counted from the lineage records so that replicas share it."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.config import Settings
from tests.helpers import new_user, seed, table_fingerprint
from tests.support.live_server import live_server

RATE = 3  # forks per user in any minute


@pytest.fixture(scope="module")
async def limited(database_url: str, pool: asyncpg.Pool) -> AsyncIterator[Any]:
    settings = Settings(database_url=database_url, max_fork_events=10, fork_rate_per_minute=RATE, max_body_bytes=2048)
    async with AsyncTestClient(app=create_app(settings, database_url)) as c:
        yield c


@pytest.fixture(scope="module")
def replica_url(database_url: str, pool: asyncpg.Pool) -> Iterator[str]:
    """A second server with the same limits on the same database: another replica."""
    settings = Settings(database_url=database_url, max_fork_events=10, fork_rate_per_minute=RATE)
    with live_server(create_app(settings, database_url)) as url:
        yield url


def refusal(r: Any, status: int, says: str) -> str:
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and says in r.json()["error"], r.text
    return str(r.json()["error"])


async def test_body_size(limited: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=1)
    me = {"X-User-Id": conv.user_id}
    before = await table_fingerprint(pool)
    body = {"name": "x" * 256, "dry_run": True}
    padded = '{"name": "%s", "dry_run": true}' % ("x" * 200) + " " * 2000  # valid JSON, 2.2 KB
    refusal(await limited.post(f"/api/sessions/{conv.session_id}/fork", content=padded, headers=me), 413, "Too Large")
    assert (await limited.post(f"/api/sessions/{conv.session_id}/fork", json=body, headers=me)).status_code == 200
    assert await table_fingerprint(pool) == before


async def test_events_per_fork(limited: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=4, tool_calls=True, user_id=new_user())  # 4 events a turn
    me = {"X-User-Id": conv.user_id}
    path = f"/api/sessions/{conv.session_id}/fork"
    assert len(conv.events) == 16
    before = await table_fingerprint(pool)
    says = refusal(await limited.post(path, json={}, headers=me), 422, "MAX_FORK_EVENTS")
    assert "more than 10 events" in says
    three_turns = {"rewind_before_invocation_id": conv.turns[3].invocation_id}  # 12 events: still too many
    refusal(await limited.post(path, json=three_turns, headers=me), 422, "MAX_FORK_EVENTS")
    # a dry run still answers, and says what a fork would meet
    plan = await limited.post(path, json={"dry_run": True}, headers=me)
    assert plan.status_code == 200 and plan.json()["data"]["events_copied"] == 16
    assert any("MAX_FORK_EVENTS" in w for w in plan.json()["data"]["warnings"])
    assert await table_fingerprint(pool) == before, "a refused fork wrote something"
    # at most the limit is fine
    r = await limited.post(path, json={"rewind_before_invocation_id": conv.turns[2].invocation_id}, headers=me)
    assert r.status_code == 201 and r.json()["data"]["fork"]["events_copied"] == 8
    plan = await limited.post(path, json={"dry_run": True, **three_turns}, headers=me)
    assert plan.json()["data"]["events_copied"] == 12


async def test_forks_per_user_per_minute(limited: Any, replica_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=1, user_id=new_user())
    me = {"X-User-Id": conv.user_id}
    path = f"/api/sessions/{conv.session_id}/fork"
    # refused forks take no slot
    for _ in range(RATE + 1):
        assert (await limited.post("/api/sessions/no-such-session/fork", json={}, headers=me)).status_code == 404
    key = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    made = [await limited.post(path, json={}, headers={**me, **key})] + [
        await limited.post(path, json={}, headers=me) for _ in range(RATE - 1)
    ]
    assert [r.status_code for r in made] == [201] * RATE
    before = await table_fingerprint(pool)
    over = await limited.post(path, json={}, headers=me)
    says = refusal(over, 429, "FORK_RATE_PER_MINUTE")
    retry_after = int(over.headers["retry-after"])
    assert 1 <= retry_after <= 60 and f"retry in {retry_after} s" in says
    # another replica counts the same forks
    async with httpx.AsyncClient(base_url=replica_url) as c:
        refusal(await c.post(path, json={}, headers=me), 429, "FORK_RATE_PER_MINUTE")
    # dry runs and replays are not forks; other users have their own budget
    assert (await limited.post(path, json={"dry_run": True}, headers=me)).status_code == 200
    replay = await limited.post(path, json={}, headers={**me, **key})
    assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
    assert await table_fingerprint(pool) == before
    other = await seed(pool, dialect="v1", turns=1, user_id=new_user())
    r = await limited.post(f"/api/sessions/{other.session_id}/fork", json={}, headers={"X-User-Id": other.user_id})
    assert r.status_code == 201
    # a minute after its oldest fork, the user may fork once more (the records are aged instead of waiting)
    async with pool.acquire() as conn:
        oldest = await conn.fetchval("SELECT min(created_at) FROM kagent_fork.fork WHERE user_id = $1", conv.user_id)
        await conn.execute(
            "UPDATE kagent_fork.fork SET created_at = created_at - interval '61 seconds' "
            "WHERE user_id = $1 AND created_at = $2",
            conv.user_id,
            oldest,
        )
    assert (await limited.post(path, json={}, headers=me)).status_code == 201
    refusal(await limited.post(path, json={}, headers=me), 429, "FORK_RATE_PER_MINUTE")


async def test_the_rate_holds_under_concurrency(
    replica_url: str, live_url: str, database_url: str, pool: asyncpg.Pool
) -> None:
    """20 forks of one user at once, through two replicas: exactly RATE are made."""
    conv = await seed(pool, dialect="v1", turns=1, user_id=new_user())
    me = {"X-User-Id": conv.user_id}
    path = f"/api/sessions/{conv.session_id}/fork"
    settings = Settings(database_url=database_url, fork_rate_per_minute=RATE)
    with live_server(create_app(settings, database_url)) as other_replica:
        async with (
            httpx.AsyncClient(base_url=replica_url, timeout=30) as a,
            httpx.AsyncClient(base_url=other_replica, timeout=30) as b,
        ):
            answers = await asyncio.gather(*[(a, b)[i % 2].post(path, json={}, headers=me) for i in range(20)])
    assert Counter(r.status_code for r in answers) == {201: RATE, 429: 20 - RATE}
    assert all(int(r.headers["retry-after"]) >= 1 for r in answers if r.status_code == 429)
    async with pool.acquire() as conn:
        forks = await conn.fetchval(
            "SELECT count(*) FROM kagent_fork.fork WHERE parent_session_id = $1", conv.session_id
        )
    assert forks == RATE
    # the default server (FORK_RATE_PER_MINUTE unset) does not limit
    async with httpx.AsyncClient(base_url=live_url, timeout=30) as b:
        assert (await b.post(path, json={}, headers=me)).status_code == 201
