"""Bad input and who may do what: every refusal is a clear 4xx in kagent's envelope and writes nothing."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.config import Settings
from tests.helpers import new_user, seed, table_fingerprint
from tests.support.conversations import create_share


@pytest.fixture
async def unchanged(pool: asyncpg.Pool) -> AsyncIterator[None]:
    """The test's requests must leave every table exactly as it was."""
    before = await table_fingerprint(pool)
    yield
    assert await table_fingerprint(pool) == before


@pytest.fixture
async def conv(pool: asyncpg.Pool) -> Any:
    return await seed(pool, dialect="v1", turns=2)


def error_of(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]
    return str(body["error"])


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b'{"name": 12}', 400, "Expected `str | null`"),
        (b'{"dry_run": "yes"}', 400, "Expected `bool`"),
        (b'{"surprise": 1}', 400, "unknown field `surprise`"),
        (b'{"task_layout": "diagonal"}', 400, "task_layout"),
        (b'{"name": "' + b"x" * 257 + b'"}', 400, "length <= 256"),
        (b'{"name": "a\\u0000b"}', 400, "name"),
        (b"[1, 2]", 400, "Expected `object`"),
        (b'{"name": "\xff\xfe"}', 400, "not valid UTF-8"),
    ],
)
async def test_bad_bodies(client: Any, conv: Any, unchanged: None, body: bytes, status: int, says: str) -> None:
    r = await client.post(
        f"/api/sessions/{conv.session_id}/fork",
        content=body,
        headers={"X-User-Id": conv.user_id, "Content-Type": "application/json"},
    )
    assert says in error_of(r, status)


async def test_body_limit_and_content_type(client: Any, conv: Any, unchanged: None) -> None:
    url = f"/api/sessions/{conv.session_id}/fork"
    huge = json.dumps({"name": "x" * (2 * 1024 * 1024)})
    error_of(await client.post(url, content=huge, headers={"Content-Type": "application/json"}), 413)
    error_of(await client.post(url, content="name=x", headers={"Content-Type": "text/plain"}), 415)


async def test_framework_errors_use_the_envelope(client: Any, unchanged: None) -> None:
    error_of(await client.get("/api/nothing-here"), 404)
    error_of(await client.delete("/api/sessions/s/fork"), 405)
    error_of(await client.get("/api/sessions/s/fork"), 405)


async def test_long_or_nul_ids_are_refused(client: Any, unchanged: None) -> None:
    assert "session id" in error_of(await client.post("/api/sessions/" + "s" * 300 + "/fork", json={}), 400)
    assert "session id" in error_of(await client.post("/api/sessions/a%00b/fork", json={}), 400)
    r = await client.post("/api/sessions/s/fork", json={}, headers={"Idempotency-Key": "k" * 300})
    assert "Idempotency-Key" in error_of(r, 400)


async def test_sessions_of_others_are_not_found(client: Any, conv: Any, unchanged: None) -> None:
    """A session the caller may not see answers exactly like one that does not exist."""
    other = await client.post(f"/api/sessions/{conv.session_id}/fork", json={}, headers={"X-User-Id": new_user()})
    missing = await client.post("/api/sessions/no-such-session/fork", json={}, headers={"X-User-Id": conv.user_id})
    assert error_of(other, 404) == error_of(missing, 404)


async def test_unsecure_identity_precedence(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=1)
    url = f"/api/sessions/{conv.session_id}/fork"
    # user_id query parameter beats X-User-Id
    r = await client.post(f"{url}?user_id={conv.user_id}", json={}, headers={"X-User-Id": "somebody-else"})
    assert r.status_code == 201 and r.json()["data"]["user_id"] == conv.user_id
    # without either, kagent's default user, who cannot see this session
    error_of(await client.post(url, json={}), 404)


async def test_share_tokens(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=2)
    async with pool.acquire() as conn:
        read_only = await create_share(conn, session_id=conv.session_id, owner=conv.user_id, read_only=True)
        other = await seed(pool, dialect="v1", turns=1)
        foreign = await create_share(conn, session_id=other.session_id, owner=other.user_id, read_only=False)
    visitor = new_user()
    url = f"/api/sessions/{conv.session_id}/fork"
    r = await client.post(url, json={}, headers={"X-User-Id": visitor, "X-Share-Token": read_only})
    assert r.status_code == 201, r.text
    data = r.json()["data"]
    assert data["user_id"] == visitor and data["fork"]["parent_session_id"] == conv.session_id
    async with pool.acquire() as conn:
        owners = {
            row["user_id"]
            for row in await conn.fetch(
                "SELECT user_id FROM event WHERE session_id = $1 UNION SELECT user_id FROM task WHERE session_id = $1",
                data["id"],
            )
        }
    assert owners == {visitor}, "the fork, its events and tasks belong to the caller"
    before = await table_fingerprint(pool)
    error_of(await client.post(url, json={}, headers={"X-User-Id": visitor, "X-Share-Token": "wrong"}), 403)
    # a share of another session does not open this one
    error_of(await client.post(url, json={}, headers={"X-User-Id": visitor, "X-Share-Token": foreign}), 404)
    assert await table_fingerprint(pool) == before


def jwt(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.sig"


async def test_trusted_proxy_mode(settings: Settings, database_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=1)
    proxy = Settings(database_url=database_url, auth_mode="trusted-proxy", user_id_claim="email")
    url = f"/api/sessions/{conv.session_id}/fork"
    async with AsyncTestClient(app=create_app(proxy, database_url)) as c:
        before = await table_fingerprint(pool)
        error_of(await c.post(url, json={}, headers={"X-User-Id": conv.user_id}), 401)
        error_of(await c.post(url, json={}, headers={"Authorization": "Bearer not-a-jwt"}), 401)
        error_of(await c.post(url, json={}, headers={"Authorization": "Bearer a.!!!.c"}), 401)
        error_of(await c.post(url, json={}, headers={"Authorization": f"Bearer {jwt({'email': ''})}"}), 401)
        # the header cannot override the token's user
        r = await c.post(
            url,
            json={},
            headers={"Authorization": f"Bearer {jwt({'sub': 'x', 'email': 'eve'})}", "X-User-Id": conv.user_id},
        )
        error_of(r, 404)
        assert await table_fingerprint(pool) == before
        # the configured claim names the user; sub is the fallback
        ok = await c.post(url, json={}, headers={"Authorization": f"Bearer {jwt({'email': conv.user_id})}"})
        assert ok.status_code == 201 and ok.json()["data"]["user_id"] == conv.user_id
        ok = await c.post(url, json={}, headers={"Authorization": f"Bearer {jwt({'sub': conv.user_id})}"})
        assert ok.status_code == 201
        # a user's token with X-Agent-Name is that user, by the configured claim (tests/test_identity.py)
        eve = {"Authorization": f"Bearer {jwt({'sub': 'x', 'email': 'eve'})}", "X-Agent-Name": "a"}
        error_of(await c.post(url, json={}, headers={**eve, "X-User-Id": conv.user_id}), 404)
        # an agent's call (a service account's token) names the user explicitly
        agent = {"Authorization": f"Bearer {jwt({'sub': 'system:serviceaccount:kagent:agent'})}", "X-Agent-Name": "a"}
        ok = await c.post(url, json={}, headers={**agent, "X-User-Id": conv.user_id})
        assert ok.status_code == 201 and ok.json()["data"]["user_id"] == conv.user_id


async def test_no_state_changing_request_can_be_sent_as_a_form(client: Any, conv: Any, unchanged: None) -> None:
    """CSRF (issue 32): a page on another site can POST a form's types, or nothing, with no body and ?user_id=
    naming the victim, without asking first; every state-changing request refuses them (415, nothing written),
    with a body or without."""
    sid, user = conv.session_id, conv.user_id
    paths = [
        f"/api/sessions/{sid}/fork?user_id={user}",
        f"/api/sessions/{sid}/rewind?user_id={user}",
        f"/api/sessions/{sid}/rewinds/r-1/undo?user_id={user}",
        f"/api/whatif/j-1/cancel?user_id={user}",
        f"/api/experiments/e-1/cancel?user_id={user}",
        f"/api/experiments/e-1/discard?user_id={user}",
        f"/api/experiments/e-1/discard/undo?user_id={user}",
        f"/api/sessions/{sid}/whatif?user_id={user}",
        f"/api/sessions/{sid}/experiments?user_id={user}",
    ]
    for path in paths:
        for headers in ({}, {"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"}):
            r = await client.post(path, headers=headers)
            assert "application/json" in error_of(r, 415), path


async def test_the_explorer_list_refuses_an_unknown_share_token_and_non_ascii_digits(
    client: Any, conv: Any, unchanged: None
) -> None:
    """As every other path: an unknown share token is 403, not the caller's own list (issue 32); a limit in
    another script's digits (int() reads the Arabic-Indic five as 5) or with spaces is 400."""
    me = {"X-User-Id": conv.user_id}
    r = await client.get("/api/fork-explorer/sessions", headers={**me, "X-Share-Token": "no-such-token"})
    assert "share token" in error_of(r, 403)
    for limit in ["\u0665", " 5", "5 ", "+5", "1e3"]:
        r = await client.get("/api/fork-explorer/sessions", params={"limit": limit}, headers=me)
        assert "whole number" in error_of(r, 400), limit
        r = await client.get(f"/api/sessions/{conv.session_id}/invocations", params={"limit": limit}, headers=me)
        assert "whole number" in error_of(r, 400), limit
    r = await client.get("/api/fork-explorer/sessions", params={"limit": "5"}, headers=me)
    assert r.status_code == 200
