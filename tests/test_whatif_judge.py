"""A what-if takes `judge` too (issue 35, the contract's "a what-if is an experiment of one agent"): its one
branch judged blind against the source's own continuation of the same span, both orders asked, by the scripted
a2a-sdk judges of tests/support/a2a_agent.py (JUDGE prefers the continuation holding MARKER, MARKER_AGENT answers
with it); the verdict in the job's JSON; the job reads `judging` meanwhile; a cancel cancels the judging; a judge
that could act is refused with nothing written; the judgment keyed on the job (migration 0019)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import asyncpg
import pytest

from service.agents.replay import blind
from service.config import Settings
from service.kagent.store.agents import agent_row_id
from tests.helpers import caller_fingerprint, seed
from tests.support.a2a_agent import JUDGE, MARKER, MARKER_AGENT, NAMESPACE, SLOW, SLOW_JUDGE, V1, Seen
from tests.support.classified_tools import classified_servers
from tests.test_experiments import agents, eclient, ref  # noqa: F401 (fixtures)
from tests.test_judge import cli_on_a_new_conversation, judged_mcp, mcp_until_over, sides_of
from tests.test_whatif import service, whatif_settings

OVER = ("running", "judging")


async def start(client: Any, session_id: str, user: str, body: dict[str, Any]) -> Any:
    return await client.post(f"/api/sessions/{session_id}/whatif", json=body, headers={"X-User-Id": user})


async def until_over(client: Any, job_id: str, user: str, seconds: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        r = await client.get(f"/api/whatif/{job_id}", headers={"X-User-Id": user})
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()["data"]
        if data["status"] not in OVER:
            return data
        assert time.monotonic() < deadline, f"never ended: {data['status']} {data.get('judgment')}"
        await asyncio.sleep(0.1)


async def test_a_whatif_is_judged_blind_against_the_source_in_both_orders(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    _, seen = agents
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True, metadata_style="kagent")
    body = {
        "rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": ref(MARKER_AGENT), "turns": "all",
        "judge": {"agent": ref(JUDGE), "criteria": "Prefer the shorter answer when equal."},
    }  # fmt: skip
    before = len(seen.judged)
    r = await start(eclient, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    started = r.json()["data"]["job"]
    assert started["status"] == "running"
    assert started["judgment"]["status"] == "waiting" and started["judgment"]["judge_agent_ref"] == ref(JUDGE)
    assert started["judgment"]["judge_card"]["name"] == JUDGE and started["verdict"]["pairs"] == []
    job_id = started["id"]
    done = await until_over(eclient, job_id, conv.user_id)
    assert done["status"] == "completed", done
    j = done["judgment"]
    assert j["status"] == "completed" and j["calls"] == 2 and j["calls_answered"] == 2, j
    assert [(p["left_job_id"], p["right_job_id"], p["outcome"], p["consistent"]) for p in j["pairs"]] == [
        (None, job_id, "right", True)
    ]
    v = done["verdict"]
    criteria = "Prefer the shorter answer when equal."
    assert v["judge"] == {"agent": ref(JUDGE), "model": None, "criteria": criteria} and v["criteria"] == criteria
    assert v["headline"].startswith(
        f"No agent is shown better than the source yet: the best so far, {ref(MARKER_AGENT)}"
    )
    assert v["by_agent"][0]["consistency"] == {"agreed": 1, "asked": 1}
    assert [(p["a"], p["b"], p["verdict"], p["order_1"], p["order_2"]) for p in v["pairs"]] == [
        (None, job_id, "b", "B", "A")
    ]
    (mine,) = v["by_agent"]
    assert (mine["agent_ref"], mine["against"], mine["wins"], mine["ties"], mine["losses"], mine["ci95"]) == (
        ref(MARKER_AGENT), "source", 1, 0, 0, [0.2065, 1.0]
    )  # fmt: skip
    assert mine["outcome"] == "inconclusive"  # one pair won: the Wilson interval is 21-100 %, no certainty
    assert mine["cost"]["turns"] == 2 and mine["summary"] == j["lines"][0]
    assert j["lines"] == [mine["summary"]]
    assert j["lines"][0].startswith(f"{ref(MARKER_AGENT)}: inconclusive against the source over 1 judged continuations")

    # what the judge received: the pair in both orders, each in its own context, nothing naming an agent, a
    # session, a fork or which side is the source
    got = seen.judged[before:]
    assert len(got) == 2 and len({c for c, _ in got}) == 2
    (a1, b1), (a2, b2) = (sides_of(text) for _, text in got)
    assert (a1, b1) == (b2, a2) and a1 != b1
    assert sum(MARKER in s for s in (a1, b1)) == 1
    for _, text in got:
        assert "Prefer the shorter answer when equal." in text
        assert conv.turns[0].user_text in text.split(blind.CONTINUATION_A)[0]
        for name in [done["session_id"], conv.session_id, job_id, *conv.invocation_ids, MARKER_AGENT, V1, NAMESPACE,
                     "whatif_agent"]:  # fmt: skip
            assert name not in text, name
        for word in ("source", "original", "fork", "model", "session", "experiment", "branch", "what-if"):
            assert not re.search(rf"\b{word}s?\b", text, re.IGNORECASE), word

    # keyed on the job (migration 0019): no experiment row, exactly one of the two keys set
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT experiment_id, job_id FROM kagent_fork.judgment WHERE job_id = $1", job_id)
        assert row is not None and row["experiment_id"] is None
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO kagent_fork.judgment (id, user_id, judge_agent_ref, dialect, runner) "
                "VALUES ('neither', 'u', 'a/b', 'v1', 'r')"
            )
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO kagent_fork.judgment (id, experiment_id, job_id, user_id, judge_agent_ref, dialect, "
                "runner) VALUES ('both', 'e', 'j', 'u', 'a/b', 'v1', 'r')"
            )

    # the session's listing says the same status, and a what-if without a judge has none
    hdr = {"X-User-Id": conv.user_id}
    listed = (await eclient.get(f"/api/sessions/{conv.session_id}/whatifs", headers=hdr)).json()["data"]
    assert [x["status"] for x in listed if x["id"] == job_id] == ["completed"]
    plain = await start(eclient, conv.session_id, conv.user_id, {"rewind_before_invocation_id": conv.invocation_ids[1],
                                                                   "agent_ref": ref(V1)})  # fmt: skip
    assert plain.status_code == 202, plain.text
    plain_done = await until_over(eclient, plain.json()["data"]["job"]["id"], conv.user_id)
    assert plain_done["judgment"] is None and plain_done["verdict"] is None


async def test_refusals_write_nothing(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
) -> None:
    conv = await seed(pool, dialect="v1", turns=3)
    base = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": ref(V1)}
    prints = await caller_fingerprint(pool, conv.user_id)
    for body, status, said in [
        ({**base, "judge": {"agent": "not a ref"}}, 422, "judge.agent must be namespace/name"),
        ({**base, "judge": {"agent": ref("no-such-agent")}}, 422, "the judge kagent/no-such-agent did not answer"),
        ({**base, "judge": {"agent": ref(JUDGE), "extra": 1}}, 400, "extra"),
        ({**base, "judge": {"agent": ref(JUDGE), "criteria": "a\u0000b"}}, 400, "criteria must not hold a NUL"),
        ({**base, "judge": ref(JUDGE)}, 400, "judge"),
        ({**base, "max_context_tokens": 1, "judge": {"agent": ref(JUDGE)}}, 422, "and of the judge's calls"),
    ]:
        r = await start(eclient, conv.session_id, conv.user_id, body)
        assert r.status_code == status and said in r.text, (body, r.text)
        assert "error" in r.json()
    assert await caller_fingerprint(pool, conv.user_id) == prints


async def test_a_judge_that_could_act_is_refused_unless_live(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    a2a_url, _ = agents
    conv = await seed(pool, dialect="v1", turns=3)
    base = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": ref(V1), "turns": "all"}
    with classified_servers() as servers:
        config = {"http_tools": [{"params": {"url": servers.http_url}, "require_approval": ["delete_pod"]}]}
        await pool.execute(
            "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), 'Declarative', "
            "$2::json) ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config, deleted_at = NULL",
            agent_row_id(ref(JUDGE)), json.dumps(config),
        )  # fmt: skip
        try:
            async with service(whatif_settings(settings, a2a_url), database_url) as client:
                prints = await caller_fingerprint(pool, conv.user_id)
                r = await start(client, conv.session_id, conv.user_id, {**base, "judge": {"agent": ref(JUDGE)}})
                assert r.status_code == 422, r.text
                said = r.json()["error"]
                assert f"judge: the agent {ref(JUDGE)} could call tools that act" in said, said
                assert "scale_deployment" in said and "delete_pod" not in said, said
                dry = await start(
                    client, conv.session_id, conv.user_id, {**base, "dry_run": True, "judge": {"agent": ref(JUDGE)}}
                )
                assert dry.status_code == 200 and "could call tools that act" in dry.json()["data"]["refused"]
                assert await caller_fingerprint(pool, conv.user_id) == prints
                live = await start(
                    client, conv.session_id, conv.user_id, {**base, "tools": "live", "judge": {"agent": ref(JUDGE)}}
                )
                assert live.status_code == 202, live.text
                done = await until_over(client, live.json()["data"]["job"]["id"], conv.user_id)
                assert done["judgment"]["status"] == "completed", done["judgment"]
        finally:
            await pool.execute("DELETE FROM agent WHERE id = $1", agent_row_id(ref(JUDGE)))


async def test_the_job_reads_judging_and_a_cancel_cancels_its_judging(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    a2a_url, seen = agents
    seen.judge_release.clear()
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": ref(MARKER_AGENT),
            "judge": {"agent": ref(SLOW_JUDGE)}}  # fmt: skip
    hdr = {"X-User-Id": conv.user_id}
    try:
        async with service(whatif_settings(settings, a2a_url), database_url) as client:
            r = await start(client, conv.session_id, conv.user_id, body)
            assert r.status_code == 202, r.text
            job_id = r.json()["data"]["job"]["id"]
            deadline = time.monotonic() + 30
            while True:
                data = (await client.get(f"/api/whatif/{job_id}", headers=hdr)).json()["data"]
                async with pool.acquire() as conn:
                    known = await conn.fetchval(
                        "SELECT count(*) FROM kagent_fork.judge_call c JOIN kagent_fork.judgment j "
                        "ON j.id = c.judgment_id WHERE j.job_id = $1 AND c.task_id IS NOT NULL", job_id,
                    )  # fmt: skip
                if data["status"] == "judging" and known == 2 and len(seen.running) == 2:
                    break
                assert time.monotonic() < deadline, data
                await asyncio.sleep(0.05)
            assert data["judgment"]["status"] == "running" and data["finished_at"] is not None
            listed = (await client.get(f"/api/sessions/{conv.session_id}/whatifs", headers=hdr)).json()["data"]
            assert [x["status"] for x in listed if x["id"] == job_id] == ["judging"]
            held = set(seen.running)
            r = await client.post(f"/api/whatif/{job_id}/cancel", json={}, headers=hdr)
            assert r.status_code == 200, r.text
            data = r.json()["data"]
            assert data["status"] == "completed" and data["judgment"]["status"] == "cancelled", data
            assert all(s["error"] == "cancelled" for p in data["judgment"]["pairs"] for s in p["said"] if s["error"])
            assert held <= set(seen.cancelled)
            again = await client.post(f"/api/whatif/{job_id}/cancel", json={}, headers=hdr)
            assert again.status_code == 409
    finally:
        seen.judge_release.set()


async def test_mcp_starts_a_judged_whatif_and_reads_its_verdict(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    from tests.test_mcp_tools import text_of

    conv = await seed(pool, dialect="v1", turns=2)
    async with judged_mcp(settings, database_url, agents[0], conv.user_id) as mcp:
        started = await mcp.call_tool(
            "start_whatif",
            {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[1],
             "agent_ref": ref(MARKER_AGENT), "judge_agent": ref(JUDGE), "judge_criteria": "Be strict."},
        )  # fmt: skip
        assert not started.isError, text_of(started)
        job = json.loads(text_of(started))["job"]
        assert job["judgment"]["status"] == "waiting" and job["judgment"]["criteria"] == "Be strict."
        status = await mcp_until_over(mcp, "whatif_status", {"job_id": job["id"]})
        assert status["status"] == "completed" and status["judgment"]["status"] == "completed"
        assert status["verdict"]["by_agent"][0]["wins"] == 1
        assert status["judgment"]["lines"][0].startswith(f"{ref(MARKER_AGENT)}: inconclusive against the source")
        refused = await mcp.call_tool(
            "start_whatif",
            {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[1],
             "agent_ref": ref(V1), "judge_agent": "nope"},
        )  # fmt: skip
        assert refused.isError and "judge.agent must be namespace/name" in text_of(refused)


def test_the_cli_starts_a_judged_whatif_and_waits_for_its_verdict(
    database_url: str,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    conv, run = cli_on_a_new_conversation(database_url, agents[0])

    common = ("whatif", conv.session_id, "--before", conv.invocation_ids[1], "--agent", ref(MARKER_AGENT),
              "--judge", ref(JUDGE), "--criteria", "Be strict.", "--wait")  # fmt: skip
    done = run(*common, "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["status"] == "completed" and found["judgment"]["status"] == "completed", found["judgment"]
    assert found["judgment"]["criteria"] == "Be strict." and found["judgment"]["calls_answered"] == 2
    assert [(p["a"], p["b"], p["verdict"]) for p in found["verdict"]["pairs"]] == [(None, found["id"], "b")]
    shown = run(*common)
    assert shown.returncode == 0, shown.stderr
    assert f"judged blind by {ref(JUDGE)} (completed, 2 of 2 calls)" in shown.stdout, shown.stdout
    assert f"verdict: {ref(MARKER_AGENT)}: inconclusive against the source over 1" in shown.stdout


async def test_a_stopped_replicas_judging_is_taken_over_and_no_call_sent_twice(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    """A replica stops while the judge holds the what-if's two calls; the next one takes the judgment over (the
    sweep: keyed on the job), follows those calls without sending them again, and the verdict lands."""
    a2a_url, seen = agents
    config = whatif_settings(settings, a2a_url)
    seen.judge_release.clear()
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": ref(MARKER_AGENT),
            "judge": {"agent": ref(SLOW_JUDGE)}}  # fmt: skip
    before = len(seen.judged)
    try:
        async with service(config, database_url) as first:
            r = await start(first, conv.session_id, conv.user_id, body)
            assert r.status_code == 202, r.text
            job_id = r.json()["data"]["job"]["id"]
            deadline = time.monotonic() + 30
            while True:
                async with pool.acquire() as conn:
                    known = await conn.fetchval(
                        "SELECT count(*) FROM kagent_fork.judge_call c JOIN kagent_fork.judgment j "
                        "ON j.id = c.judgment_id WHERE j.job_id = $1 AND c.task_id IS NOT NULL", job_id,
                    )  # fmt: skip
                if known == 2:
                    break
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        seen.judge_release.set()
        async with service(config, database_url) as second:
            done = await until_over(second, job_id, conv.user_id)
    finally:
        seen.judge_release.set()
    j = done["judgment"]
    assert j["status"] == "completed" and [p["outcome"] for p in j["pairs"]] == ["right"], j
    assert len(seen.judged) - before == 2  # each call sent once


async def test_a_cancel_while_the_job_runs_cancels_its_waiting_judgment(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    _, seen = agents
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": ref(SLOW),
            "judge": {"agent": ref(JUDGE)}}  # fmt: skip
    hdr = {"X-User-Id": conv.user_id}
    before = len(seen.judged)
    r = await start(eclient, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    job_id = r.json()["data"]["job"]["id"]
    deadline = time.monotonic() + 30
    while (job := (await eclient.get(f"/api/whatif/{job_id}", headers=hdr)).json()["data"])["task_id"] is None:
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.05)
    assert job["status"] == "running" and job["judgment"]["status"] == "waiting"
    r = await eclient.post(f"/api/whatif/{job_id}/cancel", json={}, headers=hdr)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["status"] == "cancelled" and data["judgment"]["status"] == "cancelled", data
    assert data["judgment"]["calls"] == 0 and data["verdict"]["by_agent"] == []
    await asyncio.sleep(0.5)  # nothing judges it later
    again = (await eclient.get(f"/api/whatif/{job_id}", headers=hdr)).json()["data"]
    assert again["status"] == "cancelled" and again["judgment"]["status"] == "cancelled"
    assert len(seen.judged) == before
    assert (await eclient.post(f"/api/whatif/{job_id}/cancel", json={}, headers=hdr)).status_code == 409
