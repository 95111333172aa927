"""Agents that lose a turn, or seem to, for the lost-turn tests: a2a-sdk 1.1.2 servers (as in a2a_agent.py,
writing each turn into kagent's tables as kagent's agents do) on a port of their own, which the test can
restart as a pod restarts: the old server stops writing at once (as a killed process does), the new one on the
same port starts with an empty task store, so it answers `tasks/get` of the old tasks "Task not found".

Agents (namespace `kagent`), each working until `Hold.release` is set, then answering:
- `holding-legacy` / `holding-v1`: an agent with an in-memory task store (a2a-sdk's default);
- `callerless-legacy` / `callerless-v1`: as kagent's runtimes, whose `tasks/get` loses the caller's user id, so
  every `tasks/get` answers "Task not found" while the task row in kagent's table is right;
- `late-v1`: answers `tasks/get` "Task not found", and writes its task row, only once the task is `LATE_SECONDS`
  old (an agent slow to save a new task), and works `2 * LATE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers.default_request_handler_v2 import DefaultRequestHandlerV2
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import a2a_pb2 as a2a
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from service.embedded.scripted_agent import open_turn
from tests.support.a2a_agent import KagentTaskStore, Seen, TurnWriter, _agent_events, _user_event
from tests.support.live_server import live_server

NAMESPACE = "kagent"
HOLDING, CALLERLESS, LATE = "holding", "callerless", "late-v1"
LATE_SECONDS = 1.0


@dataclass
class Hold:
    """What the tests steer and see: the release of every held turn, and the tasks being worked on."""

    release: threading.Event = field(default_factory=threading.Event)
    running: set[str] = field(default_factory=set)
    answered: set[str] = field(default_factory=set)  # tasks a `tasks/get` was answered (found)
    seen: Seen = field(default_factory=Seen)


class _Store(KagentTaskStore):
    """The agent's task store (in memory, each save upserted into kagent's `task` table), which writes nothing
    once its process is `dead`; `callerless`: finds no task; `late`: finds a task, and saves its row, only
    once the task is `LATE_SECONDS` old."""

    def __init__(
        self, dsn: str, hold: Hold, dialect: str, dead: threading.Event, *, callerless: bool, late: bool
    ) -> None:
        super().__init__(dsn, dialect)
        self.hold, self.dead, self.callerless, self.late = hold, dead, callerless, late
        self.born: dict[str, float] = {}
        self.later: set[asyncio.Task[None]] = set()

    async def save(self, task: a2a.Task, context: ServerCallContext) -> None:
        if self.dead.is_set():
            return
        wait = self.born.setdefault(task.id, time.monotonic()) + LATE_SECONDS - time.monotonic()
        if self.late and wait > 0:  # kept in memory now (the SDK reads it back), its row written later
            await InMemoryTaskStore.save(self, task, context)
            self.later.add(asyncio.get_running_loop().create_task(self._row_later(task.id, context, wait)))
            return
        await super().save(task, context)

    async def _row_later(self, task_id: str, context: ServerCallContext, wait: float) -> None:
        await asyncio.sleep(wait)
        task = await InMemoryTaskStore.get(self, task_id, context)  # as it stands by then
        if task is not None and not self.dead.is_set():
            await super().save(task, context)

    async def get(self, task_id: str, context: ServerCallContext) -> a2a.Task | None:
        if self.callerless or (self.late and time.monotonic() - self.born.get(task_id, 0.0) < LATE_SECONDS):
            return None
        task = await super().get(task_id, context)
        if task is not None and context.state.get("method") in ("GetTask", "tasks/get"):
            self.hold.answered.add(task_id)  # a caller's tasks/get answered (not the SDK's own reads)
        return task


class _Holder(TurnWriter):
    """One turn: the user's event, then working until released (or the process dies), then the answer."""

    def __init__(self, dsn: str, hold: Hold, dead: threading.Event, *, late: bool) -> None:
        super().__init__(dsn, hold.seen)
        self.hold, self.dead, self.late = hold, dead, late

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        user = context.call_context.state.get("headers", {}).get("x-user-id", "admin@kagent.dev")
        self.seen.messages.append(context.message)
        invocation = f"e-{context.task_id}"
        question = "\n".join(p.text for p in context.message.parts if p.HasField("text"))
        updater = await open_turn(context, event_queue)
        await self._write(context.context_id, user, [_user_event(invocation, question)])
        self.hold.running.add(context.task_id)
        try:
            if self.late:
                await asyncio.sleep(2 * LATE_SECONDS)
            for _ in range(0 if self.late else 2400):  # until released (the test's thread sets it), 120 s at most
                if self.hold.release.is_set():
                    break
                await asyncio.sleep(0.05)
        finally:
            self.hold.running.discard(context.task_id)
        if self.dead.is_set():
            return
        answer = f"Regenerated answer to {question!r} after a while."
        await self._write(context.context_id, user, _agent_events(invocation, answer))
        await updater.add_artifact([a2a.Part(text=answer)], metadata={"adk_invocation_id": invocation})
        await updater.complete()


class _Legacy:
    """A 0.3 server's `tasks/get` of a task its store does not hold: JSON-RPC error -32001 "Task not found", as
    a2a-sdk 0.3 (kagent 0.10.x's runtimes) answers it; a2a-sdk 1.1.2's 0.3 compatibility answers it -32603 (an
    internal error), which no 0.3 agent does. Every other request goes to the agent's routes."""

    def __init__(self, app: Any, store: _Store) -> None:
        self.app, self.store = app, store

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body or b"{}")
        if isinstance(request, dict) and request.get("method") == "tasks/get":
            task_id = str((request.get("params") or {}).get("id", ""))
            if await self.store.get(task_id, ServerCallContext()) is None:
                error = {"code": -32001, "message": "Task not found"}
                await JSONResponse({"jsonrpc": "2.0", "id": request.get("id"), "error": error})(scope, receive, send)
                return

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _app(dsn: str, hold: Hold, dead: threading.Event) -> Starlette:
    routes: list[Any] = []
    agents = [(f"{HOLDING}-legacy", "legacy"), (f"{HOLDING}-v1", "v1"), (f"{CALLERLESS}-legacy", "legacy"),
              (f"{CALLERLESS}-v1", "v1"), (LATE, "v1")]  # fmt: skip
    for name, dialect in agents:
        late = name == LATE
        store = _Store(dsn, hold, dialect, dead, callerless=name.startswith(CALLERLESS), late=late)
        card = a2a.AgentCard(name=name, description="lost-turn test agent", version="1.0")
        handler = DefaultRequestHandlerV2(
            agent_executor=_Holder(dsn, hold, dead, late=late), task_store=store, agent_card=card
        )
        path = f"/api/a2a/{NAMESPACE}/{name}/"
        rpc = create_jsonrpc_routes(handler, path, enable_v0_3_compat=dialect == "legacy")
        if dialect == "legacy":
            rpc = [Route(path, _Legacy(Starlette(routes=rpc), store), methods=["POST"])]
        routes += rpc
        routes += create_agent_card_routes(card, card_url=f"{path}.well-known/agent-card.json")
    return Starlette(routes=routes)


def _socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


class Restartable:
    """The agents' server, which `restart()` kills and starts again on the same port (an empty task store)."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.hold = dsn, Hold()
        self.port = 0
        self._dead = threading.Event()
        self._server: Any = None

    @property
    def a2a_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/a2a"

    def start(self) -> None:
        sock = _socket(self.port)
        self.port = sock.getsockname()[1]
        self._dead = threading.Event()
        self._server = live_server(_app(self.dsn, self.hold, self._dead), sock=sock)
        self._server.__enter__()

    def stop(self) -> None:
        self._dead.set()  # a killed process writes nothing more: no row says the turn ended
        self._server.__exit__(None, None, None)

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def restartable_agents(dsn: str) -> Iterator[Restartable]:
    agents = Restartable(dsn)
    agents.start()
    try:
        yield agents
    finally:
        agents.hold.release.set()
        agents.stop()
