"""The memory and flow state of CrewAI agents on kagent 0.10.x: one crewai_agent_memory row per user and thread
and one crewai_flow_state row per flow method, upserted through kagent's /api/crewai endpoints (thread_id = the
session id). They hold no history, so a cut can keep them only if they did not change from the chosen turn on.
kagent-crewai 0.10.4 on crewai 1.6.1 writes none of them (it keeps memory and flow state in its pod), so a
session of it has its tasks only (docs/frameworks.md)."""

from __future__ import annotations

from datetime import datetime

from service.errors import Unprocessable
from service.kagent import frameworks
from service.kagent.store import Store
from service.kagent.store.base import Connection

SHARED = (
    "this session's agent (CrewAI) keeps memory and flow state that it overwrites as the chat goes; they did not "
    "change from the chosen turn on, so they are shared as they are"
)

IN_POD = (
    "this session's agent (CrewAI) keeps no memory or flow state in kagent's database: kagent-crewai 0.10.4 keeps "
    "them in its pod (a crew's memory is shared by all its sessions); a crew is sent each turn's question and what "
    "its pod remembers, no earlier turn, so the fork holds the chat as it was"
)
FLOW_IN_POD = (
    "this session's agent (a CrewAI flow) keeps its state in its own pod under the session's id, not in kagent's "
    "database (kagent-crewai 0.10.4)"
)


async def flow_in_pod(store: Store, conn: Connection, sid: str, users: tuple[str, ...]) -> bool:
    """Whether the session's agent is a CrewAI flow whose state is not in kagent's database: its tasks tell a
    flow's methods and the thread has no crewai row. Such a flow restores its state by the session's id from its
    pod, so a fork (another id) starts it afresh and a rewind leaves it knowing the hidden turns. `users`: whose
    rows of the session are its owner's (the operation's settled access, identity.Seen)."""
    _, crewai_rows, _, task = await store.sessions.framework_signals(conn, sid, list(users))
    return not crewai_rows and frameworks.crewai_flow(task)


async def fork_warning(
    store: Store, conn: Connection, sid: str, users: tuple[str, ...], before: datetime | None
) -> str | None:
    """What a fork (of the whole session when `before` is None, else cut before the turn whose task was created
    at `before`) says about the session's CrewAI rows; 422 when the cut cannot keep them (check_cut)."""
    changed = await store.crewai.last_change(conn, sid, list(users))
    if changed is None:
        return IN_POD
    if before is None:
        return None
    _refuse_if_changed(changed, before, "a fork")
    return SHARED


async def check_cut(
    store: Store, conn: Connection, sid: str, users: tuple[str, ...], before: datetime, what: str
) -> None:
    """422 when the session's CrewAI rows changed at or after `before` (the chosen turn's task was created):
    their values before it are gone, so `what` (a fork or a rewind before that turn) cannot give them back."""
    _refuse_if_changed(await store.crewai.last_change(conn, sid, list(users)), before, what)


def _refuse_if_changed(changed: datetime | None, before: datetime, what: str) -> None:
    if changed is not None and changed >= before:
        raise Unprocessable(
            f"this session's agent (CrewAI) keeps memory and flow state that it overwrites as the chat goes; they "
            f"changed at or after the chosen turn began, and their earlier values are gone: {what} before that turn "
            "cannot give the agent what it knew then (a fork of the whole session can)"
        )


async def copy(store: Store, conn: Connection, sid: str, users: tuple[str, ...], new_sid: str) -> tuple[int, int]:
    """The session's CrewAI rows copied to the fork's thread, under the users that wrote them."""
    return await store.crewai.copy(conn, sid, list(users), new_sid)
