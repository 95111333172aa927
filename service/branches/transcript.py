"""A conversation as the agent sees it: the session's visible events, turn by turn, as JSON or Markdown.

Messages come from the events only (the service's one event reader, `event_messages` in SQL, which
reads Python ADK snake_case and Go ADK camelCase alike); a turn's task id and state come from the
tasks as the turn listing reads them. The events are read through a server-side cursor and the answer
is written while they are read, so service memory holds one turn at a time, whatever the session's size.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from service.branches import turns
from service.errors import NotFound
from service.identity import Caller, visible_session
from service.kagent import dialects
from service.kagent.store.events import TranscriptEvent
from service.kagent.store.sessions import SessionRow
from service.operations.forking import named_turn
from service.schemas import one_boundary, rfc3339
from service.services import Services

# Tool arguments and responses longer than this (as JSON text) are cut, saying so.
CUT_CHARS = 2000
CHUNK_BYTES = 64 * 1024

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


_parts = msgspec.json.Decoder(list[_Part])
_encoder = msgspec.json.Encoder()


@dataclass(kw_only=True)
class Reading:
    """A transcript being read: the session, its turns as they come (`turns()`, once), and what the
    turns so far add up to (complete once they are all read)."""

    session: SessionRow
    events: AsyncIterator[TranscriptEvent]
    known: dict[str, turns.TurnInfo]
    text_chars: int = 0
    skipped: int = 0
    count: int = 0

    async def turns(self) -> AsyncIterator[Turn]:
        """The events grouped into turns: runs of consecutive events of one invocation. Rows that are
        not JSON objects are counted, not shown; a run without any message is bookkeeping (kagent
        0.10.x's "header_update" events before every turn), not a turn, as in the turn listing."""
        current: _Open | None = None
        async for event in self.events:
            if event.doc_kind != "object":
                self.skipped += 1
                continue
            if current is None or current.key != event.turn_key:
                if current is not None and (turn := self._turn(current)) is not None:
                    yield turn
                current = _Open(key=event.turn_key, invocation_id=event.invocation_id)
            current.events.append(event)
        if current is not None and (turn := self._turn(current)) is not None:
            yield turn

    def _turn(self, turn: _Open) -> Turn | None:
        messages = []
        for event in turn.events:
            author = event.author or "unknown"
            role: Role = "user" if author == "user" else "agent"
            at = rfc3339(event.created_at)
            for part in _parts.decode(event.messages):
                if part.text is not None:
                    self.text_chars += len(part.text)
                messages.append(
                    Message(
                        author=author, role=role, kind=part.kind, at=at, text=part.text, tool_name=part.tool_name,
                        tool_call_id=part.tool_call_id, args=part.args, response=part.response,
                    )
                )  # fmt: skip
        if not messages:
            return None
        info = self.known.get(turn.invocation_id) if turn.invocation_id is not None else None
        self.count += 1
        return Turn(
            index=self.count - 1, invocation_id=turn.invocation_id, task_id=info.task_id if info else None,
            state=info.state if info else None, started_at=rfc3339(turn.events[0].created_at),
            ended_at=rfc3339(turn.events[-1].created_at), messages=messages,
            usage=Usage(
                prompt_tokens=sum(e.prompt_tokens for e in turn.events),
                completion_tokens=sum(e.completion_tokens for e in turn.events),
                total_tokens=sum(e.total_tokens for e in turn.events),
            ),
        )  # fmt: skip

    @property
    def estimated_context_tokens(self) -> int:
        # As a fork's dry run estimates it: about four characters of message text a token.
        return math.ceil(self.text_chars / 4)

    @property
    def warnings(self) -> list[str]:
        if not self.skipped:
            return []
        return [f"{self.skipped} event(s) are not ADK events (not a JSON object) and are left out"]


@dataclass(kw_only=True)
class _Open:
    key: str
    invocation_id: str | None
    events: list[TranscriptEvent] = field(default_factory=list)


@asynccontextmanager
async def reading(
    svc: Services, caller: Caller, session_id: str, *, before: str | None = None, before_task: str | None = None
) -> AsyncIterator[Reading]:
    """The transcript of a session the caller may see, read in one snapshot while the block runs.
    `before`: only the turns before that invocation (404 when the session has no event of it);
    `before_task`: only the turns before the one that task names (as a fork by task cuts)."""
    one_boundary(before, before_task, required=False, names=("before", "before_task"))
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, _ = await visible_session(svc, conn, caller, session_id)
        until = None
        if before_task is not None:
            named = await named_turn(svc, conn, source, None, before_task)
            if named.missing is not None:
                raise NotFound(f"task {before_task} not found in session {source.id}")
            before = named.invocation_id
            until = named.task.created_at if named.task is not None else None
        if before is not None:
            until = await svc.store.events.boundary_event_at(
                conn, source.id, source.user_id, before, prefilter=dialects.verbatim_in_json(before)
            )
            if until is None:
                raise NotFound(f"invocation {before} not found in session {source.id}")
        known = await turns.with_tasks(svc, conn, source, {})
        events = svc.store.events.stream_transcript_events(conn, source.id, source.user_id, until, cut_chars=CUT_CHARS)
        yield Reading(session=source, events=events, known=known)


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
