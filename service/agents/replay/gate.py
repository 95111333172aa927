"""What a replay may cost, checked before anything is written: every branch sends every turn's context to
its agent's model, and the judge its calls to its own (the cost gate, in tokens; `max_usd`, in money where the
models are priced), and every branch is a fork (FORK_RATE_PER_MINUTE)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from service.agents.replay.terms import Replay, Span, whole_tokens
from service.errors import Unprocessable
from service.kagent.store.agents import ModelConfig
from service.kagent.store.judgments import JudgeCall
from service.operations import prices
from service.services import Services


def estimated_calls(agents: int, repeats: int) -> int:
    """The most calls a judgment of an experiment makes (every branch completed): two a pair."""
    return 2 * (agents * repeats + agents * (agents - 1) // 2 * repeats)


def message_tokens(calls: list[JudgeCall]) -> int:
    """What a judgment's calls send the judge's model, estimated as the transcript estimates (four characters a
    token): only the calls that will be sent (a pair not judged is not)."""
    return sum(len(c.message) for c in calls if c.error is None) // 4


def judge_tokens(replay: Replay, span: Span) -> int:
    """What the judge's calls may send its model: at most two calls a pair (every branch completed), each the
    conversation before the last re-asked turn and the source's continuation once more (its two continuations,
    each about the source's size)."""
    return sum(_judge_calls(replay, span))


def _judge_calls(replay: Replay, span: Span) -> list[int]:
    """The tokens each of the judge's calls may send (none without a judge)."""
    if replay.judge is None:
        return []
    calls = estimated_calls(len(replay.agents or [None]), int(replay.repeats))
    return [span.tokens[-1] + (span.tokens[-1] - span.tokens[0])] * calls


def gate(svc: Services, replay: Replay, span: Span) -> None:
    """422 when the branches' contexts are over `max_context_tokens` (default WHATIF_MAX_CONTEXT_TOKENS), or
    when they need more forks than FORK_RATE_PER_MINUTE allows at all."""
    branches = replay.branches
    limit = whole_tokens(replay.max_context_tokens, svc.settings.whatif_max_context_tokens)
    estimate = branches * sum(span.tokens) + judge_tokens(replay, span)
    if estimate > limit:
        what = (
            "the turn's context is" if branches * len(span.turns) == 1 else "the contexts of every branch's turns are"
        )
        if replay.judge is not None:
            what = "the contexts of every branch's turns and of the judge's calls are"
        raise Unprocessable(
            f"{what} about {estimate} tokens, over the limit of {limit}: each is sent to the agent's model. "
            "Re-ask fewer turns, or fewer agents or repeats, or raise the limit (max_context_tokens in the "
            "request; the service's default is WHATIF_MAX_CONTEXT_TOKENS)"
        )
    rate = svc.settings.fork_rate_per_minute
    if rate and branches > rate:
        raise Unprocessable(f"{branches} branches need {branches} forks, over FORK_RATE_PER_MINUTE ({rate})")


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """What a start would send the models, and its price: the branches' turns and the judge's calls, each priced
    as one request of that many input tokens at the genai-prices table's price for the model its agent's
    configuration names. The models' answers are not counted (what a model will write is not known before it
    writes it): `usd` is what the start costs at the least. None when a model's price is unknown (`unpriced`)."""

    branch_tokens: int
    judge_tokens: int
    usd: float | None
    unpriced: list[str]  # the agents (the judge too) whose model's price is not known

    @property
    def tokens(self) -> int:
        return self.branch_tokens + self.judge_tokens


def estimate(replay: Replay, span: Span, branches: list[str], models: Mapping[str, ModelConfig | None]) -> Estimate:
    """`branches`: each branch's agent (one entry a branch); `models`: each agent's model, the judge's too."""
    asked = [(ref, [(t, 0) for t in span.tokens]) for ref in branches]
    if replay.judge is not None:
        asked.append((replay.judge.agent, [(t, 0) for t in _judge_calls(replay, span)]))
    total: float | None = 0.0
    unpriced: list[str] = []
    for ref, calls in asked:
        usd = prices.cost_usd(prices.priced_model(models.get(ref)), calls)
        if usd is None:
            unpriced.append(ref)
        elif total is not None:
            total += usd
    return Estimate(
        branch_tokens=len(branches) * sum(span.tokens), judge_tokens=judge_tokens(replay, span),
        usd=None if unpriced else round(total or 0.0, 6), unpriced=list(dict.fromkeys(unpriced)),
    )  # fmt: skip


def money(replay: Replay, found: Estimate) -> None:
    """422 when the start's estimated price is over `max_usd`, or cannot be known while a budget is set."""
    if replay.max_usd is None:
        return
    budget = prices.usd_text(replay.max_usd)
    if found.usd is None:
        raise Unprocessable(
            f"max_usd is {budget}, but the price of {', '.join(found.unpriced)}'s model is not known (genai-prices "
            "has no price for it, or kagent's agent table names no model): the start's cost cannot be held to it. "
            "Leave max_usd out, or use agents whose models are priced"
        )
    if found.usd > replay.max_usd:
        what = "every branch's turns and the judge's calls" if found.judge_tokens else "every branch's turns"
        raise Unprocessable(
            f"the start is estimated at {prices.usd_text(found.usd)} at least (the {found.tokens} input tokens of "
            f"{what}), over max_usd {budget}: re-ask fewer turns, or fewer agents or repeats, or raise max_usd"
        )
