"""Writing a fork's rows: the events by one INSERT ... SELECT, the tasks inside PostgreSQL or through
the Python rewrite, on the fork's connection, with a second connection in the same snapshot (the
reader) for large forks. operations.py decides the cut; this module writes it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from service.errors import Unprocessable
from service.kagent import turn_map
from service.kagent.store.base import CONNECTION_ERRORS, TASK_WRITE_BATCH_BYTES, Connection, copy_text, copy_text_fields
from service.kagent.store.sessions import SessionRow
from service.kagent.store.tasks import NewTask, TaskRow
from service.kagent.store.turn_map import ForkCut, KeptTasks
from service.observability import TASK_COPIES
from service.operations import plan

if TYPE_CHECKING:
    from asyncpg import Record
    from asyncpg.pool import PoolConnectionProxy
    from asyncpg.transaction import Transaction

    from service.services import Services

log = logging.getLogger("kagent_fork")
A = TypeVar("A")
B = TypeVar("B")

# Below this many tasks (about ten events each) a session is small: a second connection would cost a
# fork more round trips than it saves. A reader is taken only if the pool has one at hand.
LARGE_FORK_TASKS = 200
READER_WAIT_SECONDS = 0.05
READER_RELEASE_SECONDS = 10.0


@dataclass(frozen=True, kw_only=True)
class Cut:
    """Where the fork ends: events and whole tasks before these times, and maybe part of one task."""

    events_before: datetime | None
    tasks_before: datetime | None
    partial: plan.BoundaryTask | None
    boundary_found: bool
    warnings: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Guess:
    """A cut guessed from the last turns (operations._guess_cut): its boundary task is taken to be the
    first that carries `invocation_id`, and the events end where the exact search on the reader says.
    The server copy proves it (no kept task carries the boundary) or raises GuessWrong."""

    invocation_id: str
    events_search: asyncio.Task[datetime | None]


@dataclass(frozen=True, kw_only=True)
class Proven:
    """The source's turn map, trusted in the fork's snapshot, proves PostgreSQL's text copy writes each kept
    whole task exactly (`tasks`: its figures of them); `map_cut`: where the map is cut for the fork, when the
    fork is given that part of it (turn_map.fork_cut)."""

    tasks: KeptTasks
    map_cut: ForkCut | None


class GuessWrong(Exception):
    """A guessed cut was not proven: the caller undoes what was written and cuts exactly."""


class _CopyInPython(Exception):
    """The server-side task copy would not write what the Python rewrite writes: undo it."""


async def copy_rows(
    svc: Services,
    conn: Connection,
    reader: Connection | None,
    source: SessionRow,
    cut: Cut,
    copier: plan.TaskCopier,
    guess: Guess | None,
    settle: Awaitable[tuple[plan.Layout, list[str]]] | None = None,
    *,
    proven: Proven | None = None,
    server: bool = True,
) -> int:
    """Write the fork's events and tasks; the number of events copied.

    `proven`: the source's turn map, trusted in this snapshot, says PostgreSQL's text copy writes each
    kept whole task exactly (a per_task fork by the owner): the tasks and events are copied by the two
    INSERT ... SELECT alone, nothing read back, no reader. `server=False`: the map said PostgreSQL's copy
    would not be exact, so it is not tried. With `proven.map_cut`, the fork is given that part of the map
    in the same statements.

    `settle`, when given, decides the copier's layout and warnings (a check running on the reader):
    it is awaited once the events are copied, before any task is written.

    When the per_task rows need no more than their ids replaced, PostgreSQL copies the tasks itself
    while the reader checks, task by task, that the copy is exact; otherwise the reader feeds the
    Python rewrite while one COPY writes (without a reader: batch by batch on the one connection).
    """
    per_task_by_owner = copier.layout == "per_task" and copier.user_id == source.user_id
    path = "python" if per_task_by_owner and not server else "streamed"
    if proven is not None:
        try:
            events = await _proven_copy(svc, conn, source, cut, copier, proven.tasks, proven.map_cut)
            TASK_COPIES.labels("map").inc()
            return events
        except _CopyInPython as exc:
            log.info("tasks copied by the service instead of PostgreSQL: %s", exc)
            path = "python"
    if server and reader is not None and per_task_by_owner:
        try:
            events = await _server_copy(svc, conn, reader, source, cut, copier, guess)
            TASK_COPIES.labels("server").inc()
            return events
        except _CopyInPython as exc:
            # The savepoint is rolled back: nothing of the attempt remains.
            if guess is not None:
                raise GuessWrong(f"the guessed boundary was not proven: {exc}") from None
            log.info("tasks copied by the service instead of PostgreSQL: %s", exc)
            path = "python"
    if guess is not None:
        raise GuessWrong("only the server copy proves a guessed boundary")
    events = await _copy_events(svc, conn, source, copier, cut.events_before)
    if settle is not None:
        copier.layout, notes = await settle
        copier.warnings += notes
    if reader is not None:
        TASK_COPIES.labels(path).inc()
    await _copy_tasks(svc, conn, reader, source, cut, copier)
    return events


async def _copy_events(
    svc: Services, conn: Connection, source: SessionRow, copier: plan.TaskCopier, before: datetime | None
) -> int:
    events = await svc.store.events.copy_kept(
        conn, "event", session_id=source.id, owner=source.user_id, before=before,
        new_session_id=copier.session_id, new_user_id=copier.user_id,
    )  # fmt: skip
    return _capped(svc, events)


def _capped(svc: Services, events: int) -> int:
    cap = svc.settings.max_fork_events
    if cap and events > cap:
        # The copy stopped one row past the cap; raising rolls the whole fork back.
        raise Unprocessable(
            f"this fork would copy more than {cap} events, the most one fork may copy (MAX_FORK_EVENTS): "
            "fork before an earlier turn, or ask the operator to raise the limit"
        )
    return events


async def _server_copy(
    svc: Services,
    conn: Connection,
    reader: Connection,
    source: SessionRow,
    cut: Cut,
    copier: plan.TaskCopier,
    guess: Guess | None,
) -> int:
    """Copy the whole kept tasks inside PostgreSQL, then the events, in a savepoint, while the reader
    checks the same rows (fork.ServerCopyCheck); raise _CopyInPython, the savepoint undone, if one of
    them needs the Python rewrite. The cut task, if any, is rewritten in Python afterwards.

    With a guess, the events end where the exact event search (on the reader, started before) says,
    and the check also proves that no kept task carries the boundary."""
    store = svc.store
    check = plan.ServerCopyCheck(
        source_session_id=source.id, session_id=copier.session_id, user_id=copier.user_id,
        boundary=guess.invocation_id if guess is not None else None,
    )  # fmt: skip
    refused: list[Unprocessable] = []

    async def write() -> tuple[int, int]:
        copied = await store.events.copy_kept(
            conn, "task", session_id=source.id, owner=source.user_id, before=cut.tasks_before,
            new_session_id=copier.session_id, new_user_id=copier.user_id,
        )  # fmt: skip
        before = cut.events_before
        if guess is not None:
            before = await guess.events_search or cut.tasks_before
        return copied, await _copy_events(svc, conn, source, copier, before)

    async def verify() -> None:
        if guess is not None:
            await asyncio.wait((guess.events_search,))  # the reader runs one statement at a time
        try:
            async for row in store.tasks.stream_tasks_before(reader, source.id, source.user_id, cut.tasks_before):
                if not check.add(row):
                    return
        except Unprocessable as exc:
            refused.append(exc)  # raised once the write is done: it is not cancelled mid-statement

    async with conn.transaction():  # a savepoint
        (copied, events), _ = await together(write(), verify())
        if refused:
            raise refused[0]
        if check.mismatch is not None or copied != check.written:
            raise _CopyInPython(check.mismatch or f"{copied} tasks copied, {check.written} checked")
    copier.messages += check.messages
    copier.written += check.written
    if cut.partial is not None:
        new = copier.add(cut.partial.row, cut.partial.cut)
        await store.tasks.insert_tasks(conn, [new] if new is not None else [])
    return events


async def _proven_copy(
    svc: Services,
    conn: Connection,
    source: SessionRow,
    cut: Cut,
    copier: plan.TaskCopier,
    proven: KeptTasks,
    map_cut: ForkCut | None,
) -> int:
    """The kept whole tasks, then the events, copied inside PostgreSQL in a savepoint; the cut task, if any,
    rewritten in Python afterwards. Raises _CopyInPython (the savepoint undone) if PostgreSQL copied
    another number of tasks than the map holds (the guard held in this snapshot: it cannot, but a copy
    that is not the map's is never kept). With `map_cut` (no cut task), the events are copied first and
    the same two statements give the fork its map (turn_map.after_fork finishes it, or drops it when the
    copy is not the map's cut)."""
    store = svc.store
    kept = {"session_id": source.id, "owner": source.user_id, "new_session_id": copier.session_id,
            "new_user_id": copier.user_id}  # fmt: skip
    async with conn.transaction():  # a savepoint
        if map_cut is None:
            copied = await store.events.copy_kept(conn, "task", before=cut.tasks_before, **kept)
            if copied != proven.tasks:
                raise _CopyInPython(f"{copied} tasks copied, the turn map holds {proven.tasks}")
            events = await _copy_events(svc, conn, source, copier, cut.events_before)
        else:
            # Planned for their own parameters and not JIT-compiled: compiling the tasks' statement took 50 ms
            # at 100,000 events (the plain copy's 10 ms). The events first: their copy says whether the runs
            # are its cut, and names the last run's ends.
            await store.database.custom_plans(conn)
            forks = store.turn_maps.forks
            mapped = await forks.copy_events_mapping(conn, before=cut.events_before, cut=map_cut, **kept)
            events = _capped(svc, mapped.copied)
            tasks = None
            if mapped.sound:
                tasks = await forks.copy_tasks_mapping(
                    conn, before=cut.tasks_before, cut=map_cut, events=mapped, version=turn_map.VERSION, **kept
                )
                copied = tasks.copied
            else:
                copied = await store.events.copy_kept(conn, "task", before=cut.tasks_before, **kept)
            if copied != proven.tasks:
                raise _CopyInPython(f"{copied} tasks copied, the turn map holds {proven.tasks}")
            await turn_map.after_fork(store, conn, (copier.session_id, copier.user_id), tasks)
    copier.messages += proven.messages
    copier.written += proven.tasks
    if cut.partial is not None:
        new = copier.add(cut.partial.row, cut.partial.cut)
        await store.tasks.insert_tasks(conn, [new] if new is not None else [])
    return events


async def together(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Run both at once; if one fails, the other is cancelled and awaited before the error goes on."""
    one, two = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        await asyncio.wait((one, two), return_when=asyncio.FIRST_EXCEPTION)
        for task in (one, two):
            if task.done() and (error := task.exception()) is not None:
                raise error
        return one.result(), two.result()
    finally:
        await cancelled(one)
        await cancelled(two)


async def cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel the task (a no-op once it is done) and wait until it has stopped."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _copy_tasks(
    svc: Services, conn: Connection, reader: Connection | None, source: SessionRow, cut: Cut, copier: plan.TaskCopier
) -> None:
    """Stream the kept tasks through the copier into new rows, with bounded memory: read on the reader
    while one COPY writes, or, without a reader, batch by batch on the fork's connection."""
    if reader is not None and copier.layout == "merged":
        await svc.store.tasks.copy_task_text(conn, _merged_row(svc, reader, source, cut, copier))
        return
    if reader is not None:
        await svc.store.tasks.stream_new_tasks(conn, _new_tasks(svc, reader, source, cut, copier))
        return
    batch: list[NewTask] = []
    size = 0
    async for new in _new_tasks(svc, conn, source, cut, copier):
        batch.append(new)
        size += len(new.data)
        if size >= TASK_WRITE_BATCH_BYTES:
            await svc.store.tasks.insert_tasks(conn, batch)
            batch, size = [], 0
    await svc.store.tasks.insert_tasks(conn, batch)


async def kept_tasks(svc: Services, conn: Connection, source: SessionRow, cut: Cut) -> AsyncIterator[TaskRow]:
    async for row in svc.store.tasks.stream_tasks_before(conn, source.id, source.user_id, cut.tasks_before):
        yield row
    if cut.partial is not None:
        yield cut.partial.row


# The merged row goes to PostgreSQL in pieces of about this size.
MERGED_CHUNK_BYTES = 256 * 1024


async def _merged_row(
    svc: Services, reader: Connection, source: SessionRow, cut: Cut, copier: plan.TaskCopier
) -> AsyncIterator[bytes]:
    """The merged task as one row of COPY text (store.TASK_TEXT_COLUMNS), made while it is written:
    each kept task read on the reader is merged and its messages sent on, so the service holds a
    piece of the row and the artifacts, never the whole merged task. Nothing when no task is kept."""
    pending = bytearray()
    started = False
    async for row in kept_tasks(svc, reader, source, cut):
        parts = copier.merge(row, cut.partial.cut if cut.partial and row is cut.partial.row else None)
        if not started:
            # The row's first fields, known once the first task is merged: data follows them.
            pending += copy_text_fields(
                copier.merged_task_id, copier.merged_created_at, copier.now, copier.session_id, copier.user_id
            )
            started = True
        for part in parts:
            pending += copy_text(part)
        if len(pending) >= MERGED_CHUNK_BYTES:
            yield bytes(pending)
            pending.clear()
    end = copier.merged_end()
    if end is not None:
        pending += copy_text(end) + b"\t" + copy_text(copier.merged_version) + b"\n"
        yield bytes(pending)


async def _new_tasks(
    svc: Services, reader: Connection, source: SessionRow, cut: Cut, copier: plan.TaskCopier
) -> AsyncIterator[NewTask]:
    async for row in kept_tasks(svc, reader, source, cut):
        new = copier.add(row, cut.partial.cut if cut.partial and row is cut.partial.row else None)
        if new is not None:
            yield new
    final = copier.finish()
    if final is not None:
        yield final


@asynccontextmanager
async def snapshot_reader(svc: Services, conn: Connection, *, wanted: bool) -> AsyncIterator[Connection | None]:
    """A second connection that reads in the fork's own snapshot, so that reading overlaps with writing
    on the fork's connection. None when not wanted or when the pool cannot lend one without a wait:
    the fork then reads and writes on its own connection."""
    # Taken only when the pool can lend one without waiting for another to come back (one idle, or room to
    # make one): the fork holds its own, and a task that holds a pooled connection never waits for another.
    pool = svc.pool
    if not wanted or (pool.get_idle_size() == 0 and pool.get_size() >= pool.get_max_size()):
        yield None
        return
    try:
        reader = await svc.pool.acquire(timeout=READER_WAIT_SECONDS)
    except TimeoutError:  # another took the idle one first and making a new one took too long
        yield None
        return
    snapshot = reader.transaction(isolation="repeatable_read", readonly=True)
    started = False
    try:
        await snapshot.start()
        started = True
        await svc.store.database.use_snapshot(reader, await svc.store.database.export_snapshot(conn))
        yield reader
    finally:
        await _let_go(svc, reader, snapshot if started else None)


async def _let_go(svc: Services, reader: PoolConnectionProxy[Record], snapshot: Transaction | None) -> None:
    """End the reader's transaction and return it to the pool. It only read, so neither step can change
    the fork or rewind: a failure (a reader the database dropped, a reset slower than allowed) is
    logged, the pool closes that connection, and the operation goes on. (asyncpg would apply the
    acquire's 50 ms timeout to the reset on release: the release gets its own.)"""
    try:
        if snapshot is not None:
            await snapshot.rollback()  # read only: the same as a commit
    except CONNECTION_ERRORS as exc:
        log.warning("the reader's transaction did not end: %s", type(exc).__name__)
    finally:
        try:
            await svc.pool.release(reader, timeout=READER_RELEASE_SECONDS)
        except CONNECTION_ERRORS as exc:
            log.warning("the reader connection was not returned to the pool: %s", type(exc).__name__)
