"""Who the caller is, at every door that resolves one (HTTP, the explorer's API, /mcp's tools and views, the replay
endpoint), where kagent-fork is stricter than kagent (issue 45): an empty user id names no one."""

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
from tests.helpers import seed, table_fingerprint
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
