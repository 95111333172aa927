"""The words of a replay, which every room of the package reads and none of them acts on: what is asked
(`Replay`, and the request fields the what-if's and the experiment's bodies share), where it starts
(`Boundary`), what is re-asked (`SourceTurn`, `Span`), and how kagent spells an agent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal, Protocol

import msgspec
from msgspec import Meta

from service.agents.replay.tools import Reads, ToolsField, policy_of
from service.errors import BadRequest, Unprocessable
from service.kagent import dialects
from service.kagent.store.agents import AGENT_REF, agent_ref_of
from service.kagent.store.jobs import WhatifJob
from service.kagent.store.sessions import SessionRow
from service.operations.plan import BoundaryTask
from service.schemas import VISIBLE_NO_NUL

# JSON Schema counts 2.0 as an integer, so a whole float is one too (a fraction is refused).
Tokens = Annotated[int, Meta(ge=1, le=10**12)] | Annotated[float, Meta(ge=1, le=1e12)]
# A budget in US dollars (`max_usd`): a start whose estimate is over it is refused.
Dollars = Annotated[float, Meta(ge=0, le=1e9)]
# Out of range (below 1, or more than the source holds from the boundary) is a 422 (span.count).
# JSON Schema counts 2.0 as an integer, so a whole float is one too (a fraction is a 400).
Count = Annotated[int, Meta(ge=-(2**31), le=2**31)] | Annotated[float, Meta(ge=-(2**31), le=2**31)]
TurnCount = Count | Literal["all"]
# An edited question may be longer than an id; the body limit (MAX_BODY_BYTES) bounds it too.
MESSAGE_TEXT_CHARS = 16_384
MAX_BRANCHES = 8
MAX_REPEATS = 5
# How a what-if's and an experiment's refusals name the agents (their bodies name them differently).
_NAMED = {"whatif": "agent_ref", "experiment": "each of agents"}


class MessageEdit(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    text: Annotated[str, Meta(min_length=1, max_length=MESSAGE_TEXT_CHARS, pattern=VISIBLE_NO_NUL)]


def whole(value: int | float, what: str) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise BadRequest(f"{what} must be a whole number")
    return int(value)


def whole_tokens(value: int | float | None, default: int) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise BadRequest("max_context_tokens must be a whole number")
    return int(value or default)


def checked_agent_ref(value: str, what: str = "agent_ref") -> str:
    if not AGENT_REF.fullmatch(value):
        raise Unprocessable(f"{what} must be namespace/name of a kagent agent, got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class JudgeRef:
    """The judge a what-if's or an experiment's start names: a kagent agent, and the caller's criteria (judge.py)."""

    agent: str
    criteria: str | None = None


@dataclass(frozen=True, kw_only=True)
class Replay:
    """What a what-if or an experiment asks to replay, as its operation hands it to the engine. A what-if is
    an experiment of one agent that writes no experiment row: `kind` says which, and so which answer, which
    Idempotency-Key scope and which words its refusals use."""

    kind: Literal["whatif", "experiment"]
    session_id: str
    digest: str  # the request's fingerprint: what an Idempotency-Key's stored answer is checked against
    invocation_id: str | None
    task_id: str | None
    agents: list[str] | None  # None: the source's own agent
    repeats: int | float = 1
    turns: int | float | str = 1
    message: MessageEdit | None = None
    name: str | None = None
    max_context_tokens: int | float | None = None
    max_usd: float | None = None  # refuse a start whose estimated price is over it (gate.money)
    on_approval: str = "stop"
    tools: ToolsField | None = None  # what the arms' tools do, as asked (None: the start decides, tools.decide)
    reads: Reads | None = None  # the contract's `reads` beside `tools`
    dry_run: bool = False  # say what would run (the arms' tools by class), write nothing
    judge: JudgeRef | None = None  # the judge: (agent, criteria)
    control: bool = False  # add the source's own agent as an arm (the noise floor), if not named already

    def checked(self) -> None:
        """The request's own words, refused before anything is read (422, as the contract asks): the agents
        named (1 to 8, distinct, each namespace/name), the repeats (1 to 5), the branches they make (8 at most),
        the tool policy (`reads` agreeing with `tools`)."""
        policy_of(self.tools, self.reads)
        agents, repeats = self.agents or [], whole(self.repeats, "repeats")
        if self.agents is not None and not agents:
            raise Unprocessable("agents must name 1 to 8 agents (namespace/name), got an empty list")
        if not 1 <= repeats <= MAX_REPEATS:
            raise Unprocessable(f"repeats must be 1 to {MAX_REPEATS}, got {repeats}")
        for ref in agents:
            checked_agent_ref(ref, _NAMED[self.kind])
        twice = sorted({a for a in agents if agents.count(a) > 1})
        if twice:
            raise Unprocessable(f"agents names {', '.join(twice)} more than once (use repeats to run an agent again)")
        if self.judge is not None:
            checked_agent_ref(self.judge.agent, "judge.agent")
        if len(agents or [None]) * repeats > MAX_BRANCHES:
            n = len(agents or [None])
            raise Unprocessable(f"{n} agents x {repeats} repeats is {n * repeats} branches, over {MAX_BRANCHES}")

    @property
    def branches(self) -> int:
        """How many branches it makes: each agent named (or the source's own) `repeats` times."""
        return len(self.agents or [None]) * int(self.repeats)


@dataclass(frozen=True, kw_only=True)
class Boundary:
    """The turn a replay starts from: by its invocation, or, for an agent that writes none (every framework but
    ADK), by its task alone."""

    invocation_id: str | None
    task_id: str | None  # only for a turn known by its task alone

    @property
    def key(self) -> str:
        """The turn's key in a job's turns and an experiment's rows: its invocation id, else its task id."""
        key = self.invocation_id or self.task_id
        assert key is not None
        return key


@dataclass(frozen=True, kw_only=True)
class SourceTurn:
    invocation_id: str  # or, for a turn known by its task alone, the task's id (task_id)
    message: dialects.JSON  # the user message that opened the turn, as the source task's history holds it
    started_at: datetime
    task_id: str | None = None  # the turn's task, when the turn has no invocation id


@dataclass(frozen=True, kw_only=True)
class Span:
    """The source turns a replay re-asks, from the boundary on, and what each costs to ask."""

    source: SessionRow
    dialect: dialects.TaskDialect
    turns: list[SourceTurn]
    tokens: list[int]  # the estimated context before each turn (the transcript's estimated_context_tokens)
    position: int | None  # the boundary turn's number in the listing (None: a turn only its task knows)
    # The boundary's task as the span found it (None: a turn named by its task): each branch's fork takes it,
    # checked unchanged in the fork's snapshot, instead of searching the session's tasks again.
    found: BoundaryTask | None = None

    @property
    def agent_ref(self) -> str | None:
        """The source's own agent, when its agent_id spells one."""
        return agent_ref_of(self.source.agent_id) if self.source.agent_id else None


class Spanned(Protocol):
    """What a judged replay re-asked: its source, the turn it starts from, how many turns (an experiment's row;
    a what-if's job, read as `JobSpan`)."""

    @property
    def source_session_id(self) -> str: ...
    @property
    def source_user_id(self) -> str: ...
    @property
    def rewind_before_invocation_id(self) -> str | None: ...
    @property
    def rewind_before_task_id(self) -> str | None: ...
    @property
    def turns(self) -> int: ...


@dataclass(frozen=True, kw_only=True)
class JobSpan:
    """A what-if's job as a `Spanned`: its source, its first turn, its turns."""

    source_session_id: str
    source_user_id: str
    rewind_before_invocation_id: str | None
    rewind_before_task_id: str | None
    turns: int

    @classmethod
    def of(cls, job: WhatifJob) -> JobSpan:
        return cls(
            source_session_id=job.parent_session_id, source_user_id=job.parent_user_id,
            rewind_before_invocation_id=job.rewind_before_invocation_id,
            rewind_before_task_id=job.rewind_before_task_id, turns=job.turns_total,
        )  # fmt: skip
