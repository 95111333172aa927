"""Following a replay's jobs: a job as the API shows it, a what-if's start answer, the jobs of a source, and
the one way to cancel (a what-if's job, or every running branch of an experiment): marked first, in one
transaction with the experiment's settling, then each agent asked to cancel its task, then the turns the
branches had sent closed with how their tasks ended."""

from __future__ import annotations

import logging
import time

import msgspec

from service.agents import a2a_client
from service.agents.replay.answerers import agent, headers
from service.agents.replay.figures import JobResult, Replayed, question_of, replayed, sent_parts
from service.agents.replay.runner import close_turns
from service.agents.replay.tools import ArmTools, ToolPolicy
from service.errors import Conflict, NotFound
from service.identity import Caller, visible_session
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


class Started(msgspec.Struct, frozen=True, kw_only=True):
    """A what-if's start answer: its job and its fork."""

    job: Job
    session: ForkedSession


def job_json(job: WhatifJob, calls: list[ReplayCall] | None = None) -> Job:
    """A job as the API shows it; `calls`: the replay endpoint's calls of its turns, shown when its agent is a
    replay twin."""
    arm = msgspec.json.decode(job.arm_tools, type=ArmTools) if job.arm_tools else None
    return Job(
        id=job.id, status=job.status, session_id=job.session_id, parent_session_id=job.parent_session_id,
        rewind_before_invocation_id=job.rewind_before_invocation_id, rewind_before_task_id=job.rewind_before_task_id,
        agent_ref=job.agent_ref, task_id=job.task_id,
        error=job.error, created_at=rfc3339(job.created_at),
        finished_at=rfc3339(job.finished_at) if job.finished_at else None,
        result=msgspec.json.decode(job.result, type=JobResult) if job.result else None,
        turns_done=job.turns_done, turns_total=job.turns_total, stopped_at=job.stopped_at,
        experiment_id=job.experiment_id, question=question_of(sent_parts(job.message)),
        tool_policy=msgspec.json.decode(job.tool_policy, type=ToolPolicy) if job.tool_policy else None,
        tools=arm, replayed=replayed(calls) if calls is not None and arm is not None and arm.twin else None,
    )  # fmt: skip


async def get(svc: Services, caller: Caller, job_id: str) -> Job:
    async with svc.connection() as conn:
        job = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
        calls = await svc.store.replay.calls_of_jobs(conn, [job_id]) if job is not None else []
    if job is None:
        raise NotFound(f"what-if job {job_id} not found")
    return job_json(job, calls)


async def of_session(svc: Services, caller: Caller, session_id: str) -> list[Job]:
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, _ = await visible_session(svc, conn, caller, session_id)
        jobs = await svc.store.jobs.whatif_jobs(conn, source.id, source.user_id, caller.user_id)
        calls = await svc.store.replay.calls_of_jobs(conn, [j.id for j in jobs])
    return [job_json(j, [c for c in calls if c.job_id == j.id]) for j in jobs]


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
    """Cancel one job (a what-if, or one branch of an experiment); 409 when it already ended."""
    async with svc.connection() as conn:
        job = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
        if job is None:
            raise NotFound(f"what-if job {job_id} not found")
        if not await cancel(svc, conn, caller, [job], None, authorization):
            raise Conflict(f"what-if job {job_id} already ended ({job.status})")
        fresh = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
    assert fresh is not None
    return job_json(fresh)
