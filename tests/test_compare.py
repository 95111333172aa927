"""Compare: two branches side by side, their common turns and what each holds after them."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.helpers import append_turns, expected_summary, new_user, seed, table_fingerprint


async def get(client: Any, path: str, user: str) -> Any:
    return await client.get(path, headers={"X-User-Id": user})


async def fork_at(client: Any, session_id: str, user: str, invocation_id: str | None) -> dict[str, Any]:
    r = await client.post(
        f"/api/sessions/{session_id}/fork", json={"rewind_before_invocation_id": invocation_id},
        headers={"X-User-Id": user},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    data: dict[str, Any] = r.json()["data"]
    return data


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_a_fork_and_its_source_after_new_turns_on_both_sides(
    client: Any, pool: asyncpg.Pool, dialect: str
) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True)
    fork = await fork_at(client, conv.session_id, conv.user_id, conv.turns[2].invocation_id)

    right_now = (await get(client, f"/api/sessions/{conv.session_id}/compare/{fork['id']}", conv.user_id)).json()
    data = right_now["data"]
    assert data["common_turns"] == 2
    left, right = data["left"], data["right"]
    assert left["session_id"] == conv.session_id and right["session_id"] == fork["id"]
    assert left["name"] == conv.name and right["name"] == fork["name"]
    summary = expected_summary(conv, conv.turns[2].started_at)
    assert summary is not None
    assert left["turns_after"] == 2 and left["tool_calls"] == summary["tool_calls"]
    assert left["total_tokens"] == summary["total_tokens"] and left["last_agent_text"] == summary["last_agent_text"]
    assert left["first_user_text"] == conv.turns[2].user_text
    span = [e.created_at for e in conv.events if e.created_at >= conv.turns[2].started_at]
    assert left["duration_seconds"] == pytest.approx((max(span) - min(span)).total_seconds())
    assert right == {
        "session_id": fork["id"], "name": fork["name"], "turns_after": 0, "tool_calls": {}, "total_tokens": 0,
        "duration_seconds": 0.0, "first_user_text": None, "last_agent_text": None,
    }  # fmt: skip

    # the source goes on by one plain turn, the fork by two turns that call tools
    more_source = await append_turns(pool, conv.session_id, conv.user_id, dialect=dialect, turns=1)
    more_fork = await append_turns(pool, fork["id"], conv.user_id, dialect=dialect, turns=2, tool_calls=True)
    later = (await get(client, f"/api/sessions/{fork['id']}/compare/{conv.session_id}", conv.user_id)).json()["data"]
    assert later["common_turns"] == 2
    left, right = later["left"], later["right"]
    assert left["session_id"] == fork["id"] and left["turns_after"] == 2
    assert left["last_agent_text"] == more_fork.turns[-1].agent_text
    assert left["first_user_text"] == more_fork.turns[0].user_text
    assert left["tool_calls"] == expected_summary(more_fork, more_fork.turns[0].started_at)["tool_calls"]  # type: ignore[index]
    assert sum(left["tool_calls"].values()) >= 2
    assert right["turns_after"] == 3 and right["last_agent_text"] == more_source.turns[-1].agent_text
    assert right["total_tokens"] > 0 and left["total_tokens"] > 0


async def test_two_forks_of_one_parent(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True, event_style="go")
    a = await fork_at(client, conv.session_id, conv.user_id, conv.turns[1].invocation_id)
    b = await fork_at(client, conv.session_id, conv.user_id, None)
    data = (await get(client, f"/api/sessions/{a['id']}/compare/{b['id']}", conv.user_id)).json()["data"]
    assert data["common_turns"] == 1 and data["left"]["turns_after"] == 0 and data["right"]["turns_after"] == 2
    same = (await get(client, f"/api/sessions/{b['id']}/compare/{conv.session_id}", conv.user_id)).json()["data"]
    assert same["common_turns"] == 3 and same["left"]["turns_after"] == same["right"]["turns_after"] == 0


async def test_both_sides_must_be_visible(client: Any, pool: asyncpg.Pool) -> None:
    mine = await seed(pool, dialect="v1", turns=1)
    theirs = await seed(pool, dialect="v1", turns=1)
    before = await table_fingerprint(pool)
    for path in (
        f"/api/sessions/{mine.session_id}/compare/{theirs.session_id}",
        f"/api/sessions/{theirs.session_id}/compare/{mine.session_id}",
        f"/api/sessions/{mine.session_id}/compare/no-such-session",
    ):
        r = await get(client, path, mine.user_id)
        assert r.status_code == 404 and r.json() == {"error": "Session not found"}
    r = await get(client, f"/api/sessions/{mine.session_id}/compare/{mine.session_id}", new_user())
    assert r.status_code == 404
    assert await table_fingerprint(pool) == before
