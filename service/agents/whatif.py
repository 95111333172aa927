"""What-if: regenerate a turn (or the turns from it on) on another agent over A2A, as a job.

Starting one is the fork operation itself (into the chosen agent, `forking.Into`), whose transaction
also writes the job row and its turns; then the runner (service/agents/runner.py) sends the turns' user
messages to the agent over A2A (kagent's endpoint) with the fork as their context, one after the other,
and the agent writes the new turns into the fork as it does for any chat. An experiment's branches are
such jobs (service/agents/experiments.py), started by `write_branch` below.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal, Protocol, TypeVar

import msgspec
from msgspec import Meta

from service.agents import a2a_client
from service.agents.runner import JobResult, Runner, headers
from service.branches import turns as turn_listing
from service.errors import BadRequest, Conflict, NotConfigured, NotFound, Unprocessable
from service.identity import Caller, visible_session
from service.kagent import dialects, frameworks, turn_map
from service.kagent.store.base import Connection
from service.kagent.store.jobs import WhatifJob
from service.kagent.store.sessions import SessionRow
from service.kagent.store.tasks import TaskRow
from service.observability import WHATIF_DURATION, WHATIF_JOBS
from service.operations import boundary, forking, plan
from service.schemas import ForkedSession, ForkRequest, Text, one_boundary, rfc3339
from service.services import Services

__all__ = ["Job", "Runner", "Started", "WhatifRequest", "cancel", "get", "of_session", "start"]

_encoder = msgspec.json.Encoder()
log = logging.getLogger("kagent_fork")
T = TypeVar("T")

# A kagent agent is a Kubernetes resource: namespace/name, each a DNS label (so never a `_`).
AGENT_REF = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # fullmatch
# JSON Schema counts 2.0 as an integer, so a whole float is one too (a fraction is refused).
Tokens = Annotated[int, Meta(ge=1, le=10**12)] | Annotated[float, Meta(ge=1, le=1e12)]
# Out of range (below 1, or more than the source holds from the boundary) is a 422 (read_span).
# JSON Schema counts 2.0 as an integer, so a whole float is one too (a fraction is a 400).
Count = Annotated[int, Meta(ge=-(2**31), le=2**31)] | Annotated[float, Meta(ge=-(2**31), le=2**31)]
TurnCount = Count | Literal["all"]


def whole(value: int | float, what: str) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise BadRequest(f"{what} must be a whole number")
    return int(value)


# An edited question may be longer than an id; the body limit (MAX_BODY_BYTES) bounds it too.
MESSAGE_TEXT_CHARS = 16_384


class MessageEdit(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    text: Annotated[str, Meta(min_length=1, max_length=MESSAGE_TEXT_CHARS, pattern=r"^[^\x00]*[^\x00\s][^\x00]*$")]


class WhatifRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    rewind_before_invocation_id: Text | None = None
    rewind_before_task_id: Text | None = None
    agent_ref: Text | None = None
    name: Text | None = None
    max_context_tokens: Tokens | None = None
    turns: TurnCount = 1
    message: MessageEdit | None = None


class StartRequest(Protocol):
    """What `begin` reads of a what-if's or an experiment's request."""

    @property
    def rewind_before_invocation_id(self) -> str | None: ...
    @property
    def rewind_before_task_id(self) -> str | None: ...
    @property
    def max_context_tokens(self) -> int | float | None: ...


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


class Started(msgspec.Struct, frozen=True, kw_only=True):
    job: Job
    session: ForkedSession


def job_json(job: WhatifJob) -> Job:
    return Job(
        id=job.id, status=job.status, session_id=job.session_id, parent_session_id=job.parent_session_id,
        rewind_before_invocation_id=job.rewind_before_invocation_id, rewind_before_task_id=job.rewind_before_task_id,
        agent_ref=job.agent_ref, task_id=job.task_id,
        error=job.error, created_at=rfc3339(job.created_at),
        finished_at=rfc3339(job.finished_at) if job.finished_at else None,
        result=msgspec.json.decode(job.result, type=JobResult) if job.result else None,
        turns_done=job.turns_done, turns_total=job.turns_total, stopped_at=job.stopped_at,
        experiment_id=job.experiment_id,
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
    return ref if AGENT_REF.fullmatch(ref) else None


def checked_agent_ref(value: str, what: str = "agent_ref") -> str:
    if not AGENT_REF.fullmatch(value):
        raise Unprocessable(f"{what} must be namespace/name of a kagent agent, got {value!r}")
    return value


def whole_tokens(value: int | float | None, default: int) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise BadRequest("max_context_tokens must be a whole number")
    return int(value or default)


@dataclass(frozen=True, kw_only=True)
class SourceTurn:
    invocation_id: str  # or, for a turn known by its task alone, the task's id (task_id)
    message: dialects.JSON  # the user message that opened the turn, as the source task's history holds it
    started_at: datetime
    task_id: str | None = None  # the turn's task, when the turn has no invocation id


@dataclass(frozen=True, kw_only=True)
class Span:
    """The source turns a job re-asks, from the boundary on, and what each costs to ask."""

    source: SessionRow
    agent_ref: str | None  # the source's own agent, when its agent_id spells one
    dialect: dialects.TaskDialect
    turns: list[SourceTurn]
    tokens: list[int]  # the estimated context before each turn (the transcript's estimated_context_tokens)
    position: int | None  # the boundary turn's number in the listing (None: a turn only its task knows)


def default_name(span: Span, agent_ref: str, repeat: int | None = None) -> str:
    """A what-if's or a branch's fork name when none is given: the agent, the turn, the repeat."""
    name = fork_name(agent_ref, span.position, span.turns[0].invocation_id, span.source.name)
    return name if repeat is None else f"{name} #{repeat}"[:256]


@dataclass(frozen=True, kw_only=True)
class Boundary:
    """The turn a what-if or an experiment starts from: by its invocation, or, for an agent that writes
    none (every framework but ADK), by its task alone."""

    invocation_id: str | None
    task_id: str | None  # only for a turn known by its task alone

    @property
    def key(self) -> str:
        """The turn's key in a job's turns and an experiment's rows: its invocation id, else its task id."""
        key = self.invocation_id or self.task_id
        assert key is not None
        return key

    def fork_request(self, name: str | None) -> ForkRequest:
        return ForkRequest(
            rewind_before_invocation_id=self.invocation_id, rewind_before_task_id=self.task_id, name=name,
            if_boundary_missing="error",
        )  # fmt: skip


async def turn_named(
    svc: Services, caller: Caller, session_id: str, invocation_id: str | None, task_id: str | None
) -> Boundary:
    """The turn a what-if or an experiment starts from, named by invocation or by task (one of the two, 400
    otherwise). A task of an ADK agent names its invocation's turn; a task of an agent that writes no
    invocation id names the turn that starts with it."""
    one_boundary(invocation_id, task_id, required=True)
    if task_id is None:
        return Boundary(invocation_id=invocation_id, task_id=None)
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, _ = await visible_session(svc, conn, caller, session_id)
        _, rows = await turns_read_from(svc, conn, source)
        named = await boundary.named_turn(svc, conn, rows, None, task_id)
    if named.missing is not None:
        raise NotFound(f"task {task_id} not found in session {session_id}")
    if named.invocation_id is None:
        return Boundary(invocation_id=None, task_id=task_id)
    return Boundary(invocation_id=named.invocation_id, task_id=None)


async def begin(
    svc: Services,
    caller: Caller,
    session_id: str,
    req: StartRequest,
    check: Callable[[], object],
) -> Boundary:
    """What a what-if and an experiment check before reading anything (the boundary named once, kagent's A2A
    endpoint known, `check`: the agents' names, the token limit's type), then the turn they start from."""
    one_boundary(req.rewind_before_invocation_id, req.rewind_before_task_id, required=True)
    a2a_base(svc)
    check()
    whole_tokens(req.max_context_tokens, 1)
    return await turn_named(svc, caller, session_id, req.rewind_before_invocation_id, req.rewind_before_task_id)


async def once(
    svc: Services,
    caller: Caller,
    kind: str,
    idempotency_key: str | None,
    digest: str,
    start: Callable[[tuple[str, str] | None], Awaitable[T]],
) -> tuple[T | msgspec.Raw, bool]:
    """`start` run once per Idempotency-Key and request (`digest`): (answer, replayed). Retries of one key
    wait on its lock and replay the first answer, which `start` keeps under (key, digest) in its last
    transaction; the key's lock is held on a lock connection meanwhile, and each step takes and returns its own
    request connection."""
    if idempotency_key is None:
        return await start(None), False
    key = f"{kind}:{idempotency_key}"
    # The key's lock lives on a lock connection (Services.key_lock), never on a request connection: `start`
    # takes request connections one at a time, so no burst of keyed starts can hold them all while waiting.
    async with svc.key_lock(f"{kind}:{caller.user_id}", idempotency_key):
        async with svc.connection() as conn:
            stored = await svc.store.lineage.idempotent_answer(
                conn, caller.user_id, key, svc.settings.idempotency_ttl_seconds
            )
        if stored is not None:
            if stored[0] != digest:
                raise Unprocessable("Idempotency-Key was already used with a different request")
            return msgspec.Raw(stored[1].encode()), True
        return await start((key, digest)), False


async def turns_read_from(svc: Services, conn: Connection, source: SessionRow) -> tuple[str, SessionRow]:
    """The session's framework, and where its turns are read: its runtime's own row when the runtime wrote
    them under kagent's default user (frameworks.runtime_session), else the session's."""
    framework = await frameworks.detect(svc.store, conn, source.id, source.user_id)
    return framework, await frameworks.runtime_session(svc.store, conn, source, framework) or source


def _count(wanted: int | float | str, available: int, boundary: str) -> int:
    """How many turns `wanted` asks for, of the `available` ones from the boundary on (422 out of range)."""
    count = available if wanted == "all" else whole(float(wanted), "turns")
    if count < 1:
        raise Unprocessable(f'turns must be 1 or more, or "all", got {count}')
    if count > available:
        raise Unprocessable(
            f"turns: the source holds {available} turn{'s' if available != 1 else ''} from {boundary} on, not {count}"
        )
    return count


async def task_span(
    svc: Services, conn: Connection, caller: Caller, session_id: str, task_id: str, wanted: int | float | str
) -> Span:
    """The span of a turn known by its task alone (an agent without invocation ids): that turn and the later
    ones as the turn listing gives them (one turn per task, in the tasks' order), each re-asked with its task's
    first user message. Needs a (repeatable read) transaction."""
    source, _ = await visible_session(svc, conn, caller, session_id)
    framework, rows = await turns_read_from(svc, conn, source)
    listed = await turn_listing.ordered_turns(svc, conn, source, framework)
    keys = [t.invocation_id for t in listed]
    at = keys.index(turn_listing.TASK_TURN + task_id) if turn_listing.TASK_TURN + task_id in keys else None
    if at is None:
        # Not a turn of its own in the listing (an ADK turn just started: its task carries no invocation id
        # yet, its events name the turn): it is re-asked alone.
        named = await svc.store.tasks.owned_task(conn, rows.id, rows.user_id, task_id)
        if named is None:
            raise NotFound(f"task {task_id} not found in session {session_id}")
        _count(wanted, 1, task_id)
        ids, found = [task_id], {task_id: named}
    else:
        # The turns from it on, as long as they are known by their tasks.
        ids = []
        for t in listed[at:]:
            if not t.invocation_id.startswith(turn_listing.TASK_TURN) or t.task_id is None:
                break
            ids.append(t.task_id)
        ids = ids[: _count(wanted, len(ids), task_id)]
        users = await frameworks.runtime_users(svc.store, conn, source.id, source.user_id)
        found = {
            r.id: r for r in await svc.store.tasks.runtime_tasks_by_id(conn, source.id, source.user_id, users, ids)
        }
    turns: list[SourceTurn] = []
    for tid in ids:
        row, message = found.get(tid), None
        if row is not None:
            try:
                message = dialects.first_user_message(dialects.decode(row.data), plan.dialect_of(row))
            except dialects.TaskFormatError:
                message = None
        if row is None or message is None:
            raise Unprocessable(f"the turn of task {tid} has no user message to send")
        turns.append(SourceTurn(invocation_id=tid, message=message, started_at=row.created_at, task_id=tid))
    if at is None:
        chars = await svc.store.events.text_chars_before_each(conn, rows.id, rows.user_id, [turns[0].started_at])
        tokens = [math.ceil(chars.get(turns[0].started_at, 0) / 4)]
    else:
        # The context before each turn: the chat text of the turns before it (their events hold no ADK text).
        before = list(itertools.accumulate((t.text_chars for t in listed[at : at + len(turns) - 1]), initial=0))
        chars_before = sum(t.text_chars for t in listed[:at])
        tokens = [math.ceil((chars_before + n) / 4) for n in before]
    return Span(
        source=source, agent_ref=agent_ref_of(source.agent_id) if source.agent_id else None,
        dialect=plan.dialect_of(found[task_id]), turns=turns, tokens=tokens, position=None if at is None else at + 1,
    )  # fmt: skip


async def _boundary_task(
    svc: Services, conn: Connection, source: SessionRow, invocation_id: str
) -> tuple[TaskRow, dialects.TaskDialect, dialects.JSON]:
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
    return found.row, dialect, message


@dataclass(frozen=True, kw_only=True)
class _From:
    """The boundary turn's task and message, and the turns the events show from it on (the listing's)."""

    task: TaskRow
    dialect: dialects.TaskDialect
    first: dialects.JSON
    later: list[tuple[str, datetime]]  # (invocation id, start): empty for a turn only its task knows
    position: int | None


async def _exact_from(svc: Services, conn: Connection, source: SessionRow, boundary: str) -> _From:
    task, dialect, first = await _boundary_task(svc, conn, source, boundary)
    listed = await svc.store.events.event_turns(conn, source.id, source.user_id)
    ids = [t.invocation_id for t in listed]
    at = ids.index(boundary) if boundary in ids else None
    later = [(t.invocation_id, t.started_at) for t in listed[at:]] if at is not None else []
    return _From(task=task, dialect=dialect, first=first, later=later, position=None if at is None else at + 1)


async def _mapped_from(svc: Services, conn: Connection, source: SessionRow, boundary: str) -> _From | None:
    """_exact_from read from the source's turn map (trusted in this snapshot); None: the exact path answers
    (a turn the map does not know, or whose task does not carry it as the reader sees it)."""
    maps, sid, owner = svc.store.turn_maps, source.id, source.user_id
    turn = await maps.turn(conn, sid, owner, boundary)
    if turn is None or turn.task_id is None or turn.started_at is None:
        return None
    row = await svc.store.tasks.task_by_id(conn, turn.task_id, sid)
    if row is None or plan.find_boundary_task([row], boundary) is None:
        return None
    dialect = plan.dialect_of(row)
    first = dialects.user_message(dialects.decode(row.data), dialect, boundary)
    if first is None:
        raise Unprocessable(f"the turn {boundary} has no user message to send")
    if not turn.has_messages:
        return _From(task=row, dialect=dialect, first=first, later=[], position=None)
    rest = await maps.turn_page(conn, sid, owner, turn, 1 << 30)
    later = [(turn.invocation_id, turn.started_at)]
    later += [(t.invocation_id, t.started_at) for t in rest if t.has_messages and t.started_at is not None]
    position = await maps.figures.event_turns_before(conn, sid, owner, turn) + 1
    return _From(task=row, dialect=dialect, first=first, later=later, position=position)


async def _tokens_before(
    svc: Services, conn: Connection, source: SessionRow, times: list[datetime], mapped: bool
) -> list[int]:
    """The transcript's estimated_context_tokens before each time: the map's running sums, else the events."""
    sid, owner = source.id, source.user_id
    if mapped:
        figures = [await svc.store.turn_maps.figures.figures_before(conn, sid, owner, at) for at in times]
        if all(f is not None for f in figures):
            return [math.ceil(f[2] / 4) for f in figures if f is not None]
    chars = await svc.store.events.text_chars_before_each(conn, sid, owner, sorted(set(times)))
    return [math.ceil(chars.get(at, 0) / 4) for at in times]


async def span_of(
    svc: Services, conn: Connection, caller: Caller, session_id: str, boundary: Boundary, wanted: int | float | str
) -> Span:
    """The span from the boundary (read_span, or task_span for a turn known by its task alone) in a read-only
    snapshot of its own, the source's turn map made true first (outside it)."""
    if boundary.task_id is not None:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            return await task_span(svc, conn, caller, session_id, boundary.task_id, wanted)
    source, _ = await visible_session(svc, conn, caller, session_id)
    mapped = await turn_map.prepare(svc.store, conn, source.id, source.user_id)
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        return await read_span(svc, conn, caller, session_id, boundary.key, wanted, mapped=mapped)


async def read_span(
    svc: Services,
    conn: Connection,
    caller: Caller,
    session_id: str,
    boundary: str,
    wanted: int | float | str,
    *,
    mapped: bool = False,
) -> Span:
    """The source turns from `boundary` on (`wanted` of them, or "all"), each with the user message to send
    again and the estimated context before it. Needs a (repeatable read) transaction; `mapped`: the
    source's turn map was prepared before it (read if its guard holds here)."""
    source, _ = await visible_session(svc, conn, caller, session_id)
    mapped = mapped and await turn_map.usable(svc.store, conn, source.id, source.user_id)
    found = await _mapped_from(svc, conn, source, boundary) if mapped else None
    if found is None:
        found = await _exact_from(svc, conn, source, boundary)
    task, dialect, later = found.task, found.dialect, found.later
    # A turn only its task knows (no events) can be asked; nothing after it is known.
    count = _count(wanted, max(len(later), 1), boundary)
    turns = [
        SourceTurn(invocation_id=boundary, message=found.first, started_at=later[0][1] if later else task.created_at)
    ]
    wanted_ids = dict(later[1:count])
    messages: dict[str, dialects.JSON] = {}
    if wanted_ids:
        async for row in svc.store.tasks.stream_tasks_from(conn, source.id, source.user_id, task.created_at):
            try:
                data = dialects.decode(row.data)
            except dialects.TaskFormatError:
                continue
            for inv in dialects.invocation_ids(data):
                if inv in wanted_ids and inv not in messages:
                    message = dialects.user_message(data, plan.dialect_of(row), inv)
                    if message is not None:
                        messages[inv] = message
    for inv, started_at in later[1:count]:
        if inv not in messages:
            raise Unprocessable(f"the turn {inv} has no user message to send")
        turns.append(SourceTurn(invocation_id=inv, message=messages[inv], started_at=started_at))
    tokens = await _tokens_before(svc, conn, source, [t.started_at for t in turns], mapped)
    return Span(
        source=source, agent_ref=agent_ref_of(source.agent_id) if source.agent_id else None, dialect=dialect,
        turns=turns, tokens=tokens, position=found.position,
    )  # fmt: skip


def gate(span: Span, branches: int, limit: int) -> None:
    """The cost gate: every branch sends every turn's context to its agent's model."""
    estimate = branches * sum(span.tokens)
    if estimate > limit:
        what = (
            "the turn's context is" if branches * len(span.turns) == 1 else "the contexts of every branch's turns are"
        )
        raise Unprocessable(
            f"{what} about {estimate} tokens, over the limit of {limit} "
            "(max_context_tokens, default WHATIF_MAX_CONTEXT_TOKENS): each is sent to the agent's model"
        )


def a2a_base(svc: Services) -> str:
    base = svc.settings.kagent_a2a_url
    if base is None:
        raise NotConfigured(
            "what-ifs need kagent's A2A endpoint: set KAGENT_A2A_URL (e.g. http://kagent-controller.kagent:8083/api/a2a)"
        )
    return base


async def cards(
    svc: Services, agent_refs: list[str], dialect: dialects.TaskDialect, hdrs: dict[str, str]
) -> dict[str, a2a_client.Card]:
    """Each agent's card, asked for at once through kagent's A2A endpoint: a 422 naming the first agent
    that does not answer (before anything is written)."""
    base = a2a_base(svc)
    timeout = min(10.0, float(svc.settings.whatif_timeout_seconds))

    async def one(ref: str) -> a2a_client.Card:
        agent = a2a_client.Agent(
            ref=ref, url=a2a_client.agent_url(base, ref), dialect=dialect, headers=hdrs, timeout=timeout
        )
        return await a2a_client.fetch_card(agent)

    found = await asyncio.gather(*(one(ref) for ref in agent_refs), return_exceptions=True)
    for ref, card in zip(agent_refs, found, strict=True):
        if isinstance(card, a2a_client.AgentError):
            raise Unprocessable(f"the agent {ref} did not answer through kagent's A2A endpoint: {card}")
        if isinstance(card, BaseException):
            raise card
    return {ref: card for ref, card in zip(agent_refs, found, strict=True) if isinstance(card, a2a_client.Card)}


def edited(message: dialects.JSON, dialect: dialects.TaskDialect, text: str) -> dialects.JSON:
    """The message with its text replaced by `text` (its other parts kept): ask the turn differently."""
    parts = [p for p in message.get("parts", []) if isinstance(p, dict)]
    texts = [i for i, p in enumerate(parts) if isinstance(p.get("text"), str)]
    new = {"kind": "text", "text": text} if dialect is dialects.TaskDialect.LEGACY else {"text": text}
    at = texts[0] if texts else len(parts)
    kept = [p for i, p in enumerate(parts) if i not in texts]
    return {**message, "parts": [*kept[:at], new, *kept[at:]]}


@dataclass(frozen=True, kw_only=True)
class Branch:
    """What a branch's job is made of, the fork aside."""

    caller: Caller
    span: Span
    agent_ref: str
    card: a2a_client.Card | None
    message_text: str | None
    on_approval: str = "stop"
    experiment_id: str | None = None
    repeat: int = 1


async def write_branch(
    svc: Services, conn: Connection, runner: Runner, branch: Branch, fork: ForkedSession
) -> WhatifJob:
    """The job row and its turns, in the fork's transaction: each message built for the fork, with its
    messageId fixed now (so that no runner ever sends it twice)."""
    span = branch.span
    try:
        messages = [
            a2a_client.message_json(
                a2a_client.message_for(
                    edited(t.message, span.dialect, branch.message_text)
                    if i == 0 and branch.message_text
                    else t.message,
                    span.dialect,
                    fork.id,
                )
            )
            for i, t in enumerate(span.turns)
        ]
    except a2a_client.AgentError as exc:  # raised in the fork's transaction: nothing is written
        raise Unprocessable(str(exc)) from None
    card = None if branch.card is None else _encoder.encode(dataclasses.asdict(branch.card)).decode()
    job = WhatifJob(
        id=str(uuid.uuid4()), user_id=branch.caller.user_id, parent_session_id=span.source.id,
        parent_user_id=span.source.user_id, session_id=fork.id,
        rewind_before_invocation_id=None if span.turns[0].task_id else span.turns[0].invocation_id,
        rewind_before_task_id=span.turns[0].task_id,
        agent_ref=branch.agent_ref, dialect=span.dialect.value, message=messages[0], status="running", task_id=None,
        error=None, result=None, runner=runner.id, created_at=datetime.min, finished_at=None,
        experiment_id=branch.experiment_id, repeat=branch.repeat, agent_card=card, on_approval=branch.on_approval,
        turns_total=len(messages),
    )  # fmt: skip
    created = await svc.store.jobs.insert_whatif_job(conn, job)
    await svc.store.jobs.insert_whatif_turns(
        conn, job.id, [(t.invocation_id, m) for t, m in zip(span.turns, messages, strict=True)]
    )
    return dataclasses.replace(job, created_at=created)


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
    boundary = await begin(
        svc, caller, session_id, req, lambda: req.agent_ref is None or checked_agent_ref(req.agent_ref)
    )
    req = msgspec.structs.replace(
        req, rewind_before_invocation_id=boundary.invocation_id, rewind_before_task_id=boundary.task_id
    )
    fork_req = boundary.fork_request(req.name)
    digest = forking.request_hash(session_id, fork_req) + _encoder.encode(req).hex()
    return await once(
        svc, caller, "whatif", idempotency_key, digest,
        lambda idempotency: _checked_start(
            svc, runner, caller, session_id, req, boundary, fork_req, idempotency, authorization
        ),
    )  # fmt: skip


async def _checked_start(
    svc: Services,
    runner: Runner,
    caller: Caller,
    session_id: str,
    req: WhatifRequest,
    boundary: Boundary,
    fork_req: ForkRequest,
    idempotency: tuple[str, str] | None,
    authorization: str | None,
) -> Started:
    """The refusals a fork does not make (the turns' messages, the agent, the cost gate), then the start."""
    async with svc.connection() as conn:
        span = await span_of(svc, conn, caller, session_id, boundary, req.turns)
    agent_ref = req.agent_ref or span.agent_ref
    if agent_ref is None:
        raise Unprocessable(
            f"the source session's agent {span.source.agent_id!r} is not namespace/name: give agent_ref"
        )
    gate(span, 1, whole_tokens(req.max_context_tokens, svc.settings.whatif_max_context_tokens))
    if fork_req.name is None:
        fork_req = msgspec.structs.replace(fork_req, name=default_name(span, agent_ref))
    hdrs = headers(caller.user_id, authorization)
    card = (await cards(svc, [agent_ref], span.dialect, hdrs))[agent_ref]
    branch = Branch(
        caller=caller, span=span, agent_ref=agent_ref, card=card, message_text=req.message.text if req.message else None
    )
    made: list[tuple[WhatifJob, Started]] = []

    async def write_job(conn: Connection, fork: ForkedSession) -> None:
        job = await write_branch(svc, conn, runner, branch, fork)
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
    runner.launch(job, hdrs)
    return started


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


async def mark_cancelled(svc: Services, conn: Connection, job: WhatifJob) -> bool:
    """Mark a running job cancelled (its runner stops at its next beat): whether it was running."""
    if (
        job.status != "running"
        or await svc.store.jobs.whatif_finish(conn, job.id, "cancelled", error=None, result=None) is None
    ):
        return False
    WHATIF_JOBS.labels("cancelled").inc()
    WHATIF_DURATION.labels("cancelled").observe(max(0.0, time.time() - job.created_at.timestamp()))
    return True


async def cancel_task(svc: Services, job: WhatifJob, hdrs: dict[str, str]) -> None:
    """Ask the agent to cancel the task of the turn the job was at (after the job is marked cancelled)."""
    if job.task_id is None or svc.settings.kagent_a2a_url is None:
        return
    agent = a2a_client.Agent(
        ref=job.agent_ref, url=a2a_client.agent_url(svc.settings.kagent_a2a_url, job.agent_ref),
        dialect=dialects.TaskDialect(job.dialect), headers=hdrs, timeout=10.0,
    )  # fmt: skip
    try:
        await a2a_client.cancel_task(agent, job.task_id)
    except a2a_client.AgentError as exc:
        log.warning("what-if %s: the agent did not cancel its task: %s", job.id, exc)


async def cancel(svc: Services, caller: Caller, job_id: str, authorization: str | None = None) -> Job:
    async with svc.connection() as conn:
        job = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
        if job is None:
            raise NotFound(f"what-if job {job_id} not found")
        if not await mark_cancelled(svc, conn, job):
            raise Conflict(f"what-if job {job_id} already ended ({job.status})")
        if job.experiment_id is not None:
            await svc.store.experiments.settle(conn, job.experiment_id)
        await cancel_task(svc, job, headers(caller.user_id, authorization))
        fresh = await svc.store.jobs.whatif_job(conn, job_id, caller.user_id)
    assert fresh is not None
    return job_json(fresh)
