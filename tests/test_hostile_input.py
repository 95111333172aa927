"""Hostile input against a real server, byte for byte: each is a clear 4xx and the database is unchanged.

Sent raw (tests/support/live_server.py), because httpx and Litestar's test client join a header sent
twice and refuse invalid bytes before they leave the client. Where HTTP itself cannot parse a request
(a NUL in a header, invalid bytes in the request line, two Content-Length headers), uvicorn refuses it
with its own plain-text 400 before the application sees it; everything else answers kagent's envelope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import asyncpg
import pytest

from tests.helpers import new_user, seed, table_fingerprint
from tests.support.conversations import Conversation, create_share
from tests.support.live_server import RawResponse, http_request, raw_request

JSON = ("Content-Type", "application/json")
ENDPOINTS = [
    ("POST", "/api/sessions/{}/fork"),
    ("POST", "/api/sessions/{}/rewind"),
    ("POST", "/api/sessions/{}/rewinds/r-1/undo"),
    ("GET", "/api/sessions/{}/invocations"),
    ("GET", "/api/sessions/{}/forks"),
    ("GET", "/api/sessions/{}/tree"),
]


@pytest.fixture(scope="module")
async def conv(pool: asyncpg.Pool) -> Conversation:
    return await seed(pool, dialect="v1", turns=3, tool_calls=True)


@pytest.fixture
async def unchanged(pool: asyncpg.Pool) -> AsyncIterator[None]:
    before = await table_fingerprint(pool)
    yield
    assert await table_fingerprint(pool) == before, "a refused request wrote something"


def refused(r: RawResponse, status: int, says: str | None = None, *, envelope: bool = True) -> None:
    assert r.status == status, (r.status, r.body[:300])
    if not envelope:
        return
    body = r.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], body
    assert says is None or says in body["error"], body


async def send(live_url: str, method: str, target: str | bytes, headers: Any = (), body: bytes = b"") -> RawResponse:
    return await raw_request(live_url, http_request(method, target, list(headers), body), no_body=method == "HEAD")


async def test_headers_sent_twice(live_url: str, conv: Conversation, unchanged: None) -> None:
    me = ("X-User-Id", conv.user_id)
    fork = f"/api/sessions/{conv.session_id}/fork"
    for name, values in [
        ("X-User-Id", [conv.user_id, conv.user_id]),
        ("X-User-Id", [conv.user_id, "mallory@example.com"]),
        ("X-Share-Token", ["a", "b"]),
        ("Authorization", ["Bearer a.b.c", "Bearer d.e.f"]),
        ("X-Agent-Name", ["a", "b"]),
        ("Idempotency-Key", ["k1", "k2"]),
        ("Content-Type", ["application/json", "text/plain"]),
    ]:
        headers = [(name, value) for value in values] + ([] if name == "X-User-Id" else [me])
        r = await send(live_url, "POST", fork, [*headers, JSON] if name != "Content-Type" else headers, b"{}")
        refused(r, 400, "given once")
    # the same for the query: user_id twice, limit twice
    for query in (f"user_id={quote(conv.user_id)}&user_id=x", "limit=1&limit=2", "after=a&after=b"):
        refused(await send(live_url, "GET", f"/api/sessions/{conv.session_id}/invocations?{query}"), 400, "once")
    # two Content-Length headers: HTTP cannot frame the request; uvicorn refuses it itself
    r = await send(live_url, "POST", fork, [me, JSON, ("Content-Length", "2"), ("Content-Length", "2")], b"{}")
    refused(r, 400, envelope=False)


async def test_huge_and_deeply_nested_bodies(live_url: str, conv: Conversation, unchanged: None) -> None:
    me, fork = ("X-User-Id", conv.user_id), f"/api/sessions/{conv.session_id}/fork"
    huge = b'{"name": "' + b"x" * (3 * 1024 * 1024) + b'"}'
    refused(await send(live_url, "POST", fork, [me, JSON], huge), 413)
    chunked = b"".join(
        b"%x\r\n" % len(huge[i : i + 65536]) + huge[i : i + 65536] + b"\r\n" for i in range(0, len(huge), 65536)
    )
    refused(
        await send(live_url, "POST", fork, [me, JSON, ("Transfer-Encoding", "chunked")], chunked + b"0\r\n\r\n"), 413
    )
    depth = 400_000  # within the 1 MiB limit
    for body, says in [
        (b"[" * depth + b"]" * depth, "Expected `object`"),
        (b'{"name": ' + b"[" * depth + b"]" * depth + b"}", "$.name"),
        (b'{"name": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}", "$.name"),
        (b'{"zzz": ' + b"[" * depth + b"]" * depth + b"}", "unknown field"),
    ]:
        refused(await send(live_url, "POST", fork, [me, JSON], body), 400, says)
    undo = f"/api/sessions/{conv.session_id}/rewinds/r-1/undo"
    refused(await send(live_url, "POST", undo, [me, JSON], b"[" * depth + b"]" * depth), 400)


async def test_invalid_utf8_and_nul_bytes(live_url: str, conv: Conversation, unchanged: None) -> None:
    me, fork = ("X-User-Id", conv.user_id), f"/api/sessions/{conv.session_id}/fork"
    for body, says in [
        (b'{"name": "\xff\xfe"}', "UTF-8"),
        (b'{"name": "caf\xc3"}', "UTF-8"),
        (b'{"name": "a\x00b"}', "not valid JSON"),
        (b'{"name": "a\\u0000b"}', "$.name"),
        (b'{"rewind_before_invocation_id": "e-\\u0000"}', "rewind_before_invocation_id"),
        (b"\x00", "not valid JSON"),
    ]:
        refused(await send(live_url, "POST", fork, [me, JSON], body), 400, says)
    refused(await send(live_url, "POST", "/api/sessions/a%00b/fork", [me, JSON], b"{}"), 400, "NUL")
    refused(await send(live_url, "GET", "/api/sessions/x/tree?user_id=a%00b"), 400, "NUL")
    refused(await send(live_url, "GET", f"/api/sessions/{conv.session_id}/invocations?after=e%00", [me]), 400, "NUL")
    refused(await send(live_url, "POST", "/api/sessions/x/rewinds/a%00/undo", [me, JSON], b"{}"), 400, "NUL")
    # percent-encoded bytes that are not UTF-8 name no session
    refused(await send(live_url, "POST", "/api/sessions/%ff%fe/fork", [me, JSON], b"{}"), 404)
    refused(await send(live_url, "GET", "/api/sessions/x/tree?user_id=%ff"), 404)
    # raw invalid bytes in a header value match no user; raw ones in the request line, or a NUL in a
    # header, are not HTTP: uvicorn refuses them
    refused(await send(live_url, "POST", fork, [("X-User-Id", b"\xff\xfe"), JSON], b"{}"), 400, "not valid UTF-8")
    refused(await send(live_url, "POST", b"/api/sessions/\xff/fork", [me, JSON], b"{}"), 400, envelope=False)
    refused(await send(live_url, "POST", fork, [("X-User-Id", b"a\x00b"), JSON], b"{}"), 400, envelope=False)


async def test_very_long_strings(live_url: str, conv: Conversation, unchanged: None) -> None:
    me, sid = ("X-User-Id", conv.user_id), conv.session_id
    long = "x" * 10_000
    for method, path in ENDPOINTS:
        body = b"{}" if method == "POST" else b""
        refused(await send(live_url, method, path.format(long), [me, JSON], body), 400, "session id")
    refused(
        await send(live_url, "POST", f"/api/sessions/{sid}/rewinds/{long}/undo", [me, JSON], b"{}"), 400, "rewind id"
    )
    fork = f"/api/sessions/{sid}/fork"
    for field in ("name", "rewind_before_invocation_id"):
        body = f'{{"{field}": "{"y" * 257}"}}'.encode()
        refused(await send(live_url, "POST", fork, [me, JSON], body), 400, "length <= 256")
    rewind = f'{{"rewind_before_invocation_id": "{long}"}}'.encode()
    refused(await send(live_url, "POST", f"/api/sessions/{sid}/rewind", [me, JSON], rewind), 400, "length <= 256")
    for header in ("X-User-Id", "X-Share-Token", "Idempotency-Key"):
        headers = [(header, long)] + ([] if header == "X-User-Id" else [me])
        refused(await send(live_url, "POST", fork, [*headers, JSON], b"{}"), 400, "256")
    refused(await send(live_url, "GET", f"/api/sessions/{sid}/tree?user_id={long}"), 400, "256")
    refused(await send(live_url, "GET", f"/api/sessions/{sid}/invocations?after={long}", [me]), 400, "256")
    refused(await send(live_url, "GET", f"/api/sessions/{sid}/invocations?limit={'9' * 400}", [me]), 400, "limit")


SQL_TRICKS = [
    "' OR '1'='1",
    "x'; DROP TABLE event; --",
    '" OR ""="',
    "%' OR user_id LIKE '%",
    "1) OR (1=1",
    "$1",
    "\\'; SELECT pg_sleep(5); --",
    "e-%",
    "e-_",
    "_",
    "%",
]


async def test_sql_tricks_in_ids_and_bodies(live_url: str, conv: Conversation, unchanged: None) -> None:
    me = ("X-User-Id", conv.user_id)
    for trick in SQL_TRICKS:
        for method, path in ENDPOINTS:
            body = b'{"rewind_before_invocation_id": "e-1"}' if path.endswith("/rewind") else b""
            r = await send(live_url, method, path.format(quote(trick, safe="")), [me, JSON], body)
            refused(r, 404)
        sid = conv.session_id
        # as a user, a share token, a boundary or a rewind id
        refused(await send(live_url, "GET", f"/api/sessions/{sid}/tree?user_id={quote(trick)}"), 404)
        refused(await send(live_url, "GET", f"/api/sessions/{sid}/tree", [me, ("X-Share-Token", trick)]), 403)
        escaped = trick.replace("\\", "\\\\").replace('"', '\\"')
        boundary = f'{{"rewind_before_invocation_id": "{escaped}"}}'.encode()
        refused(await send(live_url, "POST", f"/api/sessions/{sid}/rewind", [me, JSON], boundary), 404, "not found")
        strict = f'{{"rewind_before_invocation_id": "{escaped}", "if_boundary_missing": "error"}}'.encode()
        refused(await send(live_url, "POST", f"/api/sessions/{sid}/fork", [me, JSON], strict), 404, "not found")
        r = await send(live_url, "POST", f"/api/sessions/{sid}/rewinds/{quote(trick, safe='')}/undo", [me, JSON], b"")
        refused(r, 404)
        # a dry run with the trick as name answers the name verbatim and writes nothing
        plan = await send(
            live_url,
            "POST",
            f"/api/sessions/{sid}/fork",
            [me, JSON],
            b'{"dry_run": true, "name": "%s"}' % escaped.encode(),
        )
        assert plan.status == 200 and plan.json()["data"]["name"] == trick
        assert plan.json()["data"]["events_copied"] == len(conv.events)


async def test_path_tricks(live_url: str, conv: Conversation, unchanged: None) -> None:
    """Nothing climbs out of a session id: the router matches the decoded path, so dots and `%2F` only
    make a route that does not exist or an id that names no session.
    (A trailing slash or a leading `//` reach the same route: harmless, access never depends on the path.)"""
    me, sid = ("X-User-Id", conv.user_id), conv.session_id
    for target in [
        "/api/sessions/../healthz/fork",
        "/api/sessions/%2e%2e/fork",
        "/api/sessions/%2e%2e%2f%2e%2e%2fhealthz/fork",
        "/api/sessions/%252e%252e/fork",
        "/api/sessions/..%5c..%5chealthz/fork",
        f"/api/sessions/{sid}%2f..%2f{sid}/fork",
        f"/api/sessions/{sid}/../{sid}/fork",
        "/api/sessions//fork",
        "/api/sessions/./fork",
        f"/API/sessions/{sid}/fork",
        f"/api/sessions/{sid}/fork;dry_run=true",
        f"/api/sessions/{sid}%20/fork",
        f"/api/sessions/%20{sid}/fork",
    ]:
        r = await send(live_url, "POST", target, [me, JSON], b"{}")
        assert 400 <= r.status < 500, (target, r.status, r.body[:200])
        refused(r, r.status)


async def test_unicode_ids_match_exactly(live_url: str, pool: asyncpg.Pool) -> None:
    """Ids are compared as kagent does, byte for byte: no normalisation, no trimming, no case folding."""
    user = f"zoë-{new_user()}"
    conv = await seed(pool, dialect="legacy", turns=2, user_id=user, session_id=f"會話-🚀-café-{new_user()}")
    nfd = conv.session_id.replace("é", "e\u0301")
    before = await table_fingerprint(pool)
    me = ("X-User-Id", user.encode())  # UTF-8 bytes, as a Go client sends them
    for variant in [nfd, conv.session_id.upper(), "\u202e" + conv.session_id, conv.session_id + "\u200b"]:
        refused(await send(live_url, "POST", f"/api/sessions/{quote(variant)}/fork", [me, JSON], b"{}"), 404)
    path = f"/api/sessions/{quote(conv.session_id)}"
    other_user = [("X-User-Id", user.replace("ë", "e").encode()), JSON]
    refused(await send(live_url, "POST", f"{path}/fork", other_user, b"{}"), 404)
    # The same name in Latin-1 bytes is not UTF-8: it names no one (400), never the UTF-8 user `zoë` (issue 32)
    latin = [("X-User-Id", user.encode("latin-1")), JSON]
    refused(await send(live_url, "POST", f"{path}/fork", latin, b"{}"), 400, "not valid UTF-8")
    assert await table_fingerprint(pool) == before
    # the exact ids work, from the header (UTF-8) or the query
    listed = await send(live_url, "GET", f"{path}/invocations", [me])
    assert listed.status == 200 and len(listed.json()["data"]) == 2
    forked = await send(live_url, "POST", f"{path}/fork?user_id={quote(user)}", [JSON], b"{}")
    assert forked.status == 201, forked.body
    assert forked.json()["data"]["user_id"] == user and forked.json()["data"]["fork"]["events_copied"] == len(
        conv.events
    )


async def test_wrong_content_types(live_url: str, conv: Conversation, unchanged: None) -> None:
    me, fork = ("X-User-Id", conv.user_id), f"/api/sessions/{conv.session_id}/fork"
    for media, body in [
        ("text/plain", b"{}"),
        ("application/x-www-form-urlencoded", b"name=x"),
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="name"\r\n\r\nx\r\n--b--\r\n',
        ),
        ("application/xml", b"<fork/>"),
        ("application/jsonx", b"{}"),
    ]:
        refused(await send(live_url, "POST", fork, [me, ("Content-Type", media)], body), 415, "application/json")
    utf16 = '{"name": "x"}'.encode("utf-16")
    r = await send(live_url, "POST", fork, [me, ("Content-Type", "application/json; charset=utf-16")], utf16)
    refused(r, 400)
    refused(await send(live_url, "POST", fork, [me, JSON], b'{"name": "a", "name": "b"}'), 400, "more than once")
    refused(
        await send(live_url, "POST", fork, [me, JSON], b'{"dry_run": true, "dry_run": false}'), 400, "more than once"
    )


async def test_wrong_methods(live_url: str, conv: Conversation, unchanged: None) -> None:
    me = ("X-User-Id", conv.user_id)
    paths = [p.format(conv.session_id) for _, p in ENDPOINTS] + ["/healthz", "/readyz", "/openapi.yaml", "/metrics"]
    for path in paths:
        allowed = "POST" if any(m == "POST" and p.format(conv.session_id) == path for m, p in ENDPOINTS) else "GET"
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "TRACE", "HEAD"):
            if method == allowed:
                continue
            r = await send(live_url, method, path, [me, JSON], b"{}" if method in ("POST", "PUT", "PATCH") else b"")
            if method == "HEAD":  # GET without the body where GET is allowed (tests/test_http_details.py)
                assert r.status == (200 if allowed == "GET" else 405), (path, method, r.status)
                continue
            refused(r, 405)
            assert allowed in dict(r.headers)["allow"]
    r = await send(live_url, "FORK", f"/api/sessions/{conv.session_id}/fork", [me, JSON], b"{}")
    refused(r, 400, envelope=False)  # not an HTTP method: uvicorn refuses it


async def test_share_tokens_cannot_be_guessed_by_pattern(live_url: str, pool: asyncpg.Pool, conv: Conversation) -> None:
    """A share token is matched exactly: no prefix, no case, no LIKE."""
    async with pool.acquire() as conn:
        token = await create_share(conn, session_id=conv.session_id, owner=conv.user_id, read_only=True)
    before = await table_fingerprint(pool)
    path = f"/api/sessions/{conv.session_id}/invocations"
    for guess in (token[:-1], token + "x", token.swapcase(), token[:4] + "%", token[:4] + "_" * (len(token) - 4)):
        refused(await send(live_url, "GET", path, [("X-User-Id", new_user()), ("X-Share-Token", guess)]), 403)
    ok = await send(live_url, "GET", path, [("X-User-Id", new_user()), ("X-Share-Token", token)])
    assert ok.status == 200
    assert await table_fingerprint(pool) == before
