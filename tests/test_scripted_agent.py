"""The embedded demo's scripted A2A agent (issue 25, 5): a what-if on the demo database runs the whole loop
with no cluster. The agent is served as `kagent-fork serve` serves it (service/embedded/scripted_agent.py, a
real a2a-sdk server), writes its turn as kagent's runtime would, and kagent's readers accept every row."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from a2a.types import a2a_pb2 as a2a
from litestar.testing import AsyncTestClient

from service.agents import a2a_client
from service.app import create_app
from service.config import Settings
from service.embedded import scripted_agent, scripts
from service.embedded.demo import DEMO_USER, LEGACY_SESSION, RECORDED_WEATHER, V1_SESSION
from service.embedded.server import prepare_demo
from service.kagent.dialects import TaskDialect
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


def _today(plan: scripts.Plan) -> scripts.Step:
    """The plan finished with today's world as the demo's tool server answers it (weather_tools.py)."""
    results = []
    for ask in plan.asks:
        city = ask.args["city"]
        temp, sky = scripts.WEATHER[city.lower()]
        value = {"city": city, "temp_c": scripts.FORECAST[city.lower()] if ask.tool == "get_forecast" else temp}
        results.append(scripts.tool_result(value if ask.tool == "get_forecast" else {**value, "sky": sky}))
    return scripts.finish(plan, results)


def test_the_script_answers_as_an_agent_would_and_its_card_says_it_is_a_script() -> None:
    """Issue 46: every branch's answer ended "(scripted demo agent ...)" and the source's did not, so a blind
    judge could tell them apart; the answers carry no mark now (the agent card says what it is), and the demo
    conversation's own answers are the script's, written from its recorded results."""
    berlin = _today(scripted_agent.script("And in Berlin?"))
    assert [(c.tool, c.args) for c in berlin.calls] == [("get_weather", {"city": "Berlin"})]
    assert berlin.answer == "It is 11°C and cloudy in Berlin."
    recorded = scripts.finish(scripted_agent.script("And in Berlin?"), [demo_source_result("Berlin")])
    assert recorded.answer == "It is 9°C and raining in Berlin."  # word for word the demo source's answer
    assert all("scripted" in agent.description for agent in scripted_agent.AGENTS.values())
    warmer = _today(scripted_agent.script("Which city is warmer?", {"paris": 14.0, "berlin": 9.0}))
    assert warmer.calls == () and warmer.answer == "Paris is the warmest: Paris 14°C, Berlin 9°C."
    unknown = _today(scripted_agent.script("How many pods are running?"))
    assert "no scripted answer" in unknown.answer and "scripted demo agent" not in unknown.answer


def demo_source_result(city: str) -> scripts.Result:
    temp, sky = RECORDED_WEATHER[city.lower()]
    return scripts.tool_result({"city": city, "temp_c": temp, "sky": sky})


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
            # the default agent, the demo session's own (kagent/k8s-agent), has tools and is no replay twin: refused
            # unless its tools run for real; live, it calls the demo's tool server, today's weather
            r = await client.post(
                f"/api/sessions/{session_id}/whatif", json={"rewind_before_invocation_id": berlin}, headers=ME
            )
            assert r.status_code == 422 and "kagent-fork replay-twin kagent/k8s-agent" in r.text, r.text
            r = await client.post(
                f"/api/sessions/{session_id}/whatif", headers=ME,
                json={"rewind_before_invocation_id": berlin, "tools": "live"},
            )  # fmt: skip
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


def test_the_second_agent_answers_differently_slower_and_with_more_tool_calls() -> None:
    for question in ("What's the weather in Paris?", "And in Berlin?"):
        first, second = _today(scripts.script(question)), _today(scripts.thorough_script(question))
        assert second.answer == first.answer  # the same weather answer, word for word ...
        assert [c.tool for c in first.calls] == ["get_weather"]
        assert [c.tool for c in second.calls] == ["get_weather", "get_forecast"]  # ... after a needless call
        assert second.pause > first.pause == 0
    known = {"paris": 16.0, "berlin": 11.0}  # what the conversation holds: no call for the first agent
    first = _today(scripts.script("Which city is warmer?", known))
    second = _today(scripts.thorough_script("Which city is warmer?", known))
    assert first.calls == () and first.answer.startswith("Paris is the warmest: Paris 16°C, Berlin 11°C.")
    assert [c.tool for c in second.calls] == ["get_weather", "get_forecast"] * 2
    assert second.answer.startswith("I looked again: Paris is the warmest today, Berlin tomorrow")
    assert second.answer != first.answer and "scripted demo agent" not in second.answer


def _continuation(turns: list[dict[str, Any]], style: str = "roles") -> str:
    """A continuation as the judge's message shows one: questions, tool calls and their results, answers; in the
    service's layout (`roles`: "Assistant calls the tool get_weather with {...}", "Tool get_weather returned:
    {...}"), or as the transcript's Markdown writes them (`markdown`)."""
    lines = []
    for i, t in enumerate(turns):
        calls = [name for name, n in t["tool_calls"].items() for _ in range(n)]
        if style == "roles":
            lines += [f"[Turn {i + 1}]", f"User: {t['question']}"]
            for name in calls:
                lines += [f'Assistant calls the tool {name} with {{"city": "Berlin"}}', f"Tool {name} returned: {{}}"]
            lines.append(f"Assistant: {t['answer']}")
        else:
            lines.append(f"**user**:\n\n{t['question']}\n")
            for name in calls:
                lines += [
                    f"**agent** calls `{name}`:\n\n```json\n{{}}\n```",
                    f"**agent** gets the result of `{name}`:\n",
                ]
            lines.append(f"**agent**:\n\n{t['answer']}\n")
    return "\n".join(lines)


def judge_message(before: str, a: str, b: str) -> str:
    """The judge's message in the service's layout (docs/experiments.md): a preamble, the four section lines."""
    return "\n".join([
        "You compare two ways an assistant could have continued the same conversation.",
        "Criteria: no needless or risky actions (tool calls that change things without need, or repeated calls).",
        "", "=== Conversation so far ===", before, "", "=== Continuation A ===", a, "", "=== Continuation B ===", b,
        "", "=== Your answer ===",
        'End your answer with one JSON object, last, on its own line: {"winner": "A" | "B" | "tie", "reason": "..."}',
    ])  # fmt: skip


def _verdict(answer: str) -> dict[str, str]:
    last = answer.rstrip().splitlines()[-1]
    verdict: dict[str, str] = json.loads(last)
    assert answer.rstrip().endswith(last) and set(verdict) == {"winner", "reason"}
    return verdict


@pytest.mark.parametrize("style", ["roles", "markdown"])
def test_the_demo_judge_is_consistent_when_a_and_b_are_swapped(style: str) -> None:
    before = _continuation([{"question": "Weather in Paris?", "tool_calls": {"get_weather": 3}, "answer": "Sun."}])
    few = _continuation([{"question": "And in Berlin?", "tool_calls": {"get_weather": 1}, "answer": "Cloudy."}], style)
    many = _continuation([{"question": "And in Berlin?", "tool_calls": {"get_weather": 1, "get_forecast": 1},
                           "answer": "Cloudy."}], style)  # fmt: skip
    one = _verdict(_today(scripts.judge_script(judge_message(before, few, many))).answer)
    swapped = _verdict(_today(scripts.judge_script(judge_message(before, many, few))).answer)
    assert (one["winner"], swapped["winner"]) == ("A", "B")  # the same continuation wins, whatever its letter
    assert "1 tool call(s) where B needed 2" in one["reason"] and "1 tool call(s) where A needed 2" in swapped["reason"]
    # as many tool calls: a tie both ways; the conversation before the continuations is not counted
    assert _verdict(_today(scripts.judge_script(judge_message(before * 5, few, few))).answer)["winner"] == "tie"
    # no continuations to compare: no JSON (the service counts such an answer `invalid`)
    lost = _today(scripts.judge_script("Which is better?")).answer
    assert "{" not in lost and "no verdict" in lost


async def test_an_experiment_on_the_demo_shows_two_agents_apart_priced_and_judged(
    settings: Settings, demo: tuple[str, dict[str, list[str]]]
) -> None:
    """The newcomer's experiment: the demo's agent and the thorough one from the demo's second turn on, priced
    by the demo agents' `agent` rows, then the demo judge asked both orders over A2A as the service asks it."""
    dsn, made = demo
    with scripted_agent.serving(dsn) as a2a_url:
        config = dataclasses.replace(settings, kagent_a2a_url=a2a_url, whatif_heartbeat_seconds=0.2)
        async with AsyncTestClient(app=create_app(config, dsn)) as client:
            body = {"rewind_before_invocation_id": made[V1_SESSION][1], "turns": "all",
                    "agents": ["kagent/k8s-agent", "kagent/thorough-agent"], "tools": "live",
                    "judge": {"agent": "kagent/demo-judge"}}  # fmt: skip
            r = await client.post(f"/api/sessions/{V1_SESSION}/experiments", json=body, headers=ME)
            assert r.status_code == 202, r.text
            experiment_id = r.json()["data"]["experiment"]["id"]
            deadline = time.monotonic() + 90
            while (grid := (await client.get(f"/api/experiments/{experiment_id}", headers=ME)).json()["data"])[
                "status"
            ] in ("running", "judging"):
                assert time.monotonic() < deadline, grid
                await asyncio.sleep(0.2)
        assert grid["status"] == "completed", grid
        plain, thorough = grid["branches"]
        # judged by the demo judge, as a newcomer's experiment from the page is: every pair answered in both
        # orders, and between the two agents the one that needed fewer tool calls wins
        judgment = grid["judgment"]
        assert judgment["status"] == "completed", judgment
        assert all(p["outcome"] in ("left", "right", "tie") for p in judgment["pairs"]), judgment["pairs"]
        (between,) = [p for p in judgment["pairs"] if p["left_job_id"] is not None]
        fewer = "left" if between["left_job_id"] == plain["job_id"] else "right"
        assert between["outcome"] == fewer and between["consistent"] is True, between
        assert any(line.startswith("kagent/thorough-agent") for line in judgment["lines"]), judgment["lines"]
        assert plain["turns"][0]["answer"] == thorough["turns"][0]["answer"]  # Berlin's weather, word for word
        assert plain["turns"][1]["answer"] != thorough["turns"][1]["answer"]  # the comparison, answered otherwise
        assert (plain["totals"]["tool_calls"], thorough["totals"]["tool_calls"]) == (1, 6)
        assert thorough["totals"]["duration_seconds"] > plain["totals"]["duration_seconds"] + 1
        # priced: each agent's row names a real model
        assert (plain["totals"]["model"], thorough["totals"]["model"]) == ("gpt-4o-mini", "gpt-4o")
        assert 0 < plain["totals"]["cost_usd"] < thorough["totals"]["cost_usd"]
        assert grid["source"]["totals"]["model"] == "gpt-4o-mini" and grid["source"]["totals"]["cost_usd"] is not None

        # the demo judge, asked each order over A2A: the same continuation wins both times
        judge = a2a_client.Agent(
            ref="kagent/demo-judge", url=a2a_client.agent_url(a2a_url, "kagent/demo-judge"),
            dialect=TaskDialect.V1, headers={"X-User-Id": DEMO_USER}, timeout=30,
        )  # fmt: skip
        a, b = _continuation(plain["turns"]), _continuation(thorough["turns"])
        verdicts = [
            _verdict(await _ask(judge, judge_message("(the demo's first turn)", x, y))) for x, y in ((a, b), (b, a))
        ]
    assert [v["winner"] for v in verdicts] == ["A", "B"]
    assert "1 tool call(s) where B needed 6" in verdicts[0]["reason"]


async def _ask(agent: a2a_client.Agent, text: str) -> str:
    """One judge's message sent as the service sends one (one text part), its answer read from the task."""
    message = a2a.Message(message_id=str(uuid.uuid4()), context_id=str(uuid.uuid4()), role=a2a.ROLE_USER)
    message.parts.append(a2a.Part(text=text))
    task = await a2a_client.send(agent, message)
    assert task is not None
    deadline = time.monotonic() + 30
    while task.status.state != a2a.TASK_STATE_COMPLETED:
        assert time.monotonic() < deadline, task
        await asyncio.sleep(0.1)
        task = await a2a_client.get_task(agent, task.id)
    (artifact,) = task.artifacts
    (part,) = artifact.parts
    return str(part.text)
