"""A test stand-in for kagent's controller (release/v0.10.x): the HTTP endpoints kagent's agent runtimes call,
answered as kagent's Go handlers answer them, on kagent's tables in the test database.

Written from kagent's release/v0.10.x (go/core/internal/httpserver/{handlers,auth,middleware.go},
go/core/internal/database/{client_postgres.go,queries}), not copied from it:

- Identity (``UnsecureAuthenticator``, kagent's default mode): the user is the ``user_id`` query parameter,
  else the ``X-User-Id`` header, else ``admin@kagent.dev``; the calling agent is ``X-Agent-Name``.
- ``X-Share-Token`` (``shareTokenMiddleware``): an unknown token is 403; a read-only share refuses any
  non-GET request under ``/api/sessions/`` (403); a visit is recorded in ``session_share_access``; a session
  route naming the shared session acts as the share's owner.
- ``GET /api/sessions/{id}``: the session (``GetSession``) and its live events (``ListEventsForSession*``:
  ``order=asc`` oldest first, else newest first; ``after`` RFC 3339; ``limit`` > 0), as
  ``{data: {session, events}}``, ``read_only`` for a read-only share.
- ``POST /api/sessions``: ``agent_ref`` required and must name a live ``agent`` row (400 otherwise); the
  row is upserted (``UpsertSession``) and answered 201. (The sandbox-agent single-session rule is left out:
  no sandbox agents here.)
- ``POST /api/sessions/{id}/events``: ``{id, data}``; 404 without the session, 403 when the session
  belongs to another agent than ``X-Agent-Name``; ``InsertEvent`` (which lifts ``session.updated_at``); 201.
- ``POST /api/tasks``: a legacy (A2A 0.3) task (no ``A2A-Version`` header, or ``0.3``), upserted by
  ``UpsertTask`` with ``protocol_version`` NULL and the caller as owner (409 when the id is another user's
  or soft-deleted); ``GET /api/tasks/{id}``: ``GetTask`` with the NULL-owner rule, 404 otherwise. kagent
  stores the task re-encoded by trpc-a2a-go after a round trip through a2a-go's v1 types; here it is
  re-encoded by a2a-sdk's 0.3 model (same keys and values, key order may differ).
- ``/api/langgraph/checkpoints...`` (handlers/checkpoints.go, langgraph.sql) and ``/api/crewai/memory`` /
  ``/api/crewai/flows/state`` (handlers/crewai.go, crewai.sql: upserts under the caller, the payload's map stored
  as Go marshals it; the memory's search by ``q``, its hard delete; a flow's newest state by ``created_at``).
- ``/api/a2a/{namespace}/{name}/...``: passed through to the agent registered under that name, with the
  caller's ``X-User-Id`` (the share owner's with a share token), as ``A2ARequestHandler`` forwards it.

Everything else answers 404. Nothing here is used by the service: it exists so that kagent's real agent
runtimes can run against the database the service works on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
from a2a.compat.v0_3 import types as v03
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.live_server import live_server

DEFAULT_USER = "admin@kagent.dev"

SESSION_COLUMNS = "id, user_id, name, created_at, updated_at, deleted_at, agent_id, source"
EVENT_COLUMNS = "id, user_id, session_id, created_at, updated_at, deleted_at, data"
TASK_OWNED = """task.deleted_at IS NULL
  AND (task.user_id = $2 OR (task.user_id IS NULL AND $2 = (
      SELECT MIN(s.user_id) FROM session s
      WHERE s.id = task.session_id AND s.created_at <= task.created_at
      HAVING COUNT(DISTINCT s.user_id) = 1)))"""


def python_identifier(ref: str) -> str:
    """kagent's ConvertToPythonIdentifier: `kagent/adk-agent` is `kagent__NS__adk_agent`."""
    return ref.replace("-", "_").replace("/", "__NS__")


def go_time(value: datetime | None) -> str | None:
    """A timestamp as Go's encoding/json writes a time.Time: RFC 3339 with nanoseconds, zeros trimmed."""
    if value is None:
        return None
    text = value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{value.microsecond:06d}".rstrip("0")
    return f"{text}{'.' + fraction if fraction else ''}Z"


def go_json(value: Any) -> str:
    """A decoded JSON value as Go's encoding/json marshals the map[string]any a handler decoded it into: object
    keys sorted, no spaces, numbers as float64 (an integral one without a fraction), `<`, `>`, `&`, U+2028 and
    U+2029 escaped, other characters as they are; null for a missing map."""

    def plain(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
            return int(v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    text = json.dumps(plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def _omit_none(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if not (k in keys and v is None)}


def session_json(row: Any) -> dict[str, Any]:
    """database.Session: name, deleted_at, agent_id and source are omitempty."""
    return _omit_none(
        {
            "id": row["id"],
            "name": row["name"],
            "user_id": row["user_id"],
            "created_at": go_time(row["created_at"]),
            "updated_at": go_time(row["updated_at"]),
            "deleted_at": go_time(row["deleted_at"]),
            "agent_id": row["agent_id"],
            "source": row["source"],
        },
        "name",
        "deleted_at",
        "agent_id",
        "source",
    )


def event_json(row: Any) -> dict[str, Any]:
    return _omit_none(
        {
            "id": row["id"],
            "session_id": row["session_id"] or "",
            "user_id": row["user_id"],
            "created_at": go_time(row["created_at"]),
            "updated_at": go_time(row["updated_at"]),
            "deleted_at": go_time(row["deleted_at"]),
            "data": row["data"],
        },
        "deleted_at",
    )


def checkpoint_tuple(row: Any, writes: list[Any]) -> dict[str, Any]:
    """KAgentCheckpointTuple: the writes always present, their task id the last write's (as the handler)."""
    return {
        "thread_id": row["thread_id"],
        "checkpoint_ns": row["checkpoint_ns"],
        "checkpoint_id": row["checkpoint_id"],
        "parent_checkpoint_id": row["parent_checkpoint_id"],
        "checkpoint": row["checkpoint"],
        "metadata": row["metadata"],
        "type_": row["checkpoint_type"],
        "writes": {
            "thread_id": row["thread_id"],
            "checkpoint_ns": row["checkpoint_ns"],
            "checkpoint_id": row["checkpoint_id"],
            "task_id": writes[-1]["task_id"] if writes else "",
            "writes": [
                {"idx": w["write_idx"], "channel": w["channel"], "type_": w["value_type"], "value": w["value"]}
                for w in writes
            ],
        },
    }


def ok(data: Any, message: str, status: int = 200) -> JSONResponse:
    return JSONResponse({"error": False, "data": data, "message": message}, status_code=status)


def fail(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


@dataclass
class Calls:
    """What the runtimes asked the controller, in order: (method, path, user), for the tests' assertions."""

    seen: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Share:
    session_id: str
    owner: str
    read_only: bool


class Controller:
    """The stand-in's handlers, on one asyncpg pool (made in the app's lifespan, on the server's loop)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.agents: dict[str, str] = {}  # "namespace/name" -> the runtime's base URL
        self.calls = Calls()
        self._pool: asyncpg.Pool | None = None
        self._http: httpx.AsyncClient | None = None

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "the controller stand-in is not running"
        return self._pool

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=8)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(120, connect=5))
        try:
            yield
        finally:
            await self._http.aclose()
            await self._pool.close()

    # ----------------------------------------------------------------------------------------------
    # identity

    @staticmethod
    def caller(request: Request) -> str:
        return request.query_params.get("user_id") or request.headers.get("x-user-id") or DEFAULT_USER

    async def share(self, request: Request) -> Share | JSONResponse | PlainTextResponse | None:
        token = request.headers.get("x-share-token", "")
        if not token:
            return None
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT id, session_id, user_id, read_only FROM session_share WHERE token = $1 LIMIT 1", token
            )
            if row is None:
                return PlainTextResponse("Invalid or expired share token\n", status_code=403)
            if (
                row["read_only"]
                and request.method not in ("GET", "HEAD")
                and request.url.path.startswith("/api/sessions/")
            ):
                return PlainTextResponse("This share link is read-only\n", status_code=403)
            await conn.execute(
                "INSERT INTO session_share_access (user_id, share_id, accessed_at) VALUES ($1, $2, NOW()) "
                "ON CONFLICT (user_id, share_id) DO UPDATE SET accessed_at = NOW()",
                self.caller(request),
                row["id"],
            )
        return Share(session_id=row["session_id"], owner=row["user_id"], read_only=row["read_only"])

    def session_user(self, request: Request, share: Share | None, session_id: str) -> str:
        """getEffectiveUserIDForSession: the share's owner on the shared session, else the caller."""
        if share is not None and share.session_id == session_id:
            return share.owner
        return self.caller(request)

    def note(self, request: Request, user: str) -> None:
        self.calls.seen.append((request.method, request.url.path, user))

    # ----------------------------------------------------------------------------------------------
    # sessions

    async def get_session(self, request: Request) -> Response:
        share = await self.share(request)
        if isinstance(share, Response):
            return share
        session_id = request.path_params["session_id"]
        user = self.session_user(request, share, session_id)
        self.note(request, user)
        query = request.query_params
        after: datetime | None = None
        if query.get("after"):
            try:
                after = datetime.fromisoformat(query["after"].replace("Z", "+00:00"))
            except ValueError as exc:
                return fail(400, f"failed to parse after timestamp: {exc}")
            if after.tzinfo is None:
                return fail(400, "failed to parse after timestamp: no time zone")
        limit = 0
        if query.get("limit"):
            try:
                limit = int(query["limit"])
            except ValueError:
                return fail(400, "failed to parse limit")
        order = "ASC" if query.get("order") == "asc" else "DESC"
        async with self.pool.acquire() as conn:
            session = await conn.fetchrow(
                f"SELECT {SESSION_COLUMNS} FROM session WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL LIMIT 1",
                session_id,
                user,
            )
            if session is None:
                return fail(404, "Session not found")
            events = await conn.fetch(
                f"SELECT {EVENT_COLUMNS} FROM event WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL "
                f"AND ($3::timestamptz IS NULL OR created_at > $3) ORDER BY created_at {order}"
                + (" LIMIT $4" if limit > 0 else ""),
                *((session_id, user, after, limit) if limit > 0 else (session_id, user, after)),
            )
        data: dict[str, Any] = {"session": session_json(session), "events": [event_json(e) for e in events]}
        if share is not None and share.session_id == session_id and share.read_only:
            data["read_only"] = True
        return ok(data, "Successfully retrieved session")

    async def create_session(self, request: Request) -> Response:
        share = await self.share(request)
        if isinstance(share, Response):
            return share
        try:
            body = json.loads(await request.body())
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            return fail(400, "Invalid request body")
        user = self.caller(request)
        self.note(request, user)
        agent_ref = body.get("agent_ref")
        if not agent_ref:
            return fail(400, "agent_ref is required")
        session_id = body.get("id") or str(uuid.uuid4())  # a2a.NewContextID()
        agent_id = python_identifier(agent_ref)
        async with self.pool.acquire() as conn:
            agent = await conn.fetchval("SELECT id FROM agent WHERE id = $1 AND deleted_at IS NULL LIMIT 1", agent_id)
            if agent is None:
                return fail(400, f"Agent ref is invalid, please check the agent ref {agent_ref}")
            await conn.execute(
                "INSERT INTO session (id, user_id, name, agent_id, source, created_at, updated_at) "
                "VALUES ($1, $2, $3, $4, $5, NOW(), NOW()) "
                "ON CONFLICT (id, user_id) DO UPDATE SET name = EXCLUDED.name, agent_id = EXCLUDED.agent_id, "
                "source = EXCLUDED.source, updated_at = NOW()",
                session_id, user, body.get("name"), agent_id, body.get("source"),
            )  # fmt: skip
            stored = await conn.fetchrow(
                f"SELECT {SESSION_COLUMNS} FROM session WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL",
                session_id,
                user,
            )
        return ok(session_json(stored), "Successfully created session", 201)

    async def add_event(self, request: Request) -> Response:
        share = await self.share(request)
        if isinstance(share, Response):
            return share
        session_id = request.path_params["session_id"]
        user = self.session_user(request, share, session_id)
        self.note(request, user)
        agent = request.headers.get("x-agent-name", "")
        try:
            body = json.loads(await request.body())
            event_id, data = body.get("id", ""), body.get("data", "")
            assert isinstance(event_id, str) and isinstance(data, str)
        except (ValueError, AssertionError, AttributeError):
            return fail(400, "Invalid request body")
        async with self.pool.acquire() as conn:
            session = await conn.fetchrow(
                "SELECT agent_id FROM session WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL LIMIT 1",
                session_id,
                user,
            )
            if session is None:
                return fail(404, "Session not found")
            if session["agent_id"] is not None and session["agent_id"] != python_identifier(agent):
                return fail(403, "Session does not belong to this agent")
            await conn.execute(
                "WITH inserted_event AS ("
                " INSERT INTO event (id, user_id, session_id, data, created_at, updated_at)"
                " VALUES ($1, $2, $3, $4, NOW(), NOW()) RETURNING user_id, session_id) "
                "UPDATE session SET updated_at = NOW() FROM inserted_event "
                "WHERE inserted_event.session_id IS NOT NULL AND session.id = inserted_event.session_id "
                "AND session.user_id = inserted_event.user_id AND session.deleted_at IS NULL",
                event_id, user, session_id, data,
            )  # fmt: skip
        zero = "0001-01-01T00:00:00Z"  # the handler answers the struct it stored, whose times it never set
        event = {"id": event_id, "session_id": session_id, "user_id": user, "created_at": zero, "updated_at": zero}
        return ok({**event, "data": data}, "Event added to session successfully", 201)

    # ----------------------------------------------------------------------------------------------
    # tasks

    async def create_task(self, request: Request) -> Response:
        share = await self.share(request)
        if isinstance(share, Response):
            return share
        if request.headers.get("a2a-version", "") not in ("", "0.3"):
            return fail(400, "Unsupported A2A version")  # this stand-in speaks the 0.10.x line's legacy wire
        try:
            task = v03.Task.model_validate_json(await request.body())
        except ValueError:
            return fail(400, "Invalid request body")
        user = self.caller(request)
        self.note(request, user)
        data = task.model_dump_json(by_alias=True, exclude_none=True)
        async with self.pool.acquire() as conn:
            stored = await conn.fetchval(
                "WITH upserted_task AS ("
                " INSERT INTO task (id, data, session_id, protocol_version, user_id, created_at, updated_at)"
                " VALUES ($1, $2, $3, NULL, $4, NOW(), NOW())"
                " ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data, session_id = EXCLUDED.session_id,"
                "  protocol_version = EXCLUDED.protocol_version, user_id = EXCLUDED.user_id, updated_at = NOW()"
                " WHERE task.deleted_at IS NULL AND (task.user_id = EXCLUDED.user_id"
                "  OR (task.user_id IS NULL AND EXCLUDED.user_id = ("
                "   SELECT MIN(s.user_id) FROM session s WHERE s.id = task.session_id"
                "   AND s.created_at <= task.created_at HAVING COUNT(DISTINCT s.user_id) = 1)))"
                " RETURNING id, session_id, user_id), "
                "touched_session AS ("
                " UPDATE session SET updated_at = NOW() FROM upserted_task"
                " WHERE upserted_task.session_id IS NOT NULL AND session.id = upserted_task.session_id"
                " AND session.user_id = upserted_task.user_id AND session.deleted_at IS NULL) "
                "SELECT id FROM upserted_task",
                task.id, data, task.context_id or None, user,
            )  # fmt: skip
        if stored is None:
            return fail(409, "Task ID is already in use")
        return ok(json.loads(data), "Successfully created task", 201)

    async def get_task(self, request: Request) -> Response:
        share = await self.share(request)
        if isinstance(share, Response):
            return share
        user = self.caller(request)
        self.note(request, user)
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                f"SELECT data, protocol_version FROM task WHERE task.id = $1 AND {TASK_OWNED} LIMIT 1",
                request.path_params["task_id"],
                user,
            )
        if row is None:
            return fail(404, "Task not found")
        if row["protocol_version"] not in (None, ""):
            return fail(500, "Internal server error")  # an A2A 1.0 row: not the 0.10.x line this stand-in serves
        return ok(json.loads(row["data"]), "Successfully retrieved task")

    # ----------------------------------------------------------------------------------------------
    # A2A

    async def a2a(self, request: Request) -> Response:
        share = await self.share(request)
        if isinstance(share, Response):
            return share
        ref = f"{request.path_params['namespace']}/{request.path_params['name']}"
        target = self.agents.get(ref)
        if target is None:
            return fail(404, f"agent {ref} not found")
        user = share.owner if share is not None else self.caller(request)
        self.note(request, user)
        headers = {"X-User-Id": user, "Content-Type": request.headers.get("content-type", "application/json")}
        if "authorization" in request.headers:
            headers["Authorization"] = request.headers["authorization"]
        assert self._http is not None
        upstream = self._http.build_request(
            request.method,
            target.rstrip("/") + "/" + request.path_params.get("rest", ""),
            content=await request.body(),
            headers=headers,
        )
        answer = await self._http.send(upstream, stream=True)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()

        passed = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "cache-control")}
        return StreamingResponse(body(), status_code=answer.status_code, headers=passed)

    # ----------------------------------------------------------------------------------------------
    # LangGraph checkpoints (kagent-langgraph's KAgentCheckpointer; handlers/checkpoints.go, langgraph.sql)

    async def put_checkpoint(self, request: Request) -> Response:
        user = self.caller(request)
        self.note(request, user)
        try:
            body = json.loads(await request.body())
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            return fail(400, "Invalid request body")
        if not body.get("thread_id"):
            return fail(400, "thread_id is required")
        if not body.get("checkpoint"):
            return fail(400, "checkpoint is required")
        async with self.pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO lg_checkpoint (user_id, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,"
                " metadata, checkpoint, checkpoint_type, version, created_at, updated_at)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NOW(), NOW())"
                " ON CONFLICT (user_id, thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET"
                " parent_checkpoint_id = EXCLUDED.parent_checkpoint_id, metadata = EXCLUDED.metadata,"
                " checkpoint = EXCLUDED.checkpoint, checkpoint_type = EXCLUDED.checkpoint_type,"
                " version = EXCLUDED.version, updated_at = NOW()",
                user, body["thread_id"], body.get("checkpoint_ns") or "", body.get("checkpoint_id") or "",
                body.get("parent_checkpoint_id"), body.get("metadata") or "", body["checkpoint"],
                body.get("type_") or "", int(body.get("version") or 0),
            )  # fmt: skip
        return ok({}, "Successfully stored checkpoint", 201)

    async def put_writes(self, request: Request) -> Response:
        user = self.caller(request)
        self.note(request, user)
        try:
            body = json.loads(await request.body())
            assert isinstance(body, dict) and isinstance(body.get("writes") or [], list)
        except (ValueError, AssertionError):
            return fail(400, "Invalid request body")
        key = (user, body.get("thread_id") or "", body.get("checkpoint_ns") or "", body.get("checkpoint_id") or "")
        async with self.pool.acquire() as conn, conn.transaction():
            for write in body.get("writes") or []:
                await conn.execute(
                    "INSERT INTO lg_checkpoint_write (user_id, thread_id, checkpoint_ns, checkpoint_id, write_idx,"
                    " value, value_type, channel, task_id, created_at, updated_at)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NOW(), NOW())"
                    " ON CONFLICT (user_id, thread_id, checkpoint_ns, checkpoint_id, write_idx) DO UPDATE SET"
                    " value = EXCLUDED.value, value_type = EXCLUDED.value_type, channel = EXCLUDED.channel,"
                    " task_id = EXCLUDED.task_id, updated_at = NOW()",
                    *key, int(write.get("idx") or 0), write.get("value") or "", write.get("type_") or "",
                    write.get("channel") or "", body.get("task_id") or "",
                )  # fmt: skip
        return ok({}, "Successfully stored checkpoint writes", 201)

    async def list_checkpoints(self, request: Request) -> Response:
        user = self.caller(request)
        self.note(request, user)
        query = request.query_params
        thread_id, ns = query.get("thread_id", ""), query.get("checkpoint_ns", "")
        if not thread_id:
            return fail(400, "thread_id is required")
        try:
            limit = int(query.get("limit", "0"))
        except ValueError:
            limit = 0  # strconv.Atoi failing leaves the limit at 0: every checkpoint
        live = "user_id = $1 AND thread_id = $2 AND checkpoint_ns = $3 AND deleted_at IS NULL"
        async with self.pool.acquire() as conn, conn.transaction():
            if query.get("checkpoint_id"):
                rows = await conn.fetch(
                    f"SELECT * FROM lg_checkpoint WHERE {live} AND checkpoint_id = $4 LIMIT 1",
                    user, thread_id, ns, query["checkpoint_id"],
                )  # fmt: skip
                if not rows:  # GetCheckpoint's no-rows error is answered as a failed list
                    return fail(500, "Failed to list checkpoints")
            elif limit > 0:
                rows = await conn.fetch(
                    f"SELECT * FROM lg_checkpoint WHERE {live} ORDER BY checkpoint_id DESC LIMIT $4",
                    user, thread_id, ns, limit,
                )  # fmt: skip
            else:
                rows = await conn.fetch(
                    f"SELECT * FROM lg_checkpoint WHERE {live} ORDER BY checkpoint_id DESC", user, thread_id, ns
                )
            writes = await conn.fetch(
                f"SELECT * FROM lg_checkpoint_write WHERE {live} AND checkpoint_id = ANY($4::text[])"
                " ORDER BY checkpoint_id, task_id, write_idx",
                user, thread_id, ns, [r["checkpoint_id"] for r in rows],
            )  # fmt: skip
        return ok([checkpoint_tuple(r, [w for w in writes if w["checkpoint_id"] == r["checkpoint_id"]]) for r in rows],
                  "Successfully listed checkpoints")  # fmt: skip

    async def delete_thread(self, request: Request) -> Response:
        user = self.caller(request)
        self.note(request, user)
        thread_id = request.path_params["thread_id"]
        async with self.pool.acquire() as conn, conn.transaction():
            for table in ("lg_checkpoint", "lg_checkpoint_write"):
                await conn.execute(
                    f"UPDATE {table} SET deleted_at = NOW() "
                    "WHERE user_id = $1 AND thread_id = $2 AND deleted_at IS NULL",
                    user,
                    thread_id,
                )
        return ok({}, "Successfully deleted thread")

    # ----------------------------------------------------------------------------------------------
    # CrewAI memory and flow state (kagent-crewai's KagentMemoryStorage / KagentFlowPersistence; handlers/crewai.go,
    # crewai.sql)

    async def json_body(self, request: Request) -> dict[str, Any] | None:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    async def store_memory(self, request: Request) -> Response:
        user = self.caller(request)
        self.note(request, user)
        body = await self.json_body(request)
        if body is None or not isinstance(body.get("memory_data") or {}, dict):
            return fail(400, "Invalid request body")
        if not body.get("thread_id"):
            return fail(400, "thread_id is required")
        async with self.pool.acquire() as conn:  # UpsertCrewAIMemory: one row per user and thread, overwritten
            await conn.execute(
                "INSERT INTO crewai_agent_memory (user_id, thread_id, memory_data, created_at, updated_at)"
                " VALUES ($1, $2, $3, NOW(), NOW()) ON CONFLICT (user_id, thread_id) DO UPDATE SET"
                " memory_data = EXCLUDED.memory_data, updated_at = NOW(), deleted_at = NULL",
                user, body["thread_id"], go_json(body.get("memory_data")),
            )  # fmt: skip
        return ok({}, "Successfully stored CrewAI memory", 201)

    async def search_memory(self, request: Request) -> Response:
        user = self.caller(request)
        self.note(request, user)
        query = request.query_params
        if not query.get("thread_id"):
            return fail(400, "thread_id is required")
        if not query.get("q"):
            return fail(400, "Either agent_id or q (task description) parameter is required")
        try:
            limit = int(query.get("limit", "0"))
        except ValueError:
            limit = 0
        pattern = f"%{query['q']}%"
        sql = (
            "SELECT thread_id, user_id, memory_data FROM crewai_agent_memory"
            " WHERE user_id = $1 AND thread_id = $2 AND deleted_at IS NULL"
            " AND (memory_data ILIKE $3 OR (memory_data::jsonb)->>'task_description' ILIKE $3)"
            " ORDER BY created_at DESC, (memory_data::jsonb)->>'score' ASC"
        )
        async with self.pool.acquire() as conn:
            if limit > 0:
                rows = await conn.fetch(sql + " LIMIT $4", user, query["thread_id"], pattern, limit)
            else:
                rows = await conn.fetch(sql, user, query["thread_id"], pattern)
        found = [
            {"thread_id": r["thread_id"], "user_id": r["user_id"], "memory_data": json.loads(r["memory_data"])}
            for r in rows
        ]
        return ok(found, "Successfully listed CrewAI memory")

    async def reset_memory(self, request: Request) -> Response:
        user = self.caller(request)
        self.note(request, user)
        thread_id = request.query_params.get("thread_id", "")
        if not thread_id:
            return fail(400, "thread_id is required")
        async with self.pool.acquire() as conn:  # HardDeleteCrewAIMemory: not a soft delete
            await conn.execute("DELETE FROM crewai_agent_memory WHERE user_id = $1 AND thread_id = $2", user, thread_id)
        return ok({}, "Successfully reset CrewAI memory")

    async def store_flow_state(self, request: Request) -> Response:
        user = self.caller(request)
        self.note(request, user)
        body = await self.json_body(request)
        if body is None or not isinstance(body.get("state_data") or {}, dict):
            return fail(400, "Invalid request body")
        if not body.get("thread_id"):
            return fail(400, "thread_id is required")
        if not body.get("method_name"):
            return fail(400, "method_name is required")
        async with self.pool.acquire() as conn:  # UpsertCrewAIFlowState: one row per user, thread and method
            await conn.execute(
                "INSERT INTO crewai_flow_state (user_id, thread_id, method_name, state_data, created_at, updated_at)"
                " VALUES ($1, $2, $3, $4, NOW(), NOW()) ON CONFLICT (user_id, thread_id, method_name) DO UPDATE SET"
                " state_data = EXCLUDED.state_data, updated_at = NOW(), deleted_at = NULL",
                user, body["thread_id"], body["method_name"], go_json(body.get("state_data")),
            )  # fmt: skip
        return ok({}, "Successfully stored CrewAI flow state", 201)

    async def get_flow_state(self, request: Request) -> Response:
        user = self.caller(request)
        self.note(request, user)
        thread_id = request.query_params.get("thread_id", "")
        if not thread_id:
            return fail(400, "thread_id is required")
        async with self.pool.acquire() as conn:  # GetLatestCrewAIFlowState: the newest by created_at
            row = await conn.fetchrow(
                "SELECT thread_id, method_name, state_data FROM crewai_flow_state"
                " WHERE user_id = $1 AND thread_id = $2 AND deleted_at IS NULL ORDER BY created_at DESC LIMIT 1",
                user,
                thread_id,
            )
        if row is None:
            return fail(404, "Flow state not found")
        state = {"thread_id": row["thread_id"], "method_name": row["method_name"]}
        return ok({**state, "state_data": json.loads(row["state_data"])}, "Successfully retrieved CrewAI flow state")

    async def not_found(self, request: Request) -> Response:
        return fail(404, f"the controller stand-in does not serve {request.method} {request.url.path}")


def controller_app(controller: Controller) -> Starlette:
    c = controller
    return Starlette(
        routes=[
            Route("/api/sessions", c.create_session, methods=["POST"]),
            Route("/api/sessions/{session_id}", c.get_session, methods=["GET"]),
            Route("/api/sessions/{session_id}/events", c.add_event, methods=["POST"]),
            Route("/api/tasks", c.create_task, methods=["POST"]),
            Route("/api/tasks/{task_id}", c.get_task, methods=["GET"]),
            Route("/api/langgraph/checkpoints", c.put_checkpoint, methods=["POST"]),
            Route("/api/langgraph/checkpoints", c.list_checkpoints, methods=["GET"]),
            Route("/api/langgraph/checkpoints/writes", c.put_writes, methods=["POST"]),
            Route("/api/langgraph/checkpoints/{thread_id}", c.delete_thread, methods=["DELETE"]),
            Route("/api/crewai/memory", c.store_memory, methods=["POST"]),
            Route("/api/crewai/memory", c.search_memory, methods=["GET"]),
            Route("/api/crewai/memory", c.reset_memory, methods=["DELETE"]),
            Route("/api/crewai/flows/state", c.store_flow_state, methods=["POST"]),
            Route("/api/crewai/flows/state", c.get_flow_state, methods=["GET"]),
            Route("/api/a2a/{namespace}/{name}", c.a2a, methods=["GET", "POST"]),
            Route("/api/a2a/{namespace}/{name}/{rest:path}", c.a2a, methods=["GET", "POST"]),
            Route("/{rest:path}", c.not_found, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        ],
        lifespan=c.lifespan,
    )


@dataclass(frozen=True)
class RunningController:
    url: str  # KAGENT_URL for the runtimes
    controller: Controller

    @property
    def a2a_url(self) -> str:
        """KAGENT_A2A_URL for the service: kagent's A2A path on the stand-in."""
        return f"{self.url}/api/a2a"

    def register(self, agent_ref: str, url: str) -> None:
        """Route kagent's A2A path of `agent_ref` ("namespace/name") to a running runtime."""
        self.controller.agents[agent_ref] = url


@contextmanager
def running_controller(dsn: str) -> Iterator[RunningController]:
    """The stand-in, served on 127.0.0.1 until the block ends."""
    controller = Controller(dsn)
    with live_server(controller_app(controller)) as url:
        yield RunningController(url=url, controller=controller)


async def register_agent(conn: Any, agent_ref: str, config: dict[str, Any] | None = None) -> str:
    """The agent's row, as kagent's controller upserts it when it reconciles an Agent (UpsertAgent); the
    stand-in's POST /api/sessions refuses an agent_ref without one. Returns the agent id."""
    agent_id = python_identifier(agent_ref)
    await conn.execute(
        "INSERT INTO agent (id, type, workload_type, config, created_at, updated_at) "
        "VALUES ($1, 'Declarative', 'deployment', $2::json, NOW(), NOW()) "
        "ON CONFLICT (id) DO UPDATE SET type = EXCLUDED.type, workload_type = EXCLUDED.workload_type, "
        "config = EXCLUDED.config, updated_at = NOW(), deleted_at = NULL",
        agent_id,
        json.dumps(config or {}),
    )
    return agent_id
