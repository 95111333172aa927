"""Who the caller is, at every door that resolves one (HTTP, the explorer's API, /mcp's tools and views, the replay
endpoint), where kagent-fork is stricter than kagent (issue 45): an agent's call names its user only with an
agent's token (a service account's, of the agent's namespace), and an empty user id names no one."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import pytest
from litestar.testing import AsyncTestClient
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from service.app import create_app
from service.config import Settings
from tests.helpers import new_user, seed, table_fingerprint
from tests.support.conversations import Conversation
from tests.support.live_server import live_server
from tests.test_isolation import unsigned_jwt

AGENT = "kagent__NS__k8s_agent"  # X-Agent-Name as kagent's runtimes send it (their app name)


def bearer(claims: dict[str, Any]) -> str:
    return f"Bearer {unsigned_jwt(claims)}"


def account(namespace: str, name: str = "k8s-agent", **extra: Any) -> str:
    """A projected service account token as a kagent agent's pod holds it."""
    claims = {"sub": f"system:serviceaccount:{namespace}:{name}", "aud": ["kagent"]}
    claims["kubernetes.io"] = {"namespace": namespace, "serviceaccount": {"name": name}}
    return bearer({**claims, **extra})


def error_of(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]
    return str(body["error"])


@pytest.fixture
async def unchanged(pool: asyncpg.Pool) -> AsyncIterator[None]:
    before = await table_fingerprint(pool)
    yield
    assert await table_fingerprint(pool) == before, "a refused request wrote something"


@pytest.fixture
async def victim(pool: asyncpg.Pool) -> Conversation:
    """Someone else's conversation (admin@kagent.dev's in the issue; any user's is the same)."""
    return await seed(pool, dialect="v1", turns=3, tool_calls=True)


@pytest.fixture(scope="module")
async def proxy(database_url: str, pool: asyncpg.Pool) -> AsyncIterator[Any]:
    settings = Settings(database_url=database_url, auth_mode="trusted-proxy")
    async with AsyncTestClient(app=create_app(settings, database_url)) as c:
        yield c


@pytest.fixture(scope="module")
def proxy_url(settings: Settings, database_url: str, pool: asyncpg.Pool) -> Iterator[str]:
    """A real server in trusted-proxy mode, for the MCP doors (with the key its views' tokens need)."""
    config = dataclasses.replace(settings, auth_mode="trusted-proxy", mcp_app_secret="s" * 32)
    with live_server(create_app(config, database_url)) as url:
        yield url


@asynccontextmanager
async def mcp_session(url: str, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def tool_text(session: ClientSession, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    result = await session.call_tool(tool, arguments)
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.isError, result.content[0].text


# --- an agent's call names its user only with an agent's token --------------------------------------------


async def test_a_users_token_with_x_agent_name_is_that_user(proxy: Any, pool: asyncpg.Pool, victim: Any) -> None:
    """Bob's token, `X-Agent-Name` and `X-User-Id` naming another user read nothing of that user's, fork and
    dry-run nothing of it, and what Bob does, he does as himself (kagent would take the header's user)."""
    bob = new_user()
    own = await seed(pool, dialect="legacy", turns=2, user_id=bob)
    forged = {"Authorization": bearer({"sub": bob}), "X-Agent-Name": AGENT, "X-User-Id": victim.user_id}
    before = await table_fingerprint(pool)
    path = f"/api/sessions/{victim.session_id}"
    missing = (await proxy.get("/api/sessions/no-such-session/transcript", headers=forged)).json()
    for r in [
        await proxy.get(f"{path}/transcript", headers=forged),
        await proxy.get(f"{path}/invocations", headers=forged),
        await proxy.post(f"{path}/fork", json={}, headers=forged),
        await proxy.post(
            f"{path}/rewind",
            json={"rewind_before_invocation_id": victim.turns[1].invocation_id, "dry_run": True},
            headers=forged,
        ),
        await proxy.get(f"{path}/transcript", params={"user_id": victim.user_id}, headers=forged),
    ]:
        assert error_of(r, 404) == missing["error"]  # as for a session that does not exist
    assert await table_fingerprint(pool) == before
    # the explorer's API: Bob's own sessions, as Bob
    who = await proxy.get("/api/fork-explorer/whoami", headers=forged)
    assert who.json()["data"]["user_id"] == bob
    listed = (await proxy.get("/api/fork-explorer/sessions", headers=forged)).json()["data"]
    assert [s["id"] for s in listed] == [own.session_id]
    # a fork of Bob's own conversation is Bob's, not the named user's
    fork = await proxy.post(f"/api/sessions/{own.session_id}/fork", json={}, headers=forged)
    assert fork.status_code == 201 and fork.json()["data"]["user_id"] == bob


async def test_an_agents_token_of_its_namespace_acts_for_the_user_it_names(proxy: Any, victim: Any) -> None:
    path = f"/api/sessions/{victim.session_id}"
    for agent_name in (AGENT, "kagent/k8s-agent", "k8s-agent"):  # kagent's app name, a ref, a bare card name
        headers = {"Authorization": account("kagent"), "X-Agent-Name": agent_name, "X-User-Id": victim.user_id}
        r = await proxy.get(f"{path}/invocations", headers=headers)
        assert r.status_code == 200 and len(r.json()["data"]) == 3, (agent_name, r.text)
    agent = {"Authorization": account("kagent"), "X-Agent-Name": AGENT}
    r = await proxy.get(f"{path}/transcript", params={"user_id": victim.user_id}, headers=agent)
    assert r.status_code == 200 and len(r.json()["data"]["turns"]) == 3
    fork = await proxy.post(f"{path}/fork", json={}, headers={**agent, "X-User-Id": victim.user_id})
    assert fork.status_code == 201 and fork.json()["data"]["user_id"] == victim.user_id
    # naming no user, the agent's token is its own identity, which owns nothing here
    error_of(await proxy.get(f"{path}/invocations", headers=agent), 404)
    who = await proxy.get("/api/fork-explorer/whoami", headers=agent)
    assert who.json()["data"]["user_id"] == "system:serviceaccount:kagent:k8s-agent"
    # without X-Agent-Name the token names the user, as every other token (X-User-Id ignored)
    alone = {"Authorization": account("kagent"), "X-User-Id": victim.user_id}
    error_of(await proxy.get(f"{path}/invocations", headers=alone), 404)


async def test_an_agents_token_of_another_namespace_is_refused(proxy: Any, victim: Any, unchanged: None) -> None:
    path = f"/api/sessions/{victim.session_id}"
    for agent_name in (AGENT, "kagent/k8s-agent"):
        headers = {"Authorization": account("team-b"), "X-Agent-Name": agent_name, "X-User-Id": victim.user_id}
        for r in [
            await proxy.get(f"{path}/transcript", headers=headers),
            await proxy.post(f"{path}/fork", json={}, headers=headers),
            await proxy.get("/api/fork-explorer/whoami", headers=headers),
        ]:
            says = error_of(r, 403)
            assert "'team-b'" in says and "'kagent'" in says, says
    # a token that says two namespaces (its sub one, its kubernetes.io claim another) is no agent's
    twofold = account("kagent", **{"kubernetes.io": {"namespace": "team-b"}})
    r = await proxy.get(
        f"{path}/invocations",
        headers={"Authorization": twofold, "X-Agent-Name": AGENT, "X-User-Id": victim.user_id},
    )
    assert "two namespaces" in error_of(r, 401)
    legacy = bearer({
        "sub": "system:serviceaccount:kagent:k8s-agent", "kubernetes.io/serviceaccount/namespace": "team-b"
    })  # fmt: skip
    r = await proxy.get(
        f"{path}/invocations", headers={"Authorization": legacy, "X-Agent-Name": AGENT, "X-User-Id": victim.user_id}
    )
    assert "two namespaces" in error_of(r, 401)
    # a sub that only looks like a service account's is a user's
    for sub in ("system:serviceaccount:Team_B:x", "system:serviceaccount:kagent", "system:serviceaccount:kagent:a:b"):
        r = await proxy.get(
            f"{path}/invocations",
            headers={"Authorization": bearer({"sub": sub}), "X-Agent-Name": AGENT, "X-User-Id": victim.user_id},
        )
        error_of(r, 404)


async def test_the_mcp_doors_resolve_agents_alike(proxy_url: str, pool: asyncpg.Pool, victim: Any) -> None:
    """/mcp's tools and views as the HTTP API: Bob's token naming another user reads nothing of theirs; an agent's
    token of its namespace acts for the user; one of another namespace is refused. The replay endpoint holds an
    agent's token to the namespace of the agent its path names."""
    before = await table_fingerprint(pool)
    bob = {"Authorization": bearer({"sub": new_user()}), "X-Agent-Name": AGENT, "X-User-Id": victim.user_id}
    session = {"session_id": victim.session_id}
    async with mcp_session(f"{proxy_url}/mcp", bob) as mcp:
        for tool in ("list_turns", "show_transcript", "fork_session", "show_branches"):
            assert await tool_text(mcp, tool, session) == (True, "Session not found"), tool
    other = {"Authorization": account("team-b"), "X-Agent-Name": AGENT, "X-User-Id": victim.user_id}
    async with mcp_session(f"{proxy_url}/mcp", other) as mcp:
        failed, says = await tool_text(mcp, "list_turns", session)
        assert failed and "'team-b'" in says
    assert await table_fingerprint(pool) == before
    agent = {"Authorization": account("kagent"), "X-Agent-Name": AGENT, "X-User-Id": victim.user_id}
    async with mcp_session(f"{proxy_url}/mcp", agent) as mcp:
        failed, says = await tool_text(mcp, "list_turns", session)
        assert not failed and victim.turns[0].invocation_id in says
    # the replay endpoint's path names the agent kagent/k8s-agent: a bare X-Agent-Name does not hide it
    other = {"Authorization": account("team-b"), "X-Agent-Name": "k8s-agent", "X-User-Id": victim.user_id}
    async with mcp_session(f"{proxy_url}/replay/mcp/kagent/k8s-agent/x-1", other) as mcp:
        with pytest.raises(McpError, match="'team-b'"):
            await mcp.list_tools()


# --- an empty user id names no one ----------------------------------------------------------------------------


async def test_an_empty_user_id_names_no_one(client: Any, proxy: Any, victim: Any, unchanged: None) -> None:
    """kagent takes an empty `X-User-Id` or `?user_id=` as absent, so as admin@kagent.dev in unsecure mode: a
    client whose user variable was empty acted as the default user. Present and empty, it is a 400."""
    me = {"X-User-Id": victim.user_id}
    path = f"/api/sessions/{victim.session_id}"
    for http, token in ((client, {}), (proxy, {"Authorization": bearer({"sub": victim.user_id})})):
        for headers, params, where in [
            ({"X-User-Id": ""}, {}, "header X-User-Id"),
            ({}, {"user_id": ""}, "query parameter user_id"),
            (me, {"user_id": ""}, "query parameter user_id"),  # not read past, to the header's user
            ({**me, "X-Agent-Name": AGENT}, {"user_id": ""}, "query parameter user_id"),
        ]:
            headers = {**token, **headers}
            for r in [
                await http.post(f"{path}/fork", json={}, headers=headers, params=params),
                await http.get(f"{path}/transcript", headers=headers, params=params),
                await http.get("/api/fork-explorer/sessions", headers=headers, params=params),
                await http.get("/api/fork-explorer/whoami", headers=headers, params=params),
            ]:
                assert error_of(r, 400) == f"{where} is empty: it names no user (leave it out instead)"


async def test_an_empty_user_id_names_no_one_at_the_mcp_doors(live_url: str, victim: Any, unchanged: None) -> None:
    says = "is empty: it names no user"
    for url, headers in [
        (f"{live_url}/mcp", {"X-User-Id": ""}),
        (f"{live_url}/mcp?user_id=", {"X-User-Id": victim.user_id}),
    ]:
        async with mcp_session(url, headers) as mcp:
            for tool in ("list_turns", "show_branches"):
                failed, text = await tool_text(mcp, tool, {"session_id": victim.session_id})
                assert failed and says in text, (url, tool, text)
    async with mcp_session(f"{live_url}/replay/mcp/kagent/k8s-agent/x-1", {"X-User-Id": ""}) as mcp:
        with pytest.raises(McpError, match=says):
            await mcp.list_tools()
