"""What a replay may cost, checked before anything is written: every branch sends every turn's context to
its agent's model (the cost gate), and every branch is a fork (FORK_RATE_PER_MINUTE)."""

from __future__ import annotations

from service.agents.replay.judge import estimated_calls
from service.agents.replay.terms import Replay, Span, whole_tokens
from service.errors import Unprocessable
from service.services import Services


def judge_tokens(replay: Replay, span: Span) -> int:
    """What the judge's calls may send its model: at most two calls a pair (every branch completed), each the
    conversation before the last re-asked turn and the source's continuation once more (its two continuations,
    each about the source's size)."""
    if replay.judge is None:
        return 0
    calls = estimated_calls(len(replay.agents or [None]), int(replay.repeats))
    return calls * (span.tokens[-1] + (span.tokens[-1] - span.tokens[0]))


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
