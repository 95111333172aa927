"""Running what-if jobs, turn by turn: the replica that started a job runs it (`Runner`), another one takes
it over when that replica stops beating, and no message is ever sent twice.

A job re-asks its turns in order (a plain what-if has one, an experiment's branch `turns` of them). Each
turn's message has its `messageId` fixed when the job is written and is stamped `sent_at` in its own
transaction before it is sent, so a replica that takes the job over never sends it again: it finds the
agent's task by that message id in kagent's task table, or fails the job as interrupted. How a turn ended
is read from kagent's own task row (the agent saves its task there), and from the agent over A2A only
when the row does not say (kagent main's runtime answers "Task not found" to a `tasks/get` that lost the
caller, although the row is completed). At most `WHATIF_MAX_PARALLEL` turns are with agents at once per
replica; a job that waits for a slot keeps beating, so that no sweep takes it meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

import msgspec

from service.agents import a2a_client
from service.errors import NotConfigured, ServiceError
from service.kagent import dialects, frameworks
from service.kagent.store.base import CONNECTION_ERRORS, Connection
from service.kagent.store.jobs import JobTurn, WhatifJob
from service.kagent.store.tasks import TaskRow
from service.observability import (
    EXPERIMENTS,
    TURN_DURATION,
    TURNS,
    WHATIF_DURATION,
    WHATIF_JOBS,
    WHATIF_RUNNING,
)
from service.operations import plan, summary
from service.services import Services

log = logging.getLogger("kagent_fork")
T = TypeVar("T")
_encoder = msgspec.json.Encoder()
POLL_SECONDS = 0.5
# A turn's agent that asks for approval after approval is rejected this many times, then the branch stops.
MAX_REJECTIONS = 8
ENDED = {"completed", "failed", "canceled", "rejected", "input-required", "auth-required"}
WAITING = {"input-required", "auth-required"}


class JobResult(msgspec.Struct, frozen=True, kw_only=True):
    last_agent_text: str | None
    tool_calls: dict[str, int]
    total_tokens: int


class TurnFigures(msgspec.Struct, frozen=True, kw_only=True):
    """One turn of a column: what was asked (and sent), what the agent answered and what it cost."""

    question: str | None
    sent: list[object] | None  # the message's parts exactly as sent over A2A (None: the source's own turn)
    answer: str | None
    tool_calls: dict[str, int]
    rejected_tool_calls: int
    model_calls: int
    total_tokens: int
    duration_seconds: float
    state: str | None


class Stop(Exception):
    """The job ends here: (status, error, stopped_at)."""

    def __init__(self, status: str, error: str | None, stopped_at: str | None = None) -> None:
        super().__init__(error or status)
        self.status, self.error, self.stopped_at = status, error, stopped_at


class NotOurs(Exception):
    """The job was cancelled, or another runner has it: stop without writing."""


def headers(user_id: str, authorization: str | None) -> dict[str, str]:
    """The caller's identity as kagent's A2A endpoint reads it (X-User-Id; the bearer token in trusted-proxy mode)."""
    out = {"X-User-Id": user_id}
    if authorization is not None:
        out["Authorization"] = authorization
    return out


def agent_of(svc: Services, agent_ref: str, dialect: str, hdrs: dict[str, str]) -> a2a_client.Agent:
    base = svc.settings.kagent_a2a_url
    if base is None:
        raise NotConfigured("KAGENT_A2A_URL is not set")
    return a2a_client.Agent(
        ref=agent_ref, url=a2a_client.agent_url(base, agent_ref), dialect=dialects.TaskDialect(dialect), headers=hdrs,
        timeout=float(svc.settings.whatif_timeout_seconds),
    )  # fmt: skip


def sent_parts(message_json: str) -> list[object]:
    parts = msgspec.json.decode(message_json).get("parts", [])
    return parts if isinstance(parts, list) else []


def question_of(parts: list[object]) -> str | None:
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(texts) or None


async def turn_figures(
    svc: Services,
    session_id: str,
    owner: str,
    since: datetime,
    until: datetime | None,
    *,
    conn: Connection | None = None,
    **known: object,
) -> TurnFigures:
    """A turn's figures from the events written in [since, until) (the branch summary's one query), on `conn`
    when the caller holds one (a task never waits for a second pooled connection), else on one of its own."""
    if conn is None:
        async with svc.connection() as own:
            t = await summary.tally(svc.store, own, session_id, owner, since, until)
    else:
        t = await summary.tally(svc.store, conn, session_id, owner, since, until)
    duration = (t.last_at - t.first_at).total_seconds() if t.first_at and t.last_at else 0.0
    fields: dict[str, object] = {
        "question": t.first_user_text, "sent": None, "answer": t.last_agent_text,
        "tool_calls": dict(sorted(t.tool_calls.items())), "rejected_tool_calls": 0, "model_calls": t.model_calls or 0,
        "total_tokens": t.total_tokens, "duration_seconds": round(duration, 3), "state": None,
    }  # fmt: skip
    fields.update({k: v for k, v in known.items() if v is not None or k in ("state",)})
    return msgspec.convert(fields, TurnFigures)


@dataclass(kw_only=True)
class _Turn:
    """A turn being played: its row, and the agent's task once known."""

    row: JobTurn
    task_id: str | None
    sent_at: datetime | None
    rejected: int = 0
    reply_id: str | None = None  # the last rejection sent, until the task's history holds it


@dataclass(kw_only=True)
class Runner:
    """Runs this replica's jobs in the background; takes over jobs whose replica stopped beating."""

    svc: Services
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    jobs: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _sweeper: asyncio.Task[None] | None = None
    _slots: asyncio.Semaphore | None = None
    _chores: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.svc.settings.whatif_max_parallel)
        return self._slots

    def launch(self, job: WhatifJob, hdrs: dict[str, str]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(job, hdrs), name=f"whatif-{job.id}")
        self.jobs[job.id] = task
        task.add_done_callback(lambda _: self.jobs.pop(job.id, None))

    def chore(self, work: Awaitable[None], name: str) -> None:
        """Background work that is not a job (an experiment's baseline column): kept until it ends."""

        async def run() -> None:
            try:
                await work
            except Exception:  # a chore's failure is logged; the reader computes it again
                log.exception("%s failed", name)

        task = asyncio.get_running_loop().create_task(run(), name=name)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    def start_sweeping(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever(), name="whatif-sweeper")

    async def stop(self) -> None:
        """At shutdown: stop running, leave the jobs `running` for the next start or another replica."""
        tasks_ = [*self.jobs.values(), *self._chores, *([self._sweeper] if self._sweeper else [])]
        for t in tasks_:
            t.cancel()
        await asyncio.gather(*tasks_, return_exceptions=True)

    async def sweep(self) -> int:
        """Take over the running jobs whose runner went silent, and resume each at the turn it was at.
        A replica without KAGENT_A2A_URL cannot run a job, so it takes none. How many were taken."""
        if self.svc.settings.kagent_a2a_url is None:
            return 0
        beat = self.svc.settings.whatif_heartbeat_seconds
        async with self.svc.connection() as conn:
            stale = await self.svc.store.jobs.whatif_claim_stale(conn, self.id, 3 * beat)
        for job in stale:
            log.info("what-if %s: taken over from a runner that stopped", job.id)
            self.launch(job, headers(job.user_id, None))
        return len(stale)

    async def _sweep_forever(self) -> None:
        beat = self.svc.settings.whatif_heartbeat_seconds
        while True:
            try:
                await self.sweep()
            except CONNECTION_ERRORS as exc:
                log.warning("what-if sweep: database unavailable: %s", type(exc).__name__)
            await asyncio.sleep(3 * beat)

    async def _run(self, job: WhatifJob, hdrs: dict[str, str]) -> None:
        WHATIF_RUNNING.inc()
        try:
            await self._play(job, hdrs)
            await self.finish(job, "completed", None)
        except asyncio.CancelledError:
            raise
        except NotOurs:
            pass
        except Stop as stop:
            await self.finish(job, stop.status, stop.error)
        except a2a_client.AgentError as exc:
            await self.finish(job, "failed", str(exc))
        except ServiceError as exc:
            await self.finish(job, "failed", exc.message)
        except Exception as exc:  # a job must end whatever happens; the log has the rest
            log.exception("what-if %s failed", job.id)
            await self.finish(job, "failed", f"internal error: {type(exc).__name__}")
        finally:
            WHATIF_RUNNING.dec()

    async def _play(self, job: WhatifJob, hdrs: dict[str, str]) -> None:
        """Every turn not yet ended, in order; one A2A turn after the previous task ended completed."""
        agent = agent_of(self.svc, job.agent_ref, job.dialect, hdrs)
        async with self.svc.connection() as conn:
            rows = await self.svc.store.jobs.whatif_turns(conn, job.id)
        for row in rows:
            if row.ended_at is not None:
                continue
            turn = _Turn(row=row, task_id=row.task_id, sent_at=row.sent_at, rejected=row.rejected_tool_calls)
            if row.reply is not None and row.reply_sent_at is not None:
                turn.reply_id = msgspec.json.decode(row.reply).get("messageId")
            async with self._slot(job):
                state = await _Player(runner=self, job=job, agent=agent).turn(turn)
            TURNS.labels(state).inc()
            stopped = row.invocation_id if state in WAITING else None
            figures = await turn_figures(
                self.svc, job.session_id, job.user_id, turn.sent_at or job.created_at, None,
                question=question_of(sent_parts(row.message)), sent=sent_parts(row.message),
                rejected_tool_calls=turn.rejected, state=state,
            )  # fmt: skip
            async with self.svc.connection() as conn:
                if figures.answer is None and turn.task_id is not None:
                    answer = await task_answer(self.svc, conn, job, turn.task_id)
                    figures = msgspec.structs.replace(figures, answer=answer)
                await self.svc.store.jobs.whatif_turn_end(
                    conn, job.id, row.ordinal, state, _encoder.encode(figures).decode(), stopped
                )
            if state in WAITING:
                return  # a person answers it in the fork: the branch went as far as it goes alone
            if state != "completed":
                raise Stop("failed", f"the agent's task ended {state} at turn {row.ordinal + 1}")

    def _slot(self, job: WhatifJob) -> _Slot:
        return _Slot(self, job)

    async def beating(self, job: WhatifJob, work: Awaitable[T]) -> T:
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

    async def finish(self, job: WhatifJob, status: str, error: str | None) -> None:
        """End the job (in its own transaction) with what the agent wrote into the fork since it began;
        then its experiment, when it was the last branch running."""
        svc = self.svc
        async with svc.connection() as conn:
            framework = await frameworks.detect(svc.store, conn, job.session_id, job.user_id)
            # The fork's rows where its agent's runtime wrote them (kagent's default user for the 0.10.4
            # runtimes), as its transcript reads them (docs/frameworks.md).
            fork_row = await svc.store.sessions.get_session(conn, job.session_id, job.user_id)
            runtime = await frameworks.runtime_session(svc.store, conn, fork_row, framework) if fork_row else None
            rows_user = runtime.user_id if runtime is not None else job.user_id
            tally = await summary.tally(svc.store, conn, job.session_id, rows_user, job.created_at)
            answer, tools = tally.last_agent_text, tally.tool_calls
            if framework in frameworks.TASK_CHAT:
                # Its chat is in its tasks: the tool calls of the tasks written since the job began.
                async with conn.transaction(readonly=True):  # its tasks are read through a cursor
                    told = await summary.summarize_tasks(svc.store, conn, job.session_id, rows_user, job.created_at)
                tools = told.tool_calls if told is not None else {}
            if answer is None:
                # Events that hold no text (LangGraph, CrewAI, Claude; an ADK turn without text): the last
                # task's answer.
                turns = await svc.store.jobs.whatif_turns(conn, job.id)
                task_id = next((t.task_id for t in reversed(turns) if t.task_id is not None), None)
                answer = await task_answer(svc, conn, job, task_id) if task_id is not None else None
            result = JobResult(
                last_agent_text=answer, tool_calls=dict(sorted(tools.items())), total_tokens=tally.total_tokens
            )
            ended = await svc.store.jobs.whatif_finish(
                conn, job.id, status, error=error, result=_encoder.encode(result).decode()
            )
            settled = await svc.store.experiments.settle(conn, job.experiment_id) if job.experiment_id else None
        if settled is not None:
            EXPERIMENTS.labels(settled).inc()
        if ended is not None:
            WHATIF_JOBS.labels(status).inc()
            took = (ended - job.created_at).total_seconds()
            WHATIF_DURATION.labels(status).observe(max(0.0, took))
            log.info(
                "what-if %s", status,
                extra={"action": "whatif", "job_id": job.id, "outcome": status, "duration_ms": round(took * 1000)},
            )  # fmt: skip


async def task_answer(svc: Services, conn: Connection, job: WhatifJob, task_id: str) -> str | None:
    """The answer of a job's turn by an agent whose events this service does not read (every framework but
    ADK): the last agent text of its A2A task in kagent's table. None for an ADK agent (its events say it)."""
    if await frameworks.detect(svc.store, conn, job.session_id, job.user_id) in ("adk", "adk-go"):
        return None
    row = await svc.store.tasks.task_by_id(conn, task_id, job.session_id)
    return None if row is None else task_text(row)


def task_text(row: TaskRow) -> str | None:
    """A task's last agent text, cut as summary.tally cuts an event's (None: none, or not JSON)."""
    try:
        text = dialects.last_agent_text(dialects.decode(row.data), plan.dialect_of(row))
    except (dialects.TaskFormatError, ServiceError):
        return None
    return text[: summary.AGENT_TEXT_CHARS] if text else None


@dataclass(kw_only=True)
class _Player:
    """One turn of a job with its agent: sent once, followed until it ends, approvals answered."""

    runner: Runner
    job: WhatifJob
    agent: a2a_client.Agent

    async def turn(self, turn: _Turn) -> str:
        """Send the turn (unless it was sent), then follow its task until it ends: its end state."""
        svc, row = self.runner.svc, turn.row
        limit = svc.settings.whatif_timeout_seconds
        began = row.sent_at.timestamp() if row.sent_at else time.time()
        try:
            async with asyncio.timeout(max(limit - (time.time() - began), 0.001)):
                if turn.task_id is None:
                    turn.task_id = await self._send_once(turn)
                    if turn.task_id is None:
                        return "completed"  # the agent answered with a message: the turn is over
                return await self._follow(turn)
        except TimeoutError:
            if turn.task_id is not None:
                try:
                    await a2a_client.cancel_task(self.agent, turn.task_id)
                except a2a_client.AgentError as exc:
                    log.warning("what-if %s: the agent did not cancel its task: %s", self.job.id, exc)
            raise Stop(
                "failed", f"the agent did not finish turn {row.ordinal + 1} within {limit} s (WHATIF_TIMEOUT_SECONDS)"
            ) from None
        finally:
            TURN_DURATION.observe(max(0.0, time.time() - began))

    async def _send_once(self, turn: _Turn) -> str | None:
        """The turn's message sent (stamped first, in its own transaction), or, when an earlier runner
        stamped it, the agent's task that holds it: never sent twice. The task id (None: no task)."""
        svc, row = self.runner.svc, turn.row
        message = a2a_client.message_from_json(row.message)
        if row.sent_at is not None:
            async with svc.connection() as conn:
                found = await svc.store.tasks.task_holding_text(conn, self.job.session_id, message.message_id)
            if found is None:
                raise Stop(
                    "failed", f"interrupted: the service stopped while sending turn {row.ordinal + 1}, which the "
                    "agent's tasks do not hold; it is not sent again",
                )  # fmt: skip
            task_id = found.id
        else:
            async with svc.connection() as conn:
                turn.sent_at = await svc.store.jobs.whatif_turn_sending(conn, self.job.id, row.ordinal, self.runner.id)
            if turn.sent_at is None:
                raise NotOurs
            sent = await self.runner.beating(self.job, a2a_client.send(self.agent, message))
            if sent is None:
                return None
            task_id = sent.id
        async with svc.connection() as conn:
            running = await svc.store.jobs.whatif_task(conn, self.job.id, task_id, row.ordinal)
        if not running:
            # Cancelled while the message was on its way: the cancel did not know the task, so it is asked here.
            try:
                await a2a_client.cancel_task(self.agent, task_id)
            except a2a_client.AgentError as exc:
                log.warning("what-if %s: the agent did not cancel its task: %s", self.job.id, exc)
            raise NotOurs
        return task_id

    async def _follow(self, turn: _Turn) -> str:
        """Follow the task until it ends; on `reject`, answer its approval requests with rejections."""
        svc = self.runner.svc
        assert turn.task_id is not None
        beat_due = 0.0
        while True:
            if time.monotonic() >= beat_due:
                async with svc.connection() as conn:
                    if not await svc.store.jobs.whatif_heartbeat(conn, self.job.id, self.runner.id):
                        raise NotOurs
                beat_due = time.monotonic() + svc.settings.whatif_heartbeat_seconds
            state, task = await self._state(turn.task_id)
            if task is not None and turn.reply_id is not None:
                if not dialects.holds_message(task, turn.reply_id):
                    state = "working"  # the agent has not taken the rejection in yet
                elif state in WAITING:
                    turn.reply_id = None  # a new request, after the rejection
            if state in WAITING and self.job.on_approval == "reject" and task is not None and turn.reply_id is None:
                if turn.rejected >= MAX_REJECTIONS:
                    return state
                answered = await self._reject(turn, task)
                if answered:
                    state = "working"
            if state in ENDED:
                return state
            await asyncio.sleep(POLL_SECONDS)

    async def _state(self, task_id: str) -> tuple[str, dialects.JSON | None]:
        """How the task stands: kagent's task row first (its state and JSON), the agent over A2A when the
        row does not say it ended."""
        async with self.runner.svc.connection() as conn:
            row = await self.runner.svc.store.tasks.task_by_id(conn, task_id, self.job.session_id)
        task = None
        if row is not None:
            try:
                task = dialects.decode(row.data)
            except dialects.TaskFormatError:
                task = None
        label = a2a_client.state_label(dialects.state(task)) if task is not None else None
        if label in ENDED:
            return label or "", task
        try:
            remote = a2a_client.label_of((await a2a_client.get_task(self.agent, task_id)).status.state)
        except a2a_client.AgentError:
            if task is None:
                raise
            return label or "working", task
        # An approval request is read from the row (it carries the request), once the row says so.
        if remote in ENDED and remote not in WAITING:
            return remote, task
        return label or "working", task

    async def _reject(self, turn: _Turn, task: dialects.JSON) -> bool:
        """Answer the task's approval request with kagent's rejection (stamped first): whether it did."""
        assert turn.task_id is not None
        dialect = dialects.TaskDialect(self.job.dialect)
        found = a2a_client.rejection(task, dialect, context_id=self.job.session_id, task_id=turn.task_id)
        if found is None:
            return False  # a question, or a request no UI could answer: the branch stops here
        reply, count = found
        text = _encoder.encode(reply).decode()
        async with self.runner.svc.connection() as conn:
            if not await self.runner.svc.store.jobs.whatif_turn_reply(
                conn, self.job.id, turn.row.ordinal, text, count, self.runner.id
            ):
                raise NotOurs
        turn.reply_id, turn.rejected = str(reply["messageId"]), turn.rejected + count
        await self.runner.beating(self.job, a2a_client.send(self.agent, a2a_client.reply_message(reply, dialect)))
        return True


class _Slot:
    """One of the replica's WHATIF_MAX_PARALLEL places for a turn with an agent, waited for while beating."""

    def __init__(self, runner: Runner, job: WhatifJob) -> None:
        self.runner, self.job = runner, job

    async def __aenter__(self) -> None:
        await self.runner.beating(self.job, self.runner.slots.acquire())

    async def __aexit__(self, *exc: object) -> None:
        self.runner.slots.release()
