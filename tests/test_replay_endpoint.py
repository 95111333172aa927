"""The replay endpoint without a runtime: the lease that says which turn a twin's calls belong to (SQL), and the
endpoint's answers when no turn holds it or it names no known server (HTTP, over MCP). What a twin's calls get
during a replay is proven with kagent's runtime: tests/test_runtime_replay_twin.py."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator

import asyncpg
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

from service.agents.replay.lease import server_key, stands_in_for, twin_of
from service.kagent.store.agents import decode_config
from service.kagent.store.replay import Holder
from service.services import Services
from tests.helpers import new_user
from tests.support.kagent_controller import register_agent
from tests.support.tool_server import RunningTools, running_tools


def test_a_twins_server_urls_name_the_agents_it_stands_in_for() -> None:
    key = server_key("http://kagent-tool-server.kagent:8084/mcp")
    assert key.startswith("kagent-tool-server-") and len(key) == len("kagent-tool-server-") + 8
    assert server_key("http://kagent-tool-server.kagent:8084/mcp") != server_key("http://kagent-tool-server:8084/mcp")
    url = f"http://kagent-fork.kagent:8080/replay/mcp/kagent/k8s-agent/{key}"
    assert twin_of(url) == ("kagent/k8s-agent", key)
    assert twin_of("http://kagent-tool-server.kagent:8084/mcp") is None
    config, _ = decode_config(
        f'{{"http_tools": [{{"params": {{"url": "{url}"}}}}], "sse_tools": [{{"params": {{"url": "{url}"}}}}]}}'
    )
    assert stands_in_for(config) == ["kagent/k8s-agent"]
    plain, _ = decode_config('{"http_tools": [{"params": {"url": "http://tools:8084/mcp"}}]}')
    assert stands_in_for(plain) == [] and stands_in_for(None) == []


async def test_a_twin_serves_one_turn_at_a_time_per_user_and_a_silent_lease_expires(services: Services) -> None:
    store, twin, user, other = services.store.replay, f"kagent/twin-{secrets.token_hex(3)}", new_user(), new_user()
    first, second = Holder(job_id="job-1", ordinal=0), Holder(job_id="job-2", ordinal=0)
    async with services.connection() as conn:
        assert await store.take_lease(conn, twin, user, first, "runner-a", 30)
        assert not await store.take_lease(conn, twin, user, second, "runner-b", 30)
        assert await store.take_lease(conn, twin, other, second, "runner-b", 30)  # another user's turns are apart
        assert await store.take_lease(conn, twin, user, first, "runner-a", 30)  # renewed by its own turn
        assert await store.lease_holder(conn, twin, user) == first
        await store.give_leases(conn, first)
        assert await store.lease_holder(conn, twin, user) is None
        assert await store.take_lease(conn, twin, user, second, "runner-b", 0.05)
        await asyncio.sleep(0.1)  # its runner stopped renewing it
        assert await store.lease_holder(conn, twin, user) is None
        assert await store.take_lease(conn, twin, user, first, "runner-a", 30)
        assert await store.lease_holder(conn, twin, user) == first
        await store.give_leases(conn, first)
        await store.give_leases(conn, second)


@pytest.fixture(scope="module")
def real_tools() -> Iterator[RunningTools]:
    with running_tools() as tools:
        yield tools


async def test_the_endpoint_lists_the_real_servers_tools_and_runs_nothing_outside_a_replay_turn(
    live_url: str, pool: asyncpg.Pool, real_tools: RunningTools
) -> None:
    agent, user = f"kagent/source-{secrets.token_hex(3)}", new_user()
    async with pool.acquire() as conn:
        await register_agent(
            conn, agent, {"http_tools": [{"params": {"url": real_tools.url}, "allowed_headers": ["Authorization"]}]}
        )
    endpoint = f"{live_url}/replay/mcp/{agent}/{server_key(real_tools.url)}"
    async with (
        streamablehttp_client(endpoint, headers={"X-User-Id": user}) as (read, write, _),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        listed = {t.name: t for t in (await mcp.list_tools()).tools}
        assert {"lookup", "delete_pod", "scale", "status"} <= set(listed)
        assert listed["lookup"].annotations is not None and listed["lookup"].annotations.readOnlyHint is True
        assert listed["scale"].description == "Scale a deployment."
        assert listed["scale"].inputSchema["required"] == ["name", "replicas"]
        before = len(real_tools.calls.calls)
        for tool, args in (("lookup", {"query": "pods"}), ("scale", {"name": "web", "replicas": 0})):
            answer = await mcp.call_tool(tool, args)
            assert answer.isError and "not run" in answer.content[0].text and "no branch" in answer.content[0].text  # type: ignore[union-attr]
        assert len(real_tools.calls.calls) == before  # nothing ran
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM kagent_fork.replay_call WHERE twin = $1", agent) == 0

    for wrong in (f"{live_url}/replay/mcp/{agent}/nowhere-00000000", f"{live_url}/replay/mcp/kagent/nobody/x-1"):
        async with (
            streamablehttp_client(wrong, headers={"X-User-Id": user}) as (read, write, _),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            with pytest.raises(McpError, match=r"no MCP server|not found"):
                await mcp.list_tools()
