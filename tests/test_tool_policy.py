"""Issue 34: the policy on what an experiment's or a what-if's arms may do with their tools, end to end over HTTP.
Real PostgreSQL with kagent's tables (a database of this module's own, whose `agent` rows it writes as kagent's
controller does), real a2a-sdk agents (tests/support/a2a_agent.py) and real MCP servers
(tests/support/classified_tools.py). Without an explicit `live`, an arm that could act and is not a replay twin
is refused, naming it and its tools, and nothing is written; `live` said runs; a twin runs under `replay`; the dry
run lists each arm's tools by class. Issue 46: tools read only on the operator's word for their server (here the
test's HTTP server is named kagent's tool server and trusted), and by default (`reads: "recorded"`) an arm with
any tool that is no twin is refused, naming the twin to make."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.config import KAGENT_TOOL_SERVER, Settings, from_env
from service.kagent.migrate import migrate
from service.kagent.store.agents import agent_row_id
from tests.conftest import create_database, drop_database
from tests.helpers import seed
from tests.support.a2a_agent import LEGACY, NAMESPACE, V1, Seen, running_agents
from tests.support.classified_tools import ClassifiedServers, classified_servers
from tests.support.live_server import live_server
from tests.test_mcp_tools import mcp_session
from tests.test_mcp_tools import ok as mcp_ok
from tests.test_mcp_tools import text_of as mcp_text
from tests.test_replay_trust import Calls, lying_server

V1_REF, LEGACY_REF = f"{NAMESPACE}/{V1}", f"{NAMESPACE}/{LEGACY}"
ACTING = ["count_widgets", "restart_everything", "scale_deployment"]  # on the HTTP server, to an arm


@pytest.fixture(scope="module")
async def own_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's own: the agent rows it writes name the shared test agents."""
    url = await create_database(server_url)
    try:
        yield url
    finally:
        await drop_database(server_url, url)


@pytest.fixture(scope="module")
async def own_pool(own_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(own_url, min_size=1, max_size=4)
    async with pool.acquire() as conn:
        await migrate(conn, "kagent_fork")
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture(scope="module")
def agents(own_url: str, own_pool: asyncpg.Pool) -> Iterator[tuple[str, Seen]]:
    with running_agents(own_url) as served:
        yield served


@pytest.fixture(scope="module")
def servers() -> Iterator[ClassifiedServers]:
    with classified_servers() as served:
        yield served


def trusting(servers: ClassifiedServers) -> dict[str, str]:
    """The operator's word on the test's HTTP server, as the environment gives it: it is kagent's tool server (the
    shipped list counts there: k8s_get_events reads) and its readOnlyHint counts (get_pods reads)."""
    return {
        "REPLAY_SERVER_NAMES": f"{KAGENT_TOOL_SERVER}={servers.http_url}", "REPLAY_TRUSTED_SERVERS": servers.http_url,
    }  # fmt: skip


def trusted(servers: ClassifiedServers) -> dict[str, Any]:
    words = from_env(trusting(servers))
    return {"replay_server_names": words.replay_server_names, "replay_trusted_servers": words.replay_trusted_servers}


@asynccontextmanager
async def service(own_url: str, a2a_url: str, **more: Any) -> AsyncIterator[Any]:
    settings = Settings(database_url=own_url, kagent_a2a_url=a2a_url, whatif_heartbeat_seconds=0.2, **more)
    async with AsyncTestClient(app=create_app(settings, own_url)) as client:
        yield client


@pytest.fixture(scope="module")
async def client(own_url: str, agents: tuple[str, Seen], servers: ClassifiedServers) -> AsyncIterator[Any]:
    async with service(own_url, agents[0], **trusted(servers)) as c:
        yield c


async def put_agent(pool: asyncpg.Pool, ref: str, config: dict[str, Any] | None) -> None:
    """The agent's row as kagent's controller upserts it; None: kagent knows no such agent (the row removed)."""
    if config is None:
        await pool.execute("DELETE FROM agent WHERE id = $1", agent_row_id(ref))
        return
    await pool.execute(
        "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), 'Declarative', "
        "$2::json) ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config, deleted_at = NULL",
        agent_row_id(ref), json.dumps(config),
    )  # fmt: skip


def on(url: str, **server: Any) -> dict[str, Any]:
    return {"model": {"type": "openai", "model": "gpt-4o"}, "http_tools": [{"params": {"url": url}, **server}]}


async def rows(pool: asyncpg.Pool) -> dict[str, int]:
    """Every table's row count, kagent's and the service's: a refusal must leave every one as it was. Counted once
    no job runs (an earlier test's agents write their turns meanwhile)."""
    deadline = time.monotonic() + 60
    while await pool.fetchval("SELECT count(*) FROM kagent_fork.whatif_job WHERE status = 'running'"):
        assert time.monotonic() < deadline, "a job never ended"
        await asyncio.sleep(0.1)
    async with pool.acquire() as conn:
        tables = await conn.fetch(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema IN ('public', 'kagent_fork') AND table_type = 'BASE TABLE'"
        )
        return {
            f"{t['table_schema']}.{t['table_name']}": await conn.fetchval(
                f'SELECT count(*) FROM "{t["table_schema"]}"."{t["table_name"]}"'
            )
            for t in tables
        }


async def post(client: Any, path: str, user: str, body: dict[str, Any]) -> Any:
    return await client.post(path, json=body, headers={"X-User-Id": user})


async def test_an_arm_that_could_act_is_refused_naming_it_and_its_tools_and_nothing_is_written(
    client: Any, own_pool: asyncpg.Pool, servers: ClassifiedServers
) -> None:
    await put_agent(own_pool, V1_REF, on(servers.http_url, require_approval=["delete_pod"]))
    await put_agent(own_pool, LEGACY_REF, None)  # an arm kagent's table does not hold: nothing known to act
    conv = await seed(own_pool, dialect="v1", turns=3)
    exp = f"/api/sessions/{conv.session_id}/experiments"
    whatif = f"/api/sessions/{conv.session_id}/whatif"
    turn = {"rewind_before_invocation_id": conv.invocation_ids[1]}
    before = await rows(own_pool)
    for path, body in [
        (exp, {**turn, "agents": [LEGACY_REF, V1_REF], "reads": "live"}),
        (exp, {**turn, "agents": [V1_REF], "tools": {"mode": "replay", "reads": "live"}}),
        (whatif, {**turn, "agent_ref": V1_REF, "reads": "live"}),
    ]:
        r = await post(client, path, conv.user_id, body)
        assert r.status_code == 422, (body, r.text)
        error = r.json()["error"]
        assert f"the agent {V1_REF} (" in error and all(name in error for name in ACTING), error
        assert "get_pods" not in error and "delete_pod" not in error and LEGACY_REF not in error
        assert 'tools: "live"' in error and "nothing was started" in error
    # by default (reads: "recorded") every tool of an arm that is no twin is named, with the twin to make
    for path, body in [(exp, {**turn, "agents": [LEGACY_REF, V1_REF]}), (whatif, {**turn, "agent_ref": V1_REF})]:
        r = await post(client, path, conv.user_id, {**body, "tools": "replay"})
        assert r.status_code == 422, (body, r.text)
        error = r.json()["error"]
        assert all(n in error for n in [*ACTING, "get_pods", "delete_pod"]) and LEGACY_REF not in error, error
        assert f"kagent-fork replay-twin {V1_REF}" in error and 'reads: "live"' in error, error
    assert await rows(own_pool) == before


async def test_live_said_explicitly_runs_and_the_answer_lists_the_tools(
    client: Any, own_pool: asyncpg.Pool, servers: ClassifiedServers
) -> None:
    await put_agent(own_pool, V1_REF, on(servers.http_url, require_approval=["delete_pod"]))
    conv = await seed(own_pool, dialect="v1", turns=3)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [V1_REF], "tools": "live"}
    r = await post(client, f"/api/sessions/{conv.session_id}/experiments", conv.user_id, body)
    assert r.status_code == 202, r.text
    started = r.json()["data"]["experiment"]
    assert started["tool_policy"] == {"mode": "live", "reads": "live"}
    (arm,) = started["arms"]
    assert arm["agent_ref"] == V1_REF and arm["known"] and not arm["twin"]
    assert [t["name"] for t in arm["acts"]] == ACTING
    assert [t["name"] for t in arm["asks"]] == ["delete_pod"]
    assert [t["name"] for t in arm["reads"]] == ["get_pods", "k8s_get_events"]
    job = await client.get(f"/api/whatif/{started['branches'][0]['job_id']}", headers={"X-User-Id": conv.user_id})
    assert job.json()["data"]["tool_policy"] == {"mode": "live", "reads": "live"}
    assert job.json()["data"]["tools"] == arm
    # kept with the experiment: read again, the same
    again = await client.get(f"/api/experiments/{started['id']}", headers={"X-User-Id": conv.user_id})
    assert again.json()["data"]["arms"] == [arm] and again.json()["data"]["tool_policy"]["mode"] == "live"
    table = await client.get(f"/api/experiments/{started['id']}?format=markdown", headers={"X-User-Id": conv.user_id})
    assert "\nTools: live, every tool ran for real.\n" in table.text, table.text


async def test_an_arm_that_only_reads_or_asks_runs_with_reads_live_and_is_refused_by_default(
    client: Any, own_pool: asyncpg.Pool, servers: ClassifiedServers
) -> None:
    await put_agent(
        own_pool, V1_REF, on(servers.http_url, tools=["get_pods", "delete_pod"], require_approval=["delete_pod"])
    )
    conv = await seed(own_pool, dialect="v1", turns=2)
    path = f"/api/sessions/{conv.session_id}/whatif"
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": V1_REF}
    before = await rows(own_pool)
    # held to the recording (the default, or said), its calls cannot be: only a twin's can
    for said in ({}, {"reads": "recorded"}):
        r = await post(client, path, conv.user_id, {**body, **said})
        assert r.status_code == 422 and f"{V1_REF} (delete_pod, get_pods)" in r.json()["error"], r.text
    assert await rows(own_pool) == before
    r = await post(client, path, conv.user_id, {**body, "reads": "live"})
    assert r.status_code == 202, r.text
    job = r.json()["data"]["job"]
    assert job["tool_policy"] == {"mode": "replay", "reads": "live"}
    assert [t["name"] for t in job["tools"]["reads"]] == ["get_pods"] and job["tools"]["acts"] == []


async def test_a_replay_twin_runs_under_replay_without_being_told(
    own_url: str, own_pool: asyncpg.Pool, agents: tuple[str, Seen], servers: ClassifiedServers
) -> None:
    """Every MCP server of the arm is under REPLAY_MCP_URL (here the test's MCP server stands in for kagent-fork's
    replay endpoint): it may hold tools that act, they go to the endpoint, so it runs under replay."""
    await put_agent(own_pool, V1_REF, on(servers.http_url))
    conv = await seed(own_pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [V1_REF]}
    twin_base = servers.http_url.rsplit("/", 1)[0]
    async with service(own_url, agents[0], replay_mcp_url=twin_base) as twin_client:
        r = await post(twin_client, f"/api/sessions/{conv.session_id}/experiments", conv.user_id, body)
        assert r.status_code == 202, r.text
        started = r.json()["data"]["experiment"]
        assert started["tool_policy"] == {"mode": "replay", "reads": "recorded"}
        assert started["arms"][0]["twin"] is True and started["arms"][0]["acts"]
    # the same arm, the same body, without the endpoint: not a twin, refused
    async with service(own_url, agents[0]) as plain:
        r = await post(plain, f"/api/sessions/{conv.session_id}/experiments", conv.user_id, body)
        assert r.status_code == 422 and V1_REF in r.json()["error"]


async def test_the_dry_run_lists_each_arm_by_class_and_writes_nothing(
    client: Any, own_pool: asyncpg.Pool, servers: ClassifiedServers
) -> None:
    await put_agent(own_pool, V1_REF, on(servers.http_url, require_approval=["delete_pod"]))
    await put_agent(own_pool, LEGACY_REF, None)
    conv = await seed(own_pool, dialect="v1", turns=3)
    turn = {"rewind_before_invocation_id": conv.invocation_ids[1], "dry_run": True}
    exp = f"/api/sessions/{conv.session_id}/experiments"
    before = await rows(own_pool)
    r = await post(client, exp, conv.user_id, {**turn, "agents": [V1_REF, LEGACY_REF], "repeats": 2})
    assert r.status_code == 200, r.text
    plan = r.json()["data"]
    assert plan["dry_run"] is True and plan["branches"] == 4 and plan["turns"] == 1
    assert plan["estimated_context_tokens"] > 0 and plan["tools"] is None
    assert V1_REF in plan["refused"] and all(n in plan["refused"] for n in ACTING)
    by_ref = {a["agent_ref"]: a for a in plan["arms"]}
    assert [t["name"] for t in by_ref[V1_REF]["acts"]] == ACTING
    assert {t["why"] for t in by_ref[V1_REF]["acts"]} >= {
        "not read-only on the operator's word for this server, no approval"
    }
    assert not by_ref[LEGACY_REF]["known"] and "no row" in by_ref[LEGACY_REF]["note"]
    # live said: it would start
    r = await post(client, exp, conv.user_id, {**turn, "agents": [V1_REF], "tools": "live"})
    assert r.json()["data"]["refused"] is None and r.json()["data"]["tools"] == {"mode": "live", "reads": "live"}
    # the cost gate's refusal is said too, beside the tools'
    r = await post(client, exp, conv.user_id, {**turn, "agents": [V1_REF], "max_context_tokens": 1})
    assert "over the limit of 1" in r.json()["data"]["refused"] and "has tools" in r.json()["data"]["refused"]
    # a what-if's dry run
    r = await post(client, f"/api/sessions/{conv.session_id}/whatif", conv.user_id, {**turn, "agent_ref": V1_REF})
    assert r.status_code == 200 and r.json()["data"]["branches"] == 1, r.text
    assert [a["agent_ref"] for a in r.json()["data"]["arms"]] == [V1_REF]
    assert await rows(own_pool) == before


async def test_a_bad_policy_is_refused_before_anything_is_read(client: Any, own_pool: asyncpg.Pool) -> None:
    conv = await seed(own_pool, dialect="v1", turns=2)
    exp = f"/api/sessions/{conv.session_id}/experiments"
    turn = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [V1_REF]}
    before = await rows(own_pool)
    for tools, status in [
        ("maybe", 400), ({"mode": "replay", "extra": 1}, 400), ({"reads": "live"}, 400),
        ({"mode": "live", "reads": "recorded"}, 422),
    ]:  # fmt: skip
        r = await post(client, exp, conv.user_id, {**turn, "tools": tools})
        assert r.status_code == status, (tools, r.text)
    r = await post(
        client, exp, conv.user_id, {**turn, "tools": {"mode": "replay", "reads": "recorded"}, "reads": "live"}
    )
    assert r.status_code == 422 and "say it once" in r.json()["error"]
    r = await post(client, exp, conv.user_id, {**turn, "tools": "live", "reads": "recorded"})
    assert r.status_code == 422
    assert await rows(own_pool) == before


async def test_the_mcp_tools_take_the_policy_and_dry_run(
    own_url: str, own_pool: asyncpg.Pool, agents: tuple[str, Seen], servers: ClassifiedServers
) -> None:
    """start_experiment and start_whatif take `tools`, `reads` and `dry_run` as the HTTP bodies do."""
    await put_agent(own_pool, V1_REF, on(servers.http_url, require_approval=["delete_pod"]))
    conv = await seed(own_pool, dialect="v1", turns=2)
    settings = Settings(
        database_url=own_url, kagent_a2a_url=agents[0], whatif_heartbeat_seconds=0.2, **trusted(servers)
    )
    turn = {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[1]}
    with live_server(create_app(settings, own_url)) as url:
        async with mcp_session(url, {"X-User-Id": conv.user_id}) as mcp:
            before = await rows(own_pool)
            plan = mcp_ok(await mcp.call_tool("start_experiment", {**turn, "agents": [V1_REF], "dry_run": True}))
            assert plan["dry_run"] and [t["name"] for t in plan["arms"][0]["acts"]] == ACTING
            refused = await mcp.call_tool("start_whatif", {**turn, "agent_ref": V1_REF})
            assert refused.isError and "scale_deployment" in mcp_text(refused)
            assert await rows(own_pool) == before
            started = mcp_ok(await mcp.call_tool("start_whatif", {**turn, "agent_ref": V1_REF, "tools": "live"}))
            assert started["job"]["tool_policy"] == {"mode": "live", "reads": "live"}


async def test_the_cli_takes_tools_and_dry_run(
    own_url: str, own_pool: asyncpg.Pool, agents: tuple[str, Seen], servers: ClassifiedServers
) -> None:
    """`kagent-fork whatif|experiment ... --tools --reads --dry-run`, as the HTTP bodies' fields."""
    await put_agent(own_pool, V1_REF, on(servers.http_url, require_approval=["delete_pod"]))
    conv = await seed(own_pool, dialect="v1", turns=2)
    env = {**os.environ, "DATABASE_URL": own_url, "KAGENT_A2A_URL": agents[0], **trusting(servers)}
    base = [conv.session_id, "--before", conv.invocation_ids[1], "--user", conv.user_id]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service", *args], env=env, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip

    before = await rows(own_pool)
    plan = run("experiment", *base, "--agent", V1_REF, "--agent", LEGACY_REF, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert lines[0].startswith("Dry run: 2 branches x 1 turn, about ") and "refused: tools: the agent" in lines[0]
    assert f"  {V1_REF}: asks delete_pod; reads get_pods, k8s_get_events; acts {', '.join(ACTING)}" in lines
    assert any(line.startswith(f"  {LEGACY_REF}: tools not known: ") for line in lines), plan.stdout
    refused = run("whatif", *base, "--agent", V1_REF)
    assert refused.returncode != 0 and "scale_deployment" in refused.stderr, refused.stderr
    # which reads apply, said: the default keeps to the recording, reads live only when asked
    for more, words in [((), "replay (reads recorded: only the source's recorded results)"),
                        (("--reads", "live"), "replay (reads live: an unrecorded read runs live)")]:  # fmt: skip
        plan = run("whatif", *base, "--agent", LEGACY_REF, "--dry-run", *more)
        assert plan.returncode == 0 and f"would start, tools: {words}" in plan.stdout, plan.stdout
    assert await rows(own_pool) == before
    live = run("whatif", *base, "--agent", V1_REF, "--tools", "live", "--wait", "--json")
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout)["tool_policy"] == {"mode": "live", "reads": "live"}


def test_settings_reach_the_classes() -> None:
    """REPLAY_MCP_URL's trailing slash is dropped, so a twin's URL is compared with the base itself."""
    from service.config import from_env

    assert from_env({"REPLAY_MCP_URL": "http://kagent-fork.kagent:8080/replay/mcp/"}).replay_mcp_url == (
        "http://kagent-fork.kagent:8080/replay/mcp"
    )
    assert dataclasses.replace(Settings(), replay_read_only_tools=()).replay_read_only_tools == ()
    assert Settings().replay_read_only_tools == (("default", ""),) and Settings().replay_trusted_servers == ()


async def test_the_probes_dry_run_classes_a_lying_server_by_the_operators_word(
    own_url: str, own_pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    """Issue 46, the outside probe: an ordinary arm with [get_weather, k8s_get_resources] on a server that is not
    kagent's tool server (get_weather annotated readOnlyHint, k8s_get_resources deleting pods) was answered as all
    reads and refused nothing. Neither reads on that server's own word or by its name: both act, with why, and the
    start is refused under either reads; nothing is written, and the server is asked for its list only."""
    calls = Calls()
    with live_server(lying_server(calls)) as base:
        await put_agent(own_pool, V1_REF, on(f"{base}/mcp", tools=["get_weather", "k8s_get_resources"]))
        conv = await seed(own_pool, dialect="v1", turns=2)
        path = f"/api/sessions/{conv.session_id}/whatif"
        body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": V1_REF, "dry_run": True}
        before = await rows(own_pool)
        for reads in ("recorded", "live"):
            async with service(own_url, agents[0]) as client:  # the operator said nothing
                r = await post(client, path, conv.user_id, {**body, "reads": reads})
            assert r.status_code == 200, r.text
            plan = r.json()["data"]
            (arm,) = plan["arms"]
            assert arm["reads"] == [] and [t["name"] for t in arm["acts"]] == ["get_weather", "k8s_get_resources"]
            why = {t["name"]: t["why"] for t in arm["acts"]}
            assert "not in REPLAY_TRUSTED_SERVERS" in why["get_weather"], why
            assert plan["tools"] is None and "get_weather, k8s_get_resources" in plan["refused"], plan
        assert await rows(own_pool) == before
    assert calls.seen == []
