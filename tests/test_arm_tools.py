"""Issue 34: what each arm of a replay can do with its tools, known before anything runs. Each arm's configuration
is read from kagent's `agent` table (rows as kagent's controller writes them), its MCP servers (real FastMCP
servers, streamable HTTP and SSE: tests/support/classified_tools.py) are asked for their tools as the caller, and
each tool is classed asks / reads / acts; the policy that refuses an arm that could act (tools.decide)."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from service.agents.replay import tools, trust
from service.agents.replay.tools import ArmTools, AskedTools, ToolPolicy, decide, is_replay_twin, policy_of
from service.config import KAGENT_TOOL_SERVER, ConfigError, Settings, from_env
from service.errors import Unprocessable
from service.identity import Caller
from service.kagent.store.agents import AgentConfig, McpServerConfig, McpServerParams, agent_row_id
from service.services import Services
from tests.support.classified_tools import HTTP_TOOLS, ClassifiedServers, classified_servers, slow_server


@pytest.fixture(scope="module")
def servers() -> Iterator[ClassifiedServers]:
    with classified_servers() as served:
        yield served


def closed_port_url(path: str = "/mcp") -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}{path}"


async def put_agent(pool: asyncpg.Pool, ref: str, config: object, type_: str = "Declarative") -> None:
    """The agent's row as kagent's controller upserts it (reconciler.upsertAgent): its id, type and config."""
    text = None if config is None else json.dumps(config)
    await pool.execute(
        "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), $2, $3::json) "
        "ON CONFLICT (id) DO UPDATE SET type = EXCLUDED.type, config = EXCLUDED.config, deleted_at = NULL",
        agent_row_id(ref), type_, text,
    )  # fmt: skip


def names(arm: ArmTools) -> dict[str, list[str]]:
    return {
        "asks": [t.name for t in arm.asks],
        "reads": [t.name for t in arm.reads],
        "acts": [t.name for t in arm.acts],
    }


# --- the words: classification, the request's policy, twins, the operator's list --------------------------------


def test_a_tool_reads_only_on_the_operators_word_for_its_server() -> None:
    """Issue 46: a server's own readOnlyHint is a hint (MCP says so), and a name from kagent's tool server's list
    means nothing on another server: both act unless the operator says so for that server."""
    kagent, mine, evil = "http://kagent-tools.kagent:8084/mcp", "http://mine:1/mcp", "http://evil:1/mcp"
    word = trust.trust_of(
        from_env({"REPLAY_TRUSTED_SERVERS": f"{mine}/", "REPLAY_READ_ONLY_TOOLS": f"default,{evil}/only_this"})
    )

    def cls(name: str, server: str, hint: bool | None = None, approval: tuple[str, ...] = ()) -> str:
        return trust.classify(name, server, require_approval=approval, read_only_hint=hint, trust=word)[0]

    assert cls("x", mine, True, ("x",)) == "asks"
    assert cls("k8s_get_resources", kagent) == cls("k8s_get_resources", kagent + "/") == "reads"
    assert cls("k8s_get_resources", evil) == "acts"  # the shipped name, on a server that is not kagent's
    assert cls("lying_scale", evil, True) == "acts"  # a readOnlyHint from a server no one trusts
    assert cls("get_x", mine, True) == "reads" and cls("get_x", mine, None) == "acts"
    assert cls("only_this", evil) == "reads" and cls("only_this", mine) == "acts"
    assert (
        "REPLAY_TRUSTED_SERVERS" in trust.classify("l", evil, require_approval=[], read_only_hint=True, trust=word)[1]
    )


def test_the_request_policy_and_its_refusals() -> None:
    assert policy_of(None) is None
    assert policy_of("live") == ToolPolicy(mode="live", reads="live")
    assert policy_of("replay") == ToolPolicy(mode="replay") == ToolPolicy(mode="replay", reads="recorded")
    assert policy_of("replay", "live") == ToolPolicy(mode="replay", reads="live")
    assert policy_of(None, "live") == ToolPolicy(mode="replay", reads="live")
    assert policy_of(AskedTools(mode="replay", reads="live"), "live") == ToolPolicy(mode="replay", reads="live")
    assert policy_of(AskedTools(mode="live")) == ToolPolicy(mode="live", reads="live")
    with pytest.raises(Unprocessable, match="say it once"):
        policy_of(AskedTools(mode="replay", reads="recorded"), "live")
    with pytest.raises(Unprocessable, match='applies to tools: "replay"'):
        policy_of(AskedTools(mode="live", reads="recorded"))
    with pytest.raises(Unprocessable, match='applies to tools: "replay"'):
        policy_of("live", "recorded")


def test_the_operators_word_names_servers() -> None:
    shipped = trust.shipped_read_only_names()
    # kagent-tools v0.2.1's read tools are in it, its writing tools are not
    assert {"k8s_get_resources", "k8s_get_pod_logs", "helm_list_releases", "prometheus_query_tool"} <= shipped
    assert not {"k8s_delete_resource", "k8s_apply_manifest", "k8s_patch_resource", "shell", "helm_upgrade"} & shipped
    kagent = "http://kagent-tools.kagent:8084/mcp"
    default = trust.trust_of(from_env({}))
    assert default.shipped == kagent and default.read_only == {} and default.trusted == frozenset()
    # kagent's tool server is its RemoteMCPServer's address, which the operator may give (another release)
    moved = from_env({"REPLAY_SERVER_NAMES": f"{KAGENT_TOOL_SERVER}=http://my-tools.ops:8084/mcp/"})
    assert trust.trust_of(moved).shipped == "http://my-tools.ops:8084/mcp"
    named = from_env({
        "REPLAY_SERVER_NAMES": "ops/grafana=https://grafana-mcp.ops/mcp",
        "REPLAY_READ_ONLY_TOOLS": "default, ops/grafana/get_dashboard http://x:1/mcp/my_get",
        "REPLAY_TRUSTED_SERVERS": "ops/grafana,http://y:2/sse",
    })  # fmt: skip
    word = trust.trust_of(named)
    assert word.shipped == kagent and word.trusted == {"https://grafana-mcp.ops/mcp", "http://y:2/sse"}
    assert word.read_only == {"https://grafana-mcp.ops/mcp": {"get_dashboard"}, "http://x:1/mcp": {"my_get"}}
    assert trust.trust_of(from_env({"REPLAY_READ_ONLY_TOOLS": "http://x:1/mcp/my_get"})).shipped is None
    assert trust.trust_of(from_env({"REPLAY_READ_ONLY_TOOLS": "none"})) == trust.Trust({}, None, frozenset())
    for bad in ("my_get", "good/b@d", "ops/unknown/get_x"):  # a bare name, a bad tool, a server no one named
        with pytest.raises(ConfigError, match="REPLAY_READ_ONLY_TOOLS"):
            from_env({"REPLAY_READ_ONLY_TOOLS": bad})
    with pytest.raises(ConfigError, match=r"REPLAY_TRUSTED_SERVERS.*REPLAY_SERVER_NAMES"):
        from_env({"REPLAY_TRUSTED_SERVERS": "ops/unknown"})
    with pytest.raises(ConfigError, match="REPLAY_SERVER_NAMES"):
        from_env({"REPLAY_SERVER_NAMES": "ops/grafana"})
    with pytest.raises(ConfigError, match="REPLAY_MCP_URL"):
        from_env({"REPLAY_MCP_URL": "kagent-fork:8080/replay/mcp"})


def test_a_replay_twin_has_every_server_under_the_replay_endpoint_and_nothing_else() -> None:
    base = "http://kagent-fork.kagent:8080/replay/mcp"
    on = Settings(replay_mcp_url=base)

    def cfg(*urls: str, **more: object) -> AgentConfig:
        return AgentConfig(
            http_tools=[McpServerConfig(params=McpServerParams(url=u)) for u in urls],
            **more,  # type: ignore[arg-type]
        )

    assert is_replay_twin(cfg(f"{base}/kagent/tool-server"), on)
    assert is_replay_twin(cfg(base, f"{base}?server=2"), on)
    assert not is_replay_twin(cfg(f"{base}/kagent/tool-server"), Settings())  # REPLAY_MCP_URL unset
    assert not is_replay_twin(cfg(f"{base}/a", "http://tools.kagent:8084/mcp"), on)
    assert not is_replay_twin(cfg(f"{base}extra"), on)  # a prefix of a name is not the endpoint
    assert not is_replay_twin(cfg(), on)  # no server at all
    assert not is_replay_twin(cfg(f"{base}/a", execute_code=True), on)
    assert not is_replay_twin(None, on)


def arm(ref: str, *, acts: list[str] = (), reads: list[str] = (), twin: bool = False) -> ArmTools:  # type: ignore[assignment]
    return ArmTools(
        agent_ref=ref, known=True, twin=twin, asks=[],
        reads=[tools.ArmTool(name=n, why="t") for n in reads], acts=[tools.ArmTool(name=n, why="t") for n in acts],
    )  # fmt: skip


def test_decide_refuses_an_arm_that_could_act_unless_live_is_said() -> None:
    quiet, acting = arm("ns/quiet", reads=["get_pods"]), arm("ns/acting", acts=["scale", "delete"])
    reads_live = ToolPolicy(mode="replay", reads="live")
    assert decide(reads_live, [quiet]) == reads_live
    assert decide(ToolPolicy(mode="live"), [acting]) == ToolPolicy(mode="live")
    assert decide(None, [arm("ns/twin", acts=["scale"], twin=True)]) == ToolPolicy(mode="replay", reads="recorded")
    assert decide(None, [arm("ns/no-tools")]) == ToolPolicy(mode="replay")
    with pytest.raises(Unprocessable) as refused:
        decide(reads_live, [quiet, acting])
    assert "ns/acting (scale, delete)" in refused.value.message and "ns/quiet" not in refused.value.message
    assert 'tools: "live"' in refused.value.message
    many = arm("ns/many", acts=[f"t{i}" for i in range(20)])
    with pytest.raises(Unprocessable, match="and 8 more"):
        decide(reads_live, [many])


def test_by_default_an_arm_with_tools_that_is_no_twin_is_refused_naming_the_twin_to_make() -> None:
    """Issue 46: reads: "recorded" is the default, and only a twin's calls can be answered from the recording: a
    plain arm with any tool (one that only reads too) is refused, the refusal naming the twin to make and saying
    that reads: "live" runs the arm as it is."""
    quiet = arm("ns/quiet", reads=["get_pods"])
    for asked in (None, ToolPolicy(mode="replay"), ToolPolicy(mode="replay", reads="recorded")):
        with pytest.raises(Unprocessable) as refused:
            decide(asked, [quiet])
        said = refused.value.message
        assert "ns/quiet (get_pods)" in said and "kagent-fork replay-twin ns/quiet" in said, said
        assert 'reads: "live"' in said and "as it is" in said and "nothing was started" in said


# --- an arm's tools, from kagent's agent table and its real MCP servers ------------------------------------------


async def test_each_tool_of_each_server_is_classed_as_the_caller_asks(
    services: Services, pool: asyncpg.Pool, servers: ClassifiedServers
) -> None:
    ref = f"ns-{uuid.uuid4().hex[:8]}/tooled-agent"
    await put_agent(pool, ref, {
        "model": {"type": "openai", "model": "gpt-4o"},
        "http_tools": [{
            "params": {"url": servers.http_url, "headers": {"X-Tools-Key": "k1"}},
            "tools": [n for n in HTTP_TOOLS if n != "restart_everything"] + ["not_on_the_server"],
            "require_approval": ["delete_pod"], "allowed_headers": ["X-User-Id", "Authorization"],
        }],
        "sse_tools": [{"params": {"url": servers.sse_url}}],
    })  # fmt: skip
    # the operator's word: the HTTP server is kagent's tool server (its RemoteMCPServer's address), trusted for
    # its hints as the SSE server is, and count_widgets on it only reads
    settings = from_env({
        "REPLAY_SERVER_NAMES": f"{KAGENT_TOOL_SERVER}={servers.http_url}",
        "REPLAY_READ_ONLY_TOOLS": f"default,{KAGENT_TOOL_SERVER}/count_widgets",
        "REPLAY_TRUSTED_SERVERS": f"{servers.http_url},{servers.sse_url}",
    })  # fmt: skip
    svc = dataclasses.replace(services, settings=settings)
    before = len(servers.requests.headers)
    found = await tools.arm_tools(svc, Caller(user_id="alice@example.com"), ref, "Bearer t0k")
    assert found.known and not found.twin and found.note is None
    assert names(found) == {
        "asks": ["delete_pod"],
        "reads": ["count_widgets", "get_pods", "k8s_get_events", "sse_status"],
        "acts": ["not_on_the_server", "scale_deployment", "sse_apply"],
    }
    why = {t.name: t.why for t in [*found.asks, *found.reads, *found.acts]}
    assert "REPLAY_TRUSTED_SERVERS" in why["get_pods"] and "shipped list" in why["k8s_get_events"]
    assert why["not_on_the_server"] == "the configuration names it, but the server does not list it"
    assert {t.server for t in found.reads if t.name == "sse_status"} == {servers.sse_url}
    # asked as the caller: the config's own header, and the caller's that allowed_headers lets through
    asked = servers.requests.headers[before:]
    to_http = [h for h in asked if h.get("x-tools-key") == "k1"]
    assert to_http and all(h["x-user-id"] == "alice@example.com" for h in to_http)
    assert all(h["authorization"] == "Bearer t0k" for h in to_http)
    assert not any("authorization" in h for h in asked if "x-tools-key" not in h)  # the SSE server allows none
    # without the operator's word nothing reads: neither the servers' own readOnlyHint (get_pods, sse_status) nor
    # a name from kagent's tool server's list on a server that is not kagent's (k8s_get_events)
    plain = await tools.arm_tools(services, Caller(user_id="alice@example.com"), ref)
    assert names(plain)["reads"] == [] and names(plain)["asks"] == ["delete_pod"]
    assert {"count_widgets", "get_pods", "k8s_get_events", "sse_status"} <= set(names(plain)["acts"])


async def test_what_no_one_can_list_acts(services: Services, pool: asyncpg.Pool) -> None:
    tag = uuid.uuid4().hex[:8]
    down, byo, other = (f"ns-{tag}/{n}" for n in ("down", "byo", "other"))
    byo_config, unknown = f"ns-{tag}/byo-config", f"ns-{tag}/unknown-keys"
    await put_agent(pool, down, {
        "http_tools": [{"params": {"url": closed_port_url()}, "require_approval": ["x"]}],
        "sse_tools": [{"params": {"url": closed_port_url("/sse")}, "tools": ["a_read", "a_write"]}],
        "stdio_tools": [{"command": "npx", "args": ["-y", "some-server"]}],
        "remote_agents": [{"name": "helper", "url": "http://kagent-controller:8083/api/a2a/kagent/helper"}],
        "execute_code": True,
    })  # fmt: skip
    await put_agent(pool, byo, None, type_="BYO")
    # issue 46: shapes that would read as "no tools" are not known to have none
    await put_agent(pool, byo_config, {"type": "BYO"}, type_="BYO")
    await put_agent(pool, unknown, {"tool_servers": [{"url": "http://x/mcp"}]})
    caller = Caller(user_id="bob@example.com")
    odd = await tools.arms(services, caller, [byo_config, unknown])
    assert [t.name for t in odd[byo_config].acts] == ["*"] and "BYO" in odd[byo_config].acts[0].why
    assert [t.name for t in odd[unknown].acts] == ["*"] and "shape" in odd[unknown].acts[0].why
    with pytest.raises(Unprocessable, match=f"{byo_config}.*{unknown}"):
        decide(ToolPolicy(mode="replay", reads="live"), odd.values())
    arms = await tools.arms(services, caller, [down, byo, other, down])
    assert list(arms) == [down, byo, other]  # each arm once, in order
    found = arms[down]
    assert names(found) == {
        "asks": [], "reads": [],
        "acts": ["*", "a_read", "a_write", "execute_code", "helper", "stdio: npx -y some-server"],
    }  # fmt: skip
    reasons = {t.name: t.why for t in found.acts}
    assert reasons["*"].startswith("the server did not answer: ") and "Connect" in reasons["*"]
    assert "remote agent" in reasons["helper"] and "process" in reasons["stdio: npx -y some-server"]
    assert not arms[byo].known and [t.name for t in arms[byo].acts] == ["*"] and "BYO" in arms[byo].acts[0].why
    # an agent kagent's table does not hold: nothing is known, and the answer says so
    assert not arms[other].known and names(arms[other]) == {"asks": [], "reads": [], "acts": []}
    assert arms[other].note is not None and "no row" in arms[other].note


async def test_every_server_is_asked_at_once_and_a_silent_one_is_not_waited_for(
    services: Services, pool: asyncpg.Pool
) -> None:
    """Three arms on three servers that each take 0.5 s a request are classed in about the time of one (they are
    asked at once, the configurations read first: POOL_STRICT would refuse a held connection); a server slower
    than the bound (min(10 s, WHATIF_TIMEOUT_SECONDS)) makes its tools act, with the reason."""
    tag = uuid.uuid4().hex[:8]
    refs = [f"ns-{tag}/slow-{i}" for i in range(3)]
    with slow_server(0.5) as a, slow_server(0.5) as b, slow_server(0.5) as c, slow_server(4.0) as silent:
        for ref, url in zip(refs, [a, b, c], strict=True):
            await put_agent(pool, ref, {"http_tools": [{"params": {"url": url}}]})
        started = time.monotonic()
        arms = await tools.arms(services, Caller(user_id="carol@example.com"), refs)
        took = time.monotonic() - started
        assert all(len(names(arm)["acts"]) == len(HTTP_TOOLS) for arm in arms.values())
        # a session is a few requests (initialize, initialized, tools/list): one server's worth, not three
        assert took < 4.0, took
        one = time.monotonic()
        await tools.arms(services, Caller(user_id="carol@example.com"), refs[:1])
        alone = time.monotonic() - one
        assert took < alone * 2, (took, alone)
        await put_agent(pool, f"ns-{tag}/silent", {"http_tools": [{"params": {"url": silent}}]})
        bounded = dataclasses.replace(
            services, settings=dataclasses.replace(services.settings, whatif_timeout_seconds=2)
        )
        started = time.monotonic()
        quiet = await tools.arm_tools(bounded, Caller(user_id="carol@example.com"), f"ns-{tag}/silent")
        assert time.monotonic() - started < 3.5
    assert [(t.name, t.why) for t in quiet.acts] == [
        ("*", "the server did not answer: it did not list its tools in time")
    ]
