"""The embedded demo's scripted A2A agent (issue 25, 5): a what-if on the demo database runs the whole loop
with no cluster. The agent is served as `kagent-fork serve` serves it (service/embedded/scripted_agent.py, a
real a2a-sdk server), writes its turn as kagent's runtime would, and kagent's readers accept every row."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.config import Settings
from service.embedded import scripted_agent
from service.embedded.demo import DEMO_USER, LEGACY_SESSION, V1_SESSION
from service.embedded.server import prepare_demo
from tests.conftest import create_database, drop_database
from tests.support import kagent_reads

ME = {"X-User-Id": DEMO_USER}


@pytest.fixture(scope="module")
async def demo(server_url: str) -> AsyncIterator[tuple[str, dict[str, list[str]]]]:
    url = await create_database(server_url)
    try:
        made = await prepare_demo(url)
        yield url, dict(made)
    finally:
        await drop_database(server_url, url)


def test_the_script_answers_and_says_it_is_a_script() -> None:
    berlin = scripted_agent.script("And in Berlin?")
    assert berlin.tool == "get_weather" and berlin.args == {"city": "Berlin"}
    assert berlin.answer.startswith("It is 11°C and cloudy in Berlin.") and scripted_agent.SIGNATURE in berlin.answer
    warmer = scripted_agent.script("Which city is warmer?")
    assert warmer.tool is None and warmer.answer.startswith("Paris is the warmest")
    unknown = scripted_agent.script("How many pods are running?")
    assert "no scripted answer" in unknown.answer and scripted_agent.SIGNATURE in unknown.answer


@pytest.mark.parametrize("session_id", [LEGACY_SESSION, V1_SESSION])
async def test_a_whatif_on_the_demo_runs_the_whole_loop(
    settings: Settings, demo: tuple[str, dict[str, list[str]]], session_id: str
) -> None:
    dsn, made = demo
    berlin = made[session_id][1]  # turn 2, "And in Berlin?"
    with scripted_agent.serving(dsn) as a2a_url:
        async with httpx.AsyncClient() as http:
            card = await http.get(f"{a2a_url}/kagent/k8s-agent/.well-known/agent-card.json")
        assert card.status_code == 200 and "scripted" in card.json()["description"]
        config = dataclasses.replace(settings, kagent_a2a_url=a2a_url, whatif_heartbeat_seconds=0.2)
        async with AsyncTestClient(app=create_app(config, dsn)) as client:
            # the default agent: the demo session's own (kagent/k8s-agent), answered by the script
            r = await client.post(
                f"/api/sessions/{session_id}/whatif", json={"rewind_before_invocation_id": berlin}, headers=ME
            )
            assert r.status_code == 202, r.text
            job, fork = r.json()["data"]["job"], r.json()["data"]["session"]
            assert fork["name"].startswith("What-if: kagent/k8s-agent answers turn 2 of")
            done = await _ended(client, job["id"])
            assert done["status"] == "completed", done["error"]
            assert done["result"]["tool_calls"] == {"get_weather": 1}
            assert done["result"]["last_agent_text"].startswith("It is 11°C and cloudy in Berlin.")
            compared = await client.get(f"/api/sessions/{session_id}/compare/{fork['id']}", headers=ME)
            row = compared.json()["data"]["aligned"][0]
            assert row["left"]["question"] == row["right"]["question"] == "And in Berlin?"
            assert row["left"]["answer"] == "It is 9°C and raining in Berlin."
            assert row["right"]["answer"] == done["result"]["last_agent_text"]
    # kagent reads every row the agent wrote, in the session's own dialect
    conn = await asyncpg.connect(dsn)
    try:
        tasks = await kagent_reads.list_tasks_for_session(conn, fork["id"], DEMO_USER)
        events = await kagent_reads.list_events_for_session_asc(conn, fork["id"], DEMO_USER)
    finally:
        await conn.close()
    line = "main" if session_id == V1_SESSION else "0.10.x"
    for task in tasks:
        kagent_reads.parse_task(task["data"], task["protocol_version"], line=line)
    assert {t["protocol_version"] for t in tasks} == ({"1.0"} if session_id == V1_SESSION else {None})
    for event in events:
        kagent_reads.parse_event(event["data"])
    assert len(tasks) == 2 and len(events) == 4 + 4  # turn 1 copied, then the scripted turn


async def _ended(client: Any, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        job: dict[str, Any] = (await client.get(f"/api/whatif/{job_id}", headers=ME)).json()["data"]
        if job["status"] != "running":
            return job
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.1)
