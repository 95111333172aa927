"""Small helpers shared by the database and HTTP tests."""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

import asyncpg

from tests.support.conversations import Conversation, build_conversation, insert_conversation


def new_user() -> str:
    """A user id no other test uses, so tests never see each other's sessions."""
    return f"user-{secrets.token_hex(4)}@example.com"


async def seed(pool: asyncpg.Pool, **kwargs: Any) -> Conversation:
    """Build a realistic conversation (tests/support/conversations.py) and insert it."""
    kwargs.setdefault("user_id", new_user())
    conv = build_conversation(**kwargs)
    async with pool.acquire() as conn:
        await insert_conversation(conn, conv, schema_version_ok=False)
    return conv


async def table_fingerprint(pool: asyncpg.Pool) -> dict[str, tuple[int, str]]:
    """Row count and checksum of every table kagent-fork may write: to prove a request wrote nothing."""
    tables = {
        "session": "SELECT id, user_id, name, agent_id, source, created_at, updated_at, deleted_at FROM session",
        "event": "SELECT id, user_id, session_id, created_at, updated_at, deleted_at, data FROM event",
        "task": "SELECT id, created_at, updated_at, deleted_at, data, session_id, protocol_version, user_id FROM task",
        "fork": "SELECT * FROM kagent_fork.fork",
        "idempotency": "SELECT * FROM kagent_fork.idempotency",
        "rewind": "SELECT * FROM kagent_fork.rewind",
    }
    out = {}
    async with pool.acquire() as conn:
        for name, query in tables.items():
            rows = await conn.fetch(f"SELECT md5(string_agg(t::text, '|' ORDER BY t::text)), count(*) FROM ({query}) t")
            out[name] = (rows[0]["count"], rows[0]["md5"] or "")
    return out


async def session_rows(pool: asyncpg.Pool, session_id: str, user_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every live row of a session, in kagent's order."""
    async with pool.acquire() as conn:
        events = await conn.fetch(
            "SELECT id, user_id, session_id, created_at, updated_at, data FROM event "
            "WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL ORDER BY created_at",
            session_id,
            user_id,
        )
        tasks = await conn.fetch(
            "SELECT id, created_at, updated_at, data, session_id, protocol_version, user_id FROM task "
            "WHERE session_id = $1 AND deleted_at IS NULL ORDER BY created_at",
            session_id,
        )
    return {"events": [dict(r) for r in events], "tasks": [dict(r) for r in tasks]}


def digest(rows: Any) -> str:
    return hashlib.sha256(json.dumps(rows, default=str, sort_keys=True).encode()).hexdigest()
