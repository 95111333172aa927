"""POST /api/sessions/{id}/fork end to end, on both kagent product lines, read back as kagent reads."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from tests.helpers import digest, expected_summary, new_user, seed, session_rows, table_fingerprint
from tests.support import kagent_reads
from tests.support.conversations import Conversation, build_conversation, insert_conversation
from tests.support.ui_transcript import transcript_main, transcript_v010

LINES = ["legacy", "v1"]
STYLES = ["sample", "kagent"]


async def fork(client: Any, conv: Conversation, body: dict[str, Any] | None = None, **kw: Any) -> Any:
    headers = {"X-User-Id": kw.pop("user", conv.user_id), **kw.pop("headers", {})}
    return await client.post(f"/api/sessions/{conv.session_id}/fork", json=body or {}, headers=headers, **kw)


def transcript(conv_dialect: str, tasks: list[dict[str, Any]]) -> Any:
    return transcript_v010(tasks) if conv_dialect == "legacy" else transcript_main(tasks)


async def kagent_view(pool: asyncpg.Pool, session_id: str, user_id: str, dialect: str) -> dict[str, Any]:
    """The fork as kagent's backend serves it: its own queries, every row through the pinned readers."""
    line = "0.10.x" if dialect == "legacy" else "main"
    async with pool.acquire() as conn:
        session = await kagent_reads.get_session(conn, session_id, user_id)
        listed = [s["id"] for s in await kagent_reads.list_sessions(conn, user_id)]
        events = await kagent_reads.list_events_for_session_asc(conn, session_id, user_id)
        tasks = await kagent_reads.list_tasks_for_session(conn, session_id, user_id)
    for event in events:
        kagent_reads.parse_event(event["data"])
    for task in tasks:
        kagent_reads.parse_task(task["data"], task["protocol_version"], line=line)
    return {"session": session, "listed": listed, "events": events, "tasks": tasks}


@pytest.mark.parametrize("dialect", LINES)
@pytest.mark.parametrize("metadata_style", STYLES)
async def test_fork_before_a_turn_holds_exactly_the_earlier_conversation(
    client: Any, pool: asyncpg.Pool, dialect: str, metadata_style: str
) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True, metadata_style=metadata_style)
    before = await session_rows(pool, conv.session_id, conv.user_id)
    boundary = conv.turns[2]
    r = await fork(client, conv, {"rewind_before_invocation_id": boundary.invocation_id})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["error"] is False and body["message"]
    data = body["data"]
    new_id = data["id"]
    assert r.headers["location"] == f"/api/sessions/{new_id}"
    assert new_id != conv.session_id and data["user_id"] == conv.user_id
    assert data["agent_id"] == conv.agent_id and data["name"] == f"Fork of {conv.name}"
    assert data["created_at"] == data["updated_at"] and data["created_at"].endswith("Z")
    fork_info = data["fork"]
    kept_events = [e for e in conv.events if e.created_at < boundary.started_at]
    assert fork_info == {
        "parent_session_id": conv.session_id, "fork_root_session_id": conv.session_id, "depth": 1,
        "rewind_before_invocation_id": boundary.invocation_id, "rewind_before_task_id": None,
        "framework": "adk", "boundary_found": True,
        "events_copied": len(kept_events), "tasks_copied": fork_info["tasks_copied"],
        "messages_copied": fork_info["messages_copied"],
        "task_layout": "merged" if dialect == "legacy" else "per_task", "warnings": [],
        "summary": expected_summary(conv, boundary.started_at),
    }  # fmt: skip
    # The summary names exactly the left-behind turns (2 and 3): their tool calls, their texts.
    assert fork_info["summary"]["turns"] == 2 and fork_info["summary"]["tool_calls"]
    assert fork_info["summary"]["first_user_text"] == boundary.user_text[:200]
    assert fork_info["tasks_copied"] == (1 if dialect == "legacy" else 2)

    view = await kagent_view(pool, new_id, conv.user_id, dialect)
    assert view["session"] is not None and new_id in view["listed"]
    # events: the same data byte for byte, in the same order, with new row ids and the source times
    assert [e["data"] for e in view["events"]] == [e.data for e in kept_events]
    assert [e["created_at"] for e in view["events"]] == [e.created_at for e in kept_events]
    assert not {e["id"] for e in view["events"]} & {e.id for e in conv.events}
    assert {e["session_id"] for e in view["events"]} == {new_id}
    # tasks: every id rewritten, message and invocation ids kept, what the UI shows is the same
    copied = [json.loads(t["data"]) for t in view["tasks"]]
    assert len(copied) == fork_info["tasks_copied"]
    assert sum(len(t.get("history", [])) for t in copied) == fork_info["messages_copied"]
    for row, task in zip(view["tasks"], copied, strict=True):
        assert task["id"] == row["id"] and task["contextId"] == new_id and row["user_id"] == conv.user_id
        assert row["protocol_version"] == conv.protocol_version
        assert row["id"] not in {t.id for t in conv.tasks}
        for message in task.get("history", []):
            assert message.get("contextId", new_id) == new_id and message.get("taskId", row["id"]) == row["id"]
        for prefix in ("adk_", "kagent_"):
            assert task.get("metadata", {}).get(prefix + "session_id", new_id) == new_id
    source_tasks = conv.task_data()[:2]
    assert transcript(dialect, copied) == transcript(dialect, source_tasks)
    assert transcript(dialect, copied), "the transcript is not empty"
    # the source is untouched
    assert digest(await session_rows(pool, conv.session_id, conv.user_id)) == digest(before)


@pytest.mark.parametrize("dialect", LINES)
async def test_fork_of_a_fork_is_exact_and_records_lineage(client: Any, pool: asyncpg.Pool, dialect: str) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True, metadata_style="kagent")
    first = (await fork(client, conv)).json()["data"]
    assert first["fork"]["events_copied"] == len(conv.events) and first["fork"]["warnings"] == []
    # fork the fork (a merged task for legacy) before turn 2
    r = await client.post(
        f"/api/sessions/{first['id']}/fork",
        json={"rewind_before_invocation_id": conv.turns[1].invocation_id},
        headers={"X-User-Id": conv.user_id},
    )
    assert r.status_code == 201, r.text
    second = r.json()["data"]
    assert second["fork"]["parent_session_id"] == first["id"]
    assert second["fork"]["fork_root_session_id"] == conv.session_id and second["fork"]["depth"] == 2
    assert second["name"] == f"Fork of Fork of {conv.name}"
    view = await kagent_view(pool, second["id"], conv.user_id, dialect)
    assert [e["data"] for e in view["events"]] == [
        e.data for e in conv.events if e.created_at < conv.turns[1].started_at
    ]
    copied = [json.loads(t["data"]) for t in view["tasks"]]
    assert transcript(dialect, copied) == transcript(dialect, conv.task_data()[:1])
    async with pool.acquire() as conn:
        depth = await conn.fetchval(
            "SELECT depth FROM kagent_fork.fork WHERE session_id = $1 AND user_id = $2", second["id"], conv.user_id
        )
    assert depth == 2


@pytest.mark.parametrize("dialect", LINES)
async def test_whole_conversation_with_an_approval_turn(client: Any, pool: asyncpg.Pool, dialect: str) -> None:
    conv = await seed(pool, dialect=dialect, turns=3, tool_calls=True, approval_turn=1, metadata_style="kagent")
    r = await fork(client, conv)
    assert r.status_code == 201, r.text
    data = r.json()["data"]
    assert data["fork"]["boundary_found"] is False and data["fork"]["rewind_before_invocation_id"] is None
    view = await kagent_view(pool, data["id"], conv.user_id, dialect)
    assert [e["data"] for e in view["events"]] == [e.data for e in conv.events]
    copied = [json.loads(t["data"]) for t in view["tasks"]]
    assert transcript(dialect, copied) == transcript(dialect, conv.task_data())


@pytest.mark.parametrize("dialect", LINES)
@pytest.mark.parametrize("metadata_style", STYLES)
@pytest.mark.parametrize("last_turn", ["running_last_turn", "awaiting_approval_last_turn"])
async def test_a_still_running_last_turn_is_left_out(
    client: Any, pool: asyncpg.Pool, dialect: str, metadata_style: str, last_turn: str
) -> None:
    conv = await seed(
        pool, dialect=dialect, turns=3, metadata_style=metadata_style, tool_calls=True, **{last_turn: True}
    )
    r = await fork(client, conv)
    assert r.status_code == 201, r.text
    info = r.json()["data"]["fork"]
    assert len(info["warnings"]) == 1 and "still running" in info["warnings"][0]
    running = conv.turns[-1]
    view = await kagent_view(pool, r.json()["data"]["id"], conv.user_id, dialect)
    assert [e["data"] for e in view["events"]] == [e.data for e in conv.events if e.created_at < running.started_at]
    assert info["events_copied"] == len(view["events"])
    copied = [json.loads(t["data"]) for t in view["tasks"]]
    assert transcript(dialect, copied) == transcript(dialect, conv.task_data()[:2])
    states = {t["status"]["state"] for t in copied}
    assert states <= {"completed", "TASK_STATE_COMPLETED"}


@pytest.mark.parametrize("event_style", ["go", "python_compact", "openai"])
async def test_go_adk_and_openai_agents_events(client: Any, pool: asyncpg.Pool, event_style: str) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True, event_style=event_style)
    body = {"rewind_before_invocation_id": conv.turns[2].invocation_id} if conv.invocation_ids else {}
    r = await fork(client, conv, body)
    assert r.status_code == 201, r.text
    data = r.json()["data"]
    view = await kagent_view(pool, data["id"], conv.user_id, "v1")
    cut = conv.turns[2].started_at if conv.invocation_ids else None
    assert [e["data"] for e in view["events"]] == [e.data for e in conv.events if cut is None or e.created_at < cut]
    assert data["fork"]["boundary_found"] is bool(conv.invocation_ids)


async def test_a_boundary_that_is_missing(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    copy_all = await fork(client, conv, {"rewind_before_invocation_id": "e-not-there"})
    assert copy_all.status_code == 201
    info = copy_all.json()["data"]["fork"]
    assert info["boundary_found"] is False and info["events_copied"] == len(conv.events)
    assert "not found" in info["warnings"][0]
    before = await table_fingerprint(pool)
    refused = await fork(client, conv, {"rewind_before_invocation_id": "e-not-there", "if_boundary_missing": "error"})
    assert refused.status_code == 404 and "e-not-there" in refused.json()["error"]
    assert await table_fingerprint(pool) == before


async def test_default_names(client: Any, pool: asyncpg.Pool) -> None:
    named = await seed(pool, dialect="v1", turns=1, name="Pods")
    chat = await seed(pool, dialect="legacy", turns=1, name="Chat")
    unnamed = await seed(pool, dialect="v1", turns=1, name=None)
    assert (await fork(client, named)).json()["data"]["name"] == "Fork of Pods"
    assert (await fork(client, chat)).json()["data"]["name"] == f'Fork of "{chat.turns[0].user_text[:60]}"'
    assert (await fork(client, unnamed)).json()["data"]["name"] == f'Fork of "{unnamed.turns[0].user_text[:60]}"'
    custom = await fork(client, named, {"name": "Try the other way"})
    assert custom.json()["data"]["name"] == "Try the other way"


async def test_explicit_layouts(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=3, tool_calls=True)
    per_task = (await fork(client, conv, {"task_layout": "per_task"})).json()["data"]
    assert per_task["fork"]["task_layout"] == "per_task" and per_task["fork"]["tasks_copied"] == 3
    view = await kagent_view(pool, per_task["id"], conv.user_id, "legacy")
    assert transcript_v010([json.loads(t["data"]) for t in view["tasks"]]) == transcript_v010(conv.task_data())
    v1 = await seed(pool, dialect="v1", turns=2)
    merged = (await fork(client, v1, {"task_layout": "merged"})).json()["data"]
    assert merged["fork"]["task_layout"] == "merged" and merged["fork"]["tasks_copied"] == 1
    await kagent_view(pool, merged["id"], v1.user_id, "v1")  # still readable by kagent


async def test_dry_run_writes_nothing_and_answers_the_plan(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True)
    before = await table_fingerprint(pool)
    r = await fork(client, conv, {"rewind_before_invocation_id": conv.turns[2].invocation_id, "dry_run": True})
    assert r.status_code == 200, r.text
    plan = r.json()["data"]
    assert await table_fingerprint(pool) == before
    real = (await fork(client, conv, {"rewind_before_invocation_id": conv.turns[2].invocation_id})).json()["data"]
    for key in ("events_copied", "tasks_copied", "messages_copied", "task_layout", "boundary_found", "depth"):
        assert plan[key] == real["fork"][key], key
    assert plan["dry_run"] is True and plan["name"] == real["name"]
    kept = [e for e in conv.events if e.created_at < conv.turns[2].started_at]
    assert plan["bytes_to_copy"] > sum(len(e.data.encode()) for e in kept)
    assert plan["estimated_context_tokens"] > 0


async def test_idempotency_key(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=2)
    key = {"Idempotency-Key": "retry-1"}
    first = await fork(client, conv, {"name": "A"}, headers=key)
    assert first.status_code == 201
    again = await fork(client, conv, {"name": "A"}, headers=key)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["data"] == first.json()["data"]
    other_body = await fork(client, conv, {"name": "B"}, headers=key)
    assert other_body.status_code == 422
    async with pool.acquire() as conn:
        forks = await conn.fetchval(
            "SELECT count(*) FROM kagent_fork.fork WHERE parent_session_id = $1", conv.session_id
        )
    assert forks == 1
    # a key belongs to its caller: another user's same key makes that user's own fork
    assert (await fork(client, conv, {"name": "A"}, headers=key, user=new_user())).status_code == 404


async def test_refusals_for_state_kept_outside_events(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=1)
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO lg_checkpoint (user_id, thread_id, checkpoint_id, created_at, metadata, checkpoint, "
            "checkpoint_type) VALUES ($1, $2, 'c1', NOW(), '{}', '{}', 'json')",
            conv.user_id,
            conv.session_id,
        )
    r = await fork(client, conv)
    assert r.status_code == 422 and "LangGraph" in r.json()["error"]
    tasks_only = build_conversation(dialect="v1", turns=1, user_id=new_user())
    async with pool.acquire() as conn:
        await insert_conversation(conn, tasks_only, schema_version_ok=False)
        await conn.execute("DELETE FROM event WHERE session_id = $1", tasks_only.session_id)
    r = await fork(client, tasks_only)
    assert r.status_code == 422 and "no events" in r.json()["error"]


async def test_fork_depth_limit(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=1)
    session_id = conv.session_id
    for depth in range(1, 5):  # the test settings allow MAX_FORK_DEPTH = 4
        r = await client.post(f"/api/sessions/{session_id}/fork", json={}, headers={"X-User-Id": conv.user_id})
        assert r.status_code == 201 and r.json()["data"]["fork"]["depth"] == depth
        session_id = r.json()["data"]["id"]
    before = await table_fingerprint(pool)
    r = await client.post(f"/api/sessions/{session_id}/fork", json={}, headers={"X-User-Id": conv.user_id})
    assert r.status_code == 422 and "MAX_FORK_DEPTH" in r.json()["error"]
    assert await table_fingerprint(pool) == before


async def test_tasks_without_owner_follow_kagents_rule(client: Any, pool: asyncpg.Pool) -> None:
    conv = build_conversation(dialect="legacy", turns=2, user_id=new_user())
    async with pool.acquire() as conn:
        await insert_conversation(conn, conv, schema_version_ok=False, null_task_owner=True)
    r = await fork(client, conv)
    assert r.status_code == 201 and r.json()["data"]["fork"]["tasks_copied"] == 1
    async with pool.acquire() as conn:
        owners = await conn.fetch("SELECT user_id FROM task WHERE session_id = $1", r.json()["data"]["id"])
    assert [o["user_id"] for o in owners] == [conv.user_id]


@pytest.mark.parametrize("dialect", LINES)
async def test_an_older_unfinished_task_is_copied_closed(client: Any, pool: asyncpg.Pool, dialect: str) -> None:
    """A boundary before a running turn leaves it out; an older task its agent never finished is closed."""
    conv = await seed(pool, dialect=dialect, turns=4, running_last_turn=True)
    async with pool.acquire() as conn:  # the agent of turn 1 died mid-turn, long ago
        data = json.loads(conv.tasks[1].data)
        data["status"]["state"] = "working" if dialect == "legacy" else "TASK_STATE_WORKING"
        await conn.execute("UPDATE task SET data = $1 WHERE id = $2", json.dumps(data), conv.tasks[1].id)
    r = await fork(
        client, conv, {"rewind_before_invocation_id": conv.turns[3].invocation_id, "task_layout": "per_task"}
    )
    assert r.status_code == 201, r.text
    info = r.json()["data"]["fork"]
    assert info["events_copied"] == len([e for e in conv.events if e.created_at < conv.turns[3].started_at])
    assert len(info["warnings"]) == 1 and "canceled" in info["warnings"][0]
    view = await kagent_view(pool, r.json()["data"]["id"], conv.user_id, dialect)
    states = [json.loads(t["data"])["status"]["state"] for t in view["tasks"]]
    assert states[1] in ("canceled", "TASK_STATE_CANCELED") and len(states) == 3


@pytest.mark.parametrize("pool_size", [1, 4], ids=["serial", "overlapped"])
async def test_task_copy_on_a_second_connection_equals_the_serial_one(
    settings: Any, database_url: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, pool_size: int
) -> None:
    """Large forks read their tasks on a second connection in the fork's snapshot; with no connection to
    spare they read them on their own. Both give the same fork, in one transaction."""
    from service.identity import Caller
    from service.kagent.store import Store
    from service.operations import copying, forking
    from service.schemas import ForkRequest

    monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0)
    conv = await seed(pool, dialect="v1", turns=5, tool_calls=True)
    small = await asyncpg.create_pool(database_url, min_size=1, max_size=pool_size)
    try:
        svc = forking.Services(settings=settings, store=Store(settings.service_schema), pool=small)
        req = ForkRequest(rewind_before_invocation_id=conv.turns[4].invocation_id)
        outcome = await forking.fork(svc, Caller(user_id=conv.user_id), conv.session_id, req)
        assert outcome.created and outcome.session_id is not None
        assert small.get_size() == min(pool_size, 2), "the overlapped path opened its reader connection"
    finally:
        await small.close()
    view = await kagent_view(pool, outcome.session_id, conv.user_id, "v1")
    assert len(view["tasks"]) == 4
    assert transcript_main([json.loads(t["data"]) for t in view["tasks"]]) == transcript_main(conv.task_data()[:4])
