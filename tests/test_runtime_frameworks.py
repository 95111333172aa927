"""kagent's BYO runtimes continue forks, rewinds and what-ifs made by turn (A2A task), 0.10.x line.

kagent-langgraph 0.10.4 (a LangGraph graph with one tool and one tool behind an approval, checkpointed by
kagent's KAgentCheckpointer) and kagent-openai 0.10.4 (an OpenAI Agents SDK agent with one tool) run as their
own processes from their own virtual environments (tests/support/runtimes.py, runtime_agents/), against the
controller stand-in (tests/support/kagent_controller.py, which stores their checkpoints and events in
kagent's tables of a database of the 0.10.x line) and the scripted model. Every conversation is made by
talking to the runtime through the stand-in's A2A path; the service is then asked, as the API contract says,
with `rewind_before_task_id` (these runtimes write no invocation id), and the tests assert what the model
was sent when the runtime continued.

The expected requests are the source's own: a fork before turn 3 continued with a question must send the
model exactly what the source sent it for turn 3, with the new question in place of turn 3's. (kagent-openai
0.10.4 reads its history newest first, an upstream bug: the fork reproduces what the source's agent saw.)
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest

from service.config import Settings
from tests.helpers import new_user
from tests.support.kagent_chat import approval, new_session, send, text
from tests.support.kagent_controller import register_agent
from tests.support.kagent_line import Line, running_line
from tests.support.runtimes import RunningRuntime, byo_agent, running_runtime
from tests.support.scripted_model import call, message_text, say

FRAMEWORKS = {
    # framework as the service names it: (runtime, agent source in runtime_agents/, agent ref)
    "langgraph": ("kagent-langgraph", "langgraph_agent.py", "kagent/langgraph-agent"),
    "openai-agents": ("kagent-openai", "openai_agent.py", "kagent/openai-agent"),
}
RUNTIME_USER = "admin@kagent.dev"  # both runtimes write their own rows under kagent's default user


@dataclass(frozen=True)
class Agent:
    framework: str
    ref: str
    process: RunningRuntime
    line: Line

    @property
    def model(self) -> Any:
        return self.line.model.model


@pytest.fixture(scope="session")
async def line(server_url: str, settings: Settings) -> AsyncIterator[Line]:
    async with running_line(server_url, settings) as started:
        yield started


@pytest.fixture(scope="session")
async def agents(line: Line) -> AsyncIterator[dict[str, Agent]]:
    """Both runtimes, started once for the test session (side by side), as kagent starts a BYO agent."""
    specs = {}
    for framework, (runtime, source, ref) in FRAMEWORKS.items():
        async with line.pool.acquire() as conn:
            await register_agent(conn, ref, {"type": "BYO"})
        specs[framework] = byo_agent(runtime, source, ref, kagent_url=line.controller.url, model_url=line.model.url)
    with ExitStack() as stack:
        processes = await asyncio.gather(
            *(asyncio.to_thread(stack.enter_context, running_runtime(spec)) for spec in specs.values())
        )
        started = {}
        for (framework, (_, _, ref)), process in zip(FRAMEWORKS.items(), processes, strict=True):
            line.controller.register(ref, process.url)
            started[framework] = Agent(framework, ref, process, line)
            print(f"{framework} answered after {process.started_in:.1f} s")
        yield started


@pytest.fixture(params=list(FRAMEWORKS))
def agent(request: pytest.FixtureRequest, agents: dict[str, Agent]) -> Agent:
    return agents[request.param]


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=120) as client:
        yield client


def tag() -> str:
    return secrets.token_hex(3)


async def chat(a: Agent, http: httpx.AsyncClient, user: str, session: str, parts: Any, **kw: Any) -> dict[str, Any]:
    """One turn through kagent's A2A path (the stand-in); returns the runtime's task."""
    if isinstance(parts, str):
        parts = [text(parts)]
    return await send(http, a.line.controller.a2a_url, a.ref, user=user, context_id=session, parts=parts, **kw)


async def conversation(a: Agent, http: httpx.AsyncClient, user: str, questions: list[str]) -> tuple[str, list[str]]:
    """A session with one completed turn per question (the first calls `lookup`); returns it and the
    turns' task ids."""
    a.model.on(questions[0], call("lookup", query="web-1"), say("web-1 is Running."))
    session = await new_session(http, a.line.controller.url, user, a.ref, questions[0][:40])
    tasks = []
    for question in questions:
        task = await chat(a, http, user, session, question)
        assert task["status"]["state"] == "completed", (question, task["status"], a.process.log_tail())
        tasks.append(task["id"])
    return session, tasks


async def api(a: Agent, http: httpx.AsyncClient, method: str, path: str, user: str, **kw: Any) -> Any:
    r = await http.request(method, f"{a.line.service}{path}", headers={"X-User-Id": user}, **kw)
    assert r.status_code < 300, r.text
    return r.json()["data"]


def asked(a: Agent, question: str) -> list[list[dict[str, Any]]]:
    """The messages of every model call made while running the turn of `question`."""
    return [r["messages"] for r in a.model.requests_for(question)]


def instead(messages: list[dict[str, Any]], question: str) -> list[dict[str, Any]]:
    """A turn's first request with its question (the last message) replaced by another."""
    assert messages[-1]["role"] == "user"
    return [*messages[:-1], {**messages[-1], "content": question}]


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [message_text(m) for m in messages if m["role"] == "user"]


async def checkpoints(pool: asyncpg.Pool, thread: str) -> list[dict[str, Any]]:
    """The thread's live checkpoints, oldest first, with their metadata decoded."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT checkpoint_id, parent_checkpoint_id, metadata FROM lg_checkpoint WHERE user_id = $1"
            " AND thread_id = $2 AND deleted_at IS NULL ORDER BY checkpoint_id",
            RUNTIME_USER,
            thread,
        )
    return [{**dict(r), "metadata": json.loads(base64.b64decode(r["metadata"]))} for r in rows]


async def fork(a: Agent, http: httpx.AsyncClient, session: str, user: str, before_task: str | None) -> dict[str, Any]:
    body = {"rewind_before_task_id": before_task, "if_boundary_missing": "error"} if before_task else {}
    data: dict[str, Any] = await api(a, http, "POST", f"/api/sessions/{session}/fork", user, json=body)
    return data


async def test_the_turn_listing_names_each_turn_by_its_task_and_the_framework(
    agent: Agent, http: httpx.AsyncClient
) -> None:
    user, t = new_user(), tag()
    q = [f"L1 {t}: status of web-1?", f"L2 {t}: replicas?", f"L3 {t}: thanks"]
    session, tasks = await conversation(agent, http, user, q)
    listing = await api(agent, http, "GET", f"/api/sessions/{session}/invocations", user)
    listed = listing["invocations"] if isinstance(listing, dict) else listing
    assert [x["task_id"] for x in listed] == tasks
    assert {x["invocation_id"] for x in listed} == {None}  # neither runtime writes an invocation id
    assert {x["framework"] for x in listed} == {agent.framework}


async def test_the_transcript_shows_the_three_questions_and_answers(agent: Agent, http: httpx.AsyncClient) -> None:
    """kagent-openai's conversation_items events (under kagent's default user) and kagent-langgraph's tasks read
    as the transcript's turns, each with its task."""
    user, t = new_user(), tag()
    q = [f"T1 {t}: status of web-1?", f"T2 {t}: replicas?", f"T3 {t}: thanks"]
    session, tasks = await conversation(agent, http, user, q)
    shown = await api(agent, http, "GET", f"/api/sessions/{session}/transcript", user)
    turns = shown["turns"]
    assert [(x["task_id"], x["state"]) for x in turns] == [(task, "completed") for task in tasks], shown
    said = [[(m["role"], m["kind"], m.get("text") or m.get("tool_name")) for m in x["messages"]] for x in turns]
    assert said[0] == [
        ("user", "text", q[0]),
        ("agent", "tool_call", "lookup"),
        ("agent", "tool_result", "lookup"),
        ("agent", "text", "web-1 is Running."),
    ]
    for messages, question in zip(said[1:], q[1:], strict=True):
        assert messages == [("user", "text", question), ("agent", "text", f"Answer to: {question}")]
    if agent.framework == "openai-agents":
        assert shown["warnings"] == []
    else:
        assert len(shown["warnings"]) == 1 and "A2A tasks" in shown["warnings"][0]


async def test_a_fork_before_turn_3_sends_the_model_turns_1_and_2_and_the_question(
    agent: Agent, http: httpx.AsyncClient
) -> None:
    user, t = new_user(), tag()
    q = [f"F1 {t}: status of web-1?", f"F2 {t}: replicas?", f"F3 {t}: thanks"]
    source, tasks = await conversation(agent, http, user, q)
    forked = await fork(agent, http, source, user, tasks[2])
    assert forked.get("framework", agent.framework) == agent.framework
    question = f"F4 {t}: instead, scale web to 3"
    answer = await chat(agent, http, user, forked["id"], question)
    assert answer["status"]["state"] == "completed" and answer["contextId"] == forked["id"], agent.process.log_tail()

    # exactly what the source's turn 3 was sent (turns 1-2, tool call and result included), with the new question
    sent = asked(agent, question)
    assert sent[0] == instead(asked(agent, q[2])[0], question)
    assert q[2] not in json.dumps(sent) and sorted(user_texts(sent[0])) == sorted([q[0], q[1], question])
    if agent.framework == "langgraph":
        # the fork's thread holds the kept checkpoints and the new turn's; the source's thread did not move
        fork_thread = await checkpoints(agent.line.pool, forked["id"])
        source_thread = await checkpoints(agent.line.pool, source)
        turn3 = next(c for c in source_thread if c["metadata"]["a2a_task_id"] == tasks[2])
        kept = source_thread[: source_thread.index(turn3)]
        assert [c["checkpoint_id"] for c in fork_thread[: len(kept)]] == [c["checkpoint_id"] for c in kept]
        assert fork_thread[len(kept)]["metadata"]["a2a_task_id"] == answer["id"]
        assert source_thread[-1]["metadata"]["a2a_task_id"] == tasks[2]


async def test_a_rewind_before_turn_2_leaves_only_turn_1_and_an_undo_brings_the_rest_back(
    agent: Agent, http: httpx.AsyncClient
) -> None:
    user, t = new_user(), tag()
    q = [f"R1 {t}: status of web-1?", f"R2 {t}: replicas?", f"R3 {t}: thanks"]
    session, tasks = await conversation(agent, http, user, q)
    body = {"rewind_before_task_id": tasks[1]}

    # rewind, then undo before anything new: the next question comes after all three turns
    first = await api(agent, http, "POST", f"/api/sessions/{session}/rewind", user, json=body)
    await api(agent, http, "POST", f"/api/sessions/{session}/rewinds/{first['rewind']['id']}/undo", user, json={})
    after_undo = f"R4 {t}: what did we do?"
    assert (await chat(agent, http, user, session, after_undo))["status"]["state"] == "completed"
    assert sorted(user_texts(asked(agent, after_undo)[0])) == sorted([*q, after_undo])

    # rewind before turn 2 again (turns 2 to 4 hidden) and ask: the model gets turn 1 and the question only,
    # as the source's turn 2 was sent
    await api(agent, http, "POST", f"/api/sessions/{session}/rewind", user, json=body)
    after_rewind = f"R5 {t}: start over from the status"
    assert (await chat(agent, http, user, session, after_rewind))["status"]["state"] == "completed"
    sent = asked(agent, after_rewind)[0]
    assert sent == instead(asked(agent, q[1])[0], after_rewind)
    assert not any(x in json.dumps(sent) for x in (q[1], q[2], after_undo))


async def job_done(a: Agent, http: httpx.AsyncClient, job_id: str, user: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        job: dict[str, Any] = await api(a, http, "GET", f"/api/whatif/{job_id}", user)
        if job["status"] != "running":
            return job
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.2)


async def test_a_whatif_into_turn_3_is_answered_from_turns_1_and_2(agent: Agent, http: httpx.AsyncClient) -> None:
    user, t = new_user(), tag()
    q = [f"W1 {t}: status of web-1?", f"W2 {t}: replicas?", f"W3 {t}: which is oldest?"]
    source, tasks = await conversation(agent, http, user, q)
    started = await api(
        agent, http, "POST", f"/api/sessions/{source}/whatif", user,
        json={"tools": "live", "rewind_before_task_id": tasks[2], "agent_ref": agent.ref},
    )  # fmt: skip
    job = await job_done(agent, http, started["job"]["id"], user)
    assert job["status"] == "completed", (job, agent.process.log_tail())
    assert job["result"]["last_agent_text"] == f"Answer to: {q[2]}"
    # the re-asked turn 3 was sent exactly what the source's turn 3 was
    sent = asked(agent, q[2])
    assert len(sent) == 2 and sent[1] == sent[0]


def replayed(a: Agent, since: int, questions: list[str]) -> list[list[dict[str, Any]]]:
    """The messages of the model requests made since `since` for the turns of `questions`, in order."""
    return [r["messages"] for r in a.model.requests[since:] if any(q in json.dumps(r["messages"]) for q in questions)]


def without_echo(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request without the copies of its own question among its history: kagent-openai 0.10.4 writes a turn's
    input item and reads its session's items at once, so the history it reads sometimes holds the question
    already (seen in the source's turns and in a fork's alike: the runtime's race, not the rows)."""
    question = messages[-1]
    return [m for m in messages[:-1] if not (m["role"] == "user" and m == question)] + [question]


async def test_a_whatif_of_every_turn_from_turn_2_sends_the_model_turn_1_then_each_question(
    agent: Agent, http: httpx.AsyncClient
) -> None:
    """`turns: "all"` from a turn named by its task: turn 2 re-asked after exactly turn 1, then turn 3 after
    turns 1 and 2 as the fork now holds them, the requests the source's own turns 2 and 3 made."""
    user, t = new_user(), tag()
    q = [f"M1 {t}: status of web-1?", f"M2 {t}: replicas?", f"M3 {t}: which is oldest?"]
    source, tasks = await conversation(agent, http, user, q)
    since = len(agent.model.requests)
    started = await api(
        agent, http, "POST", f"/api/sessions/{source}/whatif", user,
        json={"tools": "live", "rewind_before_task_id": tasks[1], "agent_ref": agent.ref, "turns": "all"},
    )  # fmt: skip
    assert (started["job"]["turns_total"], started["job"]["rewind_before_task_id"]) == (2, tasks[1])
    job = await job_done(agent, http, started["job"]["id"], user)
    assert job["status"] == "completed", (job, agent.process.log_tail())
    assert job["turns_done"] == 2 and job["result"]["last_agent_text"] == f"Answer to: {q[2]}"

    replay = replayed(agent, since, q)
    # one model request per re-asked turn: turn 2's question after turn 1 (its tool call and result included),
    # then turn 3's after turns 1-2, exactly as the source's turns 2 and 3 were sent
    assert len(replay) == 2, [user_texts(m) for m in replay]
    assert [without_echo(m) for m in replay] == [without_echo(asked(agent, x)[0]) for x in q[1:]]
    assert sorted(user_texts(replay[0])) == sorted(q[:2]) and sorted(user_texts(replay[1])) == sorted(q)
    assert any(m.get("tool_calls") for m in replay[0])  # turn 1's lookup, as the source holds it


async def test_an_experiment_on_the_openai_runtime_from_a_turn_named_by_its_task(
    agents: dict[str, Agent], http: httpx.AsyncClient
) -> None:
    """One agent, two repeats (a second runtime process costs a start of its own): each branch re-asks turns 2
    and 3 in its own fork, the model gets what the source's turns got, and the grid's source column reads the
    source's answers from its tasks."""
    a, user, t = agents["openai-agents"], new_user(), tag()
    q = [f"X1 {t}: status of web-1?", f"X2 {t}: replicas?", f"X3 {t}: which is oldest?"]
    source, tasks = await conversation(a, http, user, q)
    since = len(a.model.requests)
    started = await api(
        a, http, "POST", f"/api/sessions/{source}/experiments", user,
        json={"tools": "live", "rewind_before_task_id": tasks[1], "agents": [a.ref], "turns": "all", "repeats": 2},
    )  # fmt: skip
    experiment = started["experiment"]
    assert (experiment["rewind_before_task_id"], experiment["rewind_before_invocation_id"]) == (tasks[1], None)
    deadline = time.monotonic() + 180
    while experiment["status"] == "running":
        assert time.monotonic() < deadline, experiment
        await asyncio.sleep(0.3)
        experiment = await api(a, http, "GET", f"/api/experiments/{experiment['id']}", user)
    assert experiment["status"] == "completed", (experiment, a.process.log_tail())

    answers = [f"Answer to: {x}" for x in q[1:]]
    assert [x["question"] for x in experiment["source"]["turns"]] == q[1:]
    assert [x["answer"] for x in experiment["source"]["turns"]] == answers
    assert len(experiment["branches"]) == 2 and experiment["by_agent"][0]["totals"]["turns"]["mean"] == 2
    for branch in experiment["branches"]:
        assert branch["status"] == "completed" and branch["stopped_at"] is None, branch
        assert [x["question"] for x in branch["turns"]] == q[1:]
        assert [x["answer"] for x in branch["turns"]] == answers
        assert [x["state"] for x in branch["turns"]] == ["completed", "completed"]
    # every branch's model requests are the source's turns 2 and 3's (the branches ran side by side)
    replay = replayed(a, since, q)
    source_requests = [without_echo(asked(a, x)[0]) for x in q[1:]]
    assert sorted(json.dumps(without_echo(m)) for m in replay) == sorted(map(json.dumps, source_requests * 2))


async def test_a_whatif_result_counts_the_tool_calls_of_the_re_asked_turn(
    agent: Agent, http: httpx.AsyncClient
) -> None:
    """The what-if's result reads the fork where the agent wrote it: kagent-openai's events under kagent's
    default user, kagent-langgraph's tasks."""
    user, t = new_user(), tag()
    q = [f"R1 {t}: status of web-1?", f"R2 {t}: replicas?"]
    source, tasks = await conversation(agent, http, user, q)
    started = await api(
        agent, http, "POST", f"/api/sessions/{source}/whatif", user,
        json={"tools": "live", "rewind_before_task_id": tasks[0], "agent_ref": agent.ref},
    )  # fmt: skip
    job = await job_done(agent, http, started["job"]["id"], user)
    assert job["status"] == "completed", (job, agent.process.log_tail())
    assert job["result"]["tool_calls"] == {"lookup": 1} and job["result"]["last_agent_text"] == "web-1 is Running."


async def test_a_langgraph_approval_answered_in_a_fork_resumes_the_forks_thread(
    agents: dict[str, Agent], http: httpx.AsyncClient
) -> None:
    """A fork of a chat whose last turn waits for an approval leaves that turn out (the contract: a fork never
    holds a non-terminal task); the question asked again in the fork interrupts the graph on the fork's
    thread, and the approval answered there resumes the fork's thread, never the source's."""
    a, user, t = agents["langgraph"], new_user(), tag()
    q = [f"A1 {t}: hello", f"A2 {t}: delete pod web-{t}"]
    a.model.on(q[1], call("delete_pod", name=f"web-{t}"), say(f"Deleted web-{t}."))
    source = await new_session(http, a.line.controller.url, user, a.ref, "approval")
    assert (await chat(a, http, user, source, q[0]))["status"]["state"] == "completed"
    waiting = await chat(a, http, user, source, q[1])
    assert waiting["status"]["state"] == "input-required", a.process.log_tail()
    source_before = await checkpoints(a.line.pool, source)

    forked = await fork(a, http, source, user, None)
    assert any("left out" in w or "running" in w for w in forked["fork"]["warnings"]), forked["fork"]["warnings"]
    listing = await api(a, http, "GET", f"/api/sessions/{forked['id']}/invocations", user)
    listed = listing["invocations"] if isinstance(listing, dict) else listing
    assert [x["user_text"] for x in listed] == [q[0]], listed  # the waiting turn is left out

    # asked again in the fork: the graph resumes from the fork's copied checkpoints and interrupts there
    again = await chat(a, http, user, forked["id"], q[1])
    assert again["status"]["state"] == "input-required", a.process.log_tail()
    assert user_texts(asked(a, q[1])[-1]) == [q[0], q[1]]  # turn 1 and the question, nothing else
    # the approval, as kagent's UI sends it for the fork's waiting task: delete_pod runs in the fork's graph
    answer = await chat(a, http, user, forked["id"], approval(), task_id=again["id"])
    assert answer["status"]["state"] == "completed", a.process.log_tail()
    resumed = asked(a, q[1])[-1]
    assert (resumed[-1]["role"], resumed[-1]["content"]) == ("tool", f"deleted pod web-{t}")
    assert resumed[-2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"name": f"web-{t}"})
    newest = (await checkpoints(a.line.pool, forked["id"]))[-1]["metadata"]
    assert (newest["a2a_task_id"], newest["a2a_context_id"], newest["resume"]) == (again["id"], forked["id"], True)
    # the source's thread and task are as they were: still waiting for their own approval
    assert await checkpoints(a.line.pool, source) == source_before
    async with a.line.pool.acquire() as conn:
        data = await conn.fetchval("SELECT data FROM task WHERE id = $1", waiting["id"])
    assert json.loads(data)["status"]["state"] == "input-required"


async def test_the_stand_in_answers_langgraph_checkpoints_as_kagents_handlers(
    line: Line, http: httpx.AsyncClient
) -> None:
    """What kagent-langgraph's checkpointer relies on, as handlers/checkpoints.go and langgraph.sql answer."""
    base, thread = f"{line.controller.url}/api/langgraph/checkpoints", f"thread-{tag()}"
    who = {"X-User-ID": "someone@example.com"}
    r = await http.post(base, json={"checkpoint": "x"}, headers=who)
    assert (r.status_code, r.json()) == (400, {"error": "thread_id is required"})
    r = await http.post(base, json={"thread_id": thread}, headers=who)
    assert (r.status_code, r.json()) == (400, {"error": "checkpoint is required"})
    for n, parent in ((1, None), (2, "cp-1")):
        body = {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": f"cp-{n}", "parent_checkpoint_id": parent,
                "checkpoint": f"b{n}", "metadata": "bQ==", "type_": "msgpack", "version": 4}  # fmt: skip
        r = await http.post(base, json=body, headers=who)
        assert (r.status_code, r.json()["data"]) == (201, {})
    writes = [{"idx": 1, "channel": "branch:to:agent", "type_": "null", "value": ""},
              {"idx": 0, "channel": "messages", "type_": "msgpack", "value": "dw=="}]  # fmt: skip
    body = {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": "cp-2", "task_id": "t-1", "writes": writes}
    assert (await http.post(f"{base}/writes", json=body, headers=who)).status_code == 201

    newest = (await http.get(base, params={"thread_id": thread, "checkpoint_ns": "", "limit": "1"}, headers=who)).json()
    assert [c["checkpoint_id"] for c in newest["data"]] == ["cp-2"]
    assert newest["data"][0]["parent_checkpoint_id"] == "cp-1" and newest["data"][0]["type_"] == "msgpack"
    assert newest["data"][0]["writes"]["task_id"] == "t-1"
    assert [w["idx"] for w in newest["data"][0]["writes"]["writes"]] == [0, 1]
    every = (await http.get(base, params={"thread_id": thread, "limit": "-1"}, headers=who)).json()["data"]
    assert [(c["checkpoint_id"], c["writes"]["writes"]) for c in every][1] == ("cp-1", [])
    # another user (kagent's default, without the header) sees nothing of this user's thread
    assert (await http.get(base, params={"thread_id": thread})).json()["data"] == []
    r = await http.get(base, params={"thread_id": thread, "checkpoint_id": "cp-9"}, headers=who)
    assert r.status_code == 500
    assert (await http.get(base, headers=who)).status_code == 400
    assert (await http.delete(f"{base}/{thread}", headers=who)).status_code == 200
    assert (await http.get(base, params={"thread_id": thread}, headers=who)).json()["data"] == []
    async with line.pool.acquire() as conn:
        hidden = await conn.fetchval(
            "SELECT count(*) FROM lg_checkpoint WHERE thread_id = $1 AND deleted_at IS NOT NULL", thread
        )
    assert hidden == 2  # a soft delete, as kagent's
