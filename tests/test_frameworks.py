"""The agent's framework read from what a session holds, and the refusals that protect the sessions a fork or a
rewind cannot handle yet, on the sessions kagent's own BYO runtimes wrote (tests/fixtures/frameworks/, captured
from kagent-langgraph, kagent-openai and kagent-crewai 0.10.4) and on kagent's ADK rows."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from service.kagent import frameworks
from tests.helpers import new_user, seed, table_fingerprint
from tests.support.framework_fixtures import fresh_copy, load_fixture, read_fixture
from tests.support.kagent_controller import go_json


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
    crewai_task = json.dumps(
        {"kind": "task", "id": "t", "contextId": "c", "metadata": {"app_name": "a", "session_id": "c"}}
    )
    assert frameworks.decide(False, False, [], crewai_task) == "crewai"
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


async def checkpoints(pool: asyncpg.Pool, thread: str, *, live: bool = True) -> list[dict[str, Any]]:
    """The thread's checkpoints, oldest first, their metadata decoded."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT user_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, created_at, metadata, checkpoint, "
            "checkpoint_type, version, deleted_at FROM lg_checkpoint WHERE thread_id = $1"
            + (" AND deleted_at IS NULL" if live else "")
            + " ORDER BY created_at, checkpoint_id",
            thread,
        )
    return [{**dict(r), "meta": json.loads(base64.b64decode(r["metadata"]))} for r in rows]


async def writes(pool: asyncpg.Pool, thread: str) -> list[tuple[Any, ...]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT user_id, checkpoint_ns, checkpoint_id, write_idx, value, value_type, channel, task_id, created_at "
            "FROM lg_checkpoint_write WHERE thread_id = $1 AND deleted_at IS NULL ORDER BY 3, 4",
            thread,
        )
    return [tuple(r) for r in rows]


async def fork_tasks(pool: asyncpg.Pool, sid: str) -> list[dict[str, Any]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, user_id, data FROM task WHERE session_id = $1 AND deleted_at IS NULL ORDER BY created_at", sid
        )
    return [{**dict(r), "doc": json.loads(r["data"])} for r in rows]


async def test_a_langgraph_session_is_listed_by_task_and_its_fork_copies_the_checkpoints_of_the_kept_turns(
    client: Any, pool: asyncpg.Pool
) -> None:
    fixture = await loaded(pool, "langgraph_3_turns")
    sid, user, admin = fixture["session_id"], fixture["user"], frameworks.KAGENT_DEFAULT_USER
    turns = [t["task_id"] for t in fixture["turns"]]
    r = await get(client, f"/api/sessions/{sid}/invocations", user)
    listed = r.json()["data"]
    # kagent-langgraph wrote its tasks under kagent's default user: they are still this session's turns.
    assert [(t["task_id"], t["invocation_id"], t["framework"]) for t in listed] == [
        (t, None, "langgraph") for t in turns
    ]
    assert [t["user_text"] for t in listed] == [t["question"] for t in fixture["turns"]]
    source = await checkpoints(pool, sid)
    source_writes = await writes(pool, sid)
    before = await table_fingerprint(pool)
    dry = await post(client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": turns[2], "dry_run": True})
    assert dry.status_code == 200 and (dry.json()["data"]["framework"], dry.json()["data"]["tasks_copied"]) == (
        "langgraph",
        2,
    )
    assert await table_fingerprint(pool) == before

    r = await post(client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": turns[2], "name": "lg"})
    assert r.status_code == 201, r.text
    fork = r.json()["data"]
    assert (fork["user_id"], fork["fork"]["framework"], fork["fork"]["tasks_copied"]) == (user, "langgraph", 2)
    fid = fork["id"]
    async with pool.acquire() as conn:  # the caller owns the fork; no session row the source lacks is made
        assert [tuple(x) for x in await conn.fetch("SELECT user_id FROM session WHERE id = $1", fid)] == [(user,)]
    tasks = await fork_tasks(pool, fid)
    # the tasks are the runtime's (admin's), and name the fork's thread, which a human-in-the-loop resume reads
    assert [t["user_id"] for t in tasks] == [admin, admin]
    assert [t["doc"]["metadata"]["thread_id"] for t in tasks] == [fid, fid]
    assert not any(sid in t["data"] or old in t["data"] for t in tasks for old in turns)

    # the checkpoints of turns 1-2, ids, parents and blobs kept, under the user they were written under
    kept = [c for c in source if c["meta"]["a2a_task_id"] in turns[:2]]
    assert len(kept) == 8 and source[len(kept)]["meta"] == {**source[len(kept)]["meta"], "source": "input"}
    copied = await checkpoints(pool, fid)
    same = ("user_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "created_at", "checkpoint", "version")
    assert [tuple(c[k] for k in same) for c in copied] == [tuple(c[k] for k in same) for c in kept]
    # their metadata names the fork's tasks (paired in order) and thread, and is otherwise the same
    mapping = dict(zip(turns[:2], [t["id"] for t in tasks], strict=True))
    for old, new in zip(kept, copied, strict=True):
        expected = {**old["meta"], "a2a_task_id": mapping[old["meta"]["a2a_task_id"]], "a2a_context_id": fid}
        expected["gen_ai.task.id"], expected["gen_ai.conversation.id"] = expected["a2a_task_id"], fid
        assert new["meta"] == expected
    kept_ids = {c["checkpoint_id"] for c in kept}
    assert [w[:2] + w[3:] for w in await writes(pool, fid)] == [
        w[:2] + w[3:] for w in source_writes if w[2] in kept_ids
    ] and await writes(pool, fid)
    assert await checkpoints(pool, sid) == source and await writes(pool, sid) == source_writes  # source untouched

    # a fork of the fork is cut again by the fork's own tasks
    r = await post(client, f"/api/sessions/{fid}/fork", user, {"rewind_before_task_id": tasks[1]["id"]})
    assert r.status_code == 201, r.text
    again = r.json()["data"]["id"]
    first = [c for c in copied if c["meta"]["a2a_task_id"] == tasks[0]["id"]]
    assert [c["checkpoint_id"] for c in await checkpoints(pool, again)] == [c["checkpoint_id"] for c in first]
    assert {c["meta"]["a2a_task_id"] for c in await checkpoints(pool, again)} == {
        t["id"] for t in await fork_tasks(pool, again)
    }

    # a whole-session fork copies every checkpoint
    r = await post(client, f"/api/sessions/{sid}/fork", user, {})
    assert r.status_code == 201, r.text
    assert len(await checkpoints(pool, r.json()["data"]["id"])) == len(source)


async def test_a_langgraph_rewind_hides_the_checkpoints_of_the_hidden_turns_and_undo_restores_them(
    client: Any, pool: asyncpg.Pool
) -> None:
    fixture = await loaded(pool, "langgraph_3_turns")
    sid, user = fixture["session_id"], fixture["user"]
    turns = [t["task_id"] for t in fixture["turns"]]
    before = await table_fingerprint(pool)
    source = await checkpoints(pool, sid)
    r = await post(client, f"/api/sessions/{sid}/rewind", user, {"rewind_before_task_id": turns[1]})
    assert r.status_code == 200, r.text
    assert r.json()["data"]["rewind"]["tasks_removed"] == 2
    # the runtime reads the newest live checkpoint of its thread: turn 1's last
    live = await checkpoints(pool, sid)
    assert live == [c for c in source if c["meta"]["a2a_task_id"] == turns[0]] and len(live) == 5
    hidden = [c for c in await checkpoints(pool, sid, live=False) if c["deleted_at"] is not None]
    assert len(hidden) == len(source) - 5 and len({c["deleted_at"] for c in hidden}) == 1
    async with pool.acquire() as conn:
        hidden_writes = await conn.fetchval(
            "SELECT count(*) FROM lg_checkpoint_write WHERE thread_id = $1 AND deleted_at = $2",
            sid, hidden[0]["deleted_at"],
        )  # fmt: skip
    assert (
        hidden_writes
        == len(
            [
                w
                for w in fixture["tables"]["lg_checkpoint_write"]
                if w["checkpoint_id"] in {c["checkpoint_id"] for c in hidden}
            ]
        )
        and hidden_writes > 0
    )
    rewind = r.json()["data"]["rewind"]["id"]
    undo = await post(client, f"/api/sessions/{sid}/rewinds/{rewind}/undo", user, {})
    assert undo.status_code == 200, undo.text
    after = await table_fingerprint(pool)
    for table in ("lg_checkpoint", "lg_checkpoint_write", "event"):
        assert after[table] == before[table], table
    assert await checkpoints(pool, sid) == source


async def test_a_langgraph_fork_that_cannot_be_made_whole_writes_nothing(client: Any, pool: asyncpg.Pool) -> None:
    fixture = await loaded(pool, "langgraph_3_turns")
    sid, user = fixture["session_id"], fixture["user"]
    turns = [t["task_id"] for t in fixture["turns"]]
    r = await post(client, f"/api/sessions/{sid}/fork", user, {"task_layout": "merged"})
    assert r.status_code == 422 and "per_task" in r.json()["error"], r.text
    # a turn-2 checkpoint whose parent is one of turn 3: the kept turns are no whole chain, so the fork
    # (its tasks already copied in its transaction) is refused and leaves nothing
    source = await checkpoints(pool, sid)
    second = next(c for c in source if c["meta"]["a2a_task_id"] == turns[1] and c["meta"]["source"] == "loop")
    third = next(c for c in source if c["meta"]["a2a_task_id"] == turns[2])
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE lg_checkpoint SET parent_checkpoint_id = $2 WHERE thread_id = $1 AND checkpoint_id = $3",
            sid, third["checkpoint_id"], second["checkpoint_id"],
        )  # fmt: skip
    before = await table_fingerprint(pool)
    r = await post(client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": turns[2]})
    assert r.status_code == 422 and "checkpoint" in r.json()["error"], r.text
    assert await table_fingerprint(pool) == before


async def test_a_langgraph_session_without_checkpoints_in_the_database(client: Any, pool: asyncpg.Pool) -> None:
    """kagent main: the graph brings its own checkpointer, kagent's database holds only the tasks."""
    fixture = await loaded(pool, "langgraph_3_turns", drop=("lg_checkpoint", "lg_checkpoint_write"))
    sid, user = fixture["session_id"], fixture["user"]
    before = await table_fingerprint(pool)
    task = fixture["turns"][1]["task_id"]
    for path, body in [
        (f"/api/sessions/{sid}/fork", {}),
        (f"/api/sessions/{sid}/fork", {"rewind_before_task_id": task, "dry_run": True}),
        (f"/api/sessions/{sid}/rewind", {"rewind_before_task_id": task}),
    ]:
        r = await post(client, path, user, body)
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


async def crewai_session(pool: asyncpg.Pool, changed_in_turn: int) -> dict[str, Any]:
    """A CrewAI session as kagent-crewai 0.10.4 wrote it (tests/fixtures/frameworks/crewai_3_turns.json: the
    chatting user's session row and three A2A tasks under kagent's default user, their metadata `app_name` and
    `session_id`, no event), plus CrewAI rows that the runtime cannot produce: on crewai 1.6.1 it writes none
    (its memory and flow state stay in its pod; docs/frameworks.md, tests/test_runtime_crewai.py). They are
    shaped as kagent 0.10.x stores what kagent-crewai's KagentMemoryStorage and KagentFlowPersistence send
    (handlers/crewai.go: the payload's map marshalled by Go, upserted under the request's user, kagent's default
    one here, thread_id = the session id): one crewai_agent_memory row and one crewai_flow_state row per flow
    method, first written in turn 1 and last during turn `changed_in_turn`."""
    fixture = fresh_copy(read_fixture("crewai_3_turns"), new_user())
    tables, sid, admin = fixture["tables"], fixture["session_id"], frameworks.KAGENT_DEFAULT_USER
    starts = [datetime.fromisoformat(t["created_at"]) for t in tables["task"]]
    first, changed = starts[0] + timedelta(milliseconds=50), starts[changed_in_turn - 1] + timedelta(milliseconds=50)
    question = fixture["turns"][changed_in_turn - 1]["question"]
    memory = {
        "task_description": "Answer the user's latest question.",
        "score": 8.0,
        "metadata": {"suggestions": [f"remember {question}"], "quality": 8.0, "agent": "kagent-fork test agent",
                     "expected_output": f"A short answer to the question: {question}"},
        "datetime": str(changed.timestamp()),
    }  # fmt: skip
    tables["crewai_agent_memory"] = [
        {"user_id": admin, "thread_id": sid, "created_at": first.isoformat(), "updated_at": changed.isoformat(),
         "deleted_at": None, "memory_data": go_json(memory)},
    ]  # fmt: skip
    tables["crewai_flow_state"] = [
        {"user_id": admin, "thread_id": sid, "method_name": method, "created_at": first.isoformat(),
         "updated_at": changed.isoformat(), "deleted_at": None, "state_data": go_json({"id": sid, "step": method})}
        for method in ("gather", "answer")
    ]  # fmt: skip
    async with pool.acquire() as conn:
        await load_fixture(conn, fixture)
    return fixture


async def crewai_rows(pool: asyncpg.Pool, thread: str) -> list[tuple[Any, ...]]:
    async with pool.acquire() as conn:
        memory = await conn.fetch(
            "SELECT user_id, '', created_at, updated_at, memory_data FROM crewai_agent_memory WHERE thread_id = $1",
            thread,
        )
        flows = await conn.fetch(
            "SELECT user_id, method_name, created_at, updated_at, state_data FROM crewai_flow_state "
            "WHERE thread_id = $1 ORDER BY method_name",
            thread,
        )
    return [tuple(r) for r in [*memory, *flows]]


async def test_a_crewai_session_forked_whole_copies_its_memory_and_flow_state(client: Any, pool: asyncpg.Pool) -> None:
    fixture = await crewai_session(pool, changed_in_turn=3)
    sid, user = fixture["session_id"], fixture["user"]
    r = await get(client, f"/api/sessions/{sid}/invocations", user)
    assert [(t["task_id"], t["framework"]) for t in r.json()["data"]] == [
        (t["task_id"], "crewai") for t in fixture["turns"]
    ]
    source = await crewai_rows(pool, sid)
    r = await post(client, f"/api/sessions/{sid}/fork", user, {"name": "crew", "task_layout": "per_task"})
    assert r.status_code == 201, r.text
    fork = r.json()["data"]
    assert (fork["fork"]["framework"], fork["fork"]["tasks_copied"]) == ("crewai", 3)
    assert not any("CrewAI" in w for w in fork["fork"]["warnings"])
    assert await crewai_rows(pool, fork["id"]) == source and len(source) == 3  # same user, data, times
    assert await crewai_rows(pool, sid) == source


async def test_a_crewai_cut_is_refused_when_its_memory_changed_from_that_turn_on(
    client: Any, pool: asyncpg.Pool
) -> None:
    fixture = await crewai_session(pool, changed_in_turn=3)
    sid, user = fixture["session_id"], fixture["user"]
    before = await table_fingerprint(pool)
    for turn in (2, 1):  # a cut before turn 3 (where they were last written) or earlier: their old values are gone
        task = fixture["turns"][turn]["task_id"]
        for path, body in [
            (f"/api/sessions/{sid}/fork", {"rewind_before_task_id": task}),
            (f"/api/sessions/{sid}/fork", {"rewind_before_task_id": task, "dry_run": True}),
            (f"/api/sessions/{sid}/rewind", {"rewind_before_task_id": task}),
            (f"/api/sessions/{sid}/rewind", {"rewind_before_task_id": task, "dry_run": True}),
        ]:
            r = await post(client, path, user, body)
            assert r.status_code == 422, (path, body, r.text)
            assert "CrewAI" in r.json()["error"] and "changed at or after" in r.json()["error"]
    assert await table_fingerprint(pool) == before


async def test_a_crewai_cut_after_its_memory_last_changed_shares_it_as_it_is(client: Any, pool: asyncpg.Pool) -> None:
    fixture = await crewai_session(pool, changed_in_turn=2)
    sid, user = fixture["session_id"], fixture["user"]
    source = await crewai_rows(pool, sid)
    task = fixture["turns"][2]["task_id"]
    r = await post(
        client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": task, "task_layout": "per_task"}
    )
    assert r.status_code == 201, r.text
    fork = r.json()["data"]["fork"]
    assert fork["tasks_copied"] == 2 and any("shared as they are" in w for w in fork["warnings"]), fork
    assert await crewai_rows(pool, r.json()["data"]["id"]) == source
    # before turn 2, where they changed: refused
    r = await post(client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": fixture["turns"][1]["task_id"]})
    assert r.status_code == 422, r.text
    # a rewind before turn 3 hides turn 3 and leaves the memory as it is
    r = await post(client, f"/api/sessions/{sid}/rewind", user, {"rewind_before_task_id": task})
    assert r.status_code == 200 and r.json()["data"]["rewind"]["tasks_removed"] == 1, r.text
    assert await crewai_rows(pool, sid) == source


async def test_a_crewai_session_as_kagent_crewai_writes_it_is_forked_with_its_tasks(
    client: Any, pool: asyncpg.Pool
) -> None:
    """kagent-crewai 0.10.4's own rows (tasks only, under kagent's default user): the framework is read from the
    tasks' metadata; a fork, whole or cut, copies the kept tasks and says that the agent's memory is in its pod;
    a rewind hides the turns from the chosen one on."""
    fixture = await loaded(pool, "crewai_3_turns")
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    assert fixture["controller_calls"] == ["GET /api/tasks/{id}", "POST /api/tasks"]  # no /api/crewai call
    assert not fixture["tables"]["crewai_agent_memory"] and not fixture["tables"]["crewai_flow_state"]
    r = await get(client, f"/api/sessions/{sid}/invocations", user)
    assert [(t["task_id"], t["framework"]) for t in r.json()["data"]] == [(t["task_id"], "crewai") for t in turns]
    for body, kept in (({}, 3), ({"rewind_before_task_id": turns[1]["task_id"]}, 1)):
        r = await post(client, f"/api/sessions/{sid}/fork", user, {**body, "task_layout": "per_task"})
        assert r.status_code == 201, r.text
        fork = r.json()["data"]
        assert (fork["fork"]["framework"], fork["fork"]["tasks_copied"]) == ("crewai", kept)
        assert any("keeps no memory or flow state in kagent's database" in w for w in fork["fork"]["warnings"])
        async with pool.acquire() as conn:
            copied = await conn.fetch("SELECT user_id FROM task WHERE session_id = $1", fork["id"])
        assert [c["user_id"] for c in copied] == [frameworks.KAGENT_DEFAULT_USER] * kept
        assert await crewai_rows(pool, fork["id"]) == []
    r = await post(client, f"/api/sessions/{sid}/rewind", user, {"rewind_before_task_id": turns[1]["task_id"]})
    assert r.status_code == 200 and r.json()["data"]["rewind"]["tasks_removed"] == 2, r.text


async def test_a_crewai_flow_keeps_its_state_in_its_pod_so_only_its_visible_chat_is_forked(
    client: Any, pool: asyncpg.Pool
) -> None:
    """kagent-crewai 0.10.4 running a flow (crewai_flow_3_turns: its tasks tell the flow's methods, no crewai row):
    the flow restores its state from its pod by the session's id, so a fork or a rewind is refused as for a Claude
    agent, and a tasks_only fork copies the visible chat with the warning."""
    fixture = await loaded(pool, "crewai_flow_3_turns")
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    task_rows = fixture["tables"]["task"]
    assert all(frameworks.crewai_flow(t["data"]) for t in task_rows)
    assert not any(frameworks.crewai_flow(t["data"]) for t in read_fixture("crewai_3_turns")["tables"]["task"])
    r = await get(client, f"/api/sessions/{sid}/invocations", user)
    assert [(t["task_id"], t["framework"]) for t in r.json()["data"]] == [(t["task_id"], "crewai") for t in turns]
    before = await table_fingerprint(pool)
    for path, body in [
        (f"/api/sessions/{sid}/fork", {}),
        (f"/api/sessions/{sid}/fork", {"rewind_before_task_id": turns[2]["task_id"], "dry_run": True}),
        (f"/api/sessions/{sid}/rewind", {"rewind_before_task_id": turns[2]["task_id"]}),
    ]:
        r = await post(client, path, user, body)
        assert r.status_code == 422 and "CrewAI flow" in r.json()["error"], (path, r.text)
    assert await table_fingerprint(pool) == before
    body = {"tasks_only": True, "rewind_before_task_id": turns[2]["task_id"], "task_layout": "per_task"}
    r = await post(client, f"/api/sessions/{sid}/fork", user, body)
    assert r.status_code == 201, r.text
    fork = r.json()["data"]["fork"]
    assert (fork["framework"], fork["tasks_copied"]) == ("crewai", 2)
    assert [w for w in fork["warnings"] if "CrewAI" in w or "remember" in w] == [
        "a fork of the visible chat only: the agent keeps its conversation in its own pod and will not remember "
        "this one"
    ]
    # a crew's session (no per-session state) is forked without tasks_only
    crew = await loaded(pool, "crewai_3_turns")
    r = await post(client, f"/api/sessions/{crew['session_id']}/fork", crew["user"], {"tasks_only": True})
    assert r.status_code == 422 and "tasks_only" in r.json()["error"], r.text


async def claude_session(pool: asyncpg.Pool) -> dict[str, Any]:
    """A Claude Agent SDK session as kagent holds it: tasks only (the conversation is in the agent pod's
    transcript files). kagent-claude is not in kagent's repository on either line, so no runtime runs here: the
    A2A tasks are the langgraph fixture's (the same kagent-core task store, under kagent's default user), with the
    metadata kagent-claude's executor puts on its working status (`kagent.claude.app_name`, which kagent's task
    store keeps in the task's metadata), no event, no checkpoint."""
    fixture = fresh_copy(read_fixture("langgraph_3_turns"), new_user())
    tables = fixture["tables"]
    tables["lg_checkpoint"], tables["lg_checkpoint_write"] = [], []
    for row in tables["task"]:
        data = json.loads(row["data"])
        data["metadata"] = {"kagent.claude.app_name": "kagent__NS__claude_agent"}
        row["data"] = json.dumps(data, separators=(",", ":"))
    async with pool.acquire() as conn:
        await load_fixture(conn, fixture)
    return fixture


async def test_a_claude_session_is_refused_unless_tasks_only(client: Any, pool: asyncpg.Pool) -> None:
    fixture = await claude_session(pool)
    sid, user = fixture["session_id"], fixture["user"]
    r = await get(client, f"/api/sessions/{sid}/invocations", user)
    assert [(t["task_id"], t["framework"]) for t in r.json()["data"]] == [
        (t["task_id"], "claude") for t in fixture["turns"]
    ]
    before = await table_fingerprint(pool)
    task = fixture["turns"][2]["task_id"]
    for path, body in [
        (f"/api/sessions/{sid}/fork", {}),
        (f"/api/sessions/{sid}/fork", {"rewind_before_task_id": task, "dry_run": True}),
        (f"/api/sessions/{sid}/rewind", {"rewind_before_task_id": task}),
    ]:
        r = await post(client, path, user, body)
        assert r.status_code == 422 and "own pod" in r.json()["error"], (path, r.text)
    assert await table_fingerprint(pool) == before


async def test_a_claude_tasks_only_fork_copies_the_visible_chat_with_a_warning(client: Any, pool: asyncpg.Pool) -> None:
    fixture = await claude_session(pool)
    sid, user = fixture["session_id"], fixture["user"]
    task = fixture["turns"][2]["task_id"]
    body = {"tasks_only": True, "rewind_before_task_id": task, "task_layout": "per_task"}
    r = await post(client, f"/api/sessions/{sid}/fork", user, body)
    assert r.status_code == 201, r.text
    fork = r.json()["data"]
    assert (fork["user_id"], fork["fork"]["framework"], fork["fork"]["tasks_copied"]) == (user, "claude", 2)
    assert any("will not remember" in w for w in fork["fork"]["warnings"]), fork["fork"]["warnings"]
    tasks = await fork_tasks(pool, fork["id"])
    # the visible chat of turns 1-2, under the user the runtime wrote it under, naming the fork
    assert [t["user_id"] for t in tasks] == [frameworks.KAGENT_DEFAULT_USER] * 2
    questions = [t["question"] for t in fixture["turns"][:2]]
    assert [t["doc"]["history"][0]["parts"][0]["text"] for t in tasks] == questions
    assert {t["doc"]["contextId"] for t in tasks} == {fork["id"]}
    assert [t["doc"]["metadata"] for t in tasks] == [{"kagent.claude.app_name": "kagent__NS__claude_agent"}] * 2
    listed = await get(client, f"/api/sessions/{fork['id']}/invocations", user)
    assert [t["framework"] for t in listed.json()["data"]] == ["claude", "claude"]


# Reading every framework's conversation (issue 26): the transcript, compare and the summaries.


def _texts(turn: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """A transcript turn's messages as (role, kind, what): the text, or the tool call's name and arguments,
    or the tool result's name and response."""
    out = []
    for m in turn["messages"]:
        what = m.get("text") if m["kind"] == "text" else (m.get("tool_name"), m.get("args", m.get("response")))
        out.append((m["role"], m["kind"], what))
    return out


def _answers(fixture: dict[str, Any]) -> list[str]:
    return ["web-1 is Running.", *(f"Answer to: {t['question']}" for t in fixture["turns"][1:])]


async def test_the_transcript_of_an_openai_session_shows_its_turns_with_their_tasks(
    client: Any, pool: asyncpg.Pool
) -> None:
    fixture = await loaded(pool, "openai_3_turns")
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    r = await get(client, f"/api/sessions/{sid}/transcript", user)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["warnings"] == [] and data["session_id"] == sid
    assert [(t["task_id"], t["state"], t["invocation_id"]) for t in data["turns"]] == [
        (t["task_id"], "completed", None) for t in turns
    ]
    answers = _answers(fixture)
    assert _texts(data["turns"][0]) == [
        ("user", "text", turns[0]["question"]),
        ("agent", "tool_call", ("lookup", {"query": "web-1"})),
        ("agent", "tool_result", ("lookup", "looked up: web-1")),
        ("agent", "text", answers[0]),
    ]
    assert data["turns"][0]["messages"][1]["tool_call_id"] == "call_1"
    for turn, asked, answer in zip(data["turns"][1:], turns[1:], answers[1:], strict=True):
        assert _texts(turn) == [("user", "text", asked["question"]), ("agent", "text", answer)]
    chars = sum(len(m["text"]) for t in data["turns"] for m in t["messages"] if m["kind"] == "text")
    assert data["estimated_context_tokens"] == -(-chars // 4)
    # before_task: the turns before the one that task names
    r = await get(client, f"/api/sessions/{sid}/transcript?before_task={turns[2]['task_id']}", user)
    assert [t["task_id"] for t in r.json()["data"]["turns"]] == [t["task_id"] for t in turns[:2]]
    md = await client.get(f"/api/sessions/{sid}/transcript?format=markdown", headers={"X-User-Id": user})
    assert md.status_code == 200, md.text
    text = md.text
    assert "3 turns" in text and "calls `lookup`" in text
    for t, answer in zip(turns, answers, strict=True):
        assert f"task `{t['task_id']}`" in text and t["question"] in text and answer in text
    assert text.index(turns[0]["question"]) < text.index(answers[0]) < text.index(turns[1]["question"])


async def test_the_transcript_of_a_langgraph_session_is_read_from_its_tasks(client: Any, pool: asyncpg.Pool) -> None:
    fixture = await loaded(pool, "langgraph_3_turns")
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    r = await get(client, f"/api/sessions/{sid}/transcript", user)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert len(data["warnings"]) == 1 and "A2A tasks" in data["warnings"][0]
    assert [(t["task_id"], t["state"]) for t in data["turns"]] == [(t["task_id"], "completed") for t in turns]
    answers = _answers(fixture)
    # the user's message once (kagent's task store keeps it twice, with one message id)
    assert _texts(data["turns"][0]) == [
        ("user", "text", turns[0]["question"]),
        ("agent", "tool_call", ("lookup", {"query": "web-1"})),
        ("agent", "tool_result", ("lookup", "looked up: web-1")),
        ("agent", "text", answers[0]),
    ]
    for turn, asked, answer in zip(data["turns"][1:], turns[1:], answers[1:], strict=True):
        assert _texts(turn) == [("user", "text", asked["question"]), ("agent", "text", answer)]
    r = await get(client, f"/api/sessions/{sid}/transcript?before_task={turns[1]['task_id']}", user)
    assert [t["task_id"] for t in r.json()["data"]["turns"]] == [turns[0]["task_id"]]
    md = (await client.get(f"/api/sessions/{sid}/transcript?format=markdown", headers={"X-User-Id": user})).text
    assert "3 turns" in md and "A2A tasks" in md
    assert all(t["question"] in md and a in md for t, a in zip(turns, answers, strict=True))


async def _shift_task(pool: asyncpg.Pool, fixture: dict[str, Any], turn: int, order: str) -> None:
    """Move turn `turn`'s task row (0-based) 1 ms after its input event, or before the previous turn's
    last event (kagent-openai writes the task first, but nothing guarantees it)."""
    events = sorted(fixture["tables"]["event"], key=lambda e: e["created_at"])
    inputs = [e for e in events if json.loads(e["data"])["items"][0].get("role") == "user"]
    at = datetime.fromisoformat(inputs[turn]["created_at"])
    if order == "after":
        moved = at + timedelta(milliseconds=1)
    else:
        previous = events[events.index(inputs[turn]) - 1]
        moved = datetime.fromisoformat(previous["created_at"]) - timedelta(milliseconds=1)
    async with pool.acquire() as conn:
        await conn.execute("UPDATE task SET created_at = $2 WHERE id = $1", fixture["turns"][turn]["task_id"], moved)


@pytest.mark.parametrize("order", ["after", "before"])
async def test_an_openai_fork_is_cut_at_the_turns_input_event_whatever_its_tasks_time(
    client: Any, pool: asyncpg.Pool, order: str
) -> None:
    """A task row written after its turn's input event, or well before it: the fork holds exactly the earlier
    turns' events, the transcript before it the earlier turns, and a rewind hides exactly the turn's events."""
    fixture = await loaded(pool, "openai_3_turns")
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    await _shift_task(pool, fixture, 2, order)
    await _shift_task(pool, fixture, 1, order)
    events = sorted(fixture["tables"]["event"], key=lambda e: e["created_at"])
    starts = [i for i, e in enumerate(events) if json.loads(e["data"])["items"][0].get("role") == "user"]
    for turn in (1, 2):
        task = turns[turn]["task_id"]
        r = await post(client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": task})
        assert r.status_code == 201, r.text
        fork = r.json()["data"]
        assert fork["fork"]["warnings"] == [] and fork["fork"]["tasks_copied"] == turn
        async with pool.acquire() as conn:
            copied = await conn.fetch(
                "SELECT data FROM event WHERE session_id = $1 ORDER BY created_at, id", fork["id"]
            )
        assert [e["data"] for e in copied] == [e["data"] for e in events[: starts[turn]]]
        # the fork's summary: what it left behind, the turns from the named one on
        left = fork["fork"]["summary"]
        assert (left["turns"], left["events"]) == (3 - turn, len(events) - starts[turn])
        assert left["first_user_text"] == turns[turn]["question"] and left["last_agent_text"] == _answers(fixture)[2]
        shown = (await get(client, f"/api/sessions/{sid}/transcript?before_task={task}", user)).json()["data"]["turns"]
        assert [t["task_id"] for t in shown] == [t["task_id"] for t in turns[:turn]]
        assert shown[-1]["messages"][-1]["text"] == _answers(fixture)[turn - 1]
    before = await table_fingerprint(pool)
    r = await post(client, f"/api/sessions/{sid}/rewind", user, {"rewind_before_task_id": turns[2]["task_id"]})
    assert r.status_code == 200, r.text
    assert (r.json()["data"]["rewind"]["events_removed"], r.json()["data"]["rewind"]["tasks_removed"]) == (
        len(events) - starts[2],
        1,
    )
    async with pool.acquire() as conn:
        live = await conn.fetch(
            "SELECT data FROM event WHERE session_id = $1 AND deleted_at IS NULL ORDER BY created_at, id", sid
        )
    assert [e["data"] for e in live] == [e["data"] for e in events[: starts[2]]]
    undo = await post(client, f"/api/sessions/{sid}/rewinds/{r.json()['data']['rewind']['id']}/undo", user, {})
    assert undo.status_code == 200, undo.text
    after = await table_fingerprint(pool)
    assert after["event"] == before["event"] and after["task"] == before["task"]


async def test_an_openai_cut_whose_inputs_do_not_pair_with_the_tasks_falls_back_to_the_task_and_says_so(
    client: Any, pool: asyncpg.Pool
) -> None:
    fixture = await loaded(pool, "openai_3_turns")
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    first_input = min(fixture["tables"]["event"], key=lambda e: e["created_at"])["id"]
    async with pool.acquire() as conn:  # turn 1's input event gone: 3 tasks, 2 inputs
        await conn.execute("DELETE FROM event WHERE id = $1", first_input)
        cut = await conn.fetchval("SELECT created_at FROM task WHERE id = $1", turns[2]["task_id"])
        expected = await conn.fetchval("SELECT count(*) FROM event WHERE session_id = $1 AND created_at < $2", sid, cut)
    r = await post(
        client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": turns[2]["task_id"], "dry_run": True}
    )
    assert r.status_code == 200, r.text
    dry = r.json()["data"]
    assert dry["events_copied"] == expected and any("do not pair" in w for w in dry["warnings"])
    shown = (await get(client, f"/api/sessions/{sid}/transcript", user)).json()["data"]
    assert {t["task_id"] for t in shown["turns"]} == {None} and any("do not pair" in w for w in shown["warnings"])
    for dry_run in (True, False):  # the rewind (its plan, and done) says so too
        r = await post(
            client, f"/api/sessions/{sid}/rewind", user,
            {"rewind_before_task_id": turns[2]["task_id"], "dry_run": dry_run},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        assert any("do not pair" in w for w in r.json()["data"]["rewind"]["warnings"]), r.text


async def test_dry_run_summaries_of_openai_and_langgraph_sessions(client: Any, pool: asyncpg.Pool) -> None:
    openai = await loaded(pool, "openai_3_turns")
    sid, user, turns = openai["session_id"], openai["user"], openai["turns"]
    r = await post(
        client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": turns[0]["task_id"], "dry_run": True}
    )
    dry = r.json()["data"]
    assert dry["events_copied"] == 0 and dry["estimated_context_tokens"] == 0
    assert dry["summary"] == {
        "strategy": "deterministic_v1", "turns": 3, "events": 7, "tool_calls": {"lookup": 1},
        "first_user_text": turns[0]["question"], "last_agent_text": _answers(openai)[2], "total_tokens": 0,
    }  # fmt: skip
    r = await post(
        client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": turns[2]["task_id"], "dry_run": True}
    )
    dry = r.json()["data"]
    kept = [turns[0]["question"], _answers(openai)[0], turns[1]["question"], _answers(openai)[1]]
    assert dry["events_copied"] == 5 and dry["estimated_context_tokens"] == -(-sum(map(len, kept)) // 4)
    assert (dry["summary"]["turns"], dry["summary"]["events"], dry["summary"]["tool_calls"]) == (1, 2, {})

    lg = await loaded(pool, "langgraph_3_turns")
    sid, user, turns = lg["session_id"], lg["user"], lg["turns"]
    r = await post(
        client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": turns[1]["task_id"], "dry_run": True}
    )
    dry = r.json()["data"]
    assert dry["summary"] == {
        "strategy": "deterministic_v1", "turns": 2, "events": 0, "tool_calls": {},
        "first_user_text": turns[1]["question"], "last_agent_text": _answers(lg)[2], "total_tokens": 0,
    }  # fmt: skip
    kept = [turns[0]["question"], _answers(lg)[0]]
    assert dry["estimated_context_tokens"] == -(-sum(map(len, kept)) // 4)
    r = await post(
        client, f"/api/sessions/{sid}/rewind", user, {"rewind_before_task_id": turns[0]["task_id"], "dry_run": True}
    )
    hides = r.json()["data"]["rewind"]["summary"]
    assert (hides["turns"], hides["tool_calls"], hides["first_user_text"]) == (3, {"lookup": 1}, turns[0]["question"])


async def test_compare_of_two_openai_forks(client: Any, pool: asyncpg.Pool) -> None:
    fixture = await loaded(pool, "openai_3_turns")
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    forks = []
    for turn in (1, 2):
        r = await post(client, f"/api/sessions/{sid}/fork", user, {"rewind_before_task_id": turns[turn]["task_id"]})
        assert r.status_code == 201, r.text
        forks.append(r.json()["data"]["id"])
    r = await get(client, f"/api/sessions/{forks[0]}/compare/{forks[1]}", user)
    assert r.status_code == 200, r.text
    c = r.json()["data"]
    assert c["common_turns"] == 1 and (c["left"]["turns_after"], c["right"]["turns_after"]) == (0, 1)
    assert (c["right"]["first_user_text"], c["right"]["last_agent_text"]) == (
        turns[1]["question"],
        _answers(fixture)[1],
    )
    [row] = c["aligned"]
    assert row["left"] is None and row["right"]["question"] == turns[1]["question"]
    assert row["right"]["invocation_id"] is None and row["right"]["task_id"] is not None
    # the source beside its fork before turn 3: turns 1-2 in common, then the source's turn 3
    r = await get(client, f"/api/sessions/{sid}/compare/{forks[1]}", user)
    c = r.json()["data"]
    assert c["common_turns"] == 2 and c["left"]["turns_after"] == 1 and c["right"]["turns_after"] == 0
    assert c["aligned"][0]["left"]["task_id"] == turns[2]["task_id"]
    assert c["aligned"][0]["left"]["answer"] == _answers(fixture)[2]
    # two LangGraph sessions compare by their tasks (their turns start at the tasks' times)
    lg = await loaded(pool, "langgraph_3_turns")
    r = await post(
        client,
        f"/api/sessions/{lg['session_id']}/fork",
        lg["user"],
        {"rewind_before_task_id": lg["turns"][1]["task_id"]},
    )
    assert r.status_code == 201, r.text
    c = (await get(client, f"/api/sessions/{lg['session_id']}/compare/{r.json()['data']['id']}", lg["user"])).json()[
        "data"
    ]
    assert c["common_turns"] == 1 and c["left"]["turns_after"] == 2
    assert c["left"]["tool_calls"] == {} and c["aligned"][1]["left"]["question"] == lg["turns"][2]["question"]


async def test_the_transcript_of_a_claude_session_and_of_tasks_without_events(client: Any, pool: asyncpg.Pool) -> None:
    """A Claude session, and an OpenAI Agents SDK session whose events are gone (tasks, no events): read from
    the tasks, one turn a task, with the warning."""
    claude = await claude_session(pool)
    r = await get(client, f"/api/sessions/{claude['session_id']}/transcript", claude["user"])
    data = r.json()["data"]
    assert [t["task_id"] for t in data["turns"]] == [t["task_id"] for t in claude["turns"]]
    assert [t["messages"][0]["text"] for t in data["turns"]] == [t["question"] for t in claude["turns"]]
    assert len(data["warnings"]) == 1 and "A2A tasks" in data["warnings"][0]

    openai = await loaded(pool, "openai_3_turns", drop=("event",))
    r = await get(client, f"/api/sessions/{openai['session_id']}/transcript", openai["user"])
    data = r.json()["data"]
    assert [(t["task_id"], t["messages"][-1]["text"]) for t in data["turns"]] == [
        (t["task_id"], answer) for t, answer in zip(openai["turns"], _answers(openai), strict=True)
    ]
    assert len(data["warnings"]) == 1 and "A2A tasks" in data["warnings"][0]


@pytest.mark.parametrize("name", ["crewai_3_turns", "crewai_flow_3_turns"])
async def test_the_transcript_of_a_crewai_session_is_read_from_its_tasks(
    client: Any, pool: asyncpg.Pool, name: str
) -> None:
    """kagent-crewai 0.10.4's crew and flow (captured from the runtime): its chat is only in its tasks."""
    fixture = await loaded(pool, name)
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    data = (await get(client, f"/api/sessions/{sid}/transcript", user)).json()["data"]
    assert [(t["task_id"], t["state"]) for t in data["turns"]] == [(t["task_id"], "completed") for t in turns]
    assert [t["messages"][0]["text"] for t in data["turns"]] == [t["question"] for t in turns]
    assert all(m["role"] == "agent" for t in data["turns"] for m in t["messages"][1:])
    assert len(data["warnings"]) == 1 and "A2A tasks" in data["warnings"][0]
    if name == "crewai_flow_3_turns":  # the flow's answer is in its artifact only
        assert [t["messages"][-1]["text"] for t in data["turns"]] == [f"Answer to: {t['question']}" for t in turns]
