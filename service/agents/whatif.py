"""What-if: regenerate a turn on another agent over A2A, as a job.

Starting one is the fork operation itself (into the chosen agent, `forking.Into`), whose transaction
also writes the job row; then the turn's user message is sent to the agent over A2A (kagent's endpoint)
with the fork as its context, and the agent writes the new turn into the fork as it does for any chat.
The job runs in the replica that started it (`Runner`): its status changes are written in their own
transactions, and its heartbeat lets another replica (or the next start) finish a job whose replica
stopped, claiming it with one UPDATE so that no job is ever run twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, TypeVar

import msgspec
from msgspec import Meta

from service.agents import a2a_client
from service.errors import BadRequest, Conflict, NotConfigured, NotFound, ServiceError, Unprocessable
from service.identity import Caller, visible_session
from service.kagent import dialects
from service.kagent.store.base import CONNECTION_ERRORS, Connection
from service.kagent.store.jobs import WhatifJob
from service.observability import WHATIF_DURATION, WHATIF_JOBS, WHATIF_RUNNING
from service.operations import forking, plan, summary
from service.schemas import ForkedSession, ForkPlan, ForkRequest, Text, rfc3339
from service.services import Services

log = logging.getLogger("kagent_fork")
T = TypeVar("T")
_encoder = msgspec.json.Encoder()

# A kagent agent is a Kubernetes resource: namespace/name, each a DNS label (so never a `_`).
_AGENT_REF = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
POLL_SECONDS = 0.5


class WhatifRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    rewind_before_invocation_id: Text
    agent_ref: Text | None = None
    name: Text | None = None
    # JSON Schema counts 2.0 as an integer, so a whole float is one too (a fraction is refused).
    max_context_tokens: Annotated[int, Meta(ge=1, le=10**12)] | Annotated[float, Meta(ge=1, le=1e12)] | None = None


class JobResult(msgspec.Struct, frozen=True, kw_only=True):
    last_agent_text: str | None
    tool_calls: dict[str, int]
    total_tokens: int


class Job(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    status: str
    session_id: str
    parent_session_id: str
    rewind_before_invocation_id: str
    agent_ref: str
    task_id: str | None
    error: str | None
    created_at: str
    finished_at: str | None
    result: JobResult | None


class Started(msgspec.Struct, frozen=True, kw_only=True):
    job: Job
    session: ForkedSession


def job_json(job: WhatifJob) -> Job:
    return Job(
        id=job.id, status=job.status, session_id=job.session_id, parent_session_id=job.parent_session_id,
        rewind_before_invocation_id=job.rewind_before_invocation_id, agent_ref=job.agent_ref, task_id=job.task_id,
        error=job.error, created_at=rfc3339(job.created_at),
        finished_at=rfc3339(job.finished_at) if job.finished_at else None,
        result=msgspec.json.decode(job.result, type=JobResult) if job.result else None,
    )  # fmt: skip


def fork_name(agent_ref: str, turn: int | None, invocation_id: str, source_name: str | None) -> str:
    """A what-if fork's default name: the agent that answers and the turn it answers, so that forks of
    one session made at different turns or for different agents can be told apart."""
    at = f"turn {turn}" if turn is not None else f"the turn {invocation_id[:40]}"
    label = " ".join((source_name or "").split())
    of = f' of "{label[:60]}{"..." if len(label) > 60 else ""}"' if label and label != "Chat" else ""
    return f"What-if: {agent_ref} answers {at}{of}"[:256]


def agent_id_of(agent_ref: str) -> str:
    """kagent's agent_id for namespace/name: `-` becomes `_`, `/` becomes `__NS__`."""
    return agent_ref.replace("-", "_").replace("/", "__NS__")


def agent_ref_of(agent_id: str) -> str | None:
    """The namespace/name an agent_id spells (kagent's names never hold `_`, so the rule reverses)."""
    if agent_id.count("__NS__") != 1:
        return None
    ref = agent_id.replace("__NS__", "/").replace("_", "-")
    return ref if _AGENT_REF.match(ref) else None


@dataclass(frozen=True, kw_only=True)
class _Turn:
    message: dialects.JSON  # the user message that opened the turn, as the source task's history holds it
    dialect: dialects.TaskDialect
    owner: str  # the source session's owner


async def _source_turn(
    svc: Services, conn: Connection, caller: Caller, session_id: str, invocation_id: str
) -> tuple[str | None, _Turn]:
    """The source's agent and the user message that opened the turn, from its task's history."""
    source, _ = await visible_session(svc, conn, caller, session_id)
    prefilter = dialects.verbatim_in_json(invocation_id)
    candidates = await svc.store.tasks.tasks_mentioning(
        conn, source.id, source.user_id, invocation_id, prefilter=prefilter
    )
    found = plan.find_boundary_task(candidates, invocation_id)
    if found is None:
        if await svc.store.events.boundary_event_at(
            conn, source.id, source.user_id, invocation_id, prefilter=prefilter
        ):
            raise Unprocessable(f"no task of the session holds the turn {invocation_id}'s user message to send")
        raise NotFound(f"invocation {invocation_id} not found in session {source.id}")
    dialect = plan.dialect_of(found.row)
    message = dialects.user_message(dialects.decode(found.row.data), dialect, invocation_id)
    if message is None:
        raise Unprocessable(f"the turn {invocation_id} has no user message to send")
    return source.agent_id, _Turn(message=message, dialect=dialect, owner=source.user_id)


async def start(
    svc: Services,
    runner: Runner,
    caller: Caller,
    session_id: str,
    req: WhatifRequest,
    *,
    idempotency_key: str | None = None,
    authorization: str | None = None,
) -> tuple[Started | msgspec.Raw, bool]:
    """Fork the source before the turn into the agent, write the job, and start it: (answer, replayed)."""
    settings = svc.settings
    if settings.kagent_a2a_url is None:
        raise NotConfigured(
            "what-ifs need kagent's A2A endpoint: set KAGENT_A2A_URL (e.g. http://kagent-controller.kagent:8083/api/a2a)"
        )
    if req.agent_ref is not None and not _AGENT_REF.match(req.agent_ref):
        raise Unprocessable(f"agent_ref must be namespace/name of a kagent agent, got {req.agent_ref!r}")
    if isinstance(req.max_context_tokens, float) and not req.max_context_tokens.is_integer():
        raise BadRequest("max_context_tokens must be a whole number")
    fork_req = ForkRequest(
        rewind_before_invocation_id=req.rewind_before_invocation_id, name=req.name, if_boundary_missing="error"
    )
    if idempotency_key is None:
        return await _checked_start(svc, runner, caller, session_id, req, fork_req, None, authorization), False
    key = f"whatif:{idempotency_key}"
    digest = forking.request_hash(session_id, fork_req) + _encoder.encode(req).hex()
    # Retries of one key wait here and replay the first answer; the lock's connection is the only one
    # held while the what-if starts (each step takes and returns its own).
    async with svc.connection() as conn, svc.store.lineage.key_lock(conn, f"whatif:{caller.user_id}", idempotency_key):
        stored = await svc.store.lineage.idempotent_answer(conn, caller.user_id, key, settings.idempotency_ttl_seconds)
        if stored is not None:
            if stored[0] != digest:
                raise Unprocessable("Idempotency-Key was already used with a different request")
            return msgspec.Raw(stored[1].encode()), True
        started = await _checked_start(svc, runner, caller, session_id, req, fork_req, (key, digest), authorization)
        return started, False


async def _checked_start(
    svc: Services,
    runner: Runner,
    caller: Caller,
    session_id: str,
    req: WhatifRequest,
    fork_req: ForkRequest,
    idempotency: tuple[str, str] | None,
    authorization: str | None,
) -> Started:
    """The refusals a fork does not make (the turn's message, the agent, the cost gate), then the start."""
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source_agent, turn = await _source_turn(svc, conn, caller, session_id, req.rewind_before_invocation_id)
        source = await svc.store.sessions.get_session(conn, session_id, turn.owner)
        listed = [t.invocation_id for t in await svc.store.events.event_turns(conn, session_id, turn.owner)]
    agent_ref = req.agent_ref or (agent_ref_of(source_agent) if source_agent else None)
    if agent_ref is None:
        raise Unprocessable(f"the source session's agent {source_agent!r} is not namespace/name: give agent_ref")
    if fork_req.name is None:
        at = listed.index(req.rewind_before_invocation_id) + 1 if req.rewind_before_invocation_id in listed else None
        fork_req = msgspec.structs.replace(
            fork_req, name=fork_name(agent_ref, at, req.rewind_before_invocation_id, source.name if source else None)
        )
    limit = int(req.max_context_tokens or svc.settings.whatif_max_context_tokens)
    planned = (await forking.fork(svc, caller, session_id, msgspec.structs.replace(fork_req, dry_run=True))).data
    assert isinstance(planned, ForkPlan)
    if planned.estimated_context_tokens > limit:
        raise Unprocessable(
            f"the turn's context is about {planned.estimated_context_tokens} tokens, over the limit of {limit} "
            "(max_context_tokens, default WHATIF_MAX_CONTEXT_TOKENS): a what-if sends it to the agent's model"
        )
    return await _start(svc, runner, caller, session_id, fork_req, agent_ref, turn, idempotency, authorization)


async def _start(
    svc: Services,
    runner: Runner,
    caller: Caller,
    session_id: str,
    fork_req: ForkRequest,
    agent_ref: str,
    turn: _Turn,
    idempotency: tuple[str, str] | None,
    authorization: str | None,
) -> Started:
    job_id, boundary = str(uuid.uuid4()), fork_req.rewind_before_invocation_id or ""
    made: list[tuple[WhatifJob, Started]] = []

    async def write_job(conn: Connection, fork: ForkedSession) -> None:
        try:
            message = a2a_client.message_for(turn.message, turn.dialect, fork.id)
        except a2a_client.AgentError as exc:  # raised in the fork's transaction: nothing is written
            raise Unprocessable(str(exc)) from None
        job = WhatifJob(
            id=job_id, user_id=caller.user_id, parent_session_id=fork.fork.parent_session_id,
            parent_user_id=turn.owner, session_id=fork.id, rewind_before_invocation_id=boundary, agent_ref=agent_ref,
            dialect=turn.dialect.value, message=a2a_client.message_json(message),
            status="running", task_id=None, error=None, result=None, runner=runner.id,
            created_at=datetime.min, finished_at=None,
        )  # fmt: skip
        created = await svc.store.jobs.insert_whatif_job(conn, job)
        job = dataclasses.replace(job, created_at=created)
        started = Started(job=job_json(job), session=fork)
        if idempotency is not None:
            await svc.store.lineage.remember_answer(
                conn, user_id=caller.user_id, key=idempotency[0], request_hash=idempotency[1], session_id=fork.id,
                answer=_encoder.encode(started).decode(), ttl_seconds=svc.settings.idempotency_ttl_seconds,
            )  # fmt: skip
        made.append((job, started))

    await forking.fork(
        svc, caller, session_id, fork_req, into=forking.Into(agent_id=agent_id_of(agent_ref), then=write_job)
    )
    job, started = made[0]
    WHATIF_JOBS.labels("started").inc()
    runner.launch(job, _headers(caller.user_id, authorization))
    return started


def _headers(user_id: str, authorization: str | None) -> dict[str, str]:
    """The caller's identity as kagent's A2A endpoint reads it (X-User-Id; the bearer token in trusted-proxy mode)."""
    headers = {"X-User-Id": user_id}
    if authorization is not None:
        headers["Authorization"] = authorization
    return headers


async def get(svc: Services, caller: Caller, job_id: str) -> Job:
    async with svc.connection() as conn:
        job = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
    if job is None:
        raise NotFound(f"what-if job {job_id} not found")
    return job_json(job)


async def of_session(svc: Services, caller: Caller, session_id: str) -> list[Job]:
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, _ = await visible_session(svc, conn, caller, session_id)
        jobs = await svc.store.jobs.whatif_jobs(conn, source.id, source.user_id, caller.user_id)
    return [job_json(j) for j in jobs]


async def cancel(svc: Services, caller: Caller, job_id: str, authorization: str | None = None) -> Job:
    """Mark the job cancelled (its runner stops at its next beat) and ask the agent to cancel its task."""
    async with svc.connection() as conn:
        job = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
        if job is None:
            raise NotFound(f"what-if job {job_id} not found")
        if (
            job.status != "running"
            or await svc.store.jobs.whatif_finish(conn, job.id, "cancelled", error=None, result=None) is None
        ):
            raise Conflict(f"what-if job {job_id} already ended ({job.status})")
        WHATIF_JOBS.labels("cancelled").inc()
        WHATIF_DURATION.labels("cancelled").observe(max(0.0, time.time() - job.created_at.timestamp()))
        if job.task_id is not None:
            agent = _agent(svc, job, _headers(caller.user_id, authorization))
            try:
                await a2a_client.cancel_task(agent, job.task_id)
            except a2a_client.AgentError as exc:
                log.warning("what-if %s: the agent did not cancel its task: %s", job.id, exc)
        fresh = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
    assert fresh is not None
    return job_json(fresh)


def _agent(svc: Services, job: WhatifJob, headers: dict[str, str]) -> a2a_client.Agent:
    base = svc.settings.kagent_a2a_url
    if base is None:
        raise NotConfigured("KAGENT_A2A_URL is not set")
    return a2a_client.Agent(
        url=a2a_client.agent_url(base, job.agent_ref), dialect=dialects.TaskDialect(job.dialect), headers=headers,
        timeout=float(svc.settings.whatif_timeout_seconds),
    )  # fmt: skip


@dataclass(kw_only=True)
class Runner:
    """Runs this replica's jobs in the background; takes over jobs whose replica stopped beating."""

    svc: Services
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    jobs: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _sweeper: asyncio.Task[None] | None = None

    def launch(self, job: WhatifJob, headers: dict[str, str]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(job, headers), name=f"whatif-{job.id}")
        self.jobs[job.id] = task
        task.add_done_callback(lambda _: self.jobs.pop(job.id, None))

    def start_sweeping(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever(), name="whatif-sweeper")

    async def stop(self) -> None:
        """At shutdown: stop running, leave the jobs `running` for the next start or another replica."""
        tasks_ = [*self.jobs.values(), *([self._sweeper] if self._sweeper else [])]
        for t in tasks_:
            t.cancel()
        await asyncio.gather(*tasks_, return_exceptions=True)

    async def sweep(self) -> int:
        """Take over the running jobs whose runner went silent: ask the agent for the task (resume
        following it), or fail the job as interrupted when it never got one. How many were taken."""
        beat = self.svc.settings.whatif_heartbeat_seconds
        async with self.svc.connection() as conn:
            stale = await self.svc.store.jobs.whatif_claim_stale(conn, self.id, 3 * beat)
        for job in stale:
            if job.task_id is None:
                await self._finish(job, "failed", "interrupted: the service stopped before the agent took the turn")
            else:
                log.info("what-if %s: taken over from a runner that stopped", job.id)
                self.launch(job, _headers(job.user_id, None))
        return len(stale)

    async def _sweep_forever(self) -> None:
        beat = self.svc.settings.whatif_heartbeat_seconds
        while True:
            try:
                await self.sweep()
            except CONNECTION_ERRORS as exc:
                log.warning("what-if sweep: database unavailable: %s", type(exc).__name__)
            await asyncio.sleep(3 * beat)

    async def _run(self, job: WhatifJob, headers: dict[str, str]) -> None:
        WHATIF_RUNNING.inc()
        try:
            await self._follow(job, headers)
        except asyncio.CancelledError:
            raise
        except a2a_client.AgentError as exc:
            await self._finish(job, "failed", str(exc))
        except ServiceError as exc:
            await self._finish(job, "failed", exc.message)
        except Exception as exc:  # a job must end whatever happens; the log has the rest
            log.exception("what-if %s failed", job.id)
            await self._finish(job, "failed", f"internal error: {type(exc).__name__}")
        finally:
            WHATIF_RUNNING.dec()

    async def _follow(self, job: WhatifJob, headers: dict[str, str]) -> None:
        """Send the message (unless the agent has the task already), then follow the task until it ends,
        the job is cancelled or taken over, or the time limit passes."""
        svc = self.svc
        agent = _agent(svc, job, headers)
        limit = svc.settings.whatif_timeout_seconds
        remaining = limit - (time.time() - job.created_at.timestamp())
        task_id, state = job.task_id, None
        try:
            async with asyncio.timeout(max(remaining, 0.001)):
                if task_id is None:
                    sent = await self._beating(job, a2a_client.send(agent, a2a_client.message_from_json(job.message)))
                    if sent is None:  # the agent answered with a message: the turn is over
                        await self._finish(job, "completed", None)
                        return
                    task_id, state = sent.id, sent.status.state
                    async with svc.connection() as conn:
                        await svc.store.jobs.whatif_task(conn, job.id, task_id)
                beat_due = time.monotonic() + svc.settings.whatif_heartbeat_seconds
                while state not in a2a_client.TERMINAL:
                    await asyncio.sleep(POLL_SECONDS)
                    if time.monotonic() >= beat_due:
                        async with svc.connection() as conn:
                            if not await svc.store.jobs.whatif_heartbeat(conn, job.id, self.id):
                                return  # cancelled, or another runner has it
                        beat_due = time.monotonic() + svc.settings.whatif_heartbeat_seconds
                    state = (await a2a_client.get_task(agent, task_id)).status.state
        except TimeoutError:
            if task_id is not None:
                try:
                    await a2a_client.cancel_task(agent, task_id)
                except a2a_client.AgentError as exc:
                    log.warning("what-if %s: the agent did not cancel its task: %s", job.id, exc)
            await self._finish(
                job, "failed", f"the agent did not finish the turn within {limit} s (WHATIF_TIMEOUT_SECONDS)"
            )
            return
        status = a2a_client.TERMINAL[state]
        error = None if status == "completed" else f"the agent's task ended {a2a_client.state_name(state)}"
        await self._finish(job, status, error)

    async def _beating(self, job: WhatifJob, work: Awaitable[T]) -> T:
        """`work`, while this runner keeps beating for the job (so that no sweep takes it meanwhile)."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.svc.settings.whatif_heartbeat_seconds)
                if done:
                    return task.result()
                async with self.svc.connection() as conn:
                    await self.svc.store.jobs.whatif_heartbeat(conn, job.id, self.id)
        finally:
            task.cancel()

    async def _finish(self, job: WhatifJob, status: str, error: str | None) -> None:
        """End the job (in its own transaction) with what the agent wrote into the fork since it began."""
        svc = self.svc
        async with svc.connection() as conn:
            tally = await summary.tally(svc.store, conn, job.session_id, job.user_id, job.created_at)
            result = JobResult(
                last_agent_text=tally.last_agent_text, tool_calls=dict(sorted(tally.tool_calls.items())),
                total_tokens=tally.total_tokens,
            )  # fmt: skip
            ended = await svc.store.jobs.whatif_finish(
                conn, job.id, status, error=error, result=_encoder.encode(result).decode()
            )
        if ended is not None:
            WHATIF_JOBS.labels(status).inc()
            took = (ended - job.created_at).total_seconds()
            WHATIF_DURATION.labels(status).observe(max(0.0, took))
            log.info(
                "what-if %s", status,
                extra={"action": "whatif", "job_id": job.id, "outcome": status, "duration_ms": round(took * 1000)},
            )  # fmt: skip
