"""Realistic kagent conversations for tests, produced by the libraries kagent itself runs.

A conversation is what kagent's database holds for one chat: a ``session`` row, the agent runtime's
``event`` rows and one ``task`` row per turn. The rows are built the way kagent builds them:

Events
    ``google.adk.events.Event`` objects (google-adk 2.6.2, the version kagent main pins) serialized as
    the runtime writes them: ``model_dump_json()`` for a Python ADK agent (``event_style="python"``,
    the row id is the event's own ``id``), ``model_dump_json(exclude_none=True)`` (``"python_compact"``),
    camelCase with an RFC 3339 ``timestamp`` string like Go ADK's ``json.Marshal`` (``"go"``), or the
    OpenAI-agents session rows ``{"timestamp", "items", "type": "conversation_items"}`` (``"openai"``,
    no invocation id anywhere, row id a fresh uuid4).

Tasks, ``dialect="v1"`` (kagent main, ``protocol_version = '1.0'``)
    ``a2a.types`` protobuf messages assembled by the real pipeline of kagent main: google-adk's upstream
    A2A converters (``convert_event_to_a2a_events``, ``LongRunningFunctions``) feed a2a-sdk 1.1.2's
    ``TaskManager`` (the aggregation kagent's ``DefaultRequestHandlerV2`` performs), then kagent's own
    additions (``kagent_*`` task metadata, the public HITL message of the ``https://kagent.dev/extensions/hitl/v1``
    extension) are applied. Serialized with ``MessageToDict`` (camelCase, enum names) and written compactly,
    integral numbers as integers, as kagent's Go backend (``json.Marshal``) stores them. The user's message is
    the only ``ROLE_USER`` history entry of an ordinary turn; the agent's output is in ``artifacts``, one
    artifact per ADK event with content, each carrying ``adk_invocation_id``, ``adk_author``, ``adk_event_id``.

Tasks, ``dialect="legacy"`` (kagent 0.10.x, ``protocol_version`` NULL)
    ``a2a.compat.v0_3.types`` pydantic models dumped with ``model_dump_json(by_alias=True, exclude_none=True)``,
    aggregated with the rules of a2a-sdk 0.3.26's ``TaskManager`` (every status message is moved into
    ``history`` by the next status update) fed by kagent 0.10.x's executor (every ADK event with content
    becomes a ``working`` status message with ``kagent_*`` metadata, the final reply is also copied into one
    artifact). Two consequences of those rules are kept because kagent really stores them and its UI
    de-duplicates by ``messageId``: the user message appears twice at the start of ``history``, and the
    ``adk_request_confirmation`` message of an approval turn appears twice.

``metadata_style``
    ``"kagent"``: exactly the metadata kagent writes. Note that kagent never stamps the invocation id on the
    user's message, and that a task whose turn has not produced an ADK event yet (a running turn) carries no
    invocation id at all. ``"sample"`` (default): the same, plus the keys seen in real kagent rows: the turn's
    user messages carry ``adk_invocation_id``, and legacy task metadata carries
    ``adk_app_name``/``adk_user_id``/``adk_session_id`` (v1 task metadata always does).

Known limit: legacy conversations' events are dumped by google-adk 2.6.2 (the only ADK installed); kagent
0.10.x agents run google-adk 1.32.0, whose dump has fewer keys.
"""

from __future__ import annotations

import json
import secrets
import uuid
import warnings
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple

from google.adk.events import Event, EventActions
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types as genai

Dialect = Literal["legacy", "v1"]
EventStyle = Literal["python", "python_compact", "go", "openai"]
MetadataStyle = Literal["sample", "kagent"]
# What a turn of `shapes` holds (build_conversation): a human-in-the-loop turn answered by an approval
# ("approved"), by a batch decision ("batch"), an ask_user turn answered ("ask_user"), an approval or
# ask_user turn the human never answered, its task canceled ("unanswered", "unanswered_ask_user"), or a
# call to a sub-agent tool ("agent_tool").
Shape = Literal["approved", "batch", "ask_user", "unanswered", "unanswered_ask_user", "agent_tool"]

DEFAULT_USER_ID = "admin@kagent.dev"
DEFAULT_AGENT_ID = "kagent__NS__k8s_agent"
AGENT_NAME = "k8s_agent"
MODEL_VERSION = "gpt-4.1-mini"
HITL_EXTENSION_URI = "https://kagent.dev/extensions/hitl/v1"
REQUEST_CONFIRMATION = "adk_request_confirmation"
V1_PROTOCOL_VERSION = "1.0"
SCHEMA_VERSION = {"legacy": 7, "v1": 13}  # newest core migration of each kagent line

_STEP = timedelta(milliseconds=1)

_QUESTIONS = [
    "List the pods in the default namespace",
    "Why does nginx-7d4b9c-xk2p9 keep restarting?",
    "Show me the logs of the previous container",
    "Which deployments have fewer ready replicas than desired?",
    "Scale the web deployment to 3 replicas",
    "What changed in the last rollout of web?",
    "Is there a PodDisruptionBudget for web?",
    "Summarize the cluster health for me",
]
_LOOKUP_TOOL = "k8s_get_resources"
_APPROVAL_TOOL = "k8s_delete_resource"
_AGENT_TOOL = "kagent__NS__helm_agent"  # an agent used as a tool (kagent's "__NS__" names)
_ASK_QUESTIONS = [{"question": "Which namespace should I clean up?", "choices": ["default", "prod"], "multiple": False}]
_ASK_ANSWERS = [{"answer": ["prod"]}]


class EventRow(NamedTuple):
    """One ``event`` row: ``(id, created_at, data)``."""

    id: str
    created_at: datetime
    data: str


class TaskRow(NamedTuple):
    """One ``task`` row: ``(id, created_at, data, protocol_version)`` (plus ``updated_at``)."""

    id: str
    created_at: datetime
    data: str
    protocol_version: str | None
    updated_at: datetime


@dataclass(frozen=True)
class Turn:
    """What a test needs to know about one turn (one agent invocation, one task)."""

    index: int
    invocation_id: str | None  # None for OpenAI-agents sessions, which have no invocation ids
    task_id: str
    user_text: str
    agent_text: str | None  # None while the turn has not answered (running, waiting for approval)
    state: str  # the task state as stored: "completed" / "TASK_STATE_COMPLETED", ...
    kind: Literal["plain", "tool", "approval", "agent_tool"]
    user_message_id: str
    event_ids: tuple[str, ...]  # this turn's event row ids, in created_at order
    started_at: datetime  # created_at of the turn's first event
    function_call_ids: tuple[str, ...] = ()
    confirmation_call_id: str | None = None  # the adk_request_confirmation call of an approval turn

    @property
    def terminal(self) -> bool:
        return self.state in ("completed", "failed", "canceled", "rejected") or self.state in (
            "TASK_STATE_COMPLETED",
            "TASK_STATE_FAILED",
            "TASK_STATE_CANCELED",
            "TASK_STATE_REJECTED",
        )


@dataclass(frozen=True)
class Conversation:
    """One session's rows (``events``, ``tasks``, in ``created_at`` order) and what tests need to know of them."""

    session_id: str
    user_id: str
    agent_id: str
    name: str | None
    events: list[EventRow]
    tasks: list[TaskRow]
    invocation_ids: list[str]  # in turn order; empty for OpenAI-agents sessions
    turns: list[Turn]
    dialect: Dialect
    event_style: EventStyle
    metadata_style: MetadataStyle
    app_name: str
    source: str | None
    created_at: datetime
    updated_at: datetime

    @property
    def protocol_version(self) -> str | None:
        return V1_PROTOCOL_VERSION if self.dialect == "v1" else None

    @property
    def schema_version(self) -> int:
        return SCHEMA_VERSION[self.dialect]

    @property
    def user_texts(self) -> list[str]:
        return [t.user_text for t in self.turns]

    @property
    def agent_texts(self) -> list[str | None]:
        return [t.agent_text for t in self.turns]

    def turn_of(self, invocation_id: str) -> Turn:
        return next(t for t in self.turns if t.invocation_id == invocation_id)

    def event_data(self) -> list[dict[str, Any]]:
        """Every event row's data, decoded, in order."""
        return [json.loads(e.data) for e in self.events]

    def task_data(self) -> list[dict[str, Any]]:
        return [json.loads(t.data) for t in self.tasks]


# --------------------------------------------------------------------------------------------------
# Small helpers


class _Clock:
    """Strictly increasing instants, one millisecond apart."""

    def __init__(self, start: datetime) -> None:
        self._next = start

    def tick(self) -> datetime:
        now = self._next
        self._next = now + _STEP
        return now


def _uuid() -> str:
    return str(uuid.uuid4())


def _rfc3339(when: datetime) -> str:
    """RFC 3339 in UTC with the fraction trimmed as Go's RFC3339Nano writes it."""
    text = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def _go_numbers(value: Any) -> Any:
    """Integral floats as integers, the way Go's encoding/json writes a float64 (protobuf Struct numbers)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _go_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_numbers(v) for v in value]
    return value


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _question(index: int) -> str:
    base = _QUESTIONS[index % len(_QUESTIONS)]
    return base if index < len(_QUESTIONS) else f"{base} (again, #{index + 1})"


def _usage(prompt: int, completion: int) -> genai.GenerateContentResponseUsageMetadata:
    return genai.GenerateContentResponseUsageMetadata(
        prompt_token_count=prompt, candidates_token_count=completion, total_token_count=prompt + completion
    )


def _derived_name(first_text: str) -> str:
    """The name kagent's Python executor gives a new session: the first 20 characters of the message."""
    text = first_text.strip()
    return text[:20] + ("..." if len(text) > 20 else "")


def _drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (a2a-sdk's TaskManager over an in-memory store) synchronously."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the coroutine suspended; it was expected to complete synchronously")


# --------------------------------------------------------------------------------------------------
# ADK events of one turn


@dataclass
class _TurnPlan:
    index: int
    invocation_id: str
    task_id: str
    user_text: str
    kind: Literal["plain", "tool", "approval", "agent_tool"]
    phase: Literal["running", "awaiting_approval", "done"]
    hitl: Literal["approve", "batch", "ask_user"] = "approve"  # how an approval turn asks and is answered
    canceled: bool = False  # an approval turn left unanswered, its task canceled
    subagent_session_id: str | None = None
    agent_text: str = ""
    # ADK events, by phase: what the runner writes before the pause (or the whole turn), and after approval
    first: list[Event] = field(default_factory=list)
    resume: list[Event] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    confirmation_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    pause_at: datetime | None = None
    resume_at: datetime | None = None
    times: dict[int, datetime] = field(default_factory=dict)  # id(event) -> instant


def _user_event(inv: str, text: str, clock: _Clock, plan: _TurnPlan, headers: dict[str, str] | None) -> Event:
    when = clock.tick()
    actions = EventActions(state_delta={"headers": headers}) if headers else EventActions()
    event = Event(
        id=_uuid(),
        invocation_id=inv,
        author="user",
        content=genai.Content(role="user", parts=[genai.Part(text=text)]),
        actions=actions,
        timestamp=when.timestamp(),
    )
    plan.times[id(event)] = when
    return event


def _agent_event(plan: _TurnPlan, clock: _Clock, **fields: Any) -> Event:
    when = clock.tick()
    event = Event(id=_uuid(), invocation_id=plan.invocation_id, author=AGENT_NAME, timestamp=when.timestamp(), **fields)
    plan.times[id(event)] = when
    return event


def _header_update_event(clock: _Clock, plan: _TurnPlan, headers: dict[str, str]) -> Event:
    """kagent 0.10.x writes this system event before every new (non-resume) turn."""
    when = clock.tick()
    event = Event(
        id=_uuid(),
        invocation_id="header_update",
        author="system",
        actions=EventActions(state_delta={"headers": headers}),
        timestamp=when.timestamp(),
    )
    plan.times[id(event)] = when
    return event


def _end_of_agent_event(plan: _TurnPlan, clock: _Clock) -> Event:
    """The agent-state event a resumable ADK app (kagent's) writes when the agent finishes a turn."""
    return _agent_event(plan, clock, actions=EventActions(end_of_agent=True))


def _lookup_call(plan: _TurnPlan, clock: _Clock) -> tuple[Event, Event]:
    call_id = "adk-" + _uuid()
    plan.call_ids.append(call_id)
    args = {"resource_type": "pod", "namespace": "default"}
    call = _agent_event(
        plan,
        clock,
        model_version=MODEL_VERSION,
        content=genai.Content(
            role="model", parts=[genai.Part(function_call=genai.FunctionCall(id=call_id, name=_LOOKUP_TOOL, args=args))]
        ),
        usage_metadata=_usage(612 + plan.index, 24),
    )
    result = (
        "NAME                      READY   STATUS             RESTARTS   AGE\n"
        f"nginx-7d4b9c-xk2p9        0/1     CrashLoopBackOff   {7 + plan.index}          41m\n"
        "web-5f6d8b7c9-2lq8r       1/1     Running            0          3d"
    )
    response = _agent_event(
        plan,
        clock,
        content=genai.Content(
            role="user",
            parts=[
                genai.Part(
                    function_response=genai.FunctionResponse(id=call_id, name=_LOOKUP_TOOL, response={"result": result})
                )
            ],
        ),
    )
    return call, response


def _agent_tool_call(plan: _TurnPlan, clock: _Clock) -> tuple[Event, Event]:
    """A call to a sub-agent used as a tool: kagent's remote A2A tool answers with the sub-agent's
    session id, which the UI links the call's card to."""
    call_id = "adk-" + _uuid()
    plan.call_ids.append(call_id)
    plan.subagent_session_id = _uuid()
    call = _agent_event(
        plan,
        clock,
        model_version=MODEL_VERSION,
        content=genai.Content(
            role="model",
            parts=[
                genai.Part(
                    function_call=genai.FunctionCall(
                        id=call_id, name=_AGENT_TOOL, args={"request": "List the helm releases"}
                    )
                )
            ],
        ),
        usage_metadata=_usage(630 + plan.index, 18),
    )
    response = _agent_event(
        plan,
        clock,
        content=genai.Content(
            role="user",
            parts=[
                genai.Part(
                    function_response=genai.FunctionResponse(
                        id=call_id,
                        name=_AGENT_TOOL,
                        response={"result": "2 releases: web, db", "subagent_session_id": plan.subagent_session_id},
                    )
                )
            ],
        ),
    )
    return call, response


def _final_text(plan: _TurnPlan, clock: _Clock) -> Event:
    plan.agent_text = f"Answer {plan.index + 1}: I looked into \u201c{plan.user_text}\u201d. Everything checks out."
    return _agent_event(
        plan,
        clock,
        model_version=MODEL_VERSION,
        content=genai.Content(role="model", parts=[genai.Part(text=plan.agent_text)]),
        usage_metadata=_usage(905 + plan.index, 57),
    )


def _build_turn_events(
    plan: _TurnPlan,
    clock: _Clock,
    *,
    dialect: Dialect,
    runtime_events: bool,
    user_id: str,
) -> None:
    headers = {"x-user-id": user_id, "a2a-extensions": HITL_EXTENSION_URI, "content-type": "application/json"}
    if runtime_events and dialect == "legacy":
        plan.first.append(_header_update_event(clock, plan, headers))
    # kagent main passes the request headers as the run's state_delta, which ADK stores on the user event.
    user_headers = headers if runtime_events and dialect == "v1" else None
    plan.first.append(_user_event(plan.invocation_id, plan.user_text, clock, plan, user_headers))
    if plan.phase == "running":
        return
    if plan.kind == "tool":
        plan.first.extend(_lookup_call(plan, clock))
    if plan.kind == "agent_tool":
        plan.first.extend(_agent_tool_call(plan, clock))
    if plan.kind == "approval":
        call_id = "adk-" + _uuid()
        plan.call_ids.append(call_id)
        ask = plan.hitl == "ask_user"
        args: dict[str, Any] = (
            {"questions": _ASK_QUESTIONS}
            if ask
            else {"resource_type": "pod", "resource_name": "nginx-7d4b9c-xk2p9", "namespace": "default"}
        )
        original = genai.FunctionCall(id=call_id, name="ask_user" if ask else _APPROVAL_TOOL, args=args)
        hint = (
            f"Please approve or reject the tool call {_APPROVAL_TOOL}() by responding with a FunctionResponse "
            "with an expected ToolConfirmation payload."
        )
        call = _agent_event(
            plan,
            clock,
            model_version=MODEL_VERSION,
            content=genai.Content(role="model", parts=[genai.Part(function_call=original)]),
            usage_metadata=_usage(640 + plan.index, 31),
        )
        needs_confirmation = _agent_event(
            plan,
            clock,
            content=genai.Content(
                role="user",
                parts=[
                    genai.Part(
                        function_response=genai.FunctionResponse(
                            id=call_id,
                            name=original.name,
                            # kagent's ask_user answers "pending" until the human answers.
                            response={"status": "pending"}
                            if ask
                            else {"error": "This tool call requires confirmation, please approve or reject."},
                        )
                    )
                ],
            ),
            actions=EventActions(
                skip_summarization=True, requested_tool_confirmations={call_id: ToolConfirmation(hint=hint)}
            ),
        )
        confirmation_id = "adk-" + _uuid()
        plan.confirmation_id = confirmation_id
        request = _agent_event(
            plan,
            clock,
            content=genai.Content(
                role="model",
                parts=[
                    genai.Part(
                        function_call=genai.FunctionCall(
                            id=confirmation_id,
                            name=REQUEST_CONFIRMATION,
                            args={
                                "originalFunctionCall": original.model_dump(exclude_none=True, by_alias=True),
                                "toolConfirmation": ToolConfirmation(hint=hint).model_dump(
                                    by_alias=True, exclude_none=True
                                ),
                            },
                        )
                    )
                ],
            ),
            long_running_tool_ids={confirmation_id},
        )
        plan.first.extend([call, needs_confirmation, request])
        plan.pause_at = clock.tick()
        if plan.phase == "awaiting_approval":
            return
        # The human approves: kagent turns the decision into an ADK FunctionResponse (main: by_alias and
        # exclude_none; 0.10.x: a plain model_dump_json), which ADK stores as a user event of the same invocation.
        plan.resume_at = clock.tick()
        confirmation = ToolConfirmation(confirmed=True, payload={"answers": _ASK_ANSWERS} if ask else None)
        payload = (
            confirmation.model_dump_json(by_alias=True, exclude_none=True)
            if dialect == "v1"
            else confirmation.model_dump_json()
        )
        when = clock.tick()
        approval = Event(
            id=_uuid(),
            invocation_id=plan.invocation_id,
            author="user",
            content=genai.Content(
                role="user",
                parts=[
                    genai.Part(
                        function_response=genai.FunctionResponse(
                            id=confirmation_id, name=REQUEST_CONFIRMATION, response={"response": payload}
                        )
                    )
                ],
            ),
            timestamp=when.timestamp(),
        )
        plan.times[id(approval)] = when
        result = _agent_event(
            plan,
            clock,
            content=genai.Content(
                role="user",
                parts=[
                    genai.Part(
                        function_response=genai.FunctionResponse(
                            id=call_id,
                            name=original.name,
                            response={"result": {"answers": _ASK_ANSWERS}}
                            if ask
                            else {"result": 'pod "nginx-7d4b9c-xk2p9" deleted'},
                        )
                    )
                ],
            ),
        )
        plan.resume.extend([approval, result, _final_text(plan, clock)])
        if runtime_events:
            plan.resume.append(_end_of_agent_event(plan, clock))
        return
    plan.first.append(_final_text(plan, clock))
    if runtime_events:
        plan.first.append(_end_of_agent_event(plan, clock))


# --------------------------------------------------------------------------------------------------
# Event rows


def _go_event(event: Event, when: datetime) -> dict[str, Any]:
    """The JSON Go ADK's ``json.Marshal(session.Event)`` writes: camelCase, RFC 3339 timestamp, omitempty."""
    data = event.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["timestamp"] = _rfc3339(when)
    data.pop("nodeInfo", None)  # nil outside workflows
    actions = data.get("actions", {})
    for key in ("requestedAuthConfigs", "requestedToolConfirmations"):
        if not actions.get(key):
            actions.pop(key, None)
    if "longRunningToolIds" in data:
        data["longRunningToolIds"] = sorted(data["longRunningToolIds"])
    return data


def _event_rows(plan: _TurnPlan, style: EventStyle) -> list[EventRow]:
    rows = []
    for event in plan.first + plan.resume:
        when = plan.times[id(event)]
        if style == "python":
            data = event.model_dump_json()
        elif style == "python_compact":
            data = event.model_dump_json(exclude_none=True)
        else:
            data = _compact(_go_event(event, when))
        rows.append(EventRow(event.id, when, data))
    return rows


def _openai_rows(plan: _TurnPlan, clock: _Clock) -> list[EventRow]:
    """kagent-openai's ``add_items``: one row with the user's input, one with the run's new items."""
    rows = []
    when = clock.tick()
    items: list[dict[str, Any]] = [{"content": plan.user_text, "role": "user"}]
    rows.append(
        EventRow(
            _uuid(), when, json.dumps({"timestamp": when.isoformat(), "items": items, "type": "conversation_items"})
        )
    )
    if plan.phase == "running":
        return rows
    new_items: list[dict[str, Any]] = []
    if plan.kind == "tool":
        call_id = "call_" + secrets.token_hex(12)
        plan.call_ids.append(call_id)
        new_items += [
            {
                "arguments": json.dumps({"resource_type": "pod", "namespace": "default"}),
                "call_id": call_id,
                "name": _LOOKUP_TOOL,
                "type": "function_call",
                "id": "fc_" + secrets.token_hex(16),
                "status": "completed",
            },
            {"call_id": call_id, "output": "nginx-7d4b9c-xk2p9  0/1  CrashLoopBackOff", "type": "function_call_output"},
        ]
    plan.agent_text = f"Answer {plan.index + 1}: I looked into \u201c{plan.user_text}\u201d. Everything checks out."
    new_items.append(
        {
            "id": "msg_" + secrets.token_hex(16),
            "content": [{"annotations": [], "text": plan.agent_text, "type": "output_text", "logprobs": []}],
            "role": "assistant",
            "status": "completed",
            "type": "message",
        }
    )
    when = clock.tick()
    rows.append(
        EventRow(
            _uuid(), when, json.dumps({"timestamp": when.isoformat(), "items": new_items, "type": "conversation_items"})
        )
    )
    return rows


# --------------------------------------------------------------------------------------------------
# A2A v1.0 tasks (kagent main)


class _Context(NamedTuple):
    session_id: str
    user_id: str
    app_name: str
    metadata_style: MetadataStyle
    with_invocation: bool  # False for OpenAI-agents sessions


def _v1_task(plan: _TurnPlan, ctx: _Context) -> dict[str, Any]:
    from a2a.server.context import ServerCallContext
    from a2a.server.tasks.task_manager import TaskManager
    from a2a.server.tasks.task_store import TaskStore
    from a2a.types import Message, Part, Role, Task, TaskState, TaskStatus, TaskStatusUpdateEvent
    from google.adk.a2a.converters.from_adk_event import convert_event_to_a2a_events
    from google.adk.a2a.converters.long_running_functions import LongRunningFunctions
    from google.adk.a2a.converters.part_converter import convert_genai_part_to_a2a_part
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.struct_pb2 import Struct

    try:
        from google.adk.a2a.agent.interceptors.new_integration_extension import (
            _NEW_A2A_ADK_INTEGRATION_EXTENSION as adk_extension,
        )
    except ImportError:  # pragma: no cover - the value in google-adk 2.6.2
        adk_extension = "https://google.github.io/adk-docs/a2a/a2a-extension/"

    class _Store(TaskStore):
        """A store whose methods never suspend, so that the TaskManager can be driven synchronously."""

        def __init__(self) -> None:
            self.tasks: dict[str, Task] = {}

        async def save(self, task: Task, context: Any = None) -> None:
            self.tasks[task.id] = task

        async def get(self, task_id: str, context: Any = None) -> Task | None:
            return self.tasks.get(task_id)

        async def delete(self, task_id: str, context: Any = None) -> None:
            self.tasks.pop(task_id, None)

        async def list(self, params: Any, context: Any = None) -> Any:  # pragma: no cover - unused
            raise NotImplementedError

    def struct(values: dict[str, Any]) -> Struct:
        s = Struct()
        s.update(values)
        return s

    def timestamp(when: datetime) -> Any:
        status = TaskStatus()
        status.timestamp.FromDatetime(when)
        return status.timestamp

    task_id, context_id = plan.task_id, ctx.session_id
    invocation_md: dict[str, Any] = {
        "adk_app_name": ctx.app_name,
        "adk_user_id": ctx.user_id,
        "adk_session_id": ctx.session_id,
        adk_extension: {"adk_agent_executor_v2": True},
    }

    def status_event(state: Any, when: datetime, *, message: Any = None, metadata: dict[str, Any]) -> Any:
        status = TaskStatus(state=state)
        status.timestamp.CopyFrom(timestamp(when))
        if message is not None:
            status.message.CopyFrom(message)
        return TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status, metadata=struct(metadata))

    def kagent_md(last_event: Event | None) -> dict[str, Any]:
        """What kagent main's ``_after_agent`` interceptor adds to the final status event."""
        md: dict[str, Any] = {
            "kagent_app_name": ctx.app_name,
            "kagent_user_id": ctx.user_id,
            "kagent_session_id": ctx.session_id,
        }
        if last_event is not None:
            md["kagent_invocation_id"] = last_event.invocation_id
        usage = next((e.usage_metadata for e in reversed(events_seen) if e.usage_metadata is not None), None)
        if usage is not None:
            md["kagent_usage_metadata"] = usage.model_dump(mode="json", exclude_none=True, by_alias=True)
        return md

    user_md: dict[str, Any] = {"displaySource": "user"}  # what kagent's UI sends
    if ctx.metadata_style == "sample" and ctx.with_invocation:
        user_md["adk_invocation_id"] = plan.invocation_id
    user_message = Message(
        message_id=_uuid(),
        role=Role.ROLE_USER,
        parts=[Part(text=plan.user_text)],
        context_id=context_id,
        task_id=task_id,
        metadata=struct(user_md),
    )
    manager = TaskManager(_Store(), ServerCallContext(), task_id, context_id, None)
    assert plan.created_at is not None and plan.updated_at is not None
    submitted = Task(id=task_id, context_id=context_id, history=[user_message], metadata=struct(invocation_md))
    submitted.status.state = TaskState.TASK_STATE_SUBMITTED
    submitted.status.timestamp.CopyFrom(timestamp(plan.created_at))
    _drive(manager.save_task_event(submitted))
    events_seen: list[Event] = []

    def run(events: Iterable[Event], when: datetime) -> LongRunningFunctions:
        """One execute(): a WORKING status, then every ADK event of the runner through the converters."""
        _drive(manager.save_task_event(status_event(TaskState.TASK_STATE_WORKING, when, metadata=invocation_md)))
        # kagent's executor passes ADK's GenAI->A2A converter; LongRunningFunctions' own default is the
        # A2A->GenAI one (a latent upstream bug), which cannot convert these parts.
        long_running = LongRunningFunctions(convert_genai_part_to_a2a_part)
        artifacts: dict[str, str] = {}
        for event in events:
            if event.author == "user":
                continue  # the runner stores the user's event; it does not yield it
            events_seen.append(event)
            processed = long_running.process_event(event)
            a2a_events = convert_event_to_a2a_events(processed, artifacts, task_id, context_id)
            for a2a_event in a2a_events:
                a2a_event.metadata.CopyFrom(struct(invocation_md))
                _drive(manager.save_task_event(a2a_event))
        return long_running

    if plan.phase == "running":
        _drive(
            manager.save_task_event(status_event(TaskState.TASK_STATE_WORKING, plan.created_at, metadata=invocation_md))
        )
    else:
        long_running = run(plan.first, plan.created_at)
        if plan.kind == "approval":
            assert plan.pause_at is not None and plan.confirmation_id is not None
            paused = long_running.create_long_running_function_call_event(task_id, context_id)
            # kagent's _after_agent replaces the ADK confirmation parts with the public HITL request.
            original = next(p for e in plan.first for p in (e.content.parts if e.content else []) if p.function_call)
            assert original.function_call is not None
            hint = (
                f"Please approve or reject the tool call {_APPROVAL_TOOL}() by responding with a "
                "FunctionResponse with an expected ToolConfirmation payload."
            )
            request = {
                "type": "tool_approval_request",
                "hint": hint,
                "tools": [
                    {
                        "id": plan.confirmation_id,
                        "call_id": original.function_call.id,
                        "name": original.function_call.name,
                        "args": original.function_call.args,
                    }
                ],
            }
            hitl_message = Message(
                message_id=_uuid(),
                role=Role.ROLE_AGENT,
                task_id=task_id,
                context_id=context_id,
                parts=[Part(text=hint)],
            )
            hitl_message.extensions.append(HITL_EXTENSION_URI)
            hitl_message.metadata.update({HITL_EXTENSION_URI: request})
            md = {**invocation_md, **kagent_md(plan.first[-1])}
            _drive(
                manager.save_task_event(
                    status_event(paused.status.state, plan.pause_at, message=hitl_message, metadata=md)
                )
            )
            if plan.canceled:
                _drive(
                    manager.save_task_event(status_event(TaskState.TASK_STATE_CANCELED, plan.updated_at, metadata=md))
                )
            if plan.phase == "done":
                assert plan.resume_at is not None
                # kagent rewrites the UI's decision into the ADK FunctionResponse before the first event, and
                # a2a-sdk saves the request message by reference: the translated message is what history keeps.
                approval_event = plan.resume[0]
                assert approval_event.content is not None
                parts = [convert_genai_part_to_a2a_part(p) for p in approval_event.content.parts or []]
                resume_md: dict[str, Any] = {}
                if ctx.metadata_style == "sample" and ctx.with_invocation:
                    resume_md["adk_invocation_id"] = plan.invocation_id
                resume_message = Message(
                    message_id=_uuid(),
                    role=Role.ROLE_USER,
                    task_id=task_id,
                    context_id=context_id,
                    parts=[p for p in parts if p is not None],
                )
                if resume_md:
                    resume_message.metadata.update(resume_md)
                current = _drive(manager.get_task())
                manager.update_with_message(resume_message, current)
                run(plan.resume, plan.resume_at)
        if plan.phase == "done":
            last = (plan.resume or plan.first)[-1]
            md = {**invocation_md, **kagent_md(last)}
            _drive(manager.save_task_event(status_event(TaskState.TASK_STATE_COMPLETED, plan.updated_at, metadata=md)))
    task = _drive(manager.get_task())
    data = _go_numbers(MessageToDict(task))
    if not ctx.with_invocation:
        _strip_invocation_keys(data)
    return data


def _strip_invocation_keys(node: Any) -> None:
    """OpenAI-agents sessions have no ADK invocation: drop the keys that would name one."""
    if isinstance(node, dict):
        metadata = node.get("metadata")
        if isinstance(metadata, dict):
            for key in [k for k in metadata if k.endswith(("invocation_id", "event_id"))]:
                del metadata[key]
        for value in node.values():
            _strip_invocation_keys(value)
    elif isinstance(node, list):
        for value in node:
            _strip_invocation_keys(value)


# --------------------------------------------------------------------------------------------------
# Legacy (A2A 0.3) tasks (kagent 0.10.x)


def _legacy_decision(plan: _TurnPlan) -> dict[str, Any]:
    """The data part kagent 0.10.x's UI sends with the human's answer."""
    if plan.hitl == "ask_user":
        return {"decision_type": "approve", "ask_user_answers": _ASK_ANSWERS}
    if plan.hitl == "batch":
        return {"decision_type": "batch", "decisions": {plan.call_ids[0]: "approve"}}
    return {"decision_type": "approve"}


def _legacy_task(plan: _TurnPlan, ctx: _Context) -> dict[str, Any]:
    from a2a.compat.v0_3 import types as v03

    task_id, context_id = plan.task_id, ctx.session_id

    def part(p: genai.Part) -> v03.Part | None:
        """kagent 0.10.x's convert_genai_part_to_a2a_part, for the parts these conversations hold."""
        if p.text:
            return v03.Part(root=v03.TextPart(text=p.text))
        for attr in ("function_call", "function_response"):
            value = getattr(p, attr)
            if value is not None:
                metadata: dict[str, Any] = {"kagent_type": attr}
                if attr == "function_call" and value.name == _AGENT_TOOL and plan.subagent_session_id:
                    # kagent 0.10.x's event converter stamps the sub-agent's session on the call.
                    metadata["kagent_subagent_session_id"] = plan.subagent_session_id
                return v03.Part(
                    root=v03.DataPart(data=value.model_dump(by_alias=True, exclude_none=True), metadata=metadata)
                )
        return None

    def context_md(event: Event) -> dict[str, Any]:
        """kagent 0.10.x's _get_context_metadata."""
        md: dict[str, Any] = {
            "kagent_adk_partial": event.partial,
            "kagent_app_name": ctx.app_name,
            "kagent_user_id": ctx.user_id,
            "kagent_session_id": ctx.session_id,
            "kagent_invocation_id": event.invocation_id,
            "kagent_author": event.author,
        }
        if event.branch is not None:
            md["kagent_branch"] = event.branch
        if event.usage_metadata is not None:
            md["kagent_usage_metadata"] = event.usage_metadata.model_dump(mode="json", exclude_none=True, by_alias=True)
        return md

    def apply_status(
        state: v03.TaskState, when: datetime, message: v03.Message | None, md: dict[str, Any] | None
    ) -> None:
        """a2a-sdk 0.3.26 TaskManager.save_task_event for a TaskStatusUpdateEvent."""
        if task.status.message:
            task.history = [*(task.history or []), task.status.message]
        if md:
            task.metadata = {**(task.metadata or {}), **md}
        task.status = v03.TaskStatus(state=state, timestamp=_rfc3339(when), message=message)

    def user_md(extra: dict[str, Any]) -> dict[str, Any]:
        md = dict(extra)
        if ctx.metadata_style == "sample" and ctx.with_invocation:
            md["adk_invocation_id"] = plan.invocation_id
        return md

    base_md: dict[str, Any] = {
        "kagent_app_name": ctx.app_name,
        "kagent_user_id": ctx.user_id,
        "kagent_session_id": ctx.session_id,
    }
    user_message = v03.Message(
        message_id=_uuid(),
        role=v03.Role.user,
        parts=[v03.Part(root=v03.TextPart(text=plan.user_text))],
        context_id=context_id,
        task_id=task_id,
        metadata=user_md({"displaySource": "user"}),
    )
    assert plan.created_at is not None and plan.updated_at is not None
    # The request handler creates the task with the request message in history, then the executor's
    # "submitted" status carries the same message, which the next status update moves into history again.
    task = v03.Task(
        id=task_id, context_id=context_id, status=v03.TaskStatus(state=v03.TaskState.submitted), history=[user_message]
    )
    apply_status(v03.TaskState.submitted, plan.created_at, user_message, None)

    def run(events: Iterable[Event], when: datetime) -> tuple[dict[str, Any], v03.Message | None]:
        """One execute() of kagent 0.10.x: its run metadata and the last status message it produced."""
        run_md = dict(base_md)
        last_message: v03.Message | None = None
        apply_status(v03.TaskState.working, when, None, dict(run_md))
        for event in events:
            if event.author in ("user", "system"):
                continue  # written to the session by the runner or the executor, never yielded as A2A
            run_md.setdefault("kagent_invocation_id", event.invocation_id)
            if event.usage_metadata is not None:
                run_md["kagent_usage_metadata"] = event.usage_metadata.model_dump(
                    mode="json", exclude_none=True, by_alias=True
                )
            parts = [q for q in (part(p) for p in (event.content.parts if event.content else None) or []) if q]
            if not parts:
                continue
            for q in parts:
                data = q.root
                if (
                    isinstance(data, v03.DataPart)
                    and event.long_running_tool_ids
                    and data.metadata
                    and data.metadata.get("kagent_type") == "function_call"
                    and data.data.get("id") in event.long_running_tool_ids
                ):
                    data.metadata["kagent_is_long_running"] = True
            last_message = v03.Message(
                message_id=_uuid(),
                role=v03.Role.agent,
                parts=parts,
                metadata=context_md(event),
                task_id=task_id,
                context_id=context_id,
            )
            apply_status(v03.TaskState.working, when, last_message, context_md(event))
        return run_md, last_message

    if plan.phase == "running":
        apply_status(v03.TaskState.working, plan.created_at, None, dict(base_md))
    else:
        run_md, last_message = run(plan.first, plan.created_at)
        if plan.kind == "approval":
            assert plan.pause_at is not None
            apply_status(v03.TaskState.input_required, plan.pause_at, last_message, run_md)
            if plan.phase == "done":
                assert plan.resume_at is not None
                # The UI's decision message; the request handler moves the status message into history
                # (a second copy of the confirmation request) and appends the decision.
                decision = v03.Message(
                    message_id=_uuid(),
                    role=v03.Role.user,
                    parts=[
                        v03.Part(root=v03.DataPart(data=_legacy_decision(plan), metadata={})),
                        v03.Part(
                            root=v03.TextPart(text="Answered questions" if plan.hitl == "ask_user" else "Approved")
                        ),
                    ],
                    context_id=context_id,
                    task_id=task_id,
                    metadata=user_md({"timestamp": int(plan.resume_at.timestamp() * 1000)}),  # the UI's Date.now()
                )
                moved = [task.status.message] if task.status.message else []
                task.history = [*(task.history or []), *moved, decision]
                task.status = v03.TaskStatus(state=task.status.state, timestamp=task.status.timestamp)
                run_md, last_message = run(plan.resume, plan.resume_at)
            if plan.canceled:
                # The human never answered; the task was canceled (the request moves into history).
                apply_status(v03.TaskState.canceled, plan.updated_at, None, run_md)
        if plan.phase == "done":
            # The aggregated final reply becomes an artifact, then "completed" moves it into history.
            assert last_message is not None
            artifact = v03.Artifact(artifact_id=_uuid(), parts=list(last_message.parts))
            task.artifacts = [*(task.artifacts or []), artifact]
            apply_status(v03.TaskState.completed, plan.updated_at, None, run_md)
    if ctx.metadata_style == "sample":
        task.metadata = {
            **(task.metadata or {}),
            "adk_app_name": ctx.app_name,
            "adk_user_id": ctx.user_id,
            "adk_session_id": ctx.session_id,
        }
    data = json.loads(task.model_dump_json(by_alias=True, exclude_none=True))
    if not ctx.with_invocation:
        _strip_invocation_keys(data)
    return data


# --------------------------------------------------------------------------------------------------
# The builder


_UNSET: Any = object()


def build_conversation(
    *,
    dialect: Dialect,
    turns: int,
    user_id: str = DEFAULT_USER_ID,
    session_id: str | None = None,
    event_style: EventStyle = "python",
    tool_calls: bool = False,
    approval_turn: int | None = None,
    running_last_turn: bool = False,
    start: datetime | None = None,
    agent_id: str = DEFAULT_AGENT_ID,
    name: str | None = _UNSET,
    source: str | None = "user",
    metadata_style: MetadataStyle = "sample",
    runtime_events: bool = False,
    awaiting_approval_last_turn: bool = False,
    shapes: dict[int, Shape] | None = None,
) -> Conversation:
    """A conversation of ``turns`` turns, as kagent stores it.

    Every turn is one invocation (``"e-<uuid4>"``) and one task (``contextId`` = the session id). A turn is a
    user event, then (``tool_calls``) a function_call and a function_response event, then the agent's final
    text event.

    ``approval_turn`` (0-based): that turn calls a tool that needs human approval, and is stored as kagent
    stores it once approved and completed: user event, function_call, function_response "requires
    confirmation" (with ``actions.requested_tool_confirmations``), the long-running ``adk_request_confirmation``
    call, the user's FunctionResponse to it, the tool's real function_response and the final text, all of one
    invocation, in one task.

    ``running_last_turn``: the last turn's task is ``working`` and only its user event is written.
    ``awaiting_approval_last_turn``: the last turn is an approval turn still waiting for the human
    (``input-required``), its events written up to the ``adk_request_confirmation`` call.

    ``shapes`` (0-based turn -> :data:`Shape`): turns of the other human-in-the-loop forms, or a call to a
    sub-agent tool (its function_call part carries ``kagent_subagent_session_id`` on legacy tasks, its
    response the ``subagent_session_id``, on both lines). ``"batch"`` and the ``"ask_user"`` forms are modelled
    for legacy tasks only. An ``"unanswered"`` turn is stored as kagent stores an approval the human never gave
    before the task was canceled: events up to the ``adk_request_confirmation`` call, the request moved into
    ``history`` by the ``canceled`` status.

    ``runtime_events`` adds the bookkeeping events kagent's Python runtimes also write (Python event styles
    only): the ``end_of_agent`` state event closing every finished turn (both lines, resumable apps), the
    ``"header_update"``/``"system"`` event before every new turn (0.10.x), the request headers in the user
    event's ``actions.state_delta`` (main).

    ``name`` defaults to the name kagent's executor derives from the first message; pass ``"Chat"`` or
    ``None`` for the UI's placeholder or an unnamed session. Timestamps start at ``start`` (default: one
    hour ago) for the session row; every task and event row is 1 ms after the previous one, a task just
    before its turn's first event.
    """
    if turns < 1:
        raise ValueError("turns must be at least 1")
    if approval_turn is not None and not 0 <= approval_turn < turns:
        raise ValueError(f"approval_turn must be in [0, {turns})")
    if running_last_turn and awaiting_approval_last_turn:
        raise ValueError("the last turn cannot be both running and awaiting approval")
    if (running_last_turn or awaiting_approval_last_turn) and approval_turn == turns - 1:
        raise ValueError("approval_turn names the last turn, which is running")
    shapes = shapes or {}
    if any(not 0 <= i < turns for i in shapes) or (approval_turn in shapes):
        raise ValueError("shapes name turns of the conversation other than approval_turn")
    if dialect == "v1" and set(shapes.values()) - {"approved", "unanswered", "agent_tool"}:
        raise ValueError("batch and ask_user turns are modelled for legacy tasks only")
    if (running_last_turn or awaiting_approval_last_turn) and turns - 1 in shapes:
        raise ValueError("shapes name the last turn, which is running")
    if event_style == "openai" and (approval_turn is not None or awaiting_approval_last_turn or shapes):
        raise ValueError("approval turns are an ADK feature; they are not modelled for OpenAI-agents sessions")

    session_id = session_id or _uuid()
    start = (start or datetime.now(UTC) - timedelta(hours=1)).astimezone(UTC)
    clock = _Clock(start)
    session_created = clock.tick()
    with_invocation = event_style != "openai"
    ctx = _Context(session_id, user_id, agent_id, metadata_style, with_invocation)
    python_runtime = runtime_events and event_style in ("python", "python_compact")

    plans: list[_TurnPlan] = []
    event_rows: list[EventRow] = []
    task_rows: list[TaskRow] = []
    turn_infos: list[Turn] = []
    with warnings.catch_warnings():
        # ADK flags tool confirmation and its A2A converters as experimental; the warnings are noise here.
        warnings.simplefilter("ignore", UserWarning)
        for index in range(turns):
            last = index == turns - 1
            if last and awaiting_approval_last_turn:
                kind, phase = "approval", "awaiting_approval"
            elif index == approval_turn:
                kind, phase = "approval", "done"
            else:
                kind, phase = ("tool" if tool_calls else "plain"), "done"
            shape = shapes.get(index)
            if shape == "agent_tool":
                kind = "agent_tool"
            elif shape is not None:
                kind, phase = "approval", ("awaiting_approval" if shape.startswith("unanswered") else "done")
            if last and running_last_turn:
                phase = "running"
            plan = _TurnPlan(
                index=index,
                invocation_id="e-" + _uuid(),
                task_id=_uuid(),
                user_text=_question(index),
                kind=kind,  # type: ignore[arg-type]
                phase=phase,  # type: ignore[arg-type]
                hitl="batch" if shape == "batch" else "ask_user" if shape and "ask_user" in shape else "approve",
                canceled=shape is not None and shape.startswith("unanswered"),
            )
            plan.created_at = clock.tick()
            if with_invocation:
                _build_turn_events(plan, clock, dialect=dialect, runtime_events=python_runtime, user_id=user_id)
                rows = _event_rows(plan, event_style)
            else:
                # The task still tells the turn; build it from ADK events kept off the clock and the table.
                _build_turn_events(
                    plan, _Clock(plan.created_at), dialect=dialect, runtime_events=False, user_id=user_id
                )
                plan.call_ids.clear()
                rows = _openai_rows(plan, clock)
            plan.updated_at = clock.tick()
            plans.append(plan)
            event_rows.extend(rows)

            task = _v1_task(plan, ctx) if dialect == "v1" else _legacy_task(plan, ctx)
            data = _compact(task) if dialect == "v1" else json.dumps(task, separators=(",", ":"), ensure_ascii=False)
            task_rows.append(
                TaskRow(
                    plan.task_id,
                    plan.created_at,
                    data,
                    V1_PROTOCOL_VERSION if dialect == "v1" else None,
                    plan.updated_at,
                )
            )
            turn_infos.append(
                Turn(
                    index=index,
                    invocation_id=plan.invocation_id if with_invocation else None,
                    task_id=plan.task_id,
                    user_text=plan.user_text,
                    agent_text=plan.agent_text or None,
                    state=task["status"]["state"],
                    kind=plan.kind,
                    user_message_id=task["history"][0]["messageId"],
                    event_ids=tuple(r.id for r in rows),
                    started_at=rows[0].created_at,
                    function_call_ids=tuple(plan.call_ids),
                    confirmation_call_id=plan.confirmation_id,
                )
            )

    first_text = plans[0].user_text
    return Conversation(
        session_id=session_id,
        user_id=user_id,
        agent_id=agent_id,
        name=_derived_name(first_text) if name is _UNSET else name,
        events=event_rows,
        tasks=task_rows,
        invocation_ids=[p.invocation_id for p in plans] if with_invocation else [],
        turns=turn_infos,
        dialect=dialect,
        event_style=event_style,
        metadata_style=metadata_style,
        app_name=agent_id,
        source=source,
        created_at=session_created,
        updated_at=max([*(r.created_at for r in event_rows), *(t.updated_at for t in task_rows)]),
    )


# --------------------------------------------------------------------------------------------------
# Database writes


async def insert_conversation(
    conn: Any, conv: Conversation, *, schema_version_ok: bool = True, null_task_owner: bool = False
) -> None:
    """Insert the session row, its events and its tasks, with their own timestamps, in one transaction.

    ``schema_version_ok``: when the database's ``schema_migrations`` is empty, record the clean migration
    version of the conversation's kagent line (7 for legacy, 13 for v1); ``False`` leaves that table alone
    (for tests that set it themselves). ``null_task_owner``: write ``task.user_id`` NULL, as rows written
    before kagent's migration 7 are (their owner is then resolved through the session, see kagent_reads).
    """
    async with conn.transaction():
        if schema_version_ok:
            await conn.execute(
                "INSERT INTO schema_migrations (version, dirty) SELECT $1, false "
                "WHERE NOT EXISTS (SELECT 1 FROM schema_migrations)",
                conv.schema_version,
            )
        await conn.execute(
            "INSERT INTO session (id, user_id, name, created_at, updated_at, deleted_at, agent_id, source) "
            "VALUES ($1, $2, $3, $4, $5, NULL, $6, $7)",
            conv.session_id,
            conv.user_id,
            conv.name,
            conv.created_at,
            conv.updated_at,
            conv.agent_id,
            conv.source,
        )
        await conn.executemany(
            "INSERT INTO event (id, user_id, session_id, created_at, updated_at, deleted_at, data) "
            "VALUES ($1, $2, $3, $4, $4, NULL, $5)",
            [(e.id, conv.user_id, conv.session_id, e.created_at, e.data) for e in conv.events],
        )
        await conn.executemany(
            "INSERT INTO task (id, created_at, updated_at, deleted_at, data, session_id, protocol_version, user_id) "
            "VALUES ($1, $2, $3, NULL, $4, $5, $6, $7)",
            [
                (
                    t.id,
                    t.created_at,
                    t.updated_at,
                    t.data,
                    conv.session_id,
                    t.protocol_version,
                    None if null_task_owner else conv.user_id,
                )
                for t in conv.tasks
            ],
        )


async def create_share(conn: Any, *, session_id: str, owner: str, read_only: bool) -> str:
    """A ``session_share`` row as kagent's CreateSessionShare writes it; returns its token."""
    token = secrets.token_urlsafe(24)
    return str(
        await conn.fetchval(
            "INSERT INTO session_share (token, session_id, user_id, read_only) VALUES ($1, $2, $3, $4) RETURNING token",
            token,
            session_id,
            owner,
            read_only,
        )
    )
