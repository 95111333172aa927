"""Branch summaries: what a fork leaves behind and a rewind hides, the same every time, kept in the
lineage and rewind records and shown by the views without recomputing."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.helpers import expected_summary, first_event_at, seed


async def post(client: Any, path: str, user: str, body: dict[str, Any]) -> Any:
    return await client.post(path, json=body, headers={"X-User-Id": user})


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_fork_summary_is_deterministic_and_kept(client: Any, pool: asyncpg.Pool, dialect: str) -> None:
    conv = await seed(
        pool, dialect=dialect, turns=5, tool_calls=True, approval_turn=3, runtime_events=True, metadata_style="kagent"
    )
    boundary = conv.turns[2]
    path = f"/api/sessions/{conv.session_id}/fork"
    body = {"rewind_before_invocation_id": boundary.invocation_id}
    dry = [(await post(client, path, conv.user_id, {**body, "dry_run": True})).json()["data"] for _ in range(2)]
    made = await post(client, path, conv.user_id, body)
    summary = made.json()["data"]["fork"]["summary"]
    since = first_event_at(conv, boundary.invocation_id)
    assert summary == dry[0]["summary"] == dry[1]["summary"] == expected_summary(conv, since)
    assert summary["turns"] == 3 and summary["tool_calls"]["adk_request_confirmation"] == 1
    fork_id = made.json()["data"]["id"]

    # kept in the lineage record: forks and tree show the same summary later
    forks = (await client.get(f"/api/sessions/{conv.session_id}/forks", headers={"X-User-Id": conv.user_id})).json()
    assert [f["fork"]["summary"] for f in forks["data"] if f["session_id"] == fork_id] == [summary]
    tree = (await client.get(f"/api/sessions/{fork_id}/tree", headers={"X-User-Id": conv.user_id})).json()["data"]
    assert tree["session_id"] == conv.session_id and tree["fork"] is None
    assert [node["fork"]["summary"] for node in tree["forks"] if node["session_id"] == fork_id] == [summary]
    async with pool.acquire() as conn:
        kept = await conn.fetchval("SELECT summary->>'strategy' FROM kagent_fork.fork WHERE session_id = $1", fork_id)
    assert kept == "deterministic_v1"


async def test_a_fork_that_leaves_nothing_behind_has_no_summary(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    made = await post(client, f"/api/sessions/{conv.session_id}/fork", conv.user_id, {})
    assert made.json()["data"]["fork"]["summary"] is None


async def test_a_running_last_turn_left_out_is_summarized(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=3, running_last_turn=True, metadata_style="kagent")
    made = await post(client, f"/api/sessions/{conv.session_id}/fork", conv.user_id, {})
    data = made.json()["data"]["fork"]
    assert data["warnings"] and "still running" in data["warnings"][0]
    assert data["summary"] == expected_summary(conv, conv.turns[2].started_at)
    assert data["summary"]["turns"] == 1 and data["summary"]["last_agent_text"] is None


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_rewind_summary_is_kept_with_the_rewind(client: Any, pool: asyncpg.Pool, dialect: str) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True, event_style="go")
    boundary = conv.turns[1]
    path = f"/api/sessions/{conv.session_id}/rewind"
    dry = await post(
        client, path, conv.user_id, {"rewind_before_invocation_id": boundary.invocation_id, "dry_run": True}
    )
    done = await post(client, path, conv.user_id, {"rewind_before_invocation_id": boundary.invocation_id})
    summary = done.json()["data"]["rewind"]["summary"]
    assert summary == dry.json()["data"]["rewind"]["summary"] == expected_summary(conv, boundary.started_at)
    assert summary["turns"] == 3 and summary["events"] == done.json()["data"]["rewind"]["events_removed"]
    listed = (await client.get(f"/api/sessions/{conv.session_id}/rewinds", headers={"X-User-Id": conv.user_id})).json()
    assert listed["data"][0]["summary"] == summary
