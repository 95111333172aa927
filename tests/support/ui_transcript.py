"""What a person sees in kagent's chat UI for a session's stored tasks, for both product lines.

A Python port (written from reading the TypeScript, not copied) of the *reload* path of kagent's chat
page: the page loads the session's task list (``task.data`` rows, ``ORDER BY created_at``), turns it into
a list of chat messages, folds tool-call runs into groups and renders each message as a text bubble,
tool card, sub-agent card or ask-user card.  Tests use it to assert that a fork shows the same
conversation as its source: ``transcript(fork_tasks) == transcript(source_tasks[:n])``.

Sources read (https://github.com/kagent-dev/kagent):

* ``release/v0.10.x`` at ``03e950f6e90764dfc24e12af71df5b3685c31b5c`` -> :func:`transcript_v010`,
  :func:`load_status_v010` (legacy A2A 0.3 JSON, ``task.history`` only)
* ``main`` at ``5229184e280a6f3bf205b4e64405a92d1fbc259f`` -> :func:`transcript_main`,
  :func:`load_status_main` (A2A v1.0 JSON: user messages from ``task.history``, agent output from
  ``task.artifacts``, human-in-the-loop via the ``https://kagent.dev/extensions/hitl/v1`` message extension)

What mirrors what (same file names on both branches unless noted):

* ``ui/src/components/chat/ChatInterface.tsx`` ``initializeChat()``: stored messages =
  ``extractMessagesFromTasks(tasks)`` + (pending approvals of ``extractApprovalMessagesFromTasks(tasks)``),
  then ``groupToolCallMessages(allMessages, {isStandaloneToolName, pendingApprovalIds})`` and
  ``renderMessageItems`` / ``renderChatMessage`` -> :func:`transcript_v010` / :func:`transcript_main`;
  the chat status it sets (pending approval, else ``findLast`` task in ``RESUBSCRIBE_TASK_STATES`` of
  ``ui/src/lib/chatSessionGuard.ts`` mapped by ``mapA2AStateToStatus`` of ``ui/src/lib/statusUtils.ts``)
  -> :func:`load_status_v010` / :func:`load_status_main`.
* ``ui/src/lib/messageHandlers.ts``

  - v0.10.x: ``extractMessagesFromTasks`` -> ``_extract_messages_v010``; ``extractApprovalMessagesFromTasks``
    -> ``_extract_approvals_v010``; ``findConfirmationParts``, ``findDecisionAfterIndex``,
    ``isUserDecisionMessage``, ``resolveToolDecision``, ``buildApprovalMessage`` -> same-named ``_v010``
    helpers.
  - main: ``extractMessagesFromTasks`` + ``appendArtifactMessages`` + ``indexHistoricalHitlByCallId`` ->
    ``_extract_messages_main`` / ``_append_artifact_messages`` / ``_index_historical_hitl``;
    ``extractApprovalMessagesFromTasks`` -> ``_extract_approvals_main``; ``buildHitlMessagesFromPayload``,
    ``buildApprovalMessageFromPayload``, ``buildNestedAgentCallMessage`` -> ``_build_hitl_messages``;
    ``aggregatePartsToDisplayText`` / ``isModelInternalDataPart`` -> ``_aggregate_display_text``.
  - both: ``getMetadataValue`` (``adk_<key>`` then ``kagent_<key>``) -> ``_meta_value``;
    ``normalizeToolResultToText`` -> ``_normalize_tool_result``; ``getRawToolResult``;
    ``getSourceFromMetadata``; ``createMessage`` -> ``_create_message``.
* ``ui/src/lib/hitl.ts`` (main only): ``getHitlPayload`` (+ ``normalizeNullableToolArgs`` and the payload
  validators), ``buildHitlCard``, ``visibleHitlTools``, ``relatedHitlCallIds``, ``responseMatchesRequest``,
  ``askUserResponseId``, ``decisionsByCallId``, ``getHitlCard`` -> ``_hitl_*`` helpers.
* ``ui/src/lib/toolCallExtraction.ts``: ``isToolCallRequestMessage``, ``isToolCallExecutionMessage``,
  ``extractToolCallRequests``, ``extractToolCallResults`` -> ``_is_request_message`` (+ main's
  ``ToolCallDisplay.isRequestMessage``), ``_is_execution_message``, ``_extract_requests``,
  ``_extract_results``.
* ``ui/src/components/chat/ToolCallGroup.tsx``: ``collectPendingApprovalIds``, ``isApprovalResolved``,
  ``classifyToolMessage``, ``groupToolCallMessages`` -> ``_pending_approval_ids``, ``_approval_resolved``,
  ``_classify``, ``_group``.
* ``ui/src/components/chat/ChatMessage.tsx`` ``ChatMessage`` (dispatch to AskUserDisplay /
  ToolCallDisplay / text bubble, empty-message skip, ``getDisplayName``, v0.10.x ``fileChipsFromMessage``)
  -> ``_render_message``.
* ``ui/src/components/chat/ToolCallDisplay.tsx`` ``ToolCallDisplay`` (a card is rendered only by the first
  message that introduces a call id; its state merges every request/approval/result for that id;
  ``AgentCallDisplay`` vs ``ToolDisplay``) -> ``_render_tool_calls``.
* ``ui/src/lib/utils.ts``: ``convertToUserFriendlyName``, ``isAgentToolName`` (``__NS__`` in the name).

Simplifications and choices (all deterministic):

* Only the reload of stored tasks is modelled.  Live streaming (``createMessageHandlers``, resubscribing to
  a ``submitted``/``working`` task, ``StreamingMessage``) is not: a still-running last task shows what is
  stored so far, and :func:`load_status_v010`/:func:`load_status_main` tell whether the UI would resubscribe.
* Local UI state is empty (``pendingDecisions`` = {}); MCP-app tools (``getMcpAppForTool``, which needs the
  agent's tool config) are unknown, so only agent tools (``__NS__``) count as "standalone" when grouping.
* Grouping: the collapsed group chrome (summary row) is not an entry; entries come in render order, which
  groups can change (a standalone card inside a run is shown after the run's group).
* Not modelled: token stats, feedback / reply-action buttons, timestamps, markdown, truncation.
* ``JSON.stringify`` output (untyped data parts, object tool results, ``Entry.args``) uses JS number
  formatting and JS property order, with string keys sorted: the v0.10.x REST API re-marshals the task with
  Go's ``encoding/json`` (sorted map keys); on main the gRPC path carries ``Struct`` maps in unspecified
  order, so sorting is this port's deterministic choice there.
* The Go backends rewrite rows before the UI sees them (v0.10.x: legacy -> v1 -> legacy, ``kind`` always
  ``"message"``; main: protojson -> proto -> ts-proto).  So ``kind`` of history items is ignored, a part
  without ``kind`` is classified by its fields, and message ids default to ``""``.
* Where the TypeScript would throw on malformed data (e.g. an ``adk_request_confirmation`` without
  ``args``), this port treats missing objects as empty instead.
* Dialects are not converted: :func:`transcript_main` rejects legacy JSON and :func:`transcript_v010`
  rejects v1 JSON with ``ValueError`` (kagent's main backend refuses legacy rows; a fork must keep the
  source row's dialect).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

__all__ = [
    "AGENT",
    "AGENT_CALL",
    "ASK_USER",
    "HITL_EXTENSION_URI",
    "TOOL",
    "USER",
    "Entry",
    "js_stringify",
    "load_status_main",
    "load_status_v010",
    "transcript_main",
    "transcript_v010",
]

# Entry kinds: one per visible card/bubble.
USER = "user"  # user text bubble
AGENT = "agent"  # agent text bubble
TOOL = "tool"  # ToolDisplay card (tool call, its result, approval state)
AGENT_CALL = "agent_call"  # AgentCallDisplay card (call to a sub-agent tool)
ASK_USER = "ask_user"  # AskUserDisplay card

HITL_EXTENSION_URI = "https://kagent.dev/extensions/hitl/v1"
_NS = "__NS__"
_V010 = "v0.10.x"
_MAIN = "main"

_STREAMING_TOOL_TYPES = frozenset({"ToolCallRequestEvent", "ToolCallExecutionEvent", "ToolCallSummaryMessage"})
_HITL_TERMINAL = frozenset({"approved", "rejected"})


@dataclass(frozen=True)
class Entry:
    """One visible item of the transcript.

    ``kind``: :data:`USER`, :data:`AGENT` (text bubbles), :data:`TOOL`, :data:`AGENT_CALL` (tool cards),
    :data:`ASK_USER`.

    * text bubbles: ``text`` (text parts joined), ``author`` (the bubble's name: ``"user"`` for the user,
      else the friendly app name, or ``None`` when the UI falls back to the agent of the page), ``files``
      (v0.10.x file chips).
    * tool cards: ``name``, ``args`` (``JSON.stringify`` of the arguments, see :func:`js_stringify`),
      ``status`` (``requested`` | ``executing`` | ``completed`` | ``pending_approval`` | ``approved`` |
      ``rejected``; an agent card shows ``pending_approval`` as ``requested``), ``result`` (displayed result
      text, ``None`` while there is none), ``is_error``, ``subagent`` (sub-agent named on an approval card).
    * ask-user cards: ``questions`` / ``answers`` (JSON), ``status`` (``pending`` | ``answered``),
      ``subagent``.

    ``subagent_session_id``: the session an agent-tool card links to (``AgentCallDisplay``'s
    ``subagentSessionId``). ``call_id`` is kept for debugging but excluded from ``==``.
    """

    kind: str
    text: str = ""
    author: str | None = None
    files: tuple[str, ...] = ()
    name: str | None = None
    args: str | None = None
    status: str | None = None
    result: str | None = None
    is_error: bool = False
    subagent: str | None = None
    questions: str | None = None
    answers: str | None = None
    call_id: str | None = field(default=None, compare=False)
    subagent_session_id: str | None = None

    @property
    def args_obj(self) -> Any:
        return None if self.args is None else json.loads(self.args)

    @classmethod
    def user(cls, text: str, files: tuple[str, ...] = ()) -> Entry:
        return cls(kind=USER, text=text, author="user", files=files)

    @classmethod
    def agent(cls, text: str, author: str | None = None) -> Entry:
        return cls(kind=AGENT, text=text, author=author)

    @classmethod
    def tool(
        cls,
        name: str,
        args: Any,
        status: str,
        result: str | None = None,
        *,
        is_error: bool = False,
        subagent: str | None = None,
        kind: str = TOOL,
    ) -> Entry:
        return cls(
            kind=kind,
            name=name,
            args=js_stringify({} if args is None else args),
            status=status,
            result=result,
            is_error=is_error,
            subagent=subagent,
        )

    @classmethod
    def ask_user(
        cls, questions: Any, answers: Any = None, *, status: str = "pending", subagent: str | None = None
    ) -> Entry:
        return cls(
            kind=ASK_USER,
            questions=js_stringify(questions),
            answers=None if answers is None else js_stringify(answers),
            status=status,
            subagent=subagent,
        )


# --------------------------------------------------------------------------------------------------
# JavaScript semantics helpers
# --------------------------------------------------------------------------------------------------

_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")


def _truthy(value: Any) -> bool:
    """JavaScript truthiness of a JSON value."""
    if value is None or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return value == value and value != 0
    if isinstance(value, str):
        return value != ""
    return True  # objects and arrays, even empty ones


def _is_record(value: Any) -> bool:
    """``typeof value === "object" && value !== null`` (arrays included)."""
    return isinstance(value, dict | list)


def _js_number(value: int | float) -> str:
    """``Number.prototype.toString`` / JSON number output (numbers are IEEE doubles in JS and Go)."""
    if isinstance(value, int):
        if abs(value) <= 2**53:
            return str(value)
        value = float(value)
    if math.isnan(value) or math.isinf(value):
        return "null"
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    exp = int(exponent)
    if -7 < exp < 21:
        return format(Decimal(text), "f")
    return f"{mantissa}e{'+' if exp > 0 else '-'}{abs(exp)}"


def _js_key_order(keys: Iterable[str]) -> list[str]:
    keys = [str(k) for k in keys]
    indexes = sorted((k for k in keys if _ARRAY_INDEX.fullmatch(k) and int(k) < 2**32 - 1), key=int)
    index_set = set(indexes)
    return indexes + sorted(k for k in keys if k not in index_set)


def js_stringify(value: Any) -> str:
    """``JSON.stringify(value)`` as kagent's UI produces it (see the module notes on key order)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return _js_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ",".join(js_stringify(item) for item in value) + "]"
    if isinstance(value, Mapping):
        by_key = {str(k): v for k, v in value.items()}
        return (
            "{"
            + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{js_stringify(by_key[k])}" for k in _js_key_order(by_key))
            + "}"
        )
    return json.dumps(str(value), ensure_ascii=False)


def _js_string(value: Any) -> str:
    """``String(value)``."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return "NaN" if isinstance(value, float) and math.isnan(value) else _js_number(value)
    if isinstance(value, list):
        return ",".join("" if item is None else _js_string(item) for item in value)
    return "[object Object]"


def _meta_value(metadata: Any, key: str) -> Any:
    """``getMetadataValue``: ``adk_<key>`` first, then ``kagent_<key>``."""
    if not isinstance(metadata, Mapping):
        return None
    if f"adk_{key}" in metadata:
        return metadata[f"adk_{key}"]
    if f"kagent_{key}" in metadata:
        return metadata[f"kagent_{key}"]
    return None


def _friendly_name(name: Any) -> str:
    """``convertToUserFriendlyName``: first ``__NS__`` -> ``/``, every ``_`` -> ``-``."""
    text = _js_string(name) if name else ""
    if not text:
        return "Unknown Source"
    return text.replace(_NS, "/", 1).replace("_", "-")


def _is_agent_tool_name(name: Any) -> bool:
    return isinstance(name, str) and _NS in name


def _source_from_metadata(metadata: Any) -> str:
    app_name = _meta_value(metadata, "app_name")
    return _friendly_name(app_name) if _truthy(app_name) else "assistant"


def _normalize_tool_result(tool_data: Mapping[str, Any]) -> str:
    """``normalizeToolResultToText``."""
    response = tool_data.get("response")
    result_field = response.get("result") if isinstance(response, Mapping) else None
    result = result_field if _truthy(result_field) else response
    if isinstance(result, str):
        return result
    if _is_record(result):
        content = result.get("content") if isinstance(result, Mapping) else None
        if isinstance(content, list):
            pieces = []
            for item in content:
                if isinstance(item, Mapping) and "text" in item:
                    pieces.append(_js_string(item["text"]) if _truthy(item["text"]) else "")
                elif isinstance(item, str):
                    pieces.append(item)
                else:
                    pieces.append(js_stringify(item))
            return "".join(pieces)
        if isinstance(result, Mapping) and isinstance(result.get("text"), str):
            return result["text"]
        return js_stringify(result)
    return ""


def _raw_tool_result(tool_data: Mapping[str, Any]) -> Any:
    """``getRawToolResult``: ``response.result ?? response``."""
    response = tool_data.get("response")
    if isinstance(response, Mapping) and response.get("result") is not None:
        return response["result"]
    return response


def _response_is_error(tool_data: Mapping[str, Any]) -> bool:
    response = tool_data.get("response")
    return isinstance(response, Mapping) and _truthy(response.get("isError"))


# --------------------------------------------------------------------------------------------------
# Normalized messages.  A message is a dict: role ("user"|"agent"), parts, metadata, extensions,
# messageId.  A part is a dict: kind ("text"|"data"|"file"|"other"), text / data / name, metadata.
# --------------------------------------------------------------------------------------------------


def _create_message(content: str, source: str, original_type: str | None, **extra: Any) -> dict[str, Any]:
    """``createMessage``."""
    return {
        "role": "user" if source == "user" else "agent",
        "parts": [{"kind": "text", "text": content, "metadata": None}],
        "metadata": {"originalType": original_type, "displaySource": source, **extra},
        "extensions": [],
        "messageId": "",
    }


def _legacy_part(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = part.get("kind")
    if kind is None:
        kind = "text" if "text" in part else "data" if "data" in part else "file" if "file" in part else None
    meta = part.get("metadata")
    if kind == "text":
        return {"kind": "text", "text": part.get("text"), "metadata": meta}
    if kind == "data":
        return {"kind": "data", "data": part.get("data"), "metadata": meta}
    if kind == "file":
        file = part.get("file")
        name = file.get("name") if isinstance(file, Mapping) else None
        return {"kind": "file", "file": _truthy(file), "name": name, "metadata": meta}
    return {"kind": "other", "metadata": meta}


def _legacy_message(message: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "role": "user" if message.get("role") == "user" else "agent",
        "parts": [_legacy_part(p) for p in message.get("parts") or [] if isinstance(p, Mapping)],
        "metadata": dict(message.get("metadata") or {}),
        "extensions": list(message.get("extensions") or []),
        "messageId": message.get("messageId") or "",
    }


def _v1_part(part: Mapping[str, Any]) -> dict[str, Any]:
    meta = part.get("metadata")
    if "text" in part:
        return {"kind": "text", "text": part.get("text"), "metadata": meta}
    if "data" in part:
        return {"kind": "data", "data": part.get("data"), "metadata": meta}
    if "raw" in part or "url" in part:
        return {"kind": "file", "file": True, "name": part.get("filename"), "metadata": meta}
    return {"kind": "other", "metadata": meta}


def _v1_message(message: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "role": "user" if message.get("role") == "ROLE_USER" else "agent",
        "parts": [_v1_part(p) for p in message.get("parts") or [] if isinstance(p, Mapping)],
        "metadata": dict(message.get("metadata") or {}),
        "extensions": list(message.get("extensions") or []),
        "messageId": message.get("messageId") or "",
    }


def _text_content(message: Mapping[str, Any]) -> str:
    return "".join(
        _js_string(p.get("text")) if p.get("text") is not None else "" for p in message["parts"] if p["kind"] == "text"
    )


def _data_parts(message: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    return (p for p in message["parts"] if p["kind"] == "data")


def _typed_data_parts(message: Mapping[str, Any], part_type: str) -> Iterable[dict[str, Any]]:
    """Data parts with metadata whose ``type`` is ``part_type`` (``part.metadata`` truthy: ``{}`` counts)."""
    return (
        p
        for p in _data_parts(message)
        if p.get("metadata") is not None and _meta_value(p["metadata"], "type") == part_type
    )


def _coerce_tasks(tasks: Iterable[Any]) -> list[dict[str, Any]]:
    out = []
    for task in tasks:
        if isinstance(task, str | bytes | bytearray):
            task = json.loads(task)
        if not isinstance(task, Mapping):
            raise TypeError(f"a task must be a JSON object, got {type(task).__name__}")
        out.append(dict(task))
    return out


def _check_dialect(task: Mapping[str, Any], line: str) -> None:
    state = (task.get("status") or {}).get("state")
    roles = {m.get("role") for m in task.get("history") or [] if isinstance(m, Mapping)}
    v1 = (isinstance(state, str) and state.startswith("TASK_STATE_")) or any(
        isinstance(r, str) and r.startswith("ROLE_") for r in roles
    )
    legacy = (
        "kind" in task
        or (isinstance(state, str) and not state.startswith("TASK_STATE_"))
        or bool(roles & {"user", "agent"})
    )
    if line == _V010 and v1:
        raise ValueError(f"task {task.get('id')!r} is A2A v1.0 JSON, not the legacy dialect of kagent 0.10.x")
    if line == _MAIN and legacy:
        raise ValueError(f"task {task.get('id')!r} is legacy A2A JSON; kagent's main line only reads A2A v1.0")


# --------------------------------------------------------------------------------------------------
# release/v0.10.x: ui/src/lib/messageHandlers.ts
# --------------------------------------------------------------------------------------------------


def _find_confirmation_parts_v010(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``findConfirmationParts``: long-running ``adk_request_confirmation`` function calls."""
    return [
        p
        for p in _data_parts(message)
        if _meta_value(p.get("metadata"), "type") == "function_call"
        and _meta_value(p.get("metadata"), "is_long_running") is True
        and isinstance(p.get("data"), Mapping)
        and p["data"].get("name") == "adk_request_confirmation"
    ]


def _decision_data_v010(message: Mapping[str, Any]) -> dict[str, Any] | None:
    for part in _data_parts(message):
        data = part.get("data")
        if isinstance(data, Mapping) and data.get("decision_type") is not None:
            return dict(data)
    return None


def _find_decision_after_v010(history: list[dict[str, Any]], index: int) -> dict[str, Any] | None:
    """``findDecisionAfterIndex``: the first user decision after ``index``."""
    for item in history[index + 1 :]:
        if item["role"] != "user":
            continue
        decision = _decision_data_v010(item)
        if decision is not None:
            return decision
    return None


def _is_user_decision_v010(message: Mapping[str, Any]) -> bool:
    """``isUserDecisionMessage`` (approve/reject/batch or ask-user answers)."""
    return message["role"] == "user" and _decision_data_v010(message) is not None


def _resolve_tool_decision_v010(decision: Mapping[str, Any] | None, tool_id: Any) -> Any:
    if not decision:
        return None
    decision_type = decision.get("decision_type")
    if decision_type == "batch":
        decisions = decision.get("decisions")
        key = "undefined" if tool_id is None else _js_string(tool_id)
        return decisions.get(key) if isinstance(decisions, Mapping) else None
    return decision_type


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _build_approval_message_v010(conf_part: Mapping[str, Any], decision: Mapping[str, Any] | None) -> dict[str, Any]:
    """``buildApprovalMessage``: ToolApprovalRequest or AskUserRequest message."""
    data = _obj(conf_part.get("data"))
    args = _obj(data.get("args"))
    original = _obj(args.get("originalFunctionCall"))
    tool_id = original.get("id") if _truthy(original.get("id")) else data.get("id")
    resolved = "approve" if decision and _truthy(decision.get("decision_type")) else None
    answers = decision.get("ask_user_answers") if decision else None
    answers = answers if _truthy(answers) else None

    if original.get("name") == "ask_user":
        questions = _obj(original.get("args")).get("questions")
        return _create_message(
            "",
            "agent",
            "AskUserRequest",
            askUserData={"id": tool_id, "questions": questions if _truthy(questions) else []},
            askUserAnswers=answers,
            approvalDecision=resolved,
        )

    payload = _obj(_obj(args.get("toolConfirmation")).get("payload"))
    hitl_parts = payload.get("hitl_parts")
    hitl_parts = hitl_parts if isinstance(hitl_parts, list) else None
    subagent_name = payload.get("subagent_name")

    first_inner = _obj(_obj(hitl_parts[0]).get("originalFunctionCall")) if hitl_parts else {}
    if hitl_parts and len(hitl_parts) == 1 and first_inner.get("name") == "ask_user":
        inner = first_inner
        inner_id = inner.get("id") or _obj(hitl_parts[0]).get("id") or tool_id
        questions = _obj(inner.get("args")).get("questions")
        return _create_message(
            "",
            "agent",
            "AskUserRequest",
            askUserData={"id": inner_id, "questions": questions if _truthy(questions) else []},
            askUserAnswers=answers,
            approvalDecision=resolved,
            subagentName=subagent_name,
        )

    if hitl_parts:
        calls = []
        for hp in hitl_parts:
            inner = _obj(_obj(hp).get("originalFunctionCall"))
            calls.append(
                {
                    "id": inner.get("id") or _obj(hp).get("id") or tool_id,
                    "name": inner.get("name") or original.get("name"),
                    "args": inner.get("args") if _truthy(inner.get("args")) else {},
                }
            )
    else:
        calls = [
            {
                "id": tool_id,
                "name": original.get("name"),
                "args": original.get("args") if _truthy(original.get("args")) else {},
            }
        ]

    if hitl_parts and decision and decision.get("decision_type") == "batch":
        approval_decision = decision.get("decisions")
    else:
        approval_decision = _resolve_tool_decision_v010(decision, tool_id)

    return _create_message(
        "",
        "agent",
        "ToolApprovalRequest",
        toolCallData=calls,
        approvalDecision=approval_decision,
        subagentName=subagent_name,
    )


def _extract_messages_v010(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``extractMessagesFromTasks`` (release/v0.10.x): built from ``task.history`` only."""
    messages: list[dict[str, Any]] = []
    seen: set[str] = set()
    for task in tasks:
        if task.get("history") is None:
            continue
        history = [_legacy_message(m) for m in task["history"] if isinstance(m, Mapping)]
        for index, item in enumerate(history):
            if item["messageId"] in seen:
                continue
            seen.add(item["messageId"])

            confirmations = _find_confirmation_parts_v010(item)
            if confirmations:
                decision = _find_decision_after_v010(history, index)
                if decision is None:
                    continue  # pending: shown from task.status.message instead
                messages.extend(_build_approval_message_v010(part, decision) for part in confirmations)
                continue

            if _is_user_decision_v010(item):
                continue
            if item["role"] == "user":
                messages.append(item)
                continue

            source = _source_from_metadata(item["metadata"])
            converted = False
            for part in _data_parts(item):
                part_type = _meta_value(part.get("metadata"), "type")
                data = _obj(part.get("data"))
                if part_type == "function_call":
                    name = data.get("name")
                    if name in ("adk_request_confirmation", "adk_request_credential"):
                        continue
                    call: dict[str, Any] = {
                        "id": data.get("id"),
                        "name": name,
                        "args": data.get("args") if _truthy(data.get("args")) else {},
                    }
                    if _is_agent_tool_name(name):
                        session = _meta_value(part.get("metadata"), "subagent_session_id")
                        if _truthy(session):
                            call["subagent_session_id"] = session
                    messages.append(_create_message("", source, "ToolCallRequestEvent", toolCallData=[call]))
                    converted = True
                elif part_type == "function_response":
                    response = data.get("response")
                    status = response.get("status") if isinstance(response, Mapping) else None
                    if status in ("confirmation_requested", "pending"):
                        converted = True  # HITL stub: the real result comes later
                        continue
                    messages.append(
                        _create_message("", source, "ToolCallExecutionEvent", toolResultData=[_result_record(data)])
                    )
                    converted = True
            if not converted:
                messages.append(item)  # text (or anything without converted tool parts), as is
    return messages


def _result_record(data: Mapping[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "call_id": data.get("id"),
        "name": data.get("name"),
        "content": _normalize_tool_result(data),
        "is_error": _response_is_error(data),
        "raw_result": _raw_tool_result(data),
    }
    response = data.get("response")
    if (
        _is_agent_tool_name(data.get("name"))
        and isinstance(response, Mapping)
        and isinstance(response.get("subagent_session_id"), str)
        and response["subagent_session_id"]
    ):
        record["subagent_session_id"] = response["subagent_session_id"]
    return record


def _extract_approvals_v010(tasks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """``extractApprovalMessagesFromTasks`` (release/v0.10.x): pending approvals of input-required tasks."""
    messages: list[dict[str, Any]] = []
    pending = False
    for task in tasks:
        status = _obj(task.get("status"))
        if status.get("state") != "input-required" or not _truthy(status.get("message")):
            continue
        confirmations = _find_confirmation_parts_v010(_legacy_message(_obj(status["message"])))
        if not confirmations:
            continue
        messages.extend(_build_approval_message_v010(part, None) for part in confirmations)
        pending = True
    return messages, pending


# --------------------------------------------------------------------------------------------------
# main: ui/src/lib/hitl.ts
# --------------------------------------------------------------------------------------------------


def _is_hitl_tool(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("id"), str)
        and isinstance(value.get("call_id"), str)
        and isinstance(value.get("name"), str)
        and _is_record(value.get("args"))
    )


def _valid_nested(value: Any) -> bool:
    if value is None:
        return True
    tools = value.get("tools") if isinstance(value, Mapping) else None
    return isinstance(tools, list) and len(tools) > 0 and all(_is_hitl_tool(t) for t in tools)


def _normalize_hitl_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``normalizeNullableToolArgs``: a tool whose ``args`` is null/missing gets ``{}``."""

    def tools(value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [{**t, "args": {}} if isinstance(t, Mapping) and t.get("args") is None else t for t in value]

    out = dict(payload)
    if "tools" in payload:
        out["tools"] = tools(payload["tools"])
    if "nested" in payload:
        nested = payload["nested"]
        out["nested"] = {**nested, "tools": tools(nested.get("tools"))} if isinstance(nested, Mapping) else nested
    return out


def _hitl_payload(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """``getHitlPayload``: needs the URI in ``extensions`` and a valid payload in ``metadata[URI]``."""
    if HITL_EXTENSION_URI not in message["extensions"]:
        return None
    payload = message["metadata"].get(HITL_EXTENSION_URI)
    if not isinstance(payload, Mapping):
        return None
    p = _normalize_hitl_payload(payload)
    kind = p.get("type")
    nested_ok = _valid_nested(p.get("nested"))
    if kind == "tool_approval_request":
        tools = p.get("tools")
        if isinstance(tools, list) and tools and all(_is_hitl_tool(t) for t in tools) and nested_ok:
            return p
    elif kind == "ask_user_request" and isinstance(p.get("id"), str) and isinstance(p.get("questions"), list):
        if nested_ok:
            return p
    elif kind == "tool_approval_response":
        approvals = p.get("approvals")
        if (
            isinstance(approvals, list)
            and approvals
            and all(
                isinstance(a, Mapping) and isinstance(a.get("id"), str) and isinstance(a.get("approved"), bool)
                for a in approvals
            )
        ):
            return p
    elif (
        kind == "ask_user_response"
        and isinstance(p.get("id"), str)
        and (p.get("answers") is None or isinstance(p.get("answers"), list))
    ):
        return p
    return None


def _is_hitl_request(payload: Mapping[str, Any] | None) -> bool:
    return payload is not None and payload.get("type") in ("tool_approval_request", "ask_user_request")


def _is_hitl_response(payload: Mapping[str, Any] | None) -> bool:
    return payload is not None and payload.get("type") in ("tool_approval_response", "ask_user_response")


def _nested_tools(request: Mapping[str, Any]) -> list[Any] | None:
    nested = request.get("nested")
    return nested.get("tools") if isinstance(nested, Mapping) else None


def _hitl_visible_tools(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``visibleHitlTools``: ``nested.tools ?? tools``."""
    nested = _nested_tools(request)
    return list(nested if nested is not None else request.get("tools") or [])


def _hitl_subagent_name(request: Mapping[str, Any]) -> Any:
    name = _obj(request.get("nested")).get("subagent_name")
    return name if _truthy(name) else None


def _hitl_card(request: Mapping[str, Any], response: Mapping[str, Any] | None) -> dict[str, Any]:
    """``buildHitlCard``."""
    card: dict[str, Any]
    if request.get("type") == "ask_user_request":
        card = {"kind": "ask_user", "request": request}
        if response is not None and response.get("type") == "ask_user_response":
            card["response"] = response
    else:
        card = {
            "kind": "tool_approval",
            "request": request,
            "calls": [
                {"id": t.get("call_id"), "name": t.get("name"), "args": t.get("args")}
                for t in _hitl_visible_tools(request)
            ],
        }
        if response is not None and response.get("type") == "tool_approval_response":
            card["response"] = response
    subagent = _hitl_subagent_name(request)
    if subagent is not None:
        card["subagentName"] = subagent
    return card


def _get_hitl_card(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """``getHitlCard``."""
    card = message["metadata"].get("hitlCard")
    return card if isinstance(card, dict) and card.get("kind") in ("ask_user", "tool_approval") else None


def _ask_user_response_id(request: Mapping[str, Any]) -> Any:
    tools = _nested_tools(request) or []
    for tool in tools:
        if _obj(tool).get("name") == "ask_user":
            return _obj(tool).get("id")
    if tools:
        return _obj(tools[0]).get("id")
    return request.get("id")


def _related_hitl_call_ids(request: Mapping[str, Any]) -> list[Any]:
    """``relatedHitlCallIds``: top-level tools (tool approvals only) and nested tools."""
    tools = list(request.get("tools") or []) if request.get("type") == "tool_approval_request" else []
    tools += list(_nested_tools(request) or [])
    return [_obj(t).get("call_id") for t in tools]


def _response_matches_request(request: Mapping[str, Any], response: Mapping[str, Any]) -> bool:
    if request.get("type") == "ask_user_request":
        return response.get("type") == "ask_user_response" and response.get("id") == _ask_user_response_id(request)
    if response.get("type") != "tool_approval_response":
        return False
    expected = {t.get("id") for t in _hitl_visible_tools(request)}
    approvals = response.get("approvals") or []
    got = {a.get("id") for a in approvals}
    return len(approvals) == len(expected) and len(got) == len(expected) and expected <= got


def _decisions_by_call_id(card: Mapping[str, Any]) -> dict[Any, str]:
    """``decisionsByCallId``."""
    response = card.get("response")
    if not isinstance(response, Mapping) or response.get("type") != "tool_approval_response":
        return {}
    approved_by_id = {a.get("id"): a.get("approved") for a in response.get("approvals") or []}
    out = {}
    for tool in _hitl_visible_tools(card["request"]):
        if tool.get("id") in approved_by_id:
            out[tool.get("call_id")] = "approve" if approved_by_id[tool.get("id")] else "reject"
    return out


# --------------------------------------------------------------------------------------------------
# main: ui/src/lib/messageHandlers.ts
# --------------------------------------------------------------------------------------------------


def _build_hitl_messages(request: Mapping[str, Any], response: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``buildHitlMessagesFromPayload``: [synthetic parent AgentCall] + the card message."""
    approval = _create_message("", "agent", None, hitlCard=_hitl_card(request, response))
    nested = _obj(request.get("nested"))
    if not (
        _truthy(nested.get("context_id"))
        and _truthy(nested.get("subagent_name"))
        and request.get("type") == "tool_approval_request"
    ):
        return [approval]
    tools = [_obj(t) for t in request.get("tools") or []]
    parent = (
        next((t for t in tools if t.get("name") == nested["subagent_name"]), None)
        or next((t for t in tools if _is_agent_tool_name(t.get("name"))), None)
        or (tools[0] if tools else {})
    )
    call = {
        "id": parent.get("call_id") if parent.get("call_id") is not None else nested["context_id"],
        "name": parent.get("name") if parent.get("name") is not None else nested["subagent_name"],
        "args": parent.get("args") if parent.get("args") is not None else {},
        "subagent_session_id": nested["context_id"],
    }
    agent_call = _create_message("", "agent", "ToolCallRequestEvent", toolCallData=[call])
    return [agent_call, approval]


def _index_historical_hitl(history: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """``indexHistoricalHitlByCallId``: resolved HITL interactions keyed by the call ids they govern."""
    by_call_id: dict[Any, dict[str, Any]] = {}
    payloads = [_hitl_payload(m) for m in history]
    for index, request in enumerate(payloads):
        if request is None or not _is_hitl_request(request):
            continue
        response = next(
            (
                p
                for p in payloads[index + 1 :]
                if p is not None and _is_hitl_response(p) and _response_matches_request(request, p)
            ),
            None,
        )
        if response is None:
            continue
        hitl = {"request": request, "response": response}
        for call_id in _related_hitl_call_ids(request):
            by_call_id[call_id] = hitl
    return by_call_id


def _is_model_internal_data(data: Any) -> bool:
    return (
        isinstance(data, Mapping)
        and len(data) > 0
        and all(k in ("thoughtSignature", "thought_signature") for k in data)
    )


def _aggregate_display_text(parts: list[dict[str, Any]]) -> str:
    """``aggregatePartsToDisplayText`` (status messages of failed / auth-required tasks)."""
    pieces = []
    for part in parts:
        if part["kind"] == "text":
            pieces.append(_js_string(part["text"]) if _truthy(part.get("text")) else "")
        elif part["kind"] == "data":
            data = part.get("data")
            pieces.append("" if _is_model_internal_data(data) else js_stringify(data if _truthy(data) else ""))
        elif part["kind"] == "file":
            pieces.append(f"[File: {part.get('name') or 'unknown'}]")
        else:
            pieces.append("[object Object]")
    return "".join(pieces)


def _has_js_keys(value: Any) -> bool:
    """``Object.keys(value).length > 0``."""
    return isinstance(value, Mapping | list | str) and len(value) > 0


def _append_artifact_messages(
    messages: list[dict[str, Any]],
    artifact: Mapping[str, Any],
    hitl_by_call_id: Mapping[Any, dict[str, Any]],
    emitted: set[int],
) -> None:
    """``appendArtifactMessages``: text runs, tool calls/results and resolved HITL cards of one artifact."""
    metadata = artifact.get("metadata")
    source = _source_from_metadata(metadata)
    text = ""

    def flush() -> None:
        nonlocal text
        if text:
            messages.append(_create_message(text, source, "TextMessage"))
            text = ""

    def emit_hitl(call_id: Any) -> bool:
        if not _truthy(call_id) or call_id not in hitl_by_call_id:
            return False
        hitl = hitl_by_call_id[call_id]
        if id(hitl) not in emitted:
            messages.extend(_build_hitl_messages(hitl["request"], hitl["response"]))
            emitted.add(id(hitl))
        return True

    for raw_part in artifact.get("parts") or []:
        if not isinstance(raw_part, Mapping):
            continue
        part = _v1_part(raw_part)
        if part["kind"] == "text":
            text += _js_string(part["text"]) if _truthy(part.get("text")) else ""
            continue
        if part["kind"] == "data":
            part_type = _meta_value(part.get("metadata"), "type")
            data = part.get("data")
            if part_type == "function_call" and _truthy(data):
                call = _obj(data)
                if call.get("name") == "adk_request_credential":
                    continue
                flush()
                if emit_hitl(call.get("id")):
                    continue  # the resolved approval card stands in for the call
                messages.append(
                    _create_message(
                        "",
                        source,
                        "ToolCallRequestEvent",
                        toolCallData=[
                            {
                                "id": call.get("id"),
                                "name": call.get("name"),
                                "args": call.get("args") if _truthy(call.get("args")) else {},
                            }
                        ],
                    )
                )
                continue
            if part_type == "function_response" and _truthy(data):
                result = _obj(data)
                response = _obj(result.get("response"))
                status = response.get("status")
                pending_agent = (
                    status == "pending"
                    and _is_agent_tool_name(result.get("name"))
                    and isinstance(response.get("subagent_session_id"), str)
                )
                if status in ("confirmation_requested", "pending") and not pending_agent:
                    continue
                flush()
                emit_hitl(result.get("id"))  # anchor a resolved HITL right before its response
                messages.append(
                    _create_message("", source, "ToolCallExecutionEvent", toolResultData=[_result_record(result)])
                )
                continue
            if _truthy(data) and _has_js_keys(data):
                text += js_stringify(data)
            continue
        if part["kind"] == "file":
            text += f"[File: {part.get('name') or 'unknown'}]"
    flush()


def _is_user_decision_main(message: Mapping[str, Any]) -> bool:
    return message["role"] == "user" and _is_hitl_response(_hitl_payload(message))


def _extract_messages_main(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``extractMessagesFromTasks`` (main): per task, user history messages, then artifacts, then the
    status message of a failed / auth-required task."""
    messages: list[dict[str, Any]] = []
    seen: set[str] = set()
    for task in tasks:
        history = [_v1_message(m) for m in task.get("history") or [] if isinstance(m, Mapping)]
        hitl_by_call_id = _index_historical_hitl(history)
        emitted: set[int] = set()
        for item in history:
            if item["messageId"] in seen:
                continue
            seen.add(item["messageId"])
            if _is_user_decision_main(item):
                continue
            if item["role"] == "user":
                messages.append(item)
        for artifact in task.get("artifacts") or []:
            if isinstance(artifact, Mapping):
                _append_artifact_messages(messages, artifact, hitl_by_call_id, emitted)
        status = _obj(task.get("status"))
        if _truthy(status.get("message")) and status.get("state") in ("TASK_STATE_FAILED", "TASK_STATE_AUTH_REQUIRED"):
            status_message = _v1_message(_obj(status["message"]))
            content = _aggregate_display_text(status_message["parts"])
            if content:
                messages.append(
                    _create_message(content, _source_from_metadata(status_message["metadata"]), "TextMessage")
                )
    return messages


def _extract_approvals_main(tasks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """``extractApprovalMessagesFromTasks`` (main): the HITL request of input-required tasks."""
    messages: list[dict[str, Any]] = []
    pending = False
    for task in tasks:
        status = _obj(task.get("status"))
        if status.get("state") != "TASK_STATE_INPUT_REQUIRED" or not _truthy(status.get("message")):
            continue
        payload = _hitl_payload(_v1_message(_obj(status["message"])))
        if payload is None or not _is_hitl_request(payload):
            continue
        messages.extend(_build_hitl_messages(payload))
        pending = True
    return messages, pending


# --------------------------------------------------------------------------------------------------
# ui/src/lib/toolCallExtraction.ts (+ ToolCallDisplay.isRequestMessage on main)
# --------------------------------------------------------------------------------------------------


def _is_request_message(message: Mapping[str, Any], line: str) -> bool:
    if any(True for _ in _typed_data_parts(message, "function_call")):
        return True
    original_type = message["metadata"].get("originalType")
    if original_type == "ToolCallRequestEvent":
        return True
    if line == _V010:
        return original_type == "ToolApprovalRequest"
    card = _get_hitl_card(message)
    return card is not None and card["kind"] == "tool_approval"


def _is_execution_message(message: Mapping[str, Any]) -> bool:
    if any(True for _ in _typed_data_parts(message, "function_response")):
        return True
    return message["metadata"].get("originalType") == "ToolCallExecutionEvent"


def _json_fallback(message: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """``metadata[key] || JSON.parse(textContent || "[]")``, as an array of objects."""
    value = message["metadata"].get(key)
    if not _truthy(value):
        try:
            value = json.loads(_text_content(message) or "[]")
        except ValueError:
            return []
    return [dict(v) for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _extract_requests(message: Mapping[str, Any], line: str) -> list[dict[str, Any]]:
    """``extractToolCallRequests``."""
    if line == _MAIN:
        card = _get_hitl_card(message)
        if card is not None and card["kind"] == "tool_approval":
            return [dict(c) for c in card["calls"]]
    if not _is_request_message(message, line):
        return []
    hidden = {"adk_request_credential", "ask_user"}
    if line == _V010:
        hidden.add("adk_request_confirmation")
    calls = []
    for part in _typed_data_parts(message, "function_call"):
        data = _obj(part.get("data"))
        if data.get("name") in hidden:
            continue
        args = data.get("args")
        calls.append({"id": data.get("id"), "name": data.get("name"), "args": {} if args is None else args})
    if calls:
        return calls
    return [c for c in _json_fallback(message, "toolCallData") if c.get("name") not in hidden]


def _extract_results(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``extractToolCallResults``."""
    if not _is_execution_message(message):
        return []
    results = [_result_record(_obj(p.get("data"))) for p in _typed_data_parts(message, "function_response")]
    return results or _json_fallback(message, "toolResultData")


# --------------------------------------------------------------------------------------------------
# ui/src/components/chat/ToolCallGroup.tsx
# --------------------------------------------------------------------------------------------------


def _approval_resolved(message: Mapping[str, Any], line: str) -> bool:
    """``isApprovalResolved`` with no local decisions."""
    if line == _MAIN:
        card = _get_hitl_card(message)
        return card is not None and card["kind"] == "tool_approval" and ("response" in card or not card["calls"])
    requests = _extract_requests(message, line)
    if not requests:
        return False
    raw = message["metadata"].get("approvalDecision")
    for request in requests:
        if not _truthy(request.get("id")):
            return False
        if _is_record(raw):
            if not (isinstance(raw, Mapping) and _truthy(raw.get(request["id"]))):
                return False
        elif not _truthy(raw):
            return False
    return True


def _is_approval_message(message: Mapping[str, Any], line: str) -> bool:
    if line == _V010:
        return message["metadata"].get("originalType") == "ToolApprovalRequest"
    card = _get_hitl_card(message)
    return card is not None and card["kind"] == "tool_approval"


def _is_ask_user_message(message: Mapping[str, Any], line: str) -> bool:
    if line == _V010:
        return message["metadata"].get("originalType") == "AskUserRequest"
    card = _get_hitl_card(message)
    return card is not None and card["kind"] == "ask_user"


def _pending_approval_ids(messages: list[dict[str, Any]], line: str) -> set[Any]:
    """``collectPendingApprovalIds``."""
    ids: set[Any] = set()
    for message in messages:
        if not _is_approval_message(message, line) or _approval_resolved(message, line):
            continue
        if line == _MAIN:
            ids.update(c.get("id") for c in _get_hitl_card(message)["calls"])  # type: ignore[index]
        else:
            ids.update(r["id"] for r in _extract_requests(message, line) if _truthy(r.get("id")))
    return ids


def _has_tool_parts(message: Mapping[str, Any]) -> bool:
    return any(
        p.get("metadata") is not None and _meta_value(p["metadata"], "type") in ("function_call", "function_response")
        for p in _data_parts(message)
    )


def _classify(message: Mapping[str, Any], line: str, pending_ids: set[Any]) -> str:
    """``classifyToolMessage``: "group" | "standalone" | "other"."""
    if message["role"] == "user":
        return "other"
    if _is_ask_user_message(message, line):
        return "standalone"
    original_type = message["metadata"].get("originalType")
    is_tool = original_type in _STREAMING_TOOL_TYPES or _is_approval_message(message, line) or _has_tool_parts(message)
    if not is_tool:
        return "other"
    if _is_approval_message(message, line) and not _approval_resolved(message, line):
        return "standalone"
    requests = _extract_requests(message, line)
    results = _extract_results(message)
    if line == _MAIN and any(_truthy(r.get("subagent_session_id")) for r in requests):
        return "standalone"
    # isStandaloneToolName = isAgentToolName(name) || MCP app (unknown here)
    if any(_is_agent_tool_name(r.get("name")) for r in requests) or any(
        _truthy(r.get("name")) and _is_agent_tool_name(r.get("name")) for r in results
    ):
        return "standalone"
    if pending_ids and (
        any(_truthy(r.get("id")) and r["id"] in pending_ids for r in requests)
        or any(_truthy(r.get("call_id")) and r["call_id"] in pending_ids for r in results)
    ):
        return "standalone"
    return "group"


def _group(messages: list[dict[str, Any]], line: str) -> list[int]:
    """``groupToolCallMessages``, flattened: message indexes in render order."""
    pending_ids = _pending_approval_ids(messages, line)
    items: list[list[int]] = []
    open_group: list[int] | None = None
    for index, message in enumerate(messages):
        kind = _classify(message, line, pending_ids)
        if kind == "group":
            if open_group is None:
                open_group = []
                items.append(open_group)
            open_group.append(index)
        else:
            items.append([index])
            if kind == "other":
                open_group = None
    return [index for item in items for index in item]


# --------------------------------------------------------------------------------------------------
# ui/src/components/chat/ToolCallDisplay.tsx and ChatMessage.tsx
# --------------------------------------------------------------------------------------------------


def _render_tool_calls(index: int, messages: list[dict[str, Any]], line: str) -> list[Entry]:
    """``ToolCallDisplay``: the cards owned by ``messages[index]``."""
    current = messages[index]
    if not _is_request_message(current, line):
        return []
    owned = {r["id"] for r in _extract_requests(current, line) if _truthy(r.get("id"))}
    for earlier in reversed(messages[:index]):
        if not owned:
            break
        if _is_request_message(earlier, line):
            owned -= {r["id"] for r in _extract_requests(earlier, line) if _truthy(r.get("id"))}
    if not owned:
        return []

    states: dict[Any, dict[str, Any]] = {}
    for message in messages:
        if not _is_request_message(message, line):
            continue
        for request in _extract_requests(message, line):
            call_id = request.get("id")
            if not _truthy(call_id) or call_id not in owned:
                continue
            status = "requested"
            if _is_approval_message(message, line):
                if line == _V010:
                    raw = message["metadata"].get("approvalDecision")
                    decision = raw.get(call_id) if isinstance(raw, Mapping) else None if _is_record(raw) else raw
                else:
                    decision = _decisions_by_call_id(_get_hitl_card(message)).get(call_id)  # type: ignore[arg-type]
                status = {"approve": "approved", "reject": "rejected"}.get(decision, "pending_approval")
            session = request.get("subagent_session_id")
            if line == _V010:
                match = next((c for c in message["metadata"].get("toolCallData") or [] if c.get("id") == call_id), None)
                session = match.get("subagent_session_id") if match else None
                if not _truthy(session) and _is_agent_tool_name(request.get("name")):
                    part = next(
                        (
                            p
                            for p in _typed_data_parts(message, "function_call")
                            if _obj(p.get("data")).get("id") == call_id
                        ),
                        None,
                    )
                    session = _meta_value(part.get("metadata"), "subagent_session_id") if part else None
            states[call_id] = {"call": request, "status": status, "session": session, "result": None}

    for message in messages:
        if not _is_execution_message(message):
            continue
        for result in _extract_results(message):
            call_id = result.get("call_id")
            if not _truthy(call_id) or call_id not in states:
                continue
            state = states[call_id]
            state["result"] = result
            if _truthy(result.get("subagent_session_id")) and (line == _MAIN or not _truthy(state["session"])):
                state["session"] = result["subagent_session_id"]
            if state["status"] not in _HITL_TERMINAL:
                state["status"] = "executing"

    for state in states.values():
        result = state["result"]
        raw = result.get("raw_result") if result else None
        pending_child = line == _MAIN and isinstance(raw, Mapping) and raw.get("status") == "pending"
        if state["status"] == "executing" and result and not pending_child:
            state["status"] = "completed"

    is_approval = _is_approval_message(current, line)
    subagent = None
    if is_approval:
        subagent = (
            current["metadata"].get("subagentName") if line == _V010 else _get_hitl_card(current).get("subagentName")  # type: ignore[union-attr]
        )
    entries = []
    for call_id, state in states.items():
        call = state["call"]
        agent_card = not is_approval and (
            _is_agent_tool_name(call.get("name")) or (line == _MAIN and _truthy(state["session"]))
        )
        status = state["status"]
        if agent_card and status == "pending_approval":
            status = "requested"
        result = state["result"]
        entries.append(
            Entry(
                kind=AGENT_CALL if agent_card else TOOL,
                name=call.get("name"),
                args=js_stringify({} if call.get("args") is None else call.get("args")),
                status=status,
                result=None if result is None else _js_string(result.get("content") or ""),
                is_error=bool(result and _truthy(result.get("is_error"))),
                subagent=subagent if _truthy(subagent) else None,
                call_id=call_id,
                subagent_session_id=state["session"] if _truthy(state["session"]) else None,
            )
        )
    return entries


def _display_name(message: Mapping[str, Any]) -> str | None:
    """``getDisplayName`` without the page's agent fallback (``None`` stands for it)."""
    if message["role"] == "user":
        return "user"
    source = message["metadata"].get("displaySource")
    if _truthy(source) and source != "assistant":
        return _js_string(source)
    app_name = _meta_value(message["metadata"], "app_name")
    return _friendly_name(app_name) if _truthy(app_name) else None


def _render_ask_user(message: Mapping[str, Any], line: str) -> Entry:
    """``AskUserDisplay`` props as ``ChatMessage`` passes them."""
    if line == _V010:
        meta = message["metadata"]
        data = _obj(meta.get("askUserData"))
        questions, call_id = data.get("questions") or [], data.get("id")
        resolved = _truthy(meta.get("approvalDecision"))
        answers, subagent = meta.get("askUserAnswers"), meta.get("subagentName")
    else:
        card = _get_hitl_card(message) or {}
        request = card.get("request") or {}
        questions, call_id = request.get("questions") or [], _ask_user_response_id(request)
        resolved = "response" in card
        answers = (card.get("response") or {}).get("answers")
        subagent = card.get("subagentName")
    return Entry(
        kind=ASK_USER,
        questions=js_stringify(questions),
        answers=js_stringify(answers) if resolved and answers is not None else None,
        status="answered" if resolved else "pending",
        subagent=subagent if _truthy(subagent) else None,
        call_id=call_id,
    )


def _render_message(index: int, messages: list[dict[str, Any]], line: str) -> list[Entry]:
    """``ChatMessage``."""
    message = messages[index]
    original_type = message["metadata"].get("originalType")
    if _is_ask_user_message(message, line):
        return [_render_ask_user(message, line)]
    is_tool_message = original_type in ("ToolCallRequestEvent", "ToolCallExecutionEvent")
    if _is_approval_message(message, line) or _has_tool_parts(message) or is_tool_message:
        return _render_tool_calls(index, messages, line)
    if original_type == "ToolCallSummaryMessage":
        return []  # only produced by the live stream, never on reload
    content = _text_content(message)
    files: tuple[str, ...] = ()
    if line == _V010:
        files = tuple(p.get("name") or "file" for p in message["parts"] if p["kind"] == "file" and p.get("file"))
    if not content and not files:
        return []
    return [
        Entry(
            kind=USER if message["role"] == "user" else AGENT,
            text=content,
            author=_display_name(message),
            files=files,
        )
    ]


def _render(messages: list[dict[str, Any]], line: str) -> list[Entry]:
    entries: list[Entry] = []
    for index in _group(messages, line):
        entries.extend(_render_message(index, messages, line))
    return entries


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def transcript_v010(tasks: Iterable[Mapping[str, Any] | str]) -> list[Entry]:
    """What kagent 0.10.x's chat page shows for these tasks (legacy ``task.data``, ``created_at`` order)."""
    task_list = _coerce_tasks(tasks)
    for task in task_list:
        _check_dialect(task, _V010)
    messages = _extract_messages_v010(task_list)
    pending, has_pending = _extract_approvals_v010(task_list)
    if has_pending:
        messages += pending
    return _render(messages, _V010)


def transcript_main(tasks: Iterable[Mapping[str, Any] | str]) -> list[Entry]:
    """What kagent main's chat page shows for these tasks (A2A v1.0 ``task.data``, ``created_at`` order)."""
    task_list = _coerce_tasks(tasks)
    for task in task_list:
        _check_dialect(task, _MAIN)
    messages = _extract_messages_main(task_list)
    pending, has_pending = _extract_approvals_main(task_list)
    if has_pending:
        messages += pending
    return _render(messages, _MAIN)


_STATUS_V010 = {"submitted": "submitted", "working": "working"}
_STATUS_MAIN = {"TASK_STATE_SUBMITTED": "submitted", "TASK_STATE_WORKING": "working"}


def load_status_v010(tasks: Iterable[Mapping[str, Any] | str]) -> str:
    """Chat status right after the 0.10.x page loaded these tasks: ``"input_required"`` (a pending
    approval card), ``"submitted"``/``"working"`` (the page resubscribes to the last such task) or
    ``"ready"``."""
    task_list = _coerce_tasks(tasks)
    for task in task_list:
        _check_dialect(task, _V010)
    if _extract_approvals_v010(task_list)[1]:
        return "input_required"
    for task in reversed(task_list):
        state = _obj(task.get("status")).get("state")
        if state in _STATUS_V010:
            return _STATUS_V010[state]
    return "ready"


def load_status_main(tasks: Iterable[Mapping[str, Any] | str]) -> str:
    """Same as :func:`load_status_v010` for kagent's main line."""
    task_list = _coerce_tasks(tasks)
    for task in task_list:
        _check_dialect(task, _MAIN)
    if _extract_approvals_main(task_list)[1]:
        return "input_required"
    for task in reversed(task_list):
        state = _obj(task.get("status")).get("state")
        if state in _STATUS_MAIN:
            return _STATUS_MAIN[state]
    return "ready"
