"""Fork lineage views: a session's direct forks, and the whole tree that holds it.

Only the caller's sessions (and the one a share token names) are shown. A tree is drawn from the
highest ancestor the caller may see; a deleted or missing session is marked, not dropped; a cycle
in the records or a chain deeper than the limit never loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

from service.identity import Access, Caller, visible_session
from service.kagent.store.base import Connection
from service.kagent.store.events import EventTurn
from service.kagent.store.lineage import Lineage
from service.operations import summary
from service.schemas import LineageRecord, rfc3339
from service.services import Services

Status = Literal["ok", "deleted", "missing"]


class ForkEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A direct fork; `status` as a tree node's: "missing" when its session row is gone (kagent's session
    retention purges idle sessions, forks included, and leaves this record)."""

    session_id: str
    name: str | None
    status: Status
    created_at: str
    fork: LineageRecord


class TreeNode(msgspec.Struct, frozen=True, kw_only=True):
    """A session of the tree: its agent and what it holds now (`events`, `turns`: live, counted when the
    tree is read, not at fork time), and for a fork, where it was made: `fork_turn`, the position (from 1)
    of its boundary among the parent's turns now, and `fork_question`, that turn's user text (both null
    for a whole-chat fork, or when the parent no longer shows that turn)."""

    session_id: str
    name: str | None
    status: Status
    forks: list[TreeNode]
    fork: LineageRecord | None = None
    agent_id: str | None = None
    events: int | None = None
    turns: int | None = None
    fork_turn: int | None = None
    fork_question: str | None = None


def record(lineage: Lineage) -> LineageRecord:
    return LineageRecord(
        parent_session_id=lineage.parent_session_id, fork_root_session_id=lineage.root_session_id,
        depth=lineage.depth, rewind_before_invocation_id=lineage.rewind_before_invocation_id,
        rewind_before_task_id=lineage.rewind_before_task_id, framework=lineage.framework,
        boundary_found=lineage.boundary_found, events_copied=lineage.events_copied,
        tasks_copied=lineage.tasks_copied, messages_copied=lineage.messages_copied,
        task_layout=lineage.task_layout, warnings=msgspec.json.decode(lineage.warnings, type=list[str]),
        summary=summary.loaded(lineage.summary), created_at=rfc3339(lineage.created_at),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class _Viewer:
    user_id: str
    shared: tuple[str, str] | None  # (session, owner) the share token names

    def sees(self, session_id: str, owner: str) -> bool:
        return owner == self.user_id or self.shared == (session_id, owner)


def _viewer(caller: Caller, session_id: str, access: Access) -> _Viewer:
    return _Viewer(user_id=caller.user_id, shared=(session_id, access.owner) if access.via_share else None)


async def forks(svc: Services, caller: Caller, session_id: str) -> list[ForkEntry]:
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, access = await visible_session(svc, conn, caller, session_id)
        viewer = _viewer(caller, session_id, access)
        entries = []
        for child in await svc.store.lineage.forks_of(conn, source.id, source.user_id):
            if not viewer.sees(child.session_id, child.user_id):
                continue
            status = await svc.store.sessions.session_status(conn, child.session_id, child.user_id)
            entries.append(
                ForkEntry(
                    session_id=child.session_id, name=status[0] if status else None,
                    status="missing" if status is None else ("deleted" if status[1] else "ok"),
                    created_at=rfc3339(child.created_at), fork=record(child),
                )
            )  # fmt: skip
        return entries


async def tree(svc: Services, caller: Caller, session_id: str) -> TreeNode:
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, access = await visible_session(svc, conn, caller, session_id)
        viewer = _viewer(caller, session_id, access)
        limit = svc.settings.max_fork_depth + 1
        # Climb to the highest visible ancestor; `seen` stops a cycle in the records.
        top, top_lineage = (
            (source.id, source.user_id),
            await svc.store.lineage.lineage_of(conn, source.id, source.user_id),
        )
        seen = {top}
        lineage = top_lineage
        while lineage is not None and len(seen) <= limit:
            parent = (lineage.parent_session_id, lineage.parent_user_id)
            if parent in seen or not viewer.sees(*parent):
                break
            seen.add(parent)
            top = parent
            lineage = top_lineage = await svc.store.lineage.lineage_of(conn, *parent)
        return await _node(svc, conn, viewer, top, top_lineage, {top}, limit, parent_turns=[])


async def _node(
    svc: Services,
    conn: Connection,
    viewer: _Viewer,
    key: tuple[str, str],
    lineage: Lineage | None,
    path: set[tuple[str, str]],
    budget: int,
    *,
    parent_turns: list[EventTurn],
) -> TreeNode:
    node = await svc.store.sessions.session_node(conn, *key)
    state: Status = "missing" if node is None else ("deleted" if node.deleted else "ok")
    # The turns as the listing shows them (deleted sessions' rows are read as they are: a tree shows what
    # each session holds now).
    turns = await svc.store.events.event_turns(conn, *key) if node is not None else []
    children = []
    if budget > 0:
        for child in await svc.store.lineage.forks_of(conn, *key):
            child_key = (child.session_id, child.user_id)
            if child_key in path or not viewer.sees(*child_key):
                continue
            children.append(
                await _node(svc, conn, viewer, child_key, child, path | {child_key}, budget - 1, parent_turns=turns)
            )
    at = _position(parent_turns, lineage.rewind_before_invocation_id if lineage is not None else None)
    return TreeNode(
        session_id=key[0], name=node.name if node else None, status=state, forks=children,
        fork=record(lineage) if lineage is not None else None, agent_id=node.agent_id if node else None,
        events=node.events if node else None, turns=len(turns) if node else None,
        fork_turn=at + 1 if at is not None else None,
        fork_question=parent_turns[at].user_text if at is not None else None,
    )  # fmt: skip


def _position(turns: list[EventTurn], invocation_id: str | None) -> int | None:
    """Where the turn stands among `turns` (from 0), None when it is not one of them."""
    if invocation_id is None:
        return None
    return next((i for i, t in enumerate(turns) if t.invocation_id == invocation_id), None)
