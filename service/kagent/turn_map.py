"""The turn map: per session, what the service would otherwise read again from every event and task of it
(each turn's first event and task, its events, the running sums a dry run answers), kept in the service's
own schema (migration 0008, docs/turn-map.md). Nothing is added to kagent's tables or to its writes.

A map is made the first time a session is asked about (after that ask, in the background, for a listing or a
fork: `first_touch_exact`), extended from the events newer than its
watermark and the tasks kagent wrote since, kept true by the service's own rewinds (and forgotten by an
undo), and read only after its guard (`trusted`) found that what it claims still holds: kagent's
`session.updated_at` (which its InsertEvent and UpsertTask move), the soft-deleted rows of the session
(which they do not), and the map's own row counts. A map that does not hold is extended when only new
rows came, else rebuilt; an extension that finds the session's live events are not the map's plus the
new ones (a row that came late, a row gone) rebuilds too. Never trusted blindly: the callers read it
only inside their own snapshot, after `trusted` said yes there, and use the exact searches otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
import msgspec

from service.kagent import dialects
from service.kagent.store import Store
from service.kagent.store.base import TASK_FETCH_BATCH, Connection
from service.kagent.store.turn_map import (
    ForkCut,
    ForkTasks,
    KagentMarks,
    MapCounts,
    MappedTask,
    MapState,
    TaskFigures,
)

log = logging.getLogger("kagent_fork")

VERSION = 1
USER_TEXT_CHARS = 200
# A fork's new task and session ids are uuid4 strings: the map's task figures are made with ids this long.
_NEW_ID = dialects.PLACEHOLDER_ID


class Unmappable(Exception):
    """A task the service's reader refuses (an unknown protocol_version): the exact path answers."""


def trusted(state: MapState | None, marks: KagentMarks, last_run: tuple[int, int]) -> bool:
    """Whether the map holds what it claims, against kagent's rows read now."""
    return (
        _intact(state, marks, last_run) and state is not None and marks.session_updated_at == state.session_updated_at
    )


def _intact(state: MapState | None, marks: KagentMarks, last_run: tuple[int, int]) -> bool:
    """The map is whole and nothing it holds was soft-deleted by kagent: what kagent wrote since, if
    anything, is new rows (an extension)."""
    return (
        state is not None
        and state.version == VERSION
        and marks.events_deleted == state.events_deleted
        and marks.tasks_deleted == state.tasks_deleted
        and last_run == (state.runs, state.events)
    )


async def usable(store: Store, conn: Connection, session_id: str, owner: str) -> bool:
    """In the caller's snapshot: may the session's map be read? (It exists and its guard holds.)"""
    if store.turn_map_min_tasks is None:
        return False
    return trusted(*await store.turn_maps.guard(conn, session_id, owner))


async def prepare(store: Store, conn: Connection, session_id: str, owner: str) -> bool:
    """Outside any transaction: the session's map made true to kagent's rows now, if the session is large
    enough to have one. False: no map (small, the map is off, or a task the reader refuses), or, within
    `first_touch_exact`, a map still to be built (from scratch: none yet, or one to rebuild), which is then
    built after the operation, in the background."""
    minimum = store.turn_map_min_tasks
    if minimum is None:
        return False
    state, marks, last_run = await store.turn_maps.guard(conn, session_id, owner)
    if trusted(state, marks, last_run):
        return True  # the common case, read without the lock or a transaction of its own
    if state is None and minimum > 0 and await store.tasks.count_tasks(conn, session_id, owner) < minimum:
        return False
    deferred = _deferred.get()
    if deferred is not None and not _intact(state, marks, last_run):
        deferred.sessions.append((session_id, owner))
        return False
    try:
        return await ensure(store, conn, session_id, owner)
    except Unmappable:
        return False
    except asyncpg.SerializationError:
        return False  # a rewind changed the map meanwhile: this request reads exactly, the next one maps


Connect = Callable[[], AbstractAsyncContextManager[Connection]]


@dataclass
class _Deferred:
    sessions: list[tuple[str, str]] = field(default_factory=list)


_deferred: ContextVar[_Deferred | None] = ContextVar("turn_map_deferred", default=None)
_building: dict[tuple[str, str], asyncio.Task[None]] = {}


@asynccontextmanager
async def first_touch_exact(store: Store, connect: Connect) -> AsyncIterator[None]:
    """Around an operation: a session whose map must be built from scratch (the first touch of a session
    kagent wrote before anyone asked about it, or a map to rebuild) is answered by the exact reads, as
    without a map, and its map is built once the operation is over, in the background, on a connection of
    its own (`connect`), so that the next ask reads it (docs/turn-map.md, "The first touch"). Without
    `store.turn_map_background` the map is built first, inside the operation, as before."""
    if not store.turn_map_background:
        yield
        return
    deferred = _Deferred()
    token = _deferred.set(deferred)
    try:
        yield
    finally:
        _deferred.reset(token)
        for session_id, owner in deferred.sessions:
            _start(store, connect, session_id, owner)


def _start(store: Store, connect: Connect, session_id: str, owner: str) -> None:
    key = (session_id, owner)
    if key in _building:
        return  # one build of a session at a time in this process (and one in all: ensure's lock)
    task = asyncio.get_running_loop().create_task(_build_later(store, connect, session_id, owner))
    _building[key] = task
    task.add_done_callback(lambda _: _building.pop(key, None))


async def _build_later(store: Store, connect: Connect, session_id: str, owner: str) -> None:
    try:
        async with connect() as conn:
            await prepare(store, conn, session_id, owner)  # its guard again: another replica may have built it
    except Exception as exc:  # the operation was answered exactly; the next ask builds it
        log.warning("a session's turn map was not built in the background: %s", type(exc).__name__)


async def settled(*, cancel: bool = False) -> None:
    """Once every background build this process started is over (the tests), or cancelled (`cancel`: the
    app's shutdown, before its pool closes; a cancelled build writes nothing, and the next ask builds it)."""
    while _building:
        running = list(_building.values())
        for task in running if cancel else ():
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def ensure(store: Store, conn: Connection, session_id: str, owner: str) -> bool:
    """Make the map true now: nothing to do, an extension, or a rebuild. One at a time per session."""
    maps = store.turn_maps
    lock = store.lineage.key_lock(conn, "turn-map", f"{session_id}\n{owner}")
    async with lock:
        async with conn.transaction(isolation="repeatable_read"):
            state, marks, last_run = await maps.guard(conn, session_id, owner)
            if trusted(state, marks, last_run):
                return True
            if (
                state is not None
                and _intact(state, marks, last_run)
                and await _extend(store, conn, session_id, owner, state, marks)
            ):
                return True
            counts = await _build(store, conn, session_id, owner, marks)
        await store.database.refresh_map_statistics(conn, counts.runs)
        return True


async def _build(store: Store, conn: Connection, session_id: str, owner: str, marks: KagentMarks) -> MapCounts:
    maps = store.turn_maps
    await maps.forget(conn, session_id, owner, rows=True)
    await maps.map_runs_from(conn, session_id, owner, None, seq=1, events=0, bytes_=0, text_chars=0)
    stamps = {s.id: s.updated_at for s in await maps.live_task_stamps(conn, session_id, owner)}
    batch: list[MappedTask] = []
    async for row in store.tasks.stream_tasks_before(conn, session_id, owner, None):
        batch.append(
            _digest(session_id, owner, row.id, row.created_at, stamps.get(row.id), row.protocol_version, row.data)
        )
        if len(batch) >= TASK_FETCH_BATCH * 8:
            await maps.add_tasks(conn, session_id, owner, batch)
            batch = []
    await maps.add_tasks(conn, session_id, owner, batch)
    await maps.refresh_turns(conn, session_id, owner, None)
    return await _save(store, conn, session_id, owner, marks)


async def _extend(
    store: Store, conn: Connection, session_id: str, owner: str, state: MapState, marks: KagentMarks
) -> bool:
    """The map extended by kagent's rows written since it was made; False: they are not only new rows
    (the caller rebuilds)."""
    maps = store.turn_maps
    last = await maps.last_run(conn, session_id, owner)
    # One pass over the session's rows counts them and names the events of the runs to make again (the
    # last run, which new events may continue, and the new ones), read then by key.
    live, after, ids = await maps.live_events_after(
        conn, session_id, owner, state.watermark, last.first if last is not None else None
    )
    if live != state.events + after:
        return False
    touched: set[str] = set()
    if after:
        if last is None:
            _, made = await maps.map_runs_from(
                conn, session_id, owner, None, seq=1, events=0, bytes_=0, text_chars=0, ids=ids
            )
        else:
            touched.update(await maps.drop_runs_from(conn, session_id, owner, last.seq))
            _, made = await maps.map_runs_from(
                conn, session_id, owner, last.first, seq=last.seq, events=last.events_before,
                bytes_=last.bytes_before, text_chars=last.text_chars_before, ids=ids,
            )  # fmt: skip
        touched.update(made)
    changed, gone = await maps.changed_tasks(conn, session_id, owner)
    if changed or gone:
        touched.update(await maps.forget_tasks(conn, session_id, owner, [*changed, *gone]))
        rows = await maps.tasks_by_id(conn, session_id, owner, changed)
        digests = [
            _digest(session_id, owner, r.id, r.created_at, r.updated_at, r.protocol_version, r.data) for r in rows
        ]
        for d in digests:
            touched.update(d.invocation_ids)
        await maps.add_tasks(conn, session_id, owner, digests)
    await maps.refresh_turns(conn, session_id, owner, sorted(touched))
    counts = await _save(store, conn, session_id, owner, marks)
    return counts.events == live


async def _save(store: Store, conn: Connection, session_id: str, owner: str, marks: KagentMarks) -> MapCounts:
    maps = store.turn_maps
    counts = await maps.counts(conn, session_id, owner)
    watermark = await maps.last_mapped_event(conn, session_id, owner)
    await maps.save_state(conn, session_id, owner, VERSION, marks, counts, watermark)
    return counts


def _digest(
    session_id: str,
    owner: str,
    task_id: str,
    created_at: datetime,
    updated_at: datetime | None,
    protocol_version: str | None,
    data: str,
) -> MappedTask:
    """A task as the map keeps it, read by the service's one task reader (as turns.with_tasks reads it)."""
    try:
        task = dialects.decode(data)
    except dialects.TaskFormatError:
        return MappedTask(task_id=task_id, created_at=created_at, updated_at=updated_at, state=None,
                          invocation_ids=[], user_texts=[], figures=None, marks="{}")  # fmt: skip
    dialect = dialects.TaskDialect.of(protocol_version)
    if dialect is None:
        raise Unmappable(f"task {task_id} has protocol_version {protocol_version!r}")
    invocations = list(dict.fromkeys(dialects.invocation_ids(task)))
    texts: list[str | None] = []
    for invocation_id in invocations:
        text = dialects.first_user_text(task, dialect, invocation_id)
        texts.append(text[:USER_TEXT_CHARS] if text else None)
    chat = dialects.chat_marks(task, dialect)
    marks = {
        inv: [m.message_ids, m.call_ids, m.response_ids, m.text_count]
        for inv in invocations
        if (m := chat.get(inv)) is not None
    }
    return MappedTask(
        task_id=task_id, created_at=created_at, updated_at=updated_at, state=dialects.state(task),
        invocation_ids=invocations, user_texts=texts, marks=msgspec.json.encode(marks).decode(),
        figures=_figures(task, dialect, text=data, task_id=task_id, session_id=session_id, owner=owner),
    )  # fmt: skip


def _figures(
    task: dialects.JSON, dialect: dialects.TaskDialect, *, text: str, task_id: str, session_id: str, owner: str
) -> TaskFigures:
    """What a per_task fork writes for the whole task (plan.TaskCopier.add: closed if unfinished, its ids
    rewritten), with an empty user id; the places that hold the user id, to add the caller's; and whether
    PostgreSQL's text copy writes the same for a fork by the owner (plan.ServerCopyCheck's rule)."""
    terminal = dialects.is_terminal(task, dialect)
    prepared = task if terminal else dialects.cancel(task, dialect)
    written = len(
        dialects.encode(
            dialects.rewrite(prepared, dialects.Rewrite(task_id=_NEW_ID, context_id=_NEW_ID, user_id=""))
        ).encode()
    )
    targets = dialects.rewrite_targets(prepared)
    if targets is not None:
        places = len(targets.user_ids)
    else:
        one = dialects.Rewrite(task_id=_NEW_ID, context_id=_NEW_ID, user_id="x")
        places = len(dialects.encode(dialects.rewrite(prepared, one)).encode()) - written
    server_copy = terminal and dialects.replacing_ids_rewrites(
        text, task, task_id=task_id, context_id=session_id, user_id=owner
    )
    return TaskFigures(
        messages=len(dialects.history(prepared)), bytes=written, user_places=places, terminal=terminal,
        server_copy=server_copy,
    )  # fmt: skip


async def after_rewind(
    store: Store,
    conn: Connection,
    session_id: str,
    owner: str,
    *,
    events_from: datetime,
    tasks_from: datetime,
    hidden: tuple[int, int],
    session_updated_at: datetime | None,
    replacement: tuple[str, datetime, datetime | None, str | None, str] | None,
    was_trusted: bool,
) -> None:
    """In a rewind's transaction, once its rows are hidden: the map cut as the rewind cut the session
    (only the runs, turns and tasks it hid), or forgotten when the map was not read by the rewind or the
    cut falls inside a run. Its marks are its old ones plus the (events, tasks) the rewind `hidden`: a
    soft delete by kagent meanwhile leaves them short, and the next guard rebuilds."""
    maps = store.turn_maps
    await maps.hold(conn, session_id, owner)
    state = await maps.state(conn, session_id, owner)
    if state is None:
        return
    first = await maps.first_run_from(conn, session_id, owner, events_from)
    if not was_trusted or (first is not None and first[1]):
        await maps.forget(conn, session_id, owner, rows=False)
        return
    # Turns hidden whole are dropped as they are (read before their runs and tasks go); only the turns
    # with rows on both sides of the cut, and those its replacement task carries, are made again.
    gone = await maps.drop_hidden_turns(conn, session_id, owner, events_from, tasks_from)
    touched = set(await maps.drop_runs_from(conn, session_id, owner, first[0])) if first is not None else set()
    touched.update(await maps.forget_tasks_from(conn, session_id, owner, tasks_from))
    touched -= gone
    if replacement is not None:
        digest = _digest(session_id, owner, *replacement)
        touched.update(digest.invocation_ids)
        await maps.add_tasks(conn, session_id, owner, [digest])
    await maps.refresh_turns(conn, session_id, owner, sorted(touched))
    marks = KagentMarks(
        session_updated_at=session_updated_at,
        events_deleted=state.events_deleted + hidden[0],
        tasks_deleted=state.tasks_deleted + hidden[1],
    )
    await _save(store, conn, session_id, owner, marks)


async def after_undo(
    store: Store,
    conn: Connection,
    session_id: str,
    owner: str,
    *,
    restored: tuple[int, int],
    replacement_hidden: bool,
    session_updated_at: datetime | None,
    was_trusted: bool,
) -> None:
    """In an undo's transaction, once the rows are back: the map extended by them (they all lie past its
    watermark, the rewind having cut it there), or forgotten when it was not trusted or does not extend."""
    maps = store.turn_maps
    await maps.hold(conn, session_id, owner)
    state = await maps.state(conn, session_id, owner)
    if state is None:
        return
    marks = KagentMarks(
        session_updated_at=session_updated_at,
        events_deleted=state.events_deleted - restored[0],
        tasks_deleted=state.tasks_deleted - restored[1] + (1 if replacement_hidden else 0),
    )
    if not was_trusted or not await _extend(store, conn, session_id, owner, state, marks):
        await maps.forget(conn, session_id, owner, rows=False)


async def fork_cut(
    store: Store, conn: Connection, session_id: str, owner: str, before: datetime | None
) -> ForkCut | None:
    """In a fork's snapshot, the source's map trusted there: where a fork keeping the events before `before`
    (None: all) cuts the map; None when the cut falls inside a run (the fork is left unmapped)."""
    if store.turn_map_min_tasks is None:
        return None
    return await store.turn_maps.forks.fork_cut(conn, session_id, owner, before)


async def after_fork(store: Store, conn: Connection, fork: tuple[str, str], tasks: ForkTasks | None) -> bool:
    """In a fork's transaction, once its rows are written with its map (the store's copy_events_mapping, then
    copy_tasks_mapping; `tasks` None: the events were not the map's cut, so the tasks were copied alone):
    the fork's map finished, or dropped (False: the fork is mapped on its first ask, as any session) when
    the copy is not exactly the map's cut. The turns with kept rows that rows past the cut carry too are
    made again from the fork's runs and tasks, as a rewind makes the turns it cuts."""
    maps = store.turn_maps
    new_id, user = fork
    if tasks is None or not tasks.sound or tasks.mapped != tasks.copied:
        await maps.forget(conn, new_id, user, rows=True)
        return False
    await maps.refresh_turns(conn, new_id, user, sorted(tasks.remake))
    return True
