"""Typed functions over the SQL in sql/queries.sql: the only module that sees asyncpg rows.

Every function takes the connection first, so the caller owns the transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias

import asyncpg
import msgspec
from asyncpg.pool import PoolConnectionProxy

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.M)
_FRAGMENT = re.compile(r"^-- fragment: (\S+)\s*$", re.M)
_SNAPSHOT_ID = re.compile(r"^[0-9A-F]+-[0-9A-F]+(-[0-9]+)?$")
_TASK_COLUMNS = ["id", "created_at", "updated_at", "data", "session_id", "protocol_version", "user_id"]
# A task row written as COPY text while it is made (copy_task_text): data near the end, and after it
# only what is known once data is.
TASK_TEXT_COLUMNS = ["id", "created_at", "updated_at", "session_id", "user_id", "data", "protocol_version"]

# Batches bound the memory a fork holds: tasks are parsed and written a few at a time.
TASK_FETCH_BATCH = 64
TASK_WRITE_BATCH_BYTES = 4 * 1024 * 1024

# A plain connection (CLI, start-up) or one lent by the pool (HTTP requests).
Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"


# Errors that mean "the database is unreachable or dropped our connection", never "the request is wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.CrashShutdownError,
    # A connection that got the server's FATAL while idle in the pool (shutdown, failover,
    # idle_session_timeout), before its socket's end is read: asyncpg's protocol is stuck and any
    # statement fails with this instead of a connection error.
    asyncpg.exceptions.InternalClientError,
)


@asynccontextmanager
async def pooled_connection(pool: asyncpg.Pool) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
    """A connection from the pool that answers. One the database dropped while it sat idle fails a first
    cheap statement: then every pooled connection is expired (after a restart they are all dead) and a
    new one is made, so a request never fails for a connection that died before it began."""
    conn: PoolConnectionProxy[asyncpg.Record] = await pool.acquire()
    try:
        await conn.execute("SELECT 1")
    except CONNECTION_ERRORS:
        with contextlib.suppress(asyncpg.InterfaceError):  # one seen closed is back in the pool already
            conn.terminate()
        await pool.release(conn)
        await pool.expire_connections()
        conn = await pool.acquire()
    try:
        yield conn
    finally:
        await pool.release(conn)


def sql_dir() -> Path:
    """sql/ beside the package in a checkout, or inside it in an installed wheel."""
    # service/sql in a wheel, sql/ beside service/ in a checkout: the first found walking up from here
    for parent in Path(__file__).resolve().parents[:4]:
        if (parent / "sql" / "queries.sql").is_file():
            return parent / "sql"
    raise FileNotFoundError("kagent-fork's sql/ directory is missing from the installation")


def load_queries(path: Path, schema: str, max_fork_events: int = 0) -> dict[str, str]:
    limit = str(max_fork_events + 1) if max_fork_events else "ALL"
    text = path.read_text().replace("{fork_events_limit}", limit)
    names = list(_NAME.finditer(text))
    # Fragments (a predicate several queries share) stand before the first query; each is its SQL
    # without its comment lines.
    header = text[: names[0].start()] if names else text
    fragments = list(_FRAGMENT.finditer(header))
    for i, match in enumerate(fragments):
        end = fragments[i + 1].start() if i + 1 < len(fragments) else len(header)
        body = header[match.end() : end]
        sql = "\n".join(line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("--"))
        text = text.replace("{" + match.group(1) + "}", sql.strip())
    names = list(_NAME.finditer(text))
    queries: dict[str, str] = {}
    for i, match in enumerate(names):
        end = names[i + 1].start() if i + 1 < len(names) else len(text)
        queries[match.group(1)] = text[match.end() : end].strip().replace("{schema}", schema)
    return queries


def copy_text(value: str | bytes | datetime | None) -> bytes:
    """One field in COPY's text format: \\N for NULL, else the UTF-8 text with backslash, newline,
    carriage return and tab escaped (a part of a field escapes the same way)."""
    if value is None:
        return b"\\N"
    if isinstance(value, datetime):
        value = value.isoformat()
    raw = value.encode() if isinstance(value, str) else value
    return raw.replace(b"\\", b"\\\\").replace(b"\n", b"\\n").replace(b"\r", b"\\r").replace(b"\t", b"\\t")


def copy_text_fields(*values: str | datetime | None) -> bytes:
    """Fields in COPY's text format, each followed by the tab that ends it."""
    return b"".join(copy_text(v) + b"\t" for v in values)


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
class TaskRow:
    id: str
    created_at: datetime
    protocol_version: str | None
    data: str


@dataclass(frozen=True, kw_only=True)
class RecentTasks:
    """Of the session's newest tasks, those that mention a text (oldest first), and the oldest's time."""

    candidates: list[TaskRow]
    oldest: datetime | None


@dataclass(frozen=True, kw_only=True)
class Share:
    session_id: str
    owner: str
    read_only: bool


@dataclass(frozen=True, kw_only=True)
class Lineage:
    session_id: str
    user_id: str
    parent_session_id: str
    parent_user_id: str
    root_session_id: str
    root_user_id: str
    depth: int
    rewind_before_invocation_id: str | None
    boundary_found: bool
    events_copied: int
    tasks_copied: int
    messages_copied: int
    task_layout: str
    warnings: str  # a JSON array, as stored
    summary: str | None  # the branch summary as stored (JSON), None when the fork left nothing behind
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class Rewind:
    id: str
    session_id: str
    user_id: str
    rewind_before_invocation_id: str
    deleted_at: datetime
    events_removed: int
    tasks_removed: int
    replaced_task_id: str | None
    replacement_task_id: str | None
    requested_by: str
    summary: str | None  # the branch summary as stored (JSON), None when the rewind hid no event
    created_at: datetime
    undone_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class EventTurn:
    invocation_id: str
    started_at: datetime
    event_count: int
    user_text: str | None


@dataclass(frozen=True, kw_only=True)
class WhatifJob:
    id: str
    user_id: str
    parent_session_id: str
    parent_user_id: str
    session_id: str
    rewind_before_invocation_id: str
    agent_ref: str
    dialect: str
    message: str  # the A2A message sent, v1.0 JSON
    status: str
    task_id: str | None
    error: str | None
    result: str | None  # JSON
    runner: str
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class EventTally:
    """What a stretch of a session's events holds (events_tally)."""

    events: int
    turns: int
    total_tokens: int
    first_at: datetime | None
    last_at: datetime | None
    tool_calls: dict[str, int]
    first_user_text: str | None
    last_agent_text: str | None


@dataclass(frozen=True, kw_only=True)
class TranscriptEvent:
    """One event as a transcript reads it (transcript_events): messages is a JSON array, as PostgreSQL
    made it; doc_kind the JSON type of the row (None: not JSON)."""

    id: str
    created_at: datetime
    invocation_id: str | None
    turn_key: str
    doc_kind: str | None
    author: str | None
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    messages: str


@dataclass(frozen=True, kw_only=True)
class EventStats:
    events: int
    bytes: int
    text_chars: int


@dataclass(frozen=True, kw_only=True)
class IndexUse:
    """Which indexes of the optional invocation index (service/kagent/invocation_index.py) are valid, so that
    the store may choose a query that needs one. Queries that are the same either way need no flag:
    PostgreSQL's planner uses a valid index and ignores an invalid one by itself."""

    event_invocation: bool = False
    event_time: bool = False
    task_invocations: bool = False


@dataclass(frozen=True, kw_only=True)
class IndexRow:
    name: str
    valid: bool
    comment: str | None
    bytes: int


@dataclass(frozen=True, kw_only=True)
class NewTask:
    id: str
    created_at: datetime
    data: str
    session_id: str
    protocol_version: str | None
    user_id: str
    updated_at: datetime


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


def _task(row: Any) -> TaskRow:
    return TaskRow(
        id=row["id"], created_at=row["created_at"], protocol_version=row["protocol_version"], data=row["data"]
    )


# Before any row: the lower bound of a range query that has none.
_BEGINNING = datetime.min.replace(tzinfo=UTC)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _count(status: str) -> int:
    """The row count of a command tag such as 'INSERT 0 12' or 'UPDATE 3'."""
    return int(status.rsplit(" ", 1)[-1])


class Store:
    """The service's queries, loaded once; a missing query name fails here, at start-up."""

    def __init__(self, schema: str, directory: Path | None = None, *, max_fork_events: int = 0) -> None:
        self.schema = schema
        self.q = load_queries((directory or sql_dir()) / "queries.sql", schema, max_fork_events)
        # Every query this module runs is named as self.q["..."]; a name missing from the file fails here.
        used = set(re.findall(r'self\.q\["(\w+)"\]', Path(__file__).read_text()))
        missing = used - self.q.keys()
        if missing:
            raise LookupError(f"sql/queries.sql lacks the queries {sorted(missing)}")
        self.index_use = IndexUse()

    # --- kagent's schema ---------------------------------------------------------------------------

    async def kagent_columns(self, conn: Connection) -> dict[str, set[str]]:
        tables: dict[str, set[str]] = {}
        for row in await conn.fetch(self.q["kagent_tables"]):
            tables.setdefault(row["table_name"], set()).add(row["column_name"])
        return tables

    async def schema_migrations(self, conn: Connection) -> tuple[int, bool] | None:
        row = await conn.fetchrow(self.q["schema_migrations"])
        return None if row is None else (int(row["version"]), bool(row["dirty"]))

    # --- identity and sessions ---------------------------------------------------------------------

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

    async def session_status(self, conn: Connection, session_id: str, owner: str) -> tuple[str | None, bool] | None:
        row = await conn.fetchrow(self.q["session_status"], session_id, owner)
        return None if row is None else (row["name"], bool(row["deleted"]))

    async def has_external_state(self, conn: Connection, session_id: str, owner: str) -> bool:
        return bool(await conn.fetchval(self.q["external_state"], session_id, owner))

    async def has_events(self, conn: Connection, session_id: str, owner: str) -> bool:
        return bool(await conn.fetchval(self.q["has_events"], session_id, owner))

    async def sessions_of(self, conn: Connection, user_id: str, agent_id: str | None, limit: int) -> list[SessionRow]:
        return [_session(r) for r in await conn.fetch(self.q["explorer_sessions"], user_id, agent_id, limit)]

    async def insert_session(
        self, conn: Connection, *, session_id: str, user_id: str, name: str, agent_id: str | None, source: str
    ) -> SessionRow:
        row = await conn.fetchrow(self.q["insert_session"], session_id, user_id, name, agent_id, source)
        return _session(row)

    # --- events ------------------------------------------------------------------------------------

    async def boundary_event_at(
        self, conn: Connection, session_id: str, owner: str, invocation_id: str, *, prefilter: bool
    ) -> datetime | None:
        value: datetime | None = await conn.fetchval(
            self.q["boundary_event"], session_id, owner, invocation_id, prefilter
        )
        return value

    async def event_tally(
        self,
        conn: Connection,
        session_id: str,
        owner: str,
        since: datetime,
        until: datetime | None,
        *,
        user_text_chars: int,
        agent_text_chars: int,
    ) -> EventTally:
        row = await conn.fetchrow(
            self.q["events_tally"], session_id, owner, since, until, user_text_chars, agent_text_chars
        )
        assert row is not None  # an aggregate always answers one row
        return EventTally(
            events=int(row["events"]), turns=int(row["turns"]), total_tokens=int(row["total_tokens"]),
            first_at=row["first_at"], last_at=row["last_at"],
            tool_calls=msgspec.json.decode(row["tool_calls"], type=dict[str, int]),
            first_user_text=row["first_user_text"], last_agent_text=row["last_agent_text"],
        )  # fmt: skip

    async def stream_transcript_events(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None, *, cut_chars: int
    ) -> AsyncIterator[TranscriptEvent]:
        """The events in transcript order through a server-side cursor (needs a transaction)."""
        query = self.q["transcript_events"]
        async for r in conn.cursor(query, session_id, owner, before, cut_chars, prefetch=TASK_FETCH_BATCH):
            yield TranscriptEvent(
                id=r["id"], created_at=r["created_at"], invocation_id=r["invocation_id"], turn_key=r["turn_key"],
                doc_kind=r["doc_kind"], author=r["author"], prompt_tokens=int(r["prompt_tokens"]),
                completion_tokens=int(r["completion_tokens"]), total_tokens=int(r["total_tokens"]),
                messages=r["messages"],
            )  # fmt: skip

    async def event_stats(self, conn: Connection, session_id: str, owner: str, before: datetime | None) -> EventStats:
        row = await conn.fetchrow(self.q["count_events_before"], session_id, owner, before)
        assert row is not None  # an aggregate always answers one row
        return EventStats(events=int(row["events"]), bytes=int(row["bytes"]), text_chars=int(row["text_chars"]))

    async def copy_kept(
        self,
        conn: Connection,
        table: Literal["event", "task"],
        *,
        session_id: str,
        owner: str,
        before: datetime | None,
        new_session_id: str,
        new_user_id: str,
    ) -> int:
        """Copy the kept events, or the kept tasks with their ids replaced, inside PostgreSQL
        (copy_events_before, copy_tasks_before); how many rows were copied."""
        query = self.q["copy_events_before" if table == "event" else "copy_tasks_before"]
        return _count(await conn.execute(query, session_id, owner, before, new_user_id, new_session_id))

    async def first_user_event_text(self, conn: Connection, session_id: str, owner: str) -> str | None:
        parts = await conn.fetchval(self.q["first_user_event"], session_id, owner)
        if parts is None:
            return None
        decoded = msgspec.json.decode(parts)
        if not isinstance(decoded, list):
            return None
        texts = [p["text"] for p in decoded if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(texts) or None

    # --- tasks -------------------------------------------------------------------------------------

    async def tasks_mentioning(
        self, conn: Connection, session_id: str, owner: str, invocation_id: str, *, prefilter: bool
    ) -> list[TaskRow]:
        """The candidates for the tasks that carry the invocation, oldest first (the caller confirms
        in the parsed JSON): by the invocation index when it is valid, else every task that mentions
        the id (each decompressed)."""
        if self.index_use.task_invocations:
            return await self.tasks_carrying_any(conn, session_id, owner, [invocation_id])
        else:
            rows = await conn.fetch(self.q["tasks_mentioning"], session_id, owner, invocation_id, prefilter)
        return [_task(r) for r in rows]

    async def tasks_mentioning_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None, text: str
    ) -> list[TaskRow]:
        rows = await conn.fetch(self.q["tasks_mentioning_before"], session_id, owner, before, text)
        return [_task(r) for r in rows]

    async def recent_tasks_mentioning(
        self, conn: Connection, session_id: str, owner: str, text: str, *, prefilter: bool
    ) -> RecentTasks:
        rows = await conn.fetch(self.q["recent_tasks_mentioning"], session_id, owner, text, prefilter)
        return RecentTasks(candidates=[_task(r) for r in rows], oldest=rows[0]["oldest"] if rows else None)

    async def first_task(self, conn: Connection, session_id: str, owner: str) -> TaskRow | None:
        row = await conn.fetchrow(self.q["first_task"], session_id, owner)
        return None if row is None else _task(row)

    async def last_task_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None
    ) -> TaskRow | None:
        row = await conn.fetchrow(self.q["last_task_before"], session_id, owner, before)
        return None if row is None else _task(row)

    async def count_tasks(self, conn: Connection, session_id: str, owner: str) -> int:
        value: int = await conn.fetchval(self.q["count_tasks"], session_id, owner)
        return value

    async def stream_tasks_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None
    ) -> AsyncIterator[TaskRow]:
        """The tasks in created_at order through a server-side cursor (needs a transaction)."""
        async for row in self._stream(conn, "tasks_before", session_id, owner, before):
            yield row

    async def stream_tasks_from(
        self, conn: Connection, session_id: str, owner: str, start: datetime
    ) -> AsyncIterator[TaskRow]:
        """The tasks created at or after `start`, oldest first, through a server-side cursor."""
        async for row in self._stream(conn, "tasks_from", session_id, owner, start):
            yield row

    async def _stream(self, conn: Connection, query: str, *args: object) -> AsyncIterator[TaskRow]:
        async for row in conn.cursor(self.q[query], *args, prefetch=TASK_FETCH_BATCH):
            yield _task(row)

    async def task_versions_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None
    ) -> dict[str | None, int]:
        """How many kept tasks there are of each protocol_version."""
        rows = await conn.fetch(self.q["task_versions_before"], session_id, owner, before)
        return {r["protocol_version"]: int(r["tasks"]) for r in rows}

    async def now(self, conn: Connection) -> datetime:
        value: datetime = await conn.fetchval(self.q["now"])
        return value

    async def export_snapshot(self, conn: Connection) -> str:
        value: str = await conn.fetchval(self.q["export_snapshot"])
        return value

    async def use_snapshot(self, conn: Connection, snapshot: str) -> None:
        """Make this (fresh REPEATABLE READ) transaction see the exported snapshot. SET takes no bind
        parameter, so the id is checked against PostgreSQL's format before it is written into SQL."""
        if not _SNAPSHOT_ID.match(snapshot):
            raise ValueError(f"not a snapshot id: {snapshot!r}")
        await conn.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")

    async def stream_new_tasks(self, conn: Connection, tasks: AsyncIterator[NewTask]) -> None:
        """Write new task rows with one COPY fed while they are made (bounded memory)."""

        async def records() -> AsyncIterator[tuple[object, ...]]:
            async for t in tasks:
                yield (t.id, t.created_at, t.updated_at, t.data, t.session_id, t.protocol_version, t.user_id)

        await conn.copy_records_to_table("task", records=records(), columns=_TASK_COLUMNS)

    async def copy_task_text(self, conn: Connection, text: AsyncIterator[bytes]) -> None:
        """Write task rows given as COPY text in TASK_TEXT_COLUMNS, read from `text` while it is made
        (nothing when it gives nothing)."""
        await conn.copy_to_table("task", source=text, columns=TASK_TEXT_COLUMNS, format="text")

    async def insert_tasks(self, conn: Connection, tasks: list[NewTask]) -> None:
        """Write new task rows with COPY; session.updated_at is the caller's to set."""
        if not tasks:
            return
        await conn.copy_records_to_table(
            "task",
            records=[
                (t.id, t.created_at, t.updated_at, t.data, t.session_id, t.protocol_version, t.user_id) for t in tasks
            ],
            columns=_TASK_COLUMNS,
        )

    # --- lineage -----------------------------------------------------------------------------------

    async def lineage_of(self, conn: Connection, session_id: str, user_id: str) -> Lineage | None:
        row = await conn.fetchrow(self.q["lineage_of"], session_id, user_id)
        return None if row is None else Lineage(**dict(row))

    async def insert_lineage(self, conn: Connection, record: Lineage, *, created_by: str) -> None:
        await conn.execute(
            self.q["insert_lineage"],
            record.session_id, record.user_id, record.parent_session_id, record.parent_user_id,
            record.root_session_id, record.root_user_id, record.depth, record.rewind_before_invocation_id,
            record.boundary_found, record.events_copied, record.tasks_copied, record.messages_copied,
            record.task_layout, record.warnings, record.summary, created_by,
        )  # fmt: skip

    # --- idempotency -------------------------------------------------------------------------------

    async def idempotent_answer(
        self, conn: Connection, user_id: str, key: str, ttl_seconds: int
    ) -> tuple[str, str] | None:
        """(request hash, stored answer as JSON text) of a fresh record for this caller's key."""
        row = await conn.fetchrow(self.q["idempotency_get"], user_id, key, float(ttl_seconds))
        return None if row is None else (row["request_hash"], row["response"])

    async def remember_answer(
        self,
        conn: Connection,
        *,
        user_id: str,
        key: str,
        request_hash: str,
        session_id: str,
        answer: str,
        ttl_seconds: int,
    ) -> None:
        await conn.execute(self.q["idempotency_purge"], float(ttl_seconds))
        await conn.execute(self.q["idempotency_put"], user_id, key, request_hash, session_id, answer)

    @contextlib.asynccontextmanager
    async def key_lock(self, conn: Connection, scope: str, key: str) -> AsyncIterator[None]:
        """A session-level advisory lock on (scope, key), held for the block. A connection that died
        took its locks with it, and the pool's reset unlocks whatever a cancelled block left."""
        name = f"{scope}\n{key}"
        await conn.execute(self.q["advisory_lock"], name)
        try:
            yield
        finally:
            if not conn.is_closed():
                await conn.execute(self.q["advisory_unlock"], name)

    async def fork_rate_wait(self, conn: Connection, user_id: str, rate: int) -> float | None:
        """None if the user made fewer than `rate` forks in the last minute, else the seconds to wait."""
        wait = await conn.fetchval(self.q["fork_rate_wait"], user_id, rate)
        return None if wait is None else max(float(wait), 0.0)

    async def forks_of(self, conn: Connection, session_id: str, user_id: str) -> list[Lineage]:
        return [Lineage(**dict(r)) for r in await conn.fetch(self.q["forks_of"], session_id, user_id)]

    # --- rewinds -----------------------------------------------------------------------------------

    async def hide_from(
        self,
        conn: Connection,
        session_id: str,
        owner: str,
        *,
        events_from: datetime,
        tasks_from: datetime,
        stamp: datetime,
    ) -> tuple[int, int]:
        """Soft-delete events and tasks from the given times with one stamp; (events, tasks) hidden."""
        events = _count(await conn.execute(self.q["hide_events_from"], session_id, owner, events_from, stamp))
        tasks = _count(await conn.execute(self.q["hide_tasks_from"], session_id, owner, tasks_from, stamp))
        return events, tasks

    async def touch_session(self, conn: Connection, session_id: str, owner: str) -> SessionRow:
        row = await conn.fetchrow(self.q["touch_session"], session_id, owner)
        assert row is not None  # the caller holds the session's row lock
        return _session(row)

    async def rewind_stamp(self, conn: Connection, session_id: str, owner: str) -> datetime:
        """The stamp of a rewind of this (locked) session: later than the session's earlier ones."""
        value: datetime = await conn.fetchval(self.q["rewind_stamp"], session_id, owner)
        return value

    async def insert_rewind(self, conn: Connection, r: Rewind) -> datetime:
        created: datetime = await conn.fetchval(
            self.q["insert_rewind"], r.id, r.session_id, r.user_id, r.rewind_before_invocation_id, r.deleted_at,
            r.events_removed, r.tasks_removed, r.replaced_task_id, r.replacement_task_id, r.requested_by,
            r.summary,
        )  # fmt: skip
        return created

    async def get_rewind(self, conn: Connection, rewind_id: str, session_id: str, owner: str) -> Rewind | None:
        row = await conn.fetchrow(self.q["get_rewind"], rewind_id, session_id, owner)
        return None if row is None else Rewind(**dict(row))

    async def list_rewinds(self, conn: Connection, session_id: str, owner: str) -> list[Rewind]:
        return [Rewind(**dict(r)) for r in await conn.fetch(self.q["list_rewinds"], session_id, owner)]

    async def later_rewind_pending(self, conn: Connection, r: Rewind) -> bool:
        return bool(await conn.fetchval(self.q["later_rewind_pending"], r.session_id, r.user_id, r.created_at, r.id))

    async def activity_since(self, conn: Connection, r: Rewind) -> bool:
        return bool(
            await conn.fetchval(self.q["activity_since"], r.session_id, r.user_id, r.deleted_at, r.replacement_task_id)
        )

    async def restore(self, conn: Connection, r: Rewind) -> tuple[int, int]:
        events = _count(await conn.execute(self.q["restore_events"], r.session_id, r.user_id, r.deleted_at))
        tasks = _count(await conn.execute(self.q["restore_tasks"], r.session_id, r.user_id, r.deleted_at))
        if r.replacement_task_id is not None:
            await conn.execute(self.q["hide_task"], r.replacement_task_id)
        return events, tasks

    async def mark_undone(self, conn: Connection, rewind_id: str) -> datetime:
        value: datetime = await conn.fetchval(self.q["mark_undone"], rewind_id)
        return value

    # --- what-if jobs ------------------------------------------------------------------------------

    async def insert_whatif_job(self, conn: Connection, job: WhatifJob) -> datetime:
        created: datetime = await conn.fetchval(
            self.q["insert_whatif_job"], job.id, job.user_id, job.parent_session_id, job.parent_user_id,
            job.session_id, job.rewind_before_invocation_id, job.agent_ref, job.dialect, job.message, job.runner,
        )  # fmt: skip
        return created

    async def whatif_job(self, conn: Connection, job_id: str, user_id: str) -> WhatifJob | None:
        row = await conn.fetchrow(self.q["get_whatif_job"], job_id, user_id)
        return None if row is None else WhatifJob(**dict(row))

    async def whatif_jobs(self, conn: Connection, session_id: str, owner: str, user_id: str) -> list[WhatifJob]:
        rows = await conn.fetch(self.q["list_whatif_jobs"], session_id, owner, user_id)
        return [WhatifJob(**dict(r)) for r in rows]

    async def whatif_task(self, conn: Connection, job_id: str, task_id: str) -> None:
        await conn.execute(self.q["whatif_task"], job_id, task_id)

    async def whatif_heartbeat(self, conn: Connection, job_id: str, runner: str) -> bool:
        """Whether the job is still this runner's and running."""
        return await conn.fetchval(self.q["whatif_heartbeat"], job_id, runner) is not None

    async def whatif_finish(
        self, conn: Connection, job_id: str, status: str, *, error: str | None, result: str | None
    ) -> datetime | None:
        """The job's end time, or None when it had already ended."""
        value: datetime | None = await conn.fetchval(self.q["whatif_finish"], job_id, status, error, result)
        return value

    async def whatif_claim_stale(self, conn: Connection, runner: str, stale_seconds: float) -> list[WhatifJob]:
        rows = await conn.fetch(self.q["whatif_claim_stale"], runner, stale_seconds)
        return [WhatifJob(**dict(r)) for r in rows]

    async def custom_plans(self, conn: Connection) -> None:
        """Plan every statement of this transaction for its own parameters, and never JIT-compile one: a
        prepared statement's generic plan (from its sixth run) assumes a session of a few rows, and for
        event_turns_of reads all of it; a custom plan's estimate for a large session's rows can pass
        jit_above_cost, and compiling then took 8 ms of a 10 ms lookup of a listing page's tasks."""
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL jit = off")

    async def event_walk(
        self, conn: Connection, session_id: str, owner: str, after: tuple[datetime, str] | None, count: int
    ) -> list[tuple[str, datetime, str | None]]:
        """The next (up to) `count` events after `after` (created_at, id) in that order: (id, created_at,
        invocation id)."""
        at, event_id = after if after is not None else (_BEGINNING, "")
        rows = await conn.fetch(self.q["event_walk"], session_id, owner, at, event_id, count)
        return [(r["id"], r["created_at"], r["invocation_id"]) for r in rows]

    async def tasks_carrying_any(
        self,
        conn: Connection,
        session_id: str,
        owner: str,
        ids: list[str],
        besides: tuple[datetime | None, datetime | None] | None = None,
    ) -> list[TaskRow]:
        """Candidates for the tasks carrying any of `ids` (the invocation index), oldest first; `besides`:
        but those created in [start, end) (None: no bound), read already."""
        start, end = (besides[0] or _BEGINNING, besides[1]) if besides is not None else (None, None)
        rows = await conn.fetch(self.q["tasks_carrying_any"], session_id, owner, ids, start, end)
        return [_task(r) for r in rows]

    async def tasks_between(
        self, conn: Connection, session_id: str, owner: str, start: datetime | None, end: datetime | None
    ) -> list[TaskRow]:
        """The live tasks created in [start, end), oldest first (None: no bound)."""
        since = start if start is not None else _BEGINNING
        return [_task(r) for r in await conn.fetch(self.q["tasks_between"], session_id, owner, since, end)]

    # --- the invocation index ---------------------------------------------------------------------

    async def index_rows(self, conn: Connection, names: list[str]) -> list[IndexRow]:
        rows = await conn.fetch(self.q["index_states"], names)
        return [IndexRow(name=r["name"], valid=r["valid"], comment=r["comment"], bytes=int(r["bytes"])) for r in rows]

    async def ddl(self, conn: Connection, statement: str) -> None:
        await conn.execute(statement)

    async def drop_index(self, conn: Connection, name: str) -> None:
        # DDL takes no bind parameter: the name is the service's schema (validated at start-up) and a
        # constant of invocation_index.py.
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")

    async def comment_index(self, conn: Connection, name: str, comment: str) -> None:
        await conn.execute(f"COMMENT ON INDEX {name} IS {_literal(comment)}")

    async def analyze_kagent_tables(self, conn: Connection) -> None:
        await conn.execute("ANALYZE event, task")

    # --- turns -------------------------------------------------------------------------------------

    async def event_turns(
        self, conn: Connection, session_id: str, owner: str, of: list[str] | None = None
    ) -> list[EventTurn]:
        """The turns the events show, in order; `of`: only these invocations (by the invocation index)."""
        if of is None:
            rows = await conn.fetch(self.q["event_turns"], session_id, owner)
        else:
            rows = await conn.fetch(self.q["event_turns_of"], session_id, owner, of)
        return [
            EventTurn(
                invocation_id=r["invocation_id"], started_at=r["started_at"], event_count=int(r["event_count"]),
                user_text=r["user_text"],
            )
            for r in rows
        ]  # fmt: skip
