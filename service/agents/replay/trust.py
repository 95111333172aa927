"""Which tools only read, on the operator's word for each server (docs/whatif.md, "What an arm's tools do").

A tool's name says nothing by itself: `k8s_get_resources` only reads on kagent's own tool server, and may do
anything on another. A server's `readOnlyHint` is its own claim (MCP calls annotations untrusted hints): a server
that lies about it would have its acting tool run during a replay. So a tool **reads** only when the operator
says so for its server:

- the shipped list (`read_only_tools.txt`, `default` in REPLAY_READ_ONLY_TOOLS) names kagent's own tool server's
  read tools, and counts on that server alone (REPLAY_SERVER_NAMES' `kagent/kagent-tool-server`, by default
  `http://kagent-tools.kagent:8084/mcp`, what kagent's chart installs);
- REPLAY_READ_ONLY_TOOLS's `server/tool` entries name one tool of one server;
- a server listed in REPLAY_TRUSTED_SERVERS has its `readOnlyHint` believed.

A server is its address as the agent's configuration names it (kagent's controller writes a RemoteMCPServer's
`spec.url` there, never its name), without a trailing slash. Everything else acts."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from service.config import KAGENT_TOOL_SERVER, Settings

ToolClass = Literal["asks", "reads", "acts"]
_SHIPPED = Path(__file__).with_name("read_only_tools.txt")


@functools.lru_cache(maxsize=1)
def shipped_read_only_names() -> frozenset[str]:
    """The shipped list of kagent's tool server's read tools (read_only_tools.txt: a name a line, `#` comments)."""
    lines = (line.partition("#")[0].strip() for line in _SHIPPED.read_text().splitlines())
    return frozenset(line for line in lines if line)


def address(url: str) -> str:
    """A server as the operator's settings name it: its URL without a trailing slash."""
    return url.rstrip("/")


@dataclass(frozen=True)
class Trust:
    """The operator's word: the tools counted read-only per server (`shipped` marks those from the shipped list)
    and the servers whose readOnlyHint counts."""

    read_only: dict[str, frozenset[str]]
    shipped: str | None  # the address the shipped list counts for (None: `default` not in REPLAY_READ_ONLY_TOOLS)
    trusted: frozenset[str]


@functools.lru_cache(maxsize=8)
def trust_of(settings: Settings) -> Trust:
    names = dict(settings.replay_server_names)
    shipped = names.get(KAGENT_TOOL_SERVER) if ("default", "") in settings.replay_read_only_tools else None
    by: dict[str, set[str]] = {}
    for server, tool in settings.replay_read_only_tools:
        if server != "default":
            by.setdefault(server, set()).add(tool)
    return Trust(
        read_only={k: frozenset(v) for k, v in by.items()},
        shipped=shipped,
        trusted=frozenset(settings.replay_trusted_servers),
    )


def classify(
    name: str, server: str, *, require_approval: Sequence[str], read_only_hint: bool | None, trust: Trust
) -> tuple[ToolClass, str]:
    """The tool's class and why: asks when kagent asks to approve it; reads on the operator's word for its server
    (module text); else acts."""
    where = address(server)
    if name in require_approval:
        return "asks", "require_approval: kagent asks a person first"
    if name in trust.read_only.get(where, frozenset()):
        return "reads", "REPLAY_READ_ONLY_TOOLS names it on this server"
    if where == trust.shipped and name in shipped_read_only_names():
        return "reads", "a read tool of kagent's own tool server (the shipped list)"
    if read_only_hint is True and where in trust.trusted:
        return "reads", "readOnlyHint, from a server in REPLAY_TRUSTED_SERVERS"
    if read_only_hint is True:
        return "acts", "its server says readOnlyHint, but the server is not in REPLAY_TRUSTED_SERVERS: a hint only"
    return "acts", "not read-only on the operator's word for this server, no approval"
