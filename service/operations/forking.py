"""The service's operations, each one transaction, shared by the HTTP API and the CLI."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from datetime import datetime

import msgspec

from service.errors import NotFound, TooManyRequests, Unprocessable
from service.identity import Caller, Seen, settle
from service.kagent import dialects, frameworks, turn_map
from service.kagent.store.base import CONNECTION_ERRORS, Connection
from service.kagent.store.events import EventStats
from service.kagent.store.lineage import Lineage
from service.kagent.store.sessions import SessionRow
from service.kagent.store.tasks import TaskRow
from service.kagent.store.turn_map import ForkCut
from service.operations import checkpoints, copying, crewai_state, plan, summary
from service.operations.boundary import NamedTurn, mapped_boundary, named_turn
from service.operations.copying import (
    Cut,
    Guess,
    GuessWrong,
    Proven,
    cancelled,
    copy_rows,
    kept_tasks,
    snapshot_reader,
    together,
)
from service.schemas import (
    ForkedSession,
    ForkInfo,
    ForkPlan,
    ForkRequest,
    Summary,
    one_boundary,
    session_json,
)
from service.services import Services

_encoder = msgspec.json.Encoder()
log = logging.getLogger("kagent_fork")


# Work a caller adds to a fork's own transaction, once its rows are written (a what-if's job row).
AfterFork = Callable[[Connection, "ForkedSession"], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class ForkOutcome:
    data: ForkedSession | ForkPlan | msgspec.Raw
    created: bool  # 201 with a Location, else 200
    replayed: bool
    session_id: str | None


async def _find_cut(
    svc: Services,
    conn: Connection,
    reader: Connection | None,
    source: SessionRow,
    req: ForkRequest,
    last_task: TaskRow | None,
    *,
    mapped: bool,
    named: NamedTurn,
    found: plan.BoundaryTask | None = None,
) -> Cut:
    """The cut at the named turn; `found`: its task as a replay's span found it (Into.found)."""
    store, sid, owner = svc.store, source.id, source.user_id
    boundary = named.invocation_id
    events_before = boundary_task = None
    if boundary is not None and mapped:
        events_before, candidates = await mapped_boundary(svc, conn, source, boundary)
        boundary_task = plan.find_boundary_task(candidates, boundary)
    elif boundary is not None:
        prefilter = dialects.verbatim_in_json(boundary)
        known = await _unchanged(svc, conn, source, found)
        event_search = store.events.boundary_event_at(conn, sid, owner, boundary, prefilter=prefilter)
        if known is not None:
            events_before, boundary_task = await event_search, known
        elif reader is not None:
            # Neither search has an index to use: each reads all of the session's rows of its table, so
            # with a reader they run at once, on two connections in one snapshot.
            events_before, candidates = await together(
                event_search, store.tasks.tasks_mentioning(reader, sid, owner, boundary, prefilter=prefilter)
            )
        else:
            events_before = await event_search
            candidates = await store.tasks.tasks_mentioning(conn, sid, owner, boundary, prefilter=prefilter)
        if known is None:
            boundary_task = plan.find_boundary_task(candidates, boundary)
    return await _cut_of(
        svc, conn, source, req, last_task, mapped=mapped, named=named, events_at=events_before, task=boundary_task
    )


async def _unchanged(
    svc: Services, conn: Connection, source: SessionRow, found: plan.BoundaryTask | None
) -> plan.BoundaryTask | None:
    """`found` (the boundary's task a replay's span found in its snapshot) when this snapshot holds it unchanged,
    live and the source's: no task made since is older, so it is still the first that carries the boundary (as
    tasks_mentioning and plan.find_boundary_task would find it). None: search again."""
    if found is None:
        return None
    row = await svc.store.tasks.owned_task(conn, source.id, source.user_id, found.row.id)
    return found if row == found.row else None


async def _cut_of(
    svc: Services,
    conn: Connection,
    source: SessionRow,
    req: ForkRequest,
    last_task: TaskRow | None,
    *,
    mapped: bool,
    named: NamedTurn,
    events_at: datetime | None,
    task: plan.BoundaryTask | None,
) -> Cut:
    """The cut at the named turn, given where its events begin (`events_at`, boundary_event's answer) and its
    first task (`task`, plan.find_boundary_task's), when it is named by its invocation."""
    store, sid, owner = svc.store, source.id, source.user_id
    boundary = named.invocation_id
    warnings: list[str] = []
    events_before = tasks_before = None
    partial = None
    found = False
    if named.task is not None:
        # A turn known by its task alone: its tasks from the task on, its events from its input event.
        found = True
        events_before, tasks_before = named.events_from, named.task.created_at
        if named.note is not None:
            warnings.append(named.note)
    elif named.missing is not None:
        if req.if_boundary_missing == "error":
            raise NotFound(f"task {named.missing} not found in session {sid}")
        warnings.append(f"task {named.missing} not found in the session: the whole conversation is copied")
    if boundary is not None:
        events_before = events_at
        found = events_before is not None or task is not None
        if not found:
            if req.if_boundary_missing == "error":
                raise NotFound(f"invocation {boundary} not found in session {sid}")
            warnings.append(f"invocation {boundary} not found in the session: the whole conversation is copied")
        elif task is None:
            tasks_before = events_before
            warnings.append(f"no task carries invocation {boundary}: tasks created before its first event are copied")
        else:
            tasks_before = task.row.created_at
            partial = task if task.cut > 0 else None
            if events_before is None:
                events_before = task.row.created_at
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
            if invocation is not None and mapped:
                start = (await mapped_boundary(svc, conn, source, invocation))[0]
            elif invocation is not None:
                start = await store.events.boundary_event_at(
                    conn, sid, owner, invocation, prefilter=dialects.verbatim_in_json(invocation)
                )
            start = start or row.created_at
            events_before = start if events_before is None else min(events_before, start)
    return Cut(
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
        data = dialects.decode(last.data)
    except dialects.TaskFormatError:
        return None
    if dialects.is_terminal(data, plan.dialect_of(last)):
        return None
    invocations = dialects.invocation_ids(data)
    return (invocations[0] if invocations else None), last, dialects.state(data)


async def _lineage_parent(svc: Services, conn: Connection, source: SessionRow) -> tuple[str, str, int]:
    """(root session, root owner, depth of the new fork)."""
    parent = await svc.store.lineage.lineage_of(conn, source.id, source.user_id)
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
    if (first := await svc.store.tasks.first_task(conn, source.id, source.user_id)) is not None:
        try:
            text = dialects.first_user_text(dialects.decode(first.data), plan.dialect_of(first))
        except (dialects.TaskFormatError, Unprocessable):
            text = None
    if text is None:
        text = await svc.store.events.first_user_event_text(conn, source.id, source.user_id)
    return plan.default_name(source.name, text)


def request_hash(session_id: str, req: ForkRequest) -> str:
    return hashlib.sha256(session_id.encode() + b"\n" + _encoder.encode(req)).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Into:
    """Where a fork goes other than as the plain API call: the agent it belongs to (a what-if forks
    into another agent; None: the source's) and work done in its transaction once its rows are written."""

    agent_id: str | None = None
    then: AfterFork | None = None
    # The boundary's task as a replay's span found it, in its own snapshot: taken when it is unchanged in the
    # fork's (_unchanged), so that a replay's forks do not each search the session's tasks again.
    found: plan.BoundaryTask | None = None


async def fork(
    svc: Services,
    caller: Caller,
    session_id: str,
    req: ForkRequest,
    idempotency_key: str | None = None,
    *,
    into: Into | None = None,
    seen: Seen | None = None,
) -> ForkOutcome:
    """Fork chat from here: a new session holding the conversation before the boundary turn. `seen`: the source's
    access when the operation's door settled it (a replay's, once for all its forks, whose request its engine
    checked); else the request is checked and the access settled here, once."""
    if seen is None:
        one_boundary(req.rewind_before_invocation_id, req.rewind_before_task_id, required=False)
    try:
        return await _fork_or_doubt(svc, caller, session_id, req, idempotency_key, into or Into(), seen)
    except CommitInDoubt as doubt:
        # A success is answered as one once committed: the lineage record is written in the fork's transaction.
        async with svc.connection() as conn:
            if await svc.store.lineage.fork_exists(conn, doubt.outcome.session_id or "", caller.user_id):
                log.warning("the connection failed at a fork's commit, which was made: answered as made")
                return doubt.outcome
        raise doubt.__cause__ or doubt from None


async def _fork_or_doubt(
    svc: Services,
    caller: Caller,
    session_id: str,
    req: ForkRequest,
    idempotency_key: str | None,
    into: Into,
    seen: Seen | None,
) -> ForkOutcome:
    # A source never asked about is forked (or planned) from kagent's rows and mapped after (docs/turn-map.md).
    async with turn_map.first_touch_exact(svc.store, svc.connection), svc.connection() as conn:
        if idempotency_key is None or req.dry_run:
            seen = seen or await settle(svc, conn, caller, session_id)
            return await _fork_within_rate(svc, conn, seen, req, None, into)
        digest = request_hash(session_id, req)
        # Concurrent retries of one key wait here, then find the first one's answer.
        async with svc.store.lineage.key_lock(conn, f"fork:{caller.user_id}", idempotency_key):
            stored = await svc.store.lineage.idempotent_answer(
                conn, caller.user_id, idempotency_key, svc.settings.idempotency_ttl_seconds
            )
            if stored is not None:
                stored_hash, answer = stored
                if stored_hash != digest:
                    raise Unprocessable("Idempotency-Key was already used with a different request")
                return ForkOutcome(data=msgspec.Raw(answer.encode()), created=False, replayed=True, session_id=None)
            seen = seen or await settle(svc, conn, caller, session_id)
            return await _fork_within_rate(svc, conn, seen, req, (idempotency_key, digest), into)


async def _fork_within_rate(
    svc: Services, conn: Connection, seen: Seen, req: ForkRequest, idempotency: tuple[str, str] | None, into: Into
) -> ForkOutcome:
    """A fork within FORK_RATE_PER_MINUTE: at most that many forks made by one user in any minute,
    counted from the lineage records (dry runs, replays and refused forks are not forks). A connection that
    fails once the fork's rows are written (at its COMMIT, or as the rate's lock is let go) leaves the fork
    in doubt (CommitInDoubt)."""
    rate = 0 if req.dry_run else svc.settings.fork_rate_per_minute
    written: list[ForkOutcome] = []
    try:
        if rate == 0:
            return await _fork_in_transaction(svc, conn, seen, req, idempotency, into, 0, written)
        # A user's forks run one at a time, in every replica, so that counting them and committing a new
        # one are atomic. The lock is taken before the fork's snapshot: it sees every fork made before.
        async with svc.store.lineage.key_lock(conn, "fork-rate", seen.caller.user_id):
            return await _fork_in_transaction(svc, conn, seen, req, idempotency, into, rate, written)
    except CONNECTION_ERRORS as exc:
        if written and written[0].created:
            raise CommitInDoubt(written[0]) from exc
        raise


class CommitInDoubt(Exception):
    """The fork's connection failed once its rows were written (at its COMMIT, or while its reader was let go):
    whether it was committed is known only by looking (fork() does, on another connection)."""

    def __init__(self, outcome: ForkOutcome) -> None:
        super().__init__("the connection failed at the fork's commit")
        self.outcome = outcome


async def _fork_in_transaction(
    svc: Services,
    conn: Connection,
    seen: Seen,
    req: ForkRequest,
    idempotency: tuple[str, str] | None,
    into: Into,
    rate: int,
    written: list[ForkOutcome],
) -> ForkOutcome:
    """The fork in its one REPEATABLE READ transaction; `written` gets the answer once the rows are written,
    before the commit."""
    store, caller, visible, framework = svc.store, seen.caller, seen.row, seen.framework
    # The source's turn map, made true to kagent's rows first (its own short transaction); read below only
    # if its guard holds in the fork's snapshot.
    mapped = await turn_map.prepare(store, conn, visible.id, visible.user_id)
    # One snapshot for every read: a rewind or an agent appending events while the fork runs
    # changes nothing the fork sees, so the fork is a prefix of one state of the conversation.
    async with conn.transaction(isolation="repeatable_read"), AsyncExitStack() as stack:
        if rate and (wait := await store.lineage.fork_rate_wait(conn, caller.user_id, rate)) is not None:
            retry = max(1, math.ceil(wait))
            raise TooManyRequests(
                f"too many forks: at most {rate} a minute for each user (FORK_RATE_PER_MINUTE); retry in {retry} s",
                retry_after=retry,
            )
        notes = await _refusals(svc, conn, seen, req)
        # The rows are read from the runtime's own session row when it wrote them under kagent's default user.
        runtime = await frameworks.runtime_session(store, conn, visible, framework, seen.users)
        source = runtime or visible
        sid, owner = source.id, source.user_id
        last_task = await store.tasks.last_task_before(conn, sid, owner, None)
        if framework == "langgraph" or (framework == "openai-agents" and req.task_layout == "auto"):
            # LangGraph: its checkpoints name each turn's task, one copy per task (_refusals refused merged).
            # OpenAI Agents SDK: one task a turn, as the runtime wrote them (and as kagent's UI shows the
            # source), which the turn listing and the cut at a turn's input event pair with its input events.
            req = msgspec.structs.replace(req, task_layout="per_task")
        elif (
            framework != "crewai"  # kagent-crewai writes tasks and its crewai rows, no event
            and last_task is not None
            and not req.tasks_only
            and not await store.sessions.has_events(conn, sid, owner)
        ):
            raise Unprocessable("this session has tasks but no events: its agent keeps its state outside kagent")
        mapped = mapped and await turn_map.usable(store, conn, sid, owner)
        large = (  # a dry run without a map too: it reads the events while it reads the tasks
            last_task is not None
            and not (req.dry_run and mapped)
            and await store.tasks.count_tasks(conn, sid, owner) >= copying.LARGE_FORK_TASKS
        )
        root_id, root_owner, depth = await _lineage_parent(svc, conn, visible)
        named = (  # a turn named by its invocation is named: its task is looked for with the cut
            NamedTurn(invocation_id=req.rewind_before_invocation_id)
            if req.rewind_before_task_id is None
            else await named_turn(svc, conn, source, None, req.rewind_before_task_id)
        )
        # From here the request names the turn by its invocation when it has one (the answer says both).
        req = msgspec.structs.replace(req, rewind_before_invocation_id=named.invocation_id)
        fork = _Fork(
            svc=svc, conn=conn, reader=None, caller=caller, source=source, req=req, idempotency=idempotency,
            name=req.name or await _default_name(svc, conn, dataclasses.replace(source, name=visible.name)),
            root_id=root_id, root_owner=root_owner, depth=depth, into=into, mapped=mapped, framework=framework,
            notes=notes, parent=visible, runtime_user=runtime.user_id if runtime else None,
            runtime_row=runtime is not None and await store.sessions.get_session(conn, sid, owner) is not None,
            users=seen.users, written=written,
        )  # fmt: skip
        if mapped:
            # One plan, chosen once from what the turn map knows: the cut is a lookup; a per_task fork by the
            # owner whose kept tasks the map proves exact for PostgreSQL's text copy is the two INSERT ...
            # SELECT alone; any other is written by the Python rewrite, fed by a reader when large.
            cut = await _find_cut(svc, conn, None, source, req, last_task, mapped=True, named=named)
            proven = await _proven(fork, cut) if not req.dry_run else None
            wanted = large and proven is None and not req.dry_run
            reader = await stack.enter_async_context(snapshot_reader(svc, conn, wanted=wanted))
            return await _plan_and_write(dataclasses.replace(fork, reader=reader, proven=proven), cut, None)
        reader = await stack.enter_async_context(snapshot_reader(svc, conn, wanted=large))
        fork = dataclasses.replace(fork, reader=reader)
        if (planned := await _streamed_plan(fork, named, last_task)) is not None:
            return planned
        boundary = req.rewind_before_invocation_id
        # Without the turn map the exact cut decompresses every task of the session; a guess from the last
        # turns, proven by the server copy, spares that. With it the exact cut is a read of the map.
        # Only the server copy (per_task tasks of the owner) proves a guess: a guess for a merged fork
        # was always undone (360 ms lost at 100,000 legacy events, bench/pieces.py), so none is made.
        # A replay's fork whose span found the boundary's task needs no guess: that task is checked by its id.
        guessing = not mapped and caller.user_id == owner and not req.dry_run and into.found is None
        if guessing and reader is not None and boundary is not None and await _always_per_task(svc, conn, source, req):
            guessed = await _guess_cut(svc, conn, reader, source, boundary)
            if guessed is not None:
                cut, guess = guessed
                stack.push_async_callback(cancelled, guess.events_search)
                try:
                    async with conn.transaction():  # a savepoint: a wrong guess leaves nothing behind
                        return await _plan_and_write(fork, cut, guess)
                except GuessWrong as exc:
                    log.info("the boundary guessed from the last turns is not the fork's: %s", exc)
                # Let the reader's search end: cancelled mid-statement, it would abort the reader's
                # transaction, which the exact cut below reads in.
                await asyncio.wait((guess.events_search,))
        cut = await _find_cut(svc, conn, reader, source, req, last_task, mapped=mapped, named=named, found=into.found)
        return await _plan_and_write(fork, cut, None)


async def _refusals(svc: Services, conn: Connection, seen: Seen, req: ForkRequest) -> tuple[str, ...]:
    """422 for a session whose agent keeps state this fork cannot copy (docs/frameworks.md); else the
    warnings its framework adds."""
    store, sid, framework = svc.store, seen.row.id, seen.framework
    in_pod = None  # what keeps the conversation of an agent that keeps it in its own pod
    if framework == "claude":
        in_pod = (
            "this session's agent (Claude Agent SDK) keeps its conversation in its own pod, not in kagent's database"
        )
    elif framework == "crewai" and await crewai_state.flow_in_pod(store, conn, sid, seen.users):
        in_pod = crewai_state.FLOW_IN_POD
    if req.tasks_only and in_pod is None and framework != "unknown":
        raise Unprocessable(
            f"tasks_only forks the visible chat of an agent that keeps its conversation in its own pod (Claude "
            f"Agent SDK, a CrewAI flow); this session's agent ({framework}) keeps it in kagent's database: fork "
            "without it"
        )
    if in_pod is not None and not req.tasks_only:
        raise Unprocessable(
            f"{in_pod}: a fork cannot give it the conversation. Send tasks_only: true to fork the visible chat "
            "only (the agent will not remember it)"
        )
    if in_pod is not None or req.tasks_only:
        return ("a fork of the visible chat only: the agent keeps its conversation in its own pod and will not "
                "remember this one",)  # fmt: skip
    if framework == "langgraph":
        if not seen.checkpoints:
            raise Unprocessable(
                "this session's agent (LangGraph) keeps its state in its graph's own checkpointer, not in "
                "kagent's database (kagent main): it cannot be forked from the database"
            )
        if req.task_layout == "merged":
            raise Unprocessable(
                "task_layout merged on a LangGraph session: its checkpoints name each turn's task, so its "
                "tasks are copied one by one (per_task)"
            )
    return ()


async def _proven(fork: _Fork, cut: Cut) -> Proven | None:
    """The map's figures of the kept whole tasks, if PostgreSQL's text copy writes each exactly: a per_task
    fork by the owner, of tasks all finished and read (plan.ServerCopyCheck's rule, applied when mapped)."""
    svc, conn, source, req = fork.svc, fork.conn, fork.source, fork.req
    if fork.caller.user_id != source.user_id or not await _always_per_task(svc, conn, source, req):
        return None
    kept = await svc.store.turn_maps.figures.kept_tasks(
        conn, source.id, source.user_id, cut.tasks_before, source.user_id
    )
    if not kept.server_copy or kept.refused != 0 or kept.open:
        return None
    return Proven(tasks=kept, map_cut=await _map_cut(fork, cut))


async def _map_cut(fork: _Fork, cut: Cut) -> ForkCut | None:
    """Where the source's turn map is cut for the fork, if the fork is given that part of it
    (docs/turn-map.md, "A fork"): the map is trusted in this snapshot, PostgreSQL copies every kept task
    whole and exactly (the caller, `_proven`: a per_task fork by the owner, every kept task finished), no
    task is cut, the rows are written under the fork's owner, and the events end between two runs. None:
    the fork is mapped on its first ask, as any session."""
    if not fork.svc.settings.turn_map_fork_copy:
        return None
    if cut.partial is not None or fork.runtime_user is not None:
        return None
    return await turn_map.fork_cut(fork.svc.store, fork.conn, fork.source.id, fork.source.user_id, cut.events_before)


async def _always_per_task(svc: Services, conn: Connection, source: SessionRow, req: ForkRequest) -> bool:
    """Whether every cut of the session is copied per_task: asked for, or `auto` on a session without
    legacy tasks (then any kept part is copied per_task: plan.choose_layout)."""
    if req.task_layout != "auto":
        return req.task_layout == "per_task"
    versions = await svc.store.tasks.task_versions_before(conn, source.id, source.user_id, None)
    return all(dialects.TaskDialect.of(v) == dialects.TaskDialect.V1 for v in versions)


@dataclass(frozen=True, kw_only=True)
class _Fork:
    """What one fork request has settled before its cut: who forks what, and where in the lineage."""

    svc: Services
    conn: Connection
    reader: Connection | None
    caller: Caller
    source: SessionRow
    req: ForkRequest
    idempotency: tuple[str, str] | None
    name: str
    root_id: str
    root_owner: str
    depth: int
    into: Into
    mapped: bool  # the source's turn map is trusted in the fork's snapshot
    framework: frameworks.Framework
    parent: SessionRow  # the session forked, as the caller sees it (`source`: where its rows are read)
    runtime_user: str | None  # the user the runtime wrote the rows under, when not the owner: copies are his
    runtime_row: bool = False  # that user has a session row of the source's id (kagent-openai): the fork gets one
    users: tuple[str, ...] = ()  # whose rows of `parent` are its owner's (settled at the door: identity.Seen)
    written: list[ForkOutcome] = dataclasses.field(default_factory=list)  # the answer, once the rows are written

    @property
    def rows_users(self) -> tuple[str, ...]:
        """Whose rows of `source` are read: the parent's users, or the runtime's user alone."""
        return self.users if self.runtime_user is None else (self.runtime_user,)

    notes: tuple[str, ...] = ()  # warnings the agent's framework adds (a Claude agent's tasks_only fork)
    proven: Proven | None = None  # the map proves every kept whole task exact for PostgreSQL's copy


async def _guess_cut(
    svc: Services, conn: Connection, reader: Connection, source: SessionRow, boundary: str
) -> tuple[Cut, Guess] | None:
    """The cut of a large fork whose boundary turn is one of the last ones, found without reading
    every task: the first of the session's newest tasks that carries the boundary, if it is newer than
    the oldest of them. Its events end where the exact event search says, started here on the reader
    so that it runs while the tasks are copied. None: the last turns do not settle it.

    Guessed, because an older task could carry the boundary too: the server copy checks every kept
    task and the caller undoes the fork's writes when one does (copying.GuessWrong)."""
    store, sid, owner = svc.store, source.id, source.user_id
    prefilter = dialects.verbatim_in_json(boundary)
    recent = await store.tasks.recent_tasks_mentioning(conn, sid, owner, boundary, prefilter=prefilter)
    task = plan.find_boundary_task(recent.candidates, boundary)
    if task is None or recent.oldest is None or task.row.created_at <= recent.oldest:
        return None
    events = asyncio.ensure_future(store.events.boundary_event_at(reader, sid, owner, boundary, prefilter=prefilter))
    # The source's last task is at least as new as the boundary task, so it is not kept and no running
    # turn is cut off: _find_cut would make this same cut, given the same boundary task.
    cut = Cut(
        events_before=None,  # the events end at the exact search's answer, else at the boundary task
        tasks_before=task.row.created_at,
        partial=task if task.cut > 0 else None,
        boundary_found=True,
        warnings=(),
    )
    return cut, Guess(invocation_id=boundary, events_search=events)


async def _plan_and_write(fork: _Fork, cut: Cut, guess: Guess | None) -> ForkOutcome:
    """The fork's plan for this cut, and its rows written (for a dry run, the plan answered)."""
    svc, conn, source, req, caller = fork.svc, fork.conn, fork.source, fork.req, fork.caller
    store, sid, owner = svc.store, source.id, source.user_id
    versions = await store.tasks.task_versions_before(conn, sid, owner, cut.tasks_before)
    kept_dialects = _dialects(versions, cut)
    layout = plan.choose_layout(req.task_layout, kept_dialects)
    if guess is not None and layout != "per_task":
        raise GuessWrong("only the server copy of per_task tasks proves a guessed boundary")
    warnings = [*fork.notes, *cut.warnings]
    if fork.framework == "crewai" and not req.tasks_only:  # a flow's tasks_only fork: warned in _refusals
        said = await crewai_state.fork_warning(store, conn, sid, fork.users, cut.tasks_before)
        warnings += [said] if said is not None else []
    settle: asyncio.Future[tuple[plan.Layout, list[str]]] | None = None
    if layout == "merged" and dialects.TaskDialect.V1 in kept_dialects:
        warnings.append(plan.V1_MERGED_WARNING)
    elif layout == "merged" and fork.reader is not None and not req.dry_run:  # a dry run's reader counts events
        # On the reader, while the fork's connection copies the events (copying.copy_rows awaits it).
        settle = asyncio.ensure_future(_merge_check(svc, fork.reader, source, cut, req.task_layout))
    elif layout == "merged":
        layout, notes = await _merge_check(svc, conn, source, cut, req.task_layout)
        warnings += notes
    now = await store.database.now(conn)
    new_id = str(uuid.uuid4())
    copier = plan.TaskCopier(
        layout=layout, session_id=new_id, user_id=fork.runtime_user or caller.user_id, now=now, dry_run=req.dry_run
    )

    if req.dry_run:
        stats, task_bytes, left = await _dry_run_figures(fork, cut, copier, layout)
        return await _plan_answer(fork, cut, copier, warnings, stats, task_bytes, left)

    new_session = await store.sessions.insert_session(
        conn,
        session_id=new_id,
        user_id=caller.user_id,
        name=fork.name,
        agent_id=fork.into.agent_id or source.agent_id,
        source="user",
    )
    if fork.runtime_row and fork.runtime_user is not None:
        # The runtime's own row of the fork, as it made the source's: the runtime finds its copies by it.
        await store.sessions.insert_session(
            conn, session_id=new_id, user_id=fork.runtime_user, name=None,
            agent_id=fork.into.agent_id or source.agent_id, source=source.source,
        )  # fmt: skip
    try:
        events = await copy_rows(
            svc, conn, fork.reader, source, cut, copier, guess, settle, proven=fork.proven, server=not fork.mapped
        )
    finally:
        if settle is not None:
            await cancelled(settle)
    if fork.framework == "crewai":
        await crewai_state.copy(store, conn, sid, fork.users, new_id)
    if fork.framework == "langgraph":
        # The graph's state of the kept turns, named after the fork's tasks, in this same transaction.
        await checkpoints.copy_thread(
            store,
            conn,
            source=(sid, owner),
            users=fork.rows_users,
            fork=(new_id, copier.user_id),
            before=cut.tasks_before,
        )
    layout = copier.layout
    warnings += copier.warnings
    # The source turns the fork left behind: the events from where its events end (a guessed cut's
    # end is the exact search's answer, settled by the copy).
    left_from = cut.events_before if guess is None else (guess.events_search.result() or cut.tasks_before)
    left = await _left_behind(fork, cut, left_from)
    info = ForkInfo(
        parent_session_id=sid, fork_root_session_id=fork.root_id, depth=fork.depth,
        rewind_before_invocation_id=req.rewind_before_invocation_id, rewind_before_task_id=req.rewind_before_task_id,
        framework=fork.framework, boundary_found=cut.boundary_found, events_copied=events,
        tasks_copied=copier.written, messages_copied=copier.messages, task_layout=layout, warnings=warnings,
        summary=left,
    )  # fmt: skip
    await store.lineage.insert_lineage(
        conn,
        Lineage(
            session_id=new_id, user_id=caller.user_id, parent_session_id=sid, parent_user_id=fork.parent.user_id,
            root_session_id=fork.root_id, root_user_id=fork.root_owner, depth=fork.depth,
            rewind_before_invocation_id=req.rewind_before_invocation_id,
            rewind_before_task_id=req.rewind_before_task_id,
            framework=fork.framework, boundary_found=cut.boundary_found, events_copied=events,
            tasks_copied=copier.written, messages_copied=copier.messages,
            task_layout=layout, warnings=_encoder.encode(warnings).decode(), summary=summary.stored(left),
            created_at=now,
        ),
        created_by=caller.user_id,
    )  # fmt: skip
    s = session_json(new_session)
    data = ForkedSession(**msgspec.structs.asdict(s), fork=info)
    if fork.into.then is not None:
        await fork.into.then(conn, data)
    if fork.idempotency is not None:
        key, digest = fork.idempotency
        await store.lineage.remember_answer(
            conn, user_id=caller.user_id, key=key, request_hash=digest, session_id=new_id,
            answer=_encoder.encode(data).decode(), ttl_seconds=svc.settings.idempotency_ttl_seconds,
        )  # fmt: skip
    fork.written.append(ForkOutcome(data=data, created=True, replayed=False, session_id=new_id))
    return fork.written[-1]


async def _plan_answer(
    fork: _Fork,
    cut: Cut,
    copier: plan.TaskCopier,
    warnings: list[str],
    stats: EventStats,
    task_bytes: int,
    left: Summary | None,
) -> ForkOutcome:
    """A dry run's answer: the plan, from its kept events' figures (`stats`), its kept tasks counted into
    `copier` (`task_bytes` of them) and the summary of what it leaves behind (`left`)."""
    svc, req, sid = fork.svc, fork.req, fork.source.id
    if (cap := svc.settings.max_fork_events) and stats.events > cap:
        warnings.append(f"a fork would be refused: {stats.events} events is over MAX_FORK_EVENTS ({cap})")
    text_chars = stats.text_chars
    if fork.framework in frameworks.TASK_CHAT:  # its chat is in its tasks (docs/frameworks.md)
        text_chars += await summary.tasks_text_chars(svc.store, fork.conn, sid, fork.source.user_id, cut.tasks_before)
    return ForkOutcome(
        data=ForkPlan(
            dry_run=True, name=fork.name, parent_session_id=sid, fork_root_session_id=fork.root_id,
            depth=fork.depth, rewind_before_invocation_id=req.rewind_before_invocation_id,
            rewind_before_task_id=req.rewind_before_task_id, framework=fork.framework,
            boundary_found=cut.boundary_found, events_copied=stats.events,
            tasks_copied=copier.written, messages_copied=copier.messages, task_layout=copier.layout,
            warnings=warnings + copier.warnings, summary=left, bytes_to_copy=stats.bytes + task_bytes,
            estimated_context_tokens=math.ceil(text_chars / 4),
        ),
        created=False, replayed=False, session_id=None,
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class _Mark:
    """Where a streamed dry run's count stood before one task (`copier`'s counts, the bytes measured so far), so
    that the tasks the cut does not keep can be taken off again; and why the task cannot be copied, if it cannot
    (raised only if the cut keeps it)."""

    created_at: datetime
    written: int
    messages: int
    warnings: int
    bytes: int
    refused: Unprocessable | None = None


async def _streamed_plan(fork: _Fork, named: NamedTurn, last_task: TaskRow | None) -> ForkOutcome | None:
    """The first dry run (no map) of a large session whose kept tasks are all copied per_task, each side of it
    read once (docs/turn-map.md, "The first touch"). Here the tasks are read in order, each measured, up to the
    first that carries the boundary (plan.find_boundary_task's): no search of every task's text before; then the
    summary of what the fork leaves behind. On the reader, meanwhile, where the boundary's events begin, and then
    the events before it counted in two parts (with a second reader). The plan _find_cut and _plan_and_write
    make (the events read again if the cut ends them elsewhere: a running last turn). None: not such a dry run."""
    svc, conn, reader, source, req = fork.svc, fork.conn, fork.reader, fork.source, fork.req
    boundary = req.rewind_before_invocation_id
    if (
        not req.dry_run or fork.mapped or reader is None or boundary is None or named.task is not None
        or named.missing is not None or fork.framework in frameworks.TASK_CHAT
    ):  # fmt: skip
        return None
    store, sid, owner = svc.store, source.id, source.user_id
    found = {dialects.TaskDialect.of(v) for v in await store.tasks.task_versions_before(conn, sid, owner, None)}
    known = {d for d in found if d is not None}
    if len(known) < len(found) or plan.choose_layout(req.task_layout, known) != "per_task":
        return None
    if req.task_layout == "auto" and dialects.TaskDialect.LEGACY in known:
        return None  # a cut that keeps only legacy tasks would merge them
    copier = plan.TaskCopier(layout="per_task", session_id=str(uuid.uuid4()), user_id=fork.runtime_user or
                             fork.caller.user_id, now=await store.database.now(conn), dry_run=True)  # fmt: skip
    prefilter = dialects.verbatim_in_json(boundary)
    async with snapshot_reader(svc, conn, wanted=True) as second:
        searched = asyncio.ensure_future(
            store.events.boundary_event_at(reader, sid, owner, boundary, prefilter=prefilter)
        )
        counted = asyncio.ensure_future(_counted_before(fork, second, searched))
        try:
            marks, task_bytes, task = await _measure_until(fork, copier, boundary, prefilter)
            at = await searched
            cut = await _cut_of(svc, conn, source, req, last_task, mapped=False, named=named, events_at=at, task=task)
            left = await _left_behind(fork, cut, cut.events_before)
            stats = await counted
        finally:
            await cancelled(counted)
            await cancelled(searched)
    if stats is None or at != cut.events_before:  # the cut ends the events elsewhere than the boundary's start
        stats = await store.events.event_stats(conn, sid, owner, cut.events_before)
    kept = next((i for i, m in enumerate(marks) if cut.tasks_before is not None and m.created_at >= cut.tasks_before),
                len(marks))  # fmt: skip
    if (refused := next((m.refused for m in marks[:kept] if m.refused is not None), None)) is not None:
        raise refused
    if kept < len(marks):  # the tasks from the cut's on (in created_at order: all of the rest) are taken off
        mark = marks[kept]
        copier.written, copier.messages, task_bytes = mark.written, mark.messages, mark.bytes
        del copier.warnings[mark.warnings :]
    if cut.partial is not None:
        task_bytes += copier.size(cut.partial.row, cut.partial.cut)
    return await _plan_answer(fork, cut, copier, [*fork.notes, *cut.warnings], stats, task_bytes, left)


async def _measure_until(
    fork: _Fork, copier: plan.TaskCopier, boundary: str, prefilter: bool
) -> tuple[list[_Mark], int, plan.BoundaryTask | None]:
    """The tasks before the first that carries `boundary`, each counted into `copier` as it would copy it whole
    (a mark before each), the bytes they would be, and that task (None: none carries it; then every task is
    counted). Read a batch ahead."""
    svc, conn, source = fork.svc, fork.conn, fork.source
    marks: list[_Mark] = []
    size = 0
    async with aclosing(svc.store.tasks.read_ahead_tasks_before(conn, source.id, source.user_id, None)) as batches:
        async for rows in batches:
            for row in rows:
                if not prefilter or boundary in row.data:
                    task = plan.find_boundary_task([row], boundary)
                    if task is not None:
                        return marks, size, task  # the next batch, asked for, is waited for (aclosing) and dropped
                mark = _Mark(created_at=row.created_at, written=copier.written, messages=copier.messages,
                             warnings=len(copier.warnings), bytes=size)  # fmt: skip
                try:
                    size += copier.size(row)
                except Unprocessable as exc:  # nothing counted: it is refused before it is made
                    mark = dataclasses.replace(mark, refused=exc)
                marks.append(mark)
    return marks, size, None


async def _counted_before(
    fork: _Fork, second: Connection | None, searched: asyncio.Future[datetime | None]
) -> EventStats | None:
    """Once the reader has found where the boundary's events begin (`searched`), the figures of the events before
    it, counted on the reader and `second` at once, in two parts. None when no event carries the boundary (its cut
    is settled by its tasks)."""
    svc, reader, source = fork.svc, fork.reader, fork.source
    assert reader is not None
    store, sid, owner = svc.store, source.id, source.user_id
    at = await searched
    if at is None:
        return None
    if second is None:
        return await store.events.event_stats(reader, sid, owner, at)
    mine = asyncio.ensure_future(store.events.event_stats_part(reader, sid, owner, at, 2, 0))
    other = asyncio.ensure_future(store.events.event_stats_part(second, sid, owner, at, 2, 1))
    try:
        return await mine + await other
    finally:
        await cancelled(mine)
        await cancelled(other)


async def _left_behind(fork: _Fork, cut: Cut, events_from: datetime | None) -> Summary | None:
    """The summary of the source turns the fork leaves behind: of its events from `events_from`, or of its
    tasks from the cut when its agent's chat is only in its tasks (docs/frameworks.md)."""
    store, conn, sid, owner = fork.svc.store, fork.conn, fork.source.id, fork.source.user_id
    if fork.framework in frameworks.TASK_CHAT:
        return await summary.summarize_tasks(store, conn, sid, owner, cut.tasks_before)
    return await summary.summarize_events(store, conn, sid, owner, events_from, mapped=fork.mapped)


async def _dry_run_figures(
    fork: _Fork, cut: Cut, copier: plan.TaskCopier, layout: plan.Layout
) -> tuple[EventStats, int, Summary | None]:
    """A dry run's kept events (from the map, or counted on the reader while the tasks are read here), the
    bytes of its kept tasks (_dry_run_tasks) and the summary of what it leaves behind (_left_behind)."""
    store, conn, sid, owner = fork.svc.store, fork.conn, fork.source.id, fork.source.user_id
    if fork.mapped and (figures := await store.turn_maps.figures.figures_before(conn, sid, owner, cut.events_before)):
        stats = EventStats(events=figures[0], bytes=figures[1], text_chars=figures[2])
        task_bytes = await _dry_run_tasks(fork, cut, copier, layout)
        return stats, task_bytes, await _left_behind(fork, cut, cut.events_before)
    if fork.reader is None:
        stats = await store.events.event_stats(conn, sid, owner, cut.events_before)
        task_bytes = await _dry_run_tasks(fork, cut, copier, layout)
        return stats, task_bytes, await _left_behind(fork, cut, cut.events_before)
    counting = asyncio.ensure_future(store.events.event_stats(fork.reader, sid, owner, cut.events_before))
    try:
        task_bytes = await _dry_run_tasks(fork, cut, copier, layout)
        # The summary too is read here while the reader still counts (the count, of every kept event's
        # messages, is the longer side: the summary after it was 10 % of a first dry run, issue 37).
        left = await _left_behind(fork, cut, cut.events_before)
        return await counting, task_bytes, left
    finally:
        await cancelled(counting)


async def _dry_run_tasks(fork: _Fork, cut: Cut, copier: plan.TaskCopier, layout: plan.Layout) -> int:
    """A dry run's kept tasks counted into the copier (tasks, messages, warnings); the bytes they would be.
    A per_task fork of a mapped session adds up the map's figures of its whole tasks; otherwise each kept
    task is made as the fork would make it, and dropped."""
    svc, conn, source = fork.svc, fork.conn, fork.source
    if fork.mapped and layout == "per_task":
        kept = await svc.store.turn_maps.figures.kept_tasks(
            conn, source.id, source.user_id, cut.tasks_before, copier.user_id
        )
        if kept.refused == 0:  # else the rows are read, and the copier refuses the first with its 422
            copier.written += kept.tasks
            copier.messages += kept.messages
            copier.warnings += [plan.closed_warning(task_id, state) for task_id, state in kept.open]
            return kept.bytes + (copier.size(cut.partial.row, cut.partial.cut) if cut.partial is not None else 0)
    task_bytes = 0
    async for row in kept_tasks(svc, conn, source, cut):
        part_of = cut.partial.cut if cut.partial and row is cut.partial.row else None
        if layout == "merged":
            task_bytes += sum(len(part) for part in copier.merge(row, part_of))
        else:
            task_bytes += copier.size(row, part_of)
    return task_bytes + len(copier.merged_end() or b"")


async def _merge_check(
    svc: Services, conn: Connection, source: SessionRow, cut: Cut, requested: str
) -> tuple[plan.Layout, list[str]]:
    """The layout and warnings of legacy tasks that choose_layout merges: merged, unless kagent
    0.10.x's UI would show them otherwise merged (fork.merge_hazard), which only a task holding a
    confirmation request can cause: only those are read (found by their text in PostgreSQL)."""
    store, sid, owner, partial = svc.store, source.id, source.user_id, cut.partial
    candidates = await store.tasks.tasks_mentioning_before(
        conn, sid, owner, cut.tasks_before, dialects.CONFIRMATION_CALL
    )
    if partial is not None and dialects.CONFIRMATION_CALL in partial.row.data:
        candidates.append(partial.row)
    if not candidates:
        return "merged", []
    first = await store.tasks.first_task(conn, sid, owner)
    last = (
        partial.row if partial is not None else await store.tasks.last_task_before(conn, sid, owner, cut.tasks_before)
    )
    hazard = plan.merge_hazard(
        candidates, partial=partial, first_id=first.id if first else None, last_id=last.id if last else None
    )
    return plan.merge_verdict(requested, hazard)


def _dialects(versions: dict[str | None, int], cut: Cut) -> set[dialects.TaskDialect]:
    """The dialects of the kept tasks (`versions`: their protocol_version) and of the cut one."""
    found = set()
    for version in [*versions, *([cut.partial.row.protocol_version] if cut.partial is not None else [])]:
        dialect = dialects.TaskDialect.of(version)
        if dialect is None:
            raise Unprocessable(f"this session holds tasks of protocol_version {version!r}, unknown to this service")
        found.add(dialect)
    return found
