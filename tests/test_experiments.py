"""Experiments end to end: one continuation replayed turn by turn on several real a2a-sdk agents
(tests/support/a2a_agent.py, both dialects), which write each turn into the branch's fork as kagent does;
the grid read back beside the source's own turns; approvals stopped at or rejected as kagent's UI does;
faults, restarts and refusals."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from service.config import Settings
from tests.helpers import caller_fingerprint, new_user, seed
from tests.support import kagent_reads
from tests.support.a2a_agent import (
    APPROVAL_LEGACY,
    APPROVAL_V1,
    FORGETFUL,
    GARBAGE,
    HITL,
    LEGACY,
    NAMESPACE,
    SLOW,
    V1,
    Seen,
    running_agents,
)
from tests.test_whatif import service, whatif_settings


@pytest.fixture(scope="module")
def agents(database_url: str) -> Iterator[tuple[str, Seen]]:
    with running_agents(database_url) as served:
        yield served


@pytest.fixture
async def eclient(settings: Settings, database_url: str, agents: tuple[str, Seen]) -> AsyncIterator[Any]:
    async with service(whatif_settings(settings, agents[0]), database_url) as client:
        yield client


# One service per test (not one per module): a replica left running would take over the jobs of the
# services a test starts and stops, as a real one does.


def ref(name: str) -> str:
    return f"{NAMESPACE}/{name}"


async def start(client: Any, session_id: str, user: str, body: dict[str, Any], **headers: str) -> Any:
    return await client.post(
        f"/api/sessions/{session_id}/experiments", json=body, headers={"X-User-Id": user, **headers}
    )


async def until(client: Any, experiment_id: str, user: str, done: Any = None, seconds: float = 40) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        r = await client.get(f"/api/experiments/{experiment_id}", headers={"X-User-Id": user})
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()["data"]
        if (done or (lambda e: e["status"] != "running"))(data):
            return data
        assert time.monotonic() < deadline, f"never got there: {json.dumps(data)[:2000]}"
        await asyncio.sleep(0.1)


def texts(message: Any) -> list[str]:
    return [p.text for p in message.parts if p.HasField("text")]


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_an_experiment_replays_the_continuation_on_several_agents(
    eclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen], dialect: str
) -> None:
    _, seen = agents
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True, metadata_style="kagent")
    names = [LEGACY, APPROVAL_LEGACY] if dialect == "legacy" else [V1, FORGETFUL]
    body = {
        "rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(n) for n in names], "turns": "all",
        "message": {"text": "Ask it differently: how many pods run?"},
    }  # fmt: skip
    r = await start(eclient, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    started = r.json()["data"]["experiment"]
    assert r.headers["location"] == f"/api/experiments/{started['id']}"
    assert started["status"] == "running" and len(started["branches"]) == 2
    assert [b["agent_card"]["name"] for b in started["branches"]] == names

    done = await until(eclient, started["id"], conv.user_id)
    assert done["status"] == "completed", done
    questions = ["Ask it differently: how many pods run?", conv.turns[2].user_text, conv.turns[3].user_text]
    # the baseline column: the source's own turns over the same span
    assert [t["question"] for t in done["source"]["turns"]] == [t.user_text for t in conv.turns[1:]]
    assert [t["state"] for t in done["source"]["turns"]] == ["completed"] * 3
    assert done["source"]["job_id"] is None and done["source"]["session_id"] == conv.session_id
    for branch, name in zip(done["branches"], names, strict=True):
        assert branch["status"] == "completed" and branch["error"] is None and branch["agent_ref"] == ref(name), branch[
            "error"
        ]
        assert [t["question"] for t in branch["turns"]] == questions
        assert [t["state"] for t in branch["turns"]] == ["completed"] * 3
        assert all(t["tool_calls"] == {"lookup": 1} and t["model_calls"] == 2 and t["total_tokens"] == 288
                   for t in branch["turns"])  # fmt: skip
        assert [p.get("text") for p in branch["turns"][0]["sent"]] == [questions[0]]
        assert branch["totals"]["turns"] == 3 and branch["totals"]["tool_calls"] == 3
        assert branch["totals"]["total_tokens"] == 864 and branch["totals"]["model_calls"] == 6
        job = (await eclient.get(f"/api/whatif/{branch['job_id']}", headers={"X-User-Id": conv.user_id})).json()
        assert job["data"]["turns_done"] == 3 and job["data"]["turns_total"] == 3

        # the agent got exactly these questions, in order, in the fork's context, as the caller
        got = [m for m in seen.messages if m.context_id == branch["session_id"]]
        assert [texts(m) for m in got] == [[q] for q in questions]
        # the fork holds the kept turn, then the replayed ones, as kagent reads them
        async with pool.acquire() as conn:
            session = await kagent_reads.get_session(conn, branch["session_id"], conv.user_id)
            tasks = await kagent_reads.list_tasks_for_session(conn, branch["session_id"], conv.user_id)
        assert session is not None and len(tasks) == 4
        turns = (
            await eclient.get(f"/api/sessions/{branch['session_id']}/transcript", headers={"X-User-Id": conv.user_id})
        ).json()["data"]["turns"]
        assert turns[0]["invocation_id"] == conv.invocation_ids[0] and len(turns) == 4
        assert [t["messages"][0]["text"] for t in turns[1:]] == questions
    assert any(h.get("x-user-id") == conv.user_id for h in seen.headers)

    table = await eclient.get(f"/api/experiments/{started['id']}?format=markdown", headers={"X-User-Id": conv.user_id})
    assert table.status_code == 200 and table.headers["content-type"] == "text/markdown; charset=utf-8"
    assert "| turn | source" in table.text and ref(names[1]) in table.text and "| **total_tokens** |" in table.text
    listed = (
        await eclient.get(f"/api/sessions/{conv.session_id}/experiments", headers={"X-User-Id": conv.user_id})
    ).json()["data"]
    assert [e["id"] for e in listed] == [started["id"]] and listed[0]["status"] == "completed"
    stranger = new_user()
    assert (await eclient.get(f"/api/experiments/{started['id']}", headers={"X-User-Id": stranger})).status_code == 404
    gone = await eclient.post(f"/api/experiments/{started['id']}/cancel", json={}, headers={"X-User-Id": conv.user_id})
    assert gone.status_code == 409


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
@pytest.mark.parametrize("on_approval", ["stop", "reject"])
async def test_an_agent_that_asks_for_an_approval_mid_replay(
    eclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen], dialect: str, on_approval: str
) -> None:
    _, seen = agents
    conv = await seed(pool, dialect=dialect, turns=3)
    agent = APPROVAL_LEGACY if dialect == "legacy" else APPROVAL_V1
    body = {
        "rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(agent)], "turns": 2,
        "message": {"text": "please delete the pod web-1"}, "on_approval": on_approval,
    }  # fmt: skip
    r = await start(eclient, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    done = await until(eclient, r.json()["data"]["experiment"]["id"], conv.user_id)
    branch = done["branches"][0]
    got = [m for m in seen.messages if m.context_id == branch["session_id"]]
    assert "delete_pod" not in seen.tool_runs  # nothing is ever approved by the service
    if on_approval == "stop":
        assert branch["status"] == "completed" and branch["stopped_at"] == conv.invocation_ids[1]
        assert [t["state"] for t in branch["turns"]] == ["input-required"]
        assert len(got) == 1  # the second turn is never sent
        return
    assert branch["status"] == "completed" and branch["stopped_at"] is None, branch
    first, second = branch["turns"]
    assert first["state"] == "completed" and first["rejected_tool_calls"] == 1
    assert first["answer"] == "I did not delete the pod: the call was rejected."
    assert second["state"] == "completed" and second["question"] == conv.turns[2].user_text
    assert branch["totals"]["rejected_tool_calls"] == 1
    rejection = next(m for m in seen.rejections if m.get("contextId") == branch["session_id"])
    if dialect == "legacy":  # kagent 0.10.x's Reject button
        assert [p.get("data") for p in rejection["parts"]] == [{"decision_type": "reject"}, None]
        assert [p.get("text") for p in rejection["parts"]] == [None, "Rejected"]
        said = "Rejected"
    else:  # kagent main's: the HITL extension's response, every tool refused
        assert rejection["extensions"] == [HITL]
        assert rejection["metadata"][HITL] == {
            "type": "tool_approval_response", "approvals": [{"id": "confirm-1", "approved": False}]
        }  # fmt: skip
        said = "0 approved, 1 rejected"
        assert rejection["parts"][0]["text"] == said
    async with pool.acquire() as conn:  # the rejection answers the task that asked, in the fork
        asked = await conn.fetchval(
            "SELECT task_id FROM kagent_fork.whatif_turn WHERE job_id = $1 AND ordinal = 0", branch["job_id"]
        )
    assert rejection["taskId"] == asked
    assert [texts(m) for m in got] == [["please delete the pod web-1"], [said], [conv.turns[2].user_text]]


async def test_refusals_write_nothing(eclient: Any, client: Any, pool: asyncpg.Pool, agents: tuple[str, Seen]) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(V1)]}
    stranger = new_user()
    before = await caller_fingerprint(pool, conv.user_id, stranger)  # other tests' agents may still save tasks

    async def refused(status: int, change: dict[str, Any], says: str, on: Any = eclient) -> None:
        r = await start(on, conv.session_id, conv.user_id, {**body, **change})
        assert r.status_code == status, (change, r.text)
        assert says in r.json()["error"], (change, r.json())

    await refused(422, {"agents": []}, "1 to 8 agents")
    await refused(422, {"agents": [ref(V1), ref(V1)]}, "more than once")
    await refused(422, {"agents": ["Not An Agent"]}, "namespace/name")
    await refused(400, {"agents": "kagent/v1-agent"}, "invalid request body")
    await refused(422, {"agents": [ref("no-such-agent")]}, "kagent/no-such-agent")
    await refused(422, {"turns": 3}, "holds 2 turns")
    await refused(422, {"turns": 0}, "turns must be 1 or more")
    await refused(400, {"turns": "some"}, "invalid request body")
    await refused(400, {"message": {"text": ""}}, "invalid request body")
    await refused(400, {"message": {"text": "   "}}, "invalid request body")
    await refused(422, {"max_context_tokens": 1}, "max_context_tokens")
    await refused(422, {"repeats": 6}, "repeats must be 1 to 5")
    await refused(422, {"agents": [ref(V1), ref(LEGACY), ref(SLOW)], "repeats": 3}, "over 8")
    await refused(404, {"rewind_before_invocation_id": "e-typo"}, "not found")
    await refused(503, {}, "KAGENT_A2A_URL", on=client)
    assert (await start(eclient, conv.session_id, stranger, body)).status_code == 404
    assert await caller_fingerprint(pool, conv.user_id, stranger) == before
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM kagent_fork.experiment WHERE source_session_id = $1",
                                   conv.session_id) == 0  # fmt: skip
    # the what-if asks for the card too: a short 422 before writing anything
    r = await eclient.post(
        f"/api/sessions/{conv.session_id}/whatif", headers={"X-User-Id": conv.user_id},
        json={"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": ref("no-such-agent")},
    )  # fmt: skip
    assert r.status_code == 422 and "kagent/no-such-agent" in r.json()["error"]
    assert await caller_fingerprint(pool, conv.user_id, stranger) == before


async def test_a_failing_or_hanging_branch_ends_alone(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    a2a_url, seen = agents
    seen.release.clear()
    seen.hold_on_turn = 0
    conv = await seed(pool, dialect="v1", turns=3)
    config = dataclasses.replace(whatif_settings(settings, a2a_url), whatif_timeout_seconds=2)
    async with service(config, database_url) as client:
        body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(GARBAGE), ref(SLOW), ref(V1)],
                "turns": 2}  # fmt: skip
        r = await start(client, conv.session_id, conv.user_id, body)
        assert r.status_code == 202, r.text
        done = await until(client, r.json()["data"]["experiment"]["id"], conv.user_id)
    garbage, slow, good = done["branches"]
    assert done["status"] == "completed"
    assert garbage["status"] == "failed" and "did not answer as an A2A agent" in garbage["error"]
    assert slow["status"] == "failed" and "did not finish turn 1 within 2 s" in slow["error"]
    assert good["status"] == "completed" and len(good["turns"]) == 2
    # nothing was sent after a failure
    assert len([m for m in seen.messages if m.context_id == slow["session_id"]]) == 1
    # an ended branch shows how each turn it sent ended (issue 32, item 6): never `working` for ever
    assert [t["state"] for t in garbage["turns"]] == ["failed"]  # sent, and answered garbage: no task
    assert [t["state"] for t in slow["turns"]] in (["canceled"], ["failed"])  # its task cancelled at the limit
    assert slow["totals"]["turns"] == 1 and garbage["totals"]["turns"] == 1
    seen.release.set()


async def test_a_restart_in_the_third_turn_resumes_and_never_resends(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    a2a_url, seen = agents
    seen.release.clear()
    seen.hold_on_turn = 3
    conv = await seed(pool, dialect="v1", turns=4)
    config = whatif_settings(settings, a2a_url)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(SLOW)], "turns": 3}
    try:
        async with service(config, database_url) as first:
            experiment_id = (await start(first, conv.session_id, conv.user_id, body)).json()["data"]["experiment"]["id"]
            running = await until(
                first,
                experiment_id,
                conv.user_id,
                lambda e: [t["state"] for t in e["branches"][0]["turns"]][2:] == ["working"],
            )
            fork = running["branches"][0]["session_id"]
            deadline = time.monotonic() + 10
            while not seen.running:  # the agent has the third turn
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        # the replica stopped in the middle of the third turn; one without KAGENT_A2A_URL cannot take it over
        await asyncio.sleep(1.0)
        async with service(whatif_settings(settings, None), database_url) as blind:
            await asyncio.sleep(0.8)
            still = (await blind.get(f"/api/experiments/{experiment_id}", headers={"X-User-Id": conv.user_id})).json()
            assert still["data"]["branches"][0]["status"] == "running"
        seen.release.set()  # the agent finishes the turn meanwhile
        await asyncio.sleep(1.0)
        async with service(config, database_url) as second:
            done = await until(second, experiment_id, conv.user_id)
    finally:
        seen.hold_on_turn = 0
    branch = done["branches"][0]
    assert branch["status"] == "completed" and [t["state"] for t in branch["turns"]] == ["completed"] * 3
    got = [m for m in seen.messages if m.context_id == fork]
    assert [texts(m) for m in got] == [[t.user_text] for t in conv.turns[1:4]]  # each sent once


async def test_at_most_whatif_max_parallel_turns_at_once(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    a2a_url, seen = agents
    seen.release.clear()
    seen.hold_on_turn = 0
    conv = await seed(pool, dialect="v1", turns=2)
    config = dataclasses.replace(whatif_settings(settings, a2a_url), whatif_max_parallel=1)
    async with service(config, database_url) as client:
        body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(SLOW)], "repeats": 2}
        r = await start(client, conv.session_id, conv.user_id, body)
        experiment_id = r.json()["data"]["experiment"]["id"]
        await until(
            client,
            experiment_id,
            conv.user_id,
            lambda e: any(b["turns"][0]["state"] == "working" for b in e["branches"]),
        )
        await asyncio.sleep(1.0)
        waiting = (await client.get(f"/api/experiments/{experiment_id}", headers={"X-User-Id": conv.user_id})).json()
        assert sorted(b["turns"][0]["state"] for b in waiting["data"]["branches"]) == ["pending", "working"]
        assert len(seen.running) == 1
        seen.release.set()
        done = await until(client, experiment_id, conv.user_id)
    assert [b["status"] for b in done["branches"]] == ["completed", "completed"]
    assert [b["repeat"] for b in done["branches"]] == [1, 2]
    spread = done["by_agent"][0]
    assert spread["agent_ref"] == ref(SLOW) and spread["totals"]["turns"] == {"mean": 1.0, "min": 1.0, "max": 1.0}


async def test_cancel_and_idempotency(eclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen]) -> None:
    _, seen = agents
    seen.release.clear()
    seen.hold_on_turn = 0
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(SLOW), ref(V1)]}
    first = await start(eclient, conv.session_id, conv.user_id, body, **{"Idempotency-Key": "ex-1"})
    again = await start(eclient, conv.session_id, conv.user_id, body, **{"Idempotency-Key": "ex-1"})
    assert first.status_code == 202 and again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    experiment_id = first.json()["data"]["experiment"]["id"]
    assert again.json()["data"]["experiment"]["id"] == experiment_id
    other = await start(eclient, conv.session_id, conv.user_id, {**body, "turns": 1, "repeats": 1, "name": "x"},
                        **{"Idempotency-Key": "ex-1"})  # fmt: skip
    assert other.status_code == 422
    await until(eclient, experiment_id, conv.user_id, lambda e: e["branches"][0]["turns"][0]["state"] == "working")
    cancelled = await eclient.post(
        f"/api/experiments/{experiment_id}/cancel", json={}, headers={"X-User-Id": conv.user_id}
    )
    assert cancelled.status_code == 200, cancelled.text
    data = cancelled.json()["data"]
    assert data["status"] == "cancelled" and data["branches"][0]["status"] == "cancelled"
    # the turn it had sent shows how it ended, not `working` for ever (issue 32, item 6)
    assert [t["state"] for t in data["branches"][0]["turns"]] == ["canceled"]
    # The slow agent's task is cancelled over A2A: by the cancel, or, when the cancel came while the message
    # was on its way (the job did not know the task yet), by the runner as soon as the agent answered.
    for _ in range(100):
        if seen.cancelled:
            break
        await asyncio.sleep(0.1)
    assert seen.cancelled
    async with pool.acquire() as conn:
        forks = await conn.fetchval(
            "SELECT count(*) FROM kagent_fork.fork WHERE parent_session_id = $1", conv.session_id
        )
    assert forks == 2


async def test_a_whatif_takes_turns_and_a_message(eclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen]) -> None:
    _, seen = agents
    conv = await seed(pool, dialect="legacy", turns=3)
    r = await eclient.post(
        f"/api/sessions/{conv.session_id}/whatif", headers={"X-User-Id": conv.user_id},
        json={"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": ref(LEGACY), "turns": 2,
              "message": {"text": "Say it otherwise"}},
    )  # fmt: skip
    assert r.status_code == 202, r.text
    job = r.json()["data"]["job"]
    assert job["turns_total"] == 2 and job["turns_done"] == 0
    deadline = time.monotonic() + 30
    while job["status"] == "running":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
        job = (await eclient.get(f"/api/whatif/{job['id']}", headers={"X-User-Id": conv.user_id})).json()["data"]
    assert job["status"] == "completed" and job["turns_done"] == 2, job
    got = [texts(m) for m in seen.messages if m.context_id == job["session_id"]]
    assert got == [["Say it otherwise"], [conv.turns[2].user_text]]


async def test_each_branch_is_named_apart_in_kagents_sidebar(eclient: Any, pool: asyncpg.Pool) -> None:
    """Issue 36: kagent's sidebar lists the branches' forks by name. With a name, every branch's fork is told
    apart by its agent and repeat, and from another experiment's by the experiment's id; without one, by the
    agent, the turn, the repeat and the experiment."""
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(V1), ref(LEGACY)], "repeats": 2}
    named = await start(eclient, conv.session_id, conv.user_id, {**body, "name": "pods"})
    unnamed = await start(eclient, conv.session_id, conv.user_id, body)
    assert named.status_code == unnamed.status_code == 202, (named.text, unnamed.text)
    names: list[str] = []
    for answer in (named, unnamed):
        experiment = answer.json()["data"]["experiment"]
        await until(eclient, experiment["id"], conv.user_id)
        async with pool.acquire() as connection:
            rows = await connection.fetch(
                "SELECT s.name, j.agent_ref, j.repeat FROM kagent_fork.whatif_job j JOIN session s "
                "ON s.id = j.session_id AND s.user_id = j.user_id WHERE j.experiment_id = $1 ORDER BY j.agent_ref, "
                "j.repeat",
                experiment["id"],
            )
        for row in rows:
            assert row["agent_ref"] in row["name"] and f"#{row['repeat']}" in row["name"], row["name"]
            assert row["name"].endswith(f"experiment {experiment['id'][:8]}"), row["name"]
        names += [r["name"] for r in rows]
    assert len(names) == 8 and len(set(names)) == 8, names
    assert sum(n.startswith("pods · ") for n in names) == 4


async def test_the_whatifs_list_holds_what_ifs_only_each_with_what_it_asked(eclient: Any, pool: asyncpg.Pool) -> None:
    """Issue 36: an experiment's branches were listed as what-ifs, under the source's question although they
    were asked an edited one. The what-ifs list holds what-ifs only; each job says what it really asked."""
    conv = await seed(pool, dialect="v1", turns=2)
    boundary = {"rewind_before_invocation_id": conv.invocation_ids[1]}
    experiment = await start(
        eclient, conv.session_id, conv.user_id,
        {**boundary, "agents": [ref(V1)], "message": {"text": "Asked another way?"}},
    )  # fmt: skip
    assert experiment.status_code == 202, experiment.text
    whatif = await eclient.post(
        f"/api/sessions/{conv.session_id}/whatif", json={**boundary, "agent_ref": ref(V1)},
        headers={"X-User-Id": conv.user_id},
    )  # fmt: skip
    assert whatif.status_code == 202, whatif.text
    await until(eclient, experiment.json()["data"]["experiment"]["id"], conv.user_id)
    listed = await eclient.get(f"/api/sessions/{conv.session_id}/whatifs", headers={"X-User-Id": conv.user_id})
    jobs = listed.json()["data"]
    assert [j["id"] for j in jobs] == [whatif.json()["data"]["job"]["id"]]
    assert jobs[0]["experiment_id"] is None and jobs[0]["question"] == conv.turns[1].user_text
    branch = experiment.json()["data"]["experiment"]["branches"][0]["job_id"]
    read = await eclient.get(f"/api/whatif/{branch}", headers={"X-User-Id": conv.user_id})
    assert read.json()["data"]["question"] == "Asked another way?"
