"""A slow or stalled reader holds no database connection (issue 32, item 2): clients that ask for a large
transcript and stop reading (sockets with a small receive buffer) leave no connection of the service idle in
a transaction, and another user's read answers at once. Real PostgreSQL, a real uvicorn server, raw sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from collections.abc import Iterator

import asyncpg
import httpx
import pytest

from service.app import create_app
from service.config import Settings
from tests.helpers import named_connections, seed
from tests.support.live_server import live_server

READER = "kf-slow-reader"
POOL = 3
PAD = "y" * 8000  # each turn's question made 8 KB longer: a transcript of about 6.4 MB


@pytest.fixture(scope="module")
def slow_url(settings: Settings, database_url: str) -> Iterator[str]:
    small = dataclasses.replace(settings, pool_max_size=POOL, db_pool_wait_seconds=3)
    named = named_connections(database_url, READER)
    with live_server(create_app(small, named)) as url:
        yield url


def _stalled(url: str, path: str, user: str) -> socket.socket:
    """A client that sends the request, reads a few bytes, and then reads no more."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nX-User-Id: {user}\r\n\r\n".encode())
    assert sock.recv(64).startswith(b"HTTP/1.1 200")
    return sock


async def test_stalled_transcript_readers_hold_no_connection(
    slow_url: str, database_url: str, pool: asyncpg.Pool
) -> None:
    big = await seed(pool, dialect="v1", turns=200)
    async with pool.acquire() as conn:
        for text in big.user_texts:
            await conn.execute(
                "UPDATE event SET data = replace(data, $2, $3) WHERE session_id = $1", big.session_id, text, text + PAD
            )
    other = await seed(pool, dialect="legacy", turns=2)
    path = f"/api/sessions/{big.session_id}/transcript?format=markdown"
    stalled = [await asyncio.to_thread(_stalled, slow_url, path, big.user_id) for _ in range(POOL + 2)]
    try:
        await asyncio.sleep(1.0)
        admin = await asyncpg.connect(database_url)
        try:
            holding = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = $1 AND state LIKE 'idle in transaction%'",
                READER,
            )
        finally:
            await admin.close()
        assert holding == 0
        began = time.monotonic()
        async with httpx.AsyncClient(base_url=slow_url, timeout=10) as client:
            r = await client.get(f"/api/sessions/{other.session_id}/invocations", headers={"X-User-Id": other.user_id})
        assert r.status_code == 200 and time.monotonic() - began < 1.0
    finally:
        for s in stalled:
            s.close()
    # The whole transcript still arrives for a client that reads it.
    async with httpx.AsyncClient(base_url=slow_url, timeout=60) as client:
        r = await client.get(path, headers={"X-User-Id": big.user_id})
    assert r.status_code == 200 and len(r.content) > 1_500_000 and r.text.count(PAD) >= 200
