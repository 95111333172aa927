"""Running beside kagent: SIGTERM finishes in-flight forks before exiting, and two replicas share one
database safely."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg
import httpx
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.config import Settings
from tests.helpers import seed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(database_url: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`kagent-fork serve` as operators run it, in its own process."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port)],
        env={**os.environ, "DATABASE_URL": database_url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the service did not start"
            time.sleep(0.1)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def test_sigterm_finishes_the_fork_in_flight_then_exits(database_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3)
    key = "sigterm-test"
    with served(database_url) as (proc, url):
        # Hold the lock the fork's Idempotency-Key takes, so the fork is caught in flight.
        blocker = await asyncpg.connect(database_url)
        try:
            await blocker.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", f"fork:{conv.user_id}\n{key}")
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                request = asyncio.create_task(
                    client.post(
                        f"/api/sessions/{conv.session_id}/fork", json={},
                        headers={"X-User-Id": conv.user_id, "Idempotency-Key": key},
                    )
                )  # fmt: skip
                for _ in range(100):
                    waiting = await blocker.fetchval(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    )
                    if waiting:
                        break
                    await asyncio.sleep(0.05)
                assert waiting, "the fork is waiting in the database"
                proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.5)
                assert proc.poll() is None, "the service waits for the fork in flight"
                await blocker.execute("SELECT pg_advisory_unlock_all()")
                response = await request
        finally:
            await blocker.close()
        assert response.status_code == 201, response.text
        # uvicorn re-raises the signal once its graceful shutdown is over, so the exit reads "terminated"
        assert await asyncio.to_thread(proc.wait, 20) in (0, -signal.SIGTERM)
    async with pool.acquire() as conn:
        assert await conn.fetchval(
            "SELECT count(*) FROM event WHERE session_id = $1", response.json()["data"]["id"]
        ) == len(conv.events)


async def test_two_replicas_on_one_database(settings: Settings, database_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=3)
    headers = {"X-User-Id": conv.user_id, "Idempotency-Key": "two-replicas"}
    async with (
        AsyncTestClient(app=create_app(settings, database_url)) as one,
        AsyncTestClient(app=create_app(settings, database_url)) as two,
    ):
        answers: list[Any] = await asyncio.gather(
            *[
                (one, two)[i % 2].post(f"/api/sessions/{conv.session_id}/fork", json={}, headers=headers)
                for i in range(20)
            ]
        )
    assert sorted(r.status_code for r in answers) == [200] * 19 + [201]
    assert len({r.json()["data"]["id"] for r in answers}) == 1
    async with pool.acquire() as conn:
        assert (
            await conn.fetchval("SELECT count(*) FROM kagent_fork.fork WHERE parent_session_id = $1", conv.session_id)
            == 1
        )
