"""An experiment as its source's list shows it (GET /api/sessions/{id}/experiments): what it asked, its agents, its
judge and its outcome (the latest judgment's headline, from its pairs alone: no figures are read); the grid itself
is grid.py's (GET /api/experiments/{id})."""

from __future__ import annotations

import msgspec

from service.agents.replay import judged
from service.agents.replay.grid import policy_of, requested
from service.agents.replay.tools import ToolPolicy
from service.kagent.store.experiments import ExperimentRow
from service.kagent.store.jobs import WhatifJob
from service.kagent.store.judgments import JudgeCall, JudgmentRow
from service.schemas import rfc3339


class Listed(msgspec.Struct, frozen=True, kw_only=True):
    """An experiment in its source's list (the grid itself: GET /api/experiments/{id})."""

    id: str
    status: str
    rewind_before_invocation_id: str | None
    rewind_before_task_id: str | None
    turns_requested: int | str
    turns: int
    repeats: int
    on_approval: str
    created_at: str
    finished_at: str | None
    tool_policy: ToolPolicy | None = None
    agents: list[str] = []  # its agents, in the order named
    judge: str | None = None  # the latest judgment's judge (None: never judged)
    outcome: str | None = None  # the latest judgment's headline (None: never judged)


def listed(
    row: ExperimentRow, judging: bool = False, jobs: list[WhatifJob] | None = None,
    latest: JudgmentRow | None = None, calls: list[JudgeCall] | None = None,
) -> Listed:  # fmt: skip
    """`judging`: its branches ended and its judgment waits or runs; `jobs`, `latest` and its `calls`: its
    agents, its judge and its outcome (the judgment's headline, from the pairs alone: no figures are read)."""
    status = "judging" if judging and row.status in ("completed", "failed") else row.status
    return Listed(
        id=row.id, status=status, rewind_before_invocation_id=row.rewind_before_invocation_id,
        rewind_before_task_id=row.rewind_before_task_id, turns_requested=requested(row.turns_requested),
        turns=row.turns, repeats=row.repeats,
        on_approval=row.on_approval, created_at=rfc3339(row.created_at),
        finished_at=rfc3339(row.finished_at) if row.finished_at else None, tool_policy=policy_of(row.tool_policy),
        agents=list(dict.fromkeys(j.agent_ref or "" for j in jobs or [])),
        judge=latest.judge_agent_ref if latest else None, outcome=_headline(row, jobs or [], latest, calls or []),
    )  # fmt: skip


def _headline(
    row: ExperimentRow, jobs: list[WhatifJob], latest: JudgmentRow | None, calls: list[JudgeCall]
) -> str | None:
    """The latest judgment's headline; only its counts and intervals are used, so the sides carry no figures."""
    if latest is None:
        return None
    sides: dict[str | None, judged.Side] = {
        j.id: judged.Side(label=j.agent_ref or "", agent_ref=j.agent_ref, tokens=0, cost_usd=None) for j in jobs
    }
    source = judged.Side(label="source", agent_ref=row.source_agent_ref, tokens=0, cost_usd=None)
    control = row.source_agent_ref if row.message is None else None
    return judged.judgment(latest, calls, sides, source, None, control).headline
