"""What-ifs of several turns and experiments from a turn known by its task alone (agents that write no
invocation id: kagent-openai and kagent-langgraph 0.10.4), on the sessions those runtimes wrote
(tests/fixtures/frameworks/) and the real a2a-sdk test agents (tests/support/a2a_agent.py), which answer in the
fork as kagent's agents do. The turns are the turn listing's (one per task, in the tasks' order)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from service.config import Settings
from tests.helpers import caller_fingerprint, new_user
from tests.support.a2a_agent import APPROVAL_LEGACY, LEGACY, NAMESPACE, Seen, running_agents
from tests.test_experiments import until
from tests.test_frameworks import claude_session, crewai_session, loaded
from tests.test_whatif import ended, job_until, service, whatif_settings


def answers_to(turns: list[dict[str, Any]]) -> list[str]:
    """The source's answers to these fixture turns (the scripted model's, after turn 1's tool call)."""
    return [f"Answer to: {t['question']}" for t in turns]


# The fixtures' tasks are kagent 0.10.x's (legacy A2A JSON): the agents answer in that dialect.
FIXTURES = {"openai-agents": "openai_3_turns", "langgraph": "langgraph_3_turns"}


@pytest.fixture(scope="module")
def agents(database_url: str) -> Iterator[tuple[str, Seen]]:
    with running_agents(database_url) as served:
        yield served


@pytest.fixture
async def wclient(settings: Settings, database_url: str, agents: tuple[str, Seen]) -> AsyncIterator[Any]:
    async with service(whatif_settings(settings, agents[0]), database_url) as client:
        yield client


def ref(name: str) -> str:
    return f"{NAMESPACE}/{name}"


def post(client: Any, path: str, user: str, body: dict[str, Any]) -> Any:
    return client.post(path, json=body, headers={"X-User-Id": user})


def texts(message: Any) -> list[str]:
    return [p.text for p in message.parts if p.HasField("text")]


async def job_turns(pool: asyncpg.Pool, job_id: str) -> list[tuple[str, str | None]]:
    """A job's turns as stored: (the source turn's key, the agent's task)."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT invocation_id, task_id FROM kagent_fork.whatif_turn WHERE job_id = $1 ORDER BY ordinal", job_id
        )
    return [(r["invocation_id"], r["task_id"]) for r in rows]


@pytest.mark.parametrize("framework", list(FIXTURES))
async def test_a_whatif_of_every_turn_from_one_named_by_its_task(
    wclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen], framework: str
) -> None:
    _, seen = agents
    fixture = await loaded(pool, FIXTURES[framework])
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    body = {"rewind_before_task_id": turns[1]["task_id"], "agent_ref": ref(LEGACY), "turns": "all"}
    r = await post(wclient, f"/api/sessions/{sid}/whatif", user, body)
    assert r.status_code == 202, r.text
    job, fork = r.json()["data"]["job"], r.json()["data"]["session"]
    assert (job["rewind_before_task_id"], job["rewind_before_invocation_id"]) == (turns[1]["task_id"], None)
    assert job["turns_total"] == 2 and fork["fork"]["framework"] == framework
    # the span's position is the listing's: the fork is named after turn 2
    assert fork["name"].startswith(f"What-if: {ref(LEGACY)} answers turn 2"), fork["name"]

    done = await job_until(wclient, job["id"], user, ended)
    assert done["status"] == "completed" and done["error"] is None, done
    assert done["turns_done"] == 2
    questions = [t["question"] for t in turns[1:]]
    assert done["result"]["last_agent_text"] == f"Regenerated answer to {questions[1]!r} by the other agent."
    # the agent was asked turn 2's question, then turn 3's, in the fork, each once
    assert [texts(m) for m in seen.messages if m.context_id == fork["id"]] == [[q] for q in questions]
    # the job's turns are keyed by the source turns' tasks (they have no invocation id)
    keys = await job_turns(pool, job["id"])
    assert [k for k, _ in keys] == [t["task_id"] for t in turns[1:]] and all(task for _, task in keys)


@pytest.mark.parametrize("framework", list(FIXTURES))
async def test_an_experiment_from_a_turn_named_by_its_task(
    wclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen], framework: str
) -> None:
    _, seen = agents
    fixture = await loaded(pool, FIXTURES[framework])
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    task = turns[1]["task_id"]
    names = [LEGACY, APPROVAL_LEGACY]
    body = {"rewind_before_task_id": task, "agents": [ref(n) for n in names], "turns": "all"}
    r = await post(wclient, f"/api/sessions/{sid}/experiments", user, body)
    assert r.status_code == 202, r.text
    started = r.json()["data"]["experiment"]
    assert (started["rewind_before_task_id"], started["rewind_before_invocation_id"]) == (task, None)
    assert len(started["branches"]) == 2

    done = await until(wclient, started["id"], user)
    assert done["status"] == "completed", done
    questions = [t["question"] for t in turns[1:]]
    # the source column: the source's own turns 2 and 3, their answers read from their tasks
    source = done["source"]
    assert [t["question"] for t in source["turns"]] == questions
    assert [t["answer"] for t in source["turns"]] == [f"Answer to: {q}" for q in questions]
    assert [t["state"] for t in source["turns"]] == ["completed", "completed"]
    assert source["totals"]["turns"] == 2 and source["session_id"] == sid
    for branch, name in zip(done["branches"], names, strict=True):
        assert branch["status"] == "completed" and branch["agent_ref"] == ref(name), branch
        assert [t["question"] for t in branch["turns"]] == questions
        assert [t["answer"] for t in branch["turns"]] == [
            f"Regenerated answer to {q!r} by the other agent." for q in questions
        ]
        assert [t["state"] for t in branch["turns"]] == ["completed", "completed"]
        assert [texts(m) for m in seen.messages if m.context_id == branch["session_id"]] == [[q] for q in questions]
        keys = await job_turns(pool, branch["job_id"])
        assert [k for k, _ in keys] == [t["task_id"] for t in turns[1:]]

    table = await wclient.get(f"/api/experiments/{started['id']}?format=markdown", headers={"X-User-Id": user})
    assert table.status_code == 200 and f"from turn `{task}` (its task)" in table.text
    assert f"| 1. {questions[0]}" in table.text and "Answer to: " in table.text
    listed = (await wclient.get(f"/api/sessions/{sid}/experiments", headers={"X-User-Id": user})).json()["data"]
    assert [(e["id"], e["rewind_before_task_id"], e["rewind_before_invocation_id"]) for e in listed] == [
        (started["id"], task, None)
    ]


async def test_an_experiment_from_a_task_with_an_idempotency_key_starts_once(wclient: Any, pool: asyncpg.Pool) -> None:
    fixture = await loaded(pool, FIXTURES["openai-agents"])
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    body = {"rewind_before_task_id": turns[2]["task_id"], "agents": [ref(LEGACY)]}
    headers = {"X-User-Id": user, "Idempotency-Key": "task-exp-1"}
    first = await wclient.post(f"/api/sessions/{sid}/experiments", json=body, headers=headers)
    again = await wclient.post(f"/api/sessions/{sid}/experiments", json=body, headers=headers)
    assert first.status_code == 202 and again.status_code == 200, (first.text, again.text)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["data"]["experiment"]["id"] == first.json()["data"]["experiment"]["id"]
    other = {**body, "turns": 1, "agents": [ref(APPROVAL_LEGACY)]}
    clash = await wclient.post(f"/api/sessions/{sid}/experiments", json=other, headers=headers)
    assert clash.status_code == 422 and "Idempotency-Key" in clash.json()["error"]
    await until(wclient, first.json()["data"]["experiment"]["id"], user)


async def test_refusals_of_turns_named_by_task_write_nothing(wclient: Any, pool: asyncpg.Pool) -> None:
    fixture = await loaded(pool, FIXTURES["openai-agents"])
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    claude = await claude_session(pool)
    # (kagent's default user's rows of these sessions are in: the fingerprint covers every row of their ids)
    users = (user, claude["user"])
    before = await caller_fingerprint(pool, *users)
    base = f"/api/sessions/{sid}"
    agent, agents = {"agent_ref": ref(LEGACY)}, {"agents": [ref(LEGACY)]}
    for path, body, status, words in [
        # an unknown task: as an unknown invocation
        (f"{base}/whatif", {**agent, "rewind_before_task_id": "no-such-task"}, 404, "no-such-task"),
        (f"{base}/experiments", {**agents, "rewind_before_task_id": "no-such-task"}, 404, "no-such-task"),
        # more turns than the source holds from there (turn 2 of 3: 2 turns), or none
        (f"{base}/whatif", {**agent, "rewind_before_task_id": turns[1]["task_id"], "turns": 3}, 422, "holds 2 turns"),
        (f"{base}/experiments", {**agents, "rewind_before_task_id": turns[2]["task_id"], "turns": 2}, 422, "holds 1"),
        (f"{base}/experiments", {**agents, "rewind_before_task_id": turns[2]["task_id"], "turns": 0}, 422, "1 or more"),
        # the cost gate counts every branch's every turn
        (
            f"{base}/experiments",
            {**agents, "rewind_before_task_id": turns[0]["task_id"], "turns": "all", "max_context_tokens": 1},
            422,
            "max_context_tokens",
        ),
        # both names of a turn
        (f"{base}/experiments", {**agents, "rewind_before_task_id": "t", "rewind_before_invocation_id": "i"}, 400, ""),
    ]:
        r = await post(wclient, path, user, body)
        assert r.status_code == status and words in r.json()["error"], (path, body, r.text)
    # a Claude Agent SDK session: its agent keeps the conversation in its own pod (a fork needs tasks_only)
    ctask = claude["turns"][1]["task_id"]
    for path, body in [
        (f"/api/sessions/{claude['session_id']}/whatif", {**agent, "rewind_before_task_id": ctask, "turns": "all"}),
        (f"/api/sessions/{claude['session_id']}/experiments", {**agents, "rewind_before_task_id": ctask}),
    ]:
        r = await post(wclient, path, claude["user"], body)
        assert r.status_code == 422 and "own pod" in r.json()["error"], (path, r.text)
    # another user's session is not there
    r = await post(wclient, f"{base}/experiments", new_user(), {**agents, "rewind_before_task_id": turns[1]["task_id"]})
    assert r.status_code == 404
    # the gate's estimate: before each turn, the chat text its earlier turns' tasks hold (question and answer), / 4
    chars = [
        len(t["question"]) + len(a) for t, a in zip(turns, ["web-1 is Running.", *answers_to(turns[1:])], strict=True)
    ]
    estimate = 0 + math.ceil(chars[0] / 4) + math.ceil((chars[0] + chars[1]) / 4)
    body = {**agents, "rewind_before_task_id": turns[0]["task_id"], "turns": "all", "max_context_tokens": estimate - 1}
    r = await post(wclient, f"{base}/experiments", user, body)
    assert r.status_code == 422 and f"about {estimate} tokens" in r.json()["error"], r.text
    assert await caller_fingerprint(pool, *users) == before


async def test_a_crewai_turn_named_by_its_task_where_the_fork_proceeds(
    wclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    """A CrewAI session (its memory last changed in turn 2): an experiment from turn 3 proceeds as the fork does;
    one from turn 2 is refused as the fork is (422), writing nothing."""
    _, seen = agents
    fixture = await crewai_session(pool, changed_in_turn=2)
    sid, user, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    before = await caller_fingerprint(pool, user)
    body = {"rewind_before_task_id": turns[1]["task_id"], "agents": [ref(LEGACY)], "turns": "all"}
    r = await post(wclient, f"/api/sessions/{sid}/experiments", user, body)
    assert r.status_code == 422 and "CrewAI" in r.json()["error"], r.text
    assert await caller_fingerprint(pool, user) == before

    r = await post(
        wclient, f"/api/sessions/{sid}/experiments", user, {**body, "rewind_before_task_id": turns[2]["task_id"]}
    )
    assert r.status_code == 202, r.text
    done = await until(wclient, r.json()["data"]["experiment"]["id"], user)
    assert done["status"] == "completed", done
    (branch,) = done["branches"]
    assert [t["question"] for t in branch["turns"]] == [turns[2]["question"]]
    # the source's own answer, read from its task: kagent-crewai's model was sent crewai's whole task prompt,
    # which names the question, and the scripted model echoed it (tests/fixtures/frameworks/crewai_3_turns.json)
    (answer,) = [t["answer"] for t in done["source"]["turns"]]
    assert answer.startswith("Answer to: ") and turns[2]["question"] in answer, answer
    assert [texts(m) for m in seen.messages if m.context_id == branch["session_id"]] == [[turns[2]["question"]]]
