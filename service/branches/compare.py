"""Two conversations side by side: their common prefix and what each holds after it.

Two ADK sessions: the common prefix is the leading turns with equal invocation ids (a fork keeps its
source's ids), read from the events as the turn listing reads them; each side's figures after it are the
tally of its events from its first turn past the prefix (the branch summary's query). Any other pair
(an agent that writes no invocation id: OpenAI Agents SDK, LangGraph, CrewAI, Claude) is read as its
transcript reads it, and a turn is the same on both sides when it starts at the same instant with the
same first message (a fork copies events and tasks with their creation times and data); the figures are
added up from those turns' messages and usage. The turns after the prefix are also lined up by position
(`aligned`), so that a regenerated turn sits next to the turn it replaces: the first turn after the prefix
on one side beside the first on the other, and so on.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime

import msgspec

from service.branches import transcript
from service.identity import Caller, visible_session
from service.kagent import frameworks
from service.kagent.store.base import Connection
from service.kagent.store.events import EventTurn
from service.kagent.store.sessions import SessionRow
from service.operations import summary
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
        left, _ = await visible_session(svc, conn, caller, left_id)
        right, _ = await visible_session(svc, conn, caller, right_id)
        adk = ("adk", "adk-go")
        if (
            await frameworks.detect(svc.store, conn, left.id, left.user_id) not in adk
            or await frameworks.detect(svc.store, conn, right.id, right.user_id) not in adk
        ):
            return await _by_transcript(svc, conn, left, right)
        left_turns = await svc.store.events.event_turns(conn, left.id, left.user_id)
        right_turns = await svc.store.events.event_turns(conn, right.id, right.user_id)
        common = common_prefix(left_turns, right_turns)
        left_after, right_after = (
            await _turns(svc, conn, left, left_turns[common:]),
            await _turns(svc, conn, right, right_turns[common:]),
        )
        return Comparison(
            common_turns=common,
            left=await _side(svc, conn, left, left_turns[common:]),
            right=await _side(svc, conn, right, right_turns[common:]),
            aligned=[Row(left=a, right=b) for a, b in itertools.zip_longest(left_after, right_after)],
        )


@dataclass(frozen=True, kw_only=True)
class _Figured:
    """A transcript turn reduced to what a comparison shows of it."""

    key: tuple[str | None, str, str | None]  # (invocation id, start, first message): equal on both sides
    turn: Turn
    started_at: datetime
    ended_at: datetime


async def _figured(svc: Services, conn: Connection, session: SessionRow) -> list[_Figured]:
    """Every turn of the session's transcript, as figures (one turn's messages in memory at a time)."""
    r = await transcript.open_reading(svc, conn, session)
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
            duration_seconds=(ended - started).total_seconds(),
        )  # fmt: skip
        out.append(_Figured(key=(t.invocation_id, t.started_at, first), turn=turn, started_at=started, ended_at=ended))
    return out


async def _by_transcript(svc: Services, conn: Connection, left: SessionRow, right: SessionRow) -> Comparison:
    """The comparison of two sessions read as their transcripts read them (any framework)."""
    a, b = await _figured(svc, conn, left), await _figured(svc, conn, right)
    common = 0
    for x, y in zip(a, b, strict=False):
        if x.key != y.key:
            break
        common += 1
    return Comparison(
        common_turns=common,
        left=_side_of(left, a[common:]),
        right=_side_of(right, b[common:]),
        aligned=[
            Row(left=x.turn if x else None, right=y.turn if y else None)
            for x, y in itertools.zip_longest(a[common:], b[common:])
        ],
    )


def _side_of(session: SessionRow, after: list[_Figured]) -> Side:
    tools: dict[str, int] = {}
    for f in after:
        for name, n in f.turn.tool_calls.items():
            tools[name] = tools.get(name, 0) + n
    questions = [f.turn.question for f in after if f.turn.question is not None]
    answers = [f.turn.answer for f in after if f.turn.answer is not None]
    return Side(
        session_id=session.id, name=session.name, turns_after=len(after), tool_calls=dict(sorted(tools.items())),
        total_tokens=sum(f.turn.total_tokens for f in after),
        duration_seconds=(after[-1].ended_at - after[0].started_at).total_seconds() if after else 0.0,
        first_user_text=questions[0] if questions else None, last_agent_text=answers[-1] if answers else None,
    )  # fmt: skip


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
                duration_seconds=(t.last_at - t.first_at).total_seconds() if t else 0.0,
            )
        )  # fmt: skip
    return out


async def _side(svc: Services, conn: Connection, session: SessionRow, after: list[EventTurn]) -> Side:
    if not after:
        return Side(
            session_id=session.id, name=session.name, turns_after=0, tool_calls={}, total_tokens=0,
            duration_seconds=0.0, first_user_text=None, last_agent_text=None,
        )  # fmt: skip
    t = await summary.tally(svc.store, conn, session.id, session.user_id, after[0].started_at)
    duration = (t.last_at - t.first_at).total_seconds() if t.first_at and t.last_at else 0.0
    return Side(
        session_id=session.id, name=session.name, turns_after=len(after), tool_calls=dict(sorted(t.tool_calls.items())),
        total_tokens=t.total_tokens, duration_seconds=duration, first_user_text=t.first_user_text,
        last_agent_text=t.last_agent_text,
    )  # fmt: skip
