"""Who answers a replay: its agents (those named, or the source's own), each `repeats` times, how they are
reached (kagent's A2A endpoint, as the caller) and their cards, asked for at once before anything is written."""

from __future__ import annotations

import asyncio

from service.agents import a2a_client
from service.agents.replay.terms import Replay, Span
from service.errors import NotConfigured, Unprocessable
from service.kagent import dialects
from service.services import Services


def a2a_base(svc: Services) -> str:
    base = svc.settings.kagent_a2a_url
    if base is None:
        raise NotConfigured(
            "what-ifs need kagent's A2A endpoint: set KAGENT_A2A_URL (e.g. http://kagent-controller.kagent:8083/api/a2a)"
        )
    return base


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


async def cast(
    svc: Services, replay: Replay, span: Span, hdrs: dict[str, str]
) -> tuple[list[tuple[str, int]], dict[str, a2a_client.Card]]:
    """(agent, repeat) of every branch, and each agent's card (and the judge's): a 422 when no agent is named and
    the source's own is not namespace/name, or naming the first agent that does not answer through kagent's A2A
    endpoint."""
    own = span.agent_ref
    refs = replay.agents if replay.agents is not None else ([own] if own else [])
    if not refs and replay.kind == "whatif":
        raise Unprocessable(
            f"the source session's agent {span.source.agent_id!r} is not namespace/name: give agent_ref"
        )
    if not refs:
        raise Unprocessable("agents: the source session's agent is not namespace/name: name the agents")
    timeout = min(10.0, float(svc.settings.whatif_timeout_seconds))

    async def one(ref: str) -> a2a_client.Card:
        return await a2a_client.fetch_card(agent(svc, ref, span.dialect.value, hdrs, timeout))

    # The judge's card is asked for with the agents' (a judge that does not answer is refused as an agent is).
    asked = [*refs, *([replay.judge.agent] if replay.judge is not None else [])]
    found = await asyncio.gather(*(one(ref) for ref in asked), return_exceptions=True)
    for i, (ref, card) in enumerate(zip(asked, found, strict=True)):
        if isinstance(card, a2a_client.AgentError):
            who = "the judge" if i >= len(refs) else "the agent"
            raise Unprocessable(f"{who} {ref} did not answer through kagent's A2A endpoint: {card}")
        if isinstance(card, BaseException):
            raise card
    cards = {ref: card for ref, card in zip(asked, found, strict=True) if isinstance(card, a2a_client.Card)}
    return [(ref, repeat) for ref in refs for repeat in range(1, int(replay.repeats) + 1)], cards
