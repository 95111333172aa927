"""The turn listing says which turn each message of kagent's chat belongs to, on both lines.

kagent's chat rebuilds its messages from the session's tasks (ui/src/lib/messageHandlers.ts; ported in
tests/support/ui_transcript.py): a user message keeps its messageId on both lines, an agent text keeps it on
0.10.x only, tool cards keep their call ids, every message its task's id. For conversations as kagent's
runtimes write them (one task a turn, an approval) and as kagent-fork writes them (a merged fork, a fork
per task), every rendered message must be placed in its turn by the listing's task_ids, message_ids,
call_ids, response_ids and text_count, as the TypeScript client's turnOfMessage places them.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from service.kagent import dialects
from tests.helpers import seed
from tests.support import kagent_reads
from tests.support.ui_transcript import _extract_messages_main, _extract_messages_v010


def _text(message: dict[str, Any]) -> str:
    return "".join(p.get("text") or "" for p in message["parts"] if p.get("kind") == "text")


def _is_text_bubble(message: dict[str, Any]) -> bool:
    meta = message["metadata"]
    if message["role"] == "user" or not _text(message).strip():
        return False
    if meta.get("originalType") not in (None, "TextMessage"):
        return False
    return not any(meta.get(k) for k in ("hitlCard", "toolCallData", "toolResultData", "askUserData"))


def _calls(message: dict[str, Any]) -> tuple[set[str], set[str]]:
    meta = message["metadata"]
    calls = {c["id"] for c in meta.get("toolCallData") or []}
    calls |= {meta["askUserData"]["id"]} if meta.get("askUserData") else set()
    card = meta.get("hitlCard") or {}
    calls |= {t.get("call_id") for t in (card.get("request") or {}).get("tools") or []}
    return calls - {None}, {r["call_id"] for r in meta.get("toolResultData") or []}


async def _listing_and_tasks(client: Any, pool: asyncpg.Pool, session_id: str, user: str) -> tuple[Any, Any]:
    r = await client.get(f"/api/sessions/{session_id}/invocations", headers={"X-User-Id": user})
    assert r.status_code == 200, r.text
    async with pool.acquire() as conn:
        rows = await kagent_reads.list_tasks_for_session(conn, session_id, user)
    return r.json()["data"], [(t["id"], json.loads(t["data"])) for t in rows]


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
@pytest.mark.parametrize("metadata_style", ["kagent", "sample"])
async def test_every_rendered_message_finds_its_turn(
    client: Any, pool: asyncpg.Pool, dialect: str, metadata_style: str
) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True, shapes={1: "approved"},
                      metadata_style=metadata_style)  # fmt: skip
    agent_text = {t.invocation_id: t.agent_text for t in conv.turns}
    user_text = {t.invocation_id: t.user_text for t in conv.turns}
    sessions = {"source": conv.session_id}
    for layout in ("merged", "per_task"):
        r = await client.post(f"/api/sessions/{conv.session_id}/fork", json={"task_layout": layout},
                              headers={"X-User-Id": conv.user_id})  # fmt: skip
        assert r.status_code == 201, r.text
        sessions[layout] = r.json()["data"]["id"]
    render = _extract_messages_v010 if dialect == "legacy" else _extract_messages_main
    for label, session_id in sessions.items():
        turns, tasks = await _listing_and_tasks(client, pool, session_id, conv.user_id)
        assert [t["invocation_id"] for t in turns] == conv.invocation_ids, label
        if label == "merged":
            assert len(tasks) == 1 and all(t["task_ids"] == [tasks[0][0]] for t in turns)
        for task_id, task in tasks:
            holders = [i for i, t in enumerate(turns) if task_id in t["task_ids"]]
            assert holders, (label, task_id)
            shown = render([task])
            bubbles = [m for m in shown if _is_text_bubble(m)]
            # text_count: as many text bubbles as the chat shows, and the k-th bubble is its turn's reply.
            assert sum(turns[i]["text_count"] for i in holders) == len(bubbles), (label, task_id)
            counted = [i for i in holders for _ in range(turns[i]["text_count"])]
            for bubble, i in zip(bubbles, counted, strict=True):
                assert _text(bubble) == agent_text[turns[i]["invocation_id"]], (label, i)
            for message in shown:
                if message["role"] == "user":
                    if not _text(message):  # main's approval answer (data parts): an empty bubble kagent hides
                        continue
                    owners = [i for i, t in enumerate(turns) if message["messageId"] in t["message_ids"]]
                    assert len(owners) == 1, (label, message)
                    assert _text(message) == user_text[turns[owners[0]]["invocation_id"]]
                    continue
                if dialect == "legacy" and _is_text_bubble(message):  # 0.10.x keeps an agent text's id
                    owners = [i for i in holders if message["messageId"] in turns[i]["message_ids"]]
                    assert [_text(message)] == [agent_text[turns[i]["invocation_id"]] for i in owners]
                calls, responses = _calls(message)
                for call in calls:
                    assert any(call in turns[i]["call_ids"] for i in holders), (label, call)
                for response in responses:
                    assert any(response in turns[i]["response_ids"] for i in holders), (label, response)


async def test_a_turn_without_a_task_lists_empty_marks(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2, running_last_turn=True, metadata_style="kagent")
    turns, _ = await _listing_and_tasks(client, pool, conv.session_id, conv.user_id)
    first, running = turns
    assert first["task_ids"] == [conv.turns[0].task_id] and first["text_count"] == 1
    # A running turn's task names no invocation yet (kagent): the turn is known from its events only.
    assert running["task_ids"] == [] and running["message_ids"] == [] and running["text_count"] == 0


async def test_a_main_task_whose_history_alone_names_a_turn_lists_its_marks(pool: asyncpg.Pool) -> None:
    """A kagent main task holding two turns, one named only by its history (the history of another turn's task
    before it): its marks are made (the pairing of its user messages read no marks outside the history for
    that turn, which it used to look up and fail on)."""
    conv = await seed(pool, dialect="v1", turns=2, tool_calls=True)
    async with pool.acquire() as conn:
        first, last = await conn.fetch(
            "SELECT data FROM task WHERE session_id = $1 ORDER BY created_at", conv.session_id
        )
    task = json.loads(last["data"])
    task["history"] = [*json.loads(first["data"])["history"], *task["history"]]
    marks = dialects.chat_marks(task, dialects.TaskDialect.V1)
    assert set(marks) == set(conv.invocation_ids)
    assert marks[conv.invocation_ids[0]].message_ids  # the first turn's history messages are its own
