"""The branch views as MCP Apps in kagent's chat (docs/mcp-apps.md): two tools an agent calls, each naming a
`ui://` page, and the app-only tools those pages call back through kagent's tool-call bridge.

kagent's controller proxies an app's calls with the RemoteMCPServer's own headers only, never the chatting
user's: so the agent's call (which carries the user's forwarded headers) answers an `app_token`, a signed,
short-lived note of that caller, and every app call names its caller by it. The operations are the ones
the MCP tools and the HTTP calls run; nothing here reads kagent's tables itself.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from importlib import resources
from typing import Annotated, Any, Literal

import msgspec
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from service.agents import experiments
from service.branches import compare, lineage, turns
from service.doors import explorer
from service.doors.mcp_hints import hints
from service.doors.mcp_tools import BODY, Operation, SessionId, answer, runner_of
from service.errors import BadRequest, NotConfigured, NotFound, Unauthorized
from service.identity import Caller, resolve_caller, scope_headers
from service.kagent.store.agents import agent_ref_of
from service.operations import forking, rewind
from service.schemas import ForkRequest, RewindRequest, checked_id
from service.services import Services

MIME = "text/html;profile=mcp-app"  # the one page type of the MCP Apps extension
BRANCHES_URI = "ui://kagent-fork/branches.html"
EXPERIMENT_URI = "ui://kagent-fork/experiment.html"
TOKEN_SECONDS = 12 * 3600
_APP_ONLY = {"ui": {"visibility": ["app"]}}

AppToken = Annotated[str, Field(description="The view's app_token (show_branches or show_experiment answers it).")]
# The arguments that go into a body are checked by the body's type alone, as on every door (mcp_tools.BODY).
ByInvocation = Annotated[str | None, BODY, Field(description="The turn, by its invocation id.")]
ByTask = Annotated[
    str | None, BODY, Field(description="The turn by its task, for an agent that writes no invocation id.")
]


def _named(invocation_id: str | None, task_id: str | None) -> dict[str, object]:
    """A turn named by its invocation or by its task, as the requests take it (one of them: 400 otherwise)."""
    named = {"rewind_before_invocation_id": invocation_id, "rewind_before_task_id": task_id}
    return {k: v for k, v in named.items() if v is not None}


ViewSession = Annotated[
    str | None,
    Field(description="The conversation (a kagent session id); default: the user's newest, the chat being typed in."),
]


class _Grant(msgspec.Struct, frozen=True):
    u: str  # the user
    s: str | None  # their share token, if the agent's call carried one
    e: int  # expiry, unix seconds


@functools.cache
def _process_key() -> bytes:
    return secrets.token_bytes(32)


def _key(svc: Services) -> bytes:
    """The app tokens' key, the same on every replica so that a token made by one is read by the other:
    MCP_APP_SECRET when set. Without it, in unsecure mode, a key derived from the database URL (there a
    forged token grants nothing an X-User-Id header does not) or, on the embedded database, one of this
    process. In trusted-proxy mode a token stands for a verified user, so only a real secret will do."""
    settings = svc.settings
    if settings.mcp_app_secret is not None:
        return hashlib.sha256(b"kagent-fork mcp app token\0" + settings.mcp_app_secret.encode()).digest()
    if settings.auth_mode == "trusted-proxy":
        raise NotConfigured(
            "kagent-fork's views in kagent's chat need MCP_APP_SECRET (32 bytes or more) in trusted-proxy mode"
        )
    if settings.database_url is None:
        return _process_key()
    return hashlib.sha256(b"kagent-fork mcp app token\0" + settings.database_url.encode()).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def make_token(svc: Services, caller: Caller, now: float | None = None) -> str:
    body = msgspec.json.encode(_Grant(caller.user_id, caller.share_token, int(now or time.time()) + TOKEN_SECONDS))
    return f"{_b64(body)}.{_b64(hmac.digest(_key(svc), body, 'sha256'))}"


def token_caller(svc: Services, token: str) -> Caller:
    refused = Unauthorized("this view's app_token is not valid or has expired: ask the agent to show the view again")
    body_text, _, signature = token.partition(".")
    try:
        body = base64.urlsafe_b64decode(body_text + "=" * (-len(body_text) % 4))
        given = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    except ValueError:
        raise refused from None
    if not hmac.compare_digest(given, hmac.digest(_key(svc), body, "sha256")):
        raise refused
    grant = msgspec.json.decode(body, type=_Grant)
    if grant.e < time.time():
        raise refused
    return Caller(user_id=grant.u, share_token=grant.s)


def chat_path(agent_id: str | None, session_id: str) -> str | None:
    """kagent's UI address of a chat: /agents/{namespace}/{name}/chat/{session_id}."""
    ref = agent_ref_of(agent_id) if agent_id else None
    return f"/agents/{ref}/chat/{session_id}" if ref else None


def _find(node: lineage.TreeNode, session_id: str) -> lineage.TreeNode | None:
    if node.session_id == session_id:
        return node
    return next((found for child in node.forks if (found := _find(child, session_id)) is not None), None)


async def _as_agent_caller(ctx: Context[Any, Any, Any], operation: Operation) -> CallToolResult:
    """An agent's call: the caller from the request's headers, as every MCP tool."""
    request = ctx.request_context.request
    svc = runner_of(ctx)().svc

    def caller() -> Caller:
        if request is None:
            raise Unauthorized("this tool needs an HTTP request (identity comes from its headers)")
        query = {name: request.query_params.getlist(name) for name in request.query_params}
        return resolve_caller(svc.settings, scope_headers(request.scope), query)

    result = await answer(svc, caller, operation)
    if not result.isError:
        # Also as structured content: from an ADK tool's `{"output": ...}` kagent's UI passes the page only
        # the structured content, and it merges the call's arguments into it.
        text = result.content[0]
        assert isinstance(text, TextContent)
        result.structuredContent = msgspec.json.decode(text.text)
    return result


async def _as_app(ctx: Context[Any, Any, Any], token: str, operation: Operation) -> CallToolResult:
    """An app's call (through kagent's bridge): the caller the view's token names."""
    svc = runner_of(ctx)().svc
    return await answer(svc, lambda: token_caller(svc, token), operation)


async def _view(svc: Services, caller: Caller, session_id: str | None, **more: object) -> dict[str, object]:
    if session_id is None:
        newest = await explorer.sessions(svc, caller, limit=1)
        if not newest:
            raise NotFound("you have no conversation to show")
        session_id = newest[0].id
    sid = checked_id(session_id)
    await lineage.tree(svc, caller, sid)  # refuses a session the caller cannot see, before a view opens
    return {"session_id": sid, "app_token": make_token(svc, caller), **more}


async def show_branches(ctx: Context[Any, Any, Any], session_id: ViewSession = None) -> CallToolResult:
    """Show this conversation's branches in the chat: its turns (fork before a turn, rewind to here, undo),
    its fork tree and a compare of two branches. `session_id`: the conversation (default: the user's
    newest)."""

    async def op(svc: Services, caller: Caller) -> object:
        return await _view(svc, caller, session_id)

    return await _as_agent_caller(ctx, op)


async def show_experiment(
    ctx: Context[Any, Any, Any],
    session_id: ViewSession = None,
    experiment_id: Annotated[str | None, Field(description="Show this experiment's grid.")] = None,
) -> CallToolResult:
    """Show an experiment in the chat: a form to start one from a turn of the conversation (agents, how
    many turns, the question edited), then its grid filling while it runs. `experiment_id`: show that one."""

    async def op(svc: Services, caller: Caller) -> object:
        if experiment_id is not None:
            found = await experiments.get(svc, caller, checked_id(experiment_id, "experiment id"))
            return await _view(svc, caller, found.source_session_id, experiment_id=found.id)
        return await _view(svc, caller, session_id, experiment_id=None)

    return await _as_agent_caller(ctx, op)


async def app_branches(ctx: Context[Any, Any, Any], app_token: AppToken, session_id: SessionId) -> CallToolResult:
    """The branches view's data: the session, its turns, its fork tree and its rewinds."""

    async def op(svc: Services, caller: Caller) -> object:
        sid = checked_id(session_id)
        tree = await lineage.tree(svc, caller, sid)
        page = await turns.invocations(svc, caller, sid, limit=200, after=None)
        node = _find(tree, sid)
        agent_id = node.agent_id if node else None
        return {
            "session": {"id": sid, "name": node.name if node else None, "agent_id": agent_id},
            "chat_path": chat_path(agent_id, sid),
            "turns": page.items,
            "tree": tree,
            "rewinds": await rewind.rewinds(svc, caller, sid),
        }

    return await _as_app(ctx, app_token, op)


async def app_fork(
    ctx: Context[Any, Any, Any], app_token: AppToken, session_id: SessionId,
    rewind_before_invocation_id: ByInvocation = None, rewind_before_task_id: ByTask = None,
) -> CallToolResult:  # fmt: skip
    """Fork before a turn (fork_session's operation); answers the fork and its chat's address."""

    async def op(svc: Services, caller: Caller) -> object:
        named = _named(rewind_before_invocation_id, rewind_before_task_id)
        if not named:
            raise BadRequest("name the turn: rewind_before_invocation_id or rewind_before_task_id")
        req = msgspec.convert({**named, "if_boundary_missing": "error"}, ForkRequest)
        forked = (await forking.fork(svc, caller, checked_id(session_id), req)).data
        session = msgspec.to_builtins(forked)
        return {"fork": forked, "chat_path": chat_path(session.get("agent_id"), session["id"])}

    return await _as_app(ctx, app_token, op)


async def app_rewind(
    ctx: Context[Any, Any, Any], app_token: AppToken, session_id: SessionId,
    rewind_before_invocation_id: ByInvocation = None, rewind_before_task_id: ByTask = None,
) -> CallToolResult:  # fmt: skip
    """Rewind to here (rewind_session's operation)."""

    async def op(svc: Services, caller: Caller) -> object:
        req = msgspec.convert(_named(rewind_before_invocation_id, rewind_before_task_id), RewindRequest)
        return await rewind.rewind(svc, caller, checked_id(session_id), req)

    return await _as_app(ctx, app_token, op)


async def app_undo(
    ctx: Context[Any, Any, Any],
    app_token: AppToken,
    session_id: SessionId,
    rewind_id: Annotated[str, Field(description="The rewind to undo.")],
) -> CallToolResult:
    """Undo a rewind (undo_rewind's operation)."""

    async def op(svc: Services, caller: Caller) -> object:
        return await rewind.undo(svc, caller, checked_id(session_id), checked_id(rewind_id, "rewind id"))

    return await _as_app(ctx, app_token, op)


async def app_compare(
    ctx: Context[Any, Any, Any], app_token: AppToken, session_id: SessionId, other_session_id: SessionId
) -> CallToolResult:
    """Two branches side by side (compare_sessions's operation)."""

    async def op(svc: Services, caller: Caller) -> object:
        return await compare.compare(svc, caller, checked_id(session_id), checked_id(other_session_id))

    return await _as_app(ctx, app_token, op)


async def app_start_experiment(
    ctx: Context[Any, Any, Any],
    app_token: AppToken,
    session_id: SessionId,
    agents: Annotated[list[str], BODY, Field(description='1 to 8 agents, each "namespace/name".')],
    rewind_before_invocation_id: ByInvocation = None,
    rewind_before_task_id: ByTask = None,
    turns: Annotated[int | str, BODY, Field(description='How many turns to replay, or "all".')] = 1,
    message_text: Annotated[str | None, BODY, Field(description="The first question, edited.")] = None,
    tools: Annotated[
        Literal["replay", "live"] | None,
        BODY,
        Field(
            description='What the agents\' tools do: "replay" (default: only recorded results, nothing runs) or "live".'
        ),
    ] = None,
) -> CallToolResult:
    """Start an experiment (start_experiment's operation)."""

    async def op(svc: Services, caller: Caller) -> object:
        fields = _named(rewind_before_invocation_id, rewind_before_task_id)
        fields["agents"] = agents
        fields["turns"] = turns
        if tools is not None:
            fields["tools"] = tools
        if message_text is not None:  # an empty one is the body's refusal, not a silent default
            fields["message"] = {"text": message_text}
        req = msgspec.convert(fields, experiments.ExperimentRequest)
        started, _ = await experiments.start(svc, runner_of(ctx)(), caller, checked_id(session_id), req)
        return started

    return await _as_app(ctx, app_token, op)


async def app_experiment(
    ctx: Context[Any, Any, Any],
    app_token: AppToken,
    experiment_id: Annotated[str, Field(description="The experiment.")],
) -> CallToolResult:
    """An experiment's grid (experiment_status's operation)."""

    async def op(svc: Services, caller: Caller) -> object:
        return await experiments.get(svc, caller, checked_id(experiment_id, "experiment id"))

    return await _as_app(ctx, app_token, op)


async def app_cancel_experiment(
    ctx: Context[Any, Any, Any],
    app_token: AppToken,
    experiment_id: Annotated[str, Field(description="The experiment.")],
) -> CallToolResult:
    """Cancel a running experiment's branches (POST /api/experiments/{id}/cancel's operation): its grid."""

    async def op(svc: Services, caller: Caller) -> object:
        return await experiments.cancel(svc, caller, checked_id(experiment_id, "experiment id"))

    return await _as_app(ctx, app_token, op)


APP_TOOLS: list[Callable[..., Any]] = [
    app_branches, app_fork, app_rewind, app_undo, app_compare, app_start_experiment, app_experiment,
    app_cancel_experiment,
]  # fmt: skip


def page(name: str) -> str:
    """A view's page, whole: its HTML with the shared style and scripts written in (the host shows the
    resource's text alone, in a sandbox that may load nothing from elsewhere)."""
    folder = resources.files("service.doors") / "apps"
    parts = {f: (folder / f).read_text("utf-8") for f in ("app.css", "bridge.js", f"{name}.js", f"{name}.html")}
    inline = f"<style>{parts['app.css']}</style>\n<script>{parts['bridge.js']}\n{parts[f'{name}.js']}</script>"
    return parts[f"{name}.html"].replace("<!-- inline -->", inline)


def register(server: FastMCP) -> None:
    """The views' tools and pages, on the server the MCP tools are on."""
    server.add_tool(show_branches, meta={"ui": {"resourceUri": BRANCHES_URI}}, annotations=hints("show_branches"))
    server.add_tool(show_experiment, meta={"ui": {"resourceUri": EXPERIMENT_URI}}, annotations=hints("show_experiment"))
    for tool in APP_TOOLS:
        server.add_tool(tool, meta=_APP_ONLY, annotations=hints(tool.__name__))
    # No csp domains: the pages load nothing, and call the service only through the host's bridge.
    meta = {"ui": {"csp": {"connectDomains": [], "resourceDomains": []}, "prefersBorder": True}}
    for uri, name in ((BRANCHES_URI, "branches"), (EXPERIMENT_URI, "experiment")):
        server.resource(uri, name=f"kagent-fork {name}", mime_type=MIME, meta=meta)(_reader(name))


def _reader(name: str) -> Callable[[], str]:
    def read() -> str:
        return page(name)

    return read
