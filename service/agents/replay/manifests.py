"""The kagent manifests of a replay twin (`kagent-fork replay-twin NS/NAME`, docs/replay-twins.md): an `Agent`
like the source one, read from kagent's agent table (its prompt, its tools and approvals; the ModelConfig by
name, which the table does not hold), whose MCP servers are `RemoteMCPServer`s pointing at kagent-fork's replay
endpoint, one per server of the source, with the headers the attribution needs (the caller's X-User-Id and
Authorization, besides the source's own). kagent.dev/v1alpha2, both kagent lines."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from service.agents.replay.lease import servers
from service.errors import NotFound, Unprocessable
from service.kagent.store.agents import AgentConfig, AgentRow

# The caller's identity: the lease is per user, and a read runs live as the caller (docs/replay-twins.md).
IDENTITY_HEADERS = ("Authorization", "X-User-Id")
NAME_LIMIT = 63


def _name(text: str, limit: int = NAME_LIMIT) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower()))[:limit].strip("-")


def twin_manifests(
    source: str, row: AgentRow | None, *, endpoint: str, name: str | None = None, model_config: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The RemoteMCPServers and the Agent of a twin of agent `source` (namespace/name), and notes on what the twin
    leaves out (sub-agents, local servers). 404 for an unknown agent, 422 for one with nothing to stand in for."""
    if row is None:
        raise NotFound(f"agent {source} not found in kagent's agent table")
    if row.config is None:
        raise Unprocessable(row.config_error or f"agent {source} has no configuration to copy (a BYO agent)")
    namespace, source_name = source.split("/", 1)
    twin = _name(name or f"{source_name}-replay")
    labels = {"app.kubernetes.io/part-of": "kagent", "kagent-fork.dev/replay-twin": "true"}
    annotations = {"kagent-fork.dev/replay-of": source}
    docs: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    for key, (server, _transport) in sorted(servers(row.config).items()):
        server_name = _name(f"{twin}-{key}", 253)
        docs.append({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
            "metadata": {"name": server_name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": {
                "description": f"kagent-fork's replay endpoint standing in for {server.params.url} of {source}",
                "protocol": "STREAMABLE_HTTP", "url": f"{endpoint.rstrip('/')}/{source}/{key}",
            },
        })  # fmt: skip
        allowed = {h.lower(): h for h in [*(server.allowed_headers or []), *IDENTITY_HEADERS]}
        entry: dict[str, Any] = {"apiGroup": "kagent.dev", "kind": "RemoteMCPServer", "name": server_name}
        if server.tools:
            entry["toolNames"] = list(server.tools)
        if server.require_approval:
            entry["requireApproval"] = list(server.require_approval)
        entry["allowedHeaders"] = sorted(allowed.values(), key=str.lower)
        tools.append({"type": "McpServer", "mcpServer": entry})
    if not tools:
        raise Unprocessable(f"agent {source} has no MCP server (http_tools, sse_tools) for a twin to stand in for")
    declarative: dict[str, Any] = {"modelConfig": model_config, "systemMessage": row.config.instruction, "tools": tools}
    docs.append({
        "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
        "metadata": {"name": twin, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "type": "Declarative",
            "description": f"Replay twin of {source}: its tools answer from recorded conversations (kagent-fork)",
            "declarative": declarative,
        },
    })  # fmt: skip
    notes = []
    if row.config.model is not None:
        notes.append(
            f"{source} runs {row.config.model.type} {row.config.model.model}; kagent's agent table does not name its "
            f"ModelConfig, so the twin uses {model_config} (--model-config)"
        )
    if row.config.remote_agents:
        names = ", ".join(a.name for a in row.config.remote_agents)
        notes.append(f"left out: the sub-agents {names} (A2A): their tools are not replayed")
    if row.config.stdio_tools:
        notes.append("left out: the local (stdio) MCP servers, which only the agent's own pod can run")
    if row.config.execute_code:
        notes.append("left out: code execution (execute_code)")
    return docs, notes


def rendered_config(docs: list[dict[str, Any]], source: AgentConfig) -> dict[str, Any]:
    """The config kagent's controller writes into its agent table once the twin's manifests are applied: each
    RemoteMCPServer's URL as an `http_tools` server with the Agent's toolNames, requireApproval and allowedHeaders.
    For the embedded demo, which has no controller; the source's model stands for the ModelConfig."""
    urls = {d["metadata"]["name"]: d["spec"]["url"] for d in docs if d["kind"] == "RemoteMCPServer"}
    (agent,) = [d for d in docs if d["kind"] == "Agent"]
    declarative = agent["spec"]["declarative"]
    http_tools = [
        {"params": {"url": urls[ref["name"]], "headers": {}}, "tools": ref.get("toolNames", []),
         "allowed_headers": ref.get("allowedHeaders", []), "require_approval": ref.get("requireApproval", [])}
        for ref in (t["mcpServer"] for t in declarative["tools"])
    ]  # fmt: skip
    return {
        "model": msgspec.to_builtins(source.model) if source.model is not None else None,
        "description": agent["spec"]["description"], "instruction": declarative["systemMessage"],
        "http_tools": http_tools, "sse_tools": None, "remote_agents": None, "stream": False,
    }  # fmt: skip


def _scalar(value: object) -> str:
    return msgspec.json.encode(value).decode()  # a JSON scalar is a YAML flow scalar


def _literal(text: str) -> bool:
    """Whether a text reads back the same as a literal block (`|-`): several lines, none with a tab, a trailing
    space or a carriage return, not starting with a space, not ending with a newline."""
    lines = text.split("\n")
    return (
        len(lines) > 1 and not text.startswith(" ") and not text.endswith("\n")
        and all("\t" not in line and "\r" not in line and line == line.rstrip() for line in lines)
    )  # fmt: skip


def _yaml(value: object, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str) and _literal(v):
                lines.append(f"{pad}{k}: |-")
                lines.extend(f"{pad}  {line}" if line else "" for line in v.split("\n"))
            elif isinstance(v, dict | list) and v:
                lines.append(f"{pad}{k}:")
                lines.extend(_yaml(v, indent + 2))
            else:
                lines.append(f"{pad}{k}: {_scalar(v)}")
    elif isinstance(value, list):
        for item in value:
            inner = _yaml(item, indent + 2) if isinstance(item, dict | list) else [f"{pad}  {_scalar(item)}"]
            lines.append(f"{pad}- {inner[0].lstrip()}")
            lines.extend(inner[1:])
    return lines


def yaml_text(docs: list[dict[str, Any]], notes: list[str]) -> str:
    """The manifests as YAML documents for `kubectl apply -f -`, the notes as comments first."""
    head = [f"# {note}" for note in notes]
    return "\n".join([*head, "\n---\n".join("\n".join(_yaml(doc, 0)) for doc in docs)]) + "\n"
