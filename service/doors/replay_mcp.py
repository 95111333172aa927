"""The replay endpoint's door: `/replay/mcp/{namespace}/{name}/{server}` serves MCP (streamable HTTP, stateless)
standing in for one MCP server of the agent namespace/name, for that agent's replay twins
(docs/replay-twins.md). To a caller whose replay turn is running, it lists the real server's tools the source
agent may call and answers each call as `agents/replay/twin.py` decides, as the caller the forwarded headers name."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import McpError
from mcp.types import INVALID_PARAMS, CallToolResult, ErrorData, Tool

from service.agents.replay import lease, twin
from service.doors import mcp_http
from service.errors import ServiceError
from service.identity import resolve_caller, scope_headers
from service.services import Services

log = logging.getLogger("kagent_fork")
PREFIX = "/replay/mcp"


def _incoming(svc: Services, server: Server[Any, Any]) -> twin.Incoming:
    """The request being answered: the agent and server its path names, the caller, the forwarded headers."""
    request = server.request_context.request
    scope: dict[str, Any] = getattr(request, "scope", {})
    found = lease.twin_of(PREFIX + str(scope.get("kagent_fork.replay_path", "")))
    if found is None:
        message = f"not a replay endpoint: {PREFIX}/<namespace>/<name>/<server>"
        raise McpError(ErrorData(code=INVALID_PARAMS, message=message))
    agent, key = found
    headers = scope_headers(scope)
    query: dict[str, list[str]] = {}
    try:
        # The path names the agent: an agent's token must be of its namespace (identity.resolve_caller).
        caller = resolve_caller(svc.settings, headers, query, agent=agent)
    except ServiceError as exc:
        raise McpError(ErrorData(code=INVALID_PARAMS, message=exc.message)) from None
    return twin.Incoming(
        agent=agent, server=key, user_id=caller.user_id, headers={k: v[0] for k, v in headers.items() if v}
    )


def replay_server(services: Callable[[], Services]) -> Server[Any, Any]:
    server: Server[Any, Any] = Server("kagent-fork replay")

    @server.list_tools()  # type: ignore[untyped-decorator,no-untyped-call]
    async def list_tools() -> list[Tool]:
        svc = services()
        incoming = _incoming(svc, server)
        try:
            return await twin.list_for(svc, incoming)
        except ServiceError as exc:  # its message names no server's address (twin.py)
            raise McpError(ErrorData(code=INVALID_PARAMS, message=exc.message)) from None

    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> CallToolResult:
        svc = services()
        incoming = _incoming(svc, server)
        try:
            return await twin.call(svc, incoming, name, arguments)
        except ServiceError as exc:
            return twin.refusal(f"not run: {exc.message}")

    return server


def session_manager(services: Callable[[], Services]) -> StreamableHTTPSessionManager:
    return StreamableHTTPSessionManager(
        replay_server(services), json_response=True, stateless=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )  # fmt: skip


def endpoint(manager: StreamableHTTPSessionManager, max_body_bytes: int) -> mcp_http.App:
    """The endpoint as an ASGI app, mounted at PREFIX (the service's) or served alone (the CLI's demo): each
    request's own path (namespace, name, server) is kept for `_incoming`; a body is read whole and checked first."""
    guarded = mcp_http.guarded(manager.handle_request, max_body_bytes)

    async def app(scope: mcp_http.Scope, receive: mcp_http.Receive, send: mcp_http.Send) -> None:
        raw = bytes(scope.get("raw_path") or scope["path"].encode()).decode("utf-8", "replace").split("?")[0]
        scope["kagent_fork.replay_path"] = raw.split(PREFIX, 1)[-1]
        await guarded(scope, receive, send)

    return app
