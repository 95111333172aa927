"""An MCP tool server (streamable HTTP, the MCP SDK's FastMCP) for kagent's runtimes in the tests: what a
kagent RemoteMCPServer gives an agent. It keeps every call with the headers it came with.

Tools: ``lookup(query)`` answers at once and says it only reads (``readOnlyHint``: a replay's arm may run it
live); ``delete_pod(name)`` is the one a test's agent config marks as requiring approval (kagent's
``require_approval``), so the runtime asks before calling it; ``scale(name, replicas)`` acts and asks nobody;
``status(name)`` reads, and its answer counts the calls so far (two calls with the same arguments answer
differently, as a live cluster would).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations

from tests.support.live_server import live_server


@dataclass(frozen=True)
class ToolCall:
    tool: str
    args: dict[str, Any]
    headers: dict[str, str]


@dataclass
class ToolCalls:
    calls: list[ToolCall] = field(default_factory=list)

    def of(self, tool: str) -> list[ToolCall]:
        return [c for c in self.calls if c.tool == tool]


def _headers(ctx: Context) -> dict[str, str]:  # type: ignore[type-arg]
    request = ctx.request_context.request
    return {k.lower(): v for k, v in request.headers.items()} if request is not None else {}


def tools_app(calls: ToolCalls) -> Any:
    mcp = FastMCP("kagent-fork test tools", host="127.0.0.1", stateless_http=True, json_response=True)

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def lookup(query: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Look something up in the cluster."""
        calls.calls.append(ToolCall("lookup", {"query": query}, _headers(ctx)))
        return f"3 results for {query}"

    @mcp.tool()
    def delete_pod(name: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Delete a pod by name."""
        calls.calls.append(ToolCall("delete_pod", {"name": name}, _headers(ctx)))
        return f"pod {name} deleted"

    @mcp.tool()
    def scale(name: str, replicas: int, ctx: Context) -> str:  # type: ignore[type-arg]
        """Scale a deployment."""
        calls.calls.append(ToolCall("scale", {"name": name, "replicas": replicas}, _headers(ctx)))
        return f"deployment {name} scaled to {replicas}"

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def status(name: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """The status of a deployment."""
        calls.calls.append(ToolCall("status", {"name": name}, _headers(ctx)))
        return f"{name} is at revision {len(calls.of('status'))}"

    return mcp.streamable_http_app()


@dataclass(frozen=True)
class RunningTools:
    url: str  # the MCP endpoint: http://127.0.0.1:<port>/mcp
    calls: ToolCalls


@contextmanager
def running_tools() -> Iterator[RunningTools]:
    calls = ToolCalls()
    with live_server(tools_app(calls)) as url:
        yield RunningTools(url=f"{url}/mcp", calls=calls)
