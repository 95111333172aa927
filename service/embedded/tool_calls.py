"""How the demo's scripted agents call their tools: as kagent's runtime (kagent-adk) calls an agent's MCP tools.
The agent's configuration is read from kagent's `agent` table at each turn, so that a replay twin's row, whose
servers are kagent-fork's replay endpoint, is answered by the endpoint (the source's recorded results) and the
demo's own agents by the demo's tool server. A server gets its own headers and those of the turn's request its
`allowed_headers` forwards (the caller's X-User-Id, which the replay endpoint's lease needs). Each result is
recorded as kagent-adk records an MCP tool's: the CallToolResult's JSON, or the error of a call that failed."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from service.embedded.scripts import Result
from service.kagent.store.agents import AgentConfig, McpServerConfig, agent_row_id, decode_config
from service.kagent.store.base import Connection

TIMEOUT_SECONDS = 30.0


async def agent_config(conn: Connection, agent_ref: str) -> AgentConfig | None:
    """The agent's configuration as kagent's controller last wrote it (None: no row, or none readable)."""
    text = await conn.fetchval("SELECT config::text FROM agent WHERE id = $1", agent_row_id(agent_ref))
    return decode_config(text)[0]


def offered(config: AgentConfig | None) -> list[str]:
    """The tools the configuration names on its streamable HTTP servers (what the scripts may plan calls to)."""
    return [t for s in (config.http_tools or [] if config is not None else []) for t in s.tools or []]


def _server(config: AgentConfig | None, tool: str) -> McpServerConfig | None:
    return next((s for s in (config.http_tools or []) if tool in (s.tools or [])), None) if config else None


async def call(config: AgentConfig | None, tool: str, args: dict[str, object], request: Mapping[str, str]) -> Result:
    """Call `tool` on the server of the configuration that offers it, as the turn's caller (`request`: the A2A
    request's headers, lower-case names)."""
    server = _server(config, tool)
    if server is None:
        return {"error": f"no MCP server of this agent offers {tool}"}
    headers = dict(server.params.headers or {})
    allowed = {h.lower() for h in server.allowed_headers or []}
    headers.update({k: v for k, v in request.items() if k.lower() in allowed})
    try:
        async with (
            httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(TIMEOUT_SECONDS)) as client,
            streamable_http_client(server.params.url, http_client=client) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool(tool, args)
    except Exception as exc:  # the runtime records a failed call's error as the tool's answer, and goes on
        return {"error": f"{tool} failed: {type(exc).__name__}: {exc}"[:300]}
    dumped: Result = result.model_dump(mode="json", exclude_none=True)
    return dumped
