"""Two conversations side by side: their common prefix and what each holds after it.

The common prefix is the leading turns with equal invocation ids (a fork keeps its source's ids), read
from the events as the turn listing reads them; each side's figures after it are the tally of its
events from its first turn past the prefix (the branch summary's query). The turns after the prefix are
also lined up by position (`aligned`), so that a regenerated turn sits next to the turn it replaces: the
first turn after the prefix on one side beside the first on the other, and so on.
"""

from __future__ import annotations

import itertools

import msgspec

from service.identity import Caller, visible_session
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

    invocation_id: str
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
