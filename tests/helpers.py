"""Small helpers shared by the database and HTTP tests."""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import UTC, datetime, timedelta
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
        "discard": "SELECT * FROM kagent_fork.discard",
        # kagent 0.10.x's BYO framework state (LangGraph checkpoints, CrewAI memory and flow state).
        "lg_checkpoint": "SELECT * FROM lg_checkpoint",
        "lg_checkpoint_write": "SELECT * FROM lg_checkpoint_write",
        "crewai_agent_memory": "SELECT * FROM crewai_agent_memory",
        "crewai_flow_state": "SELECT * FROM crewai_flow_state",
    }
    out = {}
    async with pool.acquire() as conn:
        for name, query in tables.items():
            rows = await conn.fetch(f"SELECT md5(string_agg(t::text, '|' ORDER BY t::text)), count(*) FROM ({query}) t")
            out[name] = (rows[0]["count"], rows[0]["md5"] or "")
    return out


async def caller_fingerprint(pool: asyncpg.Pool, *user_ids: str) -> dict[str, tuple[int, str]]:
    """Row count and checksum of every row requests by these users may write (its sessions, their events and
    tasks, its forks, rewinds, keys, what-if jobs, experiments and discards): to prove a request wrote nothing where
    other tests' agents may still be saving their own tasks meanwhile (they lift updated_at)."""
    owned = "user_id = ANY($1) OR session_id IN (SELECT id FROM session WHERE user_id = ANY($1))"
    tables = {
        "session": "SELECT * FROM session WHERE user_id = ANY($1)",
        "event": f"SELECT * FROM event WHERE {owned}",
        "task": f"SELECT * FROM task WHERE {owned}",
        "fork": "SELECT * FROM kagent_fork.fork WHERE user_id = ANY($1) OR parent_user_id = ANY($1)",
        "idempotency": "SELECT * FROM kagent_fork.idempotency WHERE user_id = ANY($1)",
        "rewind": "SELECT * FROM kagent_fork.rewind WHERE user_id = ANY($1)",
        "whatif_job": "SELECT * FROM kagent_fork.whatif_job WHERE user_id = ANY($1)",
        "experiment": "SELECT * FROM kagent_fork.experiment WHERE user_id = ANY($1)",
        "discard": "SELECT * FROM kagent_fork.discard WHERE user_id = ANY($1)",
        "judgment": "SELECT * FROM kagent_fork.judgment WHERE user_id = ANY($1)",
    }
    out = {}
    async with pool.acquire() as conn:
        for name, query in tables.items():
            row = await conn.fetchrow(
                f"SELECT md5(string_agg(t::text, '|' ORDER BY t::text)), count(*) FROM ({query}) t", list(user_ids)
            )
            assert row is not None
            out[name] = (row["count"], row["md5"] or "")
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


def _part_call(part: dict[str, Any], snake: str, camel: str) -> dict[str, Any] | None:
    value = part.get(snake) if isinstance(part.get(snake), dict) else part.get(camel)
    return value if isinstance(value, dict) else None


def expected_summary(conv: Conversation, since: Any, until: Any = None) -> dict[str, Any] | None:
    """The branch summary of the conversation's events from `since` on, worked out here from the
    fixture's own JSON (an oracle independent of the service's SQL reader), as the contract defines it."""
    docs = [
        json.loads(e.data)
        for e in sorted(conv.events, key=lambda e: (e.created_at, e.id))
        if e.created_at >= since and (until is None or e.created_at < until)
    ]
    if not docs:
        return None
    tools: dict[str, int] = {}
    user_texts, agent_texts, total = [], [], 0
    invocations = set()  # those with a message: the others are bookkeeping, not turns
    for doc in docs:
        content = doc.get("content") if isinstance(doc.get("content"), dict) else {}
        for part in content.get("parts") or []:
            call = _part_call(part, "function_call", "functionCall")
            response = _part_call(part, "function_response", "functionResponse")
            text = part.get("text") if isinstance(part.get("text"), str) and part.get("thought") is not True else None
            if call is not None:
                tools[call["name"]] = tools.get(call["name"], 0) + 1
            elif response is None and text is not None:
                (user_texts if doc.get("author") == "user" else agent_texts).append(text)
            if call is not None or response is not None or text is not None:
                invocations.add(doc.get("invocation_id") or doc.get("invocationId"))
        usage = doc.get("usage_metadata") or doc.get("usageMetadata") or {}
        total += usage.get("total_token_count") or usage.get("totalTokenCount") or 0
    return {
        "strategy": "deterministic_v1",
        "turns": len(invocations - {None}),
        "events": len(docs),
        "tool_calls": dict(sorted(tools.items())),
        "first_user_text": user_texts[0][:200] if user_texts else None,
        "last_agent_text": agent_texts[-1][:480] if agent_texts else None,
        "total_tokens": total,
    }


async def append_turns(
    pool: asyncpg.Pool, session_id: str, user_id: str, *, dialect: str, turns: int, **kwargs: Any
) -> Conversation:
    """New turns written into an existing session as kagent writes a chat's next turns (its events and
    one task a turn, built by the same libraries as `seed`), from now on (kagent stamps NOW()), and
    after everything the session holds."""
    async with pool.acquire() as conn:
        last = await conn.fetchval(
            "SELECT greatest((SELECT max(created_at) FROM event WHERE session_id = $1 AND user_id = $2),"
            " (SELECT max(created_at) FROM task WHERE session_id = $1))",
            session_id,
            user_id,
        )
        conv = build_conversation(
            dialect=dialect,
            turns=turns,
            user_id=user_id,
            session_id=session_id,
            start=max(last + timedelta(seconds=1), datetime.now(UTC)),
            **kwargs,
        )
        await conn.executemany(
            "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data) VALUES ($1, $2, $3, $4, $4, $5)",
            [(e.id, user_id, session_id, e.created_at, e.data) for e in conv.events],
        )
        await conn.executemany(
            "INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7)",
            [(t.id, t.created_at, t.updated_at, t.data, session_id, t.protocol_version, user_id) for t in conv.tasks],
        )
    return conv


def first_event_at(conv: Conversation, invocation_id: str) -> Any:
    """A fork's or a rewind's event boundary: when the first event of that invocation was written, or the
    event just before it when that is the header_update that opens the turn (kagent-adk 0.10.x)."""

    def invocation(data: str) -> Any:
        doc = json.loads(data)
        return doc.get("invocation_id", doc.get("invocationId"))

    ordered = sorted(conv.events, key=lambda e: (e.created_at, e.id))
    first = next(i for i, e in enumerate(ordered) if invocation(e.data) == invocation_id)
    if first > 0 and invocation(ordered[first - 1].data) == "header_update":
        return ordered[first - 1].created_at
    return ordered[first].created_at


def named_connections(url: str, application_name: str) -> str:
    """The database URL with an application_name, so that a test can tell (and kill) the service's own backends.
    The embedded server's URL has a query already (its socket's host)."""
    return f"{url}{'&' if '?' in url else '?'}application_name={application_name}"


async def ended_experiment(
    pool: asyncpg.Pool, source: Conversation, forks: list[Conversation]
) -> tuple[str, list[str]]:
    """An ended experiment of `source`'s owner whose branches' forks are the sessions `forks` (rows as the replay
    engine writes them, without agents), the branches in the order of `forks`: (its id, its branches' job ids)."""
    import uuid

    experiment_id, jobs = str(uuid.uuid4()), [str(uuid.uuid4()) for _ in forks]
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO kagent_fork.experiment (id, user_id, source_session_id, source_user_id, "
            "rewind_before_invocation_id, turns_requested, turns, on_approval, repeats, status, finished_at) "
            "VALUES ($1, $2, $3, $2, $4, '1', 1, 'stop', $5, 'completed', NOW())",
            experiment_id, source.user_id, source.session_id, source.invocation_ids[0], len(forks),
        )  # fmt: skip
        await conn.executemany(
            "INSERT INTO kagent_fork.whatif_job (id, user_id, parent_session_id, parent_user_id, session_id, "
            "rewind_before_invocation_id, agent_ref, dialect, message, status, runner, experiment_id, repeat, "
            "created_at, finished_at) VALUES ($1, $2, $3, $2, $4, $5, 'kagent/k8s-agent', 'v1', '{}', 'completed', "
            "'gone', $6, $7, NOW() + $7::int * interval '1 millisecond', NOW())",
            [(job, source.user_id, source.session_id, fork.session_id, source.invocation_ids[0], experiment_id, i + 1)
             for i, (job, fork) in enumerate(zip(jobs, forks, strict=True))],
        )  # fmt: skip
    return experiment_id, jobs
