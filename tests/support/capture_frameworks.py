"""Capture the fixture sessions of tests/fixtures/frameworks/ from kagent's real BYO runtimes.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m tests.support.capture_frameworks

For each runtime (kagent-langgraph, kagent-openai and kagent-crewai 0.10.4 with a crew and a flow, from
.venv-kagent-<name>, made by scripts/runtime-venv): a throw-away database of kagent's 0.10.x line (migration 7),
the controller stand-in and the scripted model on it, the runtime started as kagent starts a BYO agent, a
session created through the stand-in as kagent's UI does and three turns sent through the stand-in's A2A path
(the first calls the `lookup` tool; the crew and the flow have no tool: the crew's memory gets its task
evaluation answered); then every row of kagent's tables, the turns, the model's requests and the controller
endpoints the runtime called are written as <framework>_3_turns.json, and the database dropped. The runtime's
ids and timestamps are its own, so each capture differs; the tests read the files, they never capture.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from contextlib import ExitStack
from typing import Any

import asyncpg
import httpx

from tests.conftest import create_database, drop_database
from tests.support.framework_fixtures import FIXTURES, dump_tables
from tests.support.kagent_chat import new_session, send, text
from tests.support.kagent_controller import register_agent, running_controller
from tests.support.runtimes import byo_agent, running_runtime
from tests.support.scripted_model import ScriptedModel, call, running_model, say

USER = "fixture-user@example.com"
QUESTIONS = (
    "Turn one: what is the status of pod web-1?",
    "Turn two: and how many replicas does web have?",
    "Turn three: thanks, summarise please.",
)
RUNTIMES = {
    # framework: (runtime, agent source in runtime_agents/, agent ref)
    "langgraph": ("kagent-langgraph", "langgraph_agent.py", "kagent/langgraph-agent"),
    "openai": ("kagent-openai", "openai_agent.py", "kagent/openai-agent"),
    "crewai": ("kagent-crewai", "crewai_agent.py", "kagent/crewai-agent"),
    "crewai_flow": ("kagent-crewai", "crewai_flow_agent.py", "kagent/crewai-flow-agent"),
}
# What crewai's TaskEvaluator asks after each task of a crew with memory (the answer its long-term memory
# keeps), and the evaluation the scripted model gives.
CREWAI_EVALUATION = "Assess the quality of the task completed"
CREWAI_SUGGESTION = "Name the pod and its namespace"


def script(model: ScriptedModel, framework: str, first_question: str) -> None:
    """The scripted model's answers for one runtime's conversation."""
    if framework == "crewai_flow":
        return  # no tool: each turn answered "Answer to: <question>"
    if framework == "crewai":
        # first: the evaluator's prompt quotes the turn's question, so its cue must be matched before any other
        evaluation = {"suggestions": [CREWAI_SUGGESTION], "quality": 8.0, "entities": []}
        model.on(CREWAI_EVALUATION, say(json.dumps(evaluation)))
    else:
        model.on(first_question, call("lookup", query="web-1"), say("web-1 is Running."))


MIGRATION_0_10 = 7


async def capture(server: str, framework: str) -> dict[str, Any]:
    runtime, source, agent_ref = RUNTIMES[framework]
    url = await create_database(server, migration_version=MIGRATION_0_10)
    try:
        conn = await asyncpg.connect(url)
        try:
            await register_agent(conn, agent_ref, {"type": "BYO"})
        finally:
            await conn.close()
        with ExitStack() as stack:
            controller = stack.enter_context(running_controller(url))
            model = stack.enter_context(running_model())
            script(model.model, framework, QUESTIONS[0])
            spec = byo_agent(runtime, source, agent_ref, kagent_url=controller.url, model_url=model.url)
            process = await asyncio.to_thread(stack.enter_context, running_runtime(spec))
            controller.register(agent_ref, process.url)
            turns = []
            async with httpx.AsyncClient(timeout=120) as http:
                session_id = await new_session(http, controller.url, USER, agent_ref, QUESTIONS[0][:40])
                for question in QUESTIONS:
                    task = await send(
                        http, controller.a2a_url, agent_ref, user=USER, context_id=session_id, parts=[text(question)]
                    )
                    state = task["status"]["state"]
                    assert state == "completed", (question, task["status"], process.log_tail())
                    turns.append({"question": question, "task_id": task["id"], "state": state})
            conn = await asyncpg.connect(url)
            try:
                tables = await dump_tables(conn)
            finally:
                await conn.close()
            requests = {q: [r["messages"] for r in model.model.requests_for(q)] for q in QUESTIONS}
            # the controller endpoints the runtime called (the stand-in's own sessions and A2A path left out)
            endpoints = sorted(
                {f"{method} {re.sub('/api/tasks/.+', '/api/tasks/{id}', path)}"
                 for method, path, _ in controller.controller.calls.seen
                 if not path.startswith("/api/a2a/") and path != "/api/sessions"}
            )  # fmt: skip
        return {
            "framework": framework,
            "runtime": f"{runtime} 0.10.4",
            "kagent_line": "release/v0.10.x",
            "migration_version": MIGRATION_0_10,
            "agent_ref": agent_ref,
            "user": USER,
            "session_id": session_id,
            "turns": turns,
            "model_requests": requests,
            "controller_calls": endpoints,
            "tables": tables,
        }
    finally:
        await drop_database(server, url)


async def main(frameworks: list[str]) -> None:
    server = os.environ.get("TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not server:
        sys.exit("set TEST_DATABASE_URL to a PostgreSQL server this may create databases in")
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for framework in frameworks:
        fixture = await capture(server, framework)
        path = FIXTURES / f"{framework}_3_turns.json"
        path.write_text(json.dumps(fixture, indent=1, sort_keys=False) + "\n")
        counts = {t: len(rows) for t, rows in fixture["tables"].items() if rows}
        print(f"{path}: {counts}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or list(RUNTIMES)))
