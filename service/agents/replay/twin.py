"""The replay endpoint's decisions (docs/replay-twins.md): a replay twin's tool servers are kagent-fork's
`/replay/mcp/{namespace}/{name}/{server}`, each standing in for one MCP server of the agent namespace/name. It
answers only a caller whose replay turn holds that agent's lease (lease.py): that turn's call is answered

- refused, when the tool is outside the source agent's configured tools for that server (its `tools`);
- from the recording, when the source conversation made the same call (tool, canonical arguments) before or
  in the turn being replayed: the source's result exactly as its events hold it;
- refused, when the tool acts or asks for an approval: the arm's intent, nothing ran;
- missed, when it only reads and the branch keeps to the source's world (`reads: "recorded"`, the default): a
  tool error saying the source never made that call;
- live, from the real server as the caller, when it only reads and the branch said `reads: "live"`.

Every answered call is kept with its branch and turn (`replay_call`). No answer names the real server's address:
the endpoint is reachable by whoever reaches kagent-fork, the address is the operator's."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import msgspec
from mcp.types import CallToolResult, TextContent, Tool

from service.agents.replay import real_server, trust
from service.agents.replay.lease import servers
from service.agents.replay.recordings import canonical, recorded
from service.agents.replay.tools import ToolPolicy
from service.agents.replay.trust import ToolClass
from service.errors import Forbidden, NotFound, ServiceError
from service.kagent.store.replay import Holder
from service.services import Services

AnsweredFrom = Literal["recorded", "live", "missed", "refused"]
log = logging.getLogger("kagent_fork")


@dataclass(frozen=True, kw_only=True)
class Incoming:
    """A request to the endpoint: the agent and server it stands in for, the caller, the headers the twin forwarded
    (lower-case names)."""

    agent: str
    server: str
    user_id: str
    headers: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class Target:
    """The real server behind an endpoint, and what the agent's config says of its tools."""

    server: real_server.RealServer
    require_approval: frozenset[str]
    allowed: frozenset[str] | None  # the config's `tools` for that server (None: every tool it lists)
    key: str


async def target(svc: Services, incoming: Incoming) -> Target:
    """The real server an endpoint stands in for, as the agent's config in kagent's table names it (404 when the
    agent or the server is unknown), with the headers the real agent would send it: the server's own and the
    caller's it allows."""
    async with svc.connection() as conn:
        row = await svc.store.agents.get(conn, incoming.agent)
    if row is None or row.config is None:
        raise NotFound(f"agent {incoming.agent} not found in kagent's agent table (or it holds no config)")
    found = servers(row.config).get(incoming.server)
    if found is None:
        raise NotFound(
            f"agent {incoming.agent} has no MCP server {incoming.server} (print the twin again: "
            "kagent-fork replay-twin)"
        )
    config, transport = found
    allowed = {h.lower() for h in config.allowed_headers or []}
    headers = {k: v for k, v in incoming.headers.items() if k in allowed}
    headers.update(config.params.headers or {})
    return Target(
        server=real_server.RealServer(url=config.params.url, transport=transport, headers=headers),
        require_approval=frozenset(config.require_approval or []),
        allowed=frozenset(config.tools) if config.tools else None, key=incoming.server,
    )  # fmt: skip


def classify(tool: str, target: Target, listed: list[Tool], word: trust.Trust) -> ToolClass:
    """The tool's class as the start classes an arm's tools (trust.classify): what the source agent's config and
    the real server's tools/list say of it; a tool the server did not list acts (or asks, if approval is asked)."""
    spec = next((t for t in listed if t.name == tool), None)
    if spec is None:
        return "asks" if tool in target.require_approval else "acts"
    hint = spec.annotations.readOnlyHint if spec.annotations is not None else None
    cls, _ = trust.classify(
        tool, target.server.url, require_approval=sorted(target.require_approval), read_only_hint=hint, trust=word
    )
    return cls


class Unanswered(ServiceError):
    """The real server did not answer; why is in the log, never in the answer (it would name its address)."""

    status = 502


async def real_tools(where: Target) -> list[Tool]:
    """The real server's tools the source agent may call (its config's `tools`), as the twin must see them."""
    try:
        listed = await real_server.list_tools(where.server)
    except real_server.Unreachable as exc:
        log.warning("replay endpoint: server %s: %s", where.key, exc)
        raise Unanswered(
            f"the real MCP server {where.key} stands in for did not list its tools (kagent-fork's log says why)"
        ) from None
    return [t for t in listed if where.allowed is None or t.name in where.allowed]


async def list_for(svc: Services, incoming: Incoming) -> list[Tool]:
    """tools/list: the real server's tools, only for a caller whose replay turn on that agent is running (403
    otherwise: no one lists an agent's servers through kagent-fork who is not replaying it)."""
    if await holder_of(svc, incoming) is None:  # first: whoever is not replaying learns nothing of the agent
        raise Forbidden(_no_turn(incoming))
    return await real_tools(await target(svc, incoming))


def _no_turn(incoming: Incoming) -> str:
    return (
        f"no branch of a replay is running a turn on {incoming.agent} for {incoming.user_id}: a replay twin's "
        "tools are listed and answered only during the turns kagent-fork replays"
    )


def refusal(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], isError=True)


def recorded_result(response: object) -> CallToolResult:
    """The source's recorded result as the tool answered it (ADK keeps an MCP tool's CallToolResult as the
    function response); any other shape as its JSON text, and an object also as its structured content (the MCP
    SDK refuses an answer without one for a tool that declares an output schema, as FastMCP's tools do)."""
    if isinstance(response, dict):
        try:
            return CallToolResult.model_validate(response)
        except ValueError:
            pass
    return CallToolResult(
        content=[TextContent(type="text", text=msgspec.json.encode(response).decode())],
        structuredContent=response if isinstance(response, dict) else None,
    )


@dataclass(frozen=True, kw_only=True)
class Answered:
    result: CallToolResult
    answered_from: AnsweredFrom
    tool_class: ToolClass


async def holder_of(svc: Services, incoming: Incoming) -> Holder | None:
    async with svc.connection() as conn:
        return await svc.store.replay.lease_holder(conn, incoming.agent, incoming.user_id)


_policy = msgspec.json.Decoder(ToolPolicy)


async def call(svc: Services, incoming: Incoming, tool: str, arguments: dict[str, object]) -> CallToolResult:
    """Answer one call of a twin (see the module's text), kept with its branch and turn. Reads run live only when
    the branch's policy says `reads: "live"`."""
    holder = await holder_of(svc, incoming)
    if holder is None:  # not kept: no branch asked; first, so that whoever is not replaying learns nothing more
        return refusal(f"not run: {tool} was called through kagent-fork's replay endpoint, but {_no_turn(incoming)}")
    where = await target(svc, incoming)
    async with svc.connection() as conn:
        job = await svc.store.jobs.whatif_job(conn, holder.job_id, incoming.user_id)
        rows = await svc.store.jobs.whatif_turns(conn, holder.job_id) if job is not None else []
        key = next((r.invocation_id for r in rows if r.ordinal == holder.ordinal), None)
        recordings = (
            await recorded(svc, conn, job.parent_session_id, job.parent_user_id, key)
            if job is not None and key is not None
            else {}
        )
    policy = _policy.decode(job.tool_policy) if job is not None and job.tool_policy else None
    reads = policy.reads if policy is not None else "recorded"  # no policy kept: the safe side
    answered = await _answer(where, tool, arguments, recordings, reads, trust.trust_of(svc.settings))
    async with svc.connection() as conn:
        await svc.store.replay.insert_call(
            conn, holder, twin=incoming.agent, server=incoming.server, tool=tool, arguments=canonical(arguments),
            tool_class=answered.tool_class, answered_from=answered.answered_from,
        )  # fmt: skip
    return answered.result


_REPLAY = "not run: this is a replay of a recorded conversation (kagent-fork), and {tool} with these arguments {why}"


async def _answer(
    where: Target, tool: str, arguments: dict[str, object], recordings: dict[tuple[str, str], object], reads: str,
    word: trust.Trust,
) -> Answered:  # fmt: skip
    if where.allowed is not None and tool not in where.allowed:  # the source agent could never have called it
        why = (
            "was not run: it is not among the source agent's configured tools. The call is kept as the agent's intent."
        )
        return Answered(result=refusal(_REPLAY.format(tool=tool, why=why)), answered_from="refused", tool_class="acts")
    try:
        listed = await real_server.list_tools(where.server)
    except real_server.Unreachable as exc:  # unlisted: every tool acts, and the reason is logged, not answered
        log.warning("replay endpoint: server %s: %s", where.key, exc)
        listed = []
    tool_class = classify(tool, where, listed, word)
    if (tool, canonical(arguments)) in recordings:
        return Answered(
            result=recorded_result(recordings[(tool, canonical(arguments))]), answered_from="recorded",
            tool_class=tool_class,
        )  # fmt: skip
    if tool_class != "reads":
        why = (
            f"was not run: it is not a read-only tool ({tool_class}) and the source conversation made no such call. "
            "The call is kept as the agent's intent."
        )
        return Answered(
            result=refusal(_REPLAY.format(tool=tool, why=why)), answered_from="refused", tool_class=tool_class
        )
    if reads != "live":
        why = (
            "is not in the source's recording: the source conversation never made this call, and this replay "
            'answers only what the source saw (reads: "recorded"). Nothing was run.'
        )
        return Answered(
            result=refusal(_REPLAY.format(tool=tool, why=why)), answered_from="missed", tool_class=tool_class
        )
    try:
        result = await real_server.call_tool(where.server, tool, arguments)
    except real_server.Unreachable as exc:  # kept as refused: the arm asked, and nothing ran
        log.warning("replay endpoint: server %s: %s", where.key, exc)
        text = (
            f"not run: the real MCP server {where.key} stands in for did not answer {tool} (kagent-fork's log says why)"
        )
        return Answered(result=refusal(text), answered_from="refused", tool_class=tool_class)
    return Answered(result=result, answered_from="live", tool_class=tool_class)
