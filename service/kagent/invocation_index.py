"""The retired invocation index: expression indexes on kagent's `event` and `task` tables that earlier
versions let an operator add (`kagent-fork index install`, 0.x) so that boundary searches were lookups.
The turn map (service/kagent/turn_map.py, in the service's own schema) serves every read they served, as
fast or faster, and adds nothing to kagent's writes, which the index made 1.2-1.3x slower (docs/
invocation-index.md, bench/README.md). The service no longer reads them: `status` says whether one is still
there (start-up, /readyz), `uninstall` removes it, and the start-up warns while it is there. The names and
versions are those earlier versions built (sql/invocation_index.sql keeps their definitions)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import msgspec

from service.kagent.store import Store
from service.kagent.store.base import Connection

log = logging.getLogger("kagent_fork")

# The indexes, by their name in sql/invocation_index.sql, and the table each is on.
INDEXES = {"event_invocation": "event", "event_time": "event", "task_invocations": "task"}
# The version earlier versions wrote in each index's comment (an index with another comment was built by
# an older one: "outdated").
VERSIONS = {
    "event_invocation": "kagent-fork invocation index 1",
    "event_time": "kagent-fork invocation index 1",
    "task_invocations": "kagent-fork invocation index 2",
}
RETIRED = (
    "the invocation index is retired: the turn map serves every read it served and adds nothing to kagent's "
    "writes (docs/invocation-index.md)"
)

IndexState = Literal["valid", "invalid", "outdated", "missing"]
Overall = Literal["installed", "absent", "incomplete"]


class IndexInfo(msgspec.Struct, frozen=True, kw_only=True):
    index: str  # event_invocation, event_time or task_invocations
    name: str  # in PostgreSQL: <service schema>_<index>
    table: str
    state: IndexState
    bytes: int


class IndexStatus(msgspec.Struct, frozen=True, kw_only=True):
    """absent: none of the retired indexes is on kagent's tables (as it should be); installed or incomplete:
    all or some are still there, costing kagent's writes, and `uninstall` removes them."""

    state: Overall
    indexes: list[IndexInfo]


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


async def warn_if_present(store: Store, conn: Connection) -> IndexStatus:
    """The status, with a warning in the log while any of the retired indexes is still there."""
    now = await status(store, conn)
    if now.state != "absent":
        there = ", ".join(i.name for i in now.indexes if i.state != "missing")
        log.warning("%s; still on kagent's tables: %s. Remove them: kagent-fork index uninstall", RETIRED, there)
    return now


async def uninstall(store: Store, conn: Connection, say: Callable[[str], None] = lambda _: None) -> IndexStatus:
    """DROP INDEX CONCURRENTLY of each retired index still there (kagent's writes go on meanwhile); one
    removal at a time (an advisory lock). Needs a connection outside any transaction."""
    async with store.lineage.key_lock(conn, "kagent-fork:index", store.schema):
        for info in (await status(store, conn)).indexes:
            if info.state != "missing":
                say(f"{info.name}: dropping (DROP INDEX CONCURRENTLY)")
                await store.database.drop_index(conn, info.name)
        return await status(store, conn)
