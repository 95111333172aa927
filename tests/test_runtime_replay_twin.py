"""kagent's own runtime as a replay twin (docs/replay-twins.md): kagent-adk 0.10.4 whose config's `http_tools`
point at kagent-fork's replay endpoint instead of the tool server, replaying a conversation the real agent had.

The source's agent is the runtime tests' `kagent/adk-agent` (its tool server is the real one, tests/support/
tool_server.py); the twin, `kagent/adk-twin`, is a second kagent-adk process with the same model and prompt, its
one MCP server `/replay/mcp/kagent/adk-agent/<server>` on the live service. Turns reach it through the stand-in
for kagent's controller, which forwards only X-User-Id and Authorization, as kagent's does: nothing names the
branch on the way, so the runner's lease says which turn a call is (service/agents/replay/lease.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

import asyncpg
import httpx
import pytest
from playwright.async_api import async_playwright, expect

from service.agents.replay.lease import server_key
from service.app import create_app
from service.config import Settings
from tests.helpers import new_user
from tests.support.kagent_controller import register_agent
from tests.support.live_server import bound_socket, live_server
from tests.support.runtimes import kagent_adk, running_runtime
from tests.support.scripted_model import call, say
from tests.test_explorer_page import chromium
from tests.test_runtime_kagent_adk import (
    AGENT_REF,
    INSTRUCTION,
    Runtime,
    adk,
    api,
    conversation,
    experiment_done,
    http,
    scripted_model,
    stand_in,
    tag,
    tool_server,
    turns,
)

# The runtime tests' fixtures, shared (imported, they are this module's too).
FIXTURES = (adk, http, scripted_model, stand_in, tool_server)
TWIN_REF = "kagent/adk-twin"


def twin_config(rt: Runtime, service: str) -> dict[str, Any]:
    """The twin's config.json as kagent's controller renders the Agent `kagent-fork replay-twin` prints: the
    source's model and prompt, its tool server replaced by the replay endpoint, which gets the caller's
    Authorization and X-User-Id."""
    endpoint = f"{service}/replay/mcp/{AGENT_REF}/{server_key(rt.tools.url)}"
    return {
        "model": {"type": "openai", "model": "scripted-model", "base_url": rt.model.url},
        "description": "kagent-fork's test agent, as a replay twin",
        "instruction": INSTRUCTION,
        "http_tools": [
            {
                "params": {"url": endpoint, "timeout": 30},
                "tools": ["lookup", "delete_pod", "scale", "status"],
                "require_approval": ["delete_pod"],
                "allowed_headers": ["Authorization", "X-User-Id"],
            }
        ],
    }


@pytest.fixture(scope="module")
async def twin(adk: Runtime, pool: asyncpg.Pool, settings: Settings, database_url: str) -> AsyncIterator[Runtime]:
    """The twin's runtime, and a service of its own that knows its replay endpoint (REPLAY_MCP_URL), so that the
    twin is one: the runtime tests' `adk` with that service in place of theirs."""
    sock = bound_socket()
    service = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = twin_config(adk, service)
    async with pool.acquire() as conn:
        await register_agent(conn, TWIN_REF, config)
    with ExitStack() as stack:
        process = await asyncio.to_thread(
            stack.enter_context, running_runtime(kagent_adk(TWIN_REF, kagent_url=adk.controller.url, config=config))
        )
        adk.controller.register(TWIN_REF, process.url)
        # The operator vouches for the tool server's readOnlyHint (REPLAY_TRUSTED_SERVERS): lookup and status read.
        own = replace(
            settings, kagent_a2a_url=adk.controller.a2a_url, replay_mcp_url=f"{service}/replay/mcp",
            replay_trusted_servers=(adk.tools.url,),
        )  # fmt: skip
        stack.enter_context(live_server(create_app(own, database_url), sock=sock))
        yield replace(adk, service=service)


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in request["messages"] if m["role"] == "tool"]


async def replay_calls(pool: asyncpg.Pool, job_id: str) -> list[tuple[int, str, dict[str, Any], str, str]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT ordinal, tool, arguments::text AS arguments, tool_class, answered_from "
            "FROM kagent_fork.replay_call WHERE job_id = $1 ORDER BY id",
            job_id,
        )
    return [(r["ordinal"], r["tool"], json.loads(r["arguments"]), r["tool_class"], r["answered_from"]) for r in rows]


async def replay_on_twin(
    rt: Runtime, client: httpx.AsyncClient, source: str, user: str, *, body: dict[str, Any] | None = None,
    **headers: str,
) -> dict[str, Any]:  # fmt: skip
    listed = await turns(rt, client, source, user)
    started = await api(
        rt, client, "POST", f"/api/sessions/{source}/experiments", user, headers=headers,
        json={"rewind_before_invocation_id": listed[0]["invocation_id"], "agents": [TWIN_REF], "turns": "all",
              **(body or {})},
    )  # fmt: skip
    done = await experiment_done(rt, client, started["experiment"]["id"], user)
    assert done["status"] == "completed", [
        (b["status"], b["error"], [x["state"] for x in b["turns"]]) for b in done["branches"]
    ]
    return done


async def test_a_twin_gets_the_recording_misses_what_the_source_never_did_and_refuses_what_acts(
    adk: Runtime,
    twin: Runtime,
    http: httpx.AsyncClient,
    pool: asyncpg.Pool,
) -> None:
    """Issue 46, the default policy (reads: "recorded"): the source's world and nothing else."""
    user, t = new_user(), tag()
    q = [f"T1 {t}: how many pods?", f"T2 {t}: and the nodes?", f"T3 {t}: fix it"]
    model, tools = adk.model.model, adk.tools.calls
    model.on(q[0], call("lookup", query=f"pods-{t}"), say("3 pods."))
    source = await conversation(adk, http, user, q)
    recorded_result = tool_messages(model.requests_for(q[0])[1])
    assert len(recorded_result) == 1 and f"pods-{t}" in recorded_result[0]
    assert len([c for c in tools.of("lookup") if c.args == {"query": f"pods-{t}"}]) == 1
    before = len(tools.calls)

    # The replay's model asks for more than the source's did: a new read, and an act.
    model.on(q[1], call("lookup", query=f"nodes-{t}"), say("2 nodes."))
    model.on(q[2], call("scale", name=f"web-{t}", replicas=3), say("I could not scale it."))
    done = await replay_on_twin(twin, http, source, user, Authorization=f"Bearer caller-{t}")
    assert done["tool_policy"] == {"mode": "replay", "reads": "recorded"}
    branch = done["branches"][0]
    assert [x["state"] for x in branch["turns"]] == ["completed"] * 3, branch

    # 1. the call the source made, with the same arguments: the source's result, the real server not asked
    replayed = model.requests_for(q[0])[2:]
    assert len(replayed) == 2 and system_prompt(replayed[0]).startswith(INSTRUCTION)
    assert tool_messages(replayed[1]) == recorded_result

    # 2. a read the source never made: the model is told it is not in the recording; nothing runs
    missed = tool_messages(model.requests_for(q[1])[-1])[-1]
    assert "never made this call" in missed and "nothing was run" in missed.lower(), missed

    # 3. an act: never run; the model is told so, and the call is kept as the arm's intent
    refused = tool_messages(model.requests_for(q[2])[-1])[-1]
    assert "not run" in refused and "replay" in refused and "scale" in refused, refused
    assert tools.calls[before:] == []  # the tool server received nothing at all during the replay
    assert await replay_calls(pool, branch["job_id"]) == [
        (0, "lookup", {"query": f"pods-{t}"}, "reads", "recorded"),
        (1, "lookup", {"query": f"nodes-{t}"}, "reads", "missed"),
        (2, "scale", {"name": f"web-{t}", "replicas": 3}, "acts", "refused"),
    ]

    # the grid: per turn and in all, where the answers came from, and the refused call (the arm's intent)
    intent = {"tool": "scale", "arguments": {"name": f"web-{t}", "replicas": 3}}
    assert [x["tool_policy"] for x in branch["turns"]] == [
        {"recorded": 1, "live": 0, "missed": 0, "refused": 0, "refused_calls": []},
        {"recorded": 0, "live": 0, "missed": 1, "refused": 0, "refused_calls": []},
        {"recorded": 0, "live": 0, "missed": 0, "refused": 1, "refused_calls": [intent]},
    ]
    totals = {"recorded": 1, "live": 0, "missed": 1, "refused": 1, "refused_calls": [intent]}
    assert branch["totals"]["tool_policy"] == totals
    job = await api(twin, http, "GET", f"/api/whatif/{branch['job_id']}", user)
    assert job["replayed"] == branch["totals"]["tool_policy"]  # the branch as a what-if job says the same
    assert done["source"]["totals"]["tool_policy"] is None
    assert all(x["tool_policy"] is None for x in done["source"]["turns"])
    table = await http.get(f"{twin.service}/api/experiments/{done['id']}?format=markdown", headers={"X-User-Id": user})
    assert table.status_code == 200, table.text
    assert "| **tool calls answered** |  | 1 recorded, 0 live, 1 missed, 1 refused |" in table.text, table.text
    assert "Tools: replay, nothing that acts ran (reads from the recording)" in table.text, table.text
    assert f'turn 3: wanted `scale({{"name":"web-{t}","replicas":3}})`, not run (a replay)' in table.text
    await the_page_shows_it(twin.service, source, user, t)


async def the_page_shows_it(service: str, source: str, user: str, t: str) -> None:
    """The explorer page's grid of that experiment: each turn's answers by where they came from, the intent."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            tab = await browser.new_page()
            await tab.goto(f"{service}/ui/#session={source}&user={user}")
            await tab.get_by_role("button", name="Experiments").click()
            await (
                tab.locator("#experiments li[data-status=completed]")
                .get_by_role("button", name="Show the grid")
                .click()
            )
            cells = tab.locator("#experiment tbody tr td.replayed, #experiment .replayed")
            await expect(tab.locator("#experiment tbody tr")).to_have_count(3)
            await expect(cells.first).to_be_visible()
            texts = await tab.locator("#experiment .replayed").all_inner_texts()
            assert texts == [
                "tools: 1 recorded, 0 live, 0 missed, 0 refused",
                "tools: 0 recorded, 0 live, 1 missed, 0 refused",
                "tools: 0 recorded, 0 live, 0 missed, 1 refused",
                "tools: 1 recorded, 0 live, 1 missed, 1 refused",
            ], texts
            intent = await tab.locator("#experiment .intent").all_inner_texts()
            assert intent == [f'wanted scale({{"name":"web-{t}","replicas":3}}): not run (a replay)'], intent
        finally:
            await browser.close()


def system_prompt(request: dict[str, Any]) -> str:
    return str(request["messages"][0].get("content"))


@pytest.mark.parametrize("people", [1, 2], ids=["one user", "two users"])
async def test_two_branches_of_one_twin_at_once_each_get_their_own_sources_recording(
    adk: Runtime, twin: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool, people: int
) -> None:
    """One user's two branches take turns on the twin (its lease); two users' run side by side, each call told
    apart by the caller the twin forwards."""
    t = tag()
    users = [new_user() for _ in range(people)] * (3 - people)
    model, tools = adk.model.model, adk.tools.calls
    questions = [f"S1 {t}: status of web?", f"S2 {t}: status of web?"]
    sources = []
    for question, user in zip(questions, users, strict=True):  # the same call; the real server answers anew
        model.on(question, call("status", name=f"web-{t}"), say("Done."))
        sources.append(await conversation(adk, http, user, [question]))
    answers = [tool_messages(model.requests_for(q)[1]) for q in questions]
    assert answers[0] != answers[1] and all(len(a) == 1 for a in answers), answers
    assert len([c for c in tools.of("status") if c.args == {"name": f"web-{t}"}]) == 2

    done = await asyncio.gather(*(replay_on_twin(twin, http, s, u) for s, u in zip(sources, users, strict=True)))
    for question, answer, experiment in zip(questions, answers, done, strict=True):
        replayed = model.requests_for(question)[2:]
        assert len(replayed) == 2, [tool_messages(r) for r in replayed]
        assert tool_messages(replayed[1]) == answer
        job_id = experiment["branches"][0]["job_id"]
        assert await replay_calls(pool, job_id) == [(0, "status", {"name": f"web-{t}"}, "reads", "recorded")]
    assert len([c for c in tools.of("status") if c.args == {"name": f"web-{t}"}]) == 2


async def test_with_reads_live_a_twin_runs_a_new_read_live_as_the_caller(
    adk: Runtime, twin: Runtime, http: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    """reads: "live", only when asked: a read the source never made runs on the real server as the caller (the
    operator trusts that server's readOnlyHint); an act is still refused, and its server receives nothing."""
    user, t = new_user(), tag()
    model, tools = adk.model.model, adk.tools.calls
    q = [f"R1 {t}: anything new?", f"R2 {t}: then scale it"]
    source = await conversation(adk, http, user, q)
    model.on(q[0], call("lookup", query=f"news-{t}"), say("1 new thing."))
    model.on(q[1], call("scale", name=f"api-{t}", replicas=2), say("I could not."))
    body = {"tools": {"mode": "replay", "reads": "live"}}
    done = await replay_on_twin(twin, http, source, user, body=body, Authorization=f"Bearer caller-{t}")
    assert done["tool_policy"] == {"mode": "replay", "reads": "live"}
    news = [c for c in tools.of("lookup") if c.args == {"query": f"news-{t}"}]
    assert len(news) == 1 and news[0].headers.get("authorization") == f"Bearer caller-{t}"
    assert f"3 results for news-{t}" in tool_messages(model.requests_for(q[0])[-1])[-1]
    assert [c for c in tools.of("scale") if c.args.get("name") == f"api-{t}"] == []
    branch = done["branches"][0]
    assert await replay_calls(pool, branch["job_id"]) == [
        (0, "lookup", {"query": f"news-{t}"}, "reads", "live"),
        (1, "scale", {"name": f"api-{t}", "replicas": 2}, "acts", "refused"),
    ]
