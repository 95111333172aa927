"""The judge: a kagent agent asked, over A2A as the caller, which of two continuations of an experiment's (or a
what-if's: an experiment of one agent, its judgment keyed on its job) conversation is better, blind (blind.py), each
pair twice with A and B swapped. A judgment is a job of the runner, as a branch is: its row has a runner and a
heartbeat, another replica takes it over when its runner goes silent, and each of its calls is stamped sent before it
is sent, so that no call is ever sent twice.

What is judged: each completed branch's whole continuation against the source's own continuation of the same
span, and, with several agents, each pair of agents' branches of the same repeat. A judgment asked for at the
start waits (`waiting`) until the experiment's branches all ended; `Runner.finish` then runs it. One asked for
later (`POST /api/experiments/{id}/judge`) is planned at once: its messages are built, gated and written with
it. A what-if's judgment waits for its one job, and judges its one pair (its branch against the source). The
numbers are verdict.py's; the grid (and a what-if's job) shows them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Protocol, TypeVar

import msgspec
from msgspec import Meta

from service.agents import a2a_client
from service.agents.replay import blind, verdict
from service.agents.replay.answerers import agent
from service.agents.replay.steady import steady
from service.agents.replay.terms import JobSpan, JudgeRef, Spanned, checked_agent_ref
from service.branches import transcript
from service.errors import ServiceError, Unprocessable
from service.kagent import dialects
from service.kagent.store.base import Connection
from service.kagent.store.jobs import WhatifJob
from service.kagent.store.judgments import JudgeCall, JudgmentRow
from service.operations import plan as fork_plan
from service.schemas import NO_NUL, Text
from service.services import Services

log = logging.getLogger("kagent_fork")
T = TypeVar("T")
# How often a call's task is read while the judge works: kagent's row every POLL_SECONDS (a judgment's
# latency between the judge's answer and the next call is about half of it), the judge over A2A at most every
# ASK_SECONDS while the row is there and does not say the task ended.
POLL_SECONDS = 0.05
ASK_SECONDS = 1.0
_encoder = msgspec.json.Encoder()
OPEN = ("waiting", "running")  # a judgment that is not over
ENDED = {"completed", "failed", "canceled", "rejected", "input-required", "auth-required"}


class JudgeSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`judge` of a what-if's or an experiment's start, and the body of POST /api/experiments/{id}/judge."""

    agent: Text
    # Blank criteria add nothing (the default ones stand); NUL cannot be stored.
    criteria: Annotated[str, Meta(min_length=1, max_length=blind.CRITERIA_CHARS, pattern=NO_NUL)] | None = None

    def checked(self) -> None:
        checked_agent_ref(self.agent, "judge.agent")


class NotOurs(Exception):
    """The judgment was cancelled, or another runner has it: stop without writing."""


class Host(Protocol):
    svc: Services
    id: str
    wakeups: dict[str, asyncio.Event]  # a running judgment's, by what it judges: a branch of it ended

    @property
    def slots(self) -> asyncio.Semaphore: ...


def judgment_row(
    experiment_id: str | None, user_id: str, spec: JudgeRef | JudgeSpec, card: a2a_client.Card | None, dialect: str,
    status: str, runner: str, judgment_id: str | None = None, *, job_id: str | None = None,
) -> JudgmentRow:  # fmt: skip
    """A judgment of an experiment (`experiment_id`), or of a what-if (`job_id`: its job)."""
    return JudgmentRow(
        id=judgment_id or str(uuid.uuid4()), experiment_id=experiment_id, job_id=job_id, user_id=user_id,
        judge_agent_ref=spec.agent,
        judge_card=_encoder.encode(dataclasses.asdict(card)).decode() if card is not None else None,
        criteria=spec.criteria, dialect=dialect, status=status, runner=runner, error=None, created_at=datetime.min,
        finished_at=None,
    )  # fmt: skip


def pairs(jobs: list[WhatifJob], *, ready: bool = True) -> list[tuple[WhatifJob | None, WhatifJob]]:
    """What is judged: (None = the source, branch) for each branch, then, for each two agents in the order they
    were named, their branches of the same repeat; `ready`: only those whose branches completed. The order is
    the same whatever has ended (a pair's calls are numbered by its place in it)."""
    out: list[tuple[WhatifJob | None, WhatifJob]] = [(None, j) for j in jobs]
    refs = list(dict.fromkeys(j.agent_ref for j in jobs))
    for i, left in enumerate(refs):
        for right in refs[i + 1 :]:
            for lj in (j for j in jobs if j.agent_ref == left):
                out += [(lj, rj) for rj in jobs if rj.agent_ref == right and rj.repeat == lj.repeat]
    if ready:
        out = [(left, right) for left, right in out if _done(left) and _done(right)]
    return out


def _done(job: WhatifJob | None) -> bool:
    return job is None or job.status == "completed"


async def _turns(
    svc: Services, conn: Connection, session_id: str, owner: str, since: datetime | None = None, *, branch: bool = False
) -> list[transcript.Turn]:
    """A session's turns as the transcript reads them. `branch`: a branch's fork, the experiment's own row, read
    whether or not a discard hid it (hidden, it would read as empty, and the judge would compare nothing)."""
    sessions = svc.store.sessions
    session = await (sessions.owned_session if branch else sessions.get_session)(conn, session_id, owner)
    if session is None:
        return []
    reading = await transcript.open_reading(svc, conn, session, since=since)
    return [t async for t in reading.turns()]


@dataclass
class Texts:
    """What a judgment's messages are made of, read once each: the conversation before the boundary, the
    source's continuation, each completed branch's."""

    before: str | None = None
    source: str | None = None
    branches: dict[str, str] = field(default_factory=dict)
    # The continuations with no answer in them (SOURCE, or a branch's job id): never judged.
    unanswered: set[str] = field(default_factory=set)


SOURCE = "source"


async def read_texts(svc: Services, conn: Connection, row: Spanned, jobs: list[WhatifJob], known: Texts) -> None:
    """The texts `known` lacks for these branches, as the transcript reads them (the one reader), in one
    snapshot. A branch's continuation is its fork's turns since its job was written, read from then on (the
    fork's copied turns keep the source's times)."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        if known.before is None or known.source is None:
            source = await _turns(svc, conn, row.source_session_id, row.source_user_id)
            keys = [
                i for i, t in enumerate(source)
                if (row.rewind_before_invocation_id and t.invocation_id == row.rewind_before_invocation_id)
                or (row.rewind_before_task_id and t.task_id == row.rewind_before_task_id)
            ]  # fmt: skip
            if not keys:
                raise Unprocessable("the replay's first turn is no longer in the source's transcript")
            known.before = blind.turns_text(source[: keys[0]], numbered=False)
            span = source[keys[0] : keys[0] + row.turns]
            known.source = blind.turns_text(span)
            if not blind.answered(span):
                known.unanswered.add(SOURCE)
        for j in jobs:
            if j.id not in known.branches:
                turns = await _turns(svc, conn, j.session_id, j.user_id, j.created_at, branch=True)
                if not blind.answered(turns):
                    known.unanswered.add(j.id)
                text = blind.turns_text(turns)
                figures = [
                    msgspec.json.decode(t.figures) for t in await svc.store.jobs.whatif_turns(conn, j.id) if t.figures
                ]
                note = blind.tool_policy_note(figures)
                known.branches[j.id] = text if note is None else f"{text}\n\n{note}"


async def plan(
    svc: Services, conn: Connection, row: Spanned, jobs: list[WhatifJob], judgment_id: str, criteria: str | None,
    *, planned: frozenset[int] = frozenset(), known: Texts | None = None,
) -> list[JudgeCall]:  # fmt: skip
    """The calls of the pairs whose branches completed and that are not `planned` yet: each pair twice, A and B
    swapped (ordinals 2i and 2i + 1, i its place among every pair), each message in a context of its own."""
    known = known if known is not None else Texts()
    everyone = pairs(jobs, ready=False)
    ready = [(i, left, right) for i, (left, right) in enumerate(everyone)
             if _done(left) and _done(right) and 2 * i not in planned]  # fmt: skip
    if ready:
        await read_texts(svc, conn, row, [j for _, left, right in ready for j in (left, right) if j is not None], known)
    calls: list[JudgeCall] = []
    for i, left, right in ready:
        first = known.source if left is None else known.branches[left.id]
        second = known.branches[right.id]
        assert known.before is not None and first is not None
        error = _unanswered(known, left, right)
        for swapped in (False, True):
            a, b = (second, first) if swapped else (first, second)
            context = str(uuid.uuid4())
            text = blind.message_text(known.before, a, b, criteria)
            calls.append(
                JudgeCall(
                    judgment_id=judgment_id, ordinal=2 * i + swapped, left_job=left.id if left else None,
                    right_job=right.id, swapped=swapped, message=a2a_client.text_message_json(text, context),
                    context_id=context, sent_at=None, task_id=None, answer=None, winner=None, reason=None,
                    error=error, ended_at=None,
                )
            )  # fmt: skip
    return calls


def _unanswered(known: Texts, left: WhatifJob | None, right: WhatifJob) -> str | None:
    """Why a pair is not judged (its calls are written ended with this, never sent), or None: a side whose
    continuation holds no answer (the judge would compare something with nothing)."""
    empty = [
        "the source's" if job is None else f"{job.agent_ref} #{job.repeat}'s"
        for job in (left, right) if (SOURCE if job is None else job.id) in known.unanswered
    ]  # fmt: skip
    return f"not judged: {' and '.join(empty)} continuation holds no answer" if empty else None


async def _db(svc: Services, judgment: JudgmentRow, step: Callable[[Connection, bool], Awaitable[T]]) -> T:
    return await steady(svc, step, f"judgment {judgment.id}")


async def _advance(host: Host, judgment: JudgmentRow, known: Texts) -> tuple[list[JudgeCall], bool]:
    """The judgment's calls, with those of the pairs whose branches completed since planned and written now;
    and whether its experiment ended (no branch will end any more)."""
    svc = host.svc

    async def step(conn: Connection, _: bool) -> tuple[list[JudgeCall], bool]:
        row: Spanned
        if judgment.job_id is not None:  # a what-if's: its one job
            job = await svc.store.jobs.whatif_job(conn, judgment.job_id, judgment.user_id)
            if job is None:
                return [], True
            row, jobs, finished = JobSpan.of(job), [job], job.finished_at
        else:
            found = await svc.store.experiments.experiment(conn, judgment.judged, judgment.user_id)
            if found is None:
                return [], True
            row, jobs, finished = found, await svc.store.experiments.branches(conn, found.id), found.finished_at
        calls = await svc.store.judgments.calls(conn, judgment.id)
        planned = frozenset(c.ordinal for c in calls)
        began = time.perf_counter()
        new = await plan(svc, conn, row, jobs, judgment.id, judgment.criteria, planned=planned, known=known)
        if new:
            await svc.store.judgments.insert_calls(conn, judgment.id, host.id, new)
            calls = await svc.store.judgments.calls(conn, judgment.id)
            took = round((time.perf_counter() - began) * 1000)
            log.info("judgment %s: %d calls planned", judgment.id, len(new), extra={"duration_ms": took})
        return calls, finished is not None

    return await _db(svc, judgment, step)


async def run(host: Host, judgment: JudgmentRow, hdrs: dict[str, str]) -> None:
    """Run the judgment: each pair's calls once its branches completed (at most WHATIF_MAX_PARALLEL with agents
    at once, the runner's slots), woken when one of its branches ends on this runner, beating meanwhile; ended
    once its experiment ended and every call was answered."""
    svc = host.svc
    wake = host.wakeups.setdefault(judgment.judged, asyncio.Event())
    judge = agent(svc, judgment.judge_agent_ref, judgment.dialect, hdrs, svc.settings.whatif_timeout_seconds)
    known, work = Texts(), dict[int, "asyncio.Future[Any]"]()
    try:
        while True:
            wake.clear()
            calls, ended = await _advance(host, judgment, known)
            for c in calls:
                if c.ended_at is None and c.ordinal not in work:
                    work[c.ordinal] = asyncio.ensure_future(_call(host, judgment, judge, c))
            running = {t for t in work.values() if not t.done()}
            if ended and not running:
                break
            waker: asyncio.Future[Any] = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({*running, waker}, timeout=svc.settings.whatif_heartbeat_seconds,
                                   return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            finally:
                waker.cancel()
            for task in work.values():
                if task.done() and (exc := task.exception()) is not None:
                    raise exc
            if not await _db(svc, judgment, lambda c, _: svc.store.judgments.heartbeat(c, judgment.id, host.id)):
                raise NotOurs
        await _finish(svc, judgment, None, None)
    except asyncio.CancelledError:
        raise
    except NotOurs:
        pass
    except ServiceError as exc:
        await _finish(svc, judgment, "failed", exc.message)
    except Exception as exc:  # a judgment must end whatever happens; the log has the rest
        log.exception("judgment %s failed", judgment.id)
        await _finish(svc, judgment, "failed", f"internal error: {type(exc).__name__}")
    finally:
        for task in work.values():
            task.cancel()
        if host.wakeups.get(judgment.judged) is wake:
            del host.wakeups[judgment.judged]


async def _finish(svc: Services, judgment: JudgmentRow, status: str | None, error: str | None) -> None:
    """End the judgment: `status` None once every call ended (then verdict.ending says how)."""

    async def step(conn: Connection, _: bool) -> str:
        async with conn.transaction():
            calls = [] if status else await svc.store.judgments.calls(conn, judgment.id)
            said, why = (status, error) if status else verdict.ending([(c.winner, c.error) for c in calls])
            if await svc.store.judgments.finish(conn, judgment.id, said, why) is not None:
                await svc.store.judgments.close_calls(conn, judgment.id, why or said)
            return said

    said = await _db(svc, judgment, step)
    log.info("judgment %s", said, extra={"action": "judge", "outcome": said})


async def _call(host: Host, judgment: JudgmentRow, judge: a2a_client.Agent, call: JudgeCall) -> None:
    """One call: sent once, its task followed until it ends (within WHATIF_TIMEOUT_SECONDS of being sent), its
    answer read and kept with what it says."""
    svc = host.svc
    limit = svc.settings.whatif_timeout_seconds
    answer = winner = reason = error = None
    task_id = call.task_id
    async with host.slots:
        began = call.sent_at.timestamp() if call.sent_at else time.time()
        try:
            async with asyncio.timeout(max(limit - (time.time() - began), 0.001)):
                if task_id is None:
                    task_id = await _send_once(host, judgment, judge, call)
                answer, error = await _follow(svc, judgment, judge, call, task_id)
        except TimeoutError:
            error = f"the judge did not answer within {limit} s (WHATIF_TIMEOUT_SECONDS)"
            if task_id is not None:
                await _cancel(judge, task_id)
        except a2a_client.AgentError as exc:
            error = str(exc)
        except ServiceError as exc:
            error = exc.message
    if error is None:
        winner, reason = blind.parse_answer(answer)
    await _db(
        svc, judgment,
        lambda conn, _: svc.store.judgments.call_end(
            conn, judgment.id, call.ordinal, answer=answer, winner=winner, reason=reason, error=error
        ),
    )  # fmt: skip


async def _cancel(judge: a2a_client.Agent, task_id: str) -> None:
    try:
        await a2a_client.cancel_task(judge, task_id)
    except a2a_client.AgentError as exc:
        log.warning("judge %s did not cancel its task: %s", judge.ref, exc)


async def _send_once(host: Host, judgment: JudgmentRow, judge: a2a_client.Agent, call: JudgeCall) -> str:
    """The call's message sent (stamped first), or, when an earlier runner stamped it, the judge's task that
    holds it: never sent twice. The judge's task id."""
    svc, me = host.svc, host.id
    message = a2a_client.message_from_json(call.message)
    if call.sent_at is not None:
        found = await _db(
            svc, judgment, lambda conn, _: svc.store.tasks.task_holding_text(conn, call.context_id, message.message_id)
        )
        if found is None:
            raise Unprocessable("interrupted: the service stopped while sending this call, which the judge's tasks "
                                "do not hold; it is not sent again")  # fmt: skip
        task_id = found.id
    else:

        async def stamp(conn: Connection, again: bool) -> datetime | None:
            sent = await svc.store.judgments.call_sending(conn, judgment.id, call.ordinal, me)
            if sent is None and again and await svc.store.judgments.heartbeat(conn, judgment.id, me):
                mine = [c for c in await svc.store.judgments.calls(conn, judgment.id) if c.ordinal == call.ordinal]
                sent = mine[0].sent_at if mine and mine[0].task_id is None else None
            return sent

        if await _db(svc, judgment, stamp) is None:
            raise NotOurs
        task = await a2a_client.send(judge, message)
        if task is None:
            raise Unprocessable("the judge answered with a message and no task")
        task_id = task.id
    ours = await _db(
        svc, judgment, lambda conn, _: svc.store.judgments.call_task(conn, judgment.id, call.ordinal, task_id)
    )
    if not ours:
        await _cancel(judge, task_id)
        raise NotOurs
    return task_id


async def _follow(
    svc: Services, judgment: JudgmentRow, judge: a2a_client.Agent, call: JudgeCall, task_id: str
) -> tuple[str | None, str | None]:
    """Follow the judge's task until it ends: (its answer, None), or (None, why it has none). kagent's task row
    first, the judge over A2A when the row does not say it ended."""
    asked = 0.0
    while True:
        row = await _db(svc, judgment, lambda conn, _: svc.store.tasks.task_by_id(conn, task_id, call.context_id))
        task: dialects.JSON | None = None
        dialect = dialects.TaskDialect(judgment.dialect)
        if row is not None:
            try:
                task, dialect = dialects.decode(row.data), fork_plan.dialect_of(row)
            except (dialects.TaskFormatError, ServiceError):
                task = None
        state = a2a_client.state_label(dialects.state(task)) if task is not None else None
        if state not in ENDED and (task is None or time.monotonic() - asked >= ASK_SECONDS):
            asked = time.monotonic()
            remote = await a2a_client.get_task(judge, task_id)
            state = a2a_client.label_of(remote.status.state)
            task, dialect = a2a_client.task_json(remote), dialects.TaskDialect.V1
        if state in ENDED and task is not None:
            if state != "completed":
                return None, f"the judge's task ended {state}"
            return dialects.last_agent_text(task, dialect), None
        await asyncio.sleep(POLL_SECONDS)


async def cancel(svc: Services, conn: Connection, judgments: list[JudgmentRow]) -> list[tuple[JudgmentRow, list[str]]]:
    """Mark the waiting or running ones cancelled, their calls closed: each cancelled one with the judge's tasks
    to cancel (`cancel_tasks`, once the connection is given back)."""
    out = []
    for judgment in judgments:
        async with conn.transaction():
            if await svc.store.judgments.finish(conn, judgment.id, "cancelled", None) is None:
                continue
            out.append((judgment, await svc.store.judgments.close_calls(conn, judgment.id, "cancelled")))
    return out


async def cancel_tasks(svc: Services, cancelled: list[tuple[JudgmentRow, list[str]]], hdrs: dict[str, str]) -> None:
    """Ask the judge to cancel the tasks of the calls a cancel closed."""
    if svc.settings.kagent_a2a_url is None:
        return
    for judgment, tasks in cancelled:
        judge = agent(svc, judgment.judge_agent_ref, judgment.dialect, hdrs, 10.0)
        for task_id in tasks:
            await _cancel(judge, task_id)


async def judge_card(svc: Services, spec: JudgeSpec, dialect: str, hdrs: dict[str, str]) -> a2a_client.Card:
    """The judge's card, as kagent serves it (as the caller): a 422 naming it when it does not answer."""
    timeout = min(10.0, float(svc.settings.whatif_timeout_seconds))
    try:
        return await a2a_client.fetch_card(agent(svc, spec.agent, dialect, hdrs, timeout))
    except a2a_client.AgentError as exc:
        raise Unprocessable(f"the judge {spec.agent} did not answer through kagent's A2A endpoint: {exc}") from None
