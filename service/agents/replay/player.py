"""One turn of a job with its agent: sent exactly once, followed until its task ends, approvals answered with
rejections when the branch says so.

Exactly once: the turn is stamped `sent_at` in its own transaction before its message is sent, and sent only
once this runner read its stamp back; a replica that takes the job over finds the stamp and looks for the
agent's task by the message's id instead of sending it again. A stamp whose answer was lost to the connection
(steady runs the step again) is recognised as this runner's own when the job is still this runner's: it did
not send the message, since it never read the stamp back.

A turn the agent lost (it restarted, and its task store was in memory) is answered "task not found" (A2A's
TaskNotFoundError, -32001 in both dialects) by `tasks/get`; nothing will ever end it, so its branch fails at once
instead of waiting out WHATIF_TIMEOUT_SECONDS. Two kinds of "not found" are no loss:
- right after sending, an agent may not have saved its new task yet: only an answer repeated for
  `LOST_AFTER_SECONDS` and at least `LOST_AFTER_POLLS` polls in a row, with no answer of the task between, is one;
- kagent's runtimes answer "not found" to every `tasks/get` (their task store asks kagent's backend without the
  caller's user id, so the task is looked up as the default user's) while the turn runs and saves its row. So
  beside a row of the task, "not found" is a loss only from an agent that answered the task before: the turn row
  keeps that it did (`agent_found_at`), for a replica that takes the job over too. Without it the row is followed
  as before, up to the time limit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

import msgspec

from service.agents import a2a_client
from service.agents.replay.steady import steady
from service.kagent import dialects
from service.kagent.store.base import Connection
from service.kagent.store.jobs import JobTurn, WhatifJob
from service.observability import TURN_DURATION
from service.services import Services

log = logging.getLogger("kagent_fork")
T = TypeVar("T")
_encoder = msgspec.json.Encoder()
POLL_SECONDS = 0.5
# "Not found" for this long, and this many polls in a row, is a lost turn (see the module's text): the seconds for
# an agent slow to save its new task, the polls for a runner slow to ask (a busy loop asks less often).
LOST_AFTER_SECONDS = 2.0
LOST_AFTER_POLLS = 3
# A turn's agent that asks for approval after approval is rejected this many times, then the branch stops.
MAX_REJECTIONS = 8
ENDED = {"completed", "failed", "canceled", "rejected", "input-required", "auth-required"}
WAITING = {"input-required", "auth-required"}


class Stop(Exception):
    """The job ends here: (status, error, stopped_at)."""

    def __init__(self, status: str, error: str | None, stopped_at: str | None = None) -> None:
        super().__init__(error or status)
        self.status, self.error, self.stopped_at = status, error, stopped_at


class NotOurs(Exception):
    """The job was cancelled, or another runner has it: stop without writing."""


class Host(Protocol):
    """What a turn needs of the runner that plays it."""

    svc: Services
    id: str

    async def beating(self, job: WhatifJob, work: Awaitable[T]) -> T: ...


@dataclass(kw_only=True)
class Turn:
    """A turn being played: its row, and the agent's task once known."""

    row: JobTurn
    task_id: str | None
    sent_at: datetime | None
    rejected: int = 0
    reply_id: str | None = None  # the last rejection sent, until the task's history holds it
    found: bool = False  # the agent answered a `tasks/get` of the task (the turn row's agent_found_at)
    missing_since: float | None = None  # when the agent first answered "not found" of those in a row
    missing: int = 0  # how many "not found" in a row
    told: bool = False  # the log said once that the agent does not find the task

    @classmethod
    def of(cls, row: JobTurn) -> Turn:
        turn = cls(row=row, task_id=row.task_id, sent_at=row.sent_at, rejected=row.rejected_tool_calls)
        turn.found = row.agent_found_at is not None
        if row.reply is not None and row.reply_sent_at is not None:
            turn.reply_id = msgspec.json.decode(row.reply).get("messageId")
        return turn


async def task_state(svc: Services, conn: Connection, job: WhatifJob, task_id: str | None) -> str | None:
    """The turn's task's state as kagent's row says it (spelt as the legacy dialect does), None: no row."""
    row = None if task_id is None else await svc.store.tasks.task_by_id(conn, task_id, job.session_id)
    try:
        task = None if row is None else dialects.decode(row.data)
    except dialects.TaskFormatError:
        return None
    return a2a_client.state_label(dialects.state(task)) if task is not None else None


@dataclass(kw_only=True)
class Player:
    """One turn of a job with its agent: sent once, followed until it ends, approvals answered."""

    host: Host
    job: WhatifJob
    agent: a2a_client.Agent

    async def turn(self, turn: Turn) -> str:
        """Send the turn (unless it was sent), then follow its task until it ends: its end state."""
        svc, row = self.host.svc, turn.row
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
                await self._cancel(turn.task_id)
            raise Stop(
                "failed", f"the agent did not finish turn {row.ordinal + 1} within {limit} s (WHATIF_TIMEOUT_SECONDS)"
            ) from None
        finally:
            TURN_DURATION.observe(max(0.0, time.time() - began))

    async def _db(self, step: Callable[[Connection, bool], Awaitable[T]]) -> T:
        return await steady(self.host.svc, step, f"what-if {self.job.id}")

    async def _cancel(self, task_id: str) -> None:
        try:
            await a2a_client.cancel_task(self.agent, task_id)
        except a2a_client.AgentError as exc:
            log.warning("what-if %s: the agent did not cancel its task: %s", self.job.id, exc)

    async def _send_once(self, turn: Turn) -> str | None:
        """The turn's message sent (stamped first, in its own transaction), or, when an earlier runner
        stamped it, the agent's task that holds it: never sent twice. The task id (None: no task)."""
        svc, job, row, me = self.host.svc, self.job, turn.row, self.host.id
        message = a2a_client.message_from_json(row.message)
        if row.sent_at is not None:
            found = await self._db(
                lambda conn, _: svc.store.tasks.task_holding_text(conn, job.session_id, message.message_id)
            )
            if found is None:
                raise Stop(
                    "failed", f"interrupted: the service stopped while sending turn {row.ordinal + 1}, which the "
                    "agent's tasks do not hold; it is not sent again",
                )  # fmt: skip
            task_id = found.id
        else:

            async def stamp(conn: Connection, again: bool) -> datetime | None:
                sent_at = await svc.store.jobs.whatif_turn_sending(conn, job.id, row.ordinal, me)
                if sent_at is None and again and await svc.store.jobs.whatif_heartbeat(conn, job.id, me):
                    # The stamp of the try whose answer was lost (see the module's text).
                    mine = [t for t in await svc.store.jobs.whatif_turns(conn, job.id) if t.ordinal == row.ordinal]
                    sent_at = mine[0].sent_at if mine and mine[0].task_id is None else None
                return sent_at

            turn.sent_at = await self._db(stamp)
            if turn.sent_at is None:
                raise NotOurs
            sent = await self.host.beating(job, a2a_client.send(self.agent, message))
            if sent is None:
                return None
            task_id = sent.id
        if not await self._db(lambda conn, _: svc.store.jobs.whatif_task(conn, job.id, task_id, row.ordinal)):
            # Cancelled while the message was on its way: the cancel did not know the task, so it is asked here.
            await self._cancel(task_id)
            raise NotOurs
        return task_id

    async def _follow(self, turn: Turn) -> str:
        """Follow the task until it ends; on `reject`, answer its approval requests with rejections."""
        svc, job, me = self.host.svc, self.job, self.host.id
        assert turn.task_id is not None
        beat_due = 0.0
        while True:
            if time.monotonic() >= beat_due:
                if not await self._db(lambda conn, _: svc.store.jobs.whatif_heartbeat(conn, job.id, me)):
                    raise NotOurs
                beat_due = time.monotonic() + svc.settings.whatif_heartbeat_seconds
            state, task = await self._state(turn)
            if task is not None and turn.reply_id is not None:
                if not dialects.holds_message(task, turn.reply_id):
                    state = "working"  # the agent has not taken the rejection in yet
                elif state in WAITING:
                    turn.reply_id = None  # a new request, after the rejection
            if state in WAITING and job.on_approval == "reject" and task is not None and turn.reply_id is None:
                if turn.rejected >= MAX_REJECTIONS:
                    return state
                answered = await self._reject(turn, task)
                if answered:
                    state = "working"
            if state in ENDED:
                return state
            await asyncio.sleep(POLL_SECONDS)

    async def _state(self, turn: Turn) -> tuple[str, dialects.JSON | None]:
        """How the task stands: kagent's task row first (its state and JSON), the agent over A2A when the
        row does not say it ended."""
        svc, job, task_id = self.host.svc, self.job, turn.task_id
        assert task_id is not None
        row = await self._db(lambda conn, _: svc.store.tasks.task_by_id(conn, task_id, job.session_id))
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
        except a2a_client.TaskNotFound:
            self._not_found(turn, kagent_row=row is not None)
            return label or "working", task
        except a2a_client.AgentError:
            if task is None:
                raise
            return label or "working", task
        turn.missing_since, turn.missing = None, 0
        if not turn.found:
            await self._db(lambda conn, _: svc.store.jobs.whatif_turn_found(conn, job.id, turn.row.ordinal))
            turn.found = True
        # An approval request is read from the row (it carries the request), once the row says so.
        if remote in ENDED and remote not in WAITING:
            return remote, task
        return label or "working", task

    def _not_found(self, turn: Turn, *, kagent_row: bool) -> None:
        """The agent answered "task not found": the turn is lost once that answer held (see the module's text)
        when the agent had answered the task before, or kagent holds no row of it; else the row is followed."""
        now, ordinal = time.monotonic(), turn.row.ordinal + 1
        turn.missing += 1
        if turn.missing_since is None:
            turn.missing_since = now
        if (turn.found or not kagent_row) and (
            turn.missing >= LOST_AFTER_POLLS and now - turn.missing_since >= LOST_AFTER_SECONDS
        ):
            log.warning(
                "what-if %s: the agent lost turn %d: task %s not found", self.job.id, ordinal, turn.task_id,
                extra={"action": "whatif", "job_id": self.job.id, "outcome": "lost"},
            )  # fmt: skip
            raise Stop("failed", f"the agent lost the turn: task {turn.task_id} not found (turn {ordinal})")
        if kagent_row and not turn.found and not turn.told:
            turn.told = True
            log.info(
                "what-if %s: the agent does not find task %s of turn %d by id (a kagent runtime that lost the "
                "caller): how it ends is read from kagent's task row", self.job.id, turn.task_id, ordinal,
            )  # fmt: skip

    async def _reject(self, turn: Turn, task: dialects.JSON) -> bool:
        """Answer the task's approval request with kagent's rejection (stamped first): whether it did."""
        assert turn.task_id is not None
        svc, job, me, ordinal = self.host.svc, self.job, self.host.id, turn.row.ordinal
        dialect = dialects.TaskDialect(job.dialect)
        found = a2a_client.rejection(task, dialect, context_id=job.session_id, task_id=turn.task_id)
        if found is None:
            return False  # a question, or a request no UI could answer: the branch stops here
        reply, count = found
        text = _encoder.encode(reply).decode()

        async def stamp(conn: Connection, again: bool) -> bool:
            if again:  # the try whose answer was lost may have stamped it: counted once
                mine = [t for t in await svc.store.jobs.whatif_turns(conn, job.id) if t.ordinal == ordinal]
                if (
                    mine
                    and mine[0].reply is not None
                    and msgspec.json.decode(mine[0].reply).get("messageId") == reply["messageId"]
                ):
                    return await svc.store.jobs.whatif_heartbeat(conn, job.id, me)
            return await svc.store.jobs.whatif_turn_reply(conn, job.id, ordinal, text, count, me)

        if not await self._db(stamp):
            raise NotOurs
        turn.reply_id, turn.rejected = str(reply["messageId"]), turn.rejected + count
        await self.host.beating(job, a2a_client.send(self.agent, a2a_client.reply_message(reply, dialect)))
        return True
