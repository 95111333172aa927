"""The replay endpoint without a runtime: the lease that says which turn a twin's calls belong to (SQL), and the
endpoint's answers when no turn holds it or it names no known server (HTTP, over MCP). What a twin's calls get
during a replay is proven with kagent's runtime: tests/test_runtime_replay_twin.py."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.fastmcp import FastMCP
from mcp.shared.exceptions import McpError
from mcp.types import ToolAnnotations

from service.agents.replay.lease import server_key, stands_in_for, twin_of
from service.agents.replay.recordings import canonical, recorded
from service.agents.replay.twin import recorded_result
from service.app import create_app
from service.config import Settings
from service.kagent.store import Store
from service.kagent.store.agents import agent_row_id, decode_config
from service.kagent.store.replay import Holder
from service.services import Services
from tests.helpers import new_user, seed
from tests.support.a2a_agent import NAMESPACE, V1, Seen, running_agents
from tests.support.kagent_controller import register_agent
from tests.support.live_server import live_server
from tests.support.tool_server import RunningTools, running_tools
from tests.test_replay_trust import branch_job
from tests.test_whatif import service, whatif_settings


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
    live_url: str, pool: asyncpg.Pool, real_tools: RunningTools, settings: Settings
) -> None:
    agent, user = f"kagent/source-{secrets.token_hex(3)}", new_user()
    async with pool.acquire() as conn:
        await register_agent(
            conn, agent, {"http_tools": [{"params": {"url": real_tools.url}, "allowed_headers": ["Authorization"]}]}
        )
    endpoint = f"{live_url}/replay/mcp/{agent}/{server_key(real_tools.url)}"
    async with (
        httpx.AsyncClient(headers={"X-User-Id": user}, timeout=30) as http,
        streamable_http_client(endpoint, http_client=http) as (read, write, _),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        with pytest.raises(McpError, match="no branch of a replay is running a turn"):  # issue 46: not to anyone
            await mcp.list_tools()
        holder = Holder(job_id=f"listing-{secrets.token_hex(3)}", ordinal=0)
        async with pool.acquire() as conn:
            assert await Store(settings.service_schema).replay.take_lease(conn, agent, user, holder, "r", 60)
        listed = {t.name: t for t in (await mcp.list_tools()).tools}
        async with pool.acquire() as conn:
            await Store(settings.service_schema).replay.give_leases(conn, holder)
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

    nobody = "kagent/nobody"
    for wrong in (f"{live_url}/replay/mcp/{agent}/nowhere-00000000", f"{live_url}/replay/mcp/{nobody}/x-1"):
        holder = Holder(job_id=f"listing-{secrets.token_hex(3)}", ordinal=0)
        async with pool.acquire() as conn:
            for stood_for in (agent, nobody):
                assert await Store(settings.service_schema).replay.take_lease(conn, stood_for, user, holder, "r", 60)
        async with (
            httpx.AsyncClient(headers={"X-User-Id": user}, timeout=30) as http,
            streamable_http_client(wrong, http_client=http) as (read, write, _),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            with pytest.raises(McpError, match=r"no MCP server|not found"):
                await mcp.list_tools()
        async with pool.acquire() as conn:
            await Store(settings.service_schema).replay.give_leases(conn, holder)


@pytest.fixture(scope="module")
def agents(database_url: str) -> Iterator[tuple[str, Seen]]:
    with running_agents(database_url) as served:
        yield served


async def _ended(client: Any, experiment_id: str, user: str) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            data: dict[str, Any] = (
                await client.get(f"/api/experiments/{experiment_id}", headers={"X-User-Id": user})
            ).json()["data"]
            if data["status"] != "running":
                return data
            await asyncio.sleep(0.1)


async def test_a_twins_turn_waits_for_its_lease_and_a_cancelled_branch_stops_waiting(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    """A branch whose agent is a twin (its server under /replay/mcp/...) sends no turn while another turn holds
    the lease of the agent it stands in for; cancelled meanwhile, it ends without sending anything and holds no
    lease; once the lease is free, a branch sends its turn and gives the lease back when the turn ends."""
    a2a_url, seen = agents
    twin, stood_for = f"{NAMESPACE}/{V1}", f"kagent/source-{secrets.token_hex(3)}"
    conv = await seed(pool, dialect="v1", turns=2)
    user = conv.user_id
    async with pool.acquire() as conn:
        await register_agent(conn, twin, {"http_tools": [{"params": {"url": f"http://x/replay/mcp/{stood_for}/s-1"}}]})
    other = Holder(job_id="another-branch", ordinal=0)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [twin], "tools": "live"}
    start, leases = (
        f"/api/sessions/{conv.session_id}/experiments",
        "SELECT job_id FROM kagent_fork.replay_lease WHERE twin = $1",
    )
    try:
        async with pool.acquire() as conn:
            assert await Store(settings.service_schema).replay.take_lease(conn, stood_for, user, other, "r", 60)
        async with service(whatif_settings(settings, a2a_url), database_url) as client:
            r = await client.post(start, json=body, headers={"X-User-Id": user})
            assert r.status_code == 202, r.text
            started = r.json()["data"]["experiment"]
            await asyncio.sleep(1.5)  # several polls of the lease
            fork = started["branches"][0]["session_id"]
            assert [m for m in seen.messages if m.context_id == fork] == []  # not sent: the lease is another's
            cancel = f"/api/experiments/{started['id']}/cancel"
            assert (await client.post(cancel, json={}, headers={"X-User-Id": user})).status_code == 200
            assert (await _ended(client, started["id"], user))["status"] == "cancelled"
            await asyncio.sleep(1.0)  # two polls: the waiting turn sees its branch is no longer its runner's
            assert [m for m in seen.messages if m.context_id == fork] == []
            assert started["branches"][0]["job_id"] not in client.app.state.whatif_runner.jobs  # it stopped waiting
            async with pool.acquire() as conn:
                holders = await conn.fetch(leases, stood_for)
                assert [h["job_id"] for h in holders] == ["another-branch"]
                await conn.execute("DELETE FROM kagent_fork.replay_lease WHERE twin = $1", stood_for)

            r = await client.post(start, json=body, headers={"X-User-Id": user})
            done = await _ended(client, r.json()["data"]["experiment"]["id"], user)
            assert done["status"] == "completed", done
            fork = done["branches"][0]["session_id"]
            assert len([m for m in seen.messages if m.context_id == fork]) == 1
            async with pool.acquire() as conn:
                assert (
                    await conn.fetchval("SELECT count(*) FROM kagent_fork.replay_lease WHERE twin = $1", stood_for) == 0
                )
    finally:
        async with pool.acquire() as conn:
            await conn.execute("DELETE FROM agent WHERE id = $1", agent_row_id(twin))


def sse_tools(seen: list[dict[str, Any]]) -> Any:
    """A real MCP server over SSE (kagent's `sse_tools`): `peek` reads, `poke` acts."""
    mcp = FastMCP("kagent-fork sse test tools", host="127.0.0.1")

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def peek(name: str) -> str:
        """Peek at a thing."""
        seen.append({"tool": "peek", "name": name})
        return f"{name} looks fine"

    @mcp.tool()
    def poke(name: str) -> str:
        """Poke a thing."""
        seen.append({"tool": "poke", "name": name})
        return f"{name} poked"

    return mcp.sse_app()


async def test_an_sse_server_is_stood_in_for_too_and_a_read_runs_live_on_it(
    database_url: str, pool: asyncpg.Pool, settings: Settings
) -> None:
    """The endpoint speaks SSE to a source's `sse_tools` server: its tools listed, a read in a replay turn of a
    branch that said reads: "live" run live on it (the operator trusts that server's readOnlyHint; kept with the
    turn that holds the lease), an act refused and kept, nothing run."""
    seen: list[dict[str, Any]] = []
    agent = f"kagent/sse-source-{secrets.token_hex(3)}"
    conv = await seed(pool, dialect="v1", turns=2)
    user, source = conv.user_id, (conv.session_id, conv.invocation_ids[1])
    job = await branch_job(pool, settings.service_schema, user=user, source=source, agent=agent, reads="live")
    holder = Holder(job_id=job, ordinal=0)
    with live_server(sse_tools(seen)) as url:
        real = f"{url}/sse"
        async with pool.acquire() as conn:
            await register_agent(conn, agent, {"sse_tools": [{"params": {"url": real}}]})
            assert await Store(settings.service_schema).replay.take_lease(conn, agent, user, holder, "r", 60)
        trusting = dataclasses.replace(settings, replay_trusted_servers=(real,))
        with live_server(create_app(trusting, database_url)) as live_url:
            endpoint = f"{live_url}/replay/mcp/{agent}/{server_key(real)}"
            async with (
                httpx.AsyncClient(headers={"X-User-Id": user}, timeout=30) as http,
                streamable_http_client(endpoint, http_client=http) as (read, write, _),
                ClientSession(read, write) as mcp,
            ):
                await mcp.initialize()
                assert {t.name for t in (await mcp.list_tools()).tools} == {"peek", "poke"}
                peeked = await mcp.call_tool("peek", {"name": "web"})
                assert not peeked.isError and peeked.content[0].text == "web looks fine"  # type: ignore[union-attr]
                poked = await mcp.call_tool("poke", {"name": "web"})
                assert poked.isError and "not run" in poked.content[0].text  # type: ignore[union-attr]
    assert seen == [{"tool": "peek", "name": "web"}]
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT job_id, ordinal, tool, arguments::text AS arguments, tool_class, answered_from "
            "FROM kagent_fork.replay_call WHERE twin = $1 ORDER BY id",
            agent,
        )
        await conn.execute("DELETE FROM kagent_fork.replay_lease WHERE twin = $1", agent)
    assert [tuple(r) for r in rows] == [
        (holder.job_id, 0, "peek", '{"name": "web"}', "reads", "live"),
        (holder.job_id, 0, "poke", '{"name": "web"}', "acts", "refused"),
    ]


async def test_the_recording_is_the_sources_latest_result_before_or_in_the_turn_by_canonical_arguments(
    services: Services, pool: asyncpg.Pool
) -> None:
    """Each turn of the seeded conversation calls k8s_get_resources with the same arguments and gets another
    answer (RESTARTS 7, 8, 9, 10): a replay of turn k answers turn k's, whatever order the arm writes the keys in."""
    conv = await seed(pool, dialect="v1", turns=4, tool_calls=True)
    key = ("k8s_get_resources", canonical({"resource_type": "pod", "namespace": "default"}))
    assert key[1] == '{"namespace":"default","resource_type":"pod"}'
    seen = []
    for turn in (0, 1, 3):
        async with services.connection() as conn:
            found = await recorded(services, conn, conv.session_id, conv.user_id, conv.invocation_ids[turn])
        assert set(found) == {key}
        result = found[key]
        assert isinstance(result, dict) and set(result) == {"result"}
        seen.append(result["result"].splitlines()[1].split()[3])  # RESTARTS of the crashing pod
    assert seen == ["7", "8", "10"]
    # not an MCP CallToolResult (a function tool's dict): answered as its JSON text, as the events hold it
    answer = recorded_result(found[key])
    assert answer.isError is False and answer.content[0].text == msgspec.json.encode(found[key]).decode()  # type: ignore[union-attr]
