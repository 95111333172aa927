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
    # the duration summed over the turns (each first to last event of its turn), as an experiment's totals
    bounds = [(conv.turns[2].started_at, conv.turns[3].started_at), (conv.turns[3].started_at, None)]
    spans = [
        [e.created_at for e in conv.events if a <= e.created_at and (b is None or e.created_at < b)] for a, b in bounds
    ]
    summed = sum(round((max(s) - min(s)).total_seconds(), 3) for s in spans)
    assert left["duration_seconds"] == pytest.approx(summed, abs=1e-6)
    assert left["duration_seconds"] == pytest.approx(sum(r["left"]["duration_seconds"] for r in data["aligned"]))
    whole = [e.created_at for e in conv.events if e.created_at >= conv.turns[2].started_at]
    assert left["duration_seconds"] < (max(whole) - min(whole)).total_seconds()  # not the time between the turns
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


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_a_regenerated_turn_sits_next_to_the_turn_it_replaces(
    client: Any, pool: asyncpg.Pool, dialect: str
) -> None:
    """Issue 25, 1: a fork before turn 2 that grew its own turn 2 is lined up with the source's turn 2,
    not with the source's last answer (turn 3)."""
    conv = await seed(pool, dialect=dialect, turns=3, tool_calls=True)
    fork = await fork_at(client, conv.session_id, conv.user_id, conv.turns[1].invocation_id)
    regenerated = await append_turns(pool, fork["id"], conv.user_id, dialect=dialect, turns=1, tool_calls=True)
    data = (await get(client, f"/api/sessions/{conv.session_id}/compare/{fork['id']}", conv.user_id)).json()["data"]
    assert data["common_turns"] == 1 and len(data["aligned"]) == 2
    first, second = data["aligned"]
    assert first["left"]["invocation_id"] == conv.turns[1].invocation_id
    assert first["left"]["question"] == conv.turns[1].user_text
    assert first["left"]["answer"] == conv.turns[1].agent_text  # the original answer to turn 2 ...
    assert first["right"]["invocation_id"] == regenerated.turns[0].invocation_id
    assert first["right"]["question"] == regenerated.turns[0].user_text
    assert first["right"]["answer"] == regenerated.turns[0].agent_text  # ... next to the new one
    own = expected_summary(conv, conv.turns[1].started_at, conv.turns[2].started_at)
    assert own is not None
    assert first["left"]["tool_calls"] == own["tool_calls"] and first["left"]["total_tokens"] == own["total_tokens"]
    span = [e.created_at for e in conv.events if conv.turns[1].started_at <= e.created_at < conv.turns[2].started_at]
    assert first["left"]["duration_seconds"] == pytest.approx((max(span) - min(span)).total_seconds())
    assert second["right"] is None and second["left"]["answer"] == conv.turns[2].agent_text
    # the totals are kept: the whole of each side after the common part
    assert data["left"]["turns_after"] == 2 and data["left"]["last_agent_text"] == conv.turns[2].agent_text
    assert data["right"]["turns_after"] == 1 and data["right"]["last_agent_text"] == regenerated.turns[0].agent_text
    # and the same from the other side
    mirrored = (await get(client, f"/api/sessions/{fork['id']}/compare/{conv.session_id}", conv.user_id)).json()
    assert [(r["left"], r["right"]) for r in mirrored["data"]["aligned"]] == [
        (r["right"], r["left"]) for r in data["aligned"]
    ]


async def test_nothing_after_the_common_part_aligns_nothing(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    fork = await fork_at(client, conv.session_id, conv.user_id, None)
    data = (await get(client, f"/api/sessions/{conv.session_id}/compare/{fork['id']}", conv.user_id)).json()["data"]
    assert data["common_turns"] == 2 and data["aligned"] == []
