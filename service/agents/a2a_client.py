"""Speaking A2A to a kagent agent, with a2a-sdk's client transports, in the dialect of the conversation's
product line: JSON-RPC 0.3 (`message/send`, `tasks/get`, `tasks/cancel`) for legacy sessions, A2A 1.0
JSON-RPC (`SendMessage`, `GetTask`, `CancelTask`) for v1.0 sessions. The message is built as an A2A 1.0
value and the 0.3 transport converts it, as the SDK does for every legacy peer."""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pydantic
from a2a.client.errors import A2AClientError
from a2a.client.transports.base import ClientTransport
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types import a2a_pb2 as a2a
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_CURRENT, VERSION_HEADER
from a2a.utils.errors import A2AError as SdkError
from a2a.utils.errors import TaskNotFoundError
from google.protobuf import json_format

from service.kagent import dialects
from service.kagent.dialects import JSON, TaskDialect
from service.outbound import tls

# kagent's human-in-the-loop extension (main line): an agent puts a tool approval request in its
# input-required message only for a client that names it in this header, as kagent's UI does.
HITL_EXTENSION_URI = "https://kagent.dev/extensions/hitl/v1"
EXTENSIONS_HEADER = "A2A-Extensions"

TERMINAL = {
    a2a.TASK_STATE_COMPLETED: "completed",
    a2a.TASK_STATE_FAILED: "failed",
    a2a.TASK_STATE_CANCELED: "cancelled",
    a2a.TASK_STATE_REJECTED: "failed",
    # The agent waits for the user (an approval, a question): the turn is as far as it goes without
    # them; the user answers it in the fork, as in any chat.
    a2a.TASK_STATE_INPUT_REQUIRED: "completed",
    a2a.TASK_STATE_AUTH_REQUIRED: "completed",
}

log = logging.getLogger("kagent_fork")


def state_name(state: int) -> str:
    name: str = a2a.TaskState.Name(state)
    return name


def state_label(state: str | None) -> str | None:
    """A task state as the legacy dialect spells it, whichever the dialect (TASK_STATE_INPUT_REQUIRED and
    input-required are both input-required), so that columns of both lines read alike."""
    if state is None:
        return None
    if state.startswith("TASK_STATE_"):
        return state.removeprefix("TASK_STATE_").lower().replace("_", "-")
    return state


def label_of(state: int) -> str:
    label = state_label(state_name(state))
    assert label is not None
    return label


class AgentError(Exception):
    """The agent could not be reached, or did not answer as an A2A agent does."""


class TaskNotFound(AgentError):
    """The agent answered that it does not know the task (A2A's TaskNotFoundError, JSON-RPC code -32001, in
    both dialects): not logged here, since what it means is the caller's to judge (replay/player.py)."""


@dataclass(frozen=True, kw_only=True)
class Agent:
    ref: str  # namespace/name: what an error names (never the URL: kagent's internal address is no caller's)
    url: str  # KAGENT_A2A_URL/<namespace>/<name>/
    dialect: TaskDialect
    headers: dict[str, str]  # the caller's identity, as kagent reads it
    timeout: float


def agent_url(base: str, agent_ref: str) -> str:
    namespace, name = agent_ref.split("/", 1)
    return f"{base.rstrip('/')}/{namespace}/{name}/"


def message_for(source: JSON, dialect: TaskDialect, context_id: str) -> a2a.Message:
    """The user's message of the source turn, as the agent is sent it again: all its parts, a new
    messageId, the fork as its context, no task (a new turn starts a new task), and none of the
    kagent/ADK bookkeeping keys of the source's metadata (they name the source's invocation)."""
    try:
        if dialect is TaskDialect.LEGACY:
            message = conversions.to_core_message(types_v03.Message.model_validate(source))
        else:
            message = json_format.ParseDict(source, a2a.Message(), ignore_unknown_fields=True)
    except (pydantic.ValidationError, json_format.ParseError, ValueError) as exc:
        raise AgentError(f"the source turn's user message is not a valid A2A message: {exc}") from None
    message.message_id = str(uuid.uuid4())
    message.context_id = context_id
    message.ClearField("task_id")
    message.ClearField("reference_task_ids")
    message.role = a2a.ROLE_USER
    for key in [k for k in message.metadata.fields if k.startswith(("adk_", "kagent_"))]:
        del message.metadata.fields[key]
    return message


def message_json(message: a2a.Message) -> str:
    text: str = json_format.MessageToJson(message, indent=None)
    return text


def text_message_json(text: str, context_id: str) -> str:
    """A new user message of one text part in a new context (a judge's question), as v1.0 JSON."""
    message = a2a.Message(
        message_id=str(uuid.uuid4()), context_id=context_id, role=a2a.ROLE_USER, parts=[a2a.Part(text=text)]
    )
    return message_json(message)


def task_json(task: a2a.Task) -> JSON:
    """A task the agent answered, as the v1.0 dialect's JSON (for dialects' readers)."""
    value: JSON = json_format.MessageToDict(task)
    return value


def message_from_json(text: str) -> a2a.Message:
    message = a2a.Message()
    json_format.Parse(text, message)
    return message


@asynccontextmanager
async def _transport(agent: Agent) -> AsyncIterator[ClientTransport]:
    async with httpx.AsyncClient(headers=agent.headers, timeout=agent.timeout, verify=tls()) as client:
        if agent.dialect is TaskDialect.LEGACY:
            yield CompatJsonRpcTransport(client, None, agent.url)  # it names version 0.3 on each request
        else:
            # As the SDK's client factory does: a server takes a request that names no version for 0.3.
            client.headers[VERSION_HEADER] = PROTOCOL_VERSION_CURRENT
            client.headers[EXTENSIONS_HEADER] = HITL_EXTENSION_URI
            card = a2a.AgentCard(name="kagent agent", description="", version="")
            yield JsonRpcTransport(client, card, agent.url)


def _failure(exc: BaseException, agent: Agent) -> AgentError:
    # The SDK wraps a transport's network errors in its own: the cause tells them apart. The exception's text
    # (which may hold kagent's internal address) goes to the log; the caller is told the agent and the kind.
    log.warning("agent %s at %s: %s: %s", agent.ref, agent.url, type(exc).__name__, exc)
    if isinstance(exc, httpx.TransportError | OSError) or isinstance(exc.__cause__, httpx.TransportError | OSError):
        return AgentError(f"the agent {agent.ref} could not be reached ({type(exc).__name__})")
    return AgentError(f"the agent {agent.ref} did not answer as an A2A agent ({type(exc).__name__})")


# What an agent that answers garbage makes the SDK raise: its own errors, a JSON or validation error.
_ANSWER_ERRORS: tuple[type[BaseException], ...] = (
    A2AClientError, SdkError, httpx.HTTPError, OSError, ValueError, KeyError, TypeError, pydantic.ValidationError,
    json_format.ParseError,
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Card:
    """Which agent answered: its card's name and version, and a hash of its skills."""

    name: str
    version: str
    skills_sha256: str


async def fetch_card(agent: Agent) -> Card:
    """The agent's card, as kagent serves it beside each agent's A2A endpoint."""
    url = agent.url.rstrip("/") + AGENT_CARD_WELL_KNOWN_PATH
    try:
        async with httpx.AsyncClient(headers=agent.headers, timeout=agent.timeout, verify=tls()) as client:
            response = await client.get(url)
    except (httpx.HTTPError, OSError) as exc:
        log.warning("agent %s: its card at %s could not be read: %s: %s", agent.ref, url, type(exc).__name__, exc)
        raise AgentError(f"its card could not be read ({type(exc).__name__})") from None
    if response.status_code != 200:
        raise AgentError(f"its card answered HTTP {response.status_code}")
    try:
        card = response.json()
    except ValueError:
        raise AgentError("its card is not JSON") from None
    if not isinstance(card, dict) or not isinstance(card.get("name"), str):
        raise AgentError("its card is not an A2A agent card (no name)")
    skills = json.dumps(card.get("skills") or [], sort_keys=True, separators=(",", ":"))
    version = card.get("version")
    return Card(
        name=card["name"], version=version if isinstance(version, str) else "",
        skills_sha256=hashlib.sha256(skills.encode()).hexdigest(),
    )  # fmt: skip


def _hitl_request(message: JSON) -> JSON | None:
    """The tool approval request a main-line agent's message carries (kagent's HITL extension), if any."""
    extensions = message.get("extensions")
    metadata = message.get("metadata")
    if not (isinstance(extensions, list) and HITL_EXTENSION_URI in extensions and isinstance(metadata, dict)):
        return None
    payload = metadata.get(HITL_EXTENSION_URI)
    return payload if isinstance(payload, dict) else None


def rejection(task: JSON, dialect: TaskDialect, *, context_id: str, task_id: str) -> tuple[JSON, int] | None:
    """The answer kagent's UI sends when a person rejects every tool call an input-required task asks to
    approve (the Reject button, no reason), as the message JSON of the task's dialect, and how many
    calls it rejects; None when the task asks something else (a question, or nothing a UI could answer).

    0.10.x (ChatInterface.sendApprovalDecision): a user message with the data part
    `{"decision_type": "reject"}` and the text "Rejected". main (hitl.ts buildToolApprovalResponse,
    createHitlResponseMessage): the text "0 approved, N rejected" and, in the message's metadata under
    the HITL extension, `{"type": "tool_approval_response", "approvals": [{"id", "approved": false}]}`
    for each tool the request shows (its nested tools when a sub-agent asks)."""
    message = dialects.status_message(task)
    if message is None:
        return None
    stamp = int(time.time() * 1000)
    if dialect is TaskDialect.LEGACY:
        requests = dialects.confirmation_requests(message, tool_approvals_only=True)
        if requests == 0:
            return None
        return {
            "kind": "message", "messageId": str(uuid.uuid4()), "role": "user",
            "parts": [{"kind": "data", "data": {"decision_type": "reject"}, "metadata": {}},
                      {"kind": "text", "text": "Rejected"}],
            "contextId": context_id, "taskId": task_id, "metadata": {"timestamp": stamp},
        }, requests  # fmt: skip
    request = _hitl_request(message)
    if request is None or request.get("type") != "tool_approval_request":
        return None
    nested = request.get("nested")
    tools = nested.get("tools") if isinstance(nested, dict) and nested.get("tools") else request.get("tools")
    if not isinstance(tools, list) or not tools or not all(isinstance(t, dict) and "id" in t for t in tools):
        return None
    answer = {"type": "tool_approval_response", "approvals": [{"id": t["id"], "approved": False} for t in tools]}
    return {
        "messageId": str(uuid.uuid4()), "role": "ROLE_USER",
        "parts": [{"text": f"0 approved, {len(tools)} rejected", "mediaType": "text/plain"}],
        "contextId": context_id, "taskId": task_id,
        "metadata": {"timestamp": stamp, HITL_EXTENSION_URI: answer}, "extensions": [HITL_EXTENSION_URI],
    }, len(tools)  # fmt: skip


def reply_message(reply: JSON, dialect: TaskDialect) -> a2a.Message:
    """A reply in the task's dialect (rejection) as the A2A 1.0 value the transports send, ids as given."""
    try:
        if dialect is TaskDialect.LEGACY:
            return conversions.to_core_message(types_v03.Message.model_validate(reply))
        return json_format.ParseDict(reply, a2a.Message(), ignore_unknown_fields=True)
    except (pydantic.ValidationError, json_format.ParseError, ValueError) as exc:
        raise AgentError(f"the reply is not a valid A2A message: {exc}") from None


async def send(agent: Agent, message: a2a.Message) -> a2a.Task | None:
    """Send the message without waiting for the agent's turn to end: the task as it starts (None: the
    agent answered with a message and no task, i.e. the turn is over)."""
    request = a2a.SendMessageRequest(
        message=message, configuration=a2a.SendMessageConfiguration(return_immediately=True)
    )
    try:
        async with _transport(agent) as transport:
            response = await transport.send_message(request)
    except _ANSWER_ERRORS as exc:
        raise _failure(exc, agent) from None
    if response.HasField("task"):
        return response.task
    if response.HasField("message"):
        return None
    raise AgentError(f"the agent {agent.ref} answered neither a task nor a message")


async def get_task(agent: Agent, task_id: str) -> a2a.Task:
    try:
        async with _transport(agent) as transport:
            return await transport.get_task(a2a.GetTaskRequest(id=task_id))
    except TaskNotFoundError:  # the SDK's type for code -32001, from either transport
        raise TaskNotFound(f"the agent {agent.ref} does not know the task {task_id}") from None
    except _ANSWER_ERRORS as exc:
        raise _failure(exc, agent) from None


async def cancel_task(agent: Agent, task_id: str) -> Any:
    try:
        async with _transport(agent) as transport:
            return await transport.cancel_task(a2a.CancelTaskRequest(id=task_id))
    except _ANSWER_ERRORS as exc:
        raise _failure(exc, agent) from None
