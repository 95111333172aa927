"""Following a replay's jobs: a job as the API shows it (a what-if's with its judgment and verdict), a what-if's start
answer, the jobs of a source, and the one way to cancel (a what-if's job, or every running branch of an experiment):
marked first, in one transaction with the experiment's settling, then each agent asked to cancel its task, then the
turns the branches had sent closed with how their tasks ended."""

from __future__ import annotations

import logging
import time

import msgspec

from service.agents import a2a_client
from service.agents.replay import grid, judge, judged
from service.agents.replay.answerers import agent, headers
from service.agents.replay.figures import JobResult, Replayed, TurnFigures, question_of, replayed, sent_parts
from service.agents.replay.runner import close_turns
from service.agents.replay.terms import JobSpan
from service.agents.replay.tools import ArmTools, ToolPolicy
from service.errors import Conflict, NotFound
from service.identity import Caller, visible_session
from service.kagent.store.agents import agent_ref_of
from service.kagent.store.base import Connection
from service.kagent.store.jobs import WhatifJob
from service.kagent.store.replay import ReplayCall
from service.observability import EXPERIMENTS, WHATIF_DURATION, WHATIF_JOBS
from service.schemas import ForkedSession, rfc3339
from service.services import Services

log = logging.getLogger("kagent_fork")


class Job(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    status: str
    session_id: str
    parent_session_id: str
    rewind_before_invocation_id: str | None
    rewind_before_task_id: str | None
    agent_ref: str
    task_id: str | None
    error: str | None
    created_at: str
    finished_at: str | None
    result: JobResult | None
    turns_done: int
    turns_total: int
    stopped_at: str | None
    experiment_id: str | None
    question: str | None  # what it really asked first: the text of the message it sent (edited or not)
    # what its agent's tools do (null: a job from before tool policies, which ran every tool live) and could do
    tool_policy: ToolPolicy | None = None
    tools: ArmTools | None = None
    # on a replay twin, its tool calls over every turn by where they were answered from (docs/replay-twins.md)
    replayed: Replayed | None = None
    # a what-if started with a judge: its latest judgment (its one pair, its branch against the source) and that
    # judgment as the contract's verdict, as an experiment has them; null without a judge (and in a listing)
    judgment: judged.Judgment | None = None
    verdict: judged.Verdict | None = None


class Started(msgspec.Struct, frozen=True, kw_only=True):
    """A what-if's start answer: its job and its fork."""

    job: Job
    session: ForkedSession


def job_json(
    job: WhatifJob, calls: list[ReplayCall] | None = None, judgment: judged.Judgment | None = None,
    verdict: judged.Verdict | None = None, *, judging: bool = False,
) -> Job:  # fmt: skip
    """A job as the API shows it; `calls`: the replay endpoint's calls of its turns, shown when its agent is a
    replay twin; `judging`: its judgment waits or runs (a job that ended reads `judging` meanwhile)."""
    arm = msgspec.json.decode(job.arm_tools, type=ArmTools) if job.arm_tools else None
    status = "judging" if judging and job.status in ("completed", "failed") else job.status
    return Job(
        id=job.id, status=status, session_id=job.session_id, parent_session_id=job.parent_session_id,
        rewind_before_invocation_id=job.rewind_before_invocation_id, rewind_before_task_id=job.rewind_before_task_id,
        agent_ref=job.agent_ref, task_id=job.task_id,
        error=job.error, created_at=rfc3339(job.created_at),
        finished_at=rfc3339(job.finished_at) if job.finished_at else None,
        result=msgspec.json.decode(job.result, type=JobResult) if job.result else None,
        turns_done=job.turns_done, turns_total=job.turns_total, stopped_at=job.stopped_at,
        experiment_id=job.experiment_id, question=question_of(sent_parts(job.message)),
        tool_policy=msgspec.json.decode(job.tool_policy, type=ToolPolicy) if job.tool_policy else None,
        tools=arm, replayed=replayed(calls) if calls is not None and arm is not None and arm.twin else None,
        judgment=judgment, verdict=verdict,
    )  # fmt: skip


async def judged_job(
    svc: Services, conn: Connection, job: WhatifJob, calls: list[ReplayCall], *, live: bool = True
) -> Job:
    """A what-if's job with its latest judgment and verdict (as the grid reads an experiment's: the branch's
    column against the source's own turns over its span; `live`: read the source's, else none yet)."""
    found = await svc.store.judgments.of_job(conn, job.id) if job.experiment_id is None else []
    if not found:
        return job_json(job, calls)
    latest = found[-1]
    asked = await svc.store.judgments.calls(conn, latest.id)
    turns = await svc.store.jobs.whatif_turns(conn, job.id)
    parent = await svc.store.sessions.get_session(conn, job.parent_session_id, job.parent_user_id)
    source_ref = agent_ref_of(parent.agent_id or "") if parent is not None else None
    configs = await grid.models(svc, conn, [job.agent_ref, source_ref, latest.judge_agent_ref])
    column = grid.branch_column(job, turns, configs.get(job.agent_ref), calls)
    baseline: list[TurnFigures] = []
    if live:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            baseline = await grid.source_turns(svc, conn, JobSpan.of(job))
    source = grid.Column(
        agent_ref=source_ref, repeat=1, agent_card=None, session_id=job.parent_session_id, job_id=None,
        status="completed", error=None, stopped_at=None, turns=baseline,
        totals=grid.totals(baseline, configs.get(source_ref or "")),
    )  # fmt: skip
    sides: dict[str | None, judged.Side] = {job.id: grid.side(column, 1)}
    judgment = judged.judgment(
        latest, asked, sides, grid.side(source, 1), grid.model_name(configs, latest.judge_agent_ref)
    )
    verdict = judged.contract_verdict(judgment, None, sides)
    return job_json(job, calls, judgment, verdict, judging=latest.status in judge.OPEN)


async def get(svc: Services, caller: Caller, job_id: str) -> Job:
    async with svc.connection() as conn:
        job = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
        if job is None:
            raise NotFound(f"what-if job {job_id} not found")
        return await judged_job(svc, conn, job, await svc.store.replay.calls_of_jobs(conn, [job_id]))


async def of_session(svc: Services, caller: Caller, session_id: str) -> list[Job]:
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, _ = await visible_session(svc, conn, caller, session_id)
        jobs = await svc.store.jobs.whatif_jobs(conn, source.id, source.user_id, caller.user_id)
        calls = await svc.store.replay.calls_of_jobs(conn, [j.id for j in jobs])
        judging = await svc.store.judgments.jobs_being_judged(conn, [j.id for j in jobs])
    return [job_json(j, [c for c in calls if c.job_id == j.id], judging=j.id in judging) for j in jobs]


async def _mark_cancelled(svc: Services, conn: Connection, job: WhatifJob) -> bool:
    """Mark a running job cancelled (its runner stops at its next beat): whether it was running."""
    if (
        job.status != "running"
        or await svc.store.jobs.whatif_finish(conn, job.id, "cancelled", error=None, result=None) is None
    ):
        return False
    WHATIF_JOBS.labels("cancelled").inc()
    WHATIF_DURATION.labels("cancelled").observe(max(0.0, time.time() - job.created_at.timestamp()))
    return True


async def cancel(
    svc: Services, conn: Connection, caller: Caller, jobs: list[WhatifJob], experiment_id: str | None,
    authorization: str | None,
) -> list[WhatifJob]:  # fmt: skip
    """Cancel the running ones of `jobs` (a what-if's job, or an experiment's branches: then the experiment
    ends `cancelled`): the ones cancelled. Each is marked and the experiment settled first, in one transaction:
    a runner that sees its agent's task cancelled then finds its job and the experiment ended already, and a
    branch that ends meanwhile cannot settle the experiment as completed between the marks and the settling."""
    async with conn.transaction():
        cancelled = [j for j in jobs if await _mark_cancelled(svc, conn, j)]
        if experiment_id is not None and cancelled:
            settled = await svc.store.experiments.settle(conn, experiment_id, "cancelled")
            if settled is not None:
                EXPERIMENTS.labels("cancelled").inc()
        else:  # a branch cancelled alone (through its job) ends its experiment when it was the last one running
            for job in cancelled:
                if job.experiment_id is not None:
                    await svc.store.experiments.settle(conn, job.experiment_id)
    hdrs = headers(caller.user_id, authorization)
    for job in cancelled:
        if job.task_id is not None and svc.settings.kagent_a2a_url is not None:
            try:
                await a2a_client.cancel_task(agent(svc, job.agent_ref, job.dialect, hdrs, 10.0), job.task_id)
            except a2a_client.AgentError as exc:
                log.warning("what-if %s: the agent did not cancel its task: %s", job.id, exc)
        await close_turns(svc, conn, job, "cancelled")
    return cancelled


async def cancel_job(svc: Services, caller: Caller, job_id: str, authorization: str | None = None) -> Job:
    """Cancel one job (a what-if, or one branch of an experiment), and a what-if's judgment while it waits or
    runs (the judge's tasks too); 409 when it already ended and is not being judged."""
    async with svc.connection() as conn:
        job = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
        if job is None:
            raise NotFound(f"what-if job {job_id} not found")
        found = await svc.store.judgments.of_job(conn, job.id) if job.experiment_id is None else []
        cancelled = await cancel(svc, conn, caller, [job], None, authorization)
        judging = await judge.cancel(svc, conn, [j for j in found if j.status in judge.OPEN])
        if not cancelled and not judging:
            raise Conflict(f"what-if job {job_id} already ended ({job.status})")
        fresh = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
    await judge.cancel_tasks(svc, judging, headers(caller.user_id, authorization))
    assert fresh is not None
    async with svc.connection() as conn:
        return await judged_job(svc, conn, fresh, await svc.store.replay.calls_of_jobs(conn, [job_id]))
