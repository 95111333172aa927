"""What-if end to end: the service forks into another agent and sends the turn's message over A2A to
real a2a-sdk agents (tests/support/a2a_agent.py), which write the new turn into the fork as kagent does."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.config import Settings
from tests.helpers import caller_fingerprint, new_user, seed
from tests.support import kagent_reads
from tests.support.a2a_agent import GARBAGE, LEGACY, NAMESPACE, SLOW, V1, Seen, running_agents

AGENT = {"legacy": LEGACY, "v1": V1}


@pytest.fixture(scope="module")
def agents(database_url: str) -> Iterator[tuple[str, Seen]]:
    with running_agents(database_url) as served:
        yield served


def whatif_settings(settings: Settings, a2a_url: str | None) -> Settings:
    return dataclasses.replace(settings, kagent_a2a_url=a2a_url, whatif_heartbeat_seconds=0.2)


@asynccontextmanager
async def service(settings: Settings, database_url: str) -> AsyncIterator[Any]:
    async with AsyncTestClient(app=create_app(settings, database_url)) as client:
        yield client


@pytest.fixture(scope="module")
async def wclient(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> AsyncIterator[Any]:
    async with service(whatif_settings(settings, agents[0]), database_url) as client:
        yield client


async def start(client: Any, session_id: str, user: str, body: dict[str, Any], **headers: str) -> Any:
    return await client.post(f"/api/sessions/{session_id}/whatif", json=body, headers={"X-User-Id": user, **headers})


async def job_until(client: Any, job_id: str, user: str, done: Any, seconds: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        r = await client.get(f"/api/whatif/{job_id}", headers={"X-User-Id": user})
        assert r.status_code == 200, r.text
        job: dict[str, Any] = r.json()["data"]
        if done(job):
            return job
        assert time.monotonic() < deadline, f"job never got there: {job}"
        await asyncio.sleep(0.1)


def ended(job: dict[str, Any]) -> bool:
    return job["status"] != "running"


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_a_whatif_regenerates_the_turn_on_another_agent(
    wclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen], dialect: str
) -> None:
    _, seen = agents
    conv = await seed(pool, dialect=dialect, turns=3, tool_calls=True, metadata_style="kagent")
    turn = conv.turns[1]
    agent_ref = f"{NAMESPACE}/{AGENT[dialect]}"
    r = await start(
        wclient,
        conv.session_id,
        conv.user_id,
        {"rewind_before_invocation_id": turn.invocation_id, "agent_ref": agent_ref},
    )
    assert r.status_code == 202, r.text
    data = r.json()["data"]
    job, fork = data["job"], data["session"]
    assert r.headers["location"] == f"/api/whatif/{job['id']}"
    assert fork["agent_id"] == f"kagent__NS__{AGENT[dialect].replace('-', '_')}" and fork["user_id"] == conv.user_id
    assert fork["fork"]["parent_session_id"] == conv.session_id and fork["fork"]["summary"]["turns"] == 2
    assert job["session_id"] == fork["id"] and job["agent_ref"] == agent_ref and job["status"] == "running"

    done = await job_until(wclient, job["id"], conv.user_id, ended)
    assert done["status"] == "completed" and done["error"] is None and done["task_id"] and done["finished_at"], done[
        "error"
    ]
    assert done["result"] == {
        "last_agent_text": f"Regenerated answer to {turn.user_text!r} by the other agent.",
        "tool_calls": {"lookup": 1}, "total_tokens": 288,
    }  # fmt: skip

    # what the agent was sent: the turn's user message, anew, in the fork's context, as the caller
    sent = next(m for m in seen.messages if m.context_id == fork["id"])
    assert [p.text for p in sent.parts if p.HasField("text")] == [turn.user_text]
    assert sent.message_id != turn.user_message_id and sent.task_id != turn.task_id  # a new task, not the old one
    assert any(h.get("x-user-id") == conv.user_id for h in seen.headers)

    # the fork holds the kept turn and the regenerated one, and kagent reads every row of it
    transcript = (
        await wclient.get(f"/api/sessions/{fork['id']}/transcript", headers={"X-User-Id": conv.user_id})
    ).json()
    turns = transcript["data"]["turns"]
    assert [t["invocation_id"] for t in turns[:1]] == conv.invocation_ids[:1] and len(turns) == 2
    assert turns[1]["messages"][0]["text"] == turn.user_text and turns[1]["state"] in (
        "completed",
        "TASK_STATE_COMPLETED",
    )
    async with pool.acquire() as conn:
        tasks = await kagent_reads.list_tasks_for_session(conn, fork["id"], conv.user_id)
    assert len(tasks) == 2 and all(json.loads(t["data"])["contextId"] == fork["id"] for t in tasks)

    # compare shows the two outcomes of the turn
    compared = (
        await wclient.get(f"/api/sessions/{conv.session_id}/compare/{fork['id']}", headers={"X-User-Id": conv.user_id})
    ).json()["data"]
    assert compared["common_turns"] == 1
    assert compared["left"]["turns_after"] == 2 and compared["left"]["last_agent_text"] == conv.turns[2].agent_text
    assert (
        compared["right"]["turns_after"] == 1
        and compared["right"]["last_agent_text"] == done["result"]["last_agent_text"]
    )

    listed = (await wclient.get(f"/api/sessions/{conv.session_id}/whatifs", headers={"X-User-Id": conv.user_id})).json()
    assert [j["id"] for j in listed["data"]] == [job["id"]] and listed["data"][0]["status"] == "completed"


async def test_cancel_a_slow_agent(wclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen]) -> None:
    _, seen = agents
    seen.release.clear()
    conv = await seed(pool, dialect="v1", turns=2)
    r = await start(
        wclient, conv.session_id, conv.user_id,
        {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": f"{NAMESPACE}/{SLOW}"},
    )  # fmt: skip
    job_id = r.json()["data"]["job"]["id"]
    working = await job_until(wclient, job_id, conv.user_id, lambda j: j["task_id"] is not None)
    assert working["status"] == "running"
    # the agent answers with its task before it writes the turn's first event and starts to wait
    await eventually(lambda: working["task_id"] in seen.running)

    stranger = new_user()
    assert (await wclient.get(f"/api/whatif/{job_id}", headers={"X-User-Id": stranger})).status_code == 404
    assert (
        await wclient.post(f"/api/whatif/{job_id}/cancel", json={}, headers={"X-User-Id": stranger})
    ).status_code == 404

    cancelled = await wclient.post(f"/api/whatif/{job_id}/cancel", json={}, headers={"X-User-Id": conv.user_id})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["data"]["status"] == "cancelled" and cancelled.json()["data"]["finished_at"]
    assert working["task_id"] in seen.cancelled
    # nothing left running: not the agent's turn, not the service's job
    await eventually(lambda: not seen.running and not wclient.app.state.whatif_runner.jobs)
    again = await wclient.post(f"/api/whatif/{job_id}/cancel", json={}, headers={"X-User-Id": conv.user_id})
    assert again.status_code == 409 and "already ended" in again.json()["error"]
    assert (await job_until(wclient, job_id, conv.user_id, ended))["status"] == "cancelled"


async def eventually(check: Any, seconds: float = 60) -> None:
    """Wait until check() holds: for what another thread or task does in its own time (slow under load)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.05)


async def test_refusals_write_nothing(wclient: Any, client: Any, pool: asyncpg.Pool, agents: tuple[str, Seen]) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True)
    body = {"rewind_before_invocation_id": conv.invocation_ids[2], "agent_ref": f"{NAMESPACE}/{V1}"}
    stranger = new_user()
    before = await caller_fingerprint(pool, conv.user_id, stranger)
    gated = await start(wclient, conv.session_id, conv.user_id, {**body, "max_context_tokens": 1})
    assert gated.status_code == 422 and "max_context_tokens" in gated.json()["error"]
    assert "fewer turns" in gated.json()["error"]  # what a person on the page can do about it (issue 36)
    unset = await start(client, conv.session_id, conv.user_id, body)  # the default app: no KAGENT_A2A_URL
    assert unset.status_code == 503 and "KAGENT_A2A_URL" in unset.json()["error"]
    missing = await start(wclient, conv.session_id, conv.user_id, {**body, "rewind_before_invocation_id": "e-typo"})
    assert missing.status_code == 404
    hidden = await start(wclient, conv.session_id, stranger, body)
    assert hidden.status_code == 404
    bad_ref = await start(wclient, conv.session_id, conv.user_id, {**body, "agent_ref": "Not An Agent"})
    assert bad_ref.status_code == 422 and "namespace/name" in bad_ref.json()["error"]
    unknown = await start(wclient, conv.session_id, conv.user_id, {**body, "model": "gpt"})
    assert unknown.status_code == 400
    # A ref with a trailing newline is no agent (`$` matched before it, then the card's URL failed: 500).
    newline = await start(wclient, conv.session_id, conv.user_id, {**body, "agent_ref": f"{NAMESPACE}/{V1}\n"})
    assert newline.status_code == 422 and "namespace/name" in newline.json()["error"]
    # A NUL is no question (the pattern's \S took it for one, then PostgreSQL refused it: 500).
    nul = await start(wclient, conv.session_id, conv.user_id, {**body, "message": {"text": "a\u0000b"}})
    assert nul.status_code == 400, nul.text
    # A blank edited question is said in words, not as the pattern's regex (issue 36).
    blank = await start(wclient, conv.session_id, conv.user_id, {**body, "message": {"text": "   "}})
    assert blank.status_code == 400 and "regex" not in blank.text
    assert "$.message.text must hold a character other than spaces" in blank.json()["error"]
    assert await caller_fingerprint(pool, conv.user_id, stranger) == before


@pytest.mark.parametrize("agent", ["garbage", "down"])
async def test_an_agent_that_is_down_or_answers_garbage_fails_the_job_and_keeps_the_fork(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen], agent: str
) -> None:
    a2a_url = agents[0] if agent == "garbage" else "http://127.0.0.1:9/api/a2a"  # port 9: nothing listens
    conv = await seed(pool, dialect="legacy", turns=2)
    before = await caller_fingerprint(pool, conv.user_id)  # earlier tests' agents may still save their tasks
    async with service(whatif_settings(settings, a2a_url), database_url) as client:
        r = await start(
            client, conv.session_id, conv.user_id,
            {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": f"{NAMESPACE}/{GARBAGE}"},
        )  # fmt: skip
        if agent == "down":  # its card is asked for first: a short 422 naming it, nothing written
            assert r.status_code == 422 and f"{NAMESPACE}/{GARBAGE}" in r.json()["error"], r.text
            # kagent's internal address is no caller's business (issue 32): the agent is named, not its URL
            assert "127.0.0.1" not in r.text and "http" not in r.json()["error"]
            assert await caller_fingerprint(pool, conv.user_id) == before
            return
        assert r.status_code == 202, r.text
        job = await job_until(client, r.json()["data"]["job"]["id"], conv.user_id, ended)
    assert job["status"] == "failed" and job["task_id"] is None
    assert ("did not answer as an A2A agent" if agent == "garbage" else "could not be reached") in job["error"]
    assert f"{NAMESPACE}/{GARBAGE}" in job["error"] and a2a_url.split("/api")[0] not in job["error"]
    async with pool.acquire() as conn:
        kept = await kagent_reads.get_session(conn, job["session_id"], conv.user_id)
    assert kept is not None  # the fork stays, named in the job


async def test_a_restart_during_a_job_finishes_it(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    a2a_url, seen = agents
    seen.release.clear()
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": f"{NAMESPACE}/{SLOW}"}
    config = whatif_settings(settings, a2a_url)
    async with service(config, database_url) as first:
        job_id = (await start(first, conv.session_id, conv.user_id, body)).json()["data"]["job"]["id"]
        await job_until(first, job_id, conv.user_id, lambda j: j["task_id"] is not None)
    # the service stopped with the job running; the agent finishes the turn meanwhile
    seen.release.set()
    await asyncio.sleep(1.0)  # more than 3 heartbeats: the job's runner is known to be gone
    async with service(config, database_url) as second:
        done = await job_until(second, job_id, conv.user_id, ended)
    assert done["status"] == "completed" and done["result"]["last_agent_text"].endswith("by slow agent.")

    # a job that never reached the agent is failed as interrupted
    async with service(config, database_url) as third:
        other = (await start(third, conv.session_id, conv.user_id, {**body, "agent_ref": f"{NAMESPACE}/{V1}"})).json()
        other_id = other["data"]["job"]["id"]
        await job_until(third, other_id, conv.user_id, ended)
    async with pool.acquire() as conn:  # as if its replica had died after stamping the turn sent, before
        # the agent took it (no task of the fork holds the message): it is never sent again
        await conn.execute(
            "UPDATE kagent_fork.whatif_job SET status = 'running', task_id = NULL, finished_at = NULL, "
            "turns_done = 0, heartbeat_at = NOW() - interval '1 hour' WHERE id = $1",
            other_id,
        )
        await conn.execute(
            "UPDATE kagent_fork.whatif_turn SET task_id = NULL, state = NULL, figures = NULL, ended_at = NULL, "
            "message = jsonb_set(message, '{messageId}', '\"never-sent\"') WHERE job_id = $1",
            other_id,
        )
    async with service(config, database_url) as fourth:
        interrupted = await job_until(fourth, other_id, conv.user_id, ended)
    assert interrupted["status"] == "failed" and interrupted["error"].startswith("interrupted")


async def test_idempotency_key(wclient: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": f"{NAMESPACE}/{LEGACY}"}
    first = await start(wclient, conv.session_id, conv.user_id, body, **{"Idempotency-Key": "wi-1"})
    again = await start(wclient, conv.session_id, conv.user_id, body, **{"Idempotency-Key": "wi-1"})
    assert first.status_code == 202 and again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["data"]["job"]["id"] == first.json()["data"]["job"]["id"]
    other = await start(
        wclient, conv.session_id, conv.user_id, {**body, "name": "other"}, **{"Idempotency-Key": "wi-1"}
    )
    assert other.status_code == 422
    async with pool.acquire() as conn:
        forks = await conn.fetchval(
            "SELECT count(*) FROM kagent_fork.fork WHERE parent_session_id = $1", conv.session_id
        )
    assert forks == 1
    await job_until(wclient, first.json()["data"]["job"]["id"], conv.user_id, ended)


async def test_the_whatif_tools_for_agents(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    from tests.support.live_server import live_server
    from tests.test_mcp_tools import mcp_session, ok, text_of

    conv = await seed(pool, dialect="legacy", turns=2, tool_calls=True)
    with live_server(create_app(whatif_settings(settings, agents[0]), database_url)) as url:
        async with mcp_session(url, {"X-User-Id": conv.user_id}) as mcp:
            args = {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[1]}
            gated = await mcp.call_tool(
                "start_whatif", {**args, "agent_ref": f"{NAMESPACE}/{LEGACY}", "max_context_tokens": 1}
            )
            assert gated.isError and "max_context_tokens" in text_of(gated)
            started = ok(await mcp.call_tool("start_whatif", {**args, "agent_ref": f"{NAMESPACE}/{LEGACY}"}))
            assert started["session"]["fork"]["parent_session_id"] == conv.session_id
            deadline = time.monotonic() + 30
            while (job := ok(await mcp.call_tool("whatif_status", {"job_id": started["job"]["id"]})))[
                "status"
            ] == "running":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
            assert job["status"] == "completed" and job["result"]["tool_calls"] == {"lookup": 1}
            listed = ok(await mcp.call_tool("list_whatifs", {"session_id": conv.session_id}))
            assert [j["id"] for j in listed] == [started["job"]["id"]]
            ended_already = await mcp.call_tool("cancel_whatif", {"job_id": started["job"]["id"]})
            assert ended_already.isError and "already ended" in text_of(ended_already)
            # a slow agent's what-if (of a v1 session: the slow agent speaks A2A 1.0), cancelled by the tool:
            # the agent is asked to cancel its task
            agents[1].release.clear()
            v1 = await seed(pool, dialect="v1", turns=2, user_id=conv.user_id)
            slow_args = {"session_id": v1.session_id, "rewind_before_invocation_id": v1.invocation_ids[1]}
            slow = ok(await mcp.call_tool("start_whatif", {**slow_args, "agent_ref": f"{NAMESPACE}/{SLOW}"}))
            while ok(await mcp.call_tool("whatif_status", {"job_id": slow["job"]["id"]}))["task_id"] is None:
                assert time.monotonic() < deadline + 30
                await asyncio.sleep(0.1)
            cancelled = ok(await mcp.call_tool("cancel_whatif", {"job_id": slow["job"]["id"]}))
            assert cancelled["status"] == "cancelled" and cancelled["task_id"] in agents[1].cancelled
        async with mcp_session(url, {"X-User-Id": new_user()}) as stranger:
            hidden = await stranger.call_tool("whatif_status", {"job_id": started["job"]["id"]})
            assert hidden.isError and text_of(hidden) == f"what-if job {started['job']['id']} not found"


def test_the_whatif_cli(database_url: str, agents: tuple[str, Seen]) -> None:
    import os
    import subprocess
    import sys

    conv = asyncio.run(_seed_once(database_url))
    env = {**os.environ, "DATABASE_URL": database_url, "KAGENT_A2A_URL": agents[0]}

    def cli(*args: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "service", *args, "--user", conv.user_id], env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    job = json.loads(
        cli(
            "whatif",
            conv.session_id,
            "--before",
            conv.invocation_ids[1],
            "--agent",
            f"{NAMESPACE}/{V1}",
            "--wait",
            "--json",
        )
    )
    assert job["status"] == "completed" and job["result"]["last_agent_text"].startswith("Regenerated answer")
    assert json.loads(cli("job", job["id"], "--json")) == job
    assert cli("job", job["id"]).startswith(f"What-if {job['id']}: completed, {NAMESPACE}/{V1}")
    # the session's what-ifs, and cancel (this one has ended: a conflict, exit code 5)
    assert [j["id"] for j in json.loads(cli("whatifs", conv.session_id, "--json"))] == [job["id"]]
    assert cli("whatifs", conv.session_id).startswith(f"What-if {job['id']}: completed")
    ended_already = subprocess.run(
        [sys.executable, "-m", "service", "cancel", job["id"], "--user", conv.user_id], env=env, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ended_already.returncode == 5 and "already ended" in ended_already.stderr
    # without KAGENT_A2A_URL: "not configured" (9), not "database unavailable" (8)
    unset = {k: v for k, v in env.items() if k != "KAGENT_A2A_URL"}
    not_set = subprocess.run(
        [sys.executable, "-m", "service", "whatif", conv.session_id, "--before", conv.invocation_ids[1],
         "--user", conv.user_id], env=unset, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert not_set.returncode == 9 and "KAGENT_A2A_URL" in not_set.stderr


async def _seed_once(database_url: str) -> Any:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        return await seed(pool, dialect="v1", turns=2)
    finally:
        await pool.close()


async def test_a_turn_without_a_user_message_to_send_is_refused(wclient: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    async with pool.acquire() as conn:  # the turn's task is gone: its events remain, its message does not
        await conn.execute("UPDATE task SET deleted_at = NOW() WHERE id = $1", conv.turns[1].task_id)
    before = await caller_fingerprint(pool, conv.user_id)
    r = await start(wclient, conv.session_id, conv.user_id, {"rewind_before_invocation_id": conv.invocation_ids[1]})
    assert r.status_code == 422 and "user message" in r.json()["error"]
    assert await caller_fingerprint(pool, conv.user_id) == before


async def test_a_user_message_that_is_not_valid_a2a_is_refused(wclient: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    async with pool.acquire() as conn:  # the turn's user message, spoiled: a text part that is an object
        data = json.loads(await conn.fetchval("SELECT data FROM task WHERE id = $1", conv.turns[1].task_id))
        data["history"][0]["parts"] = [{"text": {"not": "a string"}}]
        await conn.execute("UPDATE task SET data = $2 WHERE id = $1", conv.turns[1].task_id, json.dumps(data))
    before = await caller_fingerprint(pool, conv.user_id)
    r = await start(
        wclient, conv.session_id, conv.user_id,
        {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": f"{NAMESPACE}/{V1}"},
    )  # fmt: skip
    assert r.status_code == 422 and "not a valid A2A message" in r.json()["error"]
    assert await caller_fingerprint(pool, conv.user_id) == before


async def test_whatif_forks_are_named_after_the_agent_and_the_turn_and_the_tree_shows_them_as_they_are_now(
    wclient: Any, pool: asyncpg.Pool
) -> None:
    """Issue 25, 1 and 2: two what-ifs of one session can be told apart by name; the tree says where each
    was made and what it holds now (the turn the agent added included); compare lines the regenerated turn
    up with the one it replaces."""
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True, name="Why is the pod crashing?")
    agent_ref = f"{NAMESPACE}/{V1}"
    made = []
    for at in (1, 2):
        body = {"rewind_before_invocation_id": conv.turns[at].invocation_id, "agent_ref": agent_ref}
        r = await start(wclient, conv.session_id, conv.user_id, body)
        assert r.status_code == 202, r.text
        made.append(r.json()["data"])
        await job_until(wclient, made[-1]["job"]["id"], conv.user_id, ended)
    names = [m["session"]["name"] for m in made]
    assert names == [
        f'What-if: {agent_ref} answers turn 2 of "Why is the pod crashing?"',
        f'What-if: {agent_ref} answers turn 3 of "Why is the pod crashing?"',
    ]
    tree = (await wclient.get(f"/api/sessions/{conv.session_id}/tree", headers={"X-User-Id": conv.user_id})).json()
    top = tree["data"]
    assert top["turns"] == 3 and top["events"] == len(conv.events) and top["fork_turn"] is None
    first = next(n for n in top["forks"] if n["session_id"] == made[0]["session"]["id"])
    assert first["agent_id"] == f"kagent__NS__{V1.replace('-', '_')}"
    assert first["fork_turn"] == 2 and first["fork_question"] == conv.turns[1].user_text
    # the fork copied turn 1's events, then the agent wrote its turn: the counts are today's, not the copy's
    assert first["fork"]["events_copied"] == len([e for e in conv.events if e.created_at < conv.turns[1].started_at])
    assert first["turns"] == 2 and first["events"] == first["fork"]["events_copied"] + 4

    compared = await wclient.get(
        f"/api/sessions/{conv.session_id}/compare/{made[0]['session']['id']}", headers={"X-User-Id": conv.user_id}
    )
    row = compared.json()["data"]["aligned"][0]
    assert row["left"]["question"] == row["right"]["question"] == conv.turns[1].user_text
    assert row["left"]["answer"] == conv.turns[1].agent_text
    assert row["right"]["answer"] == f"Regenerated answer to {conv.turns[1].user_text!r} by the other agent."
    assert row["right"]["tool_calls"] == {"lookup": 1} and row["right"]["total_tokens"] == 288
