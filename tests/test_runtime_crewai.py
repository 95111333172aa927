"""kagent-crewai 0.10.4 (crewai 1.6.1) runs here, and forks of its chats follow the CrewAI rules (docs/frameworks.md).

The crew (tests/support/runtime_agents/crewai_agent.py, kagent's research-crew sample with `memory=True`) and the
flow (crewai_flow_agent.py, as kagent's poem_flow sample: a state under `@persist`) run, each as its own process
from .venv-kagent-crewai, against the controller stand-in (which answers /api/crewai as handlers/crewai.go does,
on kagent's tables of a database of the 0.10.x line) and the scripted model, which also answers crewai's task
evaluation (what its long-term memory keeps) and its embeddings. Each test talks to an agent through the
stand-in's A2A path, asks the service for a fork as the API contract says, and asserts what the model was sent
when the agent answered in the fork.

What the runtime showed:
- as kagent ships it, the crew's memory never reaches kagent: kagent-crewai's executor gives its
  KagentMemoryStorage to the crew's public `long_term_memory` after the crew was built, and crewai 1.6.1's agents
  read the private `_long_term_memory` made then (a SQLite file in the pod, shared by every session of the
  pod); no /api/crewai call is made and kagent's crewai tables stay empty;
- a crew that re-validates on assignment (`memory_agent`, CREW_MEMORY_IN_KAGENT=1) does read kagent's
  memory: GET /api/crewai/memory under kagent's default user (the runtime forwards no user), thread = the
  session id; its save still fails (crewai calls `save(..., datetime=...)`, KagentMemoryStorage takes
  `timestamp`), so the memory row those tests need is written through the stand-in's endpoint, as that save
  would write it, at the moment a turn would have;
- a flow's state is restored, each turn, from a SQLite file in the pod under the session's id (`@persist`
  gives the flow its own persistence; the executor's `persistence` attribute is never read): no row either,
  and a fork (another id) starts the flow afresh, so it is refused unless `tasks_only`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import httpx
import pytest

from service.config import Settings
from tests.helpers import new_user, table_fingerprint
from tests.support.kagent_chat import new_session, send, text
from tests.support.kagent_controller import register_agent
from tests.support.kagent_line import Line, running_line
from tests.support.runtimes import RunningRuntime, byo_agent, running_runtime
from tests.support.scripted_model import message_text, say

RUNTIME_USER = "admin@kagent.dev"  # kagent-crewai forwards no user: its rows are kagent's default user's
EVALUATION = "Assess the quality of the task completed"  # crewai's TaskEvaluator, after each task
DESCRIPTION = "Answer the user's latest question."  # the crew's task (crewai_agent.py): its memory's key
IN_POD = "keeps no memory or flow state in kagent's database"


@dataclass(frozen=True)
class Crew:
    ref: str
    process: RunningRuntime
    line: Line

    @property
    def model(self) -> Any:
        return self.line.model.model


@pytest.fixture(scope="module")
async def line(server_url: str, settings: Settings) -> AsyncIterator[Line]:
    async with running_line(server_url, settings) as started:
        yield started


@pytest.fixture(scope="module")
async def crews(line: Line) -> AsyncIterator[dict[str, Crew]]:
    """The crew as kagent's sample writes it (`plain`), the one whose memory reaches kagent (`kagent`) and the
    flow (`flow`), started side by side as kagent starts a BYO agent."""
    refs = {"plain": "kagent/crewai-agent", "kagent": "kagent/crewai-memory-agent", "flow": "kagent/crewai-flow-agent"}
    specs = {}
    for kind, ref in refs.items():
        async with line.pool.acquire() as conn:
            await register_agent(conn, ref, {"type": "BYO"})
        source = "crewai_flow_agent.py" if kind == "flow" else "crewai_agent.py"
        spec = byo_agent("kagent-crewai", source, ref, kagent_url=line.controller.url, model_url=line.model.url)
        env = {**spec.env, "CREW_MEMORY_IN_KAGENT": "1" if kind == "kagent" else "0"}
        specs[kind] = dataclasses.replace(spec, env=env)
    with ExitStack() as stack:
        processes = await asyncio.gather(
            *(asyncio.to_thread(stack.enter_context, running_runtime(spec)) for spec in specs.values())
        )
        started = {}
        for (kind, ref), process in zip(refs.items(), processes, strict=True):
            line.controller.register(ref, process.url)
            started[kind] = Crew(ref, process, line)
        yield started


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=180) as client:
        yield client


@pytest.fixture
def evaluated(line: Line) -> Iterator[str]:
    """crewai's task evaluation answered with a suggestion of this test's own (what the memory keeps)."""
    suggestion = f"suggestion {secrets.token_hex(3)}"
    evaluation = {"suggestions": [suggestion], "quality": 8.0, "entities": []}
    line.model.model.on(EVALUATION, say(json.dumps(evaluation)))
    yield suggestion


async def chat(c: Crew, http: httpx.AsyncClient, user: str, session: str, question: str) -> dict[str, Any]:
    task = await send(http, c.line.controller.a2a_url, c.ref, user=user, context_id=session, parts=[text(question)])
    assert task["status"]["state"] == "completed", (question, task["status"], c.process.log_tail())
    return task


async def conversation(c: Crew, http: httpx.AsyncClient, user: str, questions: list[str]) -> tuple[str, list[str]]:
    session = await new_session(http, c.line.controller.url, user, c.ref, questions[0][:40])
    return session, [(await chat(c, http, user, session, q))["id"] for q in questions]


async def api(c: Crew, http: httpx.AsyncClient, method: str, path: str, user: str, **kw: Any) -> httpx.Response:
    return await http.request(method, f"{c.line.service}{path}", headers={"X-User-Id": user}, **kw)


def prompt(c: Crew, question: str) -> str:
    """The task prompt the crew sent the model for the turn of `question` (not the evaluation's)."""
    requests = [r for r in c.model.requests_for(question) if "response_format" not in r]
    assert len(requests) == 1, requests
    return message_text([m for m in requests[0]["messages"] if m["role"] == "user"][-1])


async def crewai_rows(pool: asyncpg.Pool, thread: str) -> list[tuple[Any, ...]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT user_id, created_at, updated_at, memory_data FROM crewai_agent_memory WHERE thread_id = $1",
            thread,
        )
        flows = await conn.fetchval("SELECT count(*) FROM crewai_flow_state WHERE thread_id = $1", thread)
    assert flows == 0
    return [tuple(r) for r in rows]


async def remember(c: Crew, http: httpx.AsyncClient, session: str, suggestion: str) -> None:
    """The memory row KagentMemoryStorage.save would write now (if crewai's call reached it): its payload, through
    the stand-in's POST /api/crewai/memory, under the user the runtime sends (kagent's default one)."""
    item = {
        "task_description": DESCRIPTION,
        "score": 8.0,
        "metadata": {"suggestions": [suggestion], "quality": 8.0, "agent": "kagent-fork test agent",
                     "expected_output": "A short answer to the question: ..."},
        "datetime": str(datetime.now().timestamp()),
    }  # fmt: skip
    payload = {"thread_id": session, "user_id": RUNTIME_USER, "memory_data": item}
    r = await http.post(f"{c.line.controller.url}/api/crewai/memory", json=payload, headers={"X-User-ID": RUNTIME_USER})
    assert r.status_code == 201, r.text


def tag() -> str:
    return secrets.token_hex(3)


async def test_as_kagent_ships_it_the_crews_memory_stays_in_its_pod_and_a_fork_says_so(
    crews: dict[str, Crew], http: httpx.AsyncClient, evaluated: str
) -> None:
    c, user, t = crews["plain"], new_user(), tag()
    q = [f"P1 {t}: status of web-1?", f"P2 {t}: replicas?", f"P3 {t}: thanks"]
    calls = len(c.line.controller.controller.calls.seen)
    source, tasks = await conversation(c, http, user, q)
    # turn 2 is sent turn 1's evaluation (crewai's long-term memory), read from the pod: kagent never asked
    assert f"Historical Data:\n- {evaluated}" in prompt(c, q[1])
    assert not any("/api/crewai" in path for _, path, _ in c.line.controller.controller.calls.seen[calls:])
    assert await crewai_rows(c.line.pool, source) == []

    r = await api(c, http, "GET", f"/api/sessions/{source}/invocations", user)
    assert [(x["task_id"], x["framework"]) for x in r.json()["data"]] == [(task, "crewai") for task in tasks]
    for body, kept in (({}, 3), ({"rewind_before_task_id": tasks[1]}, 1)):
        r = await api(c, http, "POST", f"/api/sessions/{source}/fork", user, json={**body, "task_layout": "per_task"})
        assert r.status_code == 201, r.text
        fork = r.json()["data"]
        assert (fork["fork"]["framework"], fork["fork"]["tasks_copied"]) == ("crewai", kept)
        assert any(IN_POD in w for w in fork["fork"]["warnings"]), fork["fork"]["warnings"]
    # asked in the (cut) fork, the crew is sent the question and what its pod remembers, no turn of the chat
    question = f"P4 {t}: and the pods of web?"
    assert (await chat(c, http, user, fork["id"], question))["contextId"] == fork["id"]
    sent = prompt(c, question)
    assert question in sent and f"- {evaluated}" in sent and not any(x in sent for x in q)
    # ... as any other chat of that pod is, whoever holds it
    other, elsewhere = new_user(), f"P5 {t}: status of db-0?"
    await conversation(c, http, other, [elsewhere])
    assert f"- {evaluated}" in prompt(c, elsewhere)


async def test_a_whole_fork_copies_the_memory_row_and_the_crew_reads_it_on_the_forks_thread(
    crews: dict[str, Crew], http: httpx.AsyncClient, evaluated: str
) -> None:
    c, user, t = crews["kagent"], new_user(), tag()
    q = [f"W1 {t}: status of web-1?", f"W2 {t}: replicas?", f"W3 {t}: thanks"]
    calls = len(c.line.controller.controller.calls.seen)
    source, _ = await conversation(c, http, user, q)
    # the crew looked its memory up in kagent (as kagent's default user), found none, and could not save any
    lookups = [u for m, path, u in c.line.controller.controller.calls.seen[calls:] if path == "/api/crewai/memory"]
    assert lookups == [RUNTIME_USER] * 3
    assert await crewai_rows(c.line.pool, source) == [] and "Historical Data" not in prompt(c, q[1])
    remembered = f"remembered in turn 3 {t}"
    await remember(c, http, source, remembered)  # as the save of turn 3 would have
    rows = await crewai_rows(c.line.pool, source)

    r = await api(c, http, "POST", f"/api/sessions/{source}/fork", user, json={"task_layout": "per_task"})
    assert r.status_code == 201, r.text
    fork = r.json()["data"]
    assert (fork["fork"]["framework"], fork["fork"]["tasks_copied"]) == ("crewai", 3)
    assert not any("CrewAI" in w for w in fork["fork"]["warnings"]), fork["fork"]["warnings"]
    assert await crewai_rows(c.line.pool, fork["id"]) == rows  # same user, data and times, on the fork's thread
    question = f"W4 {t}: what should I remember?"
    await chat(c, http, user, fork["id"], question)
    assert f"Historical Data:\n- {remembered}" in prompt(c, question)  # read from the fork's thread
    # a chat of its own (another thread) has no such memory
    alone = f"W5 {t}: anything to remember?"
    await conversation(c, http, new_user(), [alone])
    assert remembered not in prompt(c, alone)


async def test_a_cut_before_a_turn_the_memory_changed_from_is_refused_and_writes_nothing(
    crews: dict[str, Crew], http: httpx.AsyncClient, evaluated: str
) -> None:
    c, user, t = crews["kagent"], new_user(), tag()
    q = [f"C1 {t}: status of web-1?", f"C2 {t}: replicas?", f"C3 {t}: thanks"]
    source, tasks = await conversation(c, http, user, q[:2])
    await remember(c, http, source, f"remembered in turn 2 {t}")  # during turn 2 (after its task began)
    tasks.append((await chat(c, http, user, source, q[2]))["id"])
    before = await table_fingerprint(c.line.pool)
    for task in tasks[:2]:  # before turn 1 or 2: the memory changed in turn 2
        for path, body in [
            (f"/api/sessions/{source}/fork", {"rewind_before_task_id": task}),
            (f"/api/sessions/{source}/fork", {"rewind_before_task_id": task, "dry_run": True}),
            (f"/api/sessions/{source}/rewind", {"rewind_before_task_id": task}),
        ]:
            r = await api(c, http, "POST", path, user, json=body)
            assert r.status_code == 422, (path, body, r.text)
            assert "CrewAI" in r.json()["error"] and "changed at or after" in r.json()["error"]
    assert await table_fingerprint(c.line.pool) == before
    # before turn 3 it did not change since: the fork keeps it, shared as it is, and the crew reads it there
    r = await api(
        c,
        http,
        "POST",
        f"/api/sessions/{source}/fork",
        user,
        json={"rewind_before_task_id": tasks[2], "task_layout": "per_task"},
    )
    assert r.status_code == 201, r.text
    fork = r.json()["data"]
    assert fork["fork"]["tasks_copied"] == 2
    assert any("shared as they are" in w for w in fork["fork"]["warnings"]), fork["fork"]["warnings"]
    question = f"C4 {t}: what should I remember?"
    await chat(c, http, user, fork["id"], question)
    assert f"Historical Data:\n- remembered in turn 2 {t}" in prompt(c, question)


async def test_the_stand_in_answers_crewai_memory_and_flow_state_as_kagents_handlers(
    line: Line, http: httpx.AsyncClient
) -> None:
    """What kagent-crewai's KagentMemoryStorage and KagentFlowPersistence rely on, as handlers/crewai.go and
    crewai.sql answer it."""
    base, thread, who = f"{line.controller.url}/api/crewai", f"thread-{tag()}", {"X-User-ID": "someone@example.com"}
    r = await http.post(f"{base}/memory", json={"memory_data": {}}, headers=who)
    assert (r.status_code, r.json()) == (400, {"error": "thread_id is required"})
    for n in (1, 2):  # one row per user and thread, overwritten
        item = {"task_description": "Answer <it> & go", "score": 8.0 if n == 1 else 7.5, "metadata": {"n": n}}
        r = await http.post(f"{base}/memory", json={"thread_id": thread, "memory_data": item}, headers=who)
        assert (r.status_code, r.json()["data"]) == (201, {})
    async with line.pool.acquire() as conn:
        stored = await conn.fetch("SELECT user_id, memory_data FROM crewai_agent_memory WHERE thread_id = $1", thread)
    assert [tuple(s) for s in stored] == [
        (
            "someone@example.com",
            '{"metadata":{"n":2},"score":7.5,"task_description":"Answer \\u003cit\\u003e \\u0026 go"}',
        )
    ]
    found = await http.get(f"{base}/memory", params={"thread_id": thread, "q": "<it>", "limit": "2"}, headers=who)
    item = {"metadata": {"n": 2}, "score": 7.5, "task_description": "Answer <it> & go"}
    assert found.json()["data"] == [{"thread_id": thread, "user_id": "someone@example.com", "memory_data": item}]
    assert (await http.get(f"{base}/memory", params={"thread_id": thread, "q": "nothing"}, headers=who)).json()[
        "data"
    ] == []
    assert (await http.get(f"{base}/memory", params={"thread_id": thread, "q": "<it>"})).json()["data"] == []
    assert (await http.get(f"{base}/memory", params={"thread_id": thread}, headers=who)).status_code == 400
    assert (await http.delete(f"{base}/memory", params={"thread_id": thread}, headers=who)).status_code == 200
    async with line.pool.acquire() as conn:  # a hard delete, as kagent's
        assert await conn.fetchval("SELECT count(*) FROM crewai_agent_memory WHERE thread_id = $1", thread) == 0

    r = await http.post(f"{base}/flows/state", json={"thread_id": thread, "state_data": {}}, headers=who)
    assert (r.status_code, r.json()) == (400, {"error": "method_name is required"})
    assert (await http.get(f"{base}/flows/state", params={"thread_id": thread}, headers=who)).status_code == 404
    for method in ("start", "answer", "start"):  # the newest by created_at: "answer" (start's upsert keeps its)
        body = {
            "thread_id": thread,
            "flow_uuid": thread,
            "method_name": method,
            "state_data": {"id": thread, "m": method},
        }
        assert (await http.post(f"{base}/flows/state", json=body, headers=who)).status_code == 201
    got = (await http.get(f"{base}/flows/state", params={"thread_id": thread}, headers=who)).json()["data"]
    assert got == {"thread_id": thread, "method_name": "answer", "state_data": {"id": thread, "m": "answer"}}


async def test_a_flow_keeps_its_state_in_its_pod_so_only_its_visible_chat_can_be_forked(
    crews: dict[str, Crew], http: httpx.AsyncClient
) -> None:
    c, user, t = crews["flow"], new_user(), tag()
    q = [f"F1 {t}: status of web-1?", f"F2 {t}: replicas?", f"F3 {t}: thanks"]
    calls = len(c.line.controller.controller.calls.seen)
    source, tasks = await conversation(c, http, user, q)

    def asked(question: str) -> list[str]:
        (request,) = c.model.requests_for(question)
        return [message_text(m) for m in request["messages"] if m["role"] == "user"]

    assert asked(q[2]) == q  # the flow's state holds the earlier questions: restored from its pod by the session id
    assert not any("/api/crewai" in path for _, path, _ in c.line.controller.controller.calls.seen[calls:])
    assert await crewai_rows(c.line.pool, source) == []
    before = await table_fingerprint(c.line.pool)
    for path, body in [
        (f"/api/sessions/{source}/fork", {}),
        (f"/api/sessions/{source}/fork", {"rewind_before_task_id": tasks[2]}),
        (f"/api/sessions/{source}/rewind", {"rewind_before_task_id": tasks[2]}),
    ]:
        r = await api(c, http, "POST", path, user, json=body)
        assert r.status_code == 422 and "CrewAI flow" in r.json()["error"], (path, r.text)
    assert await table_fingerprint(c.line.pool) == before
    body = {"tasks_only": True, "rewind_before_task_id": tasks[2], "task_layout": "per_task"}
    r = await api(c, http, "POST", f"/api/sessions/{source}/fork", user, json=body)
    assert r.status_code == 201, r.text
    fork = r.json()["data"]
    assert fork["fork"]["tasks_copied"] == 2 and any("will not remember" in w for w in fork["fork"]["warnings"])
    # as the warning says: in the fork the flow starts afresh, while the source's flow still holds every turn
    question, again = f"F4 {t}: and now?", f"F5 {t}: and in the source?"
    await chat(c, http, user, fork["id"], question)
    assert asked(question) == [question]
    await chat(c, http, user, source, again)
    assert asked(again) == [*q, again]


async def test_a_whatif_into_turn_3_of_a_crew_is_answered_and_a_flows_is_refused(
    crews: dict[str, Crew], http: httpx.AsyncClient, evaluated: str
) -> None:
    user, t = new_user(), tag()
    c = crews["plain"]
    q = [f"Q1 {t}: status of web-1?", f"Q2 {t}: replicas?", f"Q3 {t}: which is oldest?"]
    source, tasks = await conversation(c, http, user, q)
    body = {"tools": "live", "rewind_before_task_id": tasks[2], "agent_ref": c.ref}
    r = await api(c, http, "POST", f"/api/sessions/{source}/whatif", user, json=body)
    assert r.status_code == 202, r.text
    job_id = r.json()["data"]["job"]["id"]
    deadline = asyncio.get_running_loop().time() + 120
    while (job := (await api(c, http, "GET", f"/api/whatif/{job_id}", user)).json()["data"])["status"] == "running":
        assert asyncio.get_running_loop().time() < deadline, job
        await asyncio.sleep(0.2)
    assert job["status"] == "completed", (job, c.process.log_tail())
    # turn 3 asked again in the what-if's fork: the crew is sent it as the source's turn 3 was
    sent = [r for r in c.model.requests_for(q[2]) if "response_format" not in r]
    assert len(sent) == 2 and sent[1] == sent[0]
    assert job["result"]["last_agent_text"].startswith("Answer to: ") and q[2] in job["result"]["last_agent_text"]

    f = crews["flow"]
    source, tasks = await conversation(f, http, user, [f"Q4 {t}: hello", f"Q5 {t}: again"])
    body = {"tools": "live", "rewind_before_task_id": tasks[1], "agent_ref": f.ref}
    r = await api(f, http, "POST", f"/api/sessions/{source}/whatif", user, json=body)
    assert r.status_code == 422 and "CrewAI flow" in r.json()["error"], r.text
