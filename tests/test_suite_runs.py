"""Suite runs (issue 49): a suite of 12 real conversations run on three scripted a2a-sdk agents (one better than
the source by the judge's rule, one the same, one worse) and a scripted judge, on real PostgreSQL: the outcomes
are `better`, `inconclusive` and `worse`, the interval counts conversations, the budget stops the run where it
should, kagent's chat list gains no session unless one is kept, and the export re-imported runs the same cases."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import subprocess
import sys
import time
import uuid
from typing import Any

import asyncpg
import msgspec
import pytest

from service.agents.replay.verdict import wilson
from service.agents.suites import across, ledger
from service.app import create_app
from service.config import Settings
from service.kagent.store.agents import agent_row_id
from service.kagent.store.suite_runs import RunCase
from tests.helpers import new_user, seed
from tests.support.a2a_agent import FLAWED_AGENT, JUDGE, MARKER_AGENT, SLOW, V1, Seen
from tests.test_experiments import agents, eclient, ref  # noqa: F401 (fixtures)
from tests.test_whatif import service, whatif_settings

ENDED = ("completed", "stopped", "cancelled", "failed")


def _h(user: str) -> dict[str, str]:
    return {"X-User-Id": user}


async def until_ended(client: Any, path: str, user: str, seconds: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        r = await client.get(path, headers=_h(user))
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()["data"]
        if data["status"] in ENDED:
            return data
        assert time.monotonic() < deadline, f"never ended: {data['status']} {data['progress']}"
        await asyncio.sleep(0.2)


async def chat_list(pool: asyncpg.Pool, user: str) -> set[str]:
    """The sessions kagent's UI lists for the user (its handler: the user's, not deleted)."""
    rows = await pool.fetch("SELECT id FROM session WHERE user_id = $1 AND deleted_at IS NULL", user)
    return {r["id"] for r in rows}


async def _suite_of(client: Any, pool: asyncpg.Pool, user: str, n: int) -> tuple[str, list[Any]]:
    convs = [await seed(pool, dialect="v1", turns=2, user_id=user) for _ in range(n)]
    cases = [{"session_id": c.session_id, "rewind_before_invocation_id": c.invocation_ids[1]} for c in convs]
    r = await client.post("/api/suites", json={"name": "twelve chats", "cases": cases}, headers=_h(user))
    assert r.status_code == 201, r.text
    return r.json()["data"]["id"], convs


def test_the_interval_counts_conversations_not_repeats() -> None:
    """Twelve conversations of five repeats each, every pair won: the interval is Wilson's over 12, not over 60
    pairs; a point never."""
    cases = [(f"s{i}", across.AgentCase(agent_ref="a/b", wins=5, ties=0, losses=0)) for i in range(12)]
    found = across.agent_across("a/b", cases)
    low, _ = wilson(1.0, 12)
    assert found.ci95 is not None and found.ci95[0] == pytest.approx(low, abs=1e-4)
    assert found.ci95[0] < wilson(1.0, 60)[0]
    assert found.outcome == "better" and found.cases == 12 and found.wins == 60
    # mixed cases: the bootstrap over cases is never narrower than Wilson's with n = cases
    mixed = [(f"s{i}", across.AgentCase(agent_ref="a/b", wins=w, ties=1, losses=3 - w))
             for i, w in enumerate((0, 1, 2, 3, 3, 2))]  # fmt: skip
    got = across.agent_across("a/b", mixed)
    rate = got.win_rate or 0.0
    w_low, w_high = wilson(rate, 6)
    assert got.ci95 is not None and got.ci95[0] <= w_low + 1e-4 and got.ci95[1] >= w_high - 1e-4
    # six cases of two chats are two conversations: the interval is as wide as two allow
    twice = across.agent_across("a/b", [(f"s{i % 2}", r) for i, (_, r) in enumerate(cases[:6])])
    assert (twice.cases, twice.conversations) == (6, 2) and twice.outcome == "inconclusive"
    assert twice.ci95 is not None and twice.ci95[0] == pytest.approx(wilson(1.0, 2)[0], abs=1e-4)


def test_the_bootstrap_draws_what_randrange_draws() -> None:
    """across.interval draws its cases with randrange written out: the same interval as the plain way."""

    def plain(cases: list[tuple[float, int]]) -> tuple[float, float]:
        rng, n = random.Random(across.SEED), len(cases)
        rates = []
        for _ in range(across.BOOTSTRAP_DRAWS):
            drawn = [cases[rng.randrange(n)] for _ in range(n)]
            rates.append(sum(s for s, _ in drawn) / sum(j for _, j in drawn))
        rates.sort()
        rate = sum(s for s, _ in cases) / sum(j for _, j in cases)
        w_low, w_high = wilson(rate, n)
        draws = across.BOOTSTRAP_DRAWS
        return min(rates[int(0.025 * (draws - 1))], w_low), max(rates[round(0.975 * (draws - 1))], w_high)

    rng = random.Random(7)
    for n in (1, 2, 3, 12, 64, 100, 129):
        cases = [(rng.choice((0, 0.5, 1, 2, 2.5, 3)), 3) for _ in range(n)]
        assert across.interval(cases) == plain(cases), n


def test_the_verdict_across_is_computed_once_per_set_of_ended_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every GET of a run reads its verdict: the bootstrap runs again only when a case has ended since."""
    computed = []
    real = across.across

    def counted(cases: Any) -> across.Across:
        computed.append(len(cases))
        return real(cases)

    monkeypatch.setattr(across, "across", counted)

    def case(i: int, result: bool) -> RunCase:
        found = across.CaseResult(
            case_id=f"c{i}-{uuid.uuid4()}",
            session_id="s",
            experiment_ids=["e"],
            by_agent=[across.AgentCase(agent_ref="a/b", wins=i % 3, ties=0, losses=2 - i % 3)],
        )
        return RunCase(case_id=found.case_id, ordinal=i, session_id="s", spec="[]", branches=2, experiment_ids=["e"],
                       status="done" if result else "running", error=None,
                       result=msgspec.json.encode(found).decode() if result else None, spent_usd=None)  # fmt: skip

    cases = [case(i, i < 20) for i in range(30)]
    first = ledger.across_of(cases)
    again = [dataclasses.replace(c) for c in cases]  # as read again from the database
    assert ledger.across_of(again) == first and computed == [20]
    cases[25] = case(25, True)
    assert ledger.across_of(cases).by_agent[0].cases == 21 and computed == [20, 21]


async def test_a_suite_of_twelve_conversations_gives_better_same_and_worse(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    user = new_user()
    suite_id, _ = await _suite_of(eclient, pool, user, 12)
    listed_before = await chat_list(pool, user)
    body = {"agents": [ref(MARKER_AGENT), ref(V1), ref(FLAWED_AGENT)], "judge": {"agent": ref(JUDGE)}}
    r = await eclient.post(f"/api/suites/{suite_id}/runs", json=body, headers=_h(user))
    assert r.status_code == 202, r.text
    run = r.json()["data"]
    assert run["progress"]["cases"] == 12 and run["progress"]["branches_total"] == 36
    path = f"/api/suites/{suite_id}/runs/{run['id']}"
    done = await until_ended(eclient, path, user)
    assert done["status"] == "completed", done
    by = {a["agent_ref"]: a for a in done["verdict"]["by_agent"]}
    assert by[ref(MARKER_AGENT)]["outcome"] == "better"
    assert by[ref(V1)]["outcome"] == "inconclusive"
    assert by[ref(FLAWED_AGENT)]["outcome"] == "worse"
    for a in by.values():  # the interval counts the 12 conversations
        assert a["cases"] == a["conversations"] == 12
        low, high = wilson(a["win_rate"], 12)
        assert a["ci95"][0] <= low + 1e-4 and a["ci95"][1] >= high - 1e-4
    assert done["verdict"]["headline"].startswith(f"{ref(MARKER_AGENT)}: better than the source over 12")
    assert all(c["best"] == ref(MARKER_AGENT) for c in done["cases"])
    assert done["progress"]["branches_done"] == 36 and done["progress"]["judged"] == 12
    # kagent's chat list gains nothing: every branch and judge session is the run's own user's
    assert await chat_list(pool, user) == listed_before
    run_user = f"{user}/suite-run/{run['id']}"
    assert len(await chat_list(pool, run_user)) >= 36
    # one branch kept: forked into the creator's chats
    experiment = done["cases"][0]["experiment_ids"][0]
    branch = await pool.fetchval(
        "SELECT session_id FROM kagent_fork.whatif_job WHERE experiment_id = $1 LIMIT 1", experiment
    )
    # a case is one experiment per agent, each judged against the source alone (no agent against another)
    assert all(len(c["experiment_ids"]) == 3 for c in done["cases"])
    against = await pool.fetchval(
        "SELECT count(*) FROM kagent_fork.judge_call j JOIN kagent_fork.judgment g ON g.id = j.judgment_id "
        "WHERE g.experiment_id = ANY($1::text[]) AND j.left_job IS NOT NULL",
        [e for c in done["cases"] for e in c["experiment_ids"]],
    )
    assert against == 0
    r = await eclient.post(f"{path}/keep", json={"session_id": branch}, headers=_h(user))
    assert r.status_code == 201, r.text
    assert await chat_list(pool, user) == listed_before | {r.json()["data"]["id"]}
    # a case's experiment, read by the creator through the run (the run's user's rows; not theirs directly)
    case = done["cases"][0]
    grid = await eclient.get(f"{path}/cases/{case['case_id']}", headers=_h(user))
    assert grid.status_code == 200, grid.text
    found = {b["agent_ref"] for e in grid.json()["data"]["experiments"] for b in e["branches"]}
    assert found == {ref(MARKER_AGENT), ref(V1), ref(FLAWED_AGENT)}
    assert (await eclient.get(f"/api/experiments/{case['experiment_ids'][0]}", headers=_h(user))).status_code == 404
    assert (await eclient.get(f"{path}/cases/{case['case_id']}", headers=_h(new_user()))).status_code == 404
    assert (await eclient.get(f"{path}/cases/no-such-case", headers=_h(user))).status_code == 404
    # the Markdown and the plot
    md = await eclient.get(f"{path}?format=markdown", headers=_h(user))
    assert md.status_code == 200 and "| kagent/marker-agent | 12 (12) |" in md.text, md.text
    svg = await eclient.get(f"{path}/plot.svg", headers=_h(user))
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert svg.text.count('class="agent"') == 3 and "the source (50 %)" in svg.text
    # the run is listed; another user sees nothing of it
    listed = await eclient.get(f"/api/suites/{suite_id}/runs", headers=_h(user))
    assert [x["id"] for x in listed.json()["data"]] == [run["id"]]
    assert (await eclient.get(path, headers=_h(new_user()))).status_code == 404


async def test_the_budget_stops_starting_cases(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    """Priced agents (their models in kagent's agent table): a run over max_usd is refused and writes nothing;
    one within the estimate, one case at a time (WHATIF_MAX_PARALLEL=1), stops starting cases once the ended
    ones' branches cost max_usd: over it by no more than the case that was running."""
    user = new_user()
    one_at_a_time = dataclasses.replace(whatif_settings(settings, agents[0]), whatif_max_parallel=1)
    config = json.dumps({"model": {"type": "openai", "model": "gpt-4o-mini"}, "instruction": "i", "http_tools": []})
    refs = [ref(V1), ref(JUDGE)]
    for r_ in refs:
        await pool.execute(
            "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), 'Declarative', $2)"
            " ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config, deleted_at = NULL", agent_row_id(r_), config,
        )  # fmt: skip
    try:
        async with service(one_at_a_time, database_url) as client:
            suite_id, _ = await _suite_of(client, pool, user, 6)
            body: dict[str, Any] = {"agents": [ref(V1)], "judge": {"agent": ref(JUDGE)}, "dry_run": True}
            plan = (await client.post(f"/api/suites/{suite_id}/runs", json=body, headers=_h(user))).json()["data"]
            assert plan["cases"] == 6 and plan["branches"] == 6 and plan["estimated_usd"] > 0, plan
            runs_before = await pool.fetchval("SELECT count(*) FROM kagent_fork.suite_run")
            over = {**body, "dry_run": False, "max_usd": plan["estimated_usd"] / 2}
            r = await client.post(f"/api/suites/{suite_id}/runs", json=over, headers=_h(user))
            assert r.status_code == 422 and "max_usd" in r.json()["error"], r.text
            assert await pool.fetchval("SELECT count(*) FROM kagent_fork.suite_run") == runs_before
            limit = plan["estimated_usd"]
            r = await client.post(
                f"/api/suites/{suite_id}/runs", json={**body, "dry_run": False, "max_usd": limit}, headers=_h(user)
            )
            assert r.status_code == 202, r.text
            done = await until_ended(client, f"/api/suites/{suite_id}/runs/{r.json()['data']['id']}", user)
    finally:
        for r_ in refs:
            await pool.execute("DELETE FROM agent WHERE id = $1", agent_row_id(r_))
    started = [c for c in done["cases"] if c["experiment_ids"]]
    per_case = done["spent_usd"] / len(started)
    # the estimate counts the input side only (at least that): each case cost more, so the budget bites
    assert (done["status"], done["reason"]) == ("stopped", "budget"), done
    assert 0 < len(started) < 6 and all(c["status"] == "waiting" for c in done["cases"] if not c["experiment_ids"])
    assert done["spent_usd"] >= limit and done["spent_usd"] - per_case < limit
    assert done["verdict"]["by_agent"][0]["cases"] == len(started)


def _cli(database_url: str, a2a_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "KAGENT_A2A_URL": a2a_url, "WHATIF_HEARTBEAT_SECONDS": "0.2"}
    return subprocess.run(
        [sys.executable, "-m", "service", "suite", *args], env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip


async def _jobs(pool: asyncpg.Pool, suite_id: str) -> list[dict[str, Any]]:
    """The branches of a suite's runs, for a failure's message."""
    rows = await pool.fetch(
        "SELECT j.status, j.error, j.runner FROM kagent_fork.whatif_job j JOIN kagent_fork.suite_run_case c "
        "ON j.experiment_id = ANY(c.experiment_ids) JOIN kagent_fork.suite_run r ON r.id = c.run_id "
        "WHERE r.suite_id = $1",
        suite_id,
    )
    return [dict(r) for r in rows]


async def test_the_gate_exits_worse_and_the_export_reimported_runs_the_same_cases(
    client: Any,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    """`suite run --fail-if-worse` exits 11 (its documented code) when an agent is worse than the source, 0 when
    none is; the suite exported as YAML and imported again runs the same cases (sessions and turns)."""
    user = new_user()
    # Five conversations: 0 of 4 is the fewest that Wilson's interval calls worse (its top, 49 %, under 50 %).
    suite_id, _ = await _suite_of(client, pool, user, 5)
    exported = await client.get(f"/api/suites/{suite_id}/export", headers=_h(user))
    imported = await client.post(
        "/api/suites/import", content=exported.content, headers={**_h(user), "Content-Type": "application/yaml"}
    )
    assert imported.status_code == 201, imported.text
    copy_id = imported.json()["data"]["id"]
    assert "exit codes:" in _cli(database_url, agents[0], "run", "--help").stdout
    worse = _cli(database_url, agents[0], "run", copy_id, "--agent", ref(FLAWED_AGENT), "--judge", ref(JUDGE),
                 "--fail-if-worse", "--user", user)  # fmt: skip
    assert worse.returncode == 11, worse.stdout + worse.stderr + str(await _jobs(pool, copy_id))
    assert f"| {ref(FLAWED_AGENT)} | 5 (5) |" in worse.stdout and "worse" in worse.stdout
    fine = _cli(database_url, agents[0], "run", copy_id, "--agent", ref(MARKER_AGENT), "--judge", ref(JUDGE),
                "--fail-if-worse", "--user", user, "--json")  # fmt: skip
    assert fine.returncode == 0, fine.stdout + fine.stderr
    run = json.loads(fine.stdout)
    assert run["status"] == "completed" and run["verdict"]["by_agent"][0]["outcome"] == "better"
    original = (await client.get(f"/api/suites/{suite_id}", headers=_h(user))).json()["data"]["cases"]
    ran = await pool.fetch(
        "SELECT e.source_session_id, e.rewind_before_invocation_id FROM kagent_fork.suite_run_case c "
        "JOIN kagent_fork.experiment e ON e.id = c.experiment_ids[1] WHERE c.run_id = $1 ORDER BY c.ordinal",
        run["id"],
    )
    assert [(r[0], r[1]) for r in ran] == [(c["session_id"], c["rewind_before_invocation_id"]) for c in original]
    listed = _cli(database_url, agents[0], "runs", copy_id, "--user", user)
    assert listed.returncode == 0 and listed.stdout.count(" completed: ") == 2, listed.stdout


async def test_a_retry_answers_the_same_run_and_a_cancel_ends_it(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    user = new_user()
    suite_id, _ = await _suite_of(eclient, pool, user, 3)
    _, seen = agents
    seen.hold_on_turn = 0  # the slow agent works until released or cancelled
    seen.release.clear()
    body = {"agents": [ref(SLOW)], "judge": {"agent": ref(JUDGE)}}
    headers = {**_h(user), "Idempotency-Key": f"k-{uuid.uuid4()}"}
    try:
        first = await eclient.post(f"/api/suites/{suite_id}/runs", json=body, headers=headers)
        again = await eclient.post(f"/api/suites/{suite_id}/runs", json=body, headers=headers)
        assert first.status_code == 202 and again.status_code == 200, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        run_id = first.json()["data"]["id"]
        assert again.json()["data"]["id"] == run_id
        assert await pool.fetchval("SELECT count(*) FROM kagent_fork.suite_run WHERE suite_id = $1", suite_id) == 1
        other = await eclient.post(f"/api/suites/{suite_id}/runs", json={**body, "repeats": 2}, headers=headers)
        assert other.status_code == 422 and "Idempotency-Key" in other.json()["error"]
        path = f"/api/suites/{suite_id}/runs/{run_id}"
        deadline = time.monotonic() + 30
        while not any(c["experiment_ids"] for c in (await eclient.get(path, headers=_h(user))).json()["data"]["cases"]):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        cancelled = await eclient.post(f"{path}/cancel", json={}, headers=_h(user))
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["data"]["status"] == "cancelled"
        assert (await eclient.post(f"{path}/cancel", json={}, headers=_h(user))).status_code == 409
        experiment = next(c["experiment_ids"][0] for c in cancelled.json()["data"]["cases"] if c["experiment_ids"])
        status = await pool.fetchval("SELECT status FROM kagent_fork.experiment WHERE id = $1", experiment)
        assert status == "cancelled"
    finally:
        seen.release.set()


async def test_a_replica_killed_mid_run_loses_nothing_and_sends_nothing_twice(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    """Two replicas on one database: the one driving the run stops (its runner's tasks cancelled, as at a kill)
    mid-run; the other takes the run over at its sweep, every case ends, and no agent got a message twice."""
    user = new_user()
    fast = dataclasses.replace(whatif_settings(settings, agents[0]), whatif_max_parallel=1)
    _, seen = agents
    async with service(fast, database_url) as second:
        async with service(fast, database_url) as first:
            suite_id, _ = await _suite_of(first, pool, user, 4)
            body = {"agents": [ref(MARKER_AGENT)], "judge": {"agent": ref(JUDGE)}}
            r = await first.post(f"/api/suites/{suite_id}/runs", json=body, headers=_h(user))
            assert r.status_code == 202, r.text
            run_id = r.json()["data"]["id"]
            path = f"/api/suites/{suite_id}/runs/{run_id}"
            deadline = time.monotonic() + 30
            while (await first.get(path, headers=_h(user))).json()["data"]["progress"]["judged"] < 1:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            driver = await pool.fetchval("SELECT runner FROM kagent_fork.suite_run WHERE id = $1", run_id)
        # the first replica is gone (its runner stopped where it was); the second takes the run over at its sweep
        done = await until_ended(second, path, user)
    # Every case ended and was started once. A message the dead replica had stamped sent but not yet sent when it
    # stopped is never sent again (so never twice): its judge call (or turn) ends without an answer, and that case
    # may end `failed`, saying why, rather than judged: at most the one case in flight at the kill.
    cases = [(c["status"], c["error"]) for c in done["cases"]]
    assert done["status"] == "completed" and all(len(c["experiment_ids"]) == 1 for c in done["cases"]), cases
    assert done["progress"]["judged"] >= 3 and all(s == "done" or e for s, e in cases), cases
    assert await pool.fetchval("SELECT runner FROM kagent_fork.suite_run WHERE id = $1", run_id) != driver
    sent = [m.message_id for m in seen.messages]
    assert len(sent) == len(set(sent)), "a message was sent twice"
    experiments_ = await pool.fetchval(
        "SELECT count(DISTINCT e) FROM kagent_fork.suite_run_case, unnest(experiment_ids) e WHERE run_id = $1", run_id
    )
    assert experiments_ == 4


async def test_behind_a_trusted_proxy_a_run_is_refused_and_writes_nothing(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    """kagent's A2A endpoint takes the user from the proxy's token, not X-User-Id: a run's own user could not be
    sent, so the run is refused (422) before anything is written, naming what to do instead."""
    from tests.test_identity import bearer

    user = new_user()
    proxied = dataclasses.replace(whatif_settings(settings, agents[0]), auth_mode="trusted-proxy")
    async with service(proxied, database_url) as client:
        token = {"Authorization": bearer({"sub": user})}
        conv = await seed(pool, dialect="v1", turns=2, user_id=user)
        case = {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[1]}
        made = await client.post("/api/suites", json={"name": "proxied", "cases": [case]}, headers=token)
        assert made.status_code == 201, made.text
        before = await pool.fetchval("SELECT count(*) FROM kagent_fork.suite_run")
        body = {"agents": [ref(V1)], "judge": {"agent": ref(JUDGE)}}
        r = await client.post(f"/api/suites/{made.json()['data']['id']}/runs", json=body, headers=token)
    assert r.status_code == 422 and "AUTH_MODE=unsecure" in r.json()["error"], r.text
    assert await pool.fetchval("SELECT count(*) FROM kagent_fork.suite_run") == before


async def test_an_agent_runs_a_suite_and_reads_its_verdict_over_mcp(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    """run_suite and suite_run_status: the same run and verdict as over HTTP, refusals as the HTTP body's."""
    from tests.support.live_server import live_server
    from tests.test_mcp_tools import mcp_session, ok, text_of

    user = new_user()
    with live_server(create_app(whatif_settings(settings, agents[0]), database_url)) as url:
        async with service(whatif_settings(settings, agents[0]), database_url) as client:
            suite_id, _ = await _suite_of(client, pool, user, 4)
        async with mcp_session(url, {"X-User-Id": user}) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert tools["run_suite"].annotations is not None and tools["run_suite"].annotations.openWorldHint
            assert tools["suite_run_status"].annotations is not None
            assert tools["suite_run_status"].annotations.readOnlyHint
            refused = await mcp.call_tool("run_suite", {"suite_id": suite_id, "agents": [], "judge_agent": ref(JUDGE)})
            assert refused.isError and "name the agents" in text_of(refused)
            run = ok(await mcp.call_tool(
                "run_suite", {"suite_id": suite_id, "agents": [ref(MARKER_AGENT)], "judge_agent": ref(JUDGE)}
            ))  # fmt: skip
            deadline = time.monotonic() + 120
            args = {"suite_id": suite_id, "run_id": run["id"]}
            while (found := ok(await mcp.call_tool("suite_run_status", args)))["status"] not in ENDED:
                assert time.monotonic() < deadline, found
                await asyncio.sleep(0.3)
            assert found["status"] == "completed" and found["verdict"]["by_agent"][0]["outcome"] == "better"
            md = await mcp.call_tool("suite_run_status", {**args, "format": "markdown"})
            assert text_of(md).startswith(f"# Suite run {run['id']} (completed)")


async def test_a_run_leaves_room_for_another_users_whatif(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    """A run starts its cases a few at a time (WHATIF_MAX_PARALLEL's worth of branches), so another user's what-if,
    started while the run has cases still waiting, ends before the run does: it waits behind the turns running,
    not behind the run's every branch."""
    user, other = new_user(), new_user()
    one = dataclasses.replace(whatif_settings(settings, agents[0]), whatif_max_parallel=1)
    async with service(one, database_url) as client:
        suite_id, _ = await _suite_of(client, pool, user, 8)
        body = {"agents": [ref(V1)], "judge": {"agent": ref(JUDGE)}}
        r = await client.post(f"/api/suites/{suite_id}/runs", json=body, headers=_h(user))
        assert r.status_code == 202, r.text
        path = f"/api/suites/{suite_id}/runs/{r.json()['data']['id']}"
        conv = await seed(pool, dialect="v1", turns=2, user_id=other)
        w = await client.post(
            f"/api/sessions/{conv.session_id}/whatif", headers=_h(other),
            json={"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": ref(V1)},
        )  # fmt: skip
        assert w.status_code == 202, w.text
        job = w.json()["data"]["job"]["id"]
        deadline = time.monotonic() + 60
        while (await client.get(f"/api/whatif/{job}", headers=_h(other))).json()["data"]["status"] == "running":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        meanwhile = (await client.get(path, headers=_h(user))).json()["data"]
        assert meanwhile["status"] == "running" and meanwhile["progress"]["judged"] < 8, meanwhile["progress"]
        assert (await until_ended(client, path, user))["status"] == "completed"


async def test_three_agents_and_the_control_three_times_each_is_one_experiment_an_agent(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    """3 agents and the control x 3 repeats is 12 branches a case, over an experiment's 8: a case is one experiment
    per agent (the control's too, the source's own agent again), each judged against the source alone."""
    user = new_user()
    convs = [await seed(pool, dialect="v1", turns=2, user_id=user, agent_id="kagent__NS__v1_agent") for _ in range(2)]
    cases = [{"session_id": c.session_id, "rewind_before_invocation_id": c.invocation_ids[1]} for c in convs]
    suite = (await eclient.post("/api/suites", json={"name": "wide", "cases": cases}, headers=_h(user))).json()["data"]
    body = {"agents": [ref(MARKER_AGENT), ref(V1), ref(FLAWED_AGENT)], "judge": {"agent": ref(JUDGE)}, "repeats": 3,
            "control": True}  # fmt: skip
    plan = await eclient.post(f"/api/suites/{suite['id']}/runs", json={**body, "dry_run": True}, headers=_h(user))
    assert plan.status_code == 200 and plan.json()["data"]["branches"] == 24, plan.text
    r = await eclient.post(f"/api/suites/{suite['id']}/runs", json=body, headers=_h(user))
    assert r.status_code == 202, r.text
    done = await until_ended(eclient, f"/api/suites/{suite['id']}/runs/{r.json()['data']['id']}", user)
    assert done["status"] == "completed" and done["progress"]["branches_done"] == 24, done["progress"]
    assert all(len(c["experiment_ids"]) == 4 for c in done["cases"])
    by = {(a["agent_ref"], a["control"]): a for a in done["verdict"]["by_agent"]}
    assert by[(ref(MARKER_AGENT), False)]["wins"] == 6 and by[(ref(FLAWED_AGENT), False)]["losses"] == 6
    control = done["verdict"]["control"]
    assert control["agent_ref"] == ref(V1) and control["control"] and control["ties"] == 6
    assert "Noise floor" in done["verdict"]["headline"]
