"""kagent's event rows: boundaries, tallies, transcripts, turns and the server-side copy of kept rows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import msgspec

from service.kagent.store.base import (
    TASK_FETCH_BATCH,
    Connection,
    Queries,
    fetch_parsed,
    row_count,
)


@dataclass(frozen=True, kw_only=True)
class EventTurn:
    invocation_id: str
    started_at: datetime
    event_count: int
    user_text: str | None


@dataclass(frozen=True, kw_only=True)
class EventSpan:
    """An invocation as a listing's first pass sees it (event_spans): it may be a turn (one of its events may hold
    a message); event_heads tells."""

    invocation_id: str
    started_at: datetime
    ended_at: datetime
    event_count: int


@dataclass(frozen=True, kw_only=True)
class EventHead(EventSpan):
    """A turn as its events show it (event_heads): as event_turns gives it, with its last event's time."""

    user_text: str | None


@dataclass(frozen=True, kw_only=True)
class EventTally:
    """What a stretch of a session's events holds (events_tally)."""

    events: int
    turns: int
    total_tokens: int
    model_calls: int | None = None  # the agent's model responses; None: not counted (a turn map's tally)
    first_at: datetime | None
    last_at: datetime | None
    tool_calls: dict[str, int]
    first_user_text: str | None
    last_agent_text: str | None
    # each model call's (input tokens, output tokens), in event order; None: not counted (a turn map's tally)
    model_usage: list[tuple[int, int]] | None = None


@dataclass(frozen=True, kw_only=True)
class TurnTally:
    """What one turn's events hold (events_tally_by_turn)."""

    invocation_id: str
    events: int
    total_tokens: int
    first_at: datetime
    last_at: datetime
    tool_calls: dict[str, int]
    first_user_text: str | None
    last_agent_text: str | None


@dataclass(frozen=True, kw_only=True)
class TranscriptEvent:
    """One event as a transcript reads it (transcript_events): messages is a JSON array, as PostgreSQL
    made it; doc_kind the JSON type of the row (None: not JSON)."""

    id: str
    created_at: datetime
    invocation_id: str | None
    turn_key: str  # its invocation id, else its own (event:<id>)
    items: bool  # an OpenAI Agents SDK `conversation_items` event
    opens_turn: bool  # such an event that holds a turn's input
    doc_kind: str | None
    author: str | None
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    messages: str


@dataclass(frozen=True, kw_only=True)
class TurnInput:
    """Where a task's turn begins among an OpenAI Agents SDK session's turn inputs (turn_input_event)."""

    at: datetime | None  # the input event paired with the task, when the pairing holds and it exists
    paired: bool  # the session's tasks and turn inputs pair one to one (the last turn's input may be unwritten)
    inputs: int  # how many turn inputs the session holds (0: not an OpenAI Agents SDK session)


@dataclass(frozen=True, kw_only=True)
class EventStats:
    events: int
    bytes: int
    text_chars: int

    def __add__(self, other: EventStats) -> EventStats:
        return EventStats(events=self.events + other.events, bytes=self.bytes + other.bytes,
                          text_chars=self.text_chars + other.text_chars)  # fmt: skip


class Events:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def boundary_event_at(
        self, conn: Connection, session_id: str, owner: str, invocation_id: str, *, prefilter: bool
    ) -> datetime | None:
        value: datetime | None = await conn.fetchval(
            self.q["boundary_event"], session_id, owner, invocation_id, prefilter
        )
        return value

    async def text_chars_before_each(
        self, conn: Connection, session_id: str, owner: str, times: list[datetime]
    ) -> dict[datetime, int]:
        """For each time, the characters of the text messages of the live events before it."""
        if not times:
            return {}
        rows = await conn.fetch(self.q["text_chars_before_each"], session_id, owner, times)
        return {r["before"]: int(r["text_chars"]) for r in rows}

    async def event_tally(
        self,
        conn: Connection,
        session_id: str,
        owner: str,
        since: datetime,
        until: datetime | None,
        *,
        user_text_chars: int,
        agent_text_chars: int,
    ) -> EventTally:
        row = await conn.fetchrow(
            self.q["events_tally"], session_id, owner, since, until, user_text_chars, agent_text_chars
        )
        assert row is not None  # an aggregate always answers one row
        return EventTally(
            events=int(row["events"]), turns=int(row["turns"]), total_tokens=int(row["total_tokens"]),
            model_calls=int(row["model_calls"]), first_at=row["first_at"], last_at=row["last_at"],
            tool_calls=msgspec.json.decode(row["tool_calls"], type=dict[str, int]),
            first_user_text=row["first_user_text"], last_agent_text=row["last_agent_text"],
            model_usage=msgspec.json.decode(row["model_usage"], type=list[tuple[int, int]]),
        )  # fmt: skip

    async def turn_tallies(
        self,
        conn: Connection,
        session_id: str,
        owner: str,
        since: datetime,
        *,
        user_text_chars: int,
        agent_text_chars: int,
    ) -> list[TurnTally]:
        """events_tally of each turn whose events start at `since` or later, in the order of their first event."""
        rows = await conn.fetch(
            self.q["events_tally_by_turn"], session_id, owner, since, user_text_chars, agent_text_chars
        )
        return [
            TurnTally(
                invocation_id=r["invocation_id"], events=int(r["events"]), total_tokens=int(r["total_tokens"]),
                first_at=r["first_at"], last_at=r["last_at"],
                tool_calls=msgspec.json.decode(r["tool_calls"], type=dict[str, int]),
                first_user_text=r["first_user_text"], last_agent_text=r["last_agent_text"],
            )
            for r in rows
        ]  # fmt: skip

    async def stream_transcript_events(
        self,
        conn: Connection,
        session_id: str,
        owner: str,
        before: datetime | None,
        *,
        cut_chars: int,
        since: datetime | None = None,
    ) -> AsyncIterator[TranscriptEvent]:
        """The events in transcript order through a server-side cursor (needs a transaction); `since`: only those
        written from then on (a what-if's turns in its fork, without its copied ones)."""
        query = self.q["transcript_events"]
        async for r in conn.cursor(query, session_id, owner, before, cut_chars, since, prefetch=TASK_FETCH_BATCH):
            yield TranscriptEvent(
                id=r["id"], created_at=r["created_at"], invocation_id=r["invocation_id"], turn_key=r["turn_key"],
                items=bool(r["items"]), opens_turn=bool(r["opens_turn"]),
                doc_kind=r["doc_kind"], author=r["author"], prompt_tokens=int(r["prompt_tokens"]),
                completion_tokens=int(r["completion_tokens"]), total_tokens=int(r["total_tokens"]),
                messages=r["messages"],
            )  # fmt: skip

    async def turn_input(self, conn: Connection, session_id: str, owner: str, task_id: str) -> TurnInput:
        """The input event of task `task_id`'s turn: the k-th turn input for the k-th task. The pairing holds
        when the counts agree, or when only the last turn's input is missing (its task is the session's
        newest row: the runtime has not written its input yet)."""
        row = await conn.fetchrow(self.q["turn_input_event"], session_id, owner, task_id)
        assert row is not None  # scalar subqueries always answer one row
        tasks, inputs = int(row["tasks"]), int(row["inputs"])
        last_task, last_input = row["last_task_at"], row["last_input_at"]
        paired = inputs == tasks or (
            inputs == tasks - 1 and (last_input is None or (last_task is not None and last_input < last_task))
        )
        return TurnInput(at=row["input_at"] if paired else None, paired=paired, inputs=inputs)

    async def event_stats(self, conn: Connection, session_id: str, owner: str, before: datetime | None) -> EventStats:
        rows = await fetch_parsed(
            conn, self.q["count_events_before"], self.q["count_events_before_tolerant"], session_id, owner, before
        )
        return _stats(rows[0])  # an aggregate always answers one row

    async def event_stats_part(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None, parts: int, part: int
    ) -> EventStats:
        """event_stats of one part of the rows (of `parts`, split by a hash of the row id): parts read on several
        connections at once (each in the caller's snapshot) add up to event_stats."""
        rows = await fetch_parsed(conn, self.q["count_events_before_part"], self.q["count_events_before_part_tolerant"],
                                  session_id, owner, before, parts, part)  # fmt: skip
        return _stats(rows[0])

    async def copy_kept(
        self,
        conn: Connection,
        table: Literal["event", "task"],
        *,
        session_id: str,
        owner: str,
        before: datetime | None,
        new_session_id: str,
        new_user_id: str,
    ) -> int:
        """Copy the kept events, or the kept tasks with their ids replaced, inside PostgreSQL
        (copy_events_before, copy_tasks_before); how many rows were copied."""
        query = self.q["copy_events_before" if table == "event" else "copy_tasks_before"]
        return row_count(await conn.execute(query, session_id, owner, before, new_user_id, new_session_id))

    async def first_user_event_text(self, conn: Connection, session_id: str, owner: str) -> str | None:
        parts = await conn.fetchval(self.q["first_user_event"], session_id, owner)
        if parts is None:
            return None
        decoded = msgspec.json.decode(parts)
        if not isinstance(decoded, list):
            return None
        texts = [p["text"] for p in decoded if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(texts) or None

    async def event_spans(self, conns: list[Connection], session_id: str, owner: str) -> list[EventSpan]:
        """The invocations that may be turns, in order of their first event: read in parts, one on each connection
        at once (each in the caller's snapshot), and merged. An invocation none of whose events may hold a
        message is no turn (event_turns), and is left out; one whose only user event with parts is plain text is a
        turn, given as the EventHead event_heads would make of it."""
        parts = await asyncio.gather(*(
            fetch_parsed(conn, self.q["event_spans"], self.q["event_spans_tolerant"], session_id, owner, len(conns), i)
            for i, conn in enumerate(conns)
        ))  # fmt: skip
        return _merged_spans(r for rows in parts for r in rows)

    async def event_heads(
        self, conn: Connection, session_id: str, owner: str, spans: list[EventSpan]
    ) -> dict[str, EventHead | None]:
        """What event_turns makes of each of these invocations (None: none of its events holds a message, so it is
        no turn), read from their events only (from the first span's start to the last one's end)."""
        if not spans:
            return {}
        start, end = min(s.started_at for s in spans), max(s.ended_at for s in spans)
        ids = [s.invocation_id for s in spans]
        rows = await fetch_parsed(
            conn, self.q["event_heads"], self.q["event_heads_tolerant"], session_id, owner, start, end, ids
        )
        heads: dict[str, EventHead | None] = dict.fromkeys(ids)
        for r in rows:
            if r["has_messages"]:
                heads[r["invocation_id"]] = EventHead(
                    invocation_id=r["invocation_id"], started_at=r["started_at"], ended_at=r["ended_at"],
                    event_count=int(r["event_count"]), user_text=r["user_text"],
                )  # fmt: skip
        return heads

    async def event_turns(self, conn: Connection, session_id: str, owner: str) -> list[EventTurn]:
        """The turns the events show, in order."""
        rows = await fetch_parsed(conn, self.q["event_turns"], self.q["event_turns_tolerant"], session_id, owner)
        return [
            EventTurn(
                invocation_id=r["invocation_id"], started_at=r["started_at"], event_count=int(r["event_count"]),
                user_text=r["user_text"],
            )
            for r in rows
        ]  # fmt: skip


@dataclass(kw_only=True)
class _SpanSum:
    """One invocation's event_spans rows, added up over the parts."""

    started: datetime
    ended: datetime
    events: int
    may_hold: bool
    user_events: int  # its user events with parts
    plain_events: int  # those of them that are one plain text part
    user_text: str | None  # a plain one's text

    def add(self, r: Any) -> None:
        self.started, self.ended = min(self.started, r["started_at"]), max(self.ended, r["ended_at"])
        self.events += r["event_count"]
        self.may_hold = self.may_hold or r["may_hold"]
        self.user_events += r["user_events"]
        self.plain_events += r["plain_events"]
        self.user_text = self.user_text if self.user_text is not None else r["user_text"]

    def span(self, invocation_id: str) -> EventSpan:
        """An EventHead when its one user event with parts is plain text (a turn whose user text that is, known
        exactly); else the span of an invocation that may be a turn."""
        if self.user_events != 1 or self.plain_events != 1:
            return EventSpan(invocation_id=invocation_id, started_at=self.started, ended_at=self.ended,
                             event_count=self.events)  # fmt: skip
        return EventHead(invocation_id=invocation_id, started_at=self.started, ended_at=self.ended,
                         event_count=self.events, user_text=self.user_text)  # fmt: skip


def _merged_spans(rows: Iterable[Any]) -> list[EventSpan]:
    """event_spans' rows of every part, each invocation's merged into one span, in order of their first event."""
    sums: dict[str, _SpanSum] = {}
    for r in rows:
        if (seen := sums.get(r["invocation_id"])) is not None:
            seen.add(r)
            continue
        sums[r["invocation_id"]] = _SpanSum(
            started=r["started_at"], ended=r["ended_at"], events=int(r["event_count"]), may_hold=r["may_hold"],
            user_events=int(r["user_events"]), plain_events=int(r["plain_events"]), user_text=r["user_text"],
        )  # fmt: skip
    spans = [total.span(invocation_id) for invocation_id, total in sums.items() if total.may_hold]
    return sorted(spans, key=lambda s: s.started_at)


def _stats(row: Any) -> EventStats:
    return EventStats(events=int(row["events"]), bytes=int(row["bytes"]), text_chars=int(row["text_chars"]))
