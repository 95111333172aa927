"""The replay endpoint's decisions (docs/replay-twins.md): a replay twin's tool servers are kagent-fork's
`/replay/mcp/{namespace}/{name}/{server}`, each standing in for one MCP server of the agent namespace/name. A
call is the turn's that holds that agent's lease for the caller (lease.py), and is answered

- from the recording, when the source conversation made the same call (tool, canonical arguments) before or
  in the turn being replayed: the source's result exactly as its events hold it;
- live, from the real server as the caller, when the tool only reads and the branch's policy lets reads run
  (`reads: "live"`);
- with a tool error saying it was not run, otherwise: the arm's intent.

Every answered call is kept with its branch and turn (`replay_call`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec
from mcp.types import CallToolResult, TextContent, Tool

from service.agents.replay import real_server, tools
from service.agents.replay.lease import servers
from service.agents.replay.recordings import canonical, recorded
from service.agents.replay.tools import ToolClass, ToolPolicy
from service.errors import NotFound
from service.kagent.store.replay import Holder
from service.services import Services

AnsweredFrom = Literal["recorded", "live", "refused"]


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
        require_approval=frozenset(config.require_approval or []), key=incoming.server,
    )  # fmt: skip


def classify(tool: str, target: Target, listed: list[Tool], read_only_names: frozenset[str]) -> ToolClass:
    """The tool's class as the start classes an arm's tools (tools.classify): what the source agent's config and
    the real server's tools/list say of it; a tool the server did not list acts."""
    spec = next((t for t in listed if t.name == tool), None)
    if spec is None:
        return "asks" if tool in target.require_approval else "acts"
    hint = spec.annotations.readOnlyHint if spec.annotations is not None else None
    return tools.classify(
        tool, require_approval=sorted(target.require_approval), read_only_hint=hint, read_only_names=read_only_names
    )


def refusal(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], isError=True)


def recorded_result(response: object) -> CallToolResult:
    """The source's recorded result as the tool answered it (ADK keeps an MCP tool's CallToolResult as the
    function response); any other shape as its JSON text."""
    if isinstance(response, dict):
        try:
            return CallToolResult.model_validate(response)
        except ValueError:
            pass
    return CallToolResult(content=[TextContent(type="text", text=msgspec.json.encode(response).decode())])


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
    """Answer one call of a twin (see the module's text), kept with its branch and turn. Reads run live unless the
    branch's policy says `reads: "recorded"` (a job written before policies were kept: live)."""
    where = await target(svc, incoming)
    holder = await holder_of(svc, incoming)
    if holder is None:
        return refusal(
            f"not run: {tool} was called through kagent-fork's replay endpoint for {incoming.agent}, but no branch "
            f"of a replay is running a turn on it for {incoming.user_id}: a replay twin's tools answer only the "
            "turns kagent-fork replays"
        )
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
    reads = policy.reads if policy is not None else "live"
    answered = await _answer(where, tool, arguments, recordings, reads, tools.read_only_names(svc.settings))
    async with svc.connection() as conn:
        await svc.store.replay.insert_call(
            conn, holder, twin=incoming.agent, server=incoming.server, tool=tool, arguments=canonical(arguments),
            tool_class=answered.tool_class, answered_from=answered.answered_from,
        )  # fmt: skip
    return answered.result


async def _answer(
    where: Target, tool: str, arguments: dict[str, object], recordings: dict[tuple[str, str], object], reads: str,
    read_only_names: frozenset[str],
) -> Answered:  # fmt: skip
    try:
        listed = await real_server.list_tools(where.server)
    except real_server.Unreachable:
        listed = []
    tool_class = classify(tool, where, listed, read_only_names)
    if (tool, canonical(arguments)) in recordings:
        return Answered(
            result=recorded_result(recordings[(tool, canonical(arguments))]), answered_from="recorded",
            tool_class=tool_class,
        )  # fmt: skip
    if tool_class == "reads" and reads == "live":
        try:
            result = await real_server.call_tool(where.server, tool, arguments)
        except real_server.Unreachable as exc:  # kept as refused: the arm asked, and nothing ran
            return Answered(result=refusal(f"not run: {exc}"), answered_from="refused", tool_class=tool_class)
        return Answered(result=result, answered_from="live", tool_class=tool_class)
    why = (
        "it only reads, but this replay answers only from the source's recording (reads: recorded) and the "
        "source made no such call"
        if tool_class == "reads"
        else f"it is not a read-only tool ({tool_class}) and the source conversation made no such call"
    )
    return Answered(
        result=refusal(
            f"not run: this is a replay of a recorded conversation (kagent-fork), and {tool} with these arguments "
            f"was not run because {why}. The call is kept as the agent's intent."
        ),
        answered_from="refused", tool_class=tool_class,
    )  # fmt: skip
