"""Real A2A agents for the what-if tests: a2a-sdk 1.1.2 servers (its JSON-RPC routes, with the 0.3
compatibility kagent's 0.10.x line speaks), served by uvicorn on 127.0.0.1 under kagent's paths
`/api/a2a/<namespace>/<name>/`, that write each turn into kagent's tables as kagent does for a real
agent: the ADK events of the turn (google-adk's `Event`, dumped as the Python runtime writes them) into
`event`, and the A2A task into `task` each time the agent's task store saves it (kagent's agents save
their tasks through kagent's backend, which upserts the row), in the dialect of the agent's line.

Agents (namespace `kagent`):
- `legacy-agent` / `v1-agent`: answer the question with one tool call (`lookup`) and a text, usage
  metadata on the model events;
- `slow-agent` (v1): starts working and waits until it is cancelled (or `release()`d);
- `garbage-agent`: answers every request with bytes that are not JSON.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
from a2a.compat.v0_3 import conversions
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers.default_request_handler_v2 import DefaultRequestHandlerV2
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as a2a
from google.adk.events import Event
from google.genai import types as genai
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.support.live_server import live_server

NAMESPACE = "kagent"
LEGACY, V1, SLOW, GARBAGE = "legacy-agent", "v1-agent", "slow-agent", "garbage-agent"


@dataclass
class Seen:
    """What the agents received, for the tests' assertions."""

    headers: list[dict[str, str]] = field(default_factory=list)
    messages: list[a2a.Message] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    # The slow agent works until this is set (by a cancel, or by the test): a thread's event, because
    # the agents run on their server's own loop, in another thread.
    release: threading.Event = field(default_factory=threading.Event)


class KagentTaskStore(InMemoryTaskStore):
    """The agent's task store, writing every save into kagent's `task` table as kagent's backend does."""

    def __init__(self, dsn: str, dialect: str) -> None:
        super().__init__()
        self.dsn, self.dialect = dsn, dialect

    async def save(self, task: a2a.Task, context: ServerCallContext) -> None:
        await super().save(task, context)
        user = context.state.get("headers", {}).get("x-user-id", "admin@kagent.dev")
        if self.dialect == "legacy":
            data, version = conversions.to_compat_task(task).model_dump_json(by_alias=True, exclude_none=True), None
        else:
            data, version = json.dumps(json_format.MessageToDict(task), separators=(",", ":")), "1.0"
        conn = await asyncpg.connect(self.dsn)
        try:
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


class TurnWriter(AgentExecutor):
    """One ADK turn: the user's event, a tool call and its response, the answer; written into `event`."""

    def __init__(self, dsn: str, seen: Seen, *, slow: bool = False) -> None:
        self.dsn, self.seen, self.slow = dsn, seen, slow

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        self.seen.headers.append(dict(context.call_context.state.get("headers", {})))
        self.seen.messages.append(context.message)
        user = context.call_context.state.get("headers", {}).get("x-user-id", "admin@kagent.dev")
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:  # a new turn: the task first, then its updates
            message = a2a.Message()
            message.CopyFrom(context.message)
            message.task_id, message.context_id = context.task_id, context.context_id
            await event_queue.enqueue_event(
                new_task(context.task_id, context.context_id, a2a.TASK_STATE_SUBMITTED, history=[message])
            )
        await updater.start_work()
        invocation = f"e-{uuid.uuid4()}"
        question = "\n".join(p.text for p in context.message.parts if p.HasField("text"))
        await self._write(context.context_id, user, [_user_event(invocation, question)])
        if self.slow:
            self.seen.running.add(context.task_id)
            try:
                await asyncio.to_thread(self.seen.release.wait, 120)
            finally:
                self.seen.running.discard(context.task_id)
            if context.task_id in self.seen.cancelled:
                return  # cancelled: the turn ends here, as a real agent's does
        answer = f"Regenerated answer to {question!r} by {'slow' if self.slow else 'the other'} agent."
        events = _agent_events(invocation, answer)
        await self._write(context.context_id, user, events)
        meta = {"adk_invocation_id": invocation, "adk_author": "whatif_agent"}
        await updater.add_artifact([a2a.Part(text=answer)], metadata=meta)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        self.seen.cancelled.append(context.task_id)
        self.seen.release.set()
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()

    async def _write(self, session_id: str, user: str, events: list[Event]) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            for event in events:
                await conn.execute(
                    "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data) "
                    "VALUES ($1, $2, $3, NOW(), NOW(), $4)",
                    event.id, user, session_id, event.model_dump_json(),
                )  # fmt: skip
                await conn.execute(
                    "UPDATE session SET updated_at = NOW() WHERE id = $1 AND user_id = $2", session_id, user
                )
        finally:
            await conn.close()


def _user_event(invocation: str, text: str) -> Event:
    return Event(
        invocation_id=invocation, author="user", timestamp=datetime.now(UTC).timestamp(),
        content=genai.Content(role="user", parts=[genai.Part(text=text)]),
    )  # fmt: skip


def _usage(prompt: int, completion: int) -> genai.GenerateContentResponseUsageMetadata:
    return genai.GenerateContentResponseUsageMetadata(
        prompt_token_count=prompt, candidates_token_count=completion, total_token_count=prompt + completion
    )


def _agent_events(invocation: str, answer: str) -> list[Event]:
    call_id = f"adk-{uuid.uuid4()}"
    now = datetime.now(UTC).timestamp()
    call = genai.FunctionCall(id=call_id, name="lookup", args={"query": "pods"})
    response = genai.FunctionResponse(id=call_id, name="lookup", response={"result": "3 pods"})
    return [
        Event(invocation_id=invocation, author="whatif_agent", timestamp=now, usage_metadata=_usage(120, 8),
              content=genai.Content(role="model", parts=[genai.Part(function_call=call)])),
        Event(invocation_id=invocation, author="whatif_agent", timestamp=now,
              content=genai.Content(role="user", parts=[genai.Part(function_response=response)])),
        Event(invocation_id=invocation, author="whatif_agent", timestamp=now, usage_metadata=_usage(140, 20),
              content=genai.Content(role="model", parts=[genai.Part(text=answer)])),
    ]  # fmt: skip


async def _garbage(request: Request) -> PlainTextResponse:
    return PlainTextResponse("<html>this is not an A2A agent</html>")


def agents_app(dsn: str, seen: Seen) -> Starlette:
    routes: list[Any] = []
    for name, dialect, slow in ((LEGACY, "legacy", False), (V1, "v1", False), (SLOW, "v1", True)):
        card = a2a.AgentCard(name=name, description="what-if test agent", version="1.0")
        handler = DefaultRequestHandlerV2(
            agent_executor=TurnWriter(dsn, seen, slow=slow), task_store=KagentTaskStore(dsn, dialect), agent_card=card
        )
        routes += create_jsonrpc_routes(
            handler, f"/api/a2a/{NAMESPACE}/{name}/", enable_v0_3_compat=dialect == "legacy"
        )
    routes.append(Route(f"/api/a2a/{NAMESPACE}/{GARBAGE}/", _garbage, methods=["POST"]))
    return Starlette(routes=routes)


@contextmanager
def running_agents(dsn: str) -> Iterator[tuple[str, Seen]]:
    """The agents, served until the block ends: (KAGENT_A2A_URL for them, what they saw)."""
    seen = Seen()
    with live_server(agents_app(dsn, seen)) as url:
        yield f"{url}/api/a2a", seen
