"""A judgment's numbers: how each pair came out (both orders agreeing, else a tie), each agent's wins, ties and
losses against the source and against each other agent, its win rate (a tie counts half) with a 95 % bootstrap
interval over the judged pairs (a fixed seed: the same answer every time it is read), and one line a person can
act on. Pure: no database, no network (judge.py runs the calls, grid.py shows this)."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# The bootstrap: BOOTSTRAP resamples of the judged pairs' scores (with replacement, as many as there are), drawn
# by random.Random(SEED).choices; the interval is the sorted means' [floor(0.025 B)] and [ceil(0.975 B) - 1].
SEED = 35
BOOTSTRAP = 2000
Z95 = 1.96

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


def bootstrap_interval(scores: Sequence[float]) -> tuple[float, float]:
    """The 95 % bootstrap interval of the scores' mean (see SEED)."""
    rng = random.Random(SEED)
    n = len(scores)
    means = sorted(sum(rng.choices(scores, k=n)) / n for _ in range(BOOTSTRAP))
    return means[math.floor(0.025 * BOOTSTRAP)], means[math.ceil(0.975 * BOOTSTRAP) - 1]


def repeats_to_settle(scores: Sequence[float]) -> int | None:
    """How many judged pairs would make a 95 % interval of this spread exclude 50 %, were the rate to stay
    (normal approximation: (1.96 sd / |rate - 0.5|)^2); None when the rate is exactly 50 % (no number would)."""
    rate = statistics.fmean(scores)
    if rate == 0.5:
        return None
    sd = statistics.pstdev(scores)
    return max(len(scores) + 1, math.ceil((Z95 * sd / abs(rate - 0.5)) ** 2))


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
    settle_with: int | None  # when the interval holds 50 %: about how many judged pairs would settle it

    @property
    def judged(self) -> int:
        return self.wins + self.ties + self.losses

    @property
    def within_chance(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None and self.ci_low <= 0.5 <= self.ci_high


def tally(outcomes: Sequence[str]) -> Tally:
    """The record of the left side over pairs' outcomes (pending ones are left out)."""
    judged = [o for o in outcomes if o in JUDGED]
    scores = [score(o) for o in judged]
    rate = low = high = None
    settle = None
    if scores:
        rate = round(statistics.fmean(scores), 4)
        low, high = (round(v, 4) for v in bootstrap_interval(scores))
        if low <= 0.5 <= high:
            settle = repeats_to_settle(scores)
    return Tally(
        wins=judged.count("left"), ties=judged.count("tie"), losses=judged.count("right"),
        not_judged=sum(1 for o in outcomes if o in ("invalid", "failed")), win_rate=rate, ci_low=low, ci_high=high,
        settle_with=settle,
    )  # fmt: skip


def flipped(outcome: str) -> str:
    """The same outcome from the other side."""
    return {"left": "right", "right": "left"}.get(outcome, outcome)


def _pct(value: float) -> str:
    return f"{round(value * 100)}"


def line(subject: str, opponent: str, t: Tally, *, tokens: str | None = None, money: str | None = None) -> str:
    """One line a person can act on, e.g. "kagent/sonnet-agent: better than the source in 5 of 6 judged
    continuations (83 %, 95 % CI 50-100 %), 0.6x the tokens, $0.012 against $0.020"."""
    if t.win_rate is None or t.ci_low is None or t.ci_high is None:
        why = f" ({t.not_judged} without a usable answer)" if t.not_judged else ""
        text = f"{subject}: no continuation judged against {opponent} yet{why}"
    else:
        n = t.judged
        if t.win_rate == 0.5:
            head = f"even with {opponent} over {n} judged continuations: {t.wins} better, {t.losses} worse"
            ties = f", {t.ties} tied"
        elif t.win_rate > 0.5:
            head = f"better than {opponent} in {t.wins} of {n} judged continuations"
            ties = f", {t.ties} tied" if t.ties else ""
        else:
            head = f"worse than {opponent} in {t.losses} of {n} judged continuations"
            ties = f", {t.ties} tied" if t.ties else ""
        text = f"{subject}: {head}{ties} ({_pct(t.win_rate)} %, 95 % CI {_pct(t.ci_low)}-{_pct(t.ci_high)} %)"
        if t.not_judged:
            text += f", {t.not_judged} not judged"
    text += "".join(f", {x}" for x in (tokens, money) if x)
    if t.within_chance:
        if t.settle_with is None:
            text += "; within chance: an even record, which more repeats would not settle"
        else:
            text += f"; within chance: about {t.settle_with} repeats would settle it"
    return text


def ratio(subject: float | None, opponent: float | None) -> str | None:
    """'0.6x the tokens'; None when the other side has none to compare with."""
    if subject is None or not opponent:
        return None
    return f"{subject / opponent:.1f}x the tokens"


def dollars(subject: float | None, opponent: float | None) -> str:
    """'$0.012 against $0.020', 'money unknown' when either side's cost is not known (never a guess)."""
    if subject is None or opponent is None:
        return "money unknown"
    return f"{usd(subject)} against {usd(opponent)}"


def usd(amount: float) -> str:
    """Dollars to a tenth of a cent, and a small amount to its first two digits ($0.00012, not $0.000: a demo's or
    a short turn's price is fractions of a cent, and $0.000 against $0.000 would say nothing)."""
    if amount <= 0 or amount >= 0.001:
        return f"${amount:.3f}"
    return f"${amount:.{1 - math.floor(math.log10(amount))}f}"
