"""The conversation builders and kagent readers of tests/support, on their own and through PostgreSQL."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pydantic
import pytest
from a2a.types import Task as A2ATask
from google.adk.events import Event
from google.protobuf import json_format

from tests.conftest import create_database, drop_database
from tests.support import kagent_reads as kr
from tests.support.conversations import (
    HITL_EXTENSION_URI,
    REQUEST_CONFIRMATION,
    Conversation,
    build_conversation,
    create_share,
    insert_conversation,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "tests" / "fixtures" / "samples"

DIALECTS = ("legacy", "v1")
STYLES = ("python", "python_compact", "go", "openai")
METADATA = ("sample", "kagent")


def meta(node: dict[str, Any], key: str) -> Any:
    """A metadata value the way kagent's readers look it up: adk_<key>, then kagent_<key>."""
    metadata = node.get("metadata") or {}
    return metadata.get(f"adk_{key}", metadata.get(f"kagent_{key}"))


def invocation_ids_in_task(task: dict[str, Any]) -> set[str]:
    nodes = [task, *task.get("history", []), *task.get("artifacts", []), task["status"].get("message") or {}]
    return {value for node in nodes if (value := meta(node, "invocation_id"))}


def full(dialect: str, style: str, metadata_style: str = "sample", **kwargs: Any) -> Conversation:
    """Every kind of turn: a tool turn, an approval turn (ADK only), and a running last turn."""
    approval = None if style == "openai" else 1
    return build_conversation(
        dialect=dialect,  # type: ignore[arg-type]
        turns=3,
        event_style=style,  # type: ignore[arg-type]
        tool_calls=True,
        approval_turn=approval,
        running_last_turn=True,
        metadata_style=metadata_style,  # type: ignore[arg-type]
        **kwargs,
    )


# --------------------------------------------------------------------------------------------------
# Every variant parses with the readers kagent's runtimes and libraries use


@pytest.mark.parametrize(("dialect", "style", "metadata_style"), list(itertools.product(DIALECTS, STYLES, METADATA)))
@pytest.mark.parametrize("runtime_events", [False, True])
def test_every_row_parses(dialect: str, style: str, metadata_style: str, runtime_events: bool) -> None:
    conv = full(dialect, style, metadata_style, runtime_events=runtime_events)
    kind = {"python": "adk_python", "python_compact": "adk_python", "go": "adk_go", "openai": "openai"}[style]

    parsed = [kr.parse_event(e.data) for e in conv.events]
    assert {p.kind for p in parsed} == {kind}
    for row, p in zip(conv.events, parsed, strict=True):
        if kind != "openai":
            assert row.id == p.event.id  # the row id is the event's own id, as the Python agent writes it
            assert abs(p.event.timestamp - row.created_at.timestamp()) < 1e-3
    for task in conv.tasks:
        assert task.protocol_version == (None if dialect == "legacy" else "1.0")
        kr.parse_task(task.data, task.protocol_version)

    # Rows are strictly ordered, each task just before its turn's first event.
    times = sorted([*(e.created_at for e in conv.events), *(t.created_at for t in conv.tasks)])
    assert len(set(times)) == len(times)
    for turn, task in zip(conv.turns, conv.tasks, strict=True):
        assert task.id == turn.task_id
        assert task.created_at < turn.started_at
        assert [e.id for e in conv.events if turn.started_at <= e.created_at][: len(turn.event_ids)] == list(
            turn.event_ids
        )
    assert conv.created_at < conv.tasks[0].created_at
    assert conv.updated_at >= max(e.created_at for e in conv.events)

    # Invocation ids: one per turn, in order; events of a turn carry it (except bookkeeping events).
    if style == "openai":
        assert conv.invocation_ids == []
        assert all(t.invocation_id is None for t in conv.turns)
        assert all(invocation_ids_in_task(json.loads(t.data)) == set() for t in conv.tasks)
        return
    assert conv.invocation_ids == [t.invocation_id for t in conv.turns]
    assert len(set(conv.invocation_ids)) == 3
    assert all(i.startswith("e-") for i in conv.invocation_ids)
    by_id = {p.event.id: p.event for p in parsed}
    for turn in conv.turns:
        own = [by_id[i] for i in turn.event_ids]
        assert {e.invocation_id for e in own} - {"header_update"} == {turn.invocation_id}
        assert next(e.author for e in own if e.invocation_id != "header_update") == "user"


@pytest.mark.parametrize(("dialect", "metadata_style"), list(itertools.product(DIALECTS, METADATA)))
def test_tasks_are_linked_to_their_turn(dialect: str, metadata_style: str) -> None:
    conv = full(dialect, "python", metadata_style)
    done, approval, running = (json.loads(t.data) for t in conv.tasks)
    for turn, task in ((conv.turns[0], done), (conv.turns[1], approval)):
        assert task["contextId"] == conv.session_id
        assert invocation_ids_in_task(task) == {turn.invocation_id}
        assert meta(task, "session_id") == conv.session_id
        assert meta(task, "user_id") == conv.user_id
        assert meta(task, "app_name") == conv.agent_id
        user = task["history"][0]
        assert user["messageId"] == turn.user_message_id
        assert user["taskId"] == turn.task_id and user["contextId"] == conv.session_id
        if metadata_style == "sample":
            assert user["metadata"]["adk_invocation_id"] == turn.invocation_id
        else:
            assert "adk_invocation_id" not in user["metadata"]  # kagent never stamps it on the user's message
    # A running turn: nothing has come out of ADK yet, so kagent recorded no invocation id on the task.
    expected = {conv.turns[2].invocation_id} if metadata_style == "sample" else set()
    assert invocation_ids_in_task(running) == expected
    assert meta(running, "session_id") == conv.session_id


# --------------------------------------------------------------------------------------------------
# The two dialects' layouts


def texts(parts: list[dict[str, Any]]) -> list[str]:
    return [p["text"] for p in parts if "text" in p]


def data_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p["data"] for p in parts if "data" in p]


def test_v1_tool_turn_keeps_the_output_in_artifacts() -> None:
    conv = build_conversation(dialect="v1", turns=2, tool_calls=True)
    turn = conv.turns[0]
    task = json.loads(conv.tasks[0].data)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["role"] for m in task["history"]] == ["ROLE_USER"]
    assert texts(task["history"][0]["parts"]) == [turn.user_text]
    # One artifact per ADK event: function_call, function_response, final text, each naming its event.
    call, response, answer = task["artifacts"]
    assert data_parts(call["parts"])[0]["name"] == "k8s_get_resources"
    assert call["parts"][0]["metadata"] == {"adk_type": "function_call"}
    assert response["parts"][0]["metadata"] == {"adk_type": "function_response"}
    assert data_parts(response["parts"])[0]["id"] == data_parts(call["parts"])[0]["id"] == turn.function_call_ids[0]
    assert texts(answer["parts"]) == [turn.agent_text]
    assert [a["metadata"]["adk_event_id"] for a in task["artifacts"]] == list(turn.event_ids[1:])
    assert {a["metadata"]["adk_author"] for a in task["artifacts"]} == {"k8s_agent"}
    assert task["metadata"]["kagent_invocation_id"] == turn.invocation_id
    assert task["metadata"]["kagent_usage_metadata"]["totalTokenCount"] == 962  # Go writes integral numbers
    assert json_format.Parse(conv.tasks[0].data, A2ATask()).id == turn.task_id


def test_v1_approval_turn_as_stored_after_approval() -> None:
    conv = build_conversation(dialect="v1", turns=1, approval_turn=0, metadata_style="kagent")
    turn = conv.turns[0]
    task = json.loads(conv.tasks[0].data)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    user, confirmation_status, request, resume = task["history"]
    assert texts(user["parts"]) == [turn.user_text]
    # The confirmation call left the artifacts (long-running) and its now empty event became a status message.
    assert confirmation_status["role"] == "ROLE_AGENT" and "parts" not in confirmation_status
    # The public HITL request kagent showed while the task was input-required.
    assert request["role"] == "ROLE_AGENT" and request["extensions"] == [HITL_EXTENSION_URI]
    payload = request["metadata"][HITL_EXTENSION_URI]
    assert payload["type"] == "tool_approval_request"
    assert payload["tools"] == [
        {
            "id": turn.confirmation_call_id,
            "call_id": turn.function_call_ids[0],
            "name": "k8s_delete_resource",
            "args": {"resource_type": "pod", "resource_name": "nginx-7d4b9c-xk2p9", "namespace": "default"},
        }
    ]
    # The human's decision, as kagent translated it into ADK's FunctionResponse.
    assert resume["role"] == "ROLE_USER"
    decision = data_parts(resume["parts"])[0]
    assert decision["name"] == REQUEST_CONFIRMATION and decision["id"] == turn.confirmation_call_id
    assert json.loads(decision["response"]["response"]) == {"hint": "", "confirmed": True}
    names = [data_parts(a["parts"])[0].get("name") for a in task["artifacts"][:-1]]
    assert names == ["k8s_delete_resource"] * 3  # call, "requires confirmation", real result
    assert texts(task["artifacts"][-1]["parts"]) == [turn.agent_text]
    needs = task["artifacts"][1]["metadata"]["adk_actions"]
    assert needs["skipSummarization"] is True
    assert turn.function_call_ids[0] in needs["requestedToolConfirmations"]


def test_legacy_turn_keeps_the_reply_in_history() -> None:
    conv = build_conversation(dialect="legacy", turns=2, tool_calls=True, metadata_style="kagent")
    turn = conv.turns[0]
    task = json.loads(conv.tasks[0].data)
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    history = task["history"]
    # a2a-sdk 0.3 stores the request message twice (the UI de-duplicates by messageId).
    assert history[0] == history[1] and history[0]["role"] == "user"
    assert [m["role"] for m in history[2:]] == ["agent", "agent", "agent"]
    call, response, answer = history[2:]
    assert call["parts"][0]["kind"] == "data" and call["parts"][0]["metadata"] == {"kagent_type": "function_call"}
    assert response["parts"][0]["metadata"] == {"kagent_type": "function_response"}
    assert texts(answer["parts"]) == [turn.agent_text]
    assert {m["metadata"]["kagent_invocation_id"] for m in history[2:]} == {turn.invocation_id}
    assert {m["metadata"]["kagent_author"] for m in history[2:]} == {"k8s_agent"}
    assert task["artifacts"][0]["parts"] == answer["parts"]
    assert task["metadata"]["kagent_invocation_id"] == turn.invocation_id
    assert "adk_session_id" not in task["metadata"]
    sample = json.loads(build_conversation(dialect="legacy", turns=1).tasks[0].data)
    assert sample["metadata"]["adk_session_id"] == sample["contextId"]


def test_legacy_approval_turn() -> None:
    conv = build_conversation(dialect="legacy", turns=1, approval_turn=0)
    turn = conv.turns[0]
    history = json.loads(conv.tasks[0].data)["history"]
    roles = [m["role"] for m in history]
    assert roles == ["user", "user", "agent", "agent", "agent", "agent", "user", "agent", "agent"]
    request, again = history[4], history[5]
    assert request == again  # moved into history by the "input-required" status, then by the decision
    confirmation = request["parts"][0]
    assert confirmation["data"]["name"] == REQUEST_CONFIRMATION
    assert confirmation["data"]["id"] == turn.confirmation_call_id
    assert confirmation["metadata"] == {"kagent_type": "function_call", "kagent_is_long_running": True}
    decision = history[6]
    assert decision["parts"][0]["data"] == {"decision_type": "approve"}
    assert texts(decision["parts"]) == ["Approved"]
    assert decision["metadata"]["adk_invocation_id"] == turn.invocation_id
    assert texts(history[-1]["parts"]) == [turn.agent_text]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_running_and_awaiting_last_turns(dialect: str) -> None:
    running = build_conversation(dialect=dialect, turns=2, running_last_turn=True)  # type: ignore[arg-type]
    last = running.turns[-1]
    assert last.state == ("working" if dialect == "legacy" else "TASK_STATE_WORKING")
    assert not last.terminal and running.turns[0].terminal
    assert last.agent_text is None
    assert len(last.event_ids) == 1
    event = kr.parse_event(running.events[-1].data).event
    assert event.author == "user" and event.invocation_id == last.invocation_id
    task = json.loads(running.tasks[-1].data)
    assert "artifacts" not in task

    waiting = build_conversation(dialect=dialect, turns=2, awaiting_approval_last_turn=True)  # type: ignore[arg-type]
    last = waiting.turns[-1]
    assert last.state == ("input-required" if dialect == "legacy" else "TASK_STATE_INPUT_REQUIRED")
    task = json.loads(waiting.tasks[-1].data)
    message = task["status"]["message"]
    if dialect == "v1":
        assert message["metadata"][HITL_EXTENSION_URI]["tools"][0]["id"] == last.confirmation_call_id
    else:
        assert message["parts"][0]["data"]["id"] == last.confirmation_call_id
    final = kr.parse_event(waiting.events[-1].data).event
    assert final.long_running_tool_ids == {last.confirmation_call_id}


def test_runtime_events() -> None:
    legacy = build_conversation(dialect="legacy", turns=2, runtime_events=True)
    events = [kr.parse_event(e.data).event for e in legacy.events]
    assert [(e.author, e.invocation_id == "header_update") for e in events[:2]] == [("system", True), ("user", False)]
    assert events[-1].actions.end_of_agent is True and events[-1].content is None
    main = build_conversation(dialect="v1", turns=1, runtime_events=True)
    events = [kr.parse_event(e.data).event for e in main.events]
    assert events[0].actions.state_delta["headers"]["x-user-id"] == main.user_id
    # The end_of_agent event has no content: kagent main stores it as an empty agent status message.
    history = json.loads(main.tasks[0].data)["history"]
    assert history[-1]["role"] == "ROLE_AGENT" and "parts" not in history[-1]
    assert history[-1]["metadata"]["adk_actions"]["endOfAgent"] is True


def test_event_styles() -> None:
    conv = build_conversation(dialect="v1", turns=1, event_style="go", tool_calls=True)
    raw = json.loads(conv.events[1].data)
    assert raw["invocationId"] == conv.invocation_ids[0]
    assert isinstance(raw["timestamp"], str) and raw["timestamp"].endswith("Z")
    assert raw["content"]["parts"][0]["functionCall"]["name"] == "k8s_get_resources"
    assert "nodeInfo" not in raw and "invocation_id" not in raw

    python = json.loads(build_conversation(dialect="v1", turns=1).events[0].data)
    compact = json.loads(build_conversation(dialect="v1", turns=1, event_style="python_compact").events[0].data)
    assert python["partial"] is None and "partial" not in compact
    assert set(compact) < set(python)

    openai = build_conversation(dialect="legacy", turns=2, event_style="openai", tool_calls=True)
    first, second = (json.loads(e.data) for e in openai.events[:2])
    assert first["type"] == "conversation_items" and first["items"] == [
        {"content": openai.user_texts[0], "role": "user"}
    ]
    assert [i["type"] for i in second["items"]] == ["function_call", "function_call_output", "message"]


def test_names_and_defaults() -> None:
    conv = build_conversation(dialect="v1", turns=2)
    assert conv.name == "List the pods in the..."
    assert conv.user_id == "admin@kagent.dev" and conv.agent_id == "kagent__NS__k8s_agent"
    assert conv.source == "user" and conv.schema_version == 13
    assert build_conversation(dialect="legacy", turns=1, name="Chat").name == "Chat"
    assert build_conversation(dialect="legacy", turns=1, name=None).name is None
    start = datetime(2025, 11, 22, 10, 0, tzinfo=UTC)
    conv = build_conversation(dialect="legacy", turns=9, start=start, session_id="s-1", user_id="alice")
    assert conv.created_at == start and conv.session_id == "s-1" and conv.user_id == "alice"
    assert len(set(conv.user_texts)) == 9
    with pytest.raises(ValueError):
        build_conversation(dialect="v1", turns=2, approval_turn=1, running_last_turn=True)
    with pytest.raises(ValueError):
        build_conversation(dialect="v1", turns=1, approval_turn=0, event_style="openai")


# --------------------------------------------------------------------------------------------------
# What the readers accept and refuse


def test_adk_event_reader_facts() -> None:
    sample = (SAMPLES / "adk_event.by_alias.json").read_text()
    # The Python ADK reads camelCase keys...
    assert Event.model_validate_json(sample).invocation_id.startswith("e-")
    # ...but not the RFC 3339 timestamp Go ADK writes; parse_event converts it.
    go = json.loads(build_conversation(dialect="v1", turns=1, event_style="go").events[0].data)
    with pytest.raises(pydantic.ValidationError, match="timestamp"):
        Event.model_validate_json(json.dumps(go))
    assert kr.parse_event(json.dumps(go)).kind == "adk_go"
    for name in ("adk_event.json", "adk_event.compact.json", "adk_event.by_alias.json"):
        assert kr.parse_event((SAMPLES / name).read_text()).invocation_id == "e-6f1c2a7e-3b4d-4e8a-9c2f-1a2b3c4d5e6f"

    python = json.loads((SAMPLES / "adk_event.json").read_text())
    unknown_top = {**python, "surprise": 1}
    Event.model_validate_json(json.dumps(unknown_top))  # ADK 2.6.2 ignores it...
    with pytest.raises(ValueError, match="surprise"):
        kr.parse_event(json.dumps(unknown_top))  # ...the reader does not
    unknown_nested = copy.deepcopy(python)
    unknown_nested["actions"]["surprise"] = 1
    with pytest.raises(pydantic.ValidationError):
        kr.parse_event(json.dumps(unknown_nested))
    with pytest.raises(ValueError):
        kr.parse_event('{"type": "conversation_items", "items": [{}], "timestamp": "2025-01-01T00:00:00+00:00"}')
    with pytest.raises(ValueError):
        kr.parse_event("[1, 2]")


def test_task_reader_facts() -> None:
    v1 = (SAMPLES / "a2a_task.json").read_text()
    legacy = (SAMPLES / "a2a_task_v0_3.json").read_text()
    assert kr.parse_task(v1, "1.0").status.state == 3  # TASK_STATE_COMPLETED
    assert kr.parse_task(legacy, None).status.state.value == "completed"
    assert kr.parse_task(legacy, "").id == kr.parse_task(legacy, None).id

    def edited(text: str, change: Any) -> str:
        data = json.loads(text)
        change(data)
        return json.dumps(data)

    bad_v1 = {
        "unknown field": lambda d: d.update(kind="task"),
        "snake_case name": lambda d: d.update(context_id=d.pop("contextId")),
        "enum as number": lambda d: d["status"].update(state=3),
        "legacy enum": lambda d: d["status"].update(state="completed"),
        "two contents in a part": lambda d: d["history"][0]["parts"][0].update(data={"x": 1}),
    }
    for label, change in bad_v1.items():
        with pytest.raises((ValueError, json_format.ParseError)):
            kr.parse_task(edited(v1, change), "1.0")
            pytest.fail(label)
    bad_legacy = {
        "unknown key": lambda d: d.update(surprise=1),
        "snake_case key": lambda d: d.update(context_id=d.pop("contextId")),
        "unknown key in a part": lambda d: d["history"][0]["parts"][0].update(surprise=1),
        "bad state": lambda d: d["status"].update(state="TASK_STATE_COMPLETED"),
    }
    for label, change in bad_legacy.items():
        with pytest.raises((ValueError, pydantic.ValidationError)):
            kr.parse_task(edited(legacy, change), None)
            pytest.fail(label)
    with pytest.raises(ValueError):
        kr.parse_task(v1, "2.0")
    with pytest.raises(json_format.ParseError):
        kr.parse_task(legacy, "1.0")
    with pytest.raises(ValueError, match="main"):
        kr.parse_task(legacy, None, line="main")


# --------------------------------------------------------------------------------------------------
# Through PostgreSQL, read back with kagent's queries


@pytest.fixture
async def scratch(server_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A fresh database with kagent's tables and an empty schema_migrations, dropped afterwards."""
    url = await create_database(server_url)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DELETE FROM schema_migrations")
        yield conn
    finally:
        await conn.close()
        await drop_database(server_url, url)


async def assert_reads_back(conn: asyncpg.Connection, conv: Conversation) -> None:
    session = await kr.get_session(conn, conv.session_id, conv.user_id)
    assert session is not None
    assert (session["name"], session["agent_id"], session["source"]) == (conv.name, conv.agent_id, conv.source)
    assert session["created_at"] == conv.created_at and session["updated_at"] == conv.updated_at
    events = await kr.list_events_for_session_asc(conn, conv.session_id, conv.user_id)
    assert [(e["id"], e["created_at"], e["data"]) for e in events] == [tuple(e) for e in conv.events]
    tasks = await kr.list_tasks_for_session(conn, conv.session_id, conv.user_id)
    assert [(t["id"], t["created_at"], t["data"], t["protocol_version"]) for t in tasks] == [
        tuple(t)[:4] for t in conv.tasks
    ]
    assert all(t["user_id"] == conv.user_id and t["session_id"] == conv.session_id for t in tasks)
    parsed = await kr.load_session_tasks(conn, conv.session_id, conv.user_id)
    assert [p.id for p in parsed] == [t.id for t in conv.tasks]
    for row in events:
        kr.parse_event(row["data"])


@pytest.mark.asyncio
async def test_conversations_read_back_through_kagent_queries(scratch: asyncpg.Connection) -> None:
    start = datetime.now(UTC) - timedelta(hours=3)
    conn = scratch
    convs = []
    for i, (dialect, style) in enumerate(itertools.product(DIALECTS, STYLES)):
        conv = full(dialect, style, start=start + timedelta(minutes=10 * i), runtime_events=True)
        await insert_conversation(conn, conv)
        convs.append(conv)
    for conv in convs:
        await assert_reads_back(conn, conv)
    # The first conversation decided the clean migration version; later inserts kept it.
    assert [tuple(r) for r in await conn.fetch("SELECT version, dirty FROM schema_migrations")] == [(7, False)]
    sidebar = await kr.list_sessions(conn, "admin@kagent.dev")
    assert [s["id"] for s in sidebar] == [c.session_id for c in reversed(convs)]
    # The events' `after` filter and the main line's refusal of legacy task rows.
    first = convs[0]
    later = await kr.list_events_for_session_asc(conn, first.session_id, first.user_id, first.events[2].created_at)
    assert [e["id"] for e in later] == [e.id for e in first.events[3:]]
    with pytest.raises(ValueError, match="task row 0"):
        await kr.load_session_tasks(conn, first.session_id, first.user_id, line="main")
    v1 = convs[len(STYLES)]
    assert len(await kr.load_session_tasks(conn, v1.session_id, v1.user_id, line="main")) == 3
    assert await kr.get_task(conn, v1.tasks[0].id, "someone-else") is None
    assert (await kr.get_task(conn, v1.tasks[0].id, v1.user_id))["data"] == v1.tasks[0].data


@pytest.mark.asyncio
async def test_null_owner_rule_and_shares(scratch: asyncpg.Connection) -> None:
    conn = scratch
    conv = build_conversation(dialect="legacy", turns=2, user_id="alice")
    await insert_conversation(conn, conv, null_task_owner=True)
    # A NULL owner resolves to the only user with a session of that id...
    assert len(await kr.list_tasks_for_session(conn, conv.session_id, "alice")) == 2
    assert await kr.list_tasks_for_session(conn, conv.session_id, "bob") == []
    # A session of the same id created after the tasks does not count: bob sees only his own task...
    later = datetime.now(UTC)
    other = build_conversation(dialect="legacy", turns=1, user_id="bob", session_id=conv.session_id, start=later)
    await insert_conversation(conn, other)
    assert [t["id"] for t in await kr.list_tasks_for_session(conn, conv.session_id, "bob")] == [other.tasks[0].id]
    assert len(await kr.list_tasks_for_session(conn, conv.session_id, "alice")) == 2
    # ...but one that existed when they were written makes the owner ambiguous: nobody sees them.
    earlier = conv.created_at - timedelta(hours=1)
    third = build_conversation(dialect="legacy", turns=1, user_id="carol", session_id=conv.session_id, start=earlier)
    await insert_conversation(conn, third)
    assert await kr.list_tasks_for_session(conn, conv.session_id, "alice") == []
    assert await kr.get_session(conn, conv.session_id, "dave") is None

    token = await create_share(conn, session_id=conv.session_id, owner="alice", read_only=True)
    share = await kr.get_session_share_by_token(conn, token)
    assert (share["session_id"], share["user_id"], share["read_only"]) == (conv.session_id, "alice", True)
    rw = await create_share(conn, session_id=conv.session_id, owner="alice", read_only=False)
    assert rw != token and (await kr.get_session_share_by_token(conn, rw))["read_only"] is False
