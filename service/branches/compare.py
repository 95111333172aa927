"""Two conversations side by side: their common prefix and what each holds after it.

Two ADK sessions: the common prefix is the leading turns with equal invocation ids (a fork keeps its
source's ids), read from the events as the turn listing reads them; each turn after it is figured from its
own events (the branch summary's query, turn by turn). Any other pair (an agent that writes no invocation id:
OpenAI Agents SDK, LangGraph, CrewAI, Claude) is read as its transcript reads it, and a turn is the same on
both sides when it starts at the same instant with the same first message (a fork copies events and tasks
with their creation times and data); each turn's figures come from its messages and usage. Either way a
side's figures are those turns' sums, as an experiment's grid adds up a column (operations/continuation.py:
turns, tool calls, tokens, and the duration summed over turns). The turns after the prefix are also lined
up by position (`aligned`), so that a regenerated turn sits next to the turn it replaces: the first turn
after the prefix on one side beside the first on the other, and so on.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime

import msgspec

from service.branches import transcript
from service.identity import Caller, Seen, settle
from service.kagent.store.base import Connection
from service.kagent.store.events import EventTurn
from service.kagent.store.sessions import SessionRow
from service.operations import continuation, summary
from service.services import Services


class Side(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    name: str | None
    turns_after: int
    tool_calls: dict[str, int]
    total_tokens: int
    duration_seconds: float
    first_user_text: str | None
    last_agent_text: str | None


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """One turn after the common prefix: its question, its answer and what it cost."""

    invocation_id: str | None  # None: an agent that writes none (the turn is known by its task)
    task_id: str | None = None
    question: str | None
    answer: str | None
    tool_calls: dict[str, int]
    total_tokens: int
    duration_seconds: float


class Row(msgspec.Struct, frozen=True, kw_only=True):
    left: Turn | None
    right: Turn | None


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    common_turns: int
    left: Side
    right: Side
    aligned: list[Row]


def common_prefix(left: list[EventTurn], right: list[EventTurn]) -> int:
    common = 0
    for a, b in zip(left, right, strict=False):
        if a.invocation_id != b.invocation_id:
            break
        common += 1
    return common


async def compare(svc: Services, caller: Caller, left_id: str, right_id: str) -> Comparison:
    """Both sessions must be visible to the caller (404 otherwise, for either). One snapshot."""
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        # Each session's access settled once (identity.Seen): the transcripts below take it.
        left_seen, right_seen = await settle(svc, conn, caller, left_id), await settle(svc, conn, caller, right_id)
        left, right = left_seen.row, right_seen.row
        adk = ("adk", "adk-go")
        if left_seen.framework not in adk or right_seen.framework not in adk:
            return await _by_transcript(svc, conn, left_seen, right_seen)
        left_turns = await svc.store.events.event_turns(conn, left.id, left.user_id)
        right_turns = await svc.store.events.event_turns(conn, right.id, right.user_id)
        common = common_prefix(left_turns, right_turns)
        left_after, right_after = (
            await _turns(svc, conn, left, left_turns[common:]),
            await _turns(svc, conn, right, right_turns[common:]),
        )
        return Comparison(
            common_turns=common,
            left=_side(left, left_after),
            right=_side(right, right_after),
            aligned=[Row(left=a, right=b) for a, b in itertools.zip_longest(left_after, right_after)],
        )


@dataclass(frozen=True, kw_only=True)
class _Figured:
    """A transcript turn reduced to what a comparison shows of it."""

    key: tuple[str | None, str, str | None]  # (invocation id, start, first message): equal on both sides
    turn: Turn


async def _figured(svc: Services, conn: Connection, seen: Seen) -> list[_Figured]:
    """Every turn of the session's transcript, as figures (one turn's messages in memory at a time)."""
    r = await transcript.open_reading(svc, conn, seen.row, seen=seen)
    out = []
    async for t in r.turns():
        first = t.messages[0].text if t.messages else None
        questions = [m.text for m in t.messages if m.role == "user" and m.kind == "text" and m.text is not None]
        answers = [m.text for m in t.messages if m.role == "agent" and m.kind == "text" and m.text is not None]
        tools: dict[str, int] = {}
        for m in t.messages:
            if m.kind == "tool_call" and m.tool_name is not None:
                tools[m.tool_name] = tools.get(m.tool_name, 0) + 1
        started, ended = datetime.fromisoformat(t.started_at), datetime.fromisoformat(t.ended_at)
        turn = Turn(
            invocation_id=t.invocation_id, task_id=t.task_id,
            question=questions[0][: summary.USER_TEXT_CHARS] if questions else None,
            answer=answers[-1][: summary.AGENT_TEXT_CHARS] if answers else None,
            tool_calls=dict(sorted(tools.items())), total_tokens=t.usage.total_tokens,
            duration_seconds=continuation.turn_duration(started, ended),
        )  # fmt: skip
        out.append(_Figured(key=(t.invocation_id, t.started_at, first), turn=turn))
    return out


async def _by_transcript(svc: Services, conn: Connection, left_seen: Seen, right_seen: Seen) -> Comparison:
    """The comparison of two sessions read as their transcripts read them (any framework)."""
    left, right = left_seen.row, right_seen.row
    a, b = await _figured(svc, conn, left_seen), await _figured(svc, conn, right_seen)
    common = 0
    for x, y in zip(a, b, strict=False):
        if x.key != y.key:
            break
        common += 1
    return Comparison(
        common_turns=common,
        left=_side(left, [f.turn for f in a[common:]]),
        right=_side(right, [f.turn for f in b[common:]]),
        aligned=[
            Row(left=x.turn if x else None, right=y.turn if y else None)
            for x, y in itertools.zip_longest(a[common:], b[common:])
        ],
    )


async def _turns(svc: Services, conn: Connection, session: SessionRow, after: list[EventTurn]) -> list[Turn]:
    """The turns after the prefix, in the listing's order, each with its own tally."""
    if not after:
        return []
    tallies = {
        t.invocation_id: t
        for t in await summary.turn_tallies(svc.store, conn, session.id, session.user_id, after[0].started_at)
    }
    out = []
    for turn in after:
        t = tallies.get(turn.invocation_id)
        out.append(
            Turn(
                invocation_id=turn.invocation_id, question=t.first_user_text if t else turn.user_text,
                answer=t.last_agent_text if t else None, tool_calls=dict(sorted(t.tool_calls.items())) if t else {},
                total_tokens=t.total_tokens if t else 0,
                duration_seconds=continuation.turn_duration(t.first_at, t.last_at) if t else 0.0,
            )
        )  # fmt: skip
    return out


def _side(session: SessionRow, after: list[Turn]) -> Side:
    """A side's figures after the prefix: its turns' sums (continuation.summed, as a grid's column)."""
    sums = continuation.summed(after)
    questions = [t.question for t in after if t.question is not None]
    answers = [t.answer for t in after if t.answer is not None]
    return Side(
        session_id=session.id, name=session.name, turns_after=sums.turns,
        tool_calls=continuation.tool_calls_by_name(after), total_tokens=sums.total_tokens,
        duration_seconds=sums.duration_seconds, first_user_text=questions[0] if questions else None,
        last_agent_text=answers[-1] if answers else None,
    )  # fmt: skip
