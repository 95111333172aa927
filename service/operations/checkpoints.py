"""The checkpoints of LangGraph agents on kagent 0.10.x: their state is the graph's checkpoints in lg_checkpoint /
lg_checkpoint_write, thread_id = the session id, each checkpoint's metadata naming the A2A task of its turn
(`a2a_task_id`). A fork copies the checkpoints of the kept turns to the fork's thread; a rewind hides those of
the hidden turns (docs/frameworks.md)."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from datetime import datetime

from service.errors import Unprocessable
from service.kagent.store import Store
from service.kagent.store.base import Connection
from service.kagent.store.langgraph import Checkpoint


def task_of(c: Checkpoint) -> str | None:
    """The A2A task a checkpoint's metadata names (kagent-langgraph writes `a2a_task_id` on every one)."""
    try:
        metadata = json.loads(base64.b64decode(c.metadata, validate=True))
    except (binascii.Error, ValueError):
        return None
    task = metadata.get("a2a_task_id") if isinstance(metadata, dict) else None
    return task if isinstance(task, str) else None


async def _thread(store: Store, conn: Connection, sid: str, users: tuple[str, ...]) -> list[tuple[Checkpoint, str]]:
    """The live checkpoints of the session's thread written by `users` (whose rows of it are the owner's), each
    with its task; 422 when one names none (its turn, and so the cut, cannot be told)."""
    named = []
    for c in await store.langgraph.checkpoints(conn, sid, list(users)):
        if (task := task_of(c)) is None:
            raise Unprocessable(
                f"this session's LangGraph checkpoint {c.checkpoint_id} names no A2A task (a2a_task_id): the turn "
                "it belongs to, and so where to cut the graph's state, cannot be told"
            )
        named.append((c, task))
    return named


def _rewritten(metadata: str, ids: dict[str, str]) -> str:
    """The metadata with each id of `ids` (as a whole JSON string) replaced by its new one, byte for byte
    otherwise: the task ids (`a2a_task_id`, `gen_ai.task.id`) and the thread (`a2a_context_id`, ...)."""
    text = base64.b64decode(metadata).decode()
    for old, new in ids.items():
        text = text.replace(json.dumps(old), json.dumps(new))
    return base64.b64encode(text.encode()).decode()


def kept(rows: list[tuple[Checkpoint, str]], tasks: set[str]) -> list[Checkpoint]:
    """The checkpoints of the kept turns (their `a2a_task_id` is a kept task): the chain up to the last
    checkpoint of an earlier turn, the parent of the chosen turn's input checkpoint. Never cut by time (an
    input checkpoint can be written before its task row). 422 if that is not a whole chain from the root."""
    chosen = [c for c, task in rows if task in tasks]
    ids = {(c.user_id, c.checkpoint_ns, c.checkpoint_id) for c in chosen}
    for c in chosen:
        if c.parent_checkpoint_id is not None and (c.user_id, c.checkpoint_ns, c.parent_checkpoint_id) not in ids:
            raise Unprocessable(
                f"this session's LangGraph checkpoint {c.checkpoint_id} follows one of a turn the fork does not "
                "keep: its checkpoints do not follow its turns, so no cut keeps a whole graph state"
            )
    return chosen


async def copy_thread(
    store: Store,
    conn: Connection,
    *,
    source: tuple[str, str],
    users: tuple[str, ...],
    fork: tuple[str, str],
    before: datetime | None,
) -> tuple[int, int]:
    """Copy to the fork's thread the checkpoints of the tasks the fork copied, under the user they were
    written under, ids kept, their metadata naming the fork's tasks and thread; (checkpoints, writes).

    `source` and `fork`: (session id, user of the tasks), `users`: whose rows of the source are its owner's;
    the fork's tasks are the source's before `before`,
    copied in order with their created_at kept, so they pair one to one."""
    (sid, owner), (new_sid, new_owner) = source, fork
    old = await store.langgraph.task_ids_before(conn, sid, owner, before)
    new = await store.langgraph.task_ids_before(conn, new_sid, new_owner, None)
    if (
        len(old) != len(new)
        or any(a[1] != b[1] for a, b in zip(old, new, strict=True))
        or len({at for _, at in old}) != len(old)
    ):
        raise Unprocessable(
            "this LangGraph session's tasks cannot be paired with their copies (two share a creation time): "
            "its checkpoints cannot be named after the fork's tasks"
        )
    ids = {a[0]: b[0] for a, b in zip(old, new, strict=True)}
    rows = kept(await _thread(store, conn, sid, users), set(ids))
    ids[sid] = new_sid
    copies = [dataclasses.replace(c, metadata=_rewritten(c.metadata, ids)) for c in rows]
    writes = await store.langgraph.copy(conn, sid, new_sid, copies)
    return len(copies), writes


async def hide_hidden_turns(store: Store, conn: Connection, sid: str, users: tuple[str, ...], stamp: datetime) -> int:
    """A rewind's part: hide, with its stamp, the checkpoints (and writes) of the tasks it hid."""
    hidden = await store.langgraph.task_ids_hidden(conn, sid, stamp)
    rows = [c for c, task in await _thread(store, conn, sid, users) if task in hidden]
    return await store.langgraph.hide(conn, sid, rows, stamp) if rows else 0
