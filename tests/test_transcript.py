"""The transcript: a conversation as the agent sees it, from its events, on both product lines and for
every event style kagent's runtimes write."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from tests.helpers import new_user, seed, table_fingerprint
from tests.support.conversations import Conversation, create_share

STYLES = ["python", "python_compact", "go"]


async def get_transcript(client: Any, session_id: str, user: str, **params: str) -> Any:
    return await client.get(f"/api/sessions/{session_id}/transcript", params=params, headers={"X-User-Id": user})


def at(text: str) -> datetime:
    """An RFC 3339 timestamp of the API as a time."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def oracle_tokens(conv: Conversation, event_ids: tuple[str, ...]) -> int:
    """total_token_count of these events, read here from the fixture's JSON (either key style)."""
    by_id = {e.id: json.loads(e.data) for e in conv.events}
    total = 0
    for event_id in event_ids:
        doc = by_id[event_id]
        usage = doc.get("usage_metadata") or doc.get("usageMetadata") or {}
        total += usage.get("total_token_count") or usage.get("totalTokenCount") or 0
    return total


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
@pytest.mark.parametrize("style", STYLES)
async def test_transcript_is_the_conversation_turn_by_turn(
    client: Any, pool: asyncpg.Pool, dialect: str, style: str
) -> None:
    conv = await seed(
        pool, dialect=dialect, turns=4, tool_calls=True, approval_turn=2, event_style=style,
        runtime_events=style != "go", metadata_style="kagent",
    )  # fmt: skip
    r = await get_transcript(client, conv.session_id, conv.user_id)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["error"] is False and body["message"]
    data = body["data"]
    assert data["session_id"] == conv.session_id and data["name"] == conv.name and data["warnings"] == []
    got = data["turns"]
    assert [t["invocation_id"] for t in got] == conv.invocation_ids
    assert [t["index"] for t in got] == list(range(4))
    for turn, want in zip(got, conv.turns, strict=True):
        assert turn["task_id"] == want.task_id and turn["state"] == want.state
        texts = [m for m in turn["messages"] if m["kind"] == "text"]
        assert texts[0]["role"] == "user" and texts[0]["author"] == "user" and texts[0]["text"] == want.user_text
        assert [m["text"] for m in texts if m["role"] == "agent"][-1] == want.agent_text
        calls = [m for m in turn["messages"] if m["kind"] == "tool_call"]
        results = [m for m in turn["messages"] if m["kind"] == "tool_result"]
        # every function call of the turn is shown with its arguments, and answered by a result of that id
        assert {c["tool_call_id"] for c in calls} >= set(want.function_call_ids)
        assert all(c["tool_name"] and isinstance(c.get("args"), dict) for c in calls)
        assert {r["tool_call_id"] for r in results} == {c["tool_call_id"] for c in calls}
        assert all(r["role"] == "agent" or r["author"] == "user" for r in results)
        if want.kind == "approval":
            assert "adk_request_confirmation" in {c["tool_name"] for c in calls}
        assert turn["usage"]["total_tokens"] == oracle_tokens(conv, want.event_ids) > 0
        assert turn["usage"]["prompt_tokens"] > 0 and turn["usage"]["completion_tokens"] > 0
        # RFC 3339 strings trim trailing zeros ("09.37Z" is before "09.374Z" but sorts after it): compare times
        started, ended = at(turn["started_at"]), at(turn["ended_at"])
        assert started <= ended
        assert all(started <= at(m["at"]) <= ended for m in turn["messages"])

    # the token estimate is the one a fork's dry run of the whole conversation answers
    dry = await client.post(
        f"/api/sessions/{conv.session_id}/fork", json={"dry_run": True}, headers={"X-User-Id": conv.user_id}
    )
    assert data["estimated_context_tokens"] == dry.json()["data"]["estimated_context_tokens"] > 0


async def test_non_json_and_soft_deleted_rows(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True)
    second = conv.turns[1]
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data) VALUES ($1, $2, $3, $4, $4, $5)",
            str(uuid.uuid4()), conv.user_id, conv.session_id, second.started_at + timedelta(microseconds=1),
            "this row is not JSON {",
        )  # fmt: skip
        hidden = json.loads(conv.events[0].data)
        hidden["content"]["parts"][0]["text"] = "a message that was rewound away"
        await conn.execute(
            "INSERT INTO event (id, user_id, session_id, created_at, updated_at, deleted_at, data) "
            "VALUES ($1, $2, $3, $4, $4, NOW(), $5)",
            str(uuid.uuid4()), conv.user_id, conv.session_id, second.started_at + timedelta(microseconds=2),
            json.dumps(hidden),
        )  # fmt: skip
    data = (await get_transcript(client, conv.session_id, conv.user_id)).json()["data"]
    assert [t["invocation_id"] for t in data["turns"]] == conv.invocation_ids
    assert len(data["warnings"]) == 1 and data["warnings"][0].startswith("1 event(s) are not ADK events")
    assert "rewound away" not in json.dumps(data)
    markdown = await get_transcript(client, conv.session_id, conv.user_id, format="markdown")
    assert markdown.status_code == 200 and "warning: 1 event(s)" in markdown.text


async def test_long_tool_arguments_and_responses_are_cut(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=1, event_style="go")
    turn = conv.turns[0]
    big = {"query": "x" * 5000}
    call = {
        "id": str(uuid.uuid4()), "invocationId": turn.invocation_id, "author": "k8s_agent",
        "content": {"role": "model", "parts": [{"functionCall": {"id": "call-1", "name": "search", "args": big}}]},
    }  # fmt: skip
    answer = {
        "id": str(uuid.uuid4()), "invocationId": turn.invocation_id, "author": "k8s_agent",
        "content": {"role": "user", "parts": [{"functionResponse": {"id": "call-1", "name": "search",
                                                                     "response": {"ok": True}}}]},
    }  # fmt: skip
    async with pool.acquire() as conn:
        for i, doc in enumerate((call, answer), 1):
            await conn.execute(
                "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data) "
                "VALUES ($1, $2, $3, $4, $4, $5)",
                doc["id"], conv.user_id, conv.session_id, turn.started_at + timedelta(microseconds=i), json.dumps(doc),
            )  # fmt: skip
    data = (await get_transcript(client, conv.session_id, conv.user_id)).json()["data"]
    messages = data["turns"][0]["messages"]
    cut = next(m for m in messages if m.get("tool_call_id") == "call-1" and m["kind"] == "tool_call")
    assert isinstance(cut["args"], str) and len(cut["args"]) < 2100
    assert (
        cut["args"].startswith('{"query": "xxx') and f"[cut: {len(json.dumps(big))} characters in all]" in cut["args"]
    )
    result = next(m for m in messages if m.get("tool_call_id") == "call-1" and m["kind"] == "tool_result")
    assert result["response"] == {"ok": True}


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_before_is_what_a_fork_there_holds(client: Any, pool: asyncpg.Pool, dialect: str) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True, approval_turn=1)
    boundary = conv.turns[2].invocation_id
    before = (await get_transcript(client, conv.session_id, conv.user_id, before=boundary)).json()["data"]
    assert [t["invocation_id"] for t in before["turns"]] == conv.invocation_ids[:2]
    forked = await client.post(
        f"/api/sessions/{conv.session_id}/fork", json={"rewind_before_invocation_id": boundary},
        headers={"X-User-Id": conv.user_id},
    )  # fmt: skip
    fork_id = forked.json()["data"]["id"]
    of_fork = (await get_transcript(client, fork_id, conv.user_id)).json()["data"]
    # the same messages in the same order, turn by turn (task ids are the fork's own)
    assert [(t["invocation_id"], t["messages"], t["usage"]) for t in of_fork["turns"]] == [
        (t["invocation_id"], t["messages"], t["usage"]) for t in before["turns"]
    ]
    assert of_fork["estimated_context_tokens"] == before["estimated_context_tokens"]
    # and what it left behind is the rest of the source's transcript
    rest = (await get_transcript(client, conv.session_id, conv.user_id)).json()["data"]["turns"][2:]
    summary = forked.json()["data"]["fork"]["summary"]
    assert summary["turns"] == len(rest) and summary["total_tokens"] == sum(t["usage"]["total_tokens"] for t in rest)
    assert summary["first_user_text"] == rest[0]["messages"][0]["text"][:200]
    calls: dict[str, int] = {}
    for turn in rest:
        for m in turn["messages"]:
            if m["kind"] == "tool_call":
                calls[m["tool_name"]] = calls.get(m["tool_name"], 0) + 1
    assert summary["tool_calls"] == calls


async def test_markdown(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=2, tool_calls=True)
    r = await get_transcript(client, conv.session_id, conv.user_id, format="markdown")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/markdown")
    text = r.text
    assert text.startswith(f"# {conv.name}\n") and "## Turn 1" in text and "## Turn 2" in text
    assert text.index(conv.turns[0].user_text) < text.index(conv.turns[1].user_text)
    assert all(t.agent_text and t.agent_text in text for t in conv.turns)
    assert "calls `" in text and "```json" in text and text.rstrip().endswith("context tokens.")


async def test_refusals_write_nothing(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    before = await table_fingerprint(pool)
    missing = await get_transcript(client, conv.session_id, conv.user_id, before="e-no-such-turn")
    assert missing.status_code == 404 and "e-no-such-turn" in missing.json()["error"]
    bad_format = await get_transcript(client, conv.session_id, conv.user_id, format="xml")
    assert bad_format.status_code == 400 and "format" in bad_format.json()["error"]
    other = await get_transcript(client, conv.session_id, new_user())
    assert other.status_code == 404 and other.json() == {"error": "Session not found"}
    twice = await client.get(
        f"/api/sessions/{conv.session_id}/transcript?before=a&before=b", headers={"X-User-Id": conv.user_id}
    )
    assert twice.status_code == 400
    assert await table_fingerprint(pool) == before
    # a share token lets its holder read the owner's session
    async with pool.acquire() as conn:
        token = await create_share(conn, session_id=conv.session_id, owner=conv.user_id, read_only=True)
    shared = await client.get(
        f"/api/sessions/{conv.session_id}/transcript", headers={"X-User-Id": new_user(), "X-Share-Token": token}
    )
    assert shared.status_code == 200 and len(shared.json()["data"]["turns"]) == 2
