"""kagent's own agent runtime continues forks, rewinds and what-ifs (0.10.x line).

kagent-adk 0.10.4 runs as its own process (tests/support/runtimes.py, its own virtual environment) against
a stand-in for kagent's controller (tests/support/kagent_controller.py) on the test database, with a
scripted OpenAI-compatible model (tests/support/scripted_model.py) and an MCP tool server
(tests/support/tool_server.py). The conversations forked here were made by talking to the runtime itself;
the tests then assert what the model was sent when the runtime continued them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest

from service.app import create_app
from service.config import Settings
from tests.helpers import new_user
from tests.support import kagent_reads
from tests.support.conversations import create_share
from tests.support.kagent_chat import approval, new_session, send, text
from tests.support.kagent_controller import RunningController, register_agent, running_controller
from tests.support.live_server import live_server
from tests.support.runtimes import RunningRuntime, RuntimeUnavailable, kagent_adk, running_runtime, runtime_venv
from tests.support.scripted_model import RunningModel, _usage, call, running_model, say
from tests.support.tool_server import RunningTools, running_tools

AGENT_REF = "kagent/adk-agent"
AGENT_ID = "kagent__NS__adk_agent"
INSTRUCTION = "You are kagent-fork's test agent. Answer briefly."
AGENT_B_REF = "kagent/adk-agent-b"
INSTRUCTION_B = "You are kagent-fork's other agent. Answer in a word."


@dataclass(frozen=True)
class Runtime:
    """kagent-adk running as the agent AGENT_REF, and everything around it."""

    controller: RunningController
    model: RunningModel
    tools: RunningTools
    process: RunningRuntime
    service: str  # kagent-fork, with KAGENT_A2A_URL at the stand-in's /api/a2a


@pytest.fixture(scope="session")
def stand_in(database_url: str, pool: asyncpg.Pool) -> Iterator[RunningController]:
    with running_controller(database_url) as controller:
        yield controller


@pytest.fixture(scope="session")
def scripted_model() -> Iterator[RunningModel]:
    with running_model() as model:
        yield model


@pytest.fixture(scope="session")
def tool_server() -> Iterator[RunningTools]:
    with running_tools() as tools:
        yield tools


def agent_config(model: RunningModel, tools: RunningTools) -> dict[str, Any]:
    """The agent's config.json as kagent's controller renders it: an OpenAI ModelConfig with a base URL, and
    a RemoteMCPServer whose delete_pod requires approval and which gets the request's Authorization (`status`
    reads, and answers differently each call; `scale` acts: the replay twin's tests, test_runtime_replay_twin.py,
    where the replay endpoint lists and answers only the tools the source's configuration names)."""
    return {
        "model": {"type": "openai", "model": "scripted-model", "base_url": model.url},
        "description": "kagent-fork's test agent",
        "instruction": INSTRUCTION,
        "http_tools": [
            {
                "params": {"url": tools.url, "timeout": 30},
                "tools": ["lookup", "delete_pod", "status", "scale"],
                "require_approval": ["delete_pod"],
                "allowed_headers": ["Authorization"],
            }
        ],
    }


@pytest.fixture(scope="session")
async def adk(
    stand_in: RunningController,
    scripted_model: RunningModel,
    tool_server: RunningTools,
    pool: asyncpg.Pool,
    settings: Settings,
    database_url: str,
) -> AsyncIterator[Runtime]:
    """kagent-adk started once for the test session (about 20 s), as kagent's controller starts it."""
    config = agent_config(scripted_model, tool_server)
    async with pool.acquire() as conn:
        await register_agent(conn, AGENT_REF, config)
    spec = kagent_adk(AGENT_REF, kagent_url=stand_in.url, config=config)
    with ExitStack() as stack:
        process = await asyncio.to_thread(stack.enter_context, running_runtime(spec))
        stand_in.register(AGENT_REF, process.url)
        service_settings = dataclasses.replace(settings, kagent_a2a_url=stand_in.a2a_url)
        service = stack.enter_context(live_server(create_app(service_settings, database_url)))
        print(f"kagent-adk answered after {process.started_in:.1f} s")
        yield Runtime(stand_in, scripted_model, tool_server, process, service)


@pytest.fixture(scope="session")
async def adk_b(adk: Runtime, pool: asyncpg.Pool) -> AsyncIterator[str]:
    """A second kagent-adk agent (another name, another instruction: another system prompt for the model),
    on the same stand-in, model and tools; started only for the tests that compare two agents."""
    config = {**agent_config(adk.model, adk.tools), "instruction": INSTRUCTION_B}
    async with pool.acquire() as conn:
        await register_agent(conn, AGENT_B_REF, config)
    spec = kagent_adk(AGENT_B_REF, kagent_url=adk.controller.url, config=config)
    with ExitStack() as stack:
        process = await asyncio.to_thread(stack.enter_context, running_runtime(spec))
        adk.controller.register(AGENT_B_REF, process.url)
        yield AGENT_B_REF


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


def tag() -> str:
    return secrets.token_hex(3)


async def chat(
    rt: Runtime, http: httpx.AsyncClient, user: str, session_id: str, question: str, **kw: Any
) -> dict[str, Any]:
    """One turn through kagent's A2A path; returns the runtime's task."""
    task = await send(
        http, rt.controller.a2a_url, AGENT_REF, user=user, context_id=session_id, parts=[text(question)], **kw
    )
    return task


async def conversation(rt: Runtime, http: httpx.AsyncClient, user: str, questions: list[str]) -> str:
    """A new session with one completed turn per question, made by the runtime."""
    session_id = await new_session(http, rt.controller.url, user, AGENT_REF, questions[0][:40])
    for question in questions:
        task = await chat(rt, http, user, session_id, question)
        assert task["status"]["state"] == "completed", (question, task["status"], rt.process.log_tail())
    return session_id


async def api(rt: Runtime, http: httpx.AsyncClient, method: str, path: str, user: str, **kw: Any) -> Any:
    headers = {"X-User-Id": user, **kw.pop("headers", {})}
    r = await http.request(method, f"{rt.service}{path}", headers=headers, **kw)
    assert r.status_code < 300, r.text
    return r.json()["data"]


async def turns(rt: Runtime, http: httpx.AsyncClient, session_id: str, user: str) -> list[dict[str, Any]]:
    listing = await api(rt, http, "GET", f"/api/sessions/{session_id}/invocations", user)
    items: list[dict[str, Any]] = listing["invocations"] if isinstance(listing, dict) else listing
    return items


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A chat request's messages, one (role, text or tool call) each, for readable assertions."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = ", ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in m["tool_calls"])
            out.append((m["role"], f"calls {calls}"))
        elif m["role"] == "tool":
            out.append(("tool", str(m.get("content"))))
        else:
            out.append((m["role"], str(m.get("content"))))
    return out


async def fork(rt: Runtime, http: httpx.AsyncClient, session_id: str, user: str, before: str | None, **kw: Any) -> str:
    body = {"rewind_before_invocation_id": before, "if_boundary_missing": "error"} if before else {}
    data = await api(rt, http, "POST", f"/api/sessions/{session_id}/fork", user, json=body, **kw)
    fork_id: str = data["id"]
    return fork_id


def before_question(rt: Runtime, question: str) -> list[dict[str, Any]]:
    """What the model was sent before `question` when the source ran that turn: every earlier turn."""
    first = rt.model.model.requests_for(question)[0]["messages"]
    assert first[-1] == {"role": "user", "content": question}
    return list(first[:-1])


async def adk_events(pool: asyncpg.Pool, session_id: str, user: str) -> list[dict[str, Any]]:
    """The session's live events as the runtime loads them (kagent's ListEventsForSessionAsc)."""
    async with pool.acquire() as conn:
        rows = await kagent_reads.list_events_for_session_asc(conn, session_id, user)
    return [json.loads(r["data"]) for r in rows]


def said(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(author, text) of every event with text."""
    return [
        (e["author"], p["text"]) for e in events for p in ((e.get("content") or {}).get("parts") or []) if p.get("text")
    ]


async def test_a_fork_continued_by_the_runtime_sends_the_model_the_kept_turns_and_the_question(
    adk: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    user, t = new_user(), tag()
    q = [f"Q1 {t}: which namespace?", f"Q2 {t}: how many pods?", f"Q3 {t}: restart one", f"Q4 {t}: and now?"]
    adk.model.model.on(q[1], call("lookup", query="pods"), say("There are 3 pods."))
    source = await conversation(adk, http, user, q)
    listed = await turns(adk, http, source, user)
    assert [x["user_text"] for x in listed] == q

    forked = await fork(adk, http, source, user, listed[2]["invocation_id"])
    new_question = f"Q5 {t}: instead, scale the deployment"
    task = await chat(adk, http, user, forked, new_question)
    assert task["status"]["state"] == "completed" and task["contextId"] == forked

    # the model got exactly turns 1-2 (question, tool call and result, answers) and the new question
    sent = adk.model.model.requests_for(new_question)
    assert len(sent) == 1
    assert sent[0]["messages"] == [*before_question(adk, q[2]), {"role": "user", "content": new_question}]
    assert shape(sent[0]["messages"])[1:] == [
        ("user", q[0]),
        ("assistant", f"Answer to: {q[0]}"),
        ("user", q[1]),
        ("assistant", 'calls lookup({"query": "pods"})'),
        ("tool", "3 results for pods"),
        ("assistant", "There are 3 pods."),
        ("user", new_question),
    ]

    # the runtime loaded the fork as its owner and wrote the answer into it, after the kept turns
    assert ("GET", f"/api/sessions/{forked}", user) in adk.controller.controller.calls.seen
    events = await adk_events(pool, forked, user)
    assert said(events) == [
        ("user", q[0]), ("adk_agent", f"Answer to: {q[0]}"), ("user", q[1]), ("adk_agent", "There are 3 pods."),
        ("user", new_question), ("adk_agent", f"Answer to: {new_question}"),
    ]  # fmt: skip
    source_events = await adk_events(pool, source, user)
    first_two = sum(1 for e in source_events if e["invocation_id"] in {x["invocation_id"] for x in listed[:2]}) + 2
    assert events[:first_two] == source_events[:first_two]  # turns 1-2 (each opened by a header_update) as written

    # kagent's readers for the line read every task of the fork: the kept turns, then the runtime's own task
    async with pool.acquire() as conn:
        tasks = await kagent_reads.load_session_tasks(conn, forked, user, line="0.10.x")
        rows = await kagent_reads.list_tasks_for_session(conn, forked, user)
    assert tasks[-1].id == task["id"] and rows[-1]["user_id"] == user and rows[-1]["protocol_version"] is None
    assert tasks[-1].status.state.value == "completed" and tasks[-1].context_id == forked
    shown = [p.root.text for t_ in tasks for m in t_.history or [] for p in m.parts if getattr(p.root, "text", None)]
    assert list(dict.fromkeys(shown)) == [
        q[0], f"Answer to: {q[0]}", q[1], "There are 3 pods.", new_question, f"Answer to: {new_question}"
    ]  # fmt: skip
    transcript = await api(adk, http, "GET", f"/api/sessions/{forked}/transcript", user)
    assert [x["messages"][0]["text"] for x in transcript["turns"]] == [q[0], q[1], new_question]


async def test_a_rewind_keeps_the_hidden_turns_from_the_model_until_it_is_undone(
    adk: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    user, t = new_user(), tag()
    q = [f"R1 {t}: hello", f"R2 {t}: list pods", f"R3 {t}: delete the old one", f"R4 {t}: done?"]
    adk.model.model.on(q[1], call("lookup", query="pods"), say("Found 3 pods."))
    session = await conversation(adk, http, user, q)
    listed = await turns(adk, http, session, user)
    body = {"rewind_before_invocation_id": listed[2]["invocation_id"]}

    # rewind, then undo before anything new: the next question is asked after all four turns
    first = await api(adk, http, "POST", f"/api/sessions/{session}/rewind", user, json=body)
    await api(adk, http, "POST", f"/api/sessions/{session}/rewinds/{first['rewind']['id']}/undo", user, json={})
    after_undo = f"R5 {t}: what did we do?"
    await chat(adk, http, user, session, after_undo)
    sent = adk.model.model.requests_for(after_undo)[0]["messages"]
    assert sent == [
        *before_question(adk, q[3]), {"role": "user", "content": q[3]},
        {"role": "assistant", "content": f"Answer to: {q[3]}"},
        {"role": "user", "content": after_undo},
    ]  # fmt: skip

    # rewind before turn 3 again (turns 3 to 5 hidden): the hidden turns never reach the model
    await api(adk, http, "POST", f"/api/sessions/{session}/rewind", user, json=body)
    after_rewind = f"R6 {t}: start over from the pod list"
    task = await chat(adk, http, user, session, after_rewind)
    assert task["status"]["state"] == "completed"
    sent = adk.model.model.requests_for(after_rewind)[0]["messages"]
    assert sent == [*before_question(adk, q[2]), {"role": "user", "content": after_rewind}]
    assert not any(x in json.dumps(sent) for x in (q[2], q[3], after_undo))
    assert said(await adk_events(pool, session, user))[-2:] == [
        ("user", after_rewind), ("adk_agent", f"Answer to: {after_rewind}")
    ]  # fmt: skip


async def job_done(rt: Runtime, http: httpx.AsyncClient, job_id: str, user: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        job: dict[str, Any] = await api(rt, http, "GET", f"/api/whatif/{job_id}", user)
        if job["status"] != "running":
            return job
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.2)


async def test_a_whatif_is_answered_by_the_runtime_from_the_kept_turns(
    adk: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    user, t = new_user(), tag()
    q = [f"W1 {t}: which cluster?", f"W2 {t}: count pods", f"W3 {t}: which is oldest?", f"W4 {t}: thanks"]
    adk.model.model.on(q[1], call("lookup", query="pods"), say("7 pods."))
    source = await conversation(adk, http, user, q)
    listed = await turns(adk, http, source, user)

    started = await api(
        adk, http, "POST", f"/api/sessions/{source}/whatif", user,
        json={"tools": "live", "rewind_before_invocation_id": listed[2]["invocation_id"], "agent_ref": AGENT_REF},
    )  # fmt: skip
    job = await job_done(adk, http, started["job"]["id"], user)
    assert job["status"] == "completed", (job, adk.process.log_tail())
    assert job["result"]["last_agent_text"] == f"Answer to: {q[2]}"

    # the runtime's model got exactly the kept turns and the re-asked question: what the source's turn 3 got
    asked = adk.model.model.requests_for(q[2])
    assert len(asked) == 2 and asked[1]["messages"] == asked[0]["messages"]
    forked = job["session_id"]
    events = await adk_events(pool, forked, user)
    assert said(events)[-2:] == [("user", q[2]), ("adk_agent", f"Answer to: {q[2]}")]
    async with pool.acquire() as conn:
        tasks = await kagent_reads.load_session_tasks(conn, forked, user, line="0.10.x")
    assert tasks[-1].id == job["task_id"] and tasks[-1].status.state.value == "completed"


async def test_a_whatif_of_every_later_turn_replays_them_in_order_from_the_kept_turns(
    adk: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    user, t = new_user(), tag()
    q = [f"T1 {t}: which cluster?", f"T2 {t}: count pods", f"T3 {t}: which is oldest?", f"T4 {t}: restart it"]
    adk.model.model.on(q[1], call("lookup", query="pods"), say("7 pods."))
    source = await conversation(adk, http, user, q)
    listed = await turns(adk, http, source, user)
    seen_before = len(adk.model.model.requests)

    started = await api(
        adk, http, "POST", f"/api/sessions/{source}/whatif", user,
        json={"tools": "live", "rewind_before_invocation_id": listed[1]["invocation_id"], "agent_ref": AGENT_REF,
              "turns": "all"},
    )  # fmt: skip
    job = await job_done(adk, http, started["job"]["id"], user)
    assert job["status"] == "completed", (job, adk.process.log_tail())
    assert (job["turns_done"], job["turns_total"]) == (3, 3)
    assert job["result"]["last_agent_text"] == f"Answer to: {q[3]}"

    # the model got turn 1 as the source holds it, then each re-asked question in order, each after the
    # replayed turns before it: the same conversation the source's own turns 2-4 were sent
    replay = adk.model.model.requests[seen_before:]
    source_requests = [r for r in adk.model.model.requests[:seen_before] if any(x in json.dumps(r) for x in q)]
    assert [shape(r["messages"]) for r in replay] == [shape(r["messages"]) for r in source_requests[1:]]
    assert [turn_of(r) for r in replay] == [q[1], q[1], q[2], q[3]]  # turn 2's tool call, then its answer
    kept = before_question(adk, q[1])
    assert all(r["messages"][: len(kept)] == kept for r in replay)  # turn 1 exactly as the source sent it
    assert replay[1]["messages"][-2]["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"query": "pods"}',
    }

    # the fork holds turn 1 then the replayed turns, read back with kagent's readers; the runtime worked as
    # the caller
    forked = job["session_id"]
    assert said(await adk_events(pool, forked, user)) == [
        ("user", q[0]), ("adk_agent", f"Answer to: {q[0]}"), ("user", q[1]), ("adk_agent", "7 pods."),
        ("user", q[2]), ("adk_agent", f"Answer to: {q[2]}"), ("user", q[3]), ("adk_agent", f"Answer to: {q[3]}"),
    ]  # fmt: skip
    assert {u for _, path, u in adk.controller.controller.calls.seen if forked in path} == {user}
    async with pool.acquire() as conn:
        tasks = await kagent_reads.load_session_tasks(conn, forked, user, line="0.10.x")
    assert [t_.status.state.value for t_ in tasks][-3:] == ["completed"] * 3
    assert tasks[-1].id == job["task_id"]


def turn_of(request: dict[str, Any]) -> str:
    """The question of the turn a model request belongs to."""
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user" and m.get("content"))


async def experiment_done(rt: Runtime, http: httpx.AsyncClient, experiment_id: str, user: str) -> dict[str, Any]:
    deadline = time.monotonic() + 180
    while True:
        found: dict[str, Any] = await api(rt, http, "GET", f"/api/experiments/{experiment_id}", user)
        if found["status"] != "running":
            return found
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.2)


def system_of(request: dict[str, Any]) -> str:
    return str(request["messages"][0].get("content"))


async def test_an_experiment_on_two_kagent_adk_agents_replays_every_later_turn_in_each_fork(
    adk: Runtime, adk_b: str, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    user, t = new_user(), tag()
    q = [f"E1 {t}: which cluster?", f"E2 {t}: count pods", f"E3 {t}: list the pods", f"E4 {t}: the oldest?"]
    adk.model.model.on(q[2], call("lookup", query="pods"), say("web, api, db."))
    source = await conversation(adk, http, user, q)
    listed = await turns(adk, http, source, user)
    kept = before_question(adk, q[1])  # turn 1, as the source's agent was sent it
    seen_before = len(adk.model.model.requests)

    edited = f"E2 {t}, asked again: how many pods run?"
    started = await api(
        adk, http, "POST", f"/api/sessions/{source}/experiments", user,
        json={"tools": "live", "rewind_before_invocation_id": listed[1]["invocation_id"], "agents": [AGENT_REF, adk_b],
              "turns": "all", "message": {"text": edited}},
    )  # fmt: skip
    done = await experiment_done(adk, http, started["experiment"]["id"], user)
    assert done["status"] == "completed", (done, adk.process.log_tail())
    asked = [edited, q[2], q[3]]
    assert [x["question"] for x in done["source"]["turns"]] == q[1:]

    replay = adk.model.model.requests[seen_before:]
    by_agent = {b["agent_ref"]: b for b in done["branches"]}
    assert len(by_agent) == 2
    for ref, system, author in ((AGENT_REF, INSTRUCTION, "adk_agent"), (adk_b, INSTRUCTION_B, "adk_agent_b")):
        branch = by_agent[ref]
        assert branch["status"] == "completed" and branch["stopped_at"] is None, branch
        assert [x["question"] for x in branch["turns"]] == asked
        assert [x["state"] for x in branch["turns"]] == ["completed"] * 3
        assert branch["turns"][1]["tool_calls"] == {"lookup": 1}

        # the model behind this branch's agent got the questions in order (turn 3's twice: its tool call,
        # then its answer), each request the previous one plus that turn's answer and the next question
        mine = [r for r in replay if system in system_of(r)]
        assert [turn_of(r) for r in mine] == [edited, q[2], q[2], q[3]], [shape(r["messages"]) for r in mine]
        for earlier, later in itertools.pairwise(mine):
            assert later["messages"][: len(earlier["messages"])] == earlier["messages"]
        first = mine[0]["messages"]
        if ref == AGENT_REF:  # the source's agent: turn 1 exactly as the source's model got it
            assert first == [*kept, {"role": "user", "content": edited}]
        else:  # another agent: google-adk hands it the source agent's answer as context, not as its own
            assert first[0]["role"] == "system" and first[0]["content"].startswith(INSTRUCTION_B)
            assert first[1:] == [
                {"role": "user", "content": q[0]},
                {"role": "user", "content": f"For context:\n[adk_agent] said: Answer to: {q[0]}"},
                {"role": "user", "content": edited},
            ]
        assert not any(q[1] in json.dumps(r) for r in mine)  # the edited question replaced the source's
        # each model call's tokens as kagent-adk's OpenAI model wrote them in its events (usage_metadata), one a
        # request, in order: what the price is computed from
        calls = [tuple(c) for x in branch["turns"] for c in x["model_usage"]]
        assert calls == [(_usage(r)["prompt_tokens"], _usage(r)["completion_tokens"]) for r in mine], calls
        assert branch["totals"]["input_tokens"] == sum(i for i, _ in calls)
        assert branch["totals"]["output_tokens"] == 7 * len(mine)

        # the fork holds turn 1, then the replayed turns, read back with kagent's readers, all as the caller
        forked = branch["session_id"]
        assert said(await adk_events(pool, forked, user)) == [
            ("user", q[0]), ("adk_agent", f"Answer to: {q[0]}"),
            ("user", edited), (author, f"Answer to: {edited}"),
            ("user", q[2]), (author, "web, api, db."),
            ("user", q[3]), (author, f"Answer to: {q[3]}"),
        ]  # fmt: skip
        assert {u for _, path, u in adk.controller.controller.calls.seen if forked in path} == {user}
        async with pool.acquire() as conn:
            tasks = await kagent_reads.load_session_tasks(conn, forked, user, line="0.10.x")
        assert [t_.status.state.value for t_ in tasks] == ["completed"] * 4
        assert all(t_.context_id == forked for t_ in tasks)
    assert len(replay) == 8  # nothing else was sent: 4 model calls per branch


@pytest.mark.parametrize("on_approval", ["stop", "reject"])
async def test_an_approval_asked_mid_replay_stops_the_branch_or_is_rejected_as_kagents_ui_rejects_it(
    adk: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool, on_approval: str
) -> None:
    user, t = new_user(), tag()
    q = [f"X1 {t}: hello", f"X2 {t}: clean up pod web-{t}", f"X3 {t}: list pods"]
    source = await conversation(adk, http, user, q)  # the source's agent answered X2 without a tool
    listed = await turns(adk, http, source, user)
    # replayed, the same question makes the model ask for delete_pod, which needs an approval
    adk.model.model.on(q[1], call("delete_pod", name=f"web-{t}"), say(f"I did not delete web-{t}."))

    started = await api(
        adk, http, "POST", f"/api/sessions/{source}/experiments", user,
        json={"tools": "live", "rewind_before_invocation_id": listed[1]["invocation_id"], "agents": [AGENT_REF],
              "turns": "all", "on_approval": on_approval},
    )  # fmt: skip
    done = await experiment_done(adk, http, started["experiment"]["id"], user)
    branch = done["branches"][0]
    forked = branch["session_id"]
    assert not [c for c in adk.tools.calls.of("delete_pod") if c.args == {"name": f"web-{t}"}]  # never run
    async with pool.acquire() as conn:
        tasks = await kagent_reads.load_session_tasks(conn, forked, user, line="0.10.x")

    if on_approval == "stop":
        # the branch ends at that turn, saying where and why; the fork waits there for a person
        assert branch["status"] == "completed" and branch["stopped_at"] == listed[1]["invocation_id"], branch
        assert [x["state"] for x in branch["turns"]] == ["input-required"]
        assert len(adk.model.model.requests_for(q[2])) == 1  # the source's: turn 3 was never sent
        assert tasks[-1].status.state.value == "input-required"
        table = await http.get(f"{adk.service}/api/experiments/{done['id']}?format=markdown",
                               headers={"X-User-Id": user})  # fmt: skip
        assert f"stopped at turn 1 ({listed[1]['invocation_id']}): the agent waits for input" in table.text
        return

    assert branch["status"] == "completed" and branch["stopped_at"] is None, (branch, adk.process.log_tail())
    first, second = branch["turns"]
    assert (first["state"], first["rejected_tool_calls"], first["answer"]) == (
        "completed", 1, f"I did not delete web-{t}."
    )  # fmt: skip
    assert second["state"] == "completed" and second["question"] == q[2]
    # the rejection went to the waiting task as kagent 0.10.x's Reject button sends it
    history = [m for t_ in tasks for m in t_.history or []]
    rejection = [m for m in history if any(getattr(p.root, "data", None) == {"decision_type": "reject"}
                                           for p in m.parts)]  # fmt: skip
    assert len(rejection) == 1 and rejection[0].task_id == tasks[-2].id and rejection[0].role.value == "user"
    assert tasks[-2].status.state.value == "completed"
    assert [getattr(p.root, "text", None) for p in rejection[0].parts] == [None, "Rejected"]
    # the runtime told the model the call was refused, without running it, and went on
    resumed = adk.model.model.requests_for(q[1])[-1]["messages"]
    assert shape(resumed[-2:-1]) == [("assistant", f'calls delete_pod({{"name": "web-{t}"}})')]
    assert resumed[-1] == {
        "role": "tool", "tool_call_id": resumed[-2]["tool_calls"][0]["id"], "content": "Tool call was rejected by user."
    }  # fmt: skip
    later = adk.model.model.requests_for(q[2])[-1]["messages"]
    assert later[: len(resumed)] == resumed and later[-1] == {"role": "user", "content": q[2]}


async def test_a_fork_into_a_share_visitors_account_is_continued_as_theirs(
    adk: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    owner, visitor, t = new_user(), new_user(), tag()
    q = [f"S1 {t}: status?", f"S2 {t}: pods?", f"S3 {t}: logs?"]
    source = await conversation(adk, http, owner, q)
    listed = await turns(adk, http, source, owner)
    async with pool.acquire() as conn:
        token = await create_share(conn, session_id=source, owner=owner, read_only=True)

    forked = await fork(adk, http, source, visitor, listed[2]["invocation_id"], headers={"X-Share-Token": token})
    question = f"S4 {t}: my own follow-up"
    task = await chat(adk, http, visitor, forked, question)
    assert task["status"]["state"] == "completed", adk.process.log_tail()

    # the runtime loaded and wrote the fork as the visitor's session, and its model saw the owner's kept turns
    seen = adk.controller.controller.calls.seen
    assert ("GET", f"/api/sessions/{forked}", visitor) in seen
    assert {user for _, path, user in seen if forked in path} == {visitor}
    sent = adk.model.model.requests_for(question)[0]["messages"]
    assert sent == [*before_question(adk, q[2]), {"role": "user", "content": question}]
    assert said(await adk_events(pool, forked, visitor))[-2:] == [
        ("user", question), ("adk_agent", f"Answer to: {question}")
    ]  # fmt: skip
    async with pool.acquire() as conn:
        assert await kagent_reads.list_events_for_session_asc(conn, forked, owner) == []
        tasks = await kagent_reads.load_session_tasks(conn, forked, visitor, line="0.10.x")
        assert await kagent_reads.get_task(conn, task["id"], owner) is None
    assert tasks[-1].id == task["id"]


async def pending_approval(rt: Runtime, http: httpx.AsyncClient, user: str, t: str) -> tuple[str, list[str], str]:
    """A session whose turn 2 asks to approve delete_pod(web-<t>) and is left waiting while the user chats on
    (turn 3). The turns' requests carry Authorization "Bearer before-<t>", then "Bearer later-<t>", which
    the runtime keeps in the session state (a state_delta of the event that opens each turn) and passes to
    the tool server (allowed_headers). Returns (session, questions, the waiting task's id)."""
    q = [f"P1 {t}: hello", f"P2 {t}: delete pod web-{t}", f"P3 {t}: meanwhile, list pods"]
    rt.model.model.on(q[1], call("delete_pod", name=f"web-{t}"), say(f"Deleted web-{t}."))
    session = await new_session(http, rt.controller.url, user, AGENT_REF, "approval")
    before, later = {"Authorization": f"Bearer before-{t}"}, {"Authorization": f"Bearer later-{t}"}
    assert (await chat(rt, http, user, session, q[0], headers=before))["status"]["state"] == "completed"
    waiting = await chat(rt, http, user, session, q[1], headers=before)
    assert waiting["status"]["state"] == "input-required", rt.process.log_tail()
    assert (await chat(rt, http, user, session, q[2], headers=later))["status"]["state"] == "completed"
    assert all(c.args.get("name") != f"web-{t}" for c in rt.tools.calls.of("delete_pod"))  # nothing approved yet
    return session, q, waiting["id"]


async def test_an_approval_answered_in_a_fork_resumes_the_call_the_source_asked_for(
    adk: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    user, t = new_user(), tag()
    source, q, _ = await pending_approval(adk, http, user, t)
    forked = await fork(adk, http, source, user, None)
    listed = await turns(adk, http, forked, user)
    assert [x["user_text"] for x in listed] == q and listed[1]["state"] == "canceled"  # the copy of the waiting task

    # the approval, sent in the fork: the runtime finds the pending request in the fork's events and runs the
    # call the source's model asked for (its id and arguments), then gives the model its result
    answer = await send(http, adk.controller.a2a_url, AGENT_REF, user=user,
                        context_id=forked, parts=approval())  # fmt: skip
    assert answer["status"]["state"] == "completed", adk.process.log_tail()
    deleted = [c for c in adk.tools.calls.of("delete_pod") if c.args == {"name": f"web-{t}"}]
    assert len(deleted) == 1
    asked = adk.model.model.requests_for(q[1])
    source_call = asked[0]["messages"] + [asked[1]["messages"][len(asked[0]["messages"])]]
    resumed = asked[-1]["messages"]
    assert shape(resumed[-2:]) == [
        ("assistant", f'calls delete_pod({{"name": "web-{t}"}})'),
        ("tool", f"pod web-{t} deleted"),
    ]
    assert resumed[-2] == source_call[-1] and resumed[-1]["tool_call_id"] == source_call[-1]["tool_calls"][0]["id"]
    assert said(await adk_events(pool, forked, user))[-1] == ("adk_agent", f"Deleted web-{t}.")
    async with pool.acquire() as conn:
        tasks = await kagent_reads.load_session_tasks(conn, forked, user, line="0.10.x")
    assert tasks[-1].id == answer["id"] and tasks[-1].status.state.value == "completed"
    # nothing ran in the source: its request still waits there
    async with pool.acquire() as conn:
        assert (await kagent_reads.get_task(conn, listed[1]["task_id"], user)) is not None


async def test_state_set_in_hidden_turns_is_not_in_the_state_the_runtime_builds(
    adk: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    user, t = new_user(), tag()
    session, q, waiting = await pending_approval(adk, http, user, t)
    listed = await turns(adk, http, session, user)
    await api(adk, http, "POST", f"/api/sessions/{session}/rewind", user,
              json={"rewind_before_invocation_id": listed[2]["invocation_id"]})  # fmt: skip

    # the approval of the waiting task, as kagent's UI sends it: no header_update event is written for it, so
    # the tool gets the headers of the session state the runtime rebuilt from the visible events
    answer = await send(http, adk.controller.a2a_url, AGENT_REF, user=user,
                        context_id=session, parts=approval(), task_id=waiting)  # fmt: skip
    assert answer["status"]["state"] == "completed", adk.process.log_tail()
    resumed = adk.model.model.requests_for(q[1])[-1]["messages"]
    assert q[2] not in json.dumps(resumed)
    deleted = [c for c in adk.tools.calls.of("delete_pod") if c.args == {"name": f"web-{t}"}]
    assert [c.headers.get("authorization") for c in deleted] == [f"Bearer before-{t}"]


def test_a_runtime_without_pinned_requirements_is_named_and_not_made() -> None:
    with pytest.raises(RuntimeUnavailable, match=r"no-such-runtime is missing and no .*\.txt pins"):
        runtime_venv("no-such-runtime")


async def test_a_kagent_adk_agent_judges_an_experiment_blind_and_the_verdict_lands(
    adk: Runtime, adk_b: str, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    """Issue 35: kagent-adk 0.10.4 as the judge (the other agent, its scripted model answering the verdict JSON):
    the model's request holds the blind pair, both orders are asked, and the verdict lands in the experiment."""
    from service.agents.replay import blind

    user, t = new_user(), tag()
    q = [f"J1 {t}: which cluster?", f"J2 {t}: count pods", f"J3 {t}: the oldest?"]
    source = await conversation(adk, http, user, q)
    listed = await turns(adk, http, source, user)
    edited = f"J2 {t}, asked again: how many pods run?"
    # The judge's model prefers the branch (the continuation asked the edited question) whichever side it is on.
    adk.model.model.on(
        f"{blind.CONTINUATION_A}\n[Turn 1]\nUser: {edited}", say('Compared.\n{"winner": "A", "reason": "asked better"}')
    )
    adk.model.model.on(
        f"{blind.CONTINUATION_B}\n[Turn 1]\nUser: {edited}", say('{"winner": "B", "reason": "asked better"}')
    )
    seen_before = len(adk.model.model.requests)
    started = await api(
        adk, http, "POST", f"/api/sessions/{source}/experiments", user,
        json={"tools": "live", "rewind_before_invocation_id": listed[1]["invocation_id"], "agents": [AGENT_REF],
              "turns": "all", "message": {"text": edited},
              "judge": {"agent": adk_b, "criteria": "Prefer exact counts."}},
    )  # fmt: skip
    assert started["experiment"]["judgment"]["judge_card"] is not None
    deadline = time.monotonic() + 180
    while (done := await api(adk, http, "GET", f"/api/experiments/{started['experiment']['id']}", user))["status"] in (
        "running",
        "judging",
    ):
        assert time.monotonic() < deadline, done
        await asyncio.sleep(0.2)
    judgment = done["judgment"]
    assert judgment["status"] == "completed", (judgment, adk.process.log_tail())
    [pair] = judgment["pairs"]
    assert (pair["left_job_id"], pair["outcome"], pair["consistent"]) == (None, "right", True), pair
    assert [s["winner"] for s in pair["said"]] == ["B", "A"] and pair["said"][1]["answer"].startswith("Compared.")
    assert judgment["lines"][0].startswith(f"{AGENT_REF}: inconclusive against the source over 1 judged continuations")

    # what the judge's model was sent: the blind pair, in both orders, each in a conversation of its own
    judged = [r for r in adk.model.model.requests[seen_before:] if INSTRUCTION_B in system_of(r)]
    assert len(judged) == 2, [shape(r["messages"]) for r in judged]
    branch = done["branches"][0]
    sides = []
    for request in judged:
        asked = turn_of(request)
        assert [m["role"] for m in request["messages"]] == ["system", "user"]  # nothing of the other order
        assert asked.index(blind.CONVERSATION) < asked.index(blind.CONTINUATION_A) < asked.index(blind.CONTINUATION_B)
        assert f"User: {q[0]}" in asked.split(blind.CONTINUATION_A)[0] and "Prefer exact counts." in asked
        a, b = (asked.split(blind.CONTINUATION_A)[1].split(blind.CONTINUATION_B)[0],
                asked.split(blind.CONTINUATION_B)[1].split(blind.ANSWER)[0])  # fmt: skip
        sides.append((f"User: {edited}" in a, f"User: {edited}" in b, f"User: {q[1]}" in a, f"User: {q[1]}" in b))
        for name in (AGENT_REF, adk_b, "adk_agent", source, branch["session_id"], listed[1]["invocation_id"]):
            assert name not in asked, name
    assert sorted(sides) == [(False, True, True, False), (True, False, False, True)]  # A and B swapped


async def test_a_suite_run_is_written_by_the_runtime_under_the_runs_own_user_and_kept_into_the_creators(
    adk: Runtime, adk_b: str, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    """Issue 49: a suite run's branch, continued by kagent-adk 0.10.4 through kagent's A2A path as the run's own
    user, is written by the runtime under that user (every controller call it made names it), its judge's
    sessions too; the creator's chat list (kagent's, per user) gains nothing until one branch is kept, which
    forks it into the creator's chats, readable with kagent's readers as theirs."""
    from service.agents.replay import blind

    user, t = new_user(), tag()
    q = [f"S1 {t}: which cluster?", f"S2 {t}: count pods"]
    source = await conversation(adk, http, user, q)
    listed = await turns(adk, http, source, user)
    adk.model.model.on(f"{blind.CONTINUATION_A}\n[Turn 1]\nUser: {q[1]}", say('{"winner": "tie", "reason": "same"}'))
    case = {"session_id": source, "rewind_before_invocation_id": listed[1]["invocation_id"]}
    suite = await api(adk, http, "POST", "/api/suites", user, json={"name": f"runtime {t}", "cases": [case]})
    chats_before = {r["id"] for r in await pool.fetch("SELECT id FROM session WHERE user_id = $1", user)}
    run = await api(
        adk, http, "POST", f"/api/suites/{suite['id']}/runs", user,
        json={"agents": [AGENT_REF], "judge": {"agent": adk_b}, "tools": "live"},
    )  # fmt: skip
    deadline = time.monotonic() + 180
    path = f"/api/suites/{suite['id']}/runs/{run['id']}"
    while (done := await api(adk, http, "GET", path, user))["status"] in ("running", "judging"):
        assert time.monotonic() < deadline, (done, adk.process.log_tail())
        await asyncio.sleep(0.3)
    assert done["status"] == "completed", (done, adk.process.log_tail())
    [agent] = done["verdict"]["by_agent"]
    assert (agent["agent_ref"], agent["cases"], agent["ties"]) == (AGENT_REF, 1, 1), agent

    run_user = f"{user}/suite-run/{run['id']}"
    experiment = done["cases"][0]["experiment_ids"][0]
    branch = await pool.fetchval("SELECT session_id FROM kagent_fork.whatif_job WHERE experiment_id = $1", experiment)
    assert said(await adk_events(pool, branch, run_user))[-2:] == [("user", q[1]), ("adk_agent", f"Answer to: {q[1]}")]
    assert {u for _, p, u in adk.controller.controller.calls.seen if branch in p} == {run_user}
    assert {r["id"] for r in await pool.fetch("SELECT id FROM session WHERE user_id = $1", user)} == chats_before

    kept = await api(adk, http, "POST", f"{path}/keep", user, json={"session_id": branch})
    assert await pool.fetchval("SELECT user_id FROM session WHERE id = $1", kept["id"]) == user
    assert said(await adk_events(pool, kept["id"], user)) == said(await adk_events(pool, branch, run_user))
