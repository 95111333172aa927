"""Real A2A agents for the what-if tests: a2a-sdk 1.1.2 servers (its JSON-RPC routes, with the 0.3
compatibility kagent's 0.10.x line speaks), served by uvicorn on 127.0.0.1 under kagent's paths
`/api/a2a/<namespace>/<name>/`, that write each turn into kagent's tables as kagent does for a real
agent: the ADK events of the turn (google-adk's `Event`, dumped as the Python runtime writes them) into
`event`, and the A2A task into `task` each time the agent's task store saves it (kagent's agents save
their tasks through kagent's backend, which upserts the row), in the dialect of the agent's line.

Agents (namespace `kagent`):
- `legacy-agent` / `v1-agent`: answer the question with one tool call (`lookup`) and a text, usage
  metadata on the model events;
- `slow-agent` (v1): starts working and waits until it is cancelled (or `release()`d); with
  `Seen.hold_on_turn` = N it waits so only at the N-th message of a context and answers the others at once;
- `garbage-agent`: answers every request with bytes that are not JSON (its card is a card);
- `approval-legacy` / `approval-v1`: to a question that names "delete", ask for the approval of the tool
  `delete_pod` as kagent's agents do (0.10.x: an `adk_request_confirmation` data part in the input-required
  status message; main: kagent's HITL extension payload, for a client that asks for the extension), then,
  given the answer kagent's UI sends, run the tool (approved) or answer without it (rejected);
- `forgetful-agent` (v1): as `v1-agent`, but `tasks/get` answers "Task not found", as kagent main's runtime
  does once it lost the caller (the task row in kagent's table is right);
- `marker-agent` (v1): as `v1-agent`, its answers holding MARKER; `flawed-agent` (v1): its answers holding FLAW;
- judges (both lines, `-legacy` for 0.10.x's): `judge` prefers the continuation holding MARKER (a tie when
  both or neither do), then the one without FLAW, and ends with the verdict JSON; `biased-judge` always
  answers A; `mute-judge` answers without any JSON; `slow-judge` judges as `judge` once
  `Seen.judge_release` is set. Each records the text it was sent (`Seen.judged`, with its context id);
Every agent but `no-such-agent` serves its card at `.well-known/agent-card.json`, as kagent does.
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
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as a2a
from google.adk.events import Event
from google.genai import types as genai
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from service.embedded.scripted_agent import open_turn
from tests.support.live_server import live_server

NAMESPACE = "kagent"
LEGACY, V1, SLOW, GARBAGE = "legacy-agent", "v1-agent", "slow-agent", "garbage-agent"
APPROVAL_LEGACY, APPROVAL_V1, FORGETFUL = "approval-legacy", "approval-v1", "forgetful-agent"
MARKER_AGENT, MARKER = "marker-agent", "[MARKER-7f3a]"
FLAWED_AGENT, FLAW = "flawed-agent", "[FLAW-2c9e]"
JUDGE, BIASED_JUDGE, MUTE_JUDGE, SLOW_JUDGE = "judge", "biased-judge", "mute-judge", "slow-judge"
HITL = "https://kagent.dev/extensions/hitl/v1"


@dataclass
class Seen:
    """What the agents received, for the tests' assertions."""

    headers: list[dict[str, str]] = field(default_factory=list)
    messages: list[a2a.Message] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    tool_runs: list[str] = field(default_factory=list)  # approval-needing tools that ran (approved)
    rejections: list[dict[str, Any]] = field(default_factory=list)  # the rejections the agents were sent
    # The slow agent works until this is set (by a cancel, or by the test): a thread's event, because
    # the agents run on their server's own loop, in another thread.
    release: threading.Event = field(default_factory=threading.Event)
    hold_on_turn: int = 0
    judged: list[tuple[str, str]] = field(default_factory=list)  # (context id, text) each judge was sent
    judge_release: threading.Event = field(default_factory=threading.Event)


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

    def __init__(self, dsn: str, seen: Seen, *, slow: bool = False, marker: bool = False, flaw: bool = False) -> None:
        self.dsn, self.seen, self.slow, self.marker, self.flaw = dsn, seen, slow, marker, flaw

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        self.seen.headers.append(dict(context.call_context.state.get("headers", {})))
        self.seen.messages.append(context.message)
        user = context.call_context.state.get("headers", {}).get("x-user-id", "admin@kagent.dev")
        updater = await open_turn(context, event_queue)
        invocation = f"e-{uuid.uuid4()}"
        question = "\n".join(p.text for p in context.message.parts if p.HasField("text"))
        await self._write(context.context_id, user, [_user_event(invocation, question)])
        nth = sum(1 for m in self.seen.messages if m.context_id == context.context_id)
        if self.slow and self.seen.hold_on_turn in (0, nth):
            self.seen.running.add(context.task_id)
            try:
                await asyncio.to_thread(self.seen.release.wait, 120)
            finally:
                self.seen.running.discard(context.task_id)
            if context.task_id in self.seen.cancelled:
                return  # cancelled: the turn ends here, as a real agent's does
        answer = f"Regenerated answer to {question!r} by {'slow' if self.slow else 'the other'} agent."
        if self.marker:
            answer += f" {MARKER}"
        if self.flaw:
            answer += f" {FLAW}"
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


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0] if start in text else ""


class JudgeWriter(AgentExecutor):
    """A judge: reads the two continuations of the message's layout and answers (see the module's text)."""

    def __init__(self, seen: Seen, mode: str) -> None:
        self.seen, self.mode = seen, mode

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        text = "\n".join(p.text for p in context.message.parts if p.HasField("text"))
        self.seen.judged.append((context.context_id, text))
        self.seen.headers.append(dict(context.call_context.state.get("headers", {})))
        updater = await open_turn(context, event_queue)
        if self.mode == "slow":
            self.seen.running.add(context.task_id)
            try:  # until released, or this task is cancelled (the others stay held)
                for _ in range(2400):
                    if self.seen.judge_release.is_set() or context.task_id in self.seen.cancelled:
                        break
                    await asyncio.sleep(0.05)
            finally:
                self.seen.running.discard(context.task_id)
            if context.task_id in self.seen.cancelled:
                return
        a = _between(text, "=== Continuation A ===", "=== Continuation B ===")
        b = _between(text, "=== Continuation B ===", "=== Your answer ===")
        score_a, score_b = ((MARKER in x) * 2 - (FLAW in x) for x in (a, b))
        winner = "A" if score_a > score_b else "B" if score_b > score_a else "tie"
        if self.mode == "biased":
            winner = "A"
        verdict = json.dumps({"winner": winner, "reason": f"{winner}: the marker decides"})
        answer = "I cannot tell {which} one is better." if self.mode == "mute" else f"Compared both.\n{verdict}"
        await updater.add_artifact([a2a.Part(text=answer)])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        self.seen.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class ApprovalWriter(TurnWriter):
    """Asks for the approval of `delete_pod` before running it, when the question names "delete"."""

    def __init__(self, dsn: str, seen: Seen, dialect: str) -> None:
        super().__init__(dsn, seen)
        self.dialect = dialect

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        question = "\n".join(p.text for p in context.message.parts if p.HasField("text"))
        waiting = (
            context.current_task is not None and context.current_task.status.state == a2a.TASK_STATE_INPUT_REQUIRED
        )
        if not waiting and "delete" not in question:
            await super().execute(context, event_queue)
            return
        self.seen.headers.append(dict(context.call_context.state.get("headers", {})))
        self.seen.messages.append(context.message)
        user = context.call_context.state.get("headers", {}).get("x-user-id", "admin@kagent.dev")
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if waiting:
            await self._resume(context, updater, user)
            return
        message = a2a.Message()
        message.CopyFrom(context.message)
        message.task_id, message.context_id = context.task_id, context.context_id
        await event_queue.enqueue_event(
            new_task(context.task_id, context.context_id, a2a.TASK_STATE_SUBMITTED, history=[message])
        )
        await updater.start_work()
        invocation, call_id, confirm_id = f"e-{uuid.uuid4()}", f"adk-{uuid.uuid4()}", f"adk-{uuid.uuid4()}"
        call = genai.FunctionCall(
            id=confirm_id,
            name="adk_request_confirmation",
            args={
                "originalFunctionCall": {"id": call_id, "name": "delete_pod", "args": {"pod": "web-1"}},
                "toolConfirmation": {"hint": "delete_pod needs your approval", "confirmed": False},
            },
        )
        await self._write(context.context_id, user, [
            _user_event(invocation, question),
            Event(invocation_id=invocation, author="whatif_agent", timestamp=datetime.now(UTC).timestamp(),
                  usage_metadata=_usage(100, 5), long_running_tool_ids={confirm_id},
                  content=genai.Content(role="model", parts=[genai.Part(function_call=call)])),
        ])  # fmt: skip
        hitl = any(HITL in v for k, v in context.call_context.state.get("headers", {}).items() if k == "a2a-extensions")
        await updater.requires_input(_approval_request(self.dialect, call, confirm_id, invocation, hitl, updater))

    async def _resume(self, context: RequestContext, updater: TaskUpdater, user: str) -> None:
        assert context.message and context.context_id
        message = json_format.MessageToDict(context.message)
        if self.dialect == "legacy":
            decision = next((p["data"] for p in message.get("parts", []) if isinstance(p.get("data"), dict)), {}).get(
                "decision_type"
            )
            approved = decision == "approve"
            valid = decision in ("approve", "reject")
        else:
            payload = message.get("metadata", {}).get(HITL, {})
            approvals = payload.get("approvals", [])
            valid = (
                HITL in message.get("extensions", [])
                and payload.get("type") == "tool_approval_response"
                and ([a.get("id") for a in approvals] == ["confirm-1"])
            )
            approved = valid and approvals[0].get("approved") is True
        if not valid:
            await updater.failed(
                updater.new_agent_message([a2a.Part(text=f"not an answer kagent's UI sends: {message}")])
            )
            return
        invocation = f"e-{uuid.uuid4()}"
        if approved:
            self.seen.tool_runs.append("delete_pod")
            answer = "Deleted the pod web-1."
        else:
            self.seen.rejections.append(message)
            answer = "I did not delete the pod: the call was rejected."
        await self._write(context.context_id, user, _agent_events(invocation, answer)[2:])
        await updater.add_artifact([a2a.Part(text=answer)], metadata={"adk_invocation_id": invocation})
        await updater.complete()


def _approval_request(
    dialect: str, call: genai.FunctionCall, confirm_id: str, invocation: str, hitl: bool, updater: TaskUpdater
) -> a2a.Message:
    """The input-required message of kagent's agent asking for a tool approval, in the line's form."""
    if dialect == "legacy":  # converted to 0.3 by the SDK: a data part with kagent's metadata keys
        data = {"id": confirm_id, "name": call.name, "args": call.args}
        part = json_format.ParseDict(
            {
                "data": data,
                "metadata": {"adk_type": "function_call", "adk_is_long_running": True, "adk_invocation_id": invocation},
            },
            a2a.Part(),
        )
        return updater.new_agent_message([part])
    message = updater.new_agent_message([a2a.Part(text="delete_pod needs your approval")])
    if hitl:
        request = {
            "type": "tool_approval_request",
            "hint": "delete_pod needs your approval",
            "tools": [{"id": "confirm-1", "call_id": confirm_id, "name": "delete_pod", "args": {"pod": "web-1"}}],
        }
        json_format.ParseDict({HITL: request}, message.metadata)
        message.extensions.append(HITL)
    return message


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


class _Forgetting:
    """kagent main's runtime after it lost the caller: tasks/get answers "Task not found" (an ASGI app
    in front of the agent's routes)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request = json.loads(body)
        except ValueError:
            request = {}
        if isinstance(request, dict) and request.get("method") == "GetTask":
            error = {"code": -32001, "message": "Task not found"}
            await JSONResponse({"jsonrpc": "2.0", "id": request.get("id"), "error": error})(scope, receive, send)
            return

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def agents_app(dsn: str, seen: Seen) -> Starlette:
    routes: list[Any] = []
    agents: list[tuple[str, str, AgentExecutor]] = [
        (LEGACY, "legacy", TurnWriter(dsn, seen)), (V1, "v1", TurnWriter(dsn, seen)),
        (SLOW, "v1", TurnWriter(dsn, seen, slow=True)),
        (APPROVAL_LEGACY, "legacy", ApprovalWriter(dsn, seen, "legacy")),
        (APPROVAL_V1, "v1", ApprovalWriter(dsn, seen, "v1")), (FORGETFUL, "v1", TurnWriter(dsn, seen)),
        (MARKER_AGENT, "v1", TurnWriter(dsn, seen, marker=True)),
        (MARKER_AGENT + "-legacy", "legacy", TurnWriter(dsn, seen, marker=True)),
        (FLAWED_AGENT, "v1", TurnWriter(dsn, seen, flaw=True)),
    ]  # fmt: skip
    for name, mode in ((JUDGE, "marker"), (BIASED_JUDGE, "biased"), (MUTE_JUDGE, "mute"), (SLOW_JUDGE, "slow")):
        agents += [(name, "v1", JudgeWriter(seen, mode)), (name + "-legacy", "legacy", JudgeWriter(seen, mode))]
    for name, dialect, executor in agents:
        skill = a2a.AgentSkill(id=f"{name}-skill", name="answer", description="answers", tags=["test"])
        card = a2a.AgentCard(name=name, description="what-if test agent", version="1.0", skills=[skill])
        handler = DefaultRequestHandlerV2(
            agent_executor=executor, task_store=KagentTaskStore(dsn, dialect), agent_card=card
        )
        path = f"/api/a2a/{NAMESPACE}/{name}/"
        rpc = create_jsonrpc_routes(handler, path, enable_v0_3_compat=dialect == "legacy")
        if name == FORGETFUL:
            rpc = [Route(path, _Forgetting(Starlette(routes=rpc)), methods=["POST"])]
        routes += rpc + create_agent_card_routes(card, card_url=f"{path}.well-known/agent-card.json")
    garbage_card = a2a.AgentCard(name=GARBAGE, description="answers garbage", version="0.1")
    routes.append(Route(f"/api/a2a/{NAMESPACE}/{GARBAGE}/", _garbage, methods=["POST"]))
    routes += create_agent_card_routes(
        garbage_card, card_url=f"/api/a2a/{NAMESPACE}/{GARBAGE}/.well-known/agent-card.json"
    )
    return Starlette(routes=routes)


@contextmanager
def running_agents(dsn: str) -> Iterator[tuple[str, Seen]]:
    """The agents, served until the block ends: (KAGENT_A2A_URL for them, what they saw)."""
    seen = Seen()
    with live_server(agents_app(dsn, seen)) as url:
        yield f"{url}/api/a2a", seen
