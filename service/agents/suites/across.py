"""A suite run's verdict across its cases: per agent, its record against the source over every judged
conversation, a 95 % interval that counts conversations (a bootstrap over conversations, a case's repeats and the
cases of one conversation drawn together, never narrower than the Wilson interval with n = the conversations
judged), the outcome that interval allows, the
medians per case of what it cost, one line a person can act on, and a headline. Pure: no database, no network
(runs.py gathers each case's record from its experiment's verdict; this adds them up).

Why conversations and not pairs: the repeats of one case are not independent evidence about the agent (the same
question, the same history), nor are two cases of one chat (the same user, the same thread), so a run of 12
conversations x 5 repeats is 12 pieces of evidence, not 60, and 6 cases of 2 chats are 2. A bootstrap over pairs
would claim several times the certainty the data holds.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

import msgspec

from service.agents.replay.verdict import outcome_of, wilson
from service.operations.prices import usd_text

BOOTSTRAP_DRAWS = 2000
SEED = 49  # fixed: the same run read twice gives the same interval


class CaseCost(msgspec.Struct, frozen=True, kw_only=True):
    """What one agent's continuation of one case cost, the mean over its repeats (usd None: unknown)."""

    usd: float | None
    total_tokens: float
    tool_calls: float
    turns: float
    duration_seconds: float


class AgentCase(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's record on one case against the source's own continuation (its pairs, every repeat)."""

    agent_ref: str
    wins: int
    ties: int
    losses: int
    invalid: int = 0
    failed: int = 0
    control: bool = False
    cost: CaseCost | None = None

    @property
    def judged(self) -> int:
        return self.wins + self.ties + self.losses

    @property
    def score(self) -> float:
        return self.wins + 0.5 * self.ties


class CaseResult(msgspec.Struct, frozen=True, kw_only=True):
    """A case's records, one per agent, as its experiment's verdict gave them; `best`: the agent that did best
    against the source on it (None: no agent judged, or a tie at the top)."""

    case_id: str
    session_id: str
    experiment_ids: list[str]
    by_agent: list[AgentCase]
    best: str | None = None
    source_usd: float | None = None  # the source's own continuation's price (None: unknown)


class PerCase(msgspec.Struct, frozen=True, kw_only=True):
    """Medians per case of an agent's continuations' figures; `usd` None when a case's price is unknown."""

    usd: float | None
    total_tokens: float
    tool_calls: float
    turns: float
    duration_seconds: float


class RunCost(msgspec.Struct, frozen=True, kw_only=True):
    per_case: PerCase
    total_usd: float | None


class AgentAcross(msgspec.Struct, frozen=True, kw_only=True):
    agent_ref: str
    control: bool
    cases: int  # cases with at least one judged pair
    conversations: int  # the sessions those cases are points of: the n of the interval
    wins: int  # pairs, over every case and repeat
    ties: int
    losses: int
    invalid: int
    failed: int
    win_rate: float | None  # a tie counts half, over every judged pair
    ci95: list[float] | None  # the bootstrap over cases, widened to Wilson's with n = cases
    outcome: str | None  # better, worse, inconclusive; None: nothing judged
    cost: RunCost
    summary: str


class Across(msgspec.Struct, frozen=True, kw_only=True):
    headline: str
    by_agent: list[AgentAcross]
    control: AgentAcross | None  # the source's own agent run again: the noise floor


def best_of(records: Sequence[AgentCase]) -> str | None:
    """Who did best on a case: the agent with the highest win rate when it beat the source there (over 50 %),
    "source" when every agent scored under 50 %; None for no judged pair, a tie at the top, or an even record
    (controls aside)."""
    rated = sorted(((r.score / r.judged, r.agent_ref) for r in records if r.judged and not r.control), reverse=True)
    if not rated or (len(rated) > 1 and rated[0][0] == rated[1][0]):
        return None
    if rated[0][0] > 0.5:
        return rated[0][1]
    return "source" if rated[0][0] < 0.5 else None


def interval(cases: Sequence[tuple[float, int]], draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float]:
    """The 95 % interval of the pooled win rate over units (conversations) given as (score, judged pairs): a
    percentile bootstrap drawing whole units with a fixed seed, then widened to the Wilson interval with n = the
    number of units (a bootstrap of 3 identical units cannot move; 3 conversations do not prove a certainty)."""
    n = len(cases)
    scores, judged = [s for s, _ in cases], [j for _, j in cases]
    rate = sum(scores) / sum(judged)
    # Each draw is `rng.randrange(n)` written out (CPython's _randbelow: the same numbers, tested), 3x faster:
    # 2000 draws of 100 cases for each of 4 agents was 0.3 s of a worker's event loop (bench/README.md, "Suites").
    bits, k = random.Random(SEED).getrandbits, n.bit_length()
    rates = []
    for _ in range(draws):
        score = pairs = 0.0
        for _ in range(n):
            i = bits(k)
            while i >= n:
                i = bits(k)
            score += scores[i]
            pairs += judged[i]
        rates.append(score / pairs)
    rates.sort()
    low, high = rates[int(0.025 * (draws - 1))], rates[round(0.975 * (draws - 1))]
    w_low, w_high = wilson(rate, n)
    return min(low, w_low), max(high, w_high)


def _median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 6) if values else 0.0


def agent_across(agent_ref: str, records: Sequence[tuple[str, AgentCase]]) -> AgentAcross:
    """One agent's verdict from its (session id, record) on each case."""
    judged = [(sid, r) for sid, r in records if r.judged]
    by_session: dict[str, list[float]] = {}
    for sid, r in judged:  # a conversation's cases drawn together: (score, judged pairs) summed
        score, n = by_session.get(sid, [0.0, 0.0])
        by_session[sid] = [score + r.score, n + r.judged]
    wins, ties, losses = (sum(getattr(r, k) for _, r in records) for k in ("wins", "ties", "losses"))
    rate = ci = outcome = None
    if judged:
        exact = sum(r.score for _, r in judged) / sum(r.judged for _, r in judged)
        low, high = interval([(score, int(n)) for score, n in by_session.values()])
        rate, ci, outcome = round(exact, 4), [round(low, 4), round(high, 4)], outcome_of(low, high)
    costs = [r.cost for _, r in records if r.cost is not None]
    usds = [c.usd for c in costs]
    known = all(u is not None for u in usds) and bool(usds)
    per_case = PerCase(
        usd=_median([u for u in usds if u is not None]) if known else None,
        total_tokens=_median([c.total_tokens for c in costs]), tool_calls=_median([c.tool_calls for c in costs]),
        turns=_median([c.turns for c in costs]), duration_seconds=_median([c.duration_seconds for c in costs]),
    )  # fmt: skip
    total = round(sum(u for u in usds if u is not None), 6) if known else None
    control = any(r.control for _, r in records)
    found = AgentAcross(
        agent_ref=agent_ref, control=control, cases=len(judged), conversations=len(by_session), wins=wins, ties=ties,
        losses=losses, invalid=sum(r.invalid for _, r in records), failed=sum(r.failed for _, r in records),
        win_rate=rate, ci95=ci, outcome=outcome, cost=RunCost(per_case=per_case, total_usd=total), summary="",
    )  # fmt: skip
    return msgspec.structs.replace(found, summary=summary(found))


def summary(a: AgentAcross) -> str:
    """One line a person can act on: the outcome over conversations, the interval, the pairs behind it and the
    medians per case; `better` or `worse` only when the interval says so."""
    who = f"{a.agent_ref} (control: the source's own agent again)" if a.control else a.agent_ref
    if a.win_rate is None or a.ci95 is None:
        lost = a.invalid + a.failed
        return f"{who}: no conversation judged against the source" + (
            f" ({lost} pairs without a verdict)" if lost else ""
        )
    word = {"better": "better than", "worse": "worse than"}.get(a.outcome or "", "inconclusive against")
    ties = f", {a.ties} tied" if a.ties else ""
    c = a.cost.per_case
    cases = f" in {a.cases} cases" if a.cases != a.conversations else ""
    money = f"{usd_text(c.usd)} a case" if c.usd is not None else "money unknown"
    text = (
        f"{who}: {word} the source over {a.conversations} conversation{'s' if a.conversations != 1 else ''}{cases} "
        f"({a.wins} continuations better, {a.losses} worse{ties}; {round(a.win_rate * 100)} %, "
        f"95 % CI {round(a.ci95[0] * 100)}-{round(a.ci95[1] * 100)} % counting conversations); median {money}, "
        f"{c.total_tokens:.0f} tokens, {c.tool_calls:.3g} tool calls, {c.duration_seconds:.3g} s"
    )
    if a.outcome == "inconclusive":
        text += "; more conversations would narrow it"
    return text


def across(cases: Sequence[CaseResult]) -> Across:
    """Every agent's verdict across the cases (in the order the agents first appear), the control apart."""
    # The control apart from the same agent named as an arm (the source's own agent may be both).
    by_ref: dict[tuple[str, bool], list[tuple[str, AgentCase]]] = {}
    for case in cases:
        for record in case.by_agent:
            by_ref.setdefault((record.agent_ref, record.control), []).append((case.session_id, record))
    agents = [agent_across(ref, records) for (ref, _), records in by_ref.items()]
    control = next((a for a in agents if a.control), None)
    return Across(headline=headline(agents, control), by_agent=agents, control=control)


def headline(agents: Sequence[AgentAcross], control: AgentAcross | None) -> str:
    """The agent with the best lower bound against the source, in one line, and the noise floor beside it."""
    rated = [a for a in agents if a.ci95 is not None and not a.control]
    if not rated:
        return "nothing judged yet: no conversation has a judged continuation"
    best = max(rated, key=lambda a: (a.ci95[0] if a.ci95 else 0.0, a.win_rate or 0.0))
    text = best.summary
    if control is not None and control.win_rate is not None and control.ci95 is not None:
        text += (
            f". Noise floor: the source's own agent again scored {round(control.win_rate * 100)} % "
            f"(95 % CI {round(control.ci95[0] * 100)}-{round(control.ci95[1] * 100)} %)"
        )
    return text
