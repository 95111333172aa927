"""The fixture sessions captured from kagent's BYO runtimes (tests/fixtures/frameworks/) load into kagent's
tables as the runtimes wrote them, and a fresh copy loads beside the original."""

from __future__ import annotations

import base64
import json

import asyncpg
import pytest

from tests.helpers import new_user
from tests.support.framework_fixtures import RUNTIME_DEFAULT_USER, fresh_copy, load_fixture, read_fixture
from tests.support.kagent_reads import list_events_for_session_asc


async def test_the_langgraph_fixture_loads_as_kagent_langgraph_wrote_it(pool: asyncpg.Pool) -> None:
    fixture = fresh_copy(read_fixture("langgraph_3_turns"), new_user())
    async with pool.acquire() as conn:
        await load_fixture(conn, fixture)
        session = await conn.fetchrow("SELECT user_id, agent_id FROM session WHERE id = $1", fixture["session_id"])
        tasks = await conn.fetch(
            "SELECT id, user_id FROM task WHERE session_id = $1 ORDER BY created_at", fixture["session_id"]
        )
        checkpoints = await conn.fetch(
            "SELECT checkpoint_id, parent_checkpoint_id, metadata, user_id FROM lg_checkpoint WHERE thread_id = $1"
            " ORDER BY checkpoint_id",
            fixture["session_id"],
        )
        writes = await conn.fetchval(
            "SELECT count(*) FROM lg_checkpoint_write WHERE thread_id = $1", fixture["session_id"]
        )
    assert session["user_id"] == fixture["user"] and session["agent_id"] == "kagent__NS__langgraph_agent"
    assert [t["id"] for t in tasks] == [t["task_id"] for t in fixture["turns"]]
    # kagent-langgraph 0.10.4 forwards no user: its tasks, checkpoints and writes are kagent's default user's
    assert {t["user_id"] for t in tasks} == {c["user_id"] for c in checkpoints} == {RUNTIME_DEFAULT_USER}
    assert (len(checkpoints), writes) == (11, 13)
    # one unbroken parent chain across the turns; each turn opens with an input checkpoint naming its task
    parents = [c["parent_checkpoint_id"] for c in checkpoints]
    assert parents == [None] + [c["checkpoint_id"] for c in checkpoints[:-1]]
    meta = [json.loads(base64.b64decode(c["metadata"])) for c in checkpoints]
    inputs = [m["a2a_task_id"] for m in meta if m["source"] == "input"]
    assert inputs == [t["task_id"] for t in fixture["turns"]]


async def test_the_openai_fixture_loads_twice_under_fresh_ids(pool: asyncpg.Pool) -> None:
    original = read_fixture("openai_3_turns")
    first, second = fresh_copy(original, new_user()), fresh_copy(original, new_user())
    assert first["session_id"] != second["session_id"] != original["session_id"]
    async with pool.acquire() as conn:
        await load_fixture(conn, first)
        await load_fixture(conn, second)
        owners = await conn.fetch("SELECT user_id FROM session WHERE id = $1 ORDER BY user_id", second["session_id"])
        events = await list_events_for_session_asc(conn, second["session_id"], RUNTIME_DEFAULT_USER)
    # kagent-openai 0.10.4 keeps its own session row under kagent's default user, beside the user's
    assert sorted(r["user_id"] for r in owners) == sorted([second["user"], RUNTIME_DEFAULT_USER])
    kinds = [json.loads(e["data"])["type"] for e in events]
    assert kinds and set(kinds) == {"conversation_items"}
    first_items = json.loads(events[0]["data"])["items"]
    assert first_items[0]["content"] == original["turns"][0]["question"]


@pytest.mark.parametrize("name", ["langgraph_3_turns", "openai_3_turns", "crewai_3_turns", "crewai_flow_3_turns"])
def test_each_fixture_has_three_completed_turns_and_the_model_requests(name: str) -> None:
    fixture = read_fixture(name)
    assert [t["state"] for t in fixture["turns"]] == ["completed"] * 3
    assert set(fixture["model_requests"]) == {t["question"] for t in fixture["turns"]}
