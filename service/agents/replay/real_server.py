"""The real MCP server a replay twin stands in for, asked as the caller: its tools (`tools/list`, for the twin to
list the same ones) and, for an unrecorded read-only call, the call itself. Streamable HTTP or SSE, as the
source agent's config says (kagent's `http_tools` and `sse_tools`); the headers are the server's own (its
`params.headers`) and the caller's that the twin forwarded (docs/replay-twins.md). The one MCP client of the
service: the arms' tools are listed through it too (tools.list_tools)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

import httpx
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Tool

from service.outbound import tls

TIMEOUT_SECONDS = 30.0


class Unreachable(Exception):
    """The real server did not answer (its text says why)."""


@dataclass(frozen=True, kw_only=True)
class RealServer:
    url: str
    transport: Literal["http", "sse"]
    headers: dict[str, str]  # the server's own and the caller's forwarded ones


@asynccontextmanager
async def _session(server: RealServer) -> AsyncIterator[ClientSession]:
    if server.transport == "sse":
        async with (
            sse_client(server.url, headers=server.headers, timeout=TIMEOUT_SECONDS) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session
        return
    async with (
        httpx.AsyncClient(headers=server.headers, timeout=httpx.Timeout(TIMEOUT_SECONDS), verify=tls()) as client,
        streamable_http_client(server.url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def list_tools(server: RealServer) -> list[Tool]:
    """Every tool the server lists (all pages)."""
    try:
        async with _session(server) as session:
            tools: list[Tool] = []
            cursor: str | None = None
            while True:
                page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
                tools.extend(page.tools)
                cursor = page.nextCursor
                if not cursor:
                    return tools
    except Exception as exc:  # any failure of a server we do not own is "it did not answer"
        raise Unreachable(f"{server.url} did not list its tools: {type(exc).__name__}: {exc}") from exc


async def call_tool(server: RealServer, tool: str, arguments: dict[str, object]) -> CallToolResult:
    try:
        async with _session(server) as session:
            return await session.call_tool(tool, arguments)
    except Exception as exc:
        raise Unreachable(f"{server.url} did not answer {tool}: {type(exc).__name__}: {exc}") from exc
