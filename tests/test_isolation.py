"""Who may do what: every caller against every endpoint, as kagent would allow it, and the optional
verification of bearer JWTs (JWT_SECRET, JWT_PUBLIC_KEY) beyond kagent's trust-the-proxy mode."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.config import ConfigError, Settings, from_env
from service.identity import Caller
from service.operations.rewind import RewindResult, rewind
from service.schemas import RewindRequest
from service.services import Services
from tests.helpers import new_user, seed, session_rows, table_fingerprint
from tests.support.conversations import Conversation, create_share

ENDPOINTS = ["fork", "invocations", "forks", "tree", "rewind", "undo"]  # reads and the fork before the writes
OWNER_ONLY = {"fork": 201, "invocations": 200, "forks": 200, "tree": 200, "rewind": 200, "undo": 200}
# What kagent lets each caller do: the status of each endpoint.
MATRIX: dict[str, dict[str, int]] = {
    "owner": OWNER_ONLY,
    "other user": dict.fromkeys(ENDPOINTS, 404),
    "read-only share": {**OWNER_ONLY, "rewind": 403, "undo": 403},
    "read-write share": OWNER_ONLY,
    "share of another session": dict.fromkeys(ENDPOINTS, 404),
    "wrong token": dict.fromkeys(ENDPOINTS, 403),
    "trusted-proxy, owner's token": OWNER_ONLY,
    "trusted-proxy, other user's token": dict.fromkeys(ENDPOINTS, 404),
    "trusted-proxy, no token": dict.fromkeys(ENDPOINTS, 401),
    "trusted-proxy, garbled token": dict.fromkeys(ENDPOINTS, 401),
}


def unsigned_jwt(claims: dict[str, Any]) -> str:
    """A token as kagent's trusted-proxy mode reads it: the claims, signature not checked."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


@dataclass
class Scene:
    conv: Conversation
    owners_fork: str  # a fork the owner made before: a share visitor must not see it
    first_rewind: str  # a rewind the owner made before (before the last turn)
    headers: dict[str, str]
    visitor: str | None  # whose fork a share visitor's fork is


async def make_scene(pool: asyncpg.Pool, services: Services, client: Any, caller: str) -> Scene:
    owner = new_user()
    conv = await seed(pool, dialect="v1", turns=4, tool_calls=True, user_id=owner)
    other = await seed(pool, dialect="legacy", turns=1, user_id=new_user())
    r = await client.post(f"/api/sessions/{conv.session_id}/fork", json={}, headers={"X-User-Id": owner})
    assert r.status_code == 201
    done = await rewind(
        services,
        Caller(user_id=owner),
        conv.session_id,
        RewindRequest(rewind_before_invocation_id=conv.turns[3].invocation_id),
    )
    assert isinstance(done, RewindResult) and done.rewind.id
    async with pool.acquire() as conn:
        read_only = await create_share(conn, session_id=conv.session_id, owner=owner, read_only=True)
        read_write = await create_share(conn, session_id=conv.session_id, owner=owner, read_only=False)
        foreign = await create_share(conn, session_id=other.session_id, owner=other.user_id, read_only=False)
    visitor = new_user()
    headers = {
        "owner": {"X-User-Id": owner},
        "other user": {"X-User-Id": visitor},
        "read-only share": {"X-User-Id": visitor, "X-Share-Token": read_only},
        "read-write share": {"X-User-Id": visitor, "X-Share-Token": read_write},
        "share of another session": {"X-User-Id": visitor, "X-Share-Token": foreign},
        "wrong token": {"X-User-Id": visitor, "X-Share-Token": read_write[::-1]},
        "trusted-proxy, owner's token": {"Authorization": f"Bearer {unsigned_jwt({'sub': owner})}"},
        "trusted-proxy, other user's token": {
            "Authorization": f"Bearer {unsigned_jwt({'sub': visitor})}",
            "X-User-Id": owner,  # ignored without X-Agent-Name: the token names the user
        },
        "trusted-proxy, no token": {"X-User-Id": owner},
        "trusted-proxy, garbled token": {"Authorization": "Bearer eyJhbGciOi.!!!.x", "X-User-Id": owner},
    }[caller]
    return Scene(
        conv=conv,
        owners_fork=r.json()["data"]["id"],
        first_rewind=done.rewind.id,
        headers=headers,
        visitor=visitor if "share" in caller else None,
    )


@pytest.fixture(scope="module")
async def proxy_client(database_url: str, pool: asyncpg.Pool) -> AsyncIterator[Any]:
    settings = Settings(database_url=database_url, auth_mode="trusted-proxy", max_fork_depth=4)
    async with AsyncTestClient(app=create_app(settings, database_url)) as c:
        yield c


@pytest.mark.parametrize("caller", list(MATRIX))
async def test_isolation_matrix(
    client: Any, proxy_client: Any, pool: asyncpg.Pool, services: Services, caller: str
) -> None:
    scene = await make_scene(pool, services, client, caller)
    conv, expected = scene.conv, MATRIX[caller]
    http = proxy_client if caller.startswith("trusted-proxy") else client
    path = f"/api/sessions/{conv.session_id}"
    source_before = await session_rows(pool, conv.session_id, conv.user_id)
    before = await table_fingerprint(pool)
    answers: dict[str, Any] = {}
    rewind_id = scene.first_rewind
    for endpoint in ENDPOINTS:
        if endpoint == "fork":
            r = await http.post(f"{path}/fork", json={}, headers=scene.headers)
        elif endpoint == "rewind":
            body = {"rewind_before_invocation_id": conv.turns[2].invocation_id}
            r = await http.post(f"{path}/rewind", json=body, headers=scene.headers)
            if r.status_code == 200:
                rewind_id = r.json()["data"]["rewind"]["id"]
        elif endpoint == "undo":
            r = await http.post(f"{path}/rewinds/{rewind_id}/undo", json={}, headers=scene.headers)
        else:
            r = await http.get(f"{path}/{endpoint}", headers=scene.headers)
        answers[endpoint] = r
        assert r.status_code == expected[endpoint], (caller, endpoint, r.text)
        if r.status_code >= 400:
            assert set(r.json()) == {"error"}, r.text  # nothing of the session in a refusal

    if all(status >= 400 for status in expected.values()):
        # nothing written anywhere, and a refusal says no more than for a session that does not exist
        assert await table_fingerprint(pool) == before
        missing = "/api/sessions/no-such-session-" + new_user()
        for endpoint in ("invocations", "tree"):
            r = await http.get(f"{missing}/{endpoint}", headers=scene.headers)
            assert r.status_code == answers[endpoint].status_code and r.json() == answers[endpoint].json()
        return

    fork = answers["fork"].json()["data"]
    assert fork["user_id"] == (scene.visitor or conv.user_id), "a fork belongs to its caller"
    assert fork["fork"]["parent_session_id"] == conv.session_id
    listed = [f["session_id"] for f in answers["forks"].json()["data"]]
    tree = answers["tree"].json()["data"]
    shown = {tree["session_id"]} | {n["session_id"] for n in tree["forks"]}
    if scene.visitor is not None:
        # a share visitor sees the shared session and their own forks of it, not the owner's other sessions
        assert listed == [fork["id"]] and scene.owners_fork not in shown and fork["id"] in shown
    else:
        assert listed == [scene.owners_fork, fork["id"]]
    assert len(answers["invocations"].json()["data"]) == 3  # the owner's earlier rewind hid the 4th turn
    if expected["rewind"] == 200:
        # a rewind through a read-write share leaves the rows the owner's, and undo restores them exactly
        assert answers["rewind"].json()["data"]["session"]["user_id"] == conv.user_id
        assert answers["undo"].json()["data"]["rewind"]["undone_at"]
        after = await session_rows(pool, conv.session_id, conv.user_id)
        assert [e["id"] for e in after["events"]] == [e["id"] for e in source_before["events"]]
    else:
        assert await session_rows(pool, conv.session_id, conv.user_id) == source_before


# --- JWT verification (JWT_SECRET, JWT_PUBLIC_KEY, JWT_AUDIENCE) ----------------------------------------

SECRET = "a-shared-secret-of-at-least-32-bytes!"


def pem(key: Any) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@pytest.fixture(scope="module")
def rsa_key() -> Any:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> Any:
    return ec.generate_private_key(ec.SECP256R1())


async def status_with(settings: Settings, database_url: str, url: str, token: str) -> tuple[int, str]:
    async with AsyncTestClient(app=create_app(settings, database_url)) as c:
        r = await c.get(url, headers={"Authorization": f"Bearer {token}"})
        return r.status_code, r.text


async def test_verified_jwts(database_url: str, pool: asyncpg.Pool, rsa_key: Any, ec_key: Any) -> None:
    conv = await seed(pool, dialect="v1", turns=1)
    url = f"/api/sessions/{conv.session_id}/invocations"
    now = int(time.time())
    claims = {"sub": conv.user_id, "exp": now + 300, "iat": now}
    settings = Settings(
        database_url=database_url, auth_mode="trusted-proxy", jwt_secret=SECRET, jwt_public_key=pem(rsa_key)
    )
    other_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cases = [
        (jwt.encode(claims, SECRET, algorithm="HS256"), 200, None),
        (jwt.encode(claims, rsa_key, algorithm="RS256"), 200, None),
        (jwt.encode(claims, "another-secret-of-at-least-32-bytes!!", algorithm="HS256"), 401, "signature"),
        (jwt.encode(claims, other_rsa, algorithm="RS256"), 401, "signature"),
        (jwt.encode({**claims, "exp": now - 120}, SECRET, algorithm="HS256"), 401, "expired"),
        (jwt.encode({**claims, "exp": now - 120}, rsa_key, algorithm="RS256"), 401, "expired"),
        (jwt.encode({**claims, "nbf": now + 600}, SECRET, algorithm="HS256"), 401, "not valid"),
        (jwt.encode({**claims, "exp": "soon"}, SECRET, algorithm="HS256"), 401, "not valid"),
        (jwt.encode(claims, ec_key, algorithm="ES256"), 401, "'ES256' are not accepted"),
        (jwt.encode(claims, None, algorithm="none"), 401, "'none' are not accepted"),
        (unsigned_jwt(claims), 401, "signature"),  # what kagent itself would accept
        ("not-a-jwt", 401, "not a JWT"),
        # the token's body changed after signing
        (
            jwt.encode(claims, SECRET, algorithm="HS256").split(".")[0]
            + "."
            + unsigned_jwt({**claims, "sub": "admin@kagent.dev"}).split(".")[1]
            + "."
            + jwt.encode(claims, SECRET, algorithm="HS256").split(".")[2],
            401,
            "signature",
        ),
    ]
    async with AsyncTestClient(app=create_app(settings, database_url)) as c:
        for token, status, says in cases:
            r = await c.get(url, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == status, (token[:40], r.text)
            if says:
                assert set(r.json()) == {"error"} and says in r.json()["error"], r.text
    # algorithm confusion: an HS256 token whose "secret" is the public key never passes as RS256
    # (PyJWT refuses a PEM as an HMAC key, so the forger signs by hand)
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
    mac = hmac.new(pem(rsa_key).encode(), header + b"." + body, hashlib.sha256).digest()
    token = (header + b"." + body + b"." + base64.urlsafe_b64encode(mac).rstrip(b"=")).decode()
    only_public = Settings(database_url=database_url, auth_mode="trusted-proxy", jwt_public_key=pem(rsa_key))
    assert (await status_with(only_public, database_url, url, token))[0] == 401
    # ES256 keys, and the audience when one is configured
    es = Settings(
        database_url=database_url, auth_mode="trusted-proxy", jwt_public_key=pem(ec_key), jwt_audience="kagent"
    )
    assert (await status_with(es, database_url, url, jwt.encode({**claims, "aud": "kagent"}, ec_key, "ES256")))[
        0
    ] == 200
    status, text = await status_with(es, database_url, url, jwt.encode({**claims, "aud": "other"}, ec_key, "ES256"))
    assert status == 401 and "audience" in text.lower()
    assert (await status_with(es, database_url, url, jwt.encode(claims, ec_key, "ES256")))[0] == 401
    # without JWT_AUDIENCE, a token's aud is not held against it (kagent's proxy tokens carry one)
    plain = Settings(database_url=database_url, auth_mode="trusted-proxy", jwt_secret=SECRET)
    assert (await status_with(plain, database_url, url, jwt.encode({**claims, "aud": "x"}, SECRET, "HS256")))[0] == 200


def test_jwt_settings_are_checked_at_start_up(rsa_key: Any, ec_key: Any) -> None:
    proxy = {"AUTH_MODE": "trusted-proxy"}
    key = pem(rsa_key)
    assert from_env({**proxy, "JWT_SECRET": SECRET}).jwt_secret == SECRET
    assert from_env({**proxy, "JWT_PUBLIC_KEY": key}).jwt_public_key == key.strip()
    escaped = key.replace("\n", "\\n")  # a PEM on one line, as env files and some secret stores write it
    assert from_env({**proxy, "JWT_PUBLIC_KEY": escaped}).jwt_public_key == key.strip()
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    p384 = ec.generate_private_key(ec.SECP384R1())
    for env, says in [
        ({"JWT_SECRET": SECRET}, "AUTH_MODE=trusted-proxy"),
        ({"JWT_PUBLIC_KEY": key}, "AUTH_MODE=trusted-proxy"),
        ({**proxy, "JWT_SECRET": "short"}, "at least 32 bytes"),
        ({**proxy, "JWT_PUBLIC_KEY": "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----"}, "not a PEM"),
        ({**proxy, "JWT_PUBLIC_KEY": key[:100]}, "not a PEM"),
        ({**proxy, "JWT_PUBLIC_KEY": pem(weak)}, "2048"),
        ({**proxy, "JWT_PUBLIC_KEY": pem(p384)}, "P-256"),
        ({**proxy, "JWT_AUDIENCE": "kagent"}, "JWT_SECRET or JWT_PUBLIC_KEY"),
        ({"MAX_FORK_EVENTS": "-1"}, "MAX_FORK_EVENTS"),
        ({"MAX_FORK_EVENTS": "lots"}, "MAX_FORK_EVENTS"),
        ({"FORK_RATE_PER_MINUTE": "1.5"}, "FORK_RATE_PER_MINUTE"),
        ({"FORK_RATE_PER_MINUTE": "-3"}, "FORK_RATE_PER_MINUTE"),
    ]:
        with pytest.raises(ConfigError, match=says):
            from_env(env)
    defaults = from_env({})
    assert defaults.max_fork_events == 250_000 and defaults.fork_rate_per_minute == 0
    assert from_env({"MAX_FORK_EVENTS": "0", "FORK_RATE_PER_MINUTE": "30"}).fork_rate_per_minute == 30
