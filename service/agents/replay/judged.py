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


class Consistency(msgspec.Struct, frozen=True, kw_only=True):
    """How many pairs' two orders agreed, of those whose two orders both gave a usable answer."""

    agreed: int
    asked: int


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
    invalid: int = 0  # of not_judged: answers without the JSON
    failed: int = 0  # of not_judged: calls without an answer, or continuations without one (never sent)
    consistency: Consistency | None = None  # the judge's pairs (None for people's votes: one order each)
    control: bool = False  # the source's own agent run again, against the source: the noise floor


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
    headline: str = ""  # the best agent against the source, in one line
    judge_model: str | None = None  # the model the judge's configuration names (kagent's agent table)


class Earlier(msgspec.Struct, frozen=True, kw_only=True):
    """An earlier judgment of the same experiment (its pairs: read it again with that judge)."""

    id: str
    judge_agent_ref: str
    criteria: str | None
    status: str
    created_at: str
    finished_at: str | None


class Agreement(msgspec.Struct, frozen=True, kw_only=True):
    """How often people and the judge agree: of the votes on a pair the judge decided (a side or a tie), those
    naming what the judge named."""

    agreed: int
    compared: int


class Votes(msgspec.Struct, frozen=True, kw_only=True):
    """People's blind votes, counted as the judge's are (each voter's vote on a pair one judged pair), and shown
    apart from them."""

    votes: int
    voters: int
    agreement: Agreement | None  # None: no judgment, or no vote on a pair it decided
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


Key = tuple[str | None, str]  # a pair: (the left branch's job, None for the source; the right one's)


def _of(sides: dict[str | None, Side], ref: str) -> list[str]:
    return [k for k, s in sides.items() if k is not None and s.agent_ref == ref]


def records(
    outcomes: dict[Key, str] | Sequence[tuple[Key, str]], sides: dict[str | None, Side], source: Side,
    consistent: dict[Key, bool | None] | None = None, control: str | None = None,
) -> tuple[list[Record], list[Record]]:  # fmt: skip
    """Each agent's record against the source (its branches on the right of the source's pairs), then each two
    agents' (the first named on the left). `outcomes`: one a pair (the judge's), or several (people's votes: one
    a voter); `consistent`: whether each pair's two orders agreed (the judge's); `control`: the agent whose
    record against the source is the noise floor (the source's own, asked the same questions again)."""
    said = list(outcomes.items()) if isinstance(outcomes, dict) else list(outcomes)
    refs = list(dict.fromkeys(s.agent_ref for k, s in sides.items() if k is not None and s.agent_ref))
    against: list[Record] = []
    between: list[Record] = []
    for ref in refs:
        mine = [(k, verdict.flipped(o)) for k, o in said if k[0] is None and k[1] in _of(sides, ref)]
        if mine:
            against.append(_record(ref, "source", [o for _, o in mine], [sides[k] for k in _of(sides, ref)], [source],
                                   _agreed([k for k, _ in mine], consistent),
                                   control=ref == control))  # fmt: skip
    for i, ref in enumerate(refs):
        for other in refs[i + 1 :]:
            mine = [(k, o) for k, o in said if k[0] is not None and sides[k[0]].agent_ref == ref
                    and sides[k[1]].agent_ref == other]  # fmt: skip
            if mine:
                between.append(_record(ref, other, [o for _, o in mine], [sides[k] for k in _of(sides, ref)],
                                       [sides[k] for k in _of(sides, other)],
                                       _agreed([k for k, _ in mine], consistent)))  # fmt: skip
    return against, between


def _agreed(keys: list[Key], consistent: dict[Key, bool | None] | None) -> Consistency | None:
    if consistent is None:
        return None
    said = [consistent.get(k) for k in keys]
    return Consistency(agreed=said.count(True), asked=sum(1 for c in said if c is not None))


def _record(
    ref: str, against: str, outcomes: list[str], mine: list[Side], theirs: list[Side], agreed: Consistency | None,
    *, control: bool = False,
) -> Record:  # fmt: skip
    """The record of `ref`'s branches (`mine`) against the source's or another agent's (`theirs`), its line
    saying what each side did and cost a continuation (the means over each side's branches)."""
    t = verdict.tally(outcomes)
    opponent, whose = ("the source", "the source's") if against == "source" else (against, f"{against}'s")

    def mean(sides: list[Side], name: str) -> float:
        return statistics.fmean(float(getattr(s, name)) for s in sides)

    money = verdict.dollars(_mean([s.cost_usd for s in mine]), _mean([s.cost_usd for s in theirs]))
    subject = f"{ref} (the source's own agent run again: the noise floor)" if control else ref
    line = verdict.line(
        subject, opponent, t,
        work=verdict.work((mean(mine, "tool_calls"), mean(mine, "turns")),
                          (mean(theirs, "tool_calls"), mean(theirs, "turns")), whose),
        tokens=verdict.ratio(mean(mine, "tokens"), mean(theirs, "tokens")),
        money=money if money == "money unknown" else f"{money} a continuation",
        time=verdict.seconds(mean(mine, "duration_seconds"), mean(theirs, "duration_seconds")),
    )  # fmt: skip
    return Record(
        agent_ref=ref, against=against, wins=t.wins, ties=t.ties, losses=t.losses, not_judged=t.not_judged,
        win_rate=t.win_rate, ci_low=t.ci_low, ci_high=t.ci_high, outcome=t.outcome, within_chance=t.within_chance,
        settle_with=t.settle_with, more_repeats=t.more_repeats, line=line, invalid=t.invalid, failed=t.failed,
        consistency=agreed, control=control,
    )  # fmt: skip


def headline(against: Sequence[Record], status: str, error: str | None) -> str:
    """The best agent against the source, in one line: one the interval shows better (the highest low end), else
    the best so far with what it would take to tell; the source's own agent run again (the control) is not a
    candidate, it is the noise floor said beside them."""
    if status == "failed":
        return f"The judgment failed: {error or 'no usable answer'}"
    floor = next((r for r in against if r.control and r.win_rate is not None), None)
    noise = f"; the noise floor, the source's own agent run again: {_brief(floor)}" if floor else ""
    judged = [r for r in against if r.win_rate is not None and not r.control]
    if not judged:
        return f"No continuation judged against the source yet{noise}"
    return _best(judged) + noise


def _brief(r: Record) -> str:
    assert r.ci_low is not None and r.ci_high is not None
    ties = f", {r.ties} tied" if r.ties else ""
    return (f"{r.wins} better, {r.losses} worse{ties} of {r.wins + r.ties + r.losses} judged "
            f"(95 % CI {round(r.ci_low * 100)}-{round(r.ci_high * 100)} %)")  # fmt: skip


def _best(judged: list[Record]) -> str:
    """The best of the judged records against the source, in words."""
    better = [r for r in judged if r.outcome == "better"]
    best = max(better or judged, key=lambda r: (r.ci_low or 0.0, r.win_rate or 0.0))
    said = _brief(best)
    if better:
        return f"{best.agent_ref} is better than the source here: {said}"
    if best.outcome == "worse":
        return f"No agent is better than the source here: the best, {best.agent_ref}, is worse: {said}"
    settle = f"; about {best.more_repeats} more repeats would settle it" if best.more_repeats else ""
    return f"No agent is shown better than the source yet: the best so far, {best.agent_ref}: {said}{settle}"


def judgment(
    row: JudgmentRow,
    calls: list[JudgeCall],
    sides: dict[str | None, Side],
    source: Side,
    judge_model: str | None = None,
    control: str | None = None,
) -> Judgment:
    by_pair: dict[tuple[str | None, str], list[JudgeCall]] = {}
    for c in calls:
        by_pair.setdefault((c.left_job, c.right_job), []).append(c)
    pairs, outcomes, consistency = [], {}, {}
    for (left, right), asked in by_pair.items():
        outcome, consistent = verdict.pair_outcome(
            [verdict.Asked(winner=c.winner, swapped=c.swapped, error=c.error, ended=c.ended_at is not None)
             for c in asked]
        )  # fmt: skip
        outcomes[(left, right)] = outcome
        consistency[(left, right)] = consistent
        pairs.append(
            Pair(
                left_job_id=left, left=sides[left].label if left in sides else "source", right_job_id=right,
                right=sides[right].label if right in sides else right, outcome=outcome, consistent=consistent,
                said=[Said(a_is="right" if c.swapped else "left", winner=c.winner, reason=c.reason, answer=c.answer,
                           error=c.error) for c in asked],
            )
        )  # fmt: skip
    known = {k: v for k, v in outcomes.items() if (k[0] is None or k[0] in sides) and k[1] in sides}
    against, between = records(known, sides, source, consistency, control)
    return Judgment(
        id=row.id, judge_agent_ref=row.judge_agent_ref,
        judge_card=msgspec.json.decode(row.judge_card, type=Card) if row.judge_card else None, criteria=row.criteria,
        status=row.status, error=row.error, created_at=rfc3339(row.created_at),
        finished_at=rfc3339(row.finished_at) if row.finished_at else None, calls=len(calls),
        calls_answered=sum(1 for c in calls if c.ended_at is not None), pairs=pairs, against_source=against,
        between_agents=between, lines=[r.line for r in [*against, *between]],
        headline=headline(against, row.status, row.error), judge_model=judge_model,
    )  # fmt: skip


def earlier(rows: list[JudgmentRow]) -> list[Earlier]:
    return [
        Earlier(id=r.id, judge_agent_ref=r.judge_agent_ref, criteria=r.criteria, status=r.status,
                created_at=rfc3339(r.created_at), finished_at=rfc3339(r.finished_at) if r.finished_at else None)
        for r in rows
    ]  # fmt: skip


def votes(
    found: list[Vote], sides: dict[str | None, Side], source: Side, judge: Judgment | None = None,
    control: str | None = None,
) -> Votes | None:  # fmt: skip
    """People's votes, each voter's kept apart (a voter's latest on a pair), counted as the judge's pairs are, and
    how often they agree with `judge`'s outcome on the same pair."""
    said: list[tuple[Key, str]] = []
    voters: set[str] = set()
    for v in found:
        key = (v.left_job or None, v.right_job)
        if (key[0] is None or key[0] in sides) and key[1] in sides:
            said.append((key, v.winner))
            voters.add(v.user_id)
    if not said:
        return None
    decided = {(p.left_job_id, p.right_job_id): p.outcome for p in judge.pairs} if judge else {}
    compared = [(o, decided[k]) for k, o in said if decided.get(k) in verdict.JUDGED]
    agreement = Agreement(agreed=sum(1 for o, j in compared if o == j), compared=len(compared)) if compared else None
    against, between = records(said, sides, source, control=control)
    return Votes(votes=len(said), voters=len(voters), agreement=agreement, against_source=against,
                 between_agents=between, lines=[r.line for r in [*against, *between]])  # fmt: skip


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
    invalid: int  # pairs counted neither way: an answer without the JSON
    failed: int  # pairs counted neither way: a call without an answer, or a continuation without one
    win_rate: float | None
    ci95: list[float] | None  # the Wilson score interval of win_rate
    outcome: str | None  # better, worse, inconclusive; None: nothing judged
    more_repeats: int | None  # inconclusive: about how many more repeats would settle it at the rate seen
    consistency: Consistency | None  # pairs whose two orders agreed, of those both answered (None: votes)
    control: bool  # the source's own agent run again against the source: the noise floor beside the others
    cost: Cost
    summary: str


class PairVerdict(msgspec.Struct, frozen=True, kw_only=True):
    a: str | None  # a branch's job id; None: the source
    b: str
    order_1: str | None  # what the judge said with a shown as A: A, B, tie, invalid (None: no answer)
    order_2: str | None  # with b shown as A
    verdict: str  # a, b, tie, invalid, failed, pending
    reasons: list[str]


class VotesVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """People's votes in the contract's shape: how many, by how many voters, how often they agree with the judge,
    and each agent's record from them."""

    votes: int
    voters: int
    agreement: Agreement | None
    by_agent: list[AgentVerdict]


class JudgeInfo(msgspec.Struct, frozen=True, kw_only=True):
    agent: str
    model: str | None  # as the judge's configuration in kagent's agent table names it; None: not known
    criteria: str | None


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    judge: JudgeInfo
    headline: str
    criteria: str | None
    status: str
    by_agent: list[AgentVerdict]
    pairs: list[PairVerdict]
    votes: VotesVerdict | None  # people's blind votes, counted as the judge's, apart


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
            agent_ref=r.agent_ref, against=r.against, wins=r.wins, ties=r.ties, losses=r.losses, invalid=r.invalid,
            failed=r.failed, win_rate=r.win_rate,
            ci95=[r.ci_low, r.ci_high] if r.ci_low is not None and r.ci_high is not None else None,
            outcome=r.outcome, more_repeats=r.more_repeats, consistency=r.consistency, control=r.control,
            cost=_cost(r.agent_ref, sides), summary=r.line,
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
    votes = (
        VotesVerdict(votes=people.votes, voters=people.voters, agreement=people.agreement,
                     by_agent=_agents([*people.against_source, *people.between_agents], sides))
        if people else None
    )  # fmt: skip
    return Verdict(
        judge=JudgeInfo(agent=j.judge_agent_ref, model=j.judge_model, criteria=j.criteria), headline=j.headline,
        criteria=j.criteria, status=j.status,
        by_agent=_agents([*j.against_source, *j.between_agents], sides), pairs=pairs, votes=votes,
    )  # fmt: skip
