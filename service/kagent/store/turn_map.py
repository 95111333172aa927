"""The turn map's rows (migration 0008): the service's own per-session digest of kagent's events and tasks.
What it means and when it may be trusted is service/kagent/turn_map.py's; this module only reads and
writes it, and reads the marks of kagent's rows its guard compares."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from service.kagent.store.base import Connection, Queries
from service.kagent.store.events import EventTally


@dataclass(frozen=True, kw_only=True)
class MapState:
    """What a session's map claims."""

    version: int
    session_updated_at: datetime | None
    events_deleted: int
    tasks_deleted: int
    watermark: tuple[datetime, str] | None
    events: int
    runs: int


@dataclass(frozen=True, kw_only=True)
class KagentMarks:
    """What the guard reads of kagent's rows: the session's updated_at, and the soft-deleted rows."""

    session_updated_at: datetime | None
    events_deleted: int
    tasks_deleted: int


@dataclass(frozen=True, kw_only=True)
class MapCounts:
    runs: int
    events: int


@dataclass(frozen=True, kw_only=True)
class MapTurn:
    invocation_id: str
    event_first_at: datetime | None
    event_first_id: str | None
    task_id: str | None
    task_created_at: datetime | None
    started_at: datetime | None
    has_messages: bool
    events: int
    event_user_text: str | None
    task_user_text: str | None
    task_state: str | None


@dataclass(frozen=True, kw_only=True)
class LastRun:
    seq: int
    first: tuple[datetime, str]
    events_before: int
    bytes_before: int
    text_chars_before: int


@dataclass(frozen=True, kw_only=True)
class MappedTask:
    """A task as the map holds it."""

    task_id: str
    created_at: datetime
    updated_at: datetime | None
    state: str | None
    invocation_ids: list[str]
    user_texts: list[str | None]
    figures: TaskFigures | None  # None: the copier refuses the task
    marks: str  # JSON: by invocation, [message ids, call ids, response ids, text count] (dialects.chat_marks)


@dataclass(frozen=True, kw_only=True)
class TaskFigures:
    """What a per_task fork writes for one whole task: its history messages, its bytes with a new task and
    session id and an empty user id, how many places hold the user id, and whether it is terminal."""

    messages: int
    bytes: int
    user_places: int
    terminal: bool
    server_copy: bool  # PostgreSQL's text copy writes it exactly, for a fork by its owner


@dataclass(frozen=True, kw_only=True)
class KeptTasks:
    """A per_task fork's figures of the mapped tasks it keeps."""

    tasks: int
    messages: int
    bytes: int
    refused: int
    server_copy: bool  # every one is copied exactly by PostgreSQL's text copy (a fork by the owner)
    open: list[tuple[str, str | None]]  # (task id, state) of those not terminal, oldest first


@dataclass(frozen=True, kw_only=True)
class ForkCut:
    """Where a fork's copy of its source's map ends: runs 1 to `runs` (0: none), holding `events` events, the
    last of them from `last_first_at` to `last_at`."""

    runs: int
    events: int
    last_first_at: datetime | None
    last_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class ForkEvents:
    """A fork's events copied, with its map's runs when they are the copy's cut (`sound`): how many events,
    the fork's ids of its last kept run's first event and of its last event, and how many runs written."""

    copied: int
    sound: bool
    last_run_first_id: str | None
    last_id: str | None
    runs: int


@dataclass(frozen=True, kw_only=True)
class ForkTasks:
    """A fork's kept tasks copied with the rest of its map: how many copied, how many mapped, whether the map
    was written (no two kept tasks at one instant), and the turns left to make again from the fork's rows."""

    copied: int
    mapped: int
    sound: bool
    remake: list[str]


@dataclass(frozen=True, kw_only=True)
class TaskStamp:
    id: str
    created_at: datetime
    updated_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class StampedTask:
    id: str
    created_at: datetime
    updated_at: datetime | None
    protocol_version: str | None
    data: str


_TASK_COLUMNS = [
    "session_id", "user_id", "task_id", "created_at", "updated_at", "state", "invocation_ids", "user_texts",
    "messages", "bytes", "user_places", "terminal", "server_copy", "marks",
]  # fmt: skip


def _turn(r: Any) -> MapTurn:
    return MapTurn(
        invocation_id=r["invocation_id"], event_first_at=r["event_first_at"], event_first_id=r["event_first_id"],
        task_id=r["task_id"],
        task_created_at=r["task_created_at"], started_at=r["started_at"], has_messages=r["has_messages"],
        events=int(r["events"]), event_user_text=r["event_user_text"], task_user_text=r["task_user_text"],
        task_state=r["task_state"],
    )  # fmt: skip


class TurnMaps:
    """The queries over the map; each takes the connection first, so the caller owns the transaction."""

    def __init__(self, q: Queries) -> None:
        self.q = q
        self.figures, self.forks = MapFigures(q), ForkMaps(q)

    async def state(self, conn: Connection, session_id: str, owner: str) -> MapState | None:
        r = await conn.fetchrow(self.q["map_state"], session_id, owner)
        if r is None:
            return None
        mark = (r["watermark_at"], r["watermark_id"]) if r["watermark_at"] is not None else None
        return MapState(
            version=r["version"], session_updated_at=r["session_updated_at"], events_deleted=int(r["events_deleted"]),
            tasks_deleted=int(r["tasks_deleted"]), watermark=mark, events=int(r["events"]), runs=r["runs"],
        )  # fmt: skip

    async def guard(
        self, conn: Connection, session_id: str, owner: str
    ) -> tuple[MapState | None, KagentMarks, tuple[int, int]]:
        """In one statement: what the map claims (None: no map), kagent's marks, and the map's (runs,
        events) as its last run tells them."""
        r = await conn.fetchrow(self.q["map_guard"], session_id, owner)
        assert r is not None
        state = None
        if r["version"] is not None:
            mark = (r["watermark_at"], r["watermark_id"]) if r["watermark_at"] is not None else None
            state = MapState(
                version=r["version"], session_updated_at=r["claimed_updated_at"],
                events_deleted=int(r["claimed_events_deleted"]), tasks_deleted=int(r["claimed_tasks_deleted"]),
                watermark=mark, events=int(r["claimed_events"]), runs=r["claimed_runs"],
            )  # fmt: skip
        return state, _marks(r), (int(r["runs"] or 0), int(r["events"] or 0))

    async def kagent_marks(self, conn: Connection, session_id: str, owner: str) -> KagentMarks:
        r = await conn.fetchrow(self.q["kagent_marks"], session_id, owner)
        assert r is not None
        return _marks(r)

    async def counts(self, conn: Connection, session_id: str, owner: str) -> MapCounts:
        r = await conn.fetchrow(self.q["map_counts"], session_id, owner)
        assert r is not None
        return _counts(r)

    async def save_state(
        self, conn: Connection, session_id: str, owner: str, version: int, marks: KagentMarks, counts: MapCounts,
        watermark: tuple[datetime, str] | None,
    ) -> None:  # fmt: skip
        at, last_id = watermark if watermark is not None else (None, None)
        await conn.execute(
            self.q["save_map_state"], session_id, owner, version, marks.session_updated_at, marks.events_deleted,
            marks.tasks_deleted, at, last_id, counts.events, counts.runs,
        )  # fmt: skip

    async def hold(self, conn: Connection, session_id: str, owner: str) -> None:
        """For the rest of the caller's transaction, the lock under which a session's map is written."""
        await conn.execute(self.q["map_xact_lock"], lock_name(session_id, owner))

    async def forget(self, conn: Connection, session_id: str, owner: str, *, rows: bool) -> None:
        """The map's claims dropped (the next ask rebuilds it); with `rows`, its rows too."""
        await conn.execute(self.q["forget_map_state"], session_id, owner)
        if rows:
            for query in ("forget_map_runs", "forget_map_turns", "forget_map_tasks"):
                await conn.execute(self.q[query], session_id, owner)

    async def map_runs_from(
        self, conn: Connection, session_id: str, owner: str, start: tuple[datetime, str] | None, *, seq: int,
        events: int, bytes_: int, text_chars: int, ids: list[str] | None = None,
    ) -> tuple[int, list[str]]:  # fmt: skip
        """Runs of the live events from `start` (None: all), or of `ids`; (how many, their invocations)."""
        at, first_id = start if start is not None else (None, None)
        r = await conn.fetchrow(
            self.q["map_runs_from"], session_id, owner, at, first_id, seq, events, bytes_, text_chars, ids
        )
        assert r is not None
        return int(r["runs"]), list(r["invocations"])

    async def last_run(self, conn: Connection, session_id: str, owner: str) -> LastRun | None:
        r = await conn.fetchrow(self.q["last_run"], session_id, owner)
        if r is None:
            return None
        return LastRun(
            seq=r["seq"], first=(r["first_at"], r["first_id"]), events_before=int(r["events_before"]),
            bytes_before=int(r["bytes_before"]), text_chars_before=int(r["text_chars_before"]),
        )  # fmt: skip

    async def drop_runs_from(self, conn: Connection, session_id: str, owner: str, seq: int) -> list[str]:
        return list(await conn.fetchval(self.q["drop_runs_from"], session_id, owner, seq))

    async def first_run_from(
        self, conn: Connection, session_id: str, owner: str, at: datetime
    ) -> tuple[int, bool] | None:
        """The first run holding an event at or after `at`, and whether it also holds one before."""
        r = await conn.fetchrow(self.q["first_run_from"], session_id, owner, at)
        return None if r is None else (r["seq"], bool(r["straddles"]))

    async def last_mapped_event(self, conn: Connection, session_id: str, owner: str) -> tuple[datetime, str] | None:
        r = await conn.fetchrow(self.q["last_mapped_event"], session_id, owner)
        return None if r is None else (r["last_at"], r["last_id"])

    async def live_events_after(
        self, conn: Connection, session_id: str, owner: str, watermark: tuple[datetime, str] | None,
        since: tuple[datetime, str] | None,
    ) -> tuple[int, int, list[str]]:  # fmt: skip
        """(live events of the session, those after `watermark`, the ids of those from `since` on)."""
        at, last_id = watermark if watermark is not None else (None, None)
        since_at, since_id = since if since is not None else (None, None)
        r = await conn.fetchrow(self.q["live_events_after"], session_id, owner, at, last_id, since_at, since_id)
        assert r is not None
        return int(r["live"]), int(r["after"]), list(r["ids"])

    async def refresh_turns(self, conn: Connection, session_id: str, owner: str, of: list[str] | None) -> None:
        """The turns of `of` (None: all) made again from the runs and the mapped tasks."""
        if of is not None:
            if not of:
                return
            await conn.execute(self.q["turns_clear_events"], session_id, owner, of)
            await conn.execute(self.q["turns_clear_tasks"], session_id, owner, of)
        await conn.execute(self.q["turns_from_runs"], session_id, owner, of)
        await conn.execute(self.q["turns_from_tasks"], session_id, owner, of)
        await conn.execute(self.q["turns_settle"], session_id, owner, of)

    async def drop_hidden_turns(
        self, conn: Connection, session_id: str, owner: str, events_from: datetime, tasks_from: datetime
    ) -> set[str]:
        """The turns a rewind from (`events_from`, `tasks_from`) hid whole, dropped; their invocations."""
        return set(await conn.fetchval(self.q["turns_drop_hidden"], session_id, owner, events_from, tasks_from))

    async def live_task_stamps(self, conn: Connection, session_id: str, owner: str) -> list[TaskStamp]:
        rows = await conn.fetch(self.q["live_task_stamps"], session_id, owner)
        return [TaskStamp(id=r["id"], created_at=r["created_at"], updated_at=r["updated_at"]) for r in rows]

    async def changed_tasks(self, conn: Connection, session_id: str, owner: str) -> tuple[list[str], list[str]]:
        rows = await conn.fetch(self.q["changed_tasks"], session_id, owner)  # (new or upserted, gone)
        return [r["id"] for r in rows if not r["gone"]], [r["id"] for r in rows if r["gone"]]

    async def tasks_by_id(self, conn: Connection, session_id: str, owner: str, ids: list[str]) -> list[StampedTask]:
        rows = await conn.fetch(self.q["tasks_by_id"], session_id, owner, ids)
        return [
            StampedTask(id=r["id"], created_at=r["created_at"], updated_at=r["updated_at"],
                        protocol_version=r["protocol_version"], data=r["data"])
            for r in rows
        ]  # fmt: skip

    async def add_tasks(self, conn: Connection, session_id: str, owner: str, tasks: list[MappedTask]) -> None:
        if not tasks:
            return
        await conn.copy_records_to_table(
            "turn_map_task",
            schema_name=self.q.schema,
            records=[
                (
                    session_id,
                    owner,
                    t.task_id,
                    t.created_at,
                    t.updated_at,
                    t.state,
                    t.invocation_ids,
                    t.user_texts,
                    *(
                        (f.messages, f.bytes, f.user_places, f.terminal, f.server_copy)
                        if (f := t.figures)
                        else (None,) * 5
                    ),
                    t.marks,
                )
                for t in tasks
            ],
            columns=_TASK_COLUMNS,
        )

    async def forget_tasks(self, conn: Connection, session_id: str, owner: str, ids: list[str]) -> list[str]:
        """Mapped tasks dropped; the invocations they carried."""
        return list(await conn.fetchval(self.q["forget_tasks"], session_id, owner, ids))

    async def forget_tasks_from(self, conn: Connection, session_id: str, owner: str, at: datetime) -> list[str]:
        return list(await conn.fetchval(self.q["forget_tasks_from"], session_id, owner, at))

    async def turn(self, conn: Connection, session_id: str, owner: str, invocation_id: str) -> MapTurn | None:
        r = await conn.fetchrow(self.q["map_turn"], session_id, owner, invocation_id)
        return None if r is None else _turn(r)

    async def turn_tasks(self, conn: Connection, session_id: str, owner: str, ids: list[str]) -> list[tuple[str, str]]:
        """(task id, chat marks as JSON) of the mapped tasks carrying any of `ids`, oldest first."""
        rows = await conn.fetch(self.q["map_turn_tasks"], session_id, owner, ids)
        return [(r["task_id"], r["marks"]) for r in rows]

    async def opening(
        self, conn: Connection, session_id: str, owner: str, first: tuple[datetime, str]
    ) -> tuple[datetime, str | None] | None:
        """(last event time, invocation) of the run before the one starting at `first`; None: none."""
        r = await conn.fetchrow(self.q["map_opening"], session_id, owner, first[0], first[1])
        return None if r is None else (r["last_at"], r["invocation_id"])

    async def turn_page(
        self, conn: Connection, session_id: str, owner: str, after: MapTurn | None, limit: int
    ) -> list[MapTurn]:
        at, inv = (after.started_at, after.invocation_id) if after is not None else (None, None)
        return [_turn(r) for r in await conn.fetch(self.q["map_turn_page"], session_id, owner, at, inv, limit)]


class MapFigures:
    """What the map adds up for an operation: a dry run's event and task figures, a summary, a rewind's tasks."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def event_turns_before(self, conn: Connection, session_id: str, owner: str, turn: MapTurn) -> int:
        """The turns with a message before `turn` in the listing's order."""
        count = await conn.fetchval(
            self.q["map_event_turns_before"], session_id, owner, turn.started_at, turn.invocation_id
        )
        return int(count)

    async def figures_before(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None
    ) -> tuple[int, int, int] | None:
        """(events, bytes, text characters) of the live events before `before` (None: all), or None when a
        run holds events on both sides of it."""
        r = await conn.fetchrow(self.q["map_figures_before"], session_id, owner, before)
        assert r is not None
        if r["straddles"]:
            return None
        sums = r["sums"]
        return (0, 0, 0) if sums is None else (int(sums[0]), int(sums[1]), int(sums[2]))

    async def tasks_from(
        self, conn: Connection, session_id: str, owner: str, start: datetime
    ) -> list[tuple[str, str | None, bool | None]]:
        """(task id, state, terminal) of the mapped tasks created at or after `start`, oldest first."""
        rows = await conn.fetch(self.q["map_tasks_from"], session_id, owner, start)
        return [(r["task_id"], r["state"], r["terminal"]) for r in rows]

    async def tally_from(
        self, conn: Connection, session_id: str, owner: str, since: datetime, *, user_chars: int, agent_chars: int
    ) -> EventTally | None:
        """events_tally of the live events from `since` to the end, from the runs; None when a run holds
        events on both sides of `since`."""
        r = await conn.fetchrow(self.q["map_tally_from"], session_id, owner, since, user_chars, agent_chars)
        assert r is not None
        if r["straddles"]:
            return None
        return EventTally(
            events=int(r["events"]), turns=int(r["turns"]), total_tokens=int(r["total_tokens"]),
            first_at=r["first_at"], last_at=r["last_at"],
            tool_calls=msgspec.json.decode(r["tool_calls"], type=dict[str, int]),
            first_user_text=r["first_user_text"], last_agent_text=r["last_agent_text"],
        )  # fmt: skip

    async def kept_tasks(
        self, conn: Connection, session_id: str, owner: str, before: datetime | None, caller_id: str
    ) -> KeptTasks:
        user_bytes = len(msgspec.json.encode(caller_id)) - 2
        r = await conn.fetchrow(self.q["map_task_figures"], session_id, owner, before, user_bytes)
        assert r is not None
        return KeptTasks(
            tasks=int(r["tasks"]), messages=int(r["messages"]), bytes=int(r["bytes"]), refused=int(r["refused"]),
            server_copy=bool(r["server_copy"]), open=list(zip(r["open_ids"], r["open_states"], strict=True)),
        )  # fmt: skip


class ForkMaps:
    """A fork's copy of its source's map, written by the statements that copy the fork's rows
    (docs/turn-map.md, "A fork"); service/kagent/turn_map.py decides when."""

    def __init__(self, q: Queries) -> None:
        self.q = q

    async def fork_cut(self, conn: Connection, session_id: str, owner: str, before: datetime | None) -> ForkCut | None:
        """The runs a fork keeping the events before `before` (None: all) keeps; None when a run holds
        events on both sides of it."""
        r = await conn.fetchrow(self.q["map_fork_cut"], session_id, owner, before)
        if r is None:
            return ForkCut(runs=0, events=0, last_first_at=None, last_at=None)
        if r["straddles"]:
            return None
        return ForkCut(runs=r["seq"], events=int(r["cum_events"]), last_first_at=r["first_at"], last_at=r["last_at"])

    async def copy_events_mapping(
        self, conn: Connection, *, session_id: str, owner: str, before: datetime | None, new_session_id: str,
        new_user_id: str, cut: ForkCut,
    ) -> ForkEvents:  # fmt: skip
        """The kept events copied as copy_kept copies them, and the map's kept runs given to the fork when the
        copy is their cut, in one statement."""
        r = await conn.fetchrow(
            self.q["copy_events_mapping"], session_id, owner, before, new_user_id, new_session_id,
            cut.last_first_at, cut.runs, cut.events,
        )  # fmt: skip
        assert r is not None
        return ForkEvents(
            copied=int(r["copied"]), sound=bool(r["sound"]), last_run_first_id=r["last_run_first_id"],
            last_id=r["last_id"], runs=int(r["runs"]),
        )  # fmt: skip

    async def copy_tasks_mapping(
        self, conn: Connection, *, session_id: str, owner: str, before: datetime | None, new_session_id: str,
        new_user_id: str, cut: ForkCut, events: ForkEvents, version: int,
    ) -> ForkTasks:  # fmt: skip
        """The kept tasks copied as copy_kept copies them, and the rest of the map cut for the fork (its tasks,
        the turns kept whole, its claims), in one statement."""
        r = await conn.fetchrow(
            self.q["copy_tasks_mapping"], session_id, owner, before, new_user_id, new_session_id, cut.runs,
            cut.last_first_at, events.last_run_first_id, cut.runs, cut.events, cut.last_at, events.last_id, version,
        )  # fmt: skip
        assert r is not None
        return ForkTasks(
            copied=int(r["copied"]), mapped=int(r["mapped"]), sound=bool(r["sound"]), remake=list(r["remake"])
        )


def lock_name(session_id: str, owner: str) -> str:
    """The advisory lock's name (lineage.key_lock's scope and key, joined as it joins them)."""
    return f"turn-map\n{session_id}\n{owner}"


def _marks(r: Any) -> KagentMarks:
    return KagentMarks(
        session_updated_at=r["session_updated_at"], events_deleted=int(r["events_deleted"]),
        tasks_deleted=int(r["tasks_deleted"]),
    )  # fmt: skip


def _counts(r: Any) -> MapCounts:
    return MapCounts(runs=int(r["runs"]), events=int(r["events"] or 0))
