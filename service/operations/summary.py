"""Branch summaries: what a stretch of a conversation's events holds, told the same way every time.

A fork's summary describes the source turns it left behind (at and after its boundary), a rewind's the
turns it hid. Both are computed by one query over those events (store.events.event_tally, which reads each
event through the service's one event reader in SQL) in the operation's own transaction, and kept in
its record, so that the views show them later without recomputing. An agent whose chat is only in its
A2A tasks (LangGraph, CrewAI, Claude: docs/frameworks.md) is told from those tasks instead
(summarize_tasks: a turn a task, its messages as the transcript reads them, no events and no tokens).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from service.kagent import dialects
from service.kagent.store import Store
from service.kagent.store.base import Connection
from service.kagent.store.events import EventTally, TurnTally
from service.operations import plan
from service.schemas import Summary

USER_TEXT_CHARS = 200
AGENT_TEXT_CHARS = 480

_encoder = msgspec.json.Encoder(order="sorted")


async def tally(
    store: Store, conn: Connection, session_id: str, owner: str, since: datetime, until: datetime | None = None
) -> EventTally:
    """The live events with since <= created_at < until (None: to the end)."""
    return await store.events.event_tally(
        conn, session_id, owner, since, until, user_text_chars=USER_TEXT_CHARS, agent_text_chars=AGENT_TEXT_CHARS
    )


async def turn_tallies(store: Store, conn: Connection, session_id: str, owner: str, since: datetime) -> list[TurnTally]:
    """tally() turn by turn, for the turns whose events start at `since` or later."""
    return await store.events.turn_tallies(
        conn, session_id, owner, since, user_text_chars=USER_TEXT_CHARS, agent_text_chars=AGENT_TEXT_CHARS
    )


def of_tally(t: EventTally) -> Summary | None:
    if t.events == 0:
        return None
    return Summary(
        turns=t.turns, events=t.events, tool_calls=dict(sorted(t.tool_calls.items())),
        first_user_text=t.first_user_text, last_agent_text=t.last_agent_text, total_tokens=t.total_tokens,
    )  # fmt: skip


async def summarize_events(
    store: Store,
    conn: Connection,
    session_id: str,
    owner: str,
    since: datetime | None,
    until: datetime | None = None,
    *,
    mapped: bool = False,
) -> Summary | None:
    """The summary of the live events from `since` (None: nothing left behind) to `until`, or None
    when there are none. `mapped`: the session's turn map is trusted in this snapshot, and adds it up
    from its runs when `since` starts one (the same answer, without reading the events)."""
    if since is None:
        return None
    if mapped and until is None:
        told = await store.turn_maps.figures.tally_from(
            conn, session_id, owner, since, user_chars=USER_TEXT_CHARS, agent_chars=AGENT_TEXT_CHARS
        )
        if told is not None:
            return of_tally(told)
    return of_tally(await tally(store, conn, session_id, owner, since, until))


def stored(summary: Summary | None) -> str | None:
    """As kept in the service's tables (JSON, keys sorted), None for no summary."""
    return None if summary is None else _encoder.encode(summary).decode()


def loaded(text: str | None) -> Summary | None:
    return None if text is None else msgspec.json.decode(text, type=Summary)


async def summarize_tasks(
    store: Store, conn: Connection, session_id: str, owner: str, since: datetime | None
) -> Summary | None:
    """The summary of the live tasks created from `since` on (None: nothing left behind), for an agent whose
    chat is only in its tasks: one turn a task, tool calls and texts from their conversation (the transcript's
    reader, dialects.chat_messages); None when there are none."""
    if since is None:
        return None
    turns, tools, first, last = 0, dict[str, int](), None, None
    async for row in store.tasks.stream_tasks_from(conn, session_id, owner, since):
        turns += 1
        try:
            messages = dialects.chat_messages(dialects.decode(row.data), plan.dialect_of(row))
        except dialects.TaskFormatError:
            continue
        for m in messages:
            if m.kind == "tool_call" and m.tool_name is not None:
                tools[m.tool_name] = tools.get(m.tool_name, 0) + 1
            elif m.kind == "text" and m.text is not None:
                if m.from_user and first is None:
                    first = m.text[:USER_TEXT_CHARS]
                elif not m.from_user:
                    last = m.text[:AGENT_TEXT_CHARS]
    if turns == 0:
        return None
    return Summary(
        turns=turns, events=0, tool_calls=dict(sorted(tools.items())), first_user_text=first, last_agent_text=last,
        total_tokens=0,
    )  # fmt: skip


async def tasks_text_chars(store: Store, conn: Connection, session_id: str, owner: str, before: datetime | None) -> int:
    """The characters of the text messages of the live tasks created before `before` (None: all): a dry
    run's token estimate for an agent whose chat is only in its tasks."""
    chars = 0
    async for row in store.tasks.stream_tasks_before(conn, session_id, owner, before):
        try:
            messages = dialects.chat_messages(dialects.decode(row.data), plan.dialect_of(row))
        except dialects.TaskFormatError:
            continue
        chars += sum(len(m.text) for m in messages if m.kind == "text" and m.text is not None)
    return chars
