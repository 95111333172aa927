"""Which turn a replay twin's tool calls belong to (docs/replay-twins.md, "Attribution").

Nothing a branch sends survives kagent's hop to the agent as its own: kagent's controller forwards to an agent
only the upstream auth headers (Authorization, X-User-Id) and W3C traceparent (go/core/internal/a2a/
client_interceptors.go, both lines), and kagent-adk forwards to an MCP server only the request headers its
`allowed_headers` lists. The caller's user id survives both hops; nothing names the branch. So a twin serves one
turn at a time per user: before a turn of a branch whose agent is a twin is sent, its runner takes the lease of
every agent the twin's servers stand in for, for the branch's user, in the database (so across replicas); it
renews it every beat while the turn runs and gives it back when the turn ends. Every call to those endpoints
from that user meanwhile is that turn's. A lease its runner stopped renewing expires after three beats.

Its cost: turns of branches on twins of one agent, for one user, run one after another, not side by side."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager, suppress
from typing import Literal, Protocol, TypeVar
from urllib.parse import urlsplit

from service.agents.replay.player import NotOurs
from service.agents.replay.steady import steady
from service.kagent.store.agents import AgentConfig, McpServerConfig
from service.kagent.store.base import Connection
from service.kagent.store.jobs import WhatifJob
from service.kagent.store.replay import Holder
from service.services import Services

log = logging.getLogger("kagent_fork")
T = TypeVar("T")
POLL_SECONDS = 0.5
# The endpoint's path in a twin's server URL: /replay/mcp/<namespace>/<name>/<server>.
PATH = re.compile(r"/replay/mcp/([a-z0-9]([-a-z0-9]*[a-z0-9])?)/([a-z0-9]([-.a-z0-9]*[a-z0-9])?)/([-a-z0-9]+)/?$")


def server_key(url: str) -> str:
    """The name of one of an agent's MCP servers in the endpoint's path: its host's first label and a hash of its
    URL (kagent's config names a server by its URL alone), so that a twin printed from another configuration
    of the agent finds no server instead of the wrong one."""
    label = re.sub(r"[^a-z0-9-]", "-", (urlsplit(url).hostname or "server").split(".")[0].lower()).strip("-")
    return f"{label[:40] or 'server'}-{hashlib.sha256(url.encode()).hexdigest()[:8]}"


def servers(config: AgentConfig) -> dict[str, tuple[McpServerConfig, Literal["http", "sse"]]]:
    """The agent's MCP servers a twin can stand in for, by their key: streamable HTTP and SSE."""
    found: dict[str, tuple[McpServerConfig, Literal["http", "sse"]]] = {}
    for server in config.http_tools or []:
        found[server_key(server.params.url)] = (server, "http")
    for server in config.sse_tools or []:
        found[server_key(server.params.url)] = (server, "sse")
    return found


def twin_of(url: str) -> tuple[str, str] | None:
    """(namespace/name, server) of the agent server a replay endpoint URL stands in for; None: not one."""
    found = PATH.search(urlsplit(url).path)
    return None if found is None else (f"{found.group(1)}/{found.group(3)}", found.group(5))


def stands_in_for(config: AgentConfig | None) -> list[str]:
    """The agents (namespace/name) whose servers an arm's MCP servers stand in for through the replay endpoint:
    the leases its turns take. Empty: the arm is no replay twin."""
    urls = [s.params.url for s in [*(config.http_tools or []), *(config.sse_tools or [])]] if config else []
    return sorted({found[0] for url in urls if (found := twin_of(url)) is not None})


class Host(Protocol):
    svc: Services
    id: str

    async def beating(self, job: WhatifJob, work: Awaitable[T]) -> T: ...


@asynccontextmanager
async def held(host: Host, job: WhatifJob, ordinal: int) -> AsyncIterator[None]:
    """The block runs while turn `ordinal` of `job` holds the leases of the agents its twin stands in for (none
    when its agent is no twin), waited for while the job beats."""
    svc, where = host.svc, f"what-if {job.id}"
    row = await steady(svc, lambda conn, _: svc.store.agents.get(conn, job.agent_ref), where)
    agents = stands_in_for(row.config if row is not None else None)
    if not agents:
        yield
        return
    holder, seconds = Holder(job_id=job.id, ordinal=ordinal), 3 * svc.settings.whatif_heartbeat_seconds

    async def take(agent: str) -> bool:
        async def step(conn: Connection, _: bool) -> bool:
            return await svc.store.replay.take_lease(conn, agent, job.user_id, holder, host.id, seconds)

        return await steady(svc, step, where)

    async def still_ours(conn: Connection, _: bool) -> bool:
        return await svc.store.jobs.whatif_heartbeat(conn, job.id, host.id)

    async def take_all() -> None:
        for agent in agents:  # always in the same order: two turns never wait for each other's second lease
            # Another replica's turn may hold it: only the database can say when it is free, so it is asked again,
            # as long as the job is still this runner's (a branch cancelled while it waits stops waiting).
            while True:
                if await take(agent):
                    break
                if not await steady(svc, still_ours, where):
                    raise NotOurs
                await asyncio.sleep(POLL_SECONDS)

    async def renew() -> None:
        while True:
            await asyncio.sleep(svc.settings.whatif_heartbeat_seconds)
            for agent in agents:
                try:
                    if not await take(agent):
                        log.warning("%s: the lease of %s was lost to another turn", where, agent)
                except Exception:  # renewing again at the next beat; the lease lasts three
                    log.exception("%s: the lease of %s was not renewed", where, agent)

    async def give_back() -> None:
        await steady(svc, lambda conn, _: svc.store.replay.give_leases(conn, holder), where)

    try:
        await host.beating(job, take_all())
    except NotOurs:
        await give_back()  # the leases it took before it stopped waiting
        raise
    renewing = asyncio.get_running_loop().create_task(renew(), name=f"lease-{job.id}")
    try:
        yield
    finally:
        renewing.cancel()
        with suppress(asyncio.CancelledError):
            await renewing
        await give_back()
