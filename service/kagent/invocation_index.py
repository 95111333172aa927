"""The optional invocation index: expression indexes on kagent's `event` and `task` tables that let every
boundary search find a turn without reading the whole session. Added only by an operator (`kagent-fork
index install`), built with CREATE INDEX CONCURRENTLY, removed by `uninstall`; the SQL is in
sql/invocation_index.sql. The service asks `status` at start-up, in /readyz and every
INDEX_CHECK_SECONDS, and tells the store which indexes it may count on (store.IndexUse)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import msgspec

from service.kagent.store import Store
from service.kagent.store.base import Connection, IndexUse, load_queries, sql_dir

log = logging.getLogger("kagent_fork")

# The indexes, by their name in sql/invocation_index.sql, and the table each is on.
INDEXES = {"event_invocation": "event", "event_time": "event", "task_invocations": "task"}
# The version written in each index's comment; an index with another comment is rebuilt by install, the
# others are kept (rebuilding an event index of a large kagent database takes minutes). Version 2 of the
# task index is over task_invocation_candidates (migration 0007), cheaper for kagent's writes.
VERSIONS = {
    "event_invocation": "kagent-fork invocation index 1",
    "event_time": "kagent-fork invocation index 1",
    "task_invocations": "kagent-fork invocation index 2",
}
INDEX_CHECK_SECONDS = 30.0

IndexState = Literal["valid", "invalid", "outdated", "missing"]
Overall = Literal["installed", "absent", "incomplete"]


class IndexInfo(msgspec.Struct, frozen=True, kw_only=True):
    index: str  # event_invocation, event_time or task_invocations
    name: str  # in PostgreSQL: <service schema>_<index>
    table: str
    state: IndexState
    bytes: int


class IndexStatus(msgspec.Struct, frozen=True, kw_only=True):
    """installed: every index valid and current, the searches use them; absent: none there, the searches
    read every row as before; incomplete: some missing, invalid (an interrupted build) or outdated, the
    searches use only the valid ones and `install` repairs the rest."""

    state: Overall
    indexes: list[IndexInfo]

    def use(self) -> IndexUse:
        valid = {i.index for i in self.indexes if i.state == "valid"}
        return IndexUse(
            event_invocation="event_invocation" in valid,
            event_time="event_time" in valid,
            task_invocations="task_invocations" in valid,
        )


def _statements(store: Store) -> dict[str, str]:
    return load_queries(sql_dir() / "invocation_index.sql", store.schema)


def full_name(store: Store, index: str) -> str:
    return f"{store.schema}_{index}"


async def status(store: Store, conn: Connection) -> IndexStatus:
    found = {row.name: row for row in await store.database.index_rows(conn, [full_name(store, i) for i in INDEXES])}
    infos = []
    for index, table in INDEXES.items():
        row = found.get(full_name(store, index))
        state: IndexState
        if row is None:
            state = "missing"
        elif not row.valid:
            state = "invalid"
        elif row.comment != VERSIONS[index]:
            state = "outdated"
        else:
            state = "valid"
        infos.append(
            IndexInfo(
                index=index, name=full_name(store, index), table=table, state=state, bytes=row.bytes if row else 0
            )
        )
    states = {i.state for i in infos}
    overall: Overall = "installed" if states == {"valid"} else "absent" if states == {"missing"} else "incomplete"
    return IndexStatus(state=overall, indexes=infos)


async def refresh(store: Store, conn: Connection) -> IndexStatus:
    """The status, and the store told which indexes it may use (logged when that changes)."""
    now = await status(store, conn)
    use = now.use()
    if use != store.index_use:
        log.info("invocation index: %s (%s)", now.state, ", ".join(f"{i.name} {i.state}" for i in now.indexes))
        store.index_use = use
    return now


async def install(store: Store, conn: Connection, say: Callable[[str], None] = lambda _: None) -> IndexStatus:
    """Build the missing indexes, rebuild invalid or outdated ones, then ANALYZE the two tables so that
    the planner knows the expressions' values. One install at a time (an advisory lock). Needs a
    connection outside any transaction (CREATE INDEX CONCURRENTLY)."""
    statements = _statements(store)
    async with store.lineage.key_lock(conn, "kagent-fork:index", store.schema):
        for info in (await status(store, conn)).indexes:
            if info.state == "valid":
                say(f"{info.name}: valid, kept")
                continue
            if info.state != "missing":
                say(f"{info.name}: {info.state}, dropped to be built again")
                await store.database.drop_index(conn, info.name)
            say(f"{info.name}: building (CREATE INDEX CONCURRENTLY on {info.table}; kagent's writes go on)")
            await store.database.ddl(conn, statements[info.index])
            await store.database.comment_index(conn, info.name, VERSIONS[info.index])
        say("ANALYZE event, task")
        await store.database.analyze_kagent_tables(conn)
        return await status(store, conn)


async def uninstall(store: Store, conn: Connection, say: Callable[[str], None] = lambda _: None) -> IndexStatus:
    async with store.lineage.key_lock(conn, "kagent-fork:index", store.schema):
        for info in (await status(store, conn)).indexes:
            if info.state != "missing":
                say(f"{info.name}: dropping (DROP INDEX CONCURRENTLY)")
                await store.database.drop_index(conn, info.name)
        return await status(store, conn)
