"""What the source conversation's tools answered: its calls (tool and arguments) and their results, read from its
events by the service's one event reader (the transcript's, `event_messages`), before and in one turn, for the
replay endpoint to answer a branch's call the source made (docs/replay-twins.md).

A call is known by its tool's name and its arguments as canonical JSON (keys sorted, no spaces), so that the
same call is the same whatever order the model wrote the keys in. When the source made it more than once, the
latest result before or in the turn is the one answered: the world as the source saw it last."""

from __future__ import annotations

import msgspec

from service.branches import transcript
from service.kagent.store.base import Connection
from service.services import Services

# Whole arguments and responses: a recording is answered exactly as the events hold it.
WHOLE = 2**31 - 1


def canonical(arguments: object) -> str:
    """Arguments as canonical JSON: the key a call is recorded and found under."""
    return msgspec.json.encode(arguments, order="sorted").decode()


Recordings = dict[tuple[str, str], object]


async def recorded(svc: Services, conn: Connection, session_id: str, user_id: str, turn_key: str) -> Recordings:
    """The source session's tool results by (tool, canonical arguments), from its events up to the end of the turn
    `turn_key` (its invocation id, or its task id for a turn known by its task alone); the whole session when no
    turn has that key. Runs in its own read-only snapshot on `conn`."""
    found: Recordings = {}
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        source = await svc.store.sessions.get_session(conn, session_id, user_id)
        if source is None:
            return found
        reading = await transcript.open_reading(svc, conn, source, cut_chars=WHOLE)
        async for turn in reading.turns():
            calls: dict[str, tuple[str, str]] = {}
            for m in turn.messages:
                if m.kind == "tool_call" and m.tool_name is not None and m.tool_call_id is not None:
                    calls[m.tool_call_id] = (m.tool_name, canonical(m.args if m.args is not None else {}))
                elif m.kind == "tool_result" and m.tool_call_id in calls:
                    found[calls[m.tool_call_id]] = m.response
            if turn_key in (turn.invocation_id, turn.task_id):
                break
    return found
