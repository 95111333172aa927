"""A slow or stalled reader holds no database connection (issue 32, item 2): clients that ask for a large
transcript and stop reading (sockets with a small receive buffer) leave no connection of the service idle in
a transaction, and another user's read answers at once. What their answers hold meanwhile is bounded (issue 45,
item 4): memory up to RESPONSE_MEMORY_BYTES for all of them, then temporary files up to RESPONSE_DISK_BYTES, then
503; all of it given back when they read or go. Real PostgreSQL, a real uvicorn server, raw sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
import httpx
import pytest

from service.app import create_app
from service.config import Settings
from service.doors import held
from tests.helpers import named_connections, seed
from tests.support.conversations import Conversation
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


def _stalled(url: str, path: str, user: str, status: bytes = b"HTTP/1.1 200") -> socket.socket:
    """A client that sends the request, reads a few bytes, and then reads no more."""
    sock, head = _asked(url, path, user)
    assert head.startswith(status), head
    return sock


def _asked(url: str, path: str, user: str) -> tuple[socket.socket, bytes]:
    """A client with a 4 KiB receive buffer that sent the request and read the first bytes of the answer."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect((host, int(port)))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nX-User-Id: {user}\r\nConnection: close\r\n\r\n".encode())
    return sock, sock.recv(64)


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


def _body(sock: socket.socket) -> bytes:
    """The rest of a stalled client's answer, read to the connection's end, its chunks joined."""
    parts = []
    while block := sock.recv(1 << 16):
        parts.append(block)
    sock.close()
    body = b"".join(parts).partition(b"\r\n\r\n")[2]
    out, at = [], 0
    while size := int(body[at : body.index(b"\r\n", at)], 16):
        start = body.index(b"\r\n", at) + 2
        out.append(body[start : start + size])
        at = start + size + 2
    return b"".join(out)


async def _held(client: httpx.AsyncClient) -> dict[str, float]:
    """The service's own count of the bytes its answers hold, by place (kagent_fork_response_bytes_held)."""
    text = (await client.get("/metrics")).text
    found = re.findall(r'^kagent_fork_response_bytes_held\{place="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {place: float(value) for place, value in found}


@contextmanager
def _budgeted(settings: Settings, database_url: str, memory: int, disk: int) -> Iterator[str]:
    small = dataclasses.replace(settings, response_memory_bytes=memory, response_disk_bytes=disk)
    with live_server(create_app(small, database_url)) as url:
        yield url


async def _padded(pool: asyncpg.Pool, turns: int) -> Conversation:
    conv = await seed(pool, dialect="v1", turns=turns)
    async with pool.acquire() as conn:
        for text in conv.user_texts:
            await conn.execute(
                "UPDATE event SET data = replace(data, $2, $3) WHERE session_id = $1", conv.session_id, text, text + PAD
            )
    return conv


async def test_stalled_readers_hold_at_most_the_memory_budget(
    settings: Settings, database_url: str, pool: asyncpg.Pool
) -> None:
    conv = await _padded(pool, turns=200)
    path = f"/api/sessions/{conv.session_id}/transcript"
    budget = 4_000_000
    with _budgeted(settings, database_url, memory=budget, disk=100_000_000) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            reference = (await client.get(path, headers={"X-User-Id": conv.user_id})).content
            # Each answer is larger than what the kernel takes into a socket's send buffer (1-2 MB here, of
            # tcp_wmem's 4 MB at most): each stalled answer holds a part of itself in the service.
            assert len(reference) > 3_000_000
            seen: list[dict[str, float]] = []
            done = asyncio.Event()

            async def watch() -> None:
                while not done.is_set():
                    seen.append(await _held(client))
                    await asyncio.sleep(0.01)

            watching = asyncio.create_task(watch())
            stalled = []
            try:
                for _ in range(6):
                    stalled.append(await asyncio.to_thread(_stalled, url, path, conv.user_id))
                await asyncio.sleep(0.3)
                held = await _held(client)
            finally:
                done.set()
                await watching
            # Never more in memory than the budget, while the answers were made and while they wait; the rest in
            # temporary files.
            assert max(s.get("memory", 0) for s in [*seen, held]) <= budget
            assert held["disk"] > 0 and held["memory"] + held["disk"] > budget
            bodies = await asyncio.gather(*(asyncio.to_thread(_body, sock) for sock in stalled))
            assert all(body == reference for body in bodies)
            assert await _held(client) == {"memory": 0, "disk": 0}


async def test_answers_past_both_limits_are_refused_and_freed_when_clients_go(
    settings: Settings, database_url: str, pool: asyncpg.Pool
) -> None:
    conv = await _padded(pool, turns=200)
    path = f"/api/sessions/{conv.session_id}/transcript"
    with _budgeted(settings, database_url, memory=1_000_000, disk=4_000_000) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            # The first answer (3.3 MB) outgrows the memory and goes to a file; its file's share is held until it
            # ends, so the second answer, past the memory too, finds no room on disk.
            stalled = await asyncio.to_thread(_stalled, url, path, conv.user_id)
            refused = await client.get(path, headers={"X-User-Id": conv.user_id})
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
            assert "RESPONSE_DISK_BYTES" in refused.json()["error"]
            # A refused answer gives back what it had taken: only the stalled answer is held, all of it on disk.
            held = await _held(client)
            assert held["memory"] == 0 and 3_000_000 < held["disk"] <= 4_000_000
            stalled.close()  # the client goes without reading
            for _ in range(100):
                if await _held(client) == {"memory": 0, "disk": 0}:
                    break
                await asyncio.sleep(0.05)
            assert await _held(client) == {"memory": 0, "disk": 0}
            again = await client.get(path, headers={"X-User-Id": conv.user_id})
            assert again.status_code == 200 and again.text.count(PAD) >= 200


async def _counted(client: httpx.AsyncClient) -> dict[str, float]:
    """Answers held so far, by where (kagent_fork_responses_held_total)."""
    text = (await client.get("/metrics")).text
    found = re.findall(r'^kagent_fork_responses_held_total\{place="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {place: float(value) for place, value in found}


async def test_a_large_json_answer_is_held_within_the_budget_too(
    settings: Settings, database_url: str, pool: asyncpg.Pool
) -> None:
    """Any answer larger than a block (here a page of 200 turns) waits within the budget as a transcript does:
    with no memory to hold it, in a temporary file, sent whole with its Content-Length; with no room on disk
    either, 503 before its first byte."""
    conv = await _padded(pool, turns=200)
    path = f"/api/sessions/{conv.session_id}/invocations?limit=1000"
    user = {"X-User-Id": conv.user_id}
    with _budgeted(settings, database_url, memory=0, disk=10_000_000) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            before = await _counted(client)
            r = await client.get(path, headers=user)
            assert r.status_code == 200 and len(r.content) > held.BLOCK and len(r.json()["data"]) == 200
            assert r.headers["content-length"] == str(len(r.content)) and "transfer-encoding" not in r.headers
            assert (await _counted(client))["disk"] == before.get("disk", 0) + 1
            head = await client.head(path, headers=user)  # HEAD: the same headers, no body
            assert head.status_code == 200 and not head.content
            assert head.headers["content-length"] == str(len(r.content))
            assert await _held(client) == {"memory": 0, "disk": 0}
            small = await client.get(f"/api/sessions/{conv.session_id}/invocations?limit=2", headers=user)
            assert small.status_code == 200 and len(small.json()["data"]) == 2  # a small answer is sent as it is
    with _budgeted(settings, database_url, memory=0, disk=0) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            r = await client.get(path, headers=user)
            assert r.status_code == 503 and r.headers["Retry-After"] == "1"
            assert await _held(client) == {"memory": 0, "disk": 0}
