"""What every part of the store shares: the connection type, the errors that mean "database gone", the pooled
connection, the named SQL and its loading, COPY text, and the index flags."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

log = logging.getLogger("kagent_fork")
_NAME = re.compile(r"^-- name: (\w+)\s*$", re.M)
_FRAGMENT = re.compile(r"^-- fragment: (\S+)\s*$", re.M)
SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9]+)?")  # fullmatch
TASK_COLUMNS = ["id", "created_at", "updated_at", "data", "session_id", "protocol_version", "user_id"]
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


class PoolBusy(Exception):
    """No pooled connection was free within the bounded wait: the service is busy, nothing was done."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no database connection free within {seconds:g} s")
        self.seconds = seconds


class NestedConnection(RuntimeError):
    """A task asked for a pooled connection while it held one: with every connection so held, each waits for
    another for ever (the deadlock of issue 32). Raised in tests (KAGENT_FORK_POOL_STRICT=1), logged otherwise."""


# The connection the current task holds, shared with the tasks it starts meanwhile: [True] while held.
_held: ContextVar[list[bool] | None] = ContextVar("kagent_fork_held_connection", default=None)


def check_not_holding(what: str) -> None:
    """Refuse (in tests) or report a wait for a connection by a task that holds a pooled one."""
    held = _held.get()
    if held is None or not held[0]:
        return
    message = f"{what} asked for while this task holds a pooled connection"
    if os.environ.get("KAGENT_FORK_POOL_STRICT") == "1":
        raise NestedConnection(message)
    log.error("%s: a burst of these can take every connection and stall the service", message)


async def _acquire(pool: asyncpg.Pool, wait: float | None) -> PoolConnectionProxy[asyncpg.Record]:
    try:
        conn: PoolConnectionProxy[asyncpg.Record] = await pool.acquire(timeout=wait)
    except TimeoutError:
        if wait is None:
            raise
        raise PoolBusy(wait) from None
    return conn


@asynccontextmanager
async def pooled_connection(
    pool: asyncpg.Pool, wait: float | None = None
) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
    """A connection from the pool that answers, waited for at most `wait` seconds (PoolBusy past it). One the
    database dropped while it sat idle fails a first cheap statement: then every pooled connection is expired
    (after a restart they are all dead) and a new one is made, so a request never fails for a connection that
    died before it began. A task holds one pooled connection at a time (check_not_holding)."""
    check_not_holding("a pooled connection")
    conn = await _acquire(pool, wait)
    try:
        await conn.execute("SELECT 1")
    except CONNECTION_ERRORS:
        with contextlib.suppress(asyncpg.InterfaceError):  # one seen closed is back in the pool already
            conn.terminate()
        await pool.release(conn)
        await pool.expire_connections()
        conn = await _acquire(pool, wait)
    held = [True]
    token = _held.set(held)
    try:
        yield conn
    finally:
        held[0] = False
        with contextlib.suppress(ValueError):  # a block left in another context than it was entered in
            _held.reset(token)
        # A connection that died during the block fails its reset here; asyncpg has closed it already, and the
        # block's outcome (a commit, say) stands: it is not turned into an error.
        with contextlib.suppress(*CONNECTION_ERRORS):
            await pool.release(conn)


def sql_dir() -> Path:
    """sql/ beside the package in a checkout, or inside it in an installed wheel."""
    # service/sql in a wheel, sql/ beside service/ in a checkout: the first found walking up from here
    for parent in Path(__file__).resolve().parents[:5]:
        if (parent / "sql" / "queries" / "fragments.sql").is_file():
            return parent / "sql"
    raise FileNotFoundError("kagent-fork's sql/ directory is missing from the installation")


def load_queries(path: Path, schema: str, max_fork_events: int = 0) -> dict[str, str]:
    """The named queries of one .sql file, or of a folder of them (its fragments.sql first, the fragments
    every file may use)."""
    limit = str(max_fork_events + 1) if max_fork_events else "ALL"
    if path.is_dir():
        files = [path / "fragments.sql", *sorted(p for p in path.glob("*.sql") if p.name != "fragments.sql")]
        text = "\n\n".join(f.read_text() for f in files)
    else:
        text = path.read_text()
    text = text.replace("{fork_events_limit}", limit)
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


# Before any row: the lower bound of a range query that has none.
BEGINNING = datetime.min.replace(tzinfo=UTC)


# What casting a row's text to JSONB raises for a row that is not JSON (invalid text, \u0000, nesting too
# deep): the errors the SQL try_jsonb catches, per row, in an exception block.
NOT_JSON_ERRORS: tuple[type[BaseException], ...] = (asyncpg.DataError, asyncpg.ProgramLimitExceededError)


async def fetch_parsed(conn: Connection, cast: str, tolerant: str, *args: object) -> list[asyncpg.Record]:
    """The rows of `cast`, a query that casts each row's text to JSONB as it is, else, when a row is not
    JSON, those of `tolerant`, the same query with try_jsonb. try_jsonb's exception block is a
    subtransaction per row (10 % of a pass over a session's events); one savepoint around the whole
    statement costs two round trips. Same answers: `cast` either gives them or fails. Needs a transaction."""
    try:
        async with conn.transaction():  # a savepoint: the failed statement leaves the caller's transaction usable
            return await conn.fetch(cast, *args)
    except NOT_JSON_ERRORS:
        return await conn.fetch(tolerant, *args)


def row_count(status: str) -> int:
    """The row count of a command tag such as 'INSERT 0 12' or 'UPDATE 3'."""
    return int(status.rsplit(" ", 1)[-1])


class Queries:
    """The named SQL of sql/queries/*.sql, loaded once, and which indexes the store may count on; shared by
    every part of the store."""

    def __init__(self, schema: str, directory: Path | None = None, *, max_fork_events: int = 0) -> None:
        self.schema = schema
        self.q = load_queries(directory or sql_dir() / "queries", schema, max_fork_events)

    def __getitem__(self, name: str) -> str:
        return self.q[name]
