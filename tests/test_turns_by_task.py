"""Turns named by their task (`rewind_before_task_id`) and the framework in every answer, end to end on a real
PostgreSQL: the same fork, rewind and transcript as by invocation for ADK agents, and a cut at the task for an
agent that writes no invocation id (kagent-openai's `conversation_items` events)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.helpers import digest, seed, session_rows, table_fingerprint

LINES = ["legacy", "v1"]


async def post(client: Any, path: str, user: str, body: dict[str, Any]) -> Any:
    return await client.post(path, json=body, headers={"X-User-Id": user})


def comparable(fork: dict[str, Any]) -> dict[str, Any]:
    """A fork's answer without what differs between two forks of one source (ids, times)."""
    return {k: v for k, v in fork.items() if k not in ("rewind_before_task_id", "summary")}


@pytest.mark.parametrize("dialect", LINES)
async def test_a_fork_by_task_is_the_fork_by_its_invocation(client: Any, pool: asyncpg.Pool, dialect: str) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True, metadata_style="kagent")
    turn = conv.turns[2]
    path = f"/api/sessions/{conv.session_id}/fork"
    by_inv = await post(client, path, conv.user_id, {"rewind_before_invocation_id": turn.invocation_id})
    by_task = await post(client, path, conv.user_id, {"rewind_before_task_id": turn.task_id})
    assert by_inv.status_code == by_task.status_code == 201, by_task.text
    fork = by_task.json()["data"]["fork"]
    assert fork["rewind_before_task_id"] == turn.task_id
    assert fork["rewind_before_invocation_id"] == turn.invocation_id and fork["framework"] == "adk"
    assert comparable(fork) == comparable(by_inv.json()["data"]["fork"])
    a = await session_rows(pool, by_inv.json()["data"]["id"], conv.user_id)
    b = await session_rows(pool, by_task.json()["data"]["id"], conv.user_id)
    assert [e["data"] for e in a["events"]] == [e["data"] for e in b["events"]]
    assert len(a["tasks"]) == len(b["tasks"]) == fork["tasks_copied"]

    dry = await post(client, path, conv.user_id, {"rewind_before_task_id": turn.task_id, "dry_run": True})
    assert dry.status_code == 200, dry.text
    plan = dry.json()["data"]
    assert plan["framework"] == "adk" and plan["rewind_before_task_id"] == turn.task_id
    assert plan["events_copied"] == fork["events_copied"]

    # The lineage record keeps both names of the turn.
    forks = await client.get(f"/api/sessions/{conv.session_id}/forks", headers={"X-User-Id": conv.user_id})
    records = [f["fork"] for f in forks.json()["data"]]
    assert [(r["rewind_before_task_id"], r["framework"]) for r in records] == [(None, "adk"), (turn.task_id, "adk")]


async def test_both_names_or_none_are_refused_and_write_nothing(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=3, metadata_style="kagent")
    turn = conv.turns[1]
    both = {"rewind_before_invocation_id": turn.invocation_id, "rewind_before_task_id": turn.task_id}
    before = await table_fingerprint(pool)
    base = f"/api/sessions/{conv.session_id}"
    for path, body in [
        (f"{base}/fork", both),
        (f"{base}/fork", {**both, "dry_run": True}),
        (f"{base}/rewind", both),
        (f"{base}/rewind", {}),
        (f"{base}/whatif", both),
        (f"{base}/experiments", both),
    ]:
        r = await post(client, path, conv.user_id, body)
        assert r.status_code == 400, (path, body, r.text)
        assert "rewind_before_invocation_id" in r.json()["error"] and "rewind_before_task_id" in r.json()["error"]
    r = await client.get(
        f"{base}/transcript",
        params={"before": turn.invocation_id, "before_task": turn.task_id},
        headers={"X-User-Id": conv.user_id},
    )
    assert r.status_code == 400 and "before_task" in r.json()["error"]
    assert await table_fingerprint(pool) == before


async def test_an_unknown_task_acts_as_an_unknown_invocation(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3, metadata_style="kagent")
    base = f"/api/sessions/{conv.session_id}"
    whole = await post(client, f"{base}/fork", conv.user_id, {"rewind_before_task_id": "no-such-task"})
    assert whole.status_code == 201, whole.text
    fork = whole.json()["data"]["fork"]
    assert fork["boundary_found"] is False and fork["events_copied"] == len(conv.events)
    assert any("task no-such-task not found" in w for w in fork["warnings"])
    other = await seed(pool, dialect="v1", turns=2, metadata_style="kagent")
    before = await table_fingerprint(pool)
    for path, body in [
        (f"{base}/fork", {"rewind_before_task_id": "no-such-task", "if_boundary_missing": "error"}),
        (f"{base}/rewind", {"rewind_before_task_id": "no-such-task"}),
    ]:
        r = await post(client, path, conv.user_id, body)
        assert r.status_code == 404 and "no-such-task" in r.json()["error"], r.text
    r = await client.get(
        f"{base}/transcript", params={"before_task": "no-such-task"}, headers={"X-User-Id": conv.user_id}
    )
    assert r.status_code == 404
    # Another user's task of another session names no turn of this one.
    r = await post(client, f"{base}/rewind", conv.user_id, {"rewind_before_task_id": other.turns[0].task_id})
    assert r.status_code == 404
    assert await table_fingerprint(pool) == before


@pytest.mark.parametrize("dialect", LINES)
async def test_rewind_by_task_and_undo(client: Any, pool: asyncpg.Pool, dialect: str) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, metadata_style="kagent")
    original = await session_rows(pool, conv.session_id, conv.user_id)
    turn = conv.turns[2]
    base = f"/api/sessions/{conv.session_id}"
    r = await post(client, f"{base}/rewind", conv.user_id, {"rewind_before_task_id": turn.task_id})
    assert r.status_code == 200, r.text
    rewind = r.json()["data"]["rewind"]
    assert rewind["rewind_before_task_id"] == turn.task_id
    assert rewind["rewind_before_invocation_id"] == turn.invocation_id and rewind["tasks_removed"] == 2
    assert rewind["events_removed"] == len([e for e in conv.events if e.created_at >= turn.started_at])
    listed = await client.get(f"{base}/rewinds", headers={"X-User-Id": conv.user_id})
    assert listed.json()["data"][0]["rewind_before_task_id"] == turn.task_id
    undo = await post(client, f"{base}/rewinds/{rewind['id']}/undo", conv.user_id, {})
    assert undo.status_code == 200, undo.text
    assert digest(await session_rows(pool, conv.session_id, conv.user_id)) == digest(original)


async def test_the_listing_names_every_turn_by_task_and_invocation(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=3, event_style="go", metadata_style="kagent")
    r = await client.get(f"/api/sessions/{conv.session_id}/invocations", headers={"X-User-Id": conv.user_id})
    turns = r.json()["data"]
    assert [(t["invocation_id"], t["task_id"], t["framework"]) for t in turns] == [
        (t.invocation_id, t.task_id, "adk-go") for t in conv.turns
    ]
    base = f"/api/sessions/{conv.session_id}/transcript"
    by_inv = await client.get(base, params={"before": conv.turns[2].invocation_id}, headers={"X-User-Id": conv.user_id})
    by_task = await client.get(base, params={"before_task": conv.turns[2].task_id}, headers={"X-User-Id": conv.user_id})
    assert by_task.status_code == 200 and by_task.json()["data"] == by_inv.json()["data"]
    assert len(by_task.json()["data"]["turns"]) == 2


async def test_an_agent_without_invocation_ids_is_cut_at_the_task(client: Any, pool: asyncpg.Pool) -> None:
    """kagent-openai's sessions: turns known by their tasks only, listed, forked, rewound and undone by task."""
    conv = await seed(pool, dialect="legacy", turns=3, event_style="openai", tool_calls=True)
    base = f"/api/sessions/{conv.session_id}"
    r = await client.get(f"{base}/invocations", headers={"X-User-Id": conv.user_id})
    turns = r.json()["data"]
    assert [(t["invocation_id"], t["task_id"], t["framework"]) for t in turns] == [
        (None, t.task_id, "openai-agents") for t in conv.turns
    ]
    assert [t["user_text"] for t in turns] == [t.user_text for t in conv.turns]
    page = await client.get(
        f"{base}/invocations", params={"after": conv.turns[0].task_id, "limit": 1}, headers={"X-User-Id": conv.user_id}
    )
    assert [t["task_id"] for t in page.json()["data"]] == [conv.turns[1].task_id]

    turn = conv.turns[2]
    r = await post(client, f"{base}/fork", conv.user_id, {"rewind_before_task_id": turn.task_id})
    assert r.status_code == 201, r.text
    fork = r.json()["data"]
    assert fork["fork"]["framework"] == "openai-agents" and fork["fork"]["rewind_before_invocation_id"] is None
    # One task a turn, as the runtime wrote them (`auto` is per_task for this framework, docs/frameworks.md):
    # the fork lists its two turns and is cut again at its own second turn's input event.
    assert fork["fork"]["boundary_found"] is True and fork["fork"]["messages_copied"] > 0
    assert (fork["fork"]["task_layout"], fork["fork"]["tasks_copied"]) == ("per_task", 2)
    rows = await session_rows(pool, fork["id"], conv.user_id)
    assert [e["data"] for e in rows["events"]] == [e.data for e in conv.events if e.created_at < turn.started_at]
    listed = (await client.get(f"/api/sessions/{fork['id']}/invocations", headers={"X-User-Id": conv.user_id})).json()
    assert [t["user_text"] for t in listed["data"]] == [t.user_text for t in conv.turns[:2]]
    again = await post(
        client,
        f"/api/sessions/{fork['id']}/fork",
        conv.user_id,
        {"rewind_before_task_id": listed["data"][1]["task_id"]},
    )
    assert again.status_code == 201 and again.json()["data"]["fork"]["warnings"] == []
    rows = await session_rows(pool, again.json()["data"]["id"], conv.user_id)
    assert [e["data"] for e in rows["events"]] == [
        e.data for e in conv.events if e.created_at < conv.turns[1].started_at
    ]

    original = await session_rows(pool, conv.session_id, conv.user_id)
    r = await post(client, f"{base}/rewind", conv.user_id, {"rewind_before_task_id": conv.turns[1].task_id})
    assert r.status_code == 200, r.text
    rewind = r.json()["data"]["rewind"]
    assert rewind["rewind_before_invocation_id"] is None and rewind["tasks_removed"] == 2
    kept = await session_rows(pool, conv.session_id, conv.user_id)
    assert [e["data"] for e in kept["events"]] == [
        e.data for e in conv.events if e.created_at < conv.turns[1].started_at
    ]
    undo = await post(client, f"{base}/rewinds/{rewind['id']}/undo", conv.user_id, {})
    assert undo.status_code == 200, undo.text
    assert digest(await session_rows(pool, conv.session_id, conv.user_id)) == digest(original)


async def test_mcp_tools_name_turns_by_task(live_url: str, pool: asyncpg.Pool) -> None:
    from tests.test_mcp_tools import mcp_session, ok, text_of

    conv = await seed(pool, dialect="legacy", turns=3, event_style="openai")
    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        listed = ok(await mcp.call_tool("list_turns", {"session_id": conv.session_id}))
        assert [(t["task_id"], t["invocation_id"]) for t in listed["turns"]] == [(t.task_id, None) for t in conv.turns]
        task = conv.turns[2].task_id
        before = ok(
            await mcp.call_tool(
                "show_transcript", {"session_id": conv.session_id, "before_task": task, "format": "json"}
            )
        )
        # The transcript reads the conversation_items events: turns 1-2, each with its task (docs/frameworks.md).
        assert before["session_id"] == conv.session_id
        assert [(t["task_id"], t["messages"][0]["text"]) for t in before["turns"]] == [
            (t.task_id, text) for t, text in zip(conv.turns[:2], conv.user_texts[:2], strict=True)
        ]
        dry = ok(
            await mcp.call_tool(
                "fork_session", {"session_id": conv.session_id, "rewind_before_task_id": task, "dry_run": True}
            )
        )
        assert dry["framework"] == "openai-agents" and dry["boundary_found"] is True
        rewound = ok(
            await mcp.call_tool(
                "rewind_session", {"session_id": conv.session_id, "rewind_before_task_id": task, "dry_run": True}
            )
        )
        assert rewound["rewind"]["tasks_removed"] == 1
        both = await mcp.call_tool(
            "rewind_session",
            {"session_id": conv.session_id, "rewind_before_task_id": task, "rewind_before_invocation_id": "e-1"},
        )
        assert both.isError and "not both" in text_of(both)
        whatif = await mcp.call_tool("start_whatif", {"session_id": conv.session_id, "rewind_before_task_id": task})
        assert whatif.isError  # no KAGENT_A2A_URL here, or (with it) a task without an invocation id


async def test_the_cli_names_turns_by_task(database_url: str, pool: asyncpg.Pool) -> None:
    from tests.test_cli import cli, ok_json

    conv = await seed(pool, dialect="v1", turns=3, event_style="openai")
    turns = ok_json(cli(database_url, "invocations", conv.session_id, "--user", conv.user_id, "--json"))
    assert [(t["task_id"], t["framework"]) for t in turns] == [(t.task_id, "openai-agents") for t in conv.turns]
    text = cli(database_url, "invocations", conv.session_id, "--user", conv.user_id)
    assert text.returncode == 0 and "Framework: openai-agents" in text.stdout and conv.turns[1].task_id in text.stdout
    task = conv.turns[1].task_id
    fork = ok_json(cli(database_url, "fork", conv.session_id, "--user", conv.user_id, "--before-task", task, "--json"))
    assert fork["fork"]["rewind_before_task_id"] == task and fork["fork"]["tasks_copied"] == 1
    rewind = cli(database_url, "rewind", conv.session_id, "--user", conv.user_id, "--before-task", task)
    assert rewind.returncode == 0 and f"of task {task}" in rewind.stdout, rewind.stderr
    neither = cli(database_url, "rewind", conv.session_id, "--user", conv.user_id)
    assert neither.returncode == 2 and "--before-task" in neither.stderr
