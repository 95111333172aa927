"""The service's operations as MCP tools, for kagent agents (a RemoteMCPServer pointing at /mcp).

Each tool is a thin wrapper over the operation its HTTP call runs, as the caller the request's headers
name (the same identity rules as every HTTP call: kagent forwards a user's headers to an agent's MCP
calls only for the headers its tool entry allows). A tool answers its result as JSON text (the HTTP
answer's `data`); a refusal is a tool error whose text is the HTTP error's message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar

import msgspec
import pydantic
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, ContentBlock, TextContent
from pydantic import Field, SkipValidation, Strict

from service import __version__ as service_version
from service.agents import discard, experiments, whatif
from service.agents.suites import ledger, report, runs, saved
from service.agents.suites.cases import CaseSpec
from service.branches import compare, lineage, transcript, turns
from service.doors import explorer
from service.doors.mcp_hints import hints
from service.errors import BadRequest, ServiceError
from service.identity import Caller, resolve_caller, scope_headers
from service.kagent.store.base import CONNECTION_ERRORS
from service.operations import forking, rewind
from service.schemas import ForkRequest, RewindRequest, checked_id
from service.services import Services

_encoder = msgspec.json.Encoder()
log = logging.getLogger("kagent_fork")
Operation = Callable[[Services, Caller], Awaitable[object]]


R = TypeVar("R", ForkRequest, RewindRequest)


def _request(kind: type[R], **fields: object) -> R:
    """A tool's arguments as the HTTP body would carry them, checked by the same rules (lengths, NUL)."""
    return msgspec.convert({k: v for k, v in fields.items() if v is not None}, kind)


def _judge(agent: object, criteria: object) -> dict[str, object] | None:
    """judge_agent and judge_criteria as the body's `judge`: criteria without an agent reach the body's check
    (a judge names its agent), as the HTTP body's would, instead of being dropped."""
    judge = {k: v for k, v in (("agent", agent), ("criteria", criteria)) if v is not None}
    return judge or None


def _text(text: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], isError=error)


# An argument that goes into a request body is checked by the body's own type (msgspec, strict, as the HTTP
# door checks it), not first by the SDK's pydantic in its lax mode, which would pass `true` as 1 and "yes" as
# true before the body saw them: one set of checks for every door. Its JSON schema (what an agent reads) stays.
BODY: Any = SkipValidation
# An argument that is not a body's is checked by pydantic, strictly: a bool is no number (as `?limit=true`).
STRICT = Strict()

# Every argument, described (an agent reads these to call the tool).
SessionId = Annotated[str, Field(description="A kagent session id (the conversation), as kagent's UI and API name it.")]
InvocationId = Annotated[
    str | None,
    BODY,
    Field(
        description="A turn, named by its invocation id (list_turns answers them: `invocation_id`); "
        "or name it by rewind_before_task_id instead."
    ),
]
TaskId = Annotated[
    str | None,
    BODY,
    Field(
        description="The same turn named by its task id (list_turns: `task_id`), for agents that write no "
        "invocation id (LangGraph, OpenAI Agents SDK, CrewAI, Claude); not with rewind_before_invocation_id."
    ),
]
JobId = Annotated[str, Field(description="A what-if job id (start_whatif answers it: `job.id`).")]
DryRun = Annotated[bool, BODY, Field(description="true: answer what would happen, write nothing.")]
ToolsArg = Annotated[
    Literal["replay", "live"] | None,
    BODY,
    Field(
        description='What the agents\' tools do: "replay" (default: nothing that acts runs; an agent with tools '
        'that is not a replay twin is refused) or "live" (every tool runs for real; only when meant).'
    ),
]
ReadsArg = Annotated[
    Literal["live", "recorded"] | None,
    BODY,
    Field(
        description='With "replay": a call the source never made answers so ("recorded", default: the source\'s '
        'world only) or, when it only reads, runs "live".'
    ),
]
DryRunReplay = Annotated[
    bool,
    BODY,
    Field(description="true: answer each agent's tools by class and the refusal it would get; start nothing."),
]


def worded(exc: pydantic.ValidationError) -> str:
    """A tool's arguments refused by the SDK's check (pydantic), in words: which argument and what it
    must be, without pydantic's own layout or its link."""
    problems = []
    for error in exc.errors(include_url=False):
        name = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "missing":
            problems.append(f"{name} is required")
        else:
            message = error["msg"].replace("Input should be", "must be").replace("Value error, ", "")
            problems.append(f"{name} {message[0].lower()}{message[1:]} (got {error.get('input')!r:.60})")
    return "invalid arguments: " + "; ".join(problems)


class _Server(FastMCP):
    """FastMCP that knows the app's what-if runner (set once the app is made), for its tools to find,
    and answers arguments its check refuses in words."""

    runner: Callable[[], whatif.Runner]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Sequence[ContentBlock] | dict[str, Any]:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            # The same rule as the HTTP bodies: an argument the tool does not take is refused, not ignored.
            unknown = sorted(set(arguments) - set(tool.parameters.get("properties", {})))
            if unknown:
                raise ToolError(f"invalid arguments: unknown argument {', '.join(map(repr, unknown))}")
        try:
            return await super().call_tool(name, arguments)
        except ToolError as exc:
            if isinstance(exc.__cause__, pydantic.ValidationError):
                raise ToolError(worded(exc.__cause__)) from None
            if exc.__cause__ is not None:
                # An unexpected failure: its text (a database DETAIL, a parser's message) is for the log, as the
                # HTTP door says "internal error".
                log.error("tool %s failed", name, exc_info=exc.__cause__)
                raise ToolError("internal error") from None
            raise


def runner_of(ctx: Context[Any, Any, Any]) -> Callable[[], whatif.Runner]:
    """The app's what-if runner (and through it the app's services), for a tool of this server."""
    server = ctx.fastmcp
    assert isinstance(server, _Server)
    return server.runner


async def answer(
    svc: Services, caller: Callable[[], Caller], operation: Operation, *, raw: bool = False
) -> CallToolResult:
    """Run one operation as the caller and answer it as a tool result: a refusal is a tool error whose
    text is the HTTP error's message (shared by the tools and the apps' tools)."""
    try:
        result = await operation(svc, caller())
    except ServiceError as exc:
        return _text(exc.message, error=True)
    except msgspec.ValidationError as exc:
        return _text(f"invalid arguments: {exc}", error=True)
    except CONNECTION_ERRORS:
        await svc.pool.expire_connections()
        return _text("database unavailable, try again later", error=True)
    if raw:
        assert isinstance(result, str)
        return _text(result)
    return _text(_encoder.encode(result).decode())


async def _run(ctx: Context[Any, Any, Any], operation: Operation, *, raw: bool = False) -> CallToolResult:
    request = ctx.request_context.request
    if request is None:
        return _text("this tool needs an HTTP request (identity comes from its headers)", error=True)
    svc = runner_of(ctx)().svc

    def caller() -> Caller:
        query = {name: request.query_params.getlist(name) for name in request.query_params}
        return resolve_caller(svc.settings, scope_headers(request.scope), query)

    return await answer(svc, caller, operation, raw=raw)


async def list_turns(
    ctx: Context[Any, Any, Any],
    session_id: SessionId,
    limit: Annotated[int, STRICT, Field(description="At most this many turns (1 to 1,000).")] = 100,
    after: Annotated[
        str | None,
        Field(
            description="The turns after this one (the next page): its invocation id, or its task id if it has none."
        ),
    ] = None,
) -> CallToolResult:
    """The turns of a session, in order (invocation id, task, state, user text): pick one to fork,
    rewind or regenerate."""

    async def op(svc: Services, caller: Caller) -> object:
        after_id = checked_id(after, "after") if after is not None else None
        page = await turns.invocations(svc, caller, checked_id(session_id), limit=limit, after=after_id)
        return {"turns": page.items, "last_page": page.last}

    return await _run(ctx, op)


async def show_transcript(
    ctx: Context[Any, Any, Any],
    session_id: SessionId,
    before: Annotated[
        str | None, Field(description="Only the turns before this invocation id (what a fork there would hold).")
    ] = None,
    before_task: Annotated[
        str | None, Field(description="Only the turns before the one this task id names (not with `before`).")
    ] = None,
    format: Annotated[
        Literal["markdown", "json"], Field(description="markdown: a readable document; json: the data.")
    ] = "markdown",
) -> CallToolResult:
    """A session's conversation as the agent sees it, turn by turn; `before`: only the turns before
    that invocation (what a fork there would hold)."""

    async def op(svc: Services, caller: Caller) -> object:
        sid, until = checked_id(session_id), checked_id(before, "before") if before is not None else None
        until_task = checked_id(before_task, "before_task") if before_task is not None else None
        if format == "json":
            return await transcript.read(svc, caller, sid, before=until, before_task=until_task)
        async with transcript.reading(svc, caller, sid, before=until, before_task=until_task) as r:
            return b"".join([chunk async for chunk in transcript.markdown_chunks(r)]).decode()

    return await _run(ctx, op, raw=format == "markdown")


async def fork_session(
    ctx: Context[Any, Any, Any],
    session_id: SessionId,
    rewind_before_invocation_id: Annotated[
        str | None,
        BODY,
        Field(description="The first turn NOT copied (its invocation id); none: the whole conversation."),
    ] = None,
    rewind_before_task_id: TaskId = None,
    name: Annotated[
        str | None, BODY, Field(description="The new session's name (default: Fork of <source name>).")
    ] = None,
    if_boundary_missing: Annotated[
        Literal["copy_all", "error"],
        BODY,
        Field(description="A turn id that names no turn: error (refuse) or copy_all (copy the whole chat)."),
    ] = "error",
    task_layout: Annotated[
        Literal["auto", "merged", "per_task"],
        BODY,
        Field(description="How the fork's tasks are laid out; auto shows the same conversation in kagent's UI."),
    ] = "auto",
    dry_run: DryRun = False,
) -> CallToolResult:
    """Fork chat from here: a new session holding the conversation before the turn
    `rewind_before_invocation_id` (none: all of it). The source is not changed. `dry_run` answers the
    plan."""

    async def op(svc: Services, caller: Caller) -> object:
        req = _request(
            ForkRequest, rewind_before_invocation_id=rewind_before_invocation_id,
            rewind_before_task_id=rewind_before_task_id, name=name, if_boundary_missing=if_boundary_missing,
            task_layout=task_layout, dry_run=dry_run,
        )  # fmt: skip
        return (await forking.fork(svc, caller, checked_id(session_id), req)).data

    return await _run(ctx, op)


async def rewind_session(
    ctx: Context[Any, Any, Any],
    session_id: SessionId,
    rewind_before_invocation_id: Annotated[
        str | None,
        BODY,
        Field(description="The first turn hidden (its invocation id): it and every later turn are hidden."),
    ] = None,
    rewind_before_task_id: TaskId = None,
    dry_run: DryRun = False,
    force: Annotated[bool, BODY, Field(description="Even while the agent is still running a hidden turn.")] = False,
) -> CallToolResult:
    """Rewind to here: the session loses the turn `rewind_before_invocation_id` and everything after
    it (nothing is erased; undo_rewind brings it back). `dry_run` answers what it would hide."""

    async def op(svc: Services, caller: Caller) -> object:
        req = _request(
            RewindRequest, rewind_before_invocation_id=rewind_before_invocation_id,
            rewind_before_task_id=rewind_before_task_id, dry_run=dry_run, force=force,
        )  # fmt: skip
        return await rewind.rewind(svc, caller, checked_id(session_id), req)

    return await _run(ctx, op)


async def undo_rewind(
    ctx: Context[Any, Any, Any],
    session_id: SessionId,
    rewind_id: Annotated[str, Field(description="The rewind's id (rewind_session or list_rewinds answers it).")],
) -> CallToolResult:
    """Undo a rewind of a session (its id is in rewind_session's answer, and in list_rewinds)."""

    async def op(svc: Services, caller: Caller) -> object:
        return await rewind.undo(svc, caller, checked_id(session_id), checked_id(rewind_id, "rewind id"))

    return await _run(ctx, op)


async def compare_sessions(
    ctx: Context[Any, Any, Any],
    session_id: SessionId,
    other_session_id: Annotated[str, Field(description="The other session (e.g. a fork of the first).")],
) -> CallToolResult:
    """Two sessions side by side (a source and its fork, or two forks): their common turns, each one's
    totals after them (duration summed over turns, as an experiment's), and the turns after them lined up
    (`aligned`: each side's question, answer, tool calls, tokens and duration at each position, so a
    regenerated turn sits next to the one it replaces)."""

    async def op(svc: Services, caller: Caller) -> object:
        return await compare.compare(svc, caller, checked_id(session_id), checked_id(other_session_id))

    return await _run(ctx, op)


async def start_whatif(
    ctx: Context[Any, Any, Any],
    session_id: SessionId,
    rewind_before_invocation_id: Annotated[
        str | None, BODY, Field(description="The turn to regenerate (its invocation id).")
    ] = None,
    rewind_before_task_id: TaskId = None,
    agent_ref: Annotated[
        str | None, BODY, Field(description="namespace/name of the agent that answers (default: the session's own).")
    ] = None,
    name: Annotated[
        str | None, BODY, Field(description="The fork's name (default: What-if: <agent> answers turn <n> of ...).")
    ] = None,
    max_context_tokens: Annotated[
        int | None, BODY, Field(description="Refuse when the turn's context is over this many tokens (a cost gate).")
    ] = None,
    turns: Annotated[
        int | str | None,
        BODY,
        Field(description='How many of the session\'s turns to re-ask from that one on (default 1), or "all".'),
    ] = None,
    message_text: Annotated[
        str | None, BODY, Field(description="Ask the first re-asked turn with this text instead of the user's own.")
    ] = None,
    tools: ToolsArg = None,
    reads: ReadsArg = None,
    dry_run: DryRunReplay = False,
    judge_agent: Annotated[
        str | None,
        BODY,
        Field(
            description='A kagent agent ("namespace/name") to judge the what-if blind against the source once it ends.'
        ),
    ] = None,
    judge_criteria: Annotated[
        str | None, BODY, Field(description="What the judge should weigh, beyond the default (with judge_agent).")
    ] = None,
) -> CallToolResult:
    """What-if: fork the session before the turn `rewind_before_invocation_id` into the agent `agent_ref`
    (namespace/name; default: the session's own) and send that turn's user message to it over A2A (`turns`:
    the later ones too; `message_text`: the first one asked differently), as POST .../whatif does. `tools`:
    "replay" (the default: nothing that acts runs, and only the source's recorded results answer; an agent
    with tools that is not a replay twin is refused, naming the twin to make) or "live" (every tool runs for
    real). `dry_run`
    answers the agent's tools by class and the refusal it would get, nothing started. `judge_agent`: a kagent
    agent that then judges the what-if's continuation against the source's blind, both orders asked (its calls
    are counted in the limit; the job reads "judging" meanwhile, then holds `judgment` and `verdict`). Answers
    the job (follow it with whatif_status) and the fork."""

    async def op(svc: Services, caller: Caller) -> object:
        fields = {"rewind_before_invocation_id": rewind_before_invocation_id,
                  "rewind_before_task_id": rewind_before_task_id, "agent_ref": agent_ref, "name": name,
                  "max_context_tokens": max_context_tokens, "turns": turns,
                  "message": {"text": message_text} if message_text is not None else None,
                  "tools": tools, "reads": reads, "dry_run": dry_run,
                  "judge": _judge(judge_agent, judge_criteria)}  # fmt: skip
        req = msgspec.convert({k: v for k, v in fields.items() if v is not None}, whatif.WhatifRequest)
        started, _ = await whatif.start(svc, runner_of(ctx)(), caller, checked_id(session_id), req)
        return started

    return await _run(ctx, op)


async def whatif_status(ctx: Context[Any, Any, Any], job_id: JobId) -> CallToolResult:
    """A what-if job: running, judging (its judge runs), completed, failed or cancelled, and what the agent
    answered (with a judge: its `judgment` and `verdict`)."""

    async def op(svc: Services, caller: Caller) -> object:
        return await whatif.get(svc, caller, checked_id(job_id, "job id"))

    return await _run(ctx, op)


async def cancel_whatif(ctx: Context[Any, Any, Any], job_id: JobId) -> CallToolResult:
    """Cancel a running what-if (or its judging): its agent (its judge) is asked to cancel the task; the fork
    stays."""

    async def op(svc: Services, caller: Caller) -> object:
        return await whatif.cancel(svc, caller, checked_id(job_id, "job id"))

    return await _run(ctx, op)


async def start_experiment(
    ctx: Context[Any, Any, Any],
    session_id: SessionId,
    rewind_before_invocation_id: InvocationId = None,
    rewind_before_task_id: TaskId = None,
    agents: Annotated[
        list[str] | None,
        BODY,
        Field(description='1 to 8 distinct agents, each "namespace/name" (default: the session\'s own agent).'),
    ] = None,
    turns: Annotated[
        int | str, BODY, Field(description='How many of the session\'s turns to replay from that one on, or "all".')
    ] = 1,
    message_text: Annotated[
        str | None, BODY, Field(description="Ask the first replayed turn with this text instead of the user's own.")
    ] = None,
    repeats: Annotated[int, BODY, Field(description="Branches per agent, 1 to 5 (agents x repeats at most 8).")] = 1,
    on_approval: Annotated[
        Literal["stop", "reject"],
        BODY,
        Field(description='When an agent asks to approve a tool: "stop" the branch there, or "reject" the tool.'),
    ] = "stop",
    name: Annotated[
        str | None, BODY, Field(description="The branches' forks' name (default: agent, turn, repeat).")
    ] = None,
    max_context_tokens: Annotated[
        int | None,
        BODY,
        Field(description="Refuse when every branch's turns' contexts add up to more (default 200,000)."),
    ] = None,
    tools: ToolsArg = None,
    reads: ReadsArg = None,
    dry_run: DryRunReplay = False,
    judge_agent: Annotated[
        str | None,
        BODY,
        Field(description='A kagent agent ("namespace/name") to judge the branches blind once they end.'),
    ] = None,
    judge_criteria: Annotated[
        str | None, BODY, Field(description="What the judge should weigh, beyond the default (with judge_agent).")
    ] = None,
    max_usd: Annotated[
        float | None,
        BODY,
        Field(description="Refuse when the estimated price in US dollars (the judge's calls too) is over this."),
    ] = None,
    control: Annotated[
        bool,
        BODY,
        Field(description="Add the source's own agent as an arm: its verdict against the source is the noise floor."),
    ] = False,
) -> CallToolResult:
    """Experiment: replay the conversation from the turn `rewind_before_invocation_id` (or, for an agent that
    writes no invocation id, `rewind_before_task_id`) on several agents at once and compare them with the
    source, turn by turn. Each of `agents` (1 to 8 "namespace/name", default:
    the session's own agent) gets a fork before that turn, then is asked the session's later user questions
    in order: `turns` of them (a number, or "all"). `message_text` asks the first question differently.
    `repeats` (1-5) runs each agent that many times, to tell an agent's difference from chance.
    `on_approval`: "stop" ends a branch when its agent asks to approve a tool; "reject" refuses the tool as
    kagent's Reject button does and goes on (nothing is ever approved). `tools`: "replay" (the default:
    nothing that acts runs, and only the source's recorded results answer; an agent with tools that is not a
    replay twin is refused, naming the twin to make) or "live" (every tool runs for real). Every turn costs model tokens
    (the call is refused over `max_context_tokens`). `dry_run` answers each agent's tools by class and the
    refusal it would get, nothing started. `judge_agent`: a kagent agent that then judges each branch against
    the source blind, both orders asked (its calls are counted in the limit). Answers the experiment at once
    (status "running"); follow it with
    experiment_status."""

    async def op(svc: Services, caller: Caller) -> object:
        fields = {"rewind_before_invocation_id": rewind_before_invocation_id,
                  "rewind_before_task_id": rewind_before_task_id, "agents": agents, "turns": turns,
                  "message": {"text": message_text} if message_text is not None else None, "repeats": repeats,
                  "on_approval": on_approval, "name": name, "max_context_tokens": max_context_tokens,
                  "max_usd": max_usd, "tools": tools, "reads": reads, "dry_run": dry_run,
                  "control": control, "judge": _judge(judge_agent, judge_criteria)}  # fmt: skip
        req = msgspec.convert({k: v for k, v in fields.items() if v is not None}, experiments.ExperimentRequest)
        started, _ = await experiments.start(svc, runner_of(ctx)(), caller, checked_id(session_id), req)
        return started

    return await _run(ctx, op)


async def list_whatifs(ctx: Context[Any, Any, Any], session_id: SessionId) -> CallToolResult:
    """The what-ifs started from a session, newest first, with their status and answers."""

    async def op(svc: Services, caller: Caller) -> object:
        return await whatif.of_session(svc, caller, checked_id(session_id))

    return await _run(ctx, op)


async def list_rewinds(ctx: Context[Any, Any, Any], session_id: SessionId) -> CallToolResult:
    """A session's rewinds, newest first: each one's id (for undo_rewind), what it hid, and whether it
    can be undone now."""

    async def op(svc: Services, caller: Caller) -> object:
        return await rewind.rewinds(svc, caller, checked_id(session_id))

    return await _run(ctx, op)


async def fork_tree(ctx: Context[Any, Any, Any], session_id: SessionId) -> CallToolResult:
    """The fork tree that holds a session, from its highest ancestor: each session's agent, its turns and
    events now, and for a fork the turn it was made at."""

    async def op(svc: Services, caller: Caller) -> object:
        return await lineage.tree(svc, caller, checked_id(session_id))

    return await _run(ctx, op)


async def list_sessions(
    ctx: Context[Any, Any, Any],
    agent_id: Annotated[
        str | None, Field(description="Only this agent's sessions (kagent's agent_id, e.g. kagent__NS__k8s_agent).")
    ] = None,
    limit: Annotated[int, STRICT, Field(description="At most this many sessions (1 to 500), newest first.")] = 50,
) -> CallToolResult:
    """The caller's sessions, newest first: their ids, names and agents."""

    async def op(svc: Services, caller: Caller) -> object:
        agent = checked_id(agent_id, "agent_id") if agent_id is not None else None
        return await explorer.sessions(svc, caller, agent_id=agent, limit=limit)

    return await _run(ctx, op)


async def experiment_status(
    ctx: Context[Any, Any, Any],
    experiment_id: Annotated[
        str, Field(description="An experiment id (start_experiment answers it: `experiment.id`).")
    ],
    format: Annotated[
        Literal["json", "markdown"], Field(description='"json": the data; "markdown": a table to show a person.')
    ] = "json",
) -> CallToolResult:
    """An experiment started with start_experiment: its status (running until every branch ended, then
    judging while its judge runs) and the grid: the source's own turns and, for each agent's branch, each
    turn's question, answer, tool calls, model calls, tokens, duration and state, with totals and each column's
    price (`cost_usd`, null when its model or price is unknown, and the `model` priced, `cost_text` as printed);
    and, once judged, the verdict (`verdict.headline`: the best agent in one line; `judgment.lines`: one line per
    agent against the source and per two agents, with a win rate, its 95 % Wilson interval and the outcome it
    allows, better / worse / inconclusive; `judgment.pairs`: what the judge said in each order). `format`: "json"
    (the data) or "markdown" (a table to show a person, the verdict under it)."""

    async def op(svc: Services, caller: Caller) -> object:
        if format not in ("json", "markdown"):
            raise BadRequest(f"format must be json or markdown, got {format!r}")
        found = await experiments.get(svc, caller, checked_id(experiment_id, "experiment id"))
        return experiments.markdown(found) if format == "markdown" else found

    return await _run(ctx, op, raw=format == "markdown")


async def cancel_experiment(
    ctx: Context[Any, Any, Any],
    experiment_id: Annotated[str, Field(description="An experiment id (start_experiment answers it: `id`).")],
) -> CallToolResult:
    """Cancel a running experiment: every running branch ends and its agent is asked to cancel its task (and a
    judgment that waits or runs ends, its judge asked to cancel); the forks stay. Answers the experiment's grid
    (POST /api/experiments/{id}/cancel)."""

    async def op(svc: Services, caller: Caller) -> object:
        return await experiments.cancel(svc, caller, checked_id(experiment_id, "experiment id"))

    return await _run(ctx, op)


ExperimentId = Annotated[str, Field(description="An experiment id (start_experiment answers it: `experiment.id`).")]


async def discard_branches(
    ctx: Context[Any, Any, Any],
    experiment_id: ExperimentId,
    keep: Annotated[
        str | None,
        BODY,
        Field(
            description="The branch to keep (the winner): its fork's `session_id` or its `job_id`, as "
            "experiment_status shows them; absent: discard every branch."
        ),
    ] = None,
) -> CallToolResult:
    """Clear an ended experiment's branches out of the user's kagent chat list: every branch's fork is hidden
    as kagent hides a deleted session (nothing erased), except the one `keep` names. Undo it with undo_discard.
    Refused while the experiment runs (cancel_experiment first). Calling it again with the same `keep` changes
    nothing. Answers the experiment's grid, whose `discard` says which forks were hidden
    (POST /api/experiments/{id}/discard)."""

    async def op(svc: Services, caller: Caller) -> object:
        req = msgspec.convert({"keep": keep} if keep is not None else {}, discard.DiscardRequest)
        found, _ = await discard.discard(svc, caller, checked_id(experiment_id, "experiment id"), req)
        return found

    return await _run(ctx, op)


async def undo_discard(ctx: Context[Any, Any, Any], experiment_id: ExperimentId) -> CallToolResult:
    """Bring back the branch forks that discard_branches hid from the user's kagent chat list (exactly those,
    not a chat the user deleted themselves). Calling it again changes nothing. Answers the experiment's grid
    (POST /api/experiments/{id}/discard/undo)."""

    async def op(svc: Services, caller: Caller) -> object:
        found, _ = await discard.undo(svc, caller, checked_id(experiment_id, "experiment id"))
        return found

    return await _run(ctx, op)


async def judge_experiment(
    ctx: Context[Any, Any, Any],
    experiment_id: Annotated[str, Field(description="An experiment that ended (start_experiment answers its id).")],
    agent: Annotated[str, BODY, Field(description='The judging kagent agent, "namespace/name".')],
    criteria: Annotated[str | None, BODY, Field(description="What the judge should weigh, beyond the default.")] = None,
    max_context_tokens: Annotated[
        int | None, BODY, Field(description="Refuse when the judge's calls send more (default 200,000).")
    ] = None,
) -> CallToolResult:
    """Judge an experiment that ended (again, with another judge or criteria; every judgment is kept): the
    kagent agent `agent` compares each branch's continuation with the source's, and each two agents', blind,
    each pair asked twice with A and B swapped; its model is asked for real. Answers at once (status
    "judging"); follow it with experiment_status (POST /api/experiments/{id}/judge)."""

    async def op(svc: Services, caller: Caller) -> object:
        fields = {"agent": agent, "criteria": criteria, "max_context_tokens": max_context_tokens}
        req = msgspec.convert({k: v for k, v in fields.items() if v is not None}, experiments.JudgeRequest)
        return await experiments.judge_experiment(
            svc, runner_of(ctx)(), caller, checked_id(experiment_id, "experiment id"), req
        )

    return await _run(ctx, op)


async def save_case(
    ctx: Context[Any, Any, Any],
    suite_id: Annotated[str, Field(description="The suite to add the case to (kagent-fork suite list names them).")],
    session_id: SessionId,
    rewind_before_invocation_id: InvocationId = None,
    rewind_before_task_id: TaskId = None,
    # Strict: a bool is not a number of turns (pydantic's lax mode would read true as 1).
    turns: Annotated[
        pydantic.StrictInt | Literal["all"],
        Field(description='How many turns a run of the suite replays from this one on, or "all".'),
    ] = 1,
    message_text: Annotated[
        str | None, Field(description="Ask the case's first turn with this text instead of the user's own.")
    ] = None,
) -> CallToolResult:
    """Save as a case: add a turn of a conversation to a suite (list_suites names the caller's), a saved set of real
    conversations that a suite run continues on other agents and judges against the source's own answers. The
    turn is named by its invocation id (list_turns), or by `rewind_before_task_id` for an agent that writes none.
    Answers the suite with its cases."""

    async def op(svc: Services, caller: Caller) -> object:
        fields = {"session_id": session_id, "rewind_before_invocation_id": rewind_before_invocation_id,
                  "rewind_before_task_id": rewind_before_task_id, "turns": turns,
                  "message": {"text": message_text} if message_text is not None else None}  # fmt: skip
        spec = msgspec.convert({k: v for k, v in fields.items() if v is not None}, CaseSpec)
        return await saved.add_case(svc, caller, checked_id(suite_id, "suite id"), spec)

    return await _run(ctx, op)


async def list_suites(ctx: Context[Any, Any, Any]) -> CallToolResult:
    """The caller's suites, newest first: their ids (save_case takes one), names and how many cases each holds."""

    async def op(svc: Services, caller: Caller) -> object:
        return await saved.of_user(svc, caller)

    return await _run(ctx, op)


async def run_suite(
    ctx: Context[Any, Any, Any],
    suite_id: Annotated[str, Field(description="The suite to run (list_suites names the caller's).")],
    agents: Annotated[list[str], BODY, Field(description='1 to 8 distinct agents to try, each "namespace/name".')],
    judge_agent: Annotated[str, BODY, Field(description='The judging kagent agent, "namespace/name".')],
    judge_criteria: Annotated[
        str | None, BODY, Field(description="What the judge should weigh, beyond the default.")
    ] = None,
    repeats: Annotated[int, BODY, Field(description="Branches per case and agent, 1 to 5.")] = 1,
    tools: ToolsArg = None,
    reads: ReadsArg = None,
    control: Annotated[
        bool, BODY, Field(description="Add the source's own agent as an arm: its verdict is the noise floor.")
    ] = False,
    max_usd: Annotated[
        float | None,
        BODY,
        Field(description="Refuse a run estimated over this (US dollars, the judge too); stop starting cases at it."),
    ] = None,
    dry_run: Annotated[bool, BODY, Field(description="true: what it would run and cost; start nothing.")] = False,
) -> CallToolResult:
    """Run a suite: every case (a point of a real conversation) continued on each of `agents` as an experiment,
    judged blind against the source's own continuation; one verdict per agent across the conversations, with a
    95 % interval that counts conversations (better / worse / inconclusive). The branches are hidden from the
    user's chat list. Answers the run at once (status "running"); follow it with suite_run_status."""

    async def op(svc: Services, caller: Caller) -> object:
        fields = {"agents": agents, "repeats": repeats, "tools": tools, "reads": reads, "control": control,
                  "max_usd": max_usd, "dry_run": dry_run, "judge": _judge(judge_agent, judge_criteria)}  # fmt: skip
        req = msgspec.convert({k: v for k, v in fields.items() if v is not None}, ledger.RunRequest)
        answer, _ = await runs.start(svc, runner_of(ctx)(), caller, checked_id(suite_id, "suite id"), req, None)
        return answer

    return await _run(ctx, op)


async def suite_run_status(
    ctx: Context[Any, Any, Any],
    suite_id: Annotated[str, Field(description="The suite the run belongs to.")],
    run_id: Annotated[str, Field(description="The run (run_suite answers its `id`).")],
    format: Annotated[
        Literal["json", "markdown"], Field(description='"json": the data; "markdown": the verdict to show a person.')
    ] = "json",
) -> CallToolResult:
    """A suite run: its status (running, judging, then completed, stopped at the budget, cancelled or failed), its
    progress, the money spent, and the verdict across the conversations judged so far: per agent its wins, ties
    and losses against the source, win rate, 95 % interval over conversations, outcome and median cost per
    conversation, and a headline; per case, which agent did best."""

    async def op(svc: Services, caller: Caller) -> object:
        if format not in ("json", "markdown"):
            raise BadRequest(f"format must be json or markdown, got {format!r}")
        found = await runs.get(svc, caller, checked_id(suite_id, "suite id"), checked_id(run_id, "run id"))
        return report.markdown(found) if format == "markdown" else found

    return await _run(ctx, op, raw=format == "markdown")


TOOLS: list[Callable[..., Awaitable[CallToolResult]]] = [
    list_turns,
    show_transcript,
    fork_session,
    rewind_session,
    undo_rewind,
    compare_sessions,
    start_whatif,
    whatif_status,
    cancel_whatif,
    list_whatifs,
    list_rewinds,
    fork_tree,
    list_sessions,
    start_experiment,
    experiment_status,
    cancel_experiment,
    discard_branches,
    undo_discard,
    judge_experiment,
    save_case,
    list_suites,
    run_suite,
    suite_run_status,
]


def mcp_server(runner: Callable[[], whatif.Runner]) -> FastMCP:
    """The MCP server, mounted by the app at /mcp; `runner` gives the app's what-if runner (and through
    it the app's services) once the app runs."""
    server = _Server(
        "kagent-fork",
        instructions="Fork, rewind and compare kagent conversations. Session ids are kagent session ids; "
        "turns are named by their invocation ids (list_turns).",
        stateless_http=True,
        json_response=True,
        streamable_http_path="/",
        # In a cluster the Host is the Service's name: the SDK's check for browsers reaching a localhost
        # server (DNS rebinding) would refuse every agent. Who calls is decided by the headers, as for HTTP.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    server.runner = runner
    # serverInfo names kagent-fork and its version, not the MCP SDK's: FastMCP takes no version, its low-level
    # server (the one that answers initialize) does.
    server._mcp_server.version = service_version
    for tool in TOOLS:
        server.add_tool(tool, annotations=hints(tool.__name__))
    return server
