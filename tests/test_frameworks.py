"""The agent's framework read from what a session holds, and the refusals that protect the sessions a fork or a
rewind cannot handle yet, on the sessions kagent's own BYO runtimes wrote (tests/fixtures/frameworks/, captured
from kagent-langgraph and kagent-openai 0.10.4) and on kagent's ADK rows."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from service.kagent import frameworks
from tests.helpers import new_user, seed, table_fingerprint
from tests.support.framework_fixtures import fresh_copy, load_fixture, read_fixture


async def loaded(pool: asyncpg.Pool, name: str, *, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    fixture = fresh_copy(read_fixture(name), new_user())
    for table in drop:
        fixture["tables"][table] = []
    async with pool.acquire() as conn:
        await load_fixture(conn, fixture)
    return fixture


def get(client: Any, path: str, user: str) -> Any:
    return client.get(path, headers={"X-User-Id": user})


def post(client: Any, path: str, user: str, body: dict[str, Any]) -> Any:
    return client.post(path, json=body, headers={"X-User-Id": user})


def test_the_signals_decide_in_order() -> None:
    lg_task = json.dumps({"kind": "task", "id": "t", "contextId": "c", "metadata": {"thread_id": "c"}})
    claude_task = json.dumps({"kind": "task", "id": "t", "contextId": "c", "metadata": {"kagent.claude.session": "x"}})
    assert frameworks.decide(True, True, ["adk"], None) == "langgraph"
    assert frameworks.decide(False, True, ["adk"], None) == "crewai"
    assert frameworks.decide(False, False, [], lg_task) == "langgraph"
    assert frameworks.decide(False, False, [], claude_task) == "claude"
    assert frameworks.decide(False, False, ["openai-agents"], None) == "openai-agents"
    assert frameworks.decide(False, False, ["adk-go", "adk"], "not json") == "adk"
    assert frameworks.decide(False, False, [], None) == "unknown"


@pytest.mark.parametrize(("style", "expected"), [("python", "adk"), ("go", "adk-go"), ("openai", "openai-agents")])
async def test_kagents_adk_and_openai_rows(client: Any, pool: asyncpg.Pool, style: str, expected: str) -> None:
    conv = await seed(pool, dialect="legacy", turns=2, event_style=style)
    r = await get(client, f"/api/sessions/{conv.session_id}/invocations", conv.user_id)
    assert {t["framework"] for t in r.json()["data"]} == {expected}
    dry = await post(client, f"/api/sessions/{conv.session_id}/fork", conv.user_id, {"dry_run": True})
    assert dry.json()["data"]["framework"] == expected


async def test_a_langgraph_session_is_listed_by_task_and_refused_with_its_reason(
    client: Any, pool: asyncpg.Pool
) -> None:
    fixture = await loaded(pool, "langgraph_3_turns")
    sid, user = fixture["session_id"], fixture["user"]
    r = await get(client, f"/api/sessions/{sid}/invocations", user)
    turns = r.json()["data"]
    # kagent-langgraph wrote its tasks under kagent's default user: they are still this session's turns.
    assert [(t["task_id"], t["invocation_id"], t["framework"]) for t in turns] == [
        (t["task_id"], None, "langgraph") for t in fixture["turns"]
    ]
    assert [t["user_text"] for t in turns] == [t["question"] for t in fixture["turns"]]
    before = await table_fingerprint(pool)
    task = fixture["turns"][2]["task_id"]
    for path, body in [
        (f"/api/sessions/{sid}/fork", {"rewind_before_task_id": task}),
        (f"/api/sessions/{sid}/fork", {"dry_run": True}),
        (f"/api/sessions/{sid}/rewind", {"rewind_before_task_id": task}),
    ]:
        r = await post(client, path, user, body)
        assert r.status_code == 422 and "LangGraph" in r.json()["error"] and "checkpoint" in r.json()["error"], r.text
    assert await table_fingerprint(pool) == before


async def test_a_langgraph_session_without_checkpoints_in_the_database(client: Any, pool: asyncpg.Pool) -> None:
    """kagent main: the graph brings its own checkpointer, kagent's database holds only the tasks."""
    fixture = await loaded(pool, "langgraph_3_turns", drop=("lg_checkpoint", "lg_checkpoint_write"))
    sid, user = fixture["session_id"], fixture["user"]
    before = await table_fingerprint(pool)
    r = await post(client, f"/api/sessions/{sid}/fork", user, {})
    assert r.status_code == 422 and "not in kagent's database" in r.json()["error"], r.text
    assert await table_fingerprint(pool) == before


async def test_an_openai_session_written_under_kagents_default_user(client: Any, pool: asyncpg.Pool) -> None:
    """kagent-openai 0.10.4 writes its events and tasks under kagent's default user, in a session row of its own:
    a fork copies them under that user, into a runtime row of the fork's own, so that the runtime finds them."""
    fixture = await loaded(pool, "openai_3_turns")
    sid, user, admin = fixture["session_id"], fixture["user"], frameworks.KAGENT_DEFAULT_USER
    r = await get(client, f"/api/sessions/{sid}/invocations", user)
    assert [(t["task_id"], t["framework"]) for t in r.json()["data"]] == [
        (t["task_id"], "openai-agents") for t in fixture["turns"]
    ]
    task = fixture["turns"][2]["task_id"]
    r = await post(client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": task, "name": "again"})
    assert r.status_code == 201, r.text
    fork = r.json()["data"]
    assert fork["user_id"] == user and fork["fork"]["framework"] == "openai-agents"
    async with pool.acquire() as conn:
        sessions = await conn.fetch(
            "SELECT user_id, name, agent_id FROM session WHERE id = $1 ORDER BY user_id", fork["id"]
        )
        events = await conn.fetch(
            "SELECT id, user_id, data, created_at FROM event WHERE session_id = $1 ORDER BY created_at", fork["id"]
        )
        tasks = await conn.fetch("SELECT user_id, data FROM task WHERE session_id = $1", fork["id"])
        cut = await conn.fetchval("SELECT created_at FROM task WHERE id = $1", task)
        source_events = await conn.fetch(
            "SELECT id, data FROM event WHERE session_id = $1 AND user_id = $2 AND created_at < $3 ORDER BY created_at",
            sid, admin, cut,
        )  # fmt: skip
    assert sorted((s["user_id"], s["name"]) for s in sessions) == sorted([(user, "again"), (admin, None)])
    # The events before the third turn's input, byte for byte, under new ids and the runtime's user.
    assert [e["data"] for e in events] == [e["data"] for e in source_events] and len(events) == 5
    assert {e["user_id"] for e in events} == {admin} and not {e["id"] for e in events} & {
        e["id"] for e in source_events
    }
    items = [json.loads(e["data"])["items"][0] for e in events]
    assert [i.get("content") for i in items if i.get("role") == "user"] == [t["question"] for t in fixture["turns"][:2]]
    assert {t["user_id"] for t in tasks} == {admin} and len(tasks) == fork["fork"]["tasks_copied"]

    # A rewind before turn 2 hides the runtime's rows from its task on; undo brings back exactly them.
    async def runtime_rows() -> Any:
        async with pool.acquire() as conn:
            return [
                tuple(r)
                for r in await conn.fetch(
                    "SELECT 'event', id, deleted_at IS NULL FROM event WHERE session_id = $1 UNION ALL "
                    "SELECT 'task', id, deleted_at IS NULL FROM task WHERE session_id = $1 ORDER BY 1, 2",
                    sid,
                )
            ]

    original = await runtime_rows()
    second = fixture["turns"][1]["task_id"]
    r = await post(client, f"/api/sessions/{sid}/rewind", user, {"rewind_before_task_id": second})
    assert r.status_code == 200, r.text
    rewind = r.json()["data"]["rewind"]
    tables = fixture["tables"]
    start = next(datetime.fromisoformat(t["created_at"]) for t in tables["task"] if t["id"] == second)
    hidden = [e for e in tables["event"] if datetime.fromisoformat(e["created_at"]) >= start]
    assert (rewind["events_removed"], rewind["tasks_removed"]) == (len(hidden), 2) and hidden
    listed = await get(client, f"/api/sessions/{sid}/invocations", user)
    assert [t["task_id"] for t in listed.json()["data"]] == [fixture["turns"][0]["task_id"]]
    rewinds = await get(client, f"/api/sessions/{sid}/rewinds", user)
    assert rewinds.json()["data"][0]["undoable"] is True
    undo = await post(client, f"/api/sessions/{sid}/rewinds/{rewind['id']}/undo", user, {})
    assert undo.status_code == 200, undo.text
    assert await runtime_rows() == original


async def test_tasks_only_is_for_agents_that_keep_their_conversation_elsewhere(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=2)
    before = await table_fingerprint(pool)
    r = await post(client, f"/api/sessions/{conv.session_id}/fork", conv.user_id, {"tasks_only": True})
    assert r.status_code == 422 and "tasks_only" in r.json()["error"]
    assert await table_fingerprint(pool) == before
