"""Who answers a replay: its agents (named, or the source's own), each checked as kagent names an agent, the
branches they make with the repeats, how they are reached (kagent's A2A endpoint, as the caller) and their
cards, asked for before anything is written."""

from __future__ import annotations

import asyncio

from service.agents import a2a_client
from service.agents.replay.terms import AGENT_REF, Replay, Span, whole
from service.errors import NotConfigured, Unprocessable
from service.kagent import dialects
from service.services import Services

MAX_BRANCHES = 8
MAX_REPEATS = 5
# How a what-if's and an experiment's refusals name the agents (their bodies name them differently).
_NAMED = {"whatif": "agent_ref", "experiment": "each of agents"}


def a2a_base(svc: Services) -> str:
    base = svc.settings.kagent_a2a_url
    if base is None:
        raise NotConfigured(
            "what-ifs need kagent's A2A endpoint: set KAGENT_A2A_URL (e.g. http://kagent-controller.kagent:8083/api/a2a)"
        )
    return base


def checked_agent_ref(value: str, what: str = "agent_ref") -> str:
    if not AGENT_REF.match(value):
        raise Unprocessable(f"{what} must be namespace/name of a kagent agent, got {value!r}")
    return value


def ready(svc: Services, replay: Replay) -> None:
    """What is refused before anything is read: no A2A endpoint, agents named wrongly (their shape)."""
    a2a_base(svc)
    if replay.agents is not None:
        _agents(replay, None)


def branches(replay: Replay, span: Span) -> list[tuple[str, int]]:
    """(agent, repeat) of every branch: each named agent, else the source's own, `repeats` times."""
    return [(ref, repeat) for ref in _agents(replay, span) for repeat in range(1, int(replay.repeats) + 1)]


def _agents(replay: Replay, span: Span | None) -> list[str]:
    if replay.agents is not None and not replay.agents:
        raise Unprocessable("agents must name 1 to 8 agents (namespace/name), got an empty list")
    repeats = whole(replay.repeats, "repeats")
    if not 1 <= repeats <= MAX_REPEATS:
        raise Unprocessable(f"repeats must be 1 to {MAX_REPEATS}, got {repeats}")
    own = span.agent_ref if span is not None else None
    agents = replay.agents if replay.agents is not None else ([own] if own else [])
    if not agents and span is not None:
        if replay.kind == "whatif":
            raise Unprocessable(
                f"the source session's agent {span.source.agent_id!r} is not namespace/name: give agent_ref"
            )
        raise Unprocessable("agents: the source session's agent is not namespace/name: name the agents")
    for ref in agents:
        checked_agent_ref(ref, _NAMED[replay.kind])
    twice = sorted({a for a in agents if agents.count(a) > 1})
    if twice:
        raise Unprocessable(f"agents names {', '.join(twice)} more than once (use repeats to run an agent again)")
    if len(agents) * repeats > MAX_BRANCHES:
        raise Unprocessable(
            f"{len(agents)} agents x {repeats} repeats is {len(agents) * repeats} branches, over {MAX_BRANCHES}"
        )
    return agents


def headers(user_id: str, authorization: str | None) -> dict[str, str]:
    """The caller's identity as kagent's A2A endpoint reads it (X-User-Id; the bearer token in trusted-proxy mode)."""
    out = {"X-User-Id": user_id}
    if authorization is not None:
        out["Authorization"] = authorization
    return out


def agent(svc: Services, agent_ref: str, dialect: str, hdrs: dict[str, str], timeout: float) -> a2a_client.Agent:
    """An agent as kagent's A2A endpoint serves it (KAGENT_A2A_URL/<namespace>/<name>/), asked as the caller."""
    return a2a_client.Agent(
        ref=agent_ref, url=a2a_client.agent_url(a2a_base(svc), agent_ref), dialect=dialects.TaskDialect(dialect),
        headers=hdrs, timeout=timeout,
    )  # fmt: skip


async def cards(
    svc: Services, agent_refs: list[str], dialect: dialects.TaskDialect, hdrs: dict[str, str]
) -> dict[str, a2a_client.Card]:
    """Each agent's card, asked for at once through kagent's A2A endpoint: a 422 naming the first agent
    that does not answer (before anything is written)."""
    timeout = min(10.0, float(svc.settings.whatif_timeout_seconds))

    async def one(ref: str) -> a2a_client.Card:
        return await a2a_client.fetch_card(agent(svc, ref, dialect.value, hdrs, timeout))

    found = await asyncio.gather(*(one(ref) for ref in agent_refs), return_exceptions=True)
    for ref, card in zip(agent_refs, found, strict=True):
        if isinstance(card, a2a_client.AgentError):
            raise Unprocessable(f"the agent {ref} did not answer through kagent's A2A endpoint: {card}")
        if isinstance(card, BaseException):
            raise card
    return {ref: card for ref, card in zip(agent_refs, found, strict=True) if isinstance(card, a2a_client.Card)}
