"""The demo's own A2A agents: each answers from a script (no model, no cluster; service/embedded/scripts.py),
so that a what-if and an experiment, judged, can be tried on the embedded demo database out of the box:
`kagent/k8s-agent` (the demo sessions' agent) and `kagent/scripted-agent` answer alike, `kagent/thorough-agent`
really answers differently (slower, more tool calls, another answer to the comparison), and `kagent/demo-judge`
judges two continuations by a stated rule. Their `agent` rows (demo.py) name real models, for the price, and
the demo's MCP tool server (weather_tools.py), which they really call: each turn reads the agent's row, and its
script's tool calls go to the servers the row names (tool_calls.py), so `kagent/k8s-agent-replay`, the demo's
replay twin, is answered by kagent-fork's replay endpoint as a kagent runtime would be.

It is a real a2a-sdk server (its JSON-RPC routes, A2A 1.0 and the 0.3 dialect kagent's 0.10.x line speaks, on
one endpoint) under kagent's path for an agent, `/api/a2a/<namespace>/<name>/`, with an agent card saying what
it is. Like kagent's runtime, it writes each turn into kagent's tables: the turn's ADK events into `event`
(the Python runtime's snake_case JSON, as the demo's own rows), and the A2A task into `task` each time its
task store saves it (kagent's backend upserts the row), in the dialect of the session's own tasks. Its card says
that it answers from a script; its answers carry no mark of it (scripts.py).

`kagent-fork serve` starts it and the tool server beside the service when it runs the embedded demo and
KAGENT_A2A_URL is not set, and points KAGENT_A2A_URL at it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
from a2a.compat.v0_3 import conversions
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers.default_request_handler_v2 import DefaultRequestHandlerV2
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as a2a
from google.protobuf import json_format
from starlette.applications import Starlette

from service.embedded import demo, scripts, threaded, tool_calls, weather_tools
from service.embedded.demo import DEMO_USER, event_json, usage
from service.embedded.scripts import Plan, Script, Step, script
from service.kagent.store.agents import AgentConfig

__all__ = ["AGENTS", "NAMESPACE", "Plan", "Step", "script", "serving", "start"]

log = logging.getLogger("kagent_fork")

NAMESPACE = "kagent"
AUTHOR = "scripted_demo_agent"


@dataclass(frozen=True)
class DemoAgent:
    """One of the demo's agents: what it answers, and what its card says it is."""

    script: Script
    description: str


_SCRIPTED = (
    "kagent-fork's scripted demo agent: answers from a script, no model and no cluster; it writes each turn into "
    "the demo database as kagent's runtime would"
)
AGENTS = {
    # The demo sessions' own agent (kagent__NS__k8s_agent), so that a what-if with the default agent works, and
    # one more name, so that a what-if "on another agent" can be tried too.
    "k8s-agent": DemoAgent(scripts.script, _SCRIPTED),
    "scripted-agent": DemoAgent(scripts.script, _SCRIPTED),
    # The demo's replay twin of its own agent (the row `serve` writes from `kagent-fork replay-twin`'s manifests):
    # the same script, its tools kagent-fork's replay endpoint.
    demo.TWIN.split("/")[1]: DemoAgent(scripts.script, _SCRIPTED),
    # A second agent that really answers differently, for an experiment with something to judge.
    "thorough-agent": DemoAgent(
        scripts.thorough_script,
        _SCRIPTED + "; slower, it also asks for tomorrow's forecast and looks cities up again before comparing them",
    ),
    # The demo's judge: prefers the continuation that needed fewer tool calls (service/embedded/scripts.py).
    "demo-judge": DemoAgent(
        scripts.judge_script,
        "kagent-fork's scripted demo judge: of two continuations A and B, prefers the one that needed fewer tool "
        "calls for the same questions (a tie when as many); answers a reason, then the JSON verdict",
    ),
}


def turn_events(invocation_id: str, question: str, step: Step) -> list[tuple[str, datetime, str]]:
    """The turn's ADK events as the Python runtime writes them: (id, created_at, JSON); the step's pause is
    taken over each tool call (between the call and its result)."""
    rows: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None, float]] = [
        ("user", [{"text": question}], None, 0.0)
    ]
    for call in step.calls:
        call_id = f"adk-{uuid.uuid4()}"
        part = {"function_call": {"id": call_id, "args": call.args, "name": call.tool}}
        rows.append((AUTHOR, [part], usage(len(question) // 4 + 90, 12), step.pause))
        response = {"function_response": {"id": call_id, "name": call.tool, "response": call.result}}
        rows.append((AUTHOR, [response], None, 0.0))
    rows.append((AUTHOR, [{"text": step.answer}], usage(len(question) // 4 + 120, len(step.answer) // 4), 0.0))
    out = []
    for author, parts, extra, pause in rows:
        at = datetime.now(UTC)
        event_id, data = event_json(invocation_id, author, parts, at, extra)
        out.append((event_id, at, data))
        time.sleep(pause or 0.001)  # distinct created_at, in the order written (a slower agent: its pause)
    return out


class KagentTaskStore(InMemoryTaskStore):
    """The agent's task store, writing every save into kagent's `task` table as kagent's backend does, in
    the dialect of the session's tasks (A2A 1.0 JSON for the main line, the 0.3 JSON for 0.10.x)."""

    def __init__(self, pool: Pool) -> None:
        super().__init__()
        self.pool = pool

    async def save(self, task: a2a.Task, context: ServerCallContext | None = None) -> None:
        await super().save(task, context)  # type: ignore[arg-type]
        user = _user(context)
        conn = await self.pool.connect()
        try:
            line = await conn.fetchval(
                "SELECT protocol_version FROM task WHERE session_id = $1 AND deleted_at IS NULL AND id <> $2 "
                "ORDER BY created_at DESC LIMIT 1",
                task.context_id, task.id,
            )  # fmt: skip
            if line == "1.0":
                data, version = json.dumps(json_format.MessageToDict(task), separators=(",", ":")), "1.0"
            else:
                data = conversions.to_compat_task(task).model_dump_json(by_alias=True, exclude_none=True)
                version = None
            await conn.execute(
                "INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id) "
                "VALUES ($1, NOW(), NOW(), $2, $3, $4, $5) "
                "ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data, updated_at = NOW()",
                task.id, data, task.context_id, version, user,
            )  # fmt: skip
            await conn.execute(
                "UPDATE session SET updated_at = NOW() WHERE id = $1 AND user_id = $2", task.context_id, user
            )
        finally:
            await conn.close()


def _headers(context: ServerCallContext | None) -> dict[str, str]:
    """The A2A request's headers (lower-case names), which the agent forwards to a tool server that allows them."""
    headers: dict[str, str] = context.state.get("headers", {}) if context is not None else {}
    return {k.lower(): v for k, v in headers.items()}


def _user(context: ServerCallContext | None) -> str:
    return _headers(context).get("x-user-id", DEMO_USER)


class Pool:
    """Connections to the demo database, one a write (a demo agent writes a few rows a turn)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn)


async def open_turn(context: RequestContext, event_queue: EventQueue) -> TaskUpdater:
    """A turn's task as kagent's runtimes open one: a new turn first enqueues its task (`submitted`, the user's
    message in its history), then every turn is marked working. The test agents and the bench's judge open their
    turns here too."""
    assert context.task_id and context.context_id and context.message
    updater = TaskUpdater(event_queue, context.task_id, context.context_id)
    if context.current_task is None:
        message = a2a.Message()
        message.CopyFrom(context.message)
        message.task_id, message.context_id = context.task_id, context.context_id
        await event_queue.enqueue_event(
            new_task(context.task_id, context.context_id, a2a.TASK_STATE_SUBMITTED, history=[message])
        )
    await updater.start_work()
    return updater


class ScriptedTurn(AgentExecutor):
    """One turn as kagent's runtime runs one: the user's event, each tool call the script plans made on the MCP
    servers the agent's row names (tool_calls.py) with its result, the answer written from those results; into
    `event`."""

    def __init__(self, pool: Pool, script: Script = scripts.script, ref: str = demo.DEMO_AGENT_REF) -> None:
        self.pool = pool
        self.script = script
        self.ref = ref

    async def _plan(self, question: str, session_id: str, user: str) -> tuple[Plan, AgentConfig | None]:
        """The turn's plan, from what the conversation already holds and the tools the agent's row offers now."""
        conn = await self.pool.connect()
        try:
            config = await tool_calls.agent_config(conn, self.ref)
            rows = await conn.fetch(
                "SELECT data FROM event WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL "
                "ORDER BY created_at",
                session_id, user,
            )  # fmt: skip
        finally:
            await conn.close()
        known = scripts.known_weather([json.loads(r["data"]) for r in rows])
        return self.script(question, known, tool_calls.offered(config)), config

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        user = _user(context.call_context)
        updater = await open_turn(context, event_queue)
        question = "\n".join(p.text for p in context.message.parts if p.HasField("text"))
        plan, config = await self._plan(question, context.context_id, user)
        headers = _headers(context.call_context)
        results = [await tool_calls.call(config, ask.tool, ask.args, headers) for ask in plan.asks]
        step = scripts.finish(plan, results)
        invocation = f"e-{uuid.uuid4()}"
        events = await asyncio.to_thread(turn_events, invocation, question, step)
        conn = await self.pool.connect()
        try:
            for event_id, at, data in events:
                await conn.execute(
                    "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data) "
                    "VALUES ($1, $2, $3, $4, $4, $5)",
                    event_id, user, context.context_id, at, data,
                )  # fmt: skip
            await conn.execute(
                "UPDATE session SET updated_at = NOW() WHERE id = $1 AND user_id = $2", context.context_id, user
            )
        finally:
            await conn.close()
        meta = {"adk_invocation_id": invocation, "adk_author": AUTHOR}
        await updater.add_artifact([a2a.Part(text=step.answer)], metadata=meta)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def agents_app(dsn: str) -> Starlette:
    """The scripted agents under kagent's A2A paths (`/api/a2a/kagent/<name>/`), each with its card."""
    pool = Pool(dsn)
    routes: list[Any] = []
    for name, agent in AGENTS.items():
        card = a2a.AgentCard(name=name, version="1.0", description=agent.description)
        turn = ScriptedTurn(pool, agent.script, f"{NAMESPACE}/{name}")
        handler = DefaultRequestHandlerV2(agent_executor=turn, task_store=KagentTaskStore(pool), agent_card=card)
        base = f"/api/a2a/{NAMESPACE}/{name}/"
        routes += create_jsonrpc_routes(handler, base, enable_v0_3_compat=True)
        routes += create_agent_card_routes(card, card_url=f"{base}.well-known/agent-card.json")
    return Starlette(routes=routes)


@dataclass(frozen=True)
class Demo:
    """The demo's agents and tool server, running: KAGENT_A2A_URL for the agents, the tool server's URL (as the
    agents' rows name it), and a function that stops both."""

    a2a_url: str
    tools_url: str
    stop: Callable[[], None]
    alerts: weather_tools.Alerts  # what the tool that acts was made to do


def start_demo(dsn: str, host: str = "127.0.0.1") -> Demo:
    """Serve the demo's tool server and its scripted agents in daemon threads; the tool server's port, new at every
    start, is written into the demo agents' rows first (demo.point_tools), as kagent's controller would. Stopping
    puts the rows (and the twin's) back as they were: a command that served the demo for a while (the CLI's
    `whatif` on the demo) leaves a running `serve`'s demo pointing at its own servers."""
    alerts = weather_tools.Alerts()
    tools_url, stop_tools = weather_tools.start(host, alerts)
    saved = _in_thread(_point(dsn, tools_url))
    port, stop_agents = threaded.start(agents_app(dsn), "scripted demo agent", host)

    def stop() -> None:
        stop_agents()
        stop_tools()
        _in_thread(_restore(dsn, saved))

    return Demo(a2a_url=f"http://{host}:{port}/api/a2a", tools_url=tools_url, stop=stop, alerts=alerts)


T = TypeVar("T")


def _in_thread(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its end in a thread of its own: the caller may be running an event loop already (a test's)."""
    with ThreadPoolExecutor(1) as one:
        return one.submit(asyncio.run, work).result()


async def _point(dsn: str, tools_url: str) -> dict[str, str | None]:
    conn = await asyncpg.connect(dsn)
    try:
        saved = await demo.saved_configs(conn, [*demo.DEMO_TOOLS, demo.TWIN])
        await demo.point_tools(conn, tools_url)
        return saved
    finally:
        await conn.close()


async def _restore(dsn: str, saved: dict[str, str | None]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await demo.restore_configs(conn, saved)
    finally:
        await conn.close()


@contextmanager
def serving(dsn: str, host: str = "127.0.0.1") -> Iterator[str]:
    """The scripted agents (and their tool server) served in threads of this process until the block ends: yields
    the base URL to give as KAGENT_A2A_URL (`http://127.0.0.1:<port>/api/a2a`)."""
    url, stop = start(dsn, host)
    try:
        yield url
    finally:
        stop()


def start(dsn: str, host: str = "127.0.0.1") -> tuple[str, Callable[[], None]]:
    """start_demo's (KAGENT_A2A_URL for the agents, a function that stops them and their tool server)."""
    running = start_demo(dsn, host)
    return running.a2a_url, running.stop
