"""What a replay's arms may do with their tools, known before anything runs, and the policy that keeps a replay
safe by default (docs/whatif.md, "What an arm's tools do"; docs/experiments.md).

Each arm's configuration is read from kagent's `agent` table (store.agents); each of its MCP servers is asked for
its tools (`tools/list`, as the caller) and each tool the arm may call is classed: **asks** (kagent asks a person
to approve it first: `require_approval`), **reads** (on the operator's word for its server: trust.py), **acts**
(everything else, and whatever cannot be seen: every tool of a server that does not answer, a tool the
configuration names but its server does not list, a BYO agent or a configuration kagent-fork cannot read, local
stdio servers, remote agents, code the agent runs). Without an explicit `live`, a start whose arm is not a replay
twin (its MCP servers are this service's replay endpoint, REPLAY_MCP_URL) is refused, 422, nothing written
(`decide`), when it could call a tool that acts without approval or, under `reads: "recorded"` (the default), when
it has any tool: only a twin's calls are answered from the source's recording.

The MCP SDK is imported when a server is asked, never with this module: a command that only reads jobs or
experiments does not load it (tests/test_cli.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from service.agents.replay import trust
from service.agents.replay.trust import ToolClass
from service.config import Settings
from service.errors import Unprocessable
from service.identity import Caller
from service.kagent.store.agents import AgentConfig, AgentRow, McpServerConfig
from service.kagent.store.base import check_not_holding
from service.services import Services

Mode = Literal["replay", "live"]
Reads = Literal["live", "recorded"]
LIST_TIMEOUT_SECONDS = 10.0  # a server that has not listed its tools by then does not answer (capped by the job's)
_MORE_THAN = 12  # a refusal names at most this many tools of an arm, then says how many more


class ToolPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the arms' tools do: `replay` (the source's recorded results; an unrecorded call is answered as such,
    `reads: "recorded"`, the default, or, with `reads: "live"`, runs live when it only reads; nothing that acts
    runs) or `live` (every tool for real)."""

    mode: Mode
    reads: Reads = "recorded"


class AskedTools(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The request's `tools` as an object: `reads` unsaid is the default of its mode."""

    mode: Mode
    reads: Reads | None = None


# The request's `tools`: "replay", "live" (shorthand for {mode}) or {mode, reads}.
ToolsField = Mode | AskedTools


def policy_of(tools: ToolsField | None, reads: Reads | None = None) -> ToolPolicy | None:
    """The policy a request asks for (None: it said nothing, the start decides). `reads`, the contract's own field
    beside `tools`, must agree with an object's `reads`; `reads: "recorded"` applies only to a replay (422 with
    `live`, where every tool runs for real); unsaid, a replay's reads are `recorded`."""
    if tools is None and reads is None:
        return None
    asked = AskedTools(mode=tools) if isinstance(tools, str) else tools or AskedTools(mode="replay")
    if reads is not None and asked.reads is not None and asked.reads != reads:
        raise Unprocessable(f'reads is "{reads}" but tools.reads is "{asked.reads}": say it once')
    said = reads or asked.reads
    if asked.mode == "live":
        if said == "recorded":
            raise Unprocessable('reads: "recorded" applies to tools: "replay" (with "live" every tool runs for real)')
        return ToolPolicy(mode="live", reads="live")
    return ToolPolicy(mode="replay", reads=said or "recorded")


class ArmTool(msgspec.Struct, frozen=True, kw_only=True):
    """One thing an arm can do: a tool's `name` (`*`: every tool of a server no one could list), the MCP
    `server` it is on (null: not an MCP server's tool), and `why` it is in its class."""

    name: str
    why: str
    server: str | None = None


class ArmTools(msgspec.Struct, frozen=True, kw_only=True):
    """An arm's tools by class. `known`: kagent's agent table holds its configuration; `twin`: every MCP server
    of it is the replay endpoint (and it has nothing else that runs); `note`: what kagent-fork could not see."""

    agent_ref: str
    known: bool
    twin: bool
    asks: list[ArmTool]
    reads: list[ArmTool]
    acts: list[ArmTool]
    note: str | None = None


def _under(url: str, base: str) -> bool:
    return url == base or url.startswith((base + "/", base + "?"))


def is_replay_twin(config: AgentConfig | None, settings: Settings) -> bool:
    """An arm whose MCP servers (one at least) are all this service's replay endpoint (REPLAY_MCP_URL), with no
    local stdio servers, remote agents or code of its own to run: nothing it calls reaches a real tool unasked."""
    base = settings.replay_mcp_url
    if config is None or base is None:
        return False
    servers = [*(config.http_tools or []), *(config.sse_tools or [])]
    if not servers or config.stdio_tools or config.remote_agents or config.execute_code:
        return False
    return all(_under(s.params.url.rstrip("/"), base) for s in servers)


@dataclass(frozen=True, kw_only=True)
class Listed:
    """A server's answer to tools/list: each tool's name and readOnlyHint, or why there is none."""

    tools: list[tuple[str, bool | None]]
    error: str | None = None


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "it did not list its tools in time"
    return f"{type(exc).__name__}: {exc}"[:300]


async def list_tools(url: str, transport: Literal["http", "sse"], headers: dict[str, str], seconds: float) -> Listed:
    """The server's tools/list (every page), over streamable HTTP or SSE, within `seconds`."""
    import anyio

    # The service's one MCP client, loaded when a server is asked (a CLI read never loads the MCP SDK).
    from service.agents.replay import real_server

    try:
        with anyio.fail_after(seconds):
            listed = await real_server.list_tools(real_server.RealServer(url=url, transport=transport, headers=headers))
    except real_server.Unreachable as exc:  # a server that does not answer: its tools all act, with the reason
        return Listed(tools=[], error=_reason(exc.__cause__ or exc))
    except TimeoutError as exc:
        return Listed(tools=[], error=_reason(exc))
    return Listed(tools=[(t.name, t.annotations.readOnlyHint if t.annotations else None) for t in listed])


def server_headers(server: McpServerConfig, caller: Caller, authorization: str | None) -> dict[str, str]:
    """What the arm's runtime sends the server on the caller's turn: the config's own headers, and those of the
    caller's (its user id, its bearer token) that `allowed_headers` lets kagent-adk forward."""
    out = dict(server.params.headers or {})
    mine = {"x-user-id": caller.user_id, **({"authorization": authorization} if authorization else {})}
    for name in server.allowed_headers or []:
        if name.lower() in mine:
            out[name] = mine[name.lower()]
    return out


def _servers(config: AgentConfig) -> list[tuple[McpServerConfig, Literal["http", "sse"]]]:
    return [*((s, "http") for s in config.http_tools or []), *((s, "sse") for s in config.sse_tools or [])]


def _unlistable(config: AgentConfig) -> list[ArmTool]:
    """What the arm can do that no tools/list shows and no replay can stand in for."""
    out = [
        ArmTool(name=f"stdio: {' '.join([s.command, *(s.args or [])])}"[:200],
                why="a local MCP server its runtime starts as a process: no one outside can list or replay it")
        for s in config.stdio_tools or []
    ]  # fmt: skip
    out += [
        ArmTool(name=r.name or r.url, server=r.url or None,
                why="a remote agent it calls over A2A: that agent's own tools run for real")
        for r in config.remote_agents or []
    ]  # fmt: skip
    if config.execute_code:
        out.append(ArmTool(name="execute_code", why="the agent runs code its model writes"))
    return out


def arm_of(
    ref: str, row: AgentRow | None, listed: dict[tuple[str, str], Listed], settings: Settings,
    real: Mapping[str, str] | None = None,
) -> ArmTools:  # fmt: skip
    """One arm's tools by class, from its row and its servers' answers (`listed`, by (transport, url)); `real`, the
    address of the server a twin's replay endpoint stands in for (by the endpoint's URL), whose tools they are."""
    if row is None:
        return ArmTools(
            agent_ref=ref, known=False, twin=False, asks=[], reads=[], acts=[],
            note="kagent's agent table has no row for it (kagent's controller writes one for every agent it "
            "runs: this one is served from elsewhere, as the demo's scripted agent or a test's): kagent-fork "
            "cannot see its tools",
        )  # fmt: skip
    if row.config is None or row.type == "BYO":
        byo = f"a {row.type} agent: its tools are its own, kagent's configuration lists none"
        why = byo if row.type == "BYO" else row.config_error or byo
        return ArmTools(agent_ref=ref, known=False, twin=False, asks=[], reads=[], acts=[ArmTool(name="*", why=why)])
    config, word = row.config, trust.trust_of(settings)
    by: dict[ToolClass, list[ArmTool]] = {"asks": [], "reads": [], "acts": []}
    for server, transport in _servers(config):
        url, approval, allowed = server.params.url, server.require_approval or [], server.tools or None
        answer = listed[(transport, url)]
        if answer.error is not None:
            for name in allowed or ["*"]:
                by["acts"].append(ArmTool(name=name, server=url, why=f"the server did not answer: {answer.error}"))
            continue
        hints = dict(answer.tools)
        for name in allowed or list(hints):
            if name not in hints:  # what the server does not show cannot be known to only read
                why = "the configuration names it, but the server does not list it"
                by["asks" if name in approval else "acts"].append(ArmTool(name=name, server=url, why=why))
                continue
            where = (real or {}).get(url, url)  # a twin's tool is classed as on the server it stands in for
            cls, why = trust.classify(name, where, require_approval=approval, read_only_hint=hints[name], trust=word)
            why += " (the server the replay endpoint stands in for)" if where != url else ""
            by[cls].append(ArmTool(name=name, server=url, why=why))
    by["acts"] += _unlistable(config)
    ordered = {k: sorted(v, key=lambda t: (t.name, t.server or "")) for k, v in by.items()}
    return ArmTools(
        agent_ref=ref, known=True, twin=is_replay_twin(config, settings), asks=ordered["asks"],
        reads=ordered["reads"], acts=ordered["acts"],
    )  # fmt: skip


async def arms(
    svc: Services, caller: Caller, refs: Iterable[str], authorization: str | None = None
) -> dict[str, ArmTools]:
    """Every arm's tools by class: the configurations read on one pooled connection, released, then `classed`."""
    async with svc.connection() as conn:
        wanted = list(dict.fromkeys(refs))
        found = await svc.store.agents.get_many(conn, wanted)
    return await classed(svc, caller, {ref: found.get(ref) for ref in wanted}, authorization)


async def classed(
    svc: Services, caller: Caller, rows: dict[str, AgentRow | None], authorization: str | None = None
) -> dict[str, ArmTools]:
    """Every arm's tools by class, from its row (read and released before: no pooled connection
    is held while servers answer): every server asked at once (one several arms share with the same headers,
    once)."""
    check_not_holding("an MCP server's tools/list")
    timeout = min(LIST_TIMEOUT_SECONDS, float(svc.settings.whatif_timeout_seconds))
    behind = await _stood_in_for(svc, rows)
    asks: dict[tuple[str, str, str], tuple[str, Literal["http", "sse"], dict[str, str]]] = {}
    for row in rows.values():
        for server, transport in _servers(row.config) if row is not None and row.config is not None else []:
            # A twin's server (the replay endpoint lists nothing outside a running turn): the real one is asked.
            asked, how = behind.get(server.params.url, (server, transport))
            hdrs = server_headers(asked, caller, authorization)
            asks[(transport, server.params.url, repr(sorted(hdrs.items())))] = (asked.params.url, how, hdrs)
    answers = await asyncio.gather(*(list_tools(url, t, h, timeout) for url, t, h in asks.values()))
    listed: dict[tuple[str, str], Listed] = {}
    for key, answer in zip(asks, answers, strict=True):
        # Two arms reaching one server with different headers: the poorer answer stands for both (safe side).
        if key[:2] not in listed or answer.error is not None:
            listed[key[:2]] = answer
    real = {url: server.params.url for url, (server, _) in behind.items()}
    return {ref: arm_of(ref, row, listed, svc.settings, real) for ref, row in rows.items()}


async def _stood_in_for(
    svc: Services, rows: dict[str, AgentRow | None]
) -> dict[str, tuple[McpServerConfig, Literal["http", "sse"]]]:
    """The real server behind each replay-endpoint server of the arms (a twin's), by the endpoint's URL, as its
    source agent's configuration names it: a twin's tools are that server's, classed by the operator's word for
    it. An endpoint whose agent or server is unknown is absent (asked itself, it answers no one: its tools act)."""
    from service.agents.replay.lease import servers, twin_of  # the lease's module loads the A2A client

    base = svc.settings.replay_mcp_url
    urls = {
        server.params.url: found
        for row in rows.values() if row is not None and row.config is not None
        for server, _ in _servers(row.config)
        if base is not None and _under(server.params.url.rstrip("/"), base)
        and (found := twin_of(server.params.url)) is not None
    }  # fmt: skip
    if not urls:
        return {}
    async with svc.connection() as conn:
        sources = await svc.store.agents.get_many(conn, sorted({agent for agent, _ in urls.values()}))
    out = {}
    for url, (agent, key) in urls.items():
        source = sources.get(agent)
        real = servers(source.config).get(key) if source is not None and source.config is not None else None
        if real is not None:
            out[url] = real
    return out


async def arm_tools(svc: Services, caller: Caller, agent_ref: str, authorization: str | None = None) -> ArmTools:
    """One arm's tools by class (arms, for one)."""
    return (await arms(svc, caller, [agent_ref], authorization))[agent_ref]


def _named(tools: Sequence[ArmTool]) -> str:
    names = list(dict.fromkeys(t.name for t in tools))
    more = f" and {len(names) - _MORE_THAN} more" if len(names) > _MORE_THAN else ""
    return ", ".join(names[:_MORE_THAN]) + more


def judge_may_not_act(judge: ArmTools | None, policy: ToolPolicy | None) -> None:
    """A judge only reads the two continuations and answers, yet it is a kagent agent with whatever tools it has,
    run on the caller's behalf: unless `live` was said, one that could call a tool that acts without an approval
    (and is not a replay twin) is refused (422), naming it and the tools, before anything is written."""
    if judge is None or judge.twin or not judge.acts or (policy is not None and policy.mode == "live"):
        return
    raise Unprocessable(
        f"judge: the agent {judge.agent_ref} could call tools that act without an approval ({_named(judge.acts)}): "
        "nothing was started. Judge with an agent whose tools only read or ask for an approval (or that has none), "
        'or say tools: "live" when starting the experiment to let every tool run for real'
    )


def decide(asked: ToolPolicy | None, arms: Iterable[ArmTools], judge: ArmTools | None = None) -> ToolPolicy:
    """The policy a start runs with: `live` only when asked for; otherwise `replay`, refused (422) when an arm that
    is not a replay twin could call a tool that acts without an approval, or, under `reads: "recorded"` (the
    default), has any tool at all (only a twin's calls can be answered from the recording), or when its judge
    could act."""
    if asked is not None and asked.mode == "live":
        return asked
    policy = asked or ToolPolicy(mode="replay")
    judge_may_not_act(judge, policy)
    recorded = policy.reads == "recorded"
    risky = [(arm.agent_ref, [*arm.acts, *(arm.asks + arm.reads if recorded else [])]) for arm in arms if not arm.twin]
    risky = [(ref, tools) for ref, tools in risky if tools]
    if not risky:
        return policy
    agents = "; ".join(f"{ref} ({_named(tools)})" for ref, tools in risky)
    one = len(risky) == 1
    it, they = ("it", "it is") if one else ("them", "they are")
    if recorded:
        twins = ", ".join(f"kagent-fork replay-twin {ref}" for ref, _ in risky)
        raise Unprocessable(
            f"tools: {'the agent' if one else 'the agents'} {agents} {'has' if one else 'have'} tools, and {they} not "
            f'a replay twin: under reads: "recorded" (the default) only a twin\'s tool calls are answered from the '
            f"source's recording: nothing was started. Make the twin ({twins}, then name the twin as the agent), "
            f'or say reads: "live" to run {it} as {"it is" if one else "they are"}, its reads live on today\'s '
            'servers (a tool that acts is still refused; tools: "live" runs every tool for real)'
        )
    raise Unprocessable(
        f"tools: {'the agent' if one else 'the agents'} {agents} could call tools that act without an "
        f"approval, and {they} not a replay twin: nothing was started. Run "
        f"{it} on a replay twin (kagent-fork replay-twin NAMESPACE/NAME), or say "
        'tools: "live" to let every tool run for real'
    )
