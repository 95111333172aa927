"""A judgment's numbers: how each pair came out (both orders agreeing, else a tie), each agent's wins, ties and
losses against the source and against each other agent, its win rate (a tie counts half) with its 95 % Wilson
score interval over the judged pairs, the outcome that interval allows (better, worse, inconclusive, with how many
more repeats would settle it at the rate seen), and one line a person can act on. Pure: no database, no network
(judge.py runs the calls, grid.py shows this)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from service.operations.prices import usd_text

Z95 = 1.96  # the normal quantile of a two-sided 95 % interval
# The most judged pairs `repeats_to_settle` looks at: a rate this close to 50 % is said not to settle.
SETTLE_CAP = 100_000

# How a pair came out, from the left one's side: left, right, tie; invalid (an answer without the JSON);
# failed (a call without an answer: timed out, interrupted, cancelled); pending (not asked yet).
JUDGED = ("left", "right", "tie")


def side(winner: str | None, swapped: bool) -> str | None:
    """What one call's winner says of the pair: the left one, the right one, a tie, invalid; None: no answer.
    A is the left one unless the call was swapped."""
    if winner == "A":
        return "right" if swapped else "left"
    if winner == "B":
        return "left" if swapped else "right"
    return winner


@dataclass(frozen=True, kw_only=True)
class Asked:
    """One call as the verdict reads it."""

    winner: str | None  # A, B, tie, invalid; None: not answered (yet, or `error`)
    swapped: bool
    error: str | None
    ended: bool


def pair_outcome(calls: Sequence[Asked]) -> tuple[str, bool | None]:
    """(outcome, consistent) of a pair asked in both orders: both answers naming the same side make the verdict,
    different ones a tie (consistent False); an answer without the JSON makes the pair invalid, a call without
    an answer failed, one not answered yet pending (consistent None)."""
    if any(not c.ended for c in calls) or len(calls) < 2:
        return "pending", None
    if any(c.error is not None or c.winner is None for c in calls):
        return "failed", None
    sides = [side(c.winner, c.swapped) for c in calls]
    if "invalid" in sides:
        return "invalid", None
    if len(set(sides)) == 1:
        return str(sides[0]), True
    return "tie", False


def score(outcome: str) -> float:
    """The left one's score in a judged pair: 1 a win, 0.5 a tie, 0 a loss."""
    return {"left": 1.0, "tie": 0.5, "right": 0.0}[outcome]


def wilson(rate: float, n: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of a rate seen over n trials. Never a point while n is finite (3 of 3 is
    about 44-100 %): a bootstrap over identical outcomes cannot move, which no data supports. A tie counts half a
    win; its variance is below a coin's, so p(1 - p) here overstates the spread: the interval errs wide."""
    z2 = Z95 * Z95
    centre = (rate + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(rate * (1 - rate) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def outcome_of(low: float, high: float) -> str:
    """better when the whole interval is above 50 %, worse when below, else inconclusive."""
    return "better" if low > 0.5 else "worse" if high < 0.5 else "inconclusive"


def repeats_to_settle(rate: float, n: int) -> int | None:
    """How many judged pairs in all would make the Wilson interval exclude 50 %, were the rate to stay as seen
    (the interval narrows as n grows at a fixed rate, so the least such n is found by bisection); None when the
    rate is 50 % or so close to it that SETTLE_CAP pairs would not settle it."""
    if outcome_of(*wilson(rate, SETTLE_CAP)) == "inconclusive":
        return None
    low, high = n, SETTLE_CAP  # inconclusive at low, settled at high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if outcome_of(*wilson(rate, mid)) != "inconclusive" else (mid, high)
    return high


@dataclass(frozen=True, kw_only=True)
class Tally:
    """One side's record over its judged pairs (from the side of `subject`, against `opponent`)."""

    wins: int
    ties: int
    losses: int
    not_judged: int  # invalid or failed pairs: counted neither way
    win_rate: float | None
    ci_low: float | None
    ci_high: float | None
    outcome: str | None  # better, worse, inconclusive; None: nothing judged
    settle_with: int | None  # inconclusive: about how many judged pairs in all would settle it at this rate
    more_repeats: int | None  # the same, counted from the pairs judged so far
    invalid: int = 0  # of not_judged: an answer without the JSON
    failed: int = 0  # of not_judged: a call without an answer, or a continuation without one (never sent)

    @property
    def judged(self) -> int:
        return self.wins + self.ties + self.losses

    @property
    def within_chance(self) -> bool:
        return self.outcome == "inconclusive"


def tally(outcomes: Sequence[str]) -> Tally:
    """The record of the left side over pairs' outcomes (pending ones are left out)."""
    judged = [o for o in outcomes if o in JUDGED]
    scores = [score(o) for o in judged]
    rate = low = high = outcome = settle = more = None
    if scores:
        exact = statistics.fmean(scores)
        lo, hi = wilson(exact, len(scores))
        rate, low, high, outcome = round(exact, 4), round(lo, 4), round(hi, 4), outcome_of(lo, hi)
        if outcome == "inconclusive" and (settle := repeats_to_settle(exact, len(scores))) is not None:
            more = settle - len(scores)
    return Tally(
        wins=judged.count("left"), ties=judged.count("tie"), losses=judged.count("right"),
        not_judged=sum(1 for o in outcomes if o in ("invalid", "failed")), win_rate=rate, ci_low=low, ci_high=high,
        outcome=outcome, settle_with=settle, more_repeats=more, invalid=outcomes.count("invalid"),
        failed=outcomes.count("failed"),
    )  # fmt: skip


def flipped(outcome: str) -> str:
    """The same outcome from the other side."""
    return {"left": "right", "right": "left"}.get(outcome, outcome)


def _pct(value: float) -> str:
    return f"{round(value * 100)}"


def line(
    subject: str, opponent: str, t: Tally, *, work: str | None = None, tokens: str | None = None,
    money: str | None = None, time: str | None = None,
) -> str:  # fmt: skip
    """One line a person can act on, tied to the question (is it better than the other, here, and at what price):
    the outcome, k of n, the interval, then what it did and cost against the other, e.g. "kagent/sonnet-agent:
    inconclusive against the source over 6 judged continuations: 5 better, 1 worse (83 %, 95 % CI 44-97 %), 4 tool
    calls in 2 turns against the source's 6 in 2, 0.6x the tokens, $0.012 against $0.020 a continuation, 12 s
    against 30 s; about 3 more repeats would settle it at this rate". `better` and `worse` only when the interval
    says so."""
    if t.win_rate is None or t.ci_low is None or t.ci_high is None:
        why = f" ({t.not_judged} without a usable answer)" if t.not_judged else ""
        text = f"{subject}: no continuation judged against {opponent} yet{why}"
    else:
        word = {"better": "better than", "worse": "worse than"}.get(t.outcome or "", "inconclusive against")
        ties = f", {t.ties} tied" if t.ties else ""
        text = (
            f"{subject}: {word} {opponent} over {t.judged} judged continuations: {t.wins} better, {t.losses} worse"
            f"{ties} ({_pct(t.win_rate)} %, 95 % CI {_pct(t.ci_low)}-{_pct(t.ci_high)} %)"
        )
        if t.not_judged:
            text += f", {t.not_judged} not judged"
    text += "".join(f", {x}" for x in (work, tokens, money, time) if x)
    if t.within_chance:
        if t.more_repeats is None:
            text += "; an even record: more repeats at this rate would not settle it"
        else:
            more = f"{t.more_repeats} more repeat{'s' if t.more_repeats > 1 else ''} would"
            text += f"; about {more} settle it at this rate"
    return text


def work(subject: tuple[float, float], opponent: tuple[float, float], whose: str) -> str:
    """'4 tool calls in 2 turns against the source's 6 in 2': (tool calls, turns) a continuation, each side."""
    return (
        f"{subject[0]:.3g} tool calls in {subject[1]:.3g} turns against {whose} {opponent[0]:.3g} in {opponent[1]:.3g}"
    )


def seconds(subject: float, opponent: float) -> str:
    """'12 s against 30 s': the agent's working time a continuation, each side."""
    return f"{subject:.3g} s against {opponent:.3g} s"


def ratio(subject: float | None, opponent: float | None) -> str | None:
    """'0.6x the tokens'; None when the other side has none to compare with."""
    if subject is None or not opponent:
        return None
    return f"{subject / opponent:.1f}x the tokens"


def dollars(subject: float | None, opponent: float | None) -> str:
    """'$0.012 against $0.020', 'money unknown' when either side's cost is not known (never a guess)."""
    if subject is None or opponent is None:
        return "money unknown"
    return f"{usd_text(subject)} against {usd_text(opponent)}"


def ending(calls: Sequence[tuple[str | None, str | None]]) -> tuple[str, str | None]:
    """How a judgment whose calls, each (winner, error), all ended ended: `completed` when one call at least gave a
    usable answer (A, B or tie), else `failed`, saying why in words (a verdict of nothing is no verdict)."""
    if any(winner in ("A", "B", "tie") for winner, _ in calls):
        return "completed", None
    if not calls:
        return "failed", "nothing was judged: no branch completed"
    failed = [error or "no answer" for winner, error in calls if error is not None or winner is None]
    invalid, n = len(calls) - len(failed), len(calls)
    parts = [f"{len(failed)} of {n} calls failed ({failed[0]})"] if failed else []
    parts += [f"{invalid} of {n} answers held no JSON verdict"] if invalid else []
    return "failed", "no call to the judge gave a usable answer: " + "; ".join(parts)
