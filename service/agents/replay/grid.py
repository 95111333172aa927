"""An experiment read back as a grid: the source's own turns over the experiment's span (the baseline
column), a column per branch, a row per turn, totals underneath, and, with repeats, each agent's
columns summed up. As JSON, and as a Markdown table for people.

A branch's turn figures are computed once, when the turn ended (figures.turn_figures), and stored with
the turn; the source column once, in the background after the start (`keep_source_column`), with the
same reader (the branch summary's query over the turn's events). So reading a finished experiment is
seven indexed queries (experiment, branches, turns, the replay twins' calls, its discard, the agents'
configurations for the price, and which of its sessions are still there), whatever the size of its sessions;
a column whose session kagent's retention purged keeps its figures and says `purged`.
"""

from __future__ import annotations

import statistics

import msgspec

from service.agents import a2a_client
from service.agents.replay import judged
from service.agents.replay.figures import (
    Replayed,
    TurnFigures,
    question_of,
    replayed,
    sent_parts,
    task_text,
    turn_figures,
)
from service.agents.replay.span import turns_read_from
from service.agents.replay.terms import Spanned
from service.agents.replay.tools import ArmTools, ToolPolicy
from service.branches import turns as turn_listing
from service.errors import NotFound
from service.identity import Caller
from service.kagent.store.agents import ModelConfig
from service.kagent.store.base import BEGINNING, Connection
from service.kagent.store.experiments import DiscardRow
from service.kagent.store.jobs import JobTurn, WhatifJob
from service.kagent.store.replay import ReplayCall
from service.kagent.store.sessions import SessionRow
from service.operations import continuation, prices
from service.schemas import rfc3339
from service.services import Services

FIGURES = ("turns", "tool_calls", "rejected_tool_calls", "model_calls", "total_tokens", "duration_seconds")
_encoder = msgspec.json.Encoder()


class Totals(msgspec.Struct, frozen=True, kw_only=True):
    """A column's figures: turns, tool calls, tokens and duration as operations/continuation.py defines them
    (compare's too), and what they cost in money (operations/prices.py)."""

    turns: int
    tool_calls: int
    rejected_tool_calls: int
    model_calls: int
    total_tokens: int
    duration_seconds: float
    input_tokens: int | None  # None: a turn's were not counted (figured before they were)
    output_tokens: int | None
    cost_usd: float | None  # None: unknown (no model, an unknown provider or price, tokens not counted)
    model: str | None  # the model priced, as the agent's configuration in kagent's `agent` table names it
    cost_text: str = "unknown"  # cost_usd as every door prints it (prices.usd_text)
    # a replay twin's tool calls over the column's turns (null: the branch's agent is no twin; the source)
    tool_policy: Replayed | None = None


class Column(msgspec.Struct, frozen=True, kw_only=True):
    agent_ref: str | None
    repeat: int
    agent_card: Card | None
    session_id: str
    job_id: str | None
    status: str
    error: str | None
    stopped_at: str | None
    turns: list[TurnFigures]
    totals: Totals
    # The discard in force (discard.py): this branch's fork hidden by it, or the one branch it kept.
    discarded: bool = False
    kept: bool = False
    # Its session's row is gone: kagent's session retention (sessionRetentionDays) deleted it and its events; the
    # figures are those kept with each turn (and with the source column, at the start).
    purged: bool = False


class Discard(msgspec.Struct, frozen=True, kw_only=True):
    """The experiment's latest discard of its branches: in force until `undone_at`."""

    id: str
    kept_session_id: str | None
    discarded_session_ids: list[str]
    created_at: str
    undone_at: str | None
    restored_session_ids: list[str] | None


class AgentSummary(msgspec.Struct, frozen=True, kw_only=True):
    """An agent's branches summed up (with repeats): each figure's spread, and the price's (`cost_usd`) when every
    branch's is known."""

    agent_ref: str
    totals: dict[str, Spread]
    cost_text: str = "unknown"  # the price's spread as every door prints it: "$mean ($min-$max)"


class Experiment(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    status: str
    source_session_id: str
    rewind_before_invocation_id: str | None
    rewind_before_task_id: str | None
    turns_requested: int | str
    message: dict[str, str] | None
    created_at: str
    finished_at: str | None
    source: Column
    branches: list[Column]
    on_approval: str
    repeats: int
    by_agent: list[AgentSummary] | None
    # what the arms' tools do (null: an experiment from before tool policies: every tool ran live), and each
    # agent's tools by class as the start found them
    tool_policy: ToolPolicy | None = None
    arms: list[ArmTools] | None = None
    discard: Discard | None = None
    judgment: judged.Judgment | None = None  # the latest judgment (its verdict), None: never judged
    earlier_judgments: list[judged.Earlier] = msgspec.field(default_factory=list)
    votes: judged.Votes | None = None  # people's blind votes, apart from the judge's
    verdict: judged.Verdict | None = None  # the latest judgment as the API contract names it


class Started(msgspec.Struct, frozen=True, kw_only=True):
    """An experiment's start answer: its grid, as it stands when its last branch is written."""

    experiment: Experiment


def policy_of(text: str | None) -> ToolPolicy | None:
    return msgspec.json.decode(text, type=ToolPolicy) if text else None


def requested(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _sum(parts: list[Replayed | None]) -> Replayed | None:
    found = [p for p in parts if p is not None]
    if not found:
        return None
    return Replayed(
        recorded=sum(p.recorded for p in found), live=sum(p.live for p in found), missed=sum(p.missed for p in found),
        refused=sum(p.refused for p in found),
        refused_calls=[c for p in found for c in p.refused_calls],
    )  # fmt: skip


def totals(turns: list[TurnFigures], model: ModelConfig | None = None) -> Totals:
    """A column's totals over its turns that ended, priced with `model` (the column's agent's)."""
    done = [t for t in turns if t.state not in ("pending", "working")]
    sums = continuation.summed(done)
    # Counted: every turn's usage was read, and a turn whose model answered (a model call, or an answer at all)
    # reported its tokens: an agent whose events carry no usage (every framework but ADK: LangGraph and CrewAI
    # write no events) is not priced $0, its price is unknown.
    counted = all(t.model_usage is not None and (t.model_usage or not (t.model_calls or t.answer)) for t in done)
    calls = [c for t in done for c in t.model_usage or []] if counted else None
    return Totals(
        turns=sums.turns, tool_calls=sums.tool_calls,
        rejected_tool_calls=sum(t.rejected_tool_calls for t in done), model_calls=sum(t.model_calls for t in done),
        total_tokens=sums.total_tokens, duration_seconds=sums.duration_seconds,
        input_tokens=sum(i for i, _ in calls) if calls is not None else None,
        output_tokens=sum(o for _, o in calls) if calls is not None else None,
        cost_usd=(cost := prices.cost_usd(prices.priced_model(model), calls)), cost_text=prices.usd_text(cost),
        model=model.model or None if model else None, tool_policy=_sum([t.tool_policy for t in turns]),
    )  # fmt: skip


def _unfinished(turn: JobTurn) -> TurnFigures:
    parts = sent_parts(turn.message)
    return TurnFigures(
        question=question_of(parts), sent=parts if turn.sent_at else None, answer=None, tool_calls={},
        rejected_tool_calls=turn.rejected_tool_calls, model_calls=0, total_tokens=0, duration_seconds=0.0,
        state="working" if turn.sent_at else "pending",
    )  # fmt: skip


class Card(msgspec.Struct, frozen=True, kw_only=True):
    """The branch's agent card as its job keeps it (a2a_client.Card's fields), read without the A2A client, so
    that reading a grid loads no A2A SDK (the CLI defers it to a first use)."""

    name: str
    version: str
    skills_sha256: str


def _is_twin(job: WhatifJob) -> bool:
    return job.arm_tools is not None and msgspec.json.decode(job.arm_tools, type=ArmTools).twin


def branch_column(
    job: WhatifJob, turns: list[JobTurn], model: ModelConfig | None = None, calls: list[ReplayCall] | None = None
) -> Column:
    """A branch's column, priced with its agent's model; on a replay twin each turn (sent) says what its tool calls
    were answered from."""
    figures = [msgspec.json.decode(t.figures, type=TurnFigures) if t.figures else _unfinished(t) for t in turns]
    if calls is not None and _is_twin(job):
        figures = [
            f if f.state == "pending" else msgspec.structs.replace(
                f, tool_policy=replayed([c for c in calls if c.ordinal == t.ordinal])
            )
            for f, t in zip(figures, turns, strict=True)
        ]  # fmt: skip
    if job.status != "running":  # a turn that never ran (after a failure or a cancel) is not shown
        figures = [f for f in figures if f.state not in ("pending",)]
    return Column(
        agent_ref=job.agent_ref, repeat=job.repeat,
        agent_card=msgspec.json.decode(job.agent_card, type=Card) if job.agent_card else None,
        session_id=job.session_id, job_id=job.id, status=job.status, error=job.error, stopped_at=job.stopped_at,
        turns=figures, totals=totals(figures, model),
    )  # fmt: skip


class Spread(msgspec.Struct, frozen=True, kw_only=True):
    """One figure over an agent's repeats."""

    mean: float
    min: float
    max: float


def by_agent(columns: list[Column]) -> list[AgentSummary]:
    out: list[AgentSummary] = []
    for ref in dict.fromkeys(c.agent_ref for c in columns if c.agent_ref):
        values = [msgspec.structs.asdict(c.totals) for c in columns if c.agent_ref == ref]
        spreads = {
            name: Spread(
                mean=round(statistics.fmean(float(v[name]) for v in values), 3),
                min=float(min(v[name] for v in values)),
                max=float(max(v[name] for v in values)),
            )
            for name in FIGURES
        }
        costs = [v["cost_usd"] for v in values]
        if all(c is not None for c in costs):  # the price's spread only when every repeat's is known
            known = [float(c) for c in costs if c is not None]
            spreads["cost_usd"] = Spread(mean=round(statistics.fmean(known), 6), min=min(known), max=max(known))
        cost = spreads.get("cost_usd")
        text = (
            "unknown"
            if cost is None
            else f"{prices.usd_text(cost.mean)} ({prices.usd_text(cost.min)}-{prices.usd_text(cost.max)})"
        )
        out.append(AgentSummary(agent_ref=ref, totals=spreads, cost_text=text))
    return out


async def source_turns(svc: Services, conn: Connection, row: Spanned) -> list[TurnFigures]:
    """The source's own turns over the replay's span (an experiment's, a what-if's), each with the figures of its
    events (the same query as a branch's turns) and its task's state. Needs a transaction."""
    source = await svc.store.sessions.get_session(conn, row.source_session_id, row.source_user_id)
    if source is None:
        return []
    if row.rewind_before_task_id is not None:
        return await _task_source_turns(svc, conn, source, row.rewind_before_task_id, row.turns)
    listed_turns = await svc.store.events.event_turns(conn, source.id, source.user_id)
    ids = [t.invocation_id for t in listed_turns]
    if row.rewind_before_invocation_id not in ids:
        return []
    first = ids.index(row.rewind_before_invocation_id)
    span = listed_turns[first : first + row.turns]
    infos = {
        t.invocation_id: turn_listing.TurnInfo(invocation_id=t.invocation_id, started_at=t.started_at) for t in span
    }
    await turn_listing.with_tasks_from(svc, conn, source, infos, BEGINNING)
    out = []
    for i, t in enumerate(span):
        until = listed_turns[first + i + 1].started_at if first + i + 1 < len(listed_turns) else None
        out.append(
            await turn_figures(
                svc,
                conn,
                source.id,
                source.user_id,
                t.started_at,
                until,
                state=a2a_client.state_label(infos[t.invocation_id].state),
            )
        )
    return out


async def _task_source_turns(
    svc: Services, conn: Connection, source: SessionRow, task_id: str, count: int
) -> list[TurnFigures]:
    """source_turns for a span that starts at a turn known by its task alone: the turns as the listing gives
    them (one per task), each one's question and state from the listing, its answer from its task (the
    events of such agents are not ADK's), the other figures from the events of its time."""
    framework, rows, users = await turns_read_from(svc, conn, source)
    listed = await turn_listing.ordered_turns(svc, conn, source, framework, users)
    keys = [t.invocation_id for t in listed]
    if turn_listing.TASK_TURN + task_id not in keys:
        return []
    first = keys.index(turn_listing.TASK_TURN + task_id)
    span = listed[first : first + count]
    ids = [t.task_id for t in span if t.task_id is not None]
    found = await svc.store.tasks.runtime_tasks_by_id(conn, source.id, source.user_id, list(users), ids)
    tasks = {r.id: r for r in found}
    out = []
    for i, t in enumerate(span):
        until = listed[first + i + 1].started_at if first + i + 1 < len(listed) else None
        task = tasks.get(t.task_id or "")
        answer = task_text(task) if task is not None else None
        state = a2a_client.state_label(t.state)
        figures = turn_figures(svc, conn, rows.id, rows.user_id, t.started_at, until, question=t.user_text, state=state)
        out.append(msgspec.structs.replace(await figures, answer=answer))
    return out


async def keep_source_column(svc: Services, experiment_id: str, user_id: str) -> None:
    """Compute the baseline column and keep it with the experiment (once)."""
    async with svc.connection() as conn:
        row = await svc.store.experiments.experiment(conn, experiment_id, user_id)
        if row is None or row.source_turns is not None:
            return
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            turns = await source_turns(svc, conn, row)
        await svc.store.experiments.keep_source_turns(conn, row.id, _encoder.encode(turns).decode())


def model_name(configs: dict[str, ModelConfig], ref: str | None) -> str | None:
    """The model an agent's configuration names ("gpt-4o"), None when not known."""
    config = configs.get(ref or "")
    return config.model or None if config is not None else None


async def models(svc: Services, conn: Connection, refs: list[str | None]) -> dict[str, ModelConfig]:
    """The model each agent's configuration names in kagent's `agent` table (one query), by namespace/name; an
    agent without a row, a config or a model is absent (its columns are priced "unknown")."""
    rows = await svc.store.agents.get_many(conn, sorted({r for r in refs if r}))
    return {ref: a.config.model for ref, a in rows.items() if a.config is not None and a.config.model is not None}


async def experiment(
    svc: Services, conn: Connection, caller: Caller, experiment_id: str, *, live: bool = True
) -> Experiment:
    """The grid. `live`: compute the source column when it is not kept yet (else it is empty for now)."""
    row = await svc.store.experiments.experiment(conn, experiment_id, caller.user_id)
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    jobs = await svc.store.experiments.branches(conn, row.id)
    turns = await svc.store.jobs.whatif_turns_of_jobs(conn, [j.id for j in jobs])
    calls: dict[str, list[ReplayCall]] = {j.id: [] for j in jobs}
    for c in await svc.store.replay.calls_of_jobs(conn, [j.id for j in jobs]):
        calls[c.job_id].append(c)
    if row.source_turns is not None:
        baseline = msgspec.json.decode(row.source_turns, type=list[TurnFigures])
    elif live:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            baseline = await source_turns(svc, conn, row)
    else:
        baseline = []
    found = await svc.store.judgments.of_experiment(conn, row.id)
    latest = found[-1] if found else None
    judge_ref = latest.judge_agent_ref if latest else None
    configs = await models(svc, conn, [row.source_agent_ref, *(j.agent_ref for j in jobs), judge_ref])
    columns = [branch_column(j, turns[j.id], configs.get(j.agent_ref or ""), calls[j.id]) for j in jobs]
    discard = await svc.store.experiments.latest_discard(conn, row.id)
    if discard is not None and discard.undone_at is None:
        hidden, kept = set(discard.session_ids), discard.kept_session_id
        columns = [
            msgspec.structs.replace(c, discarded=c.session_id in hidden, kept=c.session_id == kept) for c in columns
        ]
    keys = [(row.source_session_id, row.source_user_id), *((j.session_id, j.user_id) for j in jobs)]
    there = await svc.store.sessions.existing(conn, keys)
    columns = [
        msgspec.structs.replace(c, purged=(j.session_id, j.user_id) not in there)
        for c, j in zip(columns, jobs, strict=True)
    ]
    source = Column(
        agent_ref=row.source_agent_ref, repeat=1, agent_card=None, session_id=row.source_session_id, job_id=None,
        status="completed", error=None, stopped_at=None, turns=baseline,
        totals=totals(baseline, configs.get(row.source_agent_ref or "")), purged=keys[0] not in there,
    )  # fmt: skip
    asked = await svc.store.judgments.calls(conn, latest.id) if latest else []
    sides = {c.job_id: side(c, row.repeats) for c in columns}
    # The noise floor: the source's own agent asked the source's own questions again (an edited first question
    # asks every branch something else, so no branch is a control then).
    control = row.source_agent_ref if row.message is None else None
    judge_model = model_name(configs, judge_ref)
    judgment = judged.judgment(latest, asked, sides, side(source, 1), judge_model, control) if latest else None
    people = judged.votes(await svc.store.judgments.votes(conn, row.id), sides, side(source, 1), judgment, control)
    status = row.status
    if latest is not None and latest.status in ("waiting", "running") and status in ("completed", "failed"):
        status = "judging"
    return Experiment(
        id=row.id, status=status, source_session_id=row.source_session_id,
        rewind_before_invocation_id=row.rewind_before_invocation_id, rewind_before_task_id=row.rewind_before_task_id,
        turns_requested=requested(row.turns_requested),
        message=msgspec.json.decode(row.message) if row.message else None, created_at=rfc3339(row.created_at),
        finished_at=rfc3339(row.finished_at) if row.finished_at else None, source=source, branches=columns,
        on_approval=row.on_approval, repeats=row.repeats, by_agent=by_agent(columns) if row.repeats > 1 else None,
        tool_policy=policy_of(row.tool_policy),
        arms=msgspec.json.decode(row.arms, type=list[ArmTools]) if row.arms else None,
        discard=discard_json(discard) if discard is not None else None,
        judgment=judgment, earlier_judgments=judged.earlier(found[:-1]), votes=people,
        verdict=judged.contract_verdict(judgment, people, sides) if judgment else None,
    )  # fmt: skip


def discard_json(d: DiscardRow) -> Discard:
    return Discard(
        id=d.id, kept_session_id=d.kept_session_id, discarded_session_ids=list(d.session_ids),
        created_at=rfc3339(d.created_at), undone_at=rfc3339(d.undone_at) if d.undone_at else None,
        restored_session_ids=list(d.restored_ids) if d.restored_ids is not None else None,
    )  # fmt: skip


def side(c: Column, repeats: int) -> judged.Side:
    label = "source" if c.job_id is None else (f"{c.agent_ref} #{c.repeat}" if repeats > 1 else str(c.agent_ref))
    t = c.totals
    return judged.Side(
        label=label, agent_ref=c.agent_ref, tokens=t.total_tokens, cost_usd=t.cost_usd, turns=t.turns,
        tool_calls=t.tool_calls, duration_seconds=t.duration_seconds,
    )  # fmt: skip
