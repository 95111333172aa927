"""kagent's session rows (and the share links that open them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.kagent.store.base import (
    Connection,
    Queries,
)


@dataclass(frozen=True, kw_only=True)
class SessionRow:
    id: str
    user_id: str
    name: str | None
    agent_id: str | None
    source: str | None
    created_at: datetime | None
    updated_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class SessionNode:
    """A session as a fork tree shows it (session_node)."""

    name: str | None
    deleted: bool
    agent_id: str | None
    events: int


@dataclass(frozen=True, kw_only=True)
class Share:
    session_id: str
    owner: str
    read_only: bool


def _session(row: Any) -> SessionRow:
    return SessionRow(
        id=row["id"],
        user_id=row["user_id"],
        name=row["name"],
        agent_id=row["agent_id"],
        source=row["source"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class Sessions:
    """The queries over these rows; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def share_by_token(self, conn: Connection, token: str) -> Share | None:
        row = await conn.fetchrow(self.q["share_by_token"], token)
        if row is None:
            return None
        return Share(session_id=row["session_id"], owner=row["user_id"], read_only=row["read_only"])

    async def get_session(
        self, conn: Connection, session_id: str, owner: str, *, lock: bool = False
    ) -> SessionRow | None:
        row = await conn.fetchrow(self.q["lock_session" if lock else "get_session"], session_id, owner)
        return None if row is None else _session(row)

    async def owned_session(self, conn: Connection, session_id: str, owner: str) -> SessionRow | None:
        """The session row whether or not it is hidden: only for rows the service itself wrote for `owner` (an
        experiment's branch forks), never for a session a caller names."""
        row = await conn.fetchrow(self.q["owned_session"], session_id, owner)
        return None if row is None else _session(row)

    async def session_status(self, conn: Connection, session_id: str, owner: str) -> tuple[str | None, bool] | None:
        row = await conn.fetchrow(self.q["session_status"], session_id, owner)
        return None if row is None else (row["name"], bool(row["deleted"]))

    async def existing(self, conn: Connection, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of the (session, owner) keys still have a session row (deleted or not): the others were purged."""
        rows = await conn.fetch(self.q["existing_sessions"], [k[0] for k in keys], [k[1] for k in keys])
        return {(r["id"], r["user_id"]) for r in rows}

    async def session_node(self, conn: Connection, session_id: str, owner: str) -> SessionNode | None:
        row = await conn.fetchrow(self.q["session_node"], session_id, owner)
        if row is None:
            return None
        return SessionNode(
            name=row["name"], deleted=bool(row["deleted"]), agent_id=row["agent_id"], events=row["events"]
        )

    async def framework_signals(
        self, conn: Connection, session_id: str, users: list[str]
    ) -> tuple[bool, bool, list[str], str | None]:
        """(LangGraph checkpoints, CrewAI rows, the kinds of a few events, one task's text)."""
        row = await conn.fetchrow(self.q["framework_signals"], session_id, users)
        assert row is not None
        return bool(row["langgraph"]), bool(row["crewai"]), list(row["event_kinds"] or []), row["first_task"]

    async def runtime_rows_owned(self, conn: Connection, session_id: str, owner: str, runtime_user: str) -> bool:
        """Whether the session's rows under `runtime_user` (kagent's default user) are provably `owner`'s."""
        return bool(await conn.fetchval(self.q["runtime_rows_owned"], session_id, owner, runtime_user))

    async def has_events(self, conn: Connection, session_id: str, owner: str) -> bool:
        return bool(await conn.fetchval(self.q["has_events"], session_id, owner))

    async def sessions_of(self, conn: Connection, user_id: str, agent_id: str | None, limit: int) -> list[SessionRow]:
        return [_session(r) for r in await conn.fetch(self.q["explorer_sessions"], user_id, agent_id, limit)]

    async def insert_session(
        self,
        conn: Connection,
        *,
        session_id: str,
        user_id: str,
        name: str | None,
        agent_id: str | None,
        source: str | None,
    ) -> SessionRow:
        row = await conn.fetchrow(self.q["insert_session"], session_id, user_id, name, agent_id, source)
        return _session(row)

    async def touch_session(self, conn: Connection, session_id: str, owner: str) -> SessionRow:
        row = await conn.fetchrow(self.q["touch_session"], session_id, owner)
        assert row is not None  # the caller holds the session's row lock
        return _session(row)
