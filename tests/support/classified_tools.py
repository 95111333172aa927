"""MCP tool servers (the MCP SDK's FastMCP, over streamable HTTP and over SSE) whose tools fall in every class a
replay's arm knows (service/agents/replay/tools.py): tools annotated `readOnlyHint`, tools that say nothing,
names from kagent's own tool server's read-only list and a name an operator lists. They keep the headers of
every request they get, so a test sees who asked for `tools/list`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

from tests.support.live_server import live_server

READ = ToolAnnotations(readOnlyHint=True)
# what the HTTP server lists, and what each is to an arm whose config asks approval for delete_pod
HTTP_TOOLS = {
    "get_pods": "reads",  # readOnlyHint
    "scale_deployment": "acts",  # no annotation, on no list
    "delete_pod": "asks",  # require_approval in the tests' configs
    "k8s_get_events": "reads",  # kagent-tools' read tool, on the shipped list (no annotation, as kagent-tools)
    "count_widgets": "acts",  # unless an operator lists it (REPLAY_READ_ONLY_TOOLS)
    "restart_everything": "acts",  # readOnlyHint false
}
SSE_TOOLS = {"sse_status": "reads", "sse_apply": "acts"}


@dataclass
class Requests:
    headers: list[dict[str, str]] = field(default_factory=list)


class _Recording:
    """The server's ASGI app, keeping each HTTP request's headers."""

    def __init__(self, app: Any, seen: Requests) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.headers.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


def _tool(name: str) -> Any:
    def tool(arg: str = "") -> str:
        return f"{name}({arg})"

    return tool


def _server(names: dict[str, str]) -> FastMCP:
    mcp = FastMCP("kagent-fork classified tools", host="127.0.0.1", stateless_http=True, json_response=True)
    for name, cls in names.items():
        hint = READ if cls == "reads" and name.startswith(("get_", "sse_")) else None
        if name == "restart_everything":
            hint = ToolAnnotations(readOnlyHint=False)

        mcp.add_tool(_tool(name), name=name, description=f"the test's {name}", annotations=hint)
    return mcp


class _Slow:
    """The server's ASGI app, answering every HTTP request `delay` seconds late."""

    def __init__(self, app: Any, delay: float) -> None:
        self.app, self.delay = app, delay

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await asyncio.sleep(self.delay)
        await self.app(scope, receive, send)


@contextmanager
def slow_server(delay: float) -> Iterator[str]:
    """A streamable HTTP server of the HTTP tools that answers each request `delay` seconds late: its URL."""
    with live_server(_Slow(_server(HTTP_TOOLS).streamable_http_app(), delay)) as base:
        yield f"{base}/mcp"


@dataclass(frozen=True)
class ClassifiedServers:
    http_url: str  # streamable HTTP: http://127.0.0.1:<port>/mcp
    sse_url: str  # SSE: http://127.0.0.1:<port>/sse
    requests: Requests


@contextmanager
def classified_servers() -> Iterator[ClassifiedServers]:
    seen = Requests()
    http, sse = _server(HTTP_TOOLS), _server(SSE_TOOLS)
    with (
        live_server(_Recording(http.streamable_http_app(), seen)) as http_base,
        live_server(_Recording(sse.sse_app(), seen)) as sse_base,
    ):
        yield ClassifiedServers(http_url=f"{http_base}/mcp", sse_url=f"{sse_base}/sse", requests=seen)
