"""Issue 46, item 4: the embedded demo shows the arms' tools story. Its agents' rows name the demo's own MCP tool
server (a read, the weather, and one that acts, an alert) as kagent configures an agent's tools, with the port of
each start; the scripted agents really call the tools their row names and record the calls as kagent's runtime
does; the demo counts its reads as reads on the operator's word alone; a replay of its agent is refused unless
its tools run live, and its replay twin replays the source's world from the recording. On the real PostgreSQL,
the demo's real servers and the service on a port of its own (the twin's tools reach its replay endpoint)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from service.app import create_app
from service.config import Settings
from service.doors.cli import _demo_twin
from service.embedded import scripted_agent
from service.embedded.demo import DEMO_USER, TWIN, V1_SESSION
from service.embedded.server import prepare_demo
from service.kagent.store.agents import agent_row_id
from tests.conftest import create_database, drop_database
from tests.support.live_server import bound_socket, live_server
from tests.test_startup import _serving

ME = {"X-User-Id": DEMO_USER}
SOURCE = "kagent/k8s-agent"


@dataclasses.dataclass(frozen=True)
class Running:
    dsn: str
    service: str
    demo: scripted_agent.Demo
    turns: list[str]  # the demo-v1-session's invocation ids


@pytest.fixture(scope="module")
def running(server_url: str) -> Iterator[Running]:
    """The demo database, its agents and tool server, its twin's row, and the service on a port of its own that
    knows its replay endpoint, as `serve` sets them up."""
    dsn = asyncio.run(create_database(server_url))
    try:
        made = dict(asyncio.run(prepare_demo(dsn)))
        demo = scripted_agent.start_demo(dsn)
        sock = bound_socket()
        service = f"http://127.0.0.1:{sock.getsockname()[1]}"
        asyncio.run(_demo_twin(dsn, f"{service}/replay/mcp"))
        word = (("default", ""), (demo.tools_url, "get_weather"), (demo.tools_url, "get_forecast"))
        config = Settings(
            database_url=dsn, kagent_a2a_url=demo.a2a_url, replay_mcp_url=f"{service}/replay/mcp",
            replay_read_only_tools=word, whatif_heartbeat_seconds=0.2,
        )  # fmt: skip
        try:
            with live_server(create_app(config, dsn), sock=sock):
                yield Running(dsn, service, demo, made[V1_SESSION])
        finally:
            demo.stop()
    finally:
        asyncio.run(drop_database(server_url, dsn))


@pytest.fixture
async def http(running: Running) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=running.service, headers=ME, timeout=30) as client:
        yield client


async def _config(dsn: str, ref: str) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return json.loads(await conn.fetchval("SELECT config::text FROM agent WHERE id = $1", agent_row_id(ref)))
    finally:
        await conn.close()


async def _job(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    started = await http.post(f"/api/sessions/{V1_SESSION}/whatif", json=body)
    assert started.status_code == 202, started.text
    job_id = started.json()["data"]["job"]["id"]
    deadline = time.monotonic() + 60
    while (job := (await http.get(f"/api/whatif/{job_id}")).json()["data"])["status"] == "running":
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.1)
    assert job["status"] == "completed", job
    return dict(job)


async def _grid(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    started = await http.post(f"/api/sessions/{V1_SESSION}/experiments", json=body)
    assert started.status_code == 202, started.text
    path = f"/api/experiments/{started.json()['data']['experiment']['id']}"
    deadline = time.monotonic() + 60
    while (grid := (await http.get(path)).json()["data"])["status"] in ("running", "judging"):
        assert time.monotonic() < deadline, grid
        await asyncio.sleep(0.1)
    assert grid["status"] == "completed", grid
    return dict(grid)


async def test_the_demo_agents_rows_name_its_tool_server_as_kagent_configures_tools(running: Running) -> None:
    config = await _config(running.dsn, SOURCE)
    (server,) = config["http_tools"]
    assert server["params"]["url"] == running.demo.tools_url  # the port of this start
    assert server["tools"] == ["get_weather", "get_forecast", "set_alert"]
    (reads_only,) = (await _config(running.dsn, "kagent/scripted-agent"))["http_tools"]
    assert reads_only["tools"] == ["get_weather", "get_forecast"]
    # the twin's row, as kagent's controller renders `kagent-fork replay-twin kagent/k8s-agent`'s manifests
    (stand_in,) = (await _config(running.dsn, TWIN))["http_tools"]
    assert stand_in["params"]["url"].startswith(f"{running.service}/replay/mcp/kagent/k8s-agent/")
    assert stand_in["tools"] == server["tools"] and "X-User-Id" in stand_in["allowed_headers"]


def test_each_start_writes_its_tool_servers_port_and_stopping_puts_the_rows_back(running: Running) -> None:
    before = asyncio.run(_config(running.dsn, SOURCE))
    again = scripted_agent.start_demo(running.dsn)
    try:
        assert again.tools_url != running.demo.tools_url
        assert asyncio.run(_config(running.dsn, SOURCE))["http_tools"][0]["params"]["url"] == again.tools_url
    finally:
        again.stop()
    assert asyncio.run(_config(running.dsn, SOURCE)) == before  # the running demo's servers, named again


async def test_the_arms_tools_by_class_on_the_operators_word_never_on_the_hint_alone(
    running: Running, http: httpx.AsyncClient
) -> None:
    body = {"rewind_before_invocation_id": running.turns[1], "agents": [SOURCE, TWIN], "dry_run": True}
    plan = (await http.post(f"/api/sessions/{V1_SESSION}/experiments", json=body)).json()["data"]
    source, twin = plan["arms"]
    for arm in (source, twin):
        assert [t["name"] for t in arm["reads"]] == ["get_forecast", "get_weather"], arm
        assert [t["name"] for t in arm["acts"]] == ["set_alert"], arm
        assert all("REPLAY_READ_ONLY_TOOLS" in t["why"] for t in arm["reads"])
    assert (source["twin"], twin["twin"]) == (False, True)
    assert "kagent-fork replay-twin kagent/k8s-agent" in plan["refused"]
    # without the operator's word the same tools act, whatever readOnlyHint the demo's server says
    bare = await asyncio.to_thread(_dry_run_without_word, running, body)
    assert [t["name"] for t in bare["arms"][0]["acts"]] == ["get_forecast", "get_weather", "set_alert"]
    assert all("a hint only" in t["why"] for t in bare["arms"][0]["acts"] if t["name"] != "set_alert")


def _dry_run_without_word(running: Running, body: dict[str, Any]) -> dict[str, Any]:
    settings = Settings(database_url=running.dsn, kagent_a2a_url=running.demo.a2a_url)
    with live_server(create_app(settings, running.dsn)) as base:
        answer = httpx.post(f"{base}/api/sessions/{V1_SESSION}/experiments", json=body, headers=ME, timeout=30)
    data: dict[str, Any] = answer.json()["data"]
    return data


async def test_a_replay_refuses_the_agent_that_can_act_and_live_runs_it(
    running: Running, http: httpx.AsyncClient
) -> None:
    body = {"rewind_before_invocation_id": running.turns[1]}
    refused = await http.post(f"/api/sessions/{V1_SESSION}/whatif", json=body)
    assert refused.status_code == 422
    assert "kagent-fork replay-twin kagent/k8s-agent" in refused.json()["error"]
    acts = await http.post(f"/api/sessions/{V1_SESSION}/whatif", json={**body, "reads": "live"})
    assert acts.status_code == 422 and "(set_alert)" in acts.json()["error"]
    job = await _job(http, {**body, "tools": "live"})
    # live: today's weather from the demo's tool server, a drift from the source's "9°C and raining"
    assert job["result"]["last_agent_text"] == "It is 11°C and cloudy in Berlin."
    assert job["result"]["tool_calls"] == {"get_weather": 1}


async def test_a_twin_replays_the_sources_world_and_its_answers_are_the_sources_words(
    running: Running, http: httpx.AsyncClient
) -> None:
    grid = await _grid(http, {"rewind_before_invocation_id": running.turns[1], "turns": "all", "agents": [TWIN]})
    (branch,) = grid["branches"]
    source = [t["answer"] for t in grid["source"]["turns"]]
    assert source == ["It is 9°C and raining in Berlin.", "Paris is the warmest: Paris 14°C, Berlin 9°C."]
    assert [t["answer"] for t in branch["turns"]] == source  # nothing tells the branch from the source
    (recorded, compared) = (t["tool_policy"] for t in branch["turns"])
    assert (recorded["recorded"], recorded["missed"], recorded["refused"]) == (1, 0, 0)
    assert compared["recorded"] == compared["missed"] == compared["refused"] == 0  # from what the chat holds


async def test_a_twin_counts_recorded_missed_and_refused_calls_and_the_acting_tool_gets_nothing(
    running: Running, http: httpx.AsyncClient
) -> None:
    body = {"rewind_before_invocation_id": running.turns[1], "agents": [TWIN],
            "message": {"text": "Set a weather alert for Berlin and London"}}  # fmt: skip
    grid = await _grid(http, body)
    (branch,) = grid["branches"]
    counts = branch["turns"][0]["tool_policy"]
    # Berlin's weather the source saw, London's it never asked for, and both alerts refused
    assert (counts["recorded"], counts["missed"], counts["refused"]) == (1, 1, 2), counts
    assert {c["tool"] for c in counts["refused_calls"]} == {"set_alert"}
    answer = branch["turns"][0]["answer"]
    assert answer.startswith("It is 9°C and raining in Berlin. I could not set an alert for Berlin")
    assert running.demo.alerts.set == []
    # the same asked live: the alerts are set for real
    live = await _grid(http, {**body, "agents": [SOURCE], "tools": "live"})
    assert live["branches"][0]["turns"][0]["answer"].startswith("It is 11°C and cloudy in Berlin. I set a weather")
    assert sorted(c for c, _ in running.demo.alerts.set) == ["Berlin", "London"]


def test_serve_on_the_demo_shows_the_story(tmp_path: Path) -> None:
    """`./scripts/serve` (serve on the embedded demo): its log names the tool server and the twin; a replay of the
    demo's agent is refused naming the twin, runs with tools live, and the twin replays the source's world; the
    CLI's demo serves a replay endpoint of its own for the twin."""
    proc, pgdata, port = _serving(tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        turns = httpx.get(f"{base}/api/sessions/demo-v1-session/invocations", timeout=30).json()["data"]
        body = {"rewind_before_invocation_id": turns[1]["invocation_id"]}
        refused = httpx.post(f"{base}/api/sessions/demo-v1-session/whatif", json=body, timeout=30)
        assert refused.status_code == 422 and "kagent-fork replay-twin kagent/k8s-agent" in refused.text
        answers = {}
        for name, extra in (("live", {"tools": "live"}), ("twin", {"agent_ref": TWIN})):
            started = httpx.post(f"{base}/api/sessions/demo-v1-session/whatif", json={**body, **extra}, timeout=30)
            assert started.status_code == 202, started.text
            path = f"{base}/api/whatif/{started.json()['data']['job']['id']}"
            deadline = time.monotonic() + 60
            while (job := httpx.get(path, timeout=10).json()["data"])["status"] == "running":
                assert time.monotonic() < deadline, job
                time.sleep(0.2)
            answers[name] = (job["result"]["last_agent_text"], job["replayed"])
        assert answers["live"] == ("It is 11°C and cloudy in Berlin.", None)
        assert answers["twin"][0] == "It is 9°C and raining in Berlin." and answers["twin"][1]["recorded"] == 1
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DATABASE_URL", "KAGENT_A2A_URL")}
        env["KAGENT_FORK_DATA_DIR"] = str(pgdata)
        cli = subprocess.run(
            [sys.executable, "-m", "service", "whatif", "demo-v1-session", "--before", turns[1]["invocation_id"],
             "--agent", TWIN], env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        assert "answer: 'It is 9°C and raining in Berlin.'" in cli.stdout, cli.stdout
        assert "reads get_forecast, get_weather; acts set_alert" in cli.stdout, cli.stdout
        # the twin printed from the demo agent's row (it exited 6 when the demo's agents declared no tools)
        printed = subprocess.run(
            [sys.executable, "-m", "service", "replay-twin", SOURCE, "--endpoint", f"{base}/replay/mcp"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert printed.returncode == 0, printed.stderr
        assert f'url: "{base}/replay/mcp/kagent/k8s-agent/127-' in printed.stdout
        assert '- "set_alert"' in printed.stdout and 'name: "k8s-agent-replay"' in printed.stdout
        # the CLI's demo put the rows back: serve's twin still answers through serve's own endpoint
        again = httpx.post(f"{base}/api/sessions/demo-v1-session/whatif", json={**body, "agent_ref": TWIN}, timeout=30)
        assert again.status_code == 202, again.text
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    output = proc.stdout.read() if proc.stdout else ""
    assert "demo MCP tool server: http://127.0.0.1:" in output and "acts: set_alert" in output
    assert f"demo replay twin: {TWIN}, its tools the replay endpoint http://127.0.0.1:{port}/replay/mcp" in output


async def test_the_page_shows_the_demo_agents_tools_refuses_it_and_replays_its_twin(running: Running) -> None:
    """What a person sees on the demo's page (Chromium): the experiment form's dry run shows the demo agent's tools
    by class and the refusal naming its twin; started on the twin, the grid counts its recorded calls."""
    from playwright.async_api import async_playwright, expect

    from tests.test_explorer_page import accept, chromium

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            tab = await browser.new_page(viewport={"width": 1280, "height": 800})
            problems: list[str] = []
            tab.on("pageerror", lambda error: problems.append(str(error)))
            tab.on("dialog", accept)
            await tab.goto(f"{running.service}/ui/#session={V1_SESSION}&user={DEMO_USER}")
            turn = tab.locator("#turns > li.turn").nth(1)
            await turn.get_by_role("button", name="Experiment").click()
            form = turn.locator(".experiment-form")
            await expect(form.locator(".exp-tools")).to_have_value("replay")
            await form.locator(".exp-agents").fill(SOURCE)
            await form.get_by_role("button", name="Start the experiment").click()
            await expect(form.locator(".exp-refusal")).to_contain_text(
                "Not started: tools: the agent kagent/k8s-agent (set_alert, get_forecast, get_weather) has tools"
            )
            await expect(form.locator(".exp-refusal")).to_contain_text("kagent-fork replay-twin kagent/k8s-agent")
            await expect(form.locator(".exp-arms")).to_contain_text(
                "kagent/k8s-agent: reads get_forecast, get_weather; acts set_alert"
            )
            await form.locator(".exp-agents").fill(TWIN)
            await form.get_by_role("button", name="Start the experiment").click()
            await expect(tab.locator("#status")).to_have_text("Experiment completed", timeout=30_000)
            grid = tab.locator("#experiment table.experiment")
            await expect(grid).to_contain_text("It is 9°C and raining in Berlin.")
            await expect(grid).to_contain_text("tools: 1 recorded, 0 live, 0 missed, 0 refused")
            assert problems == []
        finally:
            await browser.close()
