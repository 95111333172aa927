"""The service's operations, each one transaction, shared by the HTTP API and the CLI."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import asyncpg
import msgspec
from asyncpg.pool import PoolConnectionProxy

from service import fork as plan
from service import tasks
from service.config import Settings
from service.errors import NotFound, TooManyRequests, Unprocessable
from service.identity import Access, Caller, access_for
from service.observability import TASK_COPIES
from service.schemas import ForkedSession, ForkInfo, ForkPlan, ForkRequest, Session, rfc3339
from service.store import (
    TASK_WRITE_BATCH_BYTES,
    Connection,
    Lineage,
    NewTask,
    SessionRow,
    Store,
    TaskRow,
    pooled_connection,
)

_encoder = msgspec.json.Encoder()
log = logging.getLogger("kagent_fork")
A = TypeVar("A")
B = TypeVar("B")


@dataclass(frozen=True, kw_only=True)
class Services:
    settings: Settings
    store: Store
    pool: asyncpg.Pool

    def connection(self) -> AbstractAsyncContextManager[PoolConnectionProxy[asyncpg.Record]]:
        """A pooled connection, checked first (see store.pooled_connection)."""
        return pooled_connection(self.pool)


@dataclass(frozen=True, kw_only=True)
class ForkOutcome:
    data: ForkedSession | ForkPlan | msgspec.Raw
    created: bool  # 201 with a Location, else 200
    replayed: bool
    session_id: str | None


def session_json(row: SessionRow) -> Session:
    return Session(
        id=row.id,
        user_id=row.user_id,
        name=row.name,
        agent_id=row.agent_id,
        source=row.source,
        created_at=rfc3339(row.created_at),
        updated_at=rfc3339(row.updated_at),
    )


async def resolve_access(svc: Services, conn: Connection, caller: Caller, session_id: str) -> Access:
    share = None
    if caller.share_token is not None:
        share = await svc.store.share_by_token(conn, caller.share_token)
    return access_for(caller, session_id, share)


async def visible_session(
    svc: Services, conn: Connection, caller: Caller, session_id: str, *, lock: bool = False
) -> tuple[SessionRow, Access]:
    """The session as the caller may see it; 404 alike for missing and not visible."""
    access = await resolve_access(svc, conn, caller, session_id)
    row = await svc.store.get_session(conn, session_id, access.owner, lock=lock)
    if row is None:
        raise NotFound("Session not found")
    return row, access


@dataclass(frozen=True, kw_only=True)
class _Cut:
    """Where the fork ends: events and whole tasks before these times, and maybe part of one task."""

    events_before: datetime | None
    tasks_before: datetime | None
    partial: plan.BoundaryTask | None
    boundary_found: bool
    warnings: tuple[str, ...]


async def _find_cut(
    svc: Services,
    conn: Connection,
    reader: Connection | None,
    source: SessionRow,
    req: ForkRequest,
    last_task: TaskRow | None,
) -> _Cut:
    store, sid, owner = svc.store, source.id, source.user_id
    boundary = req.rewind_before_invocation_id
    warnings: list[str] = []
    events_before = tasks_before = None
    partial = None
    found = False
    if boundary is not None:
        prefilter = plan.verbatim_in_json(boundary)
        event_search = store.boundary_event_at(conn, sid, owner, boundary, prefilter=prefilter)
        if reader is not None:
            # Neither search has an index to use: each reads all of the session's rows of its table, so
            # with a reader they run at once, on two connections in one snapshot.
            events_before, candidates = await _together(
                event_search, store.tasks_mentioning(reader, sid, owner, boundary, prefilter=prefilter)
            )
        else:
            events_before = await event_search
            candidates = await store.tasks_mentioning(conn, sid, owner, boundary, prefilter=prefilter)
        boundary_task = plan.find_boundary_task(candidates, boundary)
        found = events_before is not None or boundary_task is not None
        if not found:
            if req.if_boundary_missing == "error":
                raise NotFound(f"invocation {boundary} not found in session {sid}")
            warnings.append(f"invocation {boundary} not found in the session: the whole conversation is copied")
        elif boundary_task is None:
            tasks_before = events_before
            warnings.append(f"no task carries invocation {boundary}: tasks created before its first event are copied")
        else:
            tasks_before = boundary_task.row.created_at
            partial = boundary_task if boundary_task.cut > 0 else None
            if events_before is None:
                events_before = boundary_task.row.created_at
    if partial is None:
        running = _running_turn(last_task, tasks_before)
        if running is not None:
            invocation, row, state = running
            warnings.append(
                f"the last turn{f' (invocation {invocation})' if invocation else ''} is still running "
                f"(task {row.id} is {state!r}): it is left out of the fork"
            )
            tasks_before = row.created_at
            start = None
            if invocation is not None:
                start = await store.boundary_event_at(
                    conn, sid, owner, invocation, prefilter=plan.verbatim_in_json(invocation)
                )
            start = start or row.created_at
            events_before = start if events_before is None else min(events_before, start)
    return _Cut(
        events_before=events_before,
        tasks_before=tasks_before,
        partial=partial,
        boundary_found=found,
        warnings=tuple(warnings),
    )


def _running_turn(last: TaskRow | None, before: datetime | None) -> tuple[str | None, TaskRow, str | None] | None:
    """The source's last task, if the fork would keep it and the agent is still running it: (its first
    invocation, row, state). An older non-terminal task is not a running turn: its agent is gone, and
    the copier closes its copy."""
    if last is None or (before is not None and last.created_at >= before):
        return None
    try:
        data = tasks.decode(last.data)
    except tasks.TaskFormatError:
        return None
    if tasks.is_terminal(data, plan.dialect_of(last)):
        return None
    invocations = tasks.invocation_ids(data)
    return (invocations[0] if invocations else None), last, tasks.state(data)


async def _lineage_parent(svc: Services, conn: Connection, source: SessionRow) -> tuple[str, str, int]:
    """(root session, root owner, depth of the new fork)."""
    parent = await svc.store.lineage_of(conn, source.id, source.user_id)
    if parent is None:
        return source.id, source.user_id, 1
    depth = parent.depth + 1
    if depth > svc.settings.max_fork_depth:
        raise Unprocessable(f"fork depth {depth} is over the limit of {svc.settings.max_fork_depth} (MAX_FORK_DEPTH)")
    return parent.root_session_id, parent.root_user_id, depth


async def _default_name(svc: Services, conn: Connection, source: SessionRow) -> str:
    if source.name and source.name != "Chat":
        return plan.default_name(source.name, None)
    text = None
    if (first := await svc.store.first_task(conn, source.id, source.user_id)) is not None:
        try:
            text = tasks.first_user_text(tasks.decode(first.data), plan.dialect_of(first))
        except (tasks.TaskFormatError, Unprocessable):
            text = None
    if text is None:
        text = await svc.store.first_user_event_text(conn, source.id, source.user_id)
    return plan.default_name(source.name, text)


def request_hash(session_id: str, req: ForkRequest) -> str:
    return hashlib.sha256(session_id.encode() + b"\n" + _encoder.encode(req)).hexdigest()


async def fork(
    svc: Services, caller: Caller, session_id: str, req: ForkRequest, idempotency_key: str | None = None
) -> ForkOutcome:
    """Fork chat from here: a new session holding the conversation before the boundary turn."""
    async with svc.connection() as conn:
        if idempotency_key is None or req.dry_run:
            return await _fork_within_rate(svc, conn, caller, session_id, req, None)
        digest = request_hash(session_id, req)
        # Concurrent retries of one key wait here, then find the first one's answer.
        async with svc.store.key_lock(conn, f"fork:{caller.user_id}", idempotency_key):
            stored = await svc.store.idempotent_answer(
                conn, caller.user_id, idempotency_key, svc.settings.idempotency_ttl_seconds
            )
            if stored is not None:
                stored_hash, answer = stored
                if stored_hash != digest:
                    raise Unprocessable("Idempotency-Key was already used with a different request")
                return ForkOutcome(data=msgspec.Raw(answer.encode()), created=False, replayed=True, session_id=None)
            return await _fork_within_rate(svc, conn, caller, session_id, req, (idempotency_key, digest))


async def _fork_within_rate(
    svc: Services,
    conn: Connection,
    caller: Caller,
    session_id: str,
    req: ForkRequest,
    idempotency: tuple[str, str] | None,
) -> ForkOutcome:
    """A fork within FORK_RATE_PER_MINUTE: at most that many forks made by one user in any minute,
    counted from the lineage records (dry runs, replays and refused forks are not forks)."""
    rate = svc.settings.fork_rate_per_minute
    if req.dry_run or rate == 0:
        return await _fork_once(svc, conn, caller, session_id, req, idempotency, rate=0)
    # A user's forks run one at a time, in every replica, so that counting them and committing a new
    # one are atomic. The lock is taken before the fork's snapshot: it sees every fork made before.
    async with svc.store.key_lock(conn, "fork-rate", caller.user_id):
        return await _fork_once(svc, conn, caller, session_id, req, idempotency, rate=rate)


async def _fork_once(
    svc: Services,
    conn: Connection,
    caller: Caller,
    session_id: str,
    req: ForkRequest,
    idempotency: tuple[str, str] | None,
    *,
    rate: int,
) -> ForkOutcome:
    store = svc.store
    # One snapshot for every read: a rewind or an agent appending events while the fork runs
    # changes nothing the fork sees, so the fork is a prefix of one state of the conversation.
    async with conn.transaction(isolation="repeatable_read"), AsyncExitStack() as stack:
        if rate and (wait := await store.fork_rate_wait(conn, caller.user_id, rate)) is not None:
            retry = max(1, math.ceil(wait))
            raise TooManyRequests(
                f"too many forks: at most {rate} a minute for each user (FORK_RATE_PER_MINUTE); retry in {retry} s",
                retry_after=retry,
            )
        source, _access = await visible_session(svc, conn, caller, session_id)
        sid, owner = source.id, source.user_id
        if await store.has_external_state(conn, sid, owner):
            raise Unprocessable(
                "this session's agent keeps its state outside kagent's event table (LangGraph or CrewAI)"
            )
        last_task = await store.last_task_before(conn, sid, owner, None)
        large = (
            not req.dry_run and last_task is not None and await store.count_tasks(conn, sid, owner) >= LARGE_FORK_TASKS
        )
        reader = await stack.enter_async_context(_snapshot_reader(svc, conn, wanted=large))
        cut = await _find_cut(svc, conn, reader, source, req, last_task)
        if last_task is not None and not await store.has_events(conn, sid, owner):
            raise Unprocessable("this session has tasks but no events: its agent keeps its state outside kagent")
        root_id, _root_owner, depth = await _lineage_parent(svc, conn, source)
        name = req.name or await _default_name(svc, conn, source)
        versions = await store.task_versions_before(conn, sid, owner, cut.tasks_before)
        layout = plan.choose_layout(req.task_layout, _dialects(versions, cut))
        now = await store.now(conn)
        new_id = str(uuid.uuid4())
        copier = plan.TaskCopier(layout=layout, session_id=new_id, user_id=caller.user_id, now=now)
        warnings = list(cut.warnings)

        if req.dry_run:
            stats = await store.event_stats(conn, sid, owner, cut.events_before)
            if (cap := svc.settings.max_fork_events) and stats.events > cap:
                warnings.append(f"a fork would be refused: {stats.events} events is over MAX_FORK_EVENTS ({cap})")
            task_bytes = 0
            async for row in _kept_tasks(svc, conn, source, cut):
                new = copier.add(row, cut.partial.cut if cut.partial and row is cut.partial.row else None)
                task_bytes += len(new.data.encode()) if new else 0
            final = copier.finish()
            task_bytes += len(final.data.encode()) if final else 0
            return ForkOutcome(
                data=ForkPlan(
                    dry_run=True, name=name, parent_session_id=sid, fork_root_session_id=root_id, depth=depth,
                    rewind_before_invocation_id=req.rewind_before_invocation_id,
                    boundary_found=cut.boundary_found, events_copied=stats.events,
                    tasks_copied=copier.written, messages_copied=copier.messages, task_layout=layout,
                    warnings=warnings + copier.warnings, bytes_to_copy=stats.bytes + task_bytes,
                    estimated_context_tokens=math.ceil(stats.text_chars / 4),
                ),
                created=False, replayed=False, session_id=None,
            )  # fmt: skip

        new_session = await store.insert_session(
            conn,
            session_id=new_id,
            user_id=caller.user_id,
            name=name,
            agent_id=source.agent_id,
            source="user",
        )
        events = await _copy_rows(svc, conn, reader, source, cut, copier)
        warnings += copier.warnings
        info = ForkInfo(
            parent_session_id=sid, fork_root_session_id=root_id, depth=depth,
            rewind_before_invocation_id=req.rewind_before_invocation_id, boundary_found=cut.boundary_found,
            events_copied=events, tasks_copied=copier.written, messages_copied=copier.messages,
            task_layout=layout, warnings=warnings,
        )  # fmt: skip
        await store.insert_lineage(
            conn,
            Lineage(
                session_id=new_id, user_id=caller.user_id, parent_session_id=sid, parent_user_id=owner,
                root_session_id=root_id, root_user_id=_root_owner, depth=depth,
                rewind_before_invocation_id=req.rewind_before_invocation_id, boundary_found=cut.boundary_found,
                events_copied=events, tasks_copied=copier.written, messages_copied=copier.messages,
                task_layout=layout, warnings=_encoder.encode(warnings).decode(), created_at=now,
            ),
            created_by=caller.user_id,
        )  # fmt: skip
        s = session_json(new_session)
        data = ForkedSession(**msgspec.structs.asdict(s), fork=info)
        if idempotency is not None:
            key, digest = idempotency
            await store.remember_answer(
                conn, user_id=caller.user_id, key=key, request_hash=digest, session_id=new_id,
                answer=_encoder.encode(data).decode(), ttl_seconds=svc.settings.idempotency_ttl_seconds,
            )  # fmt: skip
        return ForkOutcome(data=data, created=True, replayed=False, session_id=new_id)


def _dialects(versions: dict[str | None, int], cut: _Cut) -> set[tasks.TaskDialect]:
    """The dialects of the kept tasks (`versions`: their protocol_version) and of the cut one."""
    dialects = set()
    for version in [*versions, *([cut.partial.row.protocol_version] if cut.partial is not None else [])]:
        dialect = tasks.TaskDialect.of(version)
        if dialect is None:
            raise Unprocessable(f"this session holds tasks of protocol_version {version!r}, unknown to this service")
        dialects.add(dialect)
    return dialects


async def _kept_tasks(svc: Services, conn: Connection, source: SessionRow, cut: _Cut) -> AsyncIterator[TaskRow]:
    async for row in svc.store.stream_tasks_before(conn, source.id, source.user_id, cut.tasks_before):
        yield row
    if cut.partial is not None:
        yield cut.partial.row


# Below this many tasks (about ten events each) a session is small: a second connection would cost a
# fork more round trips than it saves. A reader is taken only if the pool has one at hand.
LARGE_FORK_TASKS = 200
READER_WAIT_SECONDS = 0.05


class _CopyInPython(Exception):
    """The server-side task copy would not write what the Python rewrite writes: undo it."""


async def _copy_rows(
    svc: Services, conn: Connection, reader: Connection | None, source: SessionRow, cut: _Cut, copier: plan.TaskCopier
) -> int:
    """Write the fork's events and tasks; the number of events copied.

    Large forks use a second connection in the fork's snapshot. When the per_task rows need no more
    than their ids replaced, PostgreSQL copies the tasks itself while that connection checks, task by
    task, that the copy is exact; otherwise the reader feeds the Python rewrite while one COPY writes.
    """
    path = "streamed"
    if reader is not None and copier.layout == "per_task" and copier.user_id == source.user_id:
        try:
            events = await _server_copy(svc, conn, reader, source, cut, copier)
            TASK_COPIES.labels("server").inc()
            return events
        except _CopyInPython as exc:
            # The savepoint is rolled back: nothing of the attempt remains.
            log.info("tasks copied by the service instead of PostgreSQL: %s", exc)
            path = "python"
    events = await _copy_events(svc, conn, source, cut, copier)
    if reader is not None:
        TASK_COPIES.labels(path).inc()
    await _copy_tasks(svc, conn, reader, source, cut, copier)
    return events


async def _copy_events(svc: Services, conn: Connection, source: SessionRow, cut: _Cut, copier: plan.TaskCopier) -> int:
    events = await svc.store.copy_events(
        conn, session_id=source.id, owner=source.user_id, before=cut.events_before,
        new_session_id=copier.session_id, new_user_id=copier.user_id,
    )  # fmt: skip
    cap = svc.settings.max_fork_events
    if cap and events > cap:
        # The copy stopped one row past the cap; raising rolls the whole fork back.
        raise Unprocessable(
            f"this fork would copy more than {cap} events, the most one fork may copy (MAX_FORK_EVENTS): "
            "fork before an earlier turn, or ask the operator to raise the limit"
        )
    return events


async def _server_copy(
    svc: Services, conn: Connection, reader: Connection, source: SessionRow, cut: _Cut, copier: plan.TaskCopier
) -> int:
    """Copy the whole kept tasks inside PostgreSQL, then the events, in a savepoint, while the reader
    checks the same rows (fork.ServerCopyCheck); raise _CopyInPython, the savepoint undone, if one of
    them needs the Python rewrite. The cut task, if any, is rewritten in Python afterwards."""
    store = svc.store
    check = plan.ServerCopyCheck(source_session_id=source.id, session_id=copier.session_id, user_id=copier.user_id)
    refused: list[Unprocessable] = []

    async def write() -> tuple[int, int]:
        copied = await store.copy_tasks(
            conn, session_id=source.id, owner=source.user_id, before=cut.tasks_before,
            new_session_id=copier.session_id, new_user_id=copier.user_id,
        )  # fmt: skip
        return copied, await _copy_events(svc, conn, source, cut, copier)

    async def verify() -> None:
        try:
            async for row in store.stream_tasks_before(reader, source.id, source.user_id, cut.tasks_before):
                if not check.add(row):
                    return
        except Unprocessable as exc:
            refused.append(exc)  # raised once the write is done: it is not cancelled mid-statement

    async with conn.transaction():  # a savepoint
        (copied, events), _ = await _together(write(), verify())
        if refused:
            raise refused[0]
        if check.mismatch is not None or copied != check.written:
            raise _CopyInPython(check.mismatch or f"{copied} tasks copied, {check.written} checked")
    copier.messages += check.messages
    copier.written += check.written
    if cut.partial is not None:
        new = copier.add(cut.partial.row, cut.partial.cut)
        await store.insert_tasks(conn, [new] if new is not None else [])
    return events


async def _together(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Run both at once; if one fails, the other is cancelled and awaited before the error goes on."""
    one, two = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        await asyncio.wait((one, two), return_when=asyncio.FIRST_EXCEPTION)
        for task in (one, two):
            if task.done() and (error := task.exception()) is not None:
                raise error
        return one.result(), two.result()
    finally:
        for task in (one, two):
            task.cancel()  # a no-op on a finished task
        await asyncio.gather(one, two, return_exceptions=True)


async def _copy_tasks(
    svc: Services, conn: Connection, reader: Connection | None, source: SessionRow, cut: _Cut, copier: plan.TaskCopier
) -> None:
    """Stream the kept tasks through the copier into new rows, with bounded memory: read on the reader
    while one COPY writes, or, without a reader, batch by batch on the fork's connection."""
    if reader is not None:
        await svc.store.stream_new_tasks(conn, _new_tasks(svc, reader, source, cut, copier))
        return
    batch: list[NewTask] = []
    size = 0
    async for new in _new_tasks(svc, conn, source, cut, copier):
        batch.append(new)
        size += len(new.data)
        if size >= TASK_WRITE_BATCH_BYTES:
            await svc.store.insert_tasks(conn, batch)
            batch, size = [], 0
    await svc.store.insert_tasks(conn, batch)


async def _new_tasks(
    svc: Services, reader: Connection, source: SessionRow, cut: _Cut, copier: plan.TaskCopier
) -> AsyncIterator[NewTask]:
    async for row in _kept_tasks(svc, reader, source, cut):
        new = copier.add(row, cut.partial.cut if cut.partial and row is cut.partial.row else None)
        if new is not None:
            yield new
    final = copier.finish()
    if final is not None:
        yield final


@asynccontextmanager
async def _snapshot_reader(svc: Services, conn: Connection, *, wanted: bool) -> AsyncIterator[Connection | None]:
    """A second connection that reads in the fork's own snapshot, so that reading the kept tasks
    overlaps with writing on the fork's connection. None when not wanted or when the pool has no
    connection free right away: the fork then reads and writes on its own connection."""
    if not wanted:
        yield None
        return
    try:
        reader = await svc.pool.acquire(timeout=READER_WAIT_SECONDS)
    except TimeoutError:
        yield None
        return
    try:
        snapshot = await svc.store.export_snapshot(conn)
        async with reader.transaction(isolation="repeatable_read", readonly=True):
            await svc.store.use_snapshot(reader, snapshot)
            yield reader
    finally:
        await svc.pool.release(reader)
