"""kagent's `agent` table: each agent's configuration (kagent's `AgentConfig` JSON, written by its controller
from the Agent resource), read, never written. What an experiment's arms may do with their tools and which
model they run are read here, once, for every room that needs them (docs/kagent-schema.md, "Agents")."""

from __future__ import annotations

import re
from dataclasses import dataclass

import asyncpg
import msgspec

from service.kagent.store.base import Connection, Queries

# A kagent agent is a Kubernetes resource: namespace/name, each a DNS label (so never a `_`).
AGENT_REF = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # fullmatch


def agent_row_id(agent_ref: str) -> str:
    """kagent's id of namespace/name in `agent` and `session.agent_id`: `-` becomes `_`, `/` becomes `__NS__`
    (kagent's ConvertToPythonIdentifier of the object's ref)."""
    return agent_ref.replace("-", "_").replace("/", "__NS__")


def agent_ref_of(agent_id: str) -> str | None:
    """The namespace/name an agent_id spells (kagent's names never hold `_`, so the rule reverses)."""
    if agent_id.count("__NS__") != 1:
        return None
    ref = agent_id.replace("__NS__", "/").replace("_", "-")
    return ref if AGENT_REF.fullmatch(ref) else None


class ModelConfig(msgspec.Struct, kw_only=True):
    """The model an agent runs: kagent's provider `type` ("openai", "anthropic", "gemini", ...) and `model`;
    `base_url` where an OpenAI-type model is served (empty: OpenAI's own API)."""

    type: str = ""
    model: str = ""
    base_url: str | None = None


class McpServerParams(msgspec.Struct, kw_only=True):
    url: str = ""
    headers: dict[str, str] | None = None


class McpServerConfig(msgspec.Struct, kw_only=True):
    """One of an agent's MCP tool servers (`http_tools` streamable HTTP, `sse_tools` SSE): `tools` the names the
    agent may call (empty: all the server lists), `require_approval` those kagent asks the user to approve,
    `allowed_headers` the request headers kagent-adk forwards to the server."""

    params: McpServerParams = msgspec.field(default_factory=McpServerParams)
    tools: list[str] | None = None
    allowed_headers: list[str] | None = None
    require_approval: list[str] | None = None


class StdioServerConfig(msgspec.Struct, kw_only=True):
    """A local MCP server kagent main's runtime starts as a process (`stdio_tools`): nothing outside can reach it."""

    command: str = ""
    args: list[str] | None = None


class RemoteAgentConfig(msgspec.Struct, kw_only=True):
    name: str = ""
    url: str = ""


class AgentConfig(msgspec.Struct, kw_only=True):
    """The parts of kagent's AgentConfig (go/api/adk/types.go, both lines) the service reads; kagent's other keys
    are ignored, and every part is optional, as a BYO agent's minimal config holds none of them."""

    model: ModelConfig | None = None
    description: str = ""
    instruction: str = ""
    http_tools: list[McpServerConfig] | None = None
    sse_tools: list[McpServerConfig] | None = None
    stdio_tools: list[StdioServerConfig] | None = None  # kagent main only
    remote_agents: list[RemoteAgentConfig] | None = None
    execute_code: bool | None = None  # kagent 0.10.x only: the agent runs code it writes


@dataclass(frozen=True, kw_only=True)
class AgentRow:
    id: str
    type: str  # kagent's agent type: "Declarative", "BYO", "SandboxAgent", ...
    config: AgentConfig | None  # None: no config stored, or one this reader cannot decode (`config_error` says)
    config_error: str | None = None


_decoder = msgspec.json.Decoder(AgentConfig)
_KNOWN = frozenset(AgentConfig.__struct_fields__)


def decode_config(text: str | None) -> tuple[AgentConfig | None, str | None]:
    """A stored config, decoded, or None with the reason: a config kagent wrote but this reader cannot decode is
    known to be unknown, never guessed at."""
    if text is None or text.strip() in ("", "null"):
        return None, None
    try:
        keys = msgspec.json.decode(text)
        # A shape that would read as "no tools" (BYO's `{"type": "BYO"}`, keys we do not know) is not known to be.
        if isinstance(keys, dict) and keys and not set(keys) & _KNOWN:
            return None, f"kagent-fork does not know this configuration's shape (keys: {', '.join(sorted(keys))[:200]})"
        return _decoder.decode(text), None
    except msgspec.DecodeError as e:
        return None, f"kagent's stored config does not decode: {e}"


class Agents:
    def __init__(self, q: Queries) -> None:
        self.q = q

    async def get(self, conn: Connection, agent_ref: str) -> AgentRow | None:
        """The live agent namespace/name, as kagent's backend reads it; None when kagent knows no such agent."""
        row = await conn.fetchrow(self.q["get_agent_config"], agent_row_id(agent_ref))
        return None if row is None else _agent(row)

    async def get_many(self, conn: Connection, agent_refs: list[str]) -> dict[str, AgentRow]:
        """get() of each agent at once (one query), by namespace/name; the agents kagent does not know are absent."""
        ids = {agent_row_id(ref): ref for ref in agent_refs}
        return {ids[r["id"]]: _agent(r) for r in await conn.fetch(self.q["get_agent_configs"], list(ids))}

    async def listed(self, conn: Connection, limit: int) -> list[AgentRow]:
        """kagent's live agents, by id, at most `limit`."""
        return [_agent(r) for r in await conn.fetch(self.q["list_agents"], limit)]


def _agent(row: asyncpg.Record) -> AgentRow:
    config, error = decode_config(row["config"])
    return AgentRow(id=row["id"], type=row["type"], config=config, config_error=error)
