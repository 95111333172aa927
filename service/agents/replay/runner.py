"""Running a replay's jobs, turn by turn: the replica that started a job runs it (`Runner`), another one takes
it over when that replica stops beating, and no message is ever sent twice (player.py).

A job re-asks its turns in order (a what-if's `turns` of them, each branch of an experiment the same). How a
turn ended is read from kagent's own task row (the agent saves its task there), and from the agent over A2A
only when the row does not say (kagent's runtimes answer "Task not found" to a `tasks/get`, having lost the
caller, although the row is right; an agent that answered the task and then does not know it lost the turn, and
the branch fails at once: player.py). At most `WHATIF_MAX_PARALLEL` turns are with agents at once per
replica; a job that waits for a slot keeps beating, so that no sweep takes it meanwhile. Every database step
of a job is steady (steady.py): a transient loss is waited out, and a branch fails only for what its agent did.
When a job ends, every turn it sent shows how it ended (`close_turns`), also after a failure or a cancel.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

import msgspec

from service.agents import a2a_client
from service.agents.replay import judge, lease
from service.agents.replay.answerers import agent, headers
from service.agents.replay.figures import JobResult, TurnFigures, question_of, sent_parts, task_answer, turn_figures
from service.agents.replay.player import ENDED, WAITING, NotOurs, Player, Stop, Turn, task_state
from service.agents.replay.steady import TRANSIENT, steady
from service.errors import ServiceError
from service.kagent import frameworks
from service.kagent.store.base import Connection
from service.kagent.store.jobs import JobTurn, WhatifJob
from service.kagent.store.judgments import JudgmentRow
from service.observability import EXPERIMENTS, TURNS, WHATIF_DURATION, WHATIF_JOBS, WHATIF_RUNNING
from service.operations import summary
from service.services import Services

log = logging.getLogger("kagent_fork")
T = TypeVar("T")
_encoder = msgspec.json.Encoder()
# How a sent turn whose task had not ended reads once its job ended, by the job's status.
_CLOSED = {"cancelled": "canceled"}


async def ended_figures(
    svc: Services, conn: Connection, job: WhatifJob, row: JobTurn, state: str, task_id: str | None, rejected: int
) -> TurnFigures:
    """A turn's figures once it ended: the events since it was sent, its answer from its task when they hold
    none (every framework but ADK), what was sent and how many calls were rejected."""
    parts = sent_parts(row.message)
    figures = await turn_figures(
        svc, conn, job.session_id, job.user_id, row.sent_at or job.created_at, None,
        question=question_of(parts), sent=parts, rejected_tool_calls=rejected, state=state,
    )  # fmt: skip
    if figures.answer is None and task_id is not None:
        figures = msgspec.structs.replace(figures, answer=await task_answer(svc, conn, job, task_id))
    return figures


async def close_turns(svc: Services, conn: Connection, job: WhatifJob, status: str) -> None:
    """Every turn the ended job sent and did not see end, closed with how its task ended in kagent's row (or,
    when the row does not say it ended, as the job ended: `canceled` or `failed`)."""
    for row in await svc.store.jobs.whatif_turns(conn, job.id):
        if row.sent_at is None or row.ended_at is not None:
            continue
        state = await task_state(svc, conn, job, row.task_id)
        if state not in ENDED:
            state = _CLOSED.get(status, "failed")
        figures = await ended_figures(svc, conn, job, row, state, row.task_id, row.rejected_tool_calls)
        await svc.store.jobs.whatif_turn_close(conn, job.id, row.ordinal, state, _encoder.encode(figures).decode())


@dataclass(kw_only=True)
class Runner:
    """Runs this replica's jobs in the background; takes over jobs whose replica stopped beating."""

    svc: Services
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    jobs: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _sweeper: asyncio.Task[None] | None = None
    _slots: asyncio.Semaphore | None = None
    _chores: set[asyncio.Task[None]] = field(default_factory=set)
    wakeups: dict[str, asyncio.Event] = field(default_factory=dict)  # judge.run's, by what it judges
    # Other work taken over at each sweep, given by what sits above the engine (suite runs: suites/driver.py),
    # each answering how many it took.
    sweepers: list[Callable[[], Awaitable[int]]] = field(default_factory=list)

    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.svc.settings.whatif_max_parallel)
        return self._slots

    def launch(self, job: WhatifJob, hdrs: dict[str, str]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(job, hdrs), name=f"whatif-{job.id}")
        self.jobs[job.id] = task
        task.add_done_callback(lambda _: self.jobs.pop(job.id, None))

    def launch_judgment(self, judgment: JudgmentRow, hdrs: dict[str, str]) -> None:
        """Run a judgment (judge.py) as one of this replica's jobs: stopped at shutdown, taken over by the sweep."""
        task = asyncio.get_running_loop().create_task(judge.run(self, judgment, hdrs), name=f"judgment-{judgment.id}")
        self.jobs[judgment.id] = task
        task.add_done_callback(lambda _: self.jobs.pop(judgment.id, None))

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
            judgments = await self.svc.store.judgments.claim_stale(conn, self.id, 3 * beat)
        for job in stale:
            log.info("what-if %s: taken over from a runner that stopped", job.id)
            self.launch(job, headers(job.user_id, None))
        for judgment in judgments:
            log.info("judgment %s: taken over from a runner that stopped", judgment.id)
            self.launch_judgment(judgment, headers(judgment.user_id, None))
        taken = [await sweep() for sweep in self.sweepers]
        return len(stale) + len(judgments) + sum(taken)

    async def _sweep_forever(self) -> None:
        beat = self.svc.settings.whatif_heartbeat_seconds
        while True:
            try:
                await self.sweep()
            except TRANSIENT as exc:
                log.warning("what-if sweep: database unavailable: %s", type(exc).__name__)
            await asyncio.sleep(3 * beat)

    async def _run(self, job: WhatifJob, hdrs: dict[str, str]) -> None:
        WHATIF_RUNNING.inc()
        try:
            await self._play(job, hdrs)
            await self.finish(job, "completed", None, hdrs)
        except asyncio.CancelledError:
            raise
        except NotOurs:
            pass
        except Stop as stop:
            await self.finish(job, stop.status, stop.error, hdrs)
        except a2a_client.AgentError as exc:
            await self.finish(job, "failed", str(exc), hdrs)
        except ServiceError as exc:
            await self.finish(job, "failed", exc.message, hdrs)
        except Exception as exc:  # a job must end whatever happens; the log has the rest
            log.exception("what-if %s failed", job.id)
            await self.finish(job, "failed", f"internal error: {type(exc).__name__}", hdrs)
        finally:
            WHATIF_RUNNING.dec()

    async def _play(self, job: WhatifJob, hdrs: dict[str, str]) -> None:
        """Every turn not yet ended, in order; one A2A turn after the previous task ended completed."""
        svc = self.svc
        player = Player(
            host=self, job=job, agent=agent(svc, job.agent_ref, job.dialect, hdrs, svc.settings.whatif_timeout_seconds)
        )
        rows = await steady(svc, lambda conn, _: svc.store.jobs.whatif_turns(conn, job.id), f"what-if {job.id}")
        for row in rows:
            if row.ended_at is not None:
                continue
            turn = Turn.of(row)
            # A twin's calls are this turn's while it holds the twin's lease (lease.py); then a slot.
            async with lease.held(self, job, row.ordinal), _Slot(self, job):
                state = await player.turn(turn)
            TURNS.labels(state).inc()
            await self._end_turn(job, turn, state)
            if state in WAITING:
                return  # a person answers it in the fork: the branch went as far as it goes alone
            if state != "completed":
                raise Stop("failed", f"the agent's task ended {state} at turn {row.ordinal + 1}")

    async def _end_turn(self, job: WhatifJob, turn: Turn, state: str) -> None:
        """Record how the turn ended and what it did (the job has done one more turn; stopped there when its
        agent waits for a person)."""
        svc, row = self.svc, dataclasses.replace(turn.row, sent_at=turn.sent_at or turn.row.sent_at)
        stopped = row.invocation_id if state in WAITING else None

        async def end(conn: Connection, _: bool) -> None:
            figures = await ended_figures(svc, conn, job, row, state, turn.task_id, turn.rejected)
            await svc.store.jobs.whatif_turn_end(
                conn, job.id, row.ordinal, state, _encoder.encode(figures).decode(), stopped
            )

        await steady(svc, end, f"what-if {job.id}")

    async def beating(self, job: WhatifJob, work: Awaitable[T]) -> T:
        """`work`, while this runner keeps beating for the job (so that no sweep takes it meanwhile); a beat
        lost to the database is skipped (the next one is due a beat later)."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.svc.settings.whatif_heartbeat_seconds)
                if done:
                    return task.result()
                try:
                    async with self.svc.connection() as conn:
                        await self.svc.store.jobs.whatif_heartbeat(conn, job.id, self.id)
                except TRANSIENT as exc:
                    log.warning("what-if %s: a beat lost to the database (%s)", job.id, type(exc).__name__)
        finally:
            task.cancel()

    async def finish(self, job: WhatifJob, status: str, error: str | None, hdrs: dict[str, str] | None = None) -> None:
        """End the job (in its own transaction) with what the agent wrote into the fork since it began, its
        sent turns closed; then its experiment, when it was the last branch running; then its judgment (its
        experiment's, or a what-if's own) is told (`_judge`)."""
        svc = self.svc

        async def step(conn: Connection, _: bool) -> tuple[datetime | None, str | None]:
            await close_turns(svc, conn, job, status)
            result = await _result(svc, conn, job)
            ended = await svc.store.jobs.whatif_finish(
                conn, job.id, status, error=error, result=_encoder.encode(result).decode()
            )
            settled = await svc.store.experiments.settle(conn, job.experiment_id) if job.experiment_id else None
            return ended, settled

        ended, settled = await steady(svc, step, f"what-if {job.id}")
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
        if ended is not None:
            await self._judge(job, hdrs)

    async def _judge(self, job: WhatifJob, hdrs: dict[str, str] | None) -> None:
        """A branch ended: its experiment's judgment, running here, is woken to judge its pairs; one that waits
        is run (by this runner, as the caller: `hdrs`, the start's, when this runner started the branch). A
        what-if's job is its own branch: its judgment (keyed on the job) waits for it alone."""
        store, judged = self.svc.store.judgments, job.experiment_id or job.id
        if (wake := self.wakeups.get(judged)) is not None:
            wake.set()
            return
        waiting = await steady(
            self.svc,
            lambda conn, _: store.start_waiting(conn, judged, self.id) if job.experiment_id
            else store.start_waiting_job(conn, judged, self.id),
            "judgments",
        )  # fmt: skip
        for judgment in waiting:
            self.launch_judgment(judgment, hdrs or headers(job.user_id, None))


async def _result(svc: Services, conn: Connection, job: WhatifJob) -> JobResult:
    """What the agent wrote into the fork since the job began: its last answer, tool calls and tokens."""
    users = tuple(await frameworks.runtime_users(svc.store, conn, job.session_id, job.user_id))  # asked once
    framework = await frameworks.detect(svc.store, conn, job.session_id, job.user_id, users)
    # The fork's rows where its agent's runtime wrote them (kagent's default user for the 0.10.4 runtimes), as
    # its transcript reads them (docs/frameworks.md).
    fork_row = await svc.store.sessions.get_session(conn, job.session_id, job.user_id)
    runtime = await frameworks.runtime_session(svc.store, conn, fork_row, framework, users) if fork_row else None
    rows_user = runtime.user_id if runtime is not None else job.user_id
    tally = await summary.tally(svc.store, conn, job.session_id, rows_user, job.created_at)
    answer, tools = tally.last_agent_text, tally.tool_calls
    if framework in frameworks.TASK_CHAT:
        # Its chat is in its tasks: the tool calls of the tasks written since the job began.
        async with conn.transaction(readonly=True):  # its tasks are read through a cursor
            told = await summary.summarize_tasks(svc.store, conn, job.session_id, rows_user, job.created_at)
        tools = told.tool_calls if told is not None else {}
    if answer is None:
        # Events that hold no text (LangGraph, CrewAI, Claude; an ADK turn without text): the last task's answer.
        turns = await svc.store.jobs.whatif_turns(conn, job.id)
        task_id = next((t.task_id for t in reversed(turns) if t.task_id is not None), None)
        answer = await task_answer(svc, conn, job, task_id) if task_id is not None else None
    return JobResult(last_agent_text=answer, tool_calls=dict(sorted(tools.items())), total_tokens=tally.total_tokens)


class _Slot:
    """One of the replica's WHATIF_MAX_PARALLEL places for a turn with an agent, waited for while beating."""

    def __init__(self, runner: Runner, job: WhatifJob) -> None:
        self.runner, self.job = runner, job

    async def __aenter__(self) -> None:
        await self.runner.beating(self.job, self.runner.slots.acquire())

    async def __aexit__(self, *exc: object) -> None:
        self.runner.slots.release()
