"""An experiment's judgment as the grid shows it: each pair's outcome with what the judge said in each order,
each agent's record against the source and against each other agent (verdict.py's numbers), one line per
record a person can act on, the earlier judgments listed, and people's blind votes counted apart."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from service.agents.replay import verdict
from service.kagent.store.judgments import JudgeCall, JudgmentRow, Vote
from service.schemas import rfc3339


class Said(msgspec.Struct, frozen=True, kw_only=True):
    """One question to the judge: which side was A, and its answer."""

    a_is: str  # left or right
    winner: str | None  # A, B, tie, invalid; None: no answer (error) or not yet
    reason: str | None
    answer: str | None  # the judge's whole last text (kept when it is invalid, too)
    error: str | None


class Pair(msgspec.Struct, frozen=True, kw_only=True):
    left_job_id: str | None  # None: the source's own continuation
    left: str  # "source", or the agent (and #repeat)
    right_job_id: str
    right: str
    outcome: str  # left, right, tie, invalid, failed, pending
    consistent: bool | None  # the two orders agreed (None: not both answered)
    said: list[Said]


class Record(msgspec.Struct, frozen=True, kw_only=True):
    agent_ref: str
    against: str  # "source", or another agent
    wins: int
    ties: int
    losses: int
    not_judged: int
    win_rate: float | None
    ci_low: float | None
    ci_high: float | None
    outcome: str | None  # better, worse, inconclusive (the interval's word); None: nothing judged
    within_chance: bool
    settle_with: int | None
    more_repeats: int | None  # inconclusive: about how many more judged repeats would settle it at this rate
    line: str


class Card(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    version: str
    skills_sha256: str


class Judgment(msgspec.Struct, frozen=True, kw_only=True):
    """The latest judgment of an experiment."""

    id: str
    judge_agent_ref: str
    judge_card: Card | None
    criteria: str | None
    status: str  # waiting, running, completed, failed, cancelled
    error: str | None
    created_at: str
    finished_at: str | None
    calls: int
    calls_answered: int
    pairs: list[Pair]
    against_source: list[Record]
    between_agents: list[Record]
    lines: list[str]


class Earlier(msgspec.Struct, frozen=True, kw_only=True):
    """An earlier judgment of the same experiment (its pairs: read it again with that judge)."""

    id: str
    judge_agent_ref: str
    criteria: str | None
    status: str
    created_at: str
    finished_at: str | None


class Votes(msgspec.Struct, frozen=True, kw_only=True):
    """People's blind votes, counted as the judge's are, and shown apart from them."""

    votes: int
    against_source: list[Record]
    between_agents: list[Record]
    lines: list[str]


@dataclass(frozen=True, kw_only=True)
class Side:
    """A column as the verdict reads it: who, and what it cost (tokens; money, None when unknown)."""

    label: str
    agent_ref: str | None
    tokens: int
    cost_usd: float | None
    turns: int = 0
    tool_calls: int = 0
    duration_seconds: float = 0.0


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return None if not values or len(known) < len(values) else statistics.fmean(known)


def records(
    outcomes: dict[tuple[str | None, str], str], sides: dict[str | None, Side], source: Side
) -> tuple[list[Record], list[Record]]:
    """Each agent's record against the source (its branches on the right of the source's pairs), then each two
    agents' (the first named on the left)."""
    refs = list(dict.fromkeys(s.agent_ref for k, s in sides.items() if k is not None and s.agent_ref))
    against: list[Record] = []
    between: list[Record] = []
    for ref in refs:
        mine = [k for k, s in sides.items() if k is not None and s.agent_ref == ref]
        got = [verdict.flipped(o) for (left, right), o in outcomes.items() if left is None and right in mine]
        if not got:
            continue
        tokens = _mean([sides[k].tokens for k in mine])
        money = _mean([sides[k].cost_usd for k in mine])
        against.append(_record(ref, "source", got, verdict.ratio(tokens, source.tokens),
                               verdict.dollars(money, source.cost_usd)))  # fmt: skip
    for i, ref in enumerate(refs):
        for other in refs[i + 1 :]:
            got = [
                o for (left, right), o in outcomes.items()
                if left is not None and sides[left].agent_ref == ref and sides[right].agent_ref == other
            ]  # fmt: skip
            if got:
                between.append(_record(ref, other, got, None, None))
    return against, between


def _record(ref: str, against: str, outcomes: list[str], tokens: str | None, money: str | None) -> Record:
    t = verdict.tally(outcomes)
    opponent = "the source" if against == "source" else against
    return Record(
        agent_ref=ref, against=against, wins=t.wins, ties=t.ties, losses=t.losses, not_judged=t.not_judged,
        win_rate=t.win_rate, ci_low=t.ci_low, ci_high=t.ci_high, outcome=t.outcome, within_chance=t.within_chance,
        settle_with=t.settle_with, more_repeats=t.more_repeats,
        line=verdict.line(ref, opponent, t, tokens=tokens, money=money),
    )  # fmt: skip


def judgment(row: JudgmentRow, calls: list[JudgeCall], sides: dict[str | None, Side], source: Side) -> Judgment:
    by_pair: dict[tuple[str | None, str], list[JudgeCall]] = {}
    for c in calls:
        by_pair.setdefault((c.left_job, c.right_job), []).append(c)
    pairs, outcomes = [], {}
    for (left, right), asked in by_pair.items():
        outcome, consistent = verdict.pair_outcome(
            [verdict.Asked(winner=c.winner, swapped=c.swapped, error=c.error, ended=c.ended_at is not None)
             for c in asked]
        )  # fmt: skip
        outcomes[(left, right)] = outcome
        pairs.append(
            Pair(
                left_job_id=left, left=sides[left].label if left in sides else "source", right_job_id=right,
                right=sides[right].label if right in sides else right, outcome=outcome, consistent=consistent,
                said=[Said(a_is="right" if c.swapped else "left", winner=c.winner, reason=c.reason, answer=c.answer,
                           error=c.error) for c in asked],
            )
        )  # fmt: skip
    known = {k: v for k, v in outcomes.items() if (k[0] is None or k[0] in sides) and k[1] in sides}
    against, between = records(known, sides, source)
    return Judgment(
        id=row.id, judge_agent_ref=row.judge_agent_ref,
        judge_card=msgspec.json.decode(row.judge_card, type=Card) if row.judge_card else None, criteria=row.criteria,
        status=row.status, error=row.error, created_at=rfc3339(row.created_at),
        finished_at=rfc3339(row.finished_at) if row.finished_at else None, calls=len(calls),
        calls_answered=sum(1 for c in calls if c.ended_at is not None), pairs=pairs, against_source=against,
        between_agents=between, lines=[r.line for r in [*against, *between]],
    )  # fmt: skip


def earlier(rows: list[JudgmentRow]) -> list[Earlier]:
    return [
        Earlier(id=r.id, judge_agent_ref=r.judge_agent_ref, criteria=r.criteria, status=r.status,
                created_at=rfc3339(r.created_at), finished_at=rfc3339(r.finished_at) if r.finished_at else None)
        for r in rows
    ]  # fmt: skip


def votes(found: list[Vote], sides: dict[str | None, Side], source: Side) -> Votes | None:
    """People's votes (one a person and pair: the latest), counted as the judge's pairs are. Only an
    experiment's creator sees it, so its votes are that person's."""
    outcomes: dict[tuple[str | None, str], str] = {}
    for v in found:
        key = (v.left_job or None, v.right_job)
        if (key[0] is None or key[0] in sides) and key[1] in sides:
            outcomes[key] = v.winner
    if not outcomes:
        return None
    against, between = records(outcomes, sides, source)
    return Votes(votes=len(outcomes), against_source=against, between_agents=between,
                 lines=[r.line for r in [*against, *between]])  # fmt: skip


# --- the verdict as the API contract names it ----------------------------------------------------------


class Cost(msgspec.Struct, frozen=True, kw_only=True):
    """What an agent's continuations cost, the mean over its branches (usd None: unknown, never a guess)."""

    turns: float
    tool_calls: float
    total_tokens: float
    duration_seconds: float
    usd: float | None


class AgentVerdict(msgspec.Struct, frozen=True, kw_only=True):
    agent_ref: str
    against: str  # "source", or namespace/name
    wins: int
    ties: int
    losses: int
    invalid: int  # pairs counted neither way (an answer without the JSON, or a call without an answer)
    win_rate: float | None
    ci95: list[float] | None  # the Wilson score interval of win_rate
    outcome: str | None  # better, worse, inconclusive; None: nothing judged
    more_repeats: int | None  # inconclusive: about how many more repeats would settle it at the rate seen
    cost: Cost
    summary: str


class PairVerdict(msgspec.Struct, frozen=True, kw_only=True):
    a: str | None  # a branch's job id; None: the source
    b: str
    order_1: str | None  # what the judge said with a shown as A: A, B, tie, invalid (None: no answer)
    order_2: str | None  # with b shown as A
    verdict: str  # a, b, tie, invalid, failed, pending
    reasons: list[str]


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    judge: str
    criteria: str | None
    status: str
    by_agent: list[AgentVerdict]
    pairs: list[PairVerdict]
    votes: list[AgentVerdict]  # people's blind votes, counted as the judge's, apart


def _cost(ref: str, sides: dict[str | None, Side]) -> Cost:
    mine = [s for k, s in sides.items() if k is not None and s.agent_ref == ref]
    n = max(len(mine), 1)
    return Cost(
        turns=round(sum(s.turns for s in mine) / n, 3), tool_calls=round(sum(s.tool_calls for s in mine) / n, 3),
        total_tokens=round(sum(s.tokens for s in mine) / n, 3),
        duration_seconds=round(sum(s.duration_seconds for s in mine) / n, 3),
        usd=_mean([s.cost_usd for s in mine]),
    )  # fmt: skip


def _agents(records: Sequence[Record], sides: dict[str | None, Side]) -> list[AgentVerdict]:
    return [
        AgentVerdict(
            agent_ref=r.agent_ref, against=r.against, wins=r.wins, ties=r.ties, losses=r.losses, invalid=r.not_judged,
            win_rate=r.win_rate, ci95=[r.ci_low, r.ci_high] if r.ci_low is not None and r.ci_high is not None else None,
            outcome=r.outcome, more_repeats=r.more_repeats, cost=_cost(r.agent_ref, sides), summary=r.line,
        )
        for r in records
    ]  # fmt: skip


def contract_verdict(j: Judgment, people: Votes | None, sides: dict[str | None, Side]) -> Verdict:
    """The judgment as the contract's `verdict`: per agent (against the source, then each other agent), per
    pair (what the judge said in each order), and people's votes apart."""
    pairs = []
    for p in j.pairs:
        said = {s.a_is: s for s in p.said}
        pairs.append(
            PairVerdict(
                a=p.left_job_id, b=p.right_job_id,
                order_1=said["left"].winner if "left" in said else None,
                order_2=said["right"].winner if "right" in said else None,
                verdict={"left": "a", "right": "b"}.get(p.outcome, p.outcome),
                reasons=[s.reason or s.error or "" for s in p.said],
            )
        )  # fmt: skip
    votes = [*people.against_source, *people.between_agents] if people else []
    return Verdict(
        judge=j.judge_agent_ref, criteria=j.criteria, status=j.status,
        by_agent=_agents([*j.against_source, *j.between_agents], sides), pairs=pairs, votes=_agents(votes, sides),
    )  # fmt: skip
