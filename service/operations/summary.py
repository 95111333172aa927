"""Branch summaries: what a stretch of a conversation's events holds, told the same way every time.

A fork's summary describes the source turns it left behind (at and after its boundary), a rewind's the
turns it hid. Both are computed by one query over those events (store.events.event_tally, which reads each
event through the service's one event reader in SQL) in the operation's own transaction, and kept in
its record, so that the views show them later without recomputing.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from service.kagent.store import Store
from service.kagent.store.base import Connection
from service.kagent.store.events import EventTally, TurnTally
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
