"""A conversation as the agent sees it, turn by turn, as JSON or Markdown.

Messages come from the events (the service's one event reader, `event_messages` in SQL, which reads
Python ADK snake_case, Go ADK camelCase and the OpenAI Agents SDK's `conversation_items` alike), read
where the agent's runtime wrote them (kagent-openai 0.10.4: under kagent's default user). An ADK turn is
a run of one invocation's events, with its task id and state from the tasks as the turn listing reads
them; an OpenAI Agents SDK turn runs from one input event to the next, the k-th paired with the session's
k-th task (docs/frameworks.md). A session whose chat is only in its A2A tasks (LangGraph, CrewAI, Claude,
or tasks and no events) is read from the tasks' history, one turn per task, saying so in a warning. The
rows are read through server-side cursors and the answer is written while they are read, so service
memory holds one turn at a time, whatever the session's size.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import msgspec

from service.branches import turns
from service.errors import NotFound
from service.identity import Caller, Seen, settle
from service.kagent import dialects, frameworks
from service.kagent.store.base import Connection
from service.kagent.store.events import TranscriptEvent
from service.kagent.store.sessions import SessionRow
from service.kagent.store.tasks import TaskRow
from service.operations import plan
from service.operations.boundary import named_turn
from service.schemas import one_boundary, rfc3339
from service.services import Services

# Tool arguments and responses longer than this (as JSON text) are cut, saying so.
CUT_CHARS = 2000
CHUNK_BYTES = 64 * 1024
FROM_TASKS = "the messages come from the session's A2A tasks (its agent keeps no events in kagent's database)"

Role = Literal["user", "agent"]
Kind = Literal["text", "tool_call", "tool_result"]


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    author: str
    role: Role
    kind: Kind
    at: str
    text: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    args: object = None
    response: object = None


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    invocation_id: str | None
    task_id: str | None
    state: str | None
    started_at: str
    ended_at: str
    messages: list[Message]
    usage: Usage


class Transcript(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    name: str | None
    turns: list[Turn]
    estimated_context_tokens: int
    warnings: list[str]


class _Part(msgspec.Struct, frozen=True):
    """One message as event_messages gives it."""

    kind: Kind
    text: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    args: object = None
    response: object = None
    author: str | None = None  # who wrote it (an OpenAI Agents SDK event holds the user's and the agent's)


_parts = msgspec.json.Decoder(list[_Part])
_encoder = msgspec.json.Encoder()


@dataclass(kw_only=True)
class Reading:
    """A transcript being read: the session, its turns as they come (`turns()`, once), and what the
    turns so far add up to (complete once they are all read). The turns come from `events`, or, for a
    session whose chat is only in its tasks, from `tasks`."""

    session: SessionRow
    framework: frameworks.Framework = "unknown"
    events: AsyncIterator[TranscriptEvent] | None = None
    tasks: AsyncIterator[TaskRow] | None = None
    known: dict[str, turns.TurnInfo] = field(default_factory=dict)
    # The OpenAI Agents SDK turns' tasks, k-th input to k-th task: (task id, state), oldest first; None when
    # the session's inputs and tasks do not pair one to one (the turns then name no task).
    paired: list[tuple[str, str | None]] | None = None
    notes: list[str] = field(default_factory=list)
    text_chars: int = 0
    skipped: int = 0
    count: int = 0
    tasks_read: int = 0

    async def turns(self) -> AsyncIterator[Turn]:
        """The events grouped into turns: runs of consecutive events of one invocation (ADK), or from one
        input event to the next (OpenAI Agents SDK). Rows that are not JSON objects are counted, not shown;
        a run without any message is bookkeeping (kagent 0.10.x's "header_update" events before every
        turn), not a turn, as in the turn listing. Or, for a session read from its tasks, one turn a task."""
        if self.tasks is not None:
            async for row in self.tasks:
                self.tasks_read += 1
                if (turn := self._task_turn(row)) is not None:
                    yield turn
            return
        assert self.events is not None
        current: _Open | None = None
        inputs = 0  # the OpenAI Agents SDK turn inputs read so far: the k-th opens turn k
        async for event in self.events:
            if event.doc_kind != "object":
                self.skipped += 1
                continue
            key, input_turn = event.turn_key, None
            if event.items:
                inputs += event.opens_turn
                key, input_turn = f"input:{inputs}", inputs
            if current is None or current.key != key:
                if current is not None and (turn := self._turn(current)) is not None:
                    yield turn
                current = _Open(key=key, invocation_id=event.invocation_id, input_turn=input_turn)
            current.events.append(event)
        if current is not None and (turn := self._turn(current)) is not None:
            yield turn

    def _turn(self, turn: _Open) -> Turn | None:
        messages = []
        for event in turn.events:
            at = rfc3339(event.created_at)
            for part in _parts.decode(event.messages):
                author = part.author or event.author or "unknown"
                role: Role = "user" if author == "user" else "agent"
                if part.text is not None:
                    self.text_chars += len(part.text)
                messages.append(
                    Message(
                        author=author, role=role, kind=part.kind, at=at, text=part.text, tool_name=part.tool_name,
                        tool_call_id=part.tool_call_id, args=_arguments(part.args), response=part.response,
                    )
                )  # fmt: skip
        if not messages:
            return None
        task_id = state = None
        if turn.invocation_id is not None and (info := self.known.get(turn.invocation_id)) is not None:
            task_id, state = info.task_id, info.state
        elif turn.input_turn and self.paired is not None and turn.input_turn <= len(self.paired):
            task_id, state = self.paired[turn.input_turn - 1]
        self.count += 1
        return Turn(
            index=self.count - 1, invocation_id=turn.invocation_id, task_id=task_id, state=state,
            started_at=rfc3339(turn.events[0].created_at), ended_at=rfc3339(turn.events[-1].created_at),
            messages=messages,
            usage=Usage(
                prompt_tokens=sum(e.prompt_tokens for e in turn.events),
                completion_tokens=sum(e.completion_tokens for e in turn.events),
                total_tokens=sum(e.total_tokens for e in turn.events),
            ),
        )  # fmt: skip

    def _task_turn(self, row: TaskRow) -> Turn | None:
        """A turn read from one task's conversation (every message at the task's creation time)."""
        try:
            data = dialects.decode(row.data)
        except dialects.TaskFormatError:
            self.skipped += 1
            return None
        at = rfc3339(row.created_at)
        messages = []
        for m in dialects.chat_messages(data, plan.dialect_of(row)):
            if m.text is not None:
                self.text_chars += len(m.text)
            messages.append(
                Message(
                    author="user" if m.from_user else "agent", role="user" if m.from_user else "agent",
                    kind=m.kind, at=at, text=m.text, tool_name=m.tool_name, tool_call_id=m.tool_call_id,
                    args=_cut(m.args), response=_cut(m.response),
                )
            )  # fmt: skip
        if not messages:
            return None
        self.count += 1
        return Turn(
            index=self.count - 1, invocation_id=None, task_id=row.id, state=dialects.state(data), started_at=at,
            ended_at=at, messages=messages, usage=Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0),
        )  # fmt: skip

    @property
    def estimated_context_tokens(self) -> int:
        # As a fork's dry run estimates it: about four characters of message text a token.
        return math.ceil(self.text_chars / 4)

    @property
    def warnings(self) -> list[str]:
        """What the reader should know (complete once the turns are read): where the messages come from
        when not from events, and what was left out."""
        notes = list(self.notes)
        if self.tasks is not None and (self.tasks_read or self.framework in frameworks.TASK_CHAT):
            notes.append(FROM_TASKS)
        if self.skipped and self.tasks is not None:
            notes.append(f"{self.skipped} task(s) are not JSON and are left out")
        elif self.skipped:
            notes.append(f"{self.skipped} event(s) are not ADK events (not a JSON object) and are left out")
        return notes


@dataclass(kw_only=True)
class _Open:
    key: str
    invocation_id: str | None
    input_turn: int | None
    events: list[TranscriptEvent] = field(default_factory=list)


def _arguments(args: object) -> object:
    """A tool call's arguments: the OpenAI Agents SDK keeps them as the JSON text the model wrote, shown
    decoded when they are JSON (a text cut by cut_json is not, and stays as it is)."""
    if isinstance(args, str):
        try:
            return msgspec.json.decode(args)
        except msgspec.DecodeError:
            return args
    return args


def _cut(value: object) -> object:
    """A task's tool argument or response as cut_json cuts an event's: itself, or its first CUT_CHARS."""
    if value is None:
        return None
    text = _encoder.encode(value).decode()
    return value if len(text) <= CUT_CHARS else f"{text[:CUT_CHARS]} ... [cut: {len(text)} characters in all]"


@asynccontextmanager
async def reading(
    svc: Services, caller: Caller, session_id: str, *, before: str | None = None, before_task: str | None = None
) -> AsyncIterator[Reading]:
    """The transcript of a session the caller may see, read in one snapshot while the block runs.
    `before`: only the turns before that invocation (404 when the session has no event of it);
    `before_task`: only the turns before the one that task names (as a fork by task cuts)."""
    one_boundary(before, before_task, required=False, names=("before", "before_task"))
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        seen = await settle(svc, conn, caller, session_id)
        yield await open_reading(svc, conn, seen.row, before=before, before_task=before_task, seen=seen)


async def open_reading(
    svc: Services,
    conn: Connection,
    visible: SessionRow,
    *,
    before: str | None = None,
    before_task: str | None = None,
    cut_chars: int = CUT_CHARS,
    since: datetime | None = None,
    seen: Seen | None = None,
) -> Reading:
    """The transcript of `visible` (a session the caller may see), on `conn`'s transaction, which must stay
    open while its turns are read (one Reading at a time on a connection: its rows come through a cursor).
    `cut_chars`: tool arguments and responses longer than that are cut (the replay endpoint's recordings,
    answered exactly as the events hold them, ask for them whole). `since`: only the rows written from then on
    (a judge reads a branch's own turns of its fork so). `seen`: `visible`'s access as the door settled it (its
    framework and whose rows it holds), else asked here, once."""
    if seen is not None:
        framework, users = seen.framework, seen.users
    else:
        users = tuple(await frameworks.runtime_users(svc.store, conn, visible.id, visible.user_id))
        framework = await frameworks.detect(svc.store, conn, visible.id, visible.user_id, users)
    # Read where the agent's runtime wrote the rows (as a fork reads them), told as the session it is.
    runtime = await frameworks.runtime_session(svc.store, conn, visible, framework, users)
    source = dataclasses.replace(runtime, name=visible.name) if runtime is not None else visible
    sid, owner = source.id, source.user_id
    until = tasks_until = None
    if before_task is not None:
        named = await named_turn(svc, conn, source, None, before_task)
        if named.missing is not None:
            raise NotFound(f"task {before_task} not found in session {sid}")
        before = named.invocation_id
        if named.task is not None:
            until, tasks_until = named.events_from, named.task.created_at
    if before is not None:
        until = await svc.store.events.boundary_event_at(
            conn, sid, owner, before, prefilter=dialects.verbatim_in_json(before)
        )
        if until is None:
            raise NotFound(f"invocation {before} not found in session {sid}")
    if framework in frameworks.TASK_CHAT or not await svc.store.sessions.has_events(conn, sid, owner):
        # The tasks the turn listing lists: the owner's and those its runtime wrote under kagent's default user.
        readers = list(users) if runtime is None else [owner]  # the runtime's rows: its user's alone
        tasks = _before(svc.store.tasks.stream_runtime_tasks(conn, sid, owner, readers), tasks_until or until, since)
        return Reading(session=source, framework=framework, tasks=tasks)
    events = svc.store.events.stream_transcript_events(conn, sid, owner, until, cut_chars=cut_chars, since=since)
    if framework == "openai-agents":
        paired, notes = await _paired_tasks(svc, conn, source, tasks_until)
        return Reading(session=source, framework=framework, events=events, paired=paired, notes=notes)
    known = await turns.with_tasks(svc, conn, source, {})
    return Reading(session=source, framework=framework, events=events, known=known)


async def _before(
    rows: AsyncIterator[TaskRow], until: datetime | None, since: datetime | None = None
) -> AsyncIterator[TaskRow]:
    """The rows (oldest first) created before `until` (None: all), from `since` on (None: from the first)."""
    async for row in rows:
        if until is not None and row.created_at >= until:
            return
        if since is None or row.created_at >= since:
            yield row


async def _paired_tasks(
    svc: Services, conn: Connection, source: SessionRow, before: datetime | None
) -> tuple[list[tuple[str, str | None]] | None, list[str]]:
    """The tasks of an OpenAI Agents SDK session's turns, oldest first, when its turn inputs and tasks pair
    one to one (the rule that cuts a fork at a turn's input event); else None, with a warning."""
    # A task id and state a turn, as the ADK turns' index keeps (never the tasks' data: they are streamed).
    paired = [
        (row.id, dialects.state_of(row.data))
        async for row in svc.store.tasks.stream_tasks_before(conn, source.id, source.user_id, before)
    ]
    if not paired:
        return [], []
    found = await svc.store.events.turn_input(conn, source.id, source.user_id, paired[0][0])
    if not found.paired:
        return None, ["the session's turn inputs do not pair one to one with its tasks: its turns name no task"]
    return paired, []


async def read(
    svc: Services, caller: Caller, session_id: str, *, before: str | None = None, before_task: str | None = None
) -> Transcript:
    """The whole transcript as one value (for callers that want it whole: tools, tests)."""
    async with reading(svc, caller, session_id, before=before, before_task=before_task) as r:
        all_turns = [turn async for turn in r.turns()]
        return Transcript(
            session_id=r.session.id, name=r.session.name, turns=all_turns,
            estimated_context_tokens=r.estimated_context_tokens, warnings=r.warnings,
        )  # fmt: skip


async def json_chunks(r: Reading, *, message: str | None) -> AsyncIterator[bytes]:
    """The transcript as JSON, `Transcript`'s shape, in pieces of about CHUNK_BYTES; with a message,
    inside kagent's success envelope."""
    head = b'{"session_id":' + _encoder.encode(r.session.id) + b',"name":' + _encoder.encode(r.session.name)
    pending = bytearray()
    if message is not None:
        pending += b'{"error":false,"message":' + _encoder.encode(message) + b',"data":'
    pending += head + b',"turns":['
    first = True
    async for turn in r.turns():
        if not first:
            pending += b","
        first = False
        pending += _encoder.encode(turn)
        if len(pending) >= CHUNK_BYTES:
            yield bytes(pending)
            pending.clear()
    pending += b'],"estimated_context_tokens":' + _encoder.encode(r.estimated_context_tokens)
    pending += b',"warnings":' + _encoder.encode(r.warnings) + b"}"
    if message is not None:
        pending += b"}"
    yield bytes(pending)


async def markdown_chunks(r: Reading) -> AsyncIterator[bytes]:
    """The transcript as a Markdown document, for people and for pasting into an issue."""
    title = r.session.name or r.session.id
    pending = [f"# {_line(title)}\n\nSession `{r.session.id}`\n"]
    size = len(pending[0])
    async for turn in r.turns():
        text = _markdown_turn(turn)
        pending.append(text)
        size += len(text)
        if size >= CHUNK_BYTES:
            yield "".join(pending).encode()
            pending, size = [], 0
    turns_said = "1 turn" if r.count == 1 else f"{r.count} turns"
    pending.append(f"\n---\n\n{turns_said}, about {r.estimated_context_tokens} context tokens.\n")
    pending += [f"\n> warning: {w}\n" for w in r.warnings]
    yield "".join(pending).encode()


def _markdown_turn(turn: Turn) -> str:
    head = f"\n## Turn {turn.index + 1}" + (f" ({turn.state})" if turn.state else "") + "\n\n"
    facts = [f"invocation `{turn.invocation_id}`" if turn.invocation_id else "no invocation id"]
    if turn.task_id:
        facts.append(f"task `{turn.task_id}`")
    facts.append(f"{turn.started_at} to {turn.ended_at}")
    if turn.usage.total_tokens:
        facts.append(f"{turn.usage.total_tokens} tokens")
    lines = [head + " · ".join(facts) + "\n"]
    for m in turn.messages:
        who = f"**{_line(m.author)}**"
        if m.kind == "text":
            lines.append(f"\n{who}:\n\n{m.text}\n")
        elif m.kind == "tool_call":
            lines.append(f"\n{who} calls `{_line(m.tool_name or '?')}`:\n\n{_fenced(m.args)}")
        else:
            lines.append(f"\n{who} gets the result of `{_line(m.tool_name or '?')}`:\n\n{_fenced(m.response)}")
    return "".join(lines)


def _line(text: str) -> str:
    """Text for a heading or an inline name: one line, no backticks to break the code span."""
    return " ".join(text.split()).replace("`", "'")


def _fenced(value: object) -> str:
    body = value if isinstance(value, str) else msgspec.json.format(_encoder.encode(value), indent=2).decode()
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}json\n{body}\n{fence}\n"
