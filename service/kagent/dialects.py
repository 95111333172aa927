"""The two A2A task dialects kagent stores: find invocations, rewrite ids, cut and merge histories.

Everything here is a pure function over a task already decoded into plain JSON values. A task is
only ever written back in the dialect it was read in (kagent-compat: never convert silently).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

JSON = dict[str, Any]

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


class TaskDialect(enum.Enum):
    LEGACY = "legacy"  # A2A 0.2/0.3 JSON, task.protocol_version NULL (kagent 0.10.x)
    V1 = "v1"  # A2A v1.0 JSON, task.protocol_version '1.0' (kagent main)

    @classmethod
    def of(cls, protocol_version: str | None) -> TaskDialect | None:
        """The dialect a task row is written in, or None for a version this service does not know."""
        if protocol_version is None or protocol_version.startswith("0."):
            return cls.LEGACY
        if protocol_version == "1" or protocol_version.startswith("1."):
            return cls.V1
        return None


_TERMINAL = {
    TaskDialect.LEGACY: frozenset({"completed", "failed", "canceled", "rejected"}),
    TaskDialect.V1: frozenset(
        {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
    ),
}
_COMPLETED = {TaskDialect.LEGACY: "completed", TaskDialect.V1: "TASK_STATE_COMPLETED"}
_CANCELED = {TaskDialect.LEGACY: "canceled", TaskDialect.V1: "TASK_STATE_CANCELED"}
_USER_ROLE = {TaskDialect.LEGACY: "user", TaskDialect.V1: "ROLE_USER"}

# kagent readers look for adk_<key> first, then kagent_<key>.
_PREFIXES = ("adk_", "kagent_")
# The session kagent-langgraph names in its tasks' metadata (`session_id`; the thread: 0.10.x `thread_id`, main
# `kagent_thread_id`), which a human-in-the-loop resume reads: a fork's copy names the fork's.
_THREAD_KEYS = ("session_id", "thread_id", "kagent_thread_id")

# An id made only of these characters appears verbatim in any JSON encoding of it (no encoder has a
# reason to escape them), so a plain text search finds it.
_VERBATIM_ID = re.compile(r"[A-Za-z0-9._:@+=-]+")  # fullmatch: `$` would pass a trailing newline


def verbatim_in_json(text: str) -> bool:
    return bool(_VERBATIM_ID.fullmatch(text))


class TaskFormatError(ValueError):
    """A task row's data is not a JSON object this service can rewrite safely."""


def decode(data: str | bytes) -> JSON:
    try:
        value = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise TaskFormatError(f"task data is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise TaskFormatError("task data is not a JSON object")
    return value


def encode(task: JSON) -> str:
    return _encoder.encode(task).decode()


def encoded_size(task: JSON) -> int:
    """The bytes of encode(task) in UTF-8, without making the text."""
    return len(_encoder.encode(task))


def meta_value(metadata: object, key: str) -> object:
    if not isinstance(metadata, dict):
        return None
    for prefix in _PREFIXES:
        value = metadata.get(prefix + key)
        if value is not None:
            return value
    return None


def _invocation_of(node: object) -> str | None:
    if not isinstance(node, dict):
        return None
    value = meta_value(node.get("metadata"), "invocation_id")
    return value if isinstance(value, str) else None


def history(task: JSON) -> list[JSON]:
    value = task.get("history")
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def artifacts(task: JSON) -> list[JSON]:
    value = task.get("artifacts")
    return [a for a in value if isinstance(a, dict)] if isinstance(value, list) else []


def _status(task: JSON) -> JSON:
    value = task.get("status")
    return value if isinstance(value, dict) else {}


def invocation_ids(task: JSON) -> list[str]:
    """Every invocation id the task carries, first appearance first: task, history, status, artifacts."""
    nodes: Iterator[object] = iter([task, *history(task), _status(task).get("message"), *artifacts(task)])
    seen: dict[str, None] = {}
    for node in nodes:
        inv = _invocation_of(node)
        if inv is not None:
            seen.setdefault(inv, None)
    return list(seen)


# A key invocation_ids reads (meta_value's prefixes + "invocation_id") and its string value, as JSON text
# writes them: the key verbatim (only a \u escape could spell one of its letters), the value up to its
# closing quote, or up to an escape, which the caller cannot read here.
_INVOCATION_KEY = re.compile(r'invocation_id"\s*:\s*"([^"\\]*)(["\\])')
_UNICODE_ESCAPE = re.compile(r"\\u")  # searched 3x faster than `"\\u" in text`, the backslash being common


def invocation_id_candidates(text: str) -> set[str] | None:
    """A superset of `invocation_ids(decode(text))`, read from the task's text without decoding it: the string
    value of every key ending in `invocation_id`, wherever it stands. A pre-filter, never an answer: a task
    none of whose candidates names a turn the caller wants carries none of them. None: the text cannot tell
    (a \\u escape, which could spell such a key, or a value holding an escape): decode it."""
    if _UNICODE_ESCAPE.search(text):
        return None
    found = set()
    for match in _INVOCATION_KEY.finditer(text):
        if match.group(2) != '"':
            return None
        found.add(match.group(1))
    return found


def first_turn_invocation(task: JSON) -> str | None:
    """The invocation of the first turn a task holds (a merged task holds several): its history's first,
    then its status message's, artifacts' and the task's own metadata's."""
    nodes: Iterator[object] = iter([*history(task), _status(task).get("message"), *artifacts(task), task])
    return next((inv for node in nodes if (inv := _invocation_of(node)) is not None), None)


# The function call ADK makes to ask the human about a tool call (approve/reject, or ask_user's
# questions); written verbatim in any JSON encoding of a task (no character an encoder escapes).
CONFIRMATION_CALL = "adk_request_confirmation"


def _ui_meta(metadata: object, key: str) -> object:
    """kagent's UI getMetadataValue: `adk_<key>` if the key is there (even null), else `kagent_<key>`."""
    if not isinstance(metadata, dict):
        return None
    for prefix in _PREFIXES:
        if prefix + key in metadata:
            return metadata[prefix + key]
    return None


def _data_parts(message: JSON) -> list[JSON]:
    parts = message.get("parts")
    if not isinstance(parts, list):
        return []
    return [p for p in parts if isinstance(p, dict) and (p.get("kind") == "data" or ("kind" not in p and "data" in p))]


def confirmation_requests(message: JSON, *, tool_approvals_only: bool = False) -> int:
    """How many long-running adk_request_confirmation calls a legacy message holds (kagent 0.10.x's
    tool-approval and ask-user requests, as its UI finds them); with `tool_approvals_only`, 0 when one of
    them is an ask_user question (a question is answered, not rejected)."""
    calls = [
        p["data"]
        for p in _data_parts(message)
        if _ui_meta(p.get("metadata"), "type") == "function_call"
        and _ui_meta(p.get("metadata"), "is_long_running") is True
        and isinstance(p.get("data"), dict)
        and p["data"].get("name") == CONFIRMATION_CALL
    ]
    if tool_approvals_only and any(_original_call(c) == "ask_user" for c in calls):
        return 0
    return len(calls)


def _original_call(call: JSON) -> object:
    args = call.get("args")
    original = args.get("originalFunctionCall") if isinstance(args, dict) else None
    return original.get("name") if isinstance(original, dict) else None


def status_message(task: JSON) -> JSON | None:
    """The message of the task's status (an input-required task's question or approval request)."""
    message = _status(task).get("message")
    return message if isinstance(message, dict) else None


def holds_message(task: JSON, message_id: str) -> bool:
    """Whether the task's history (or its status) holds the message `message_id`."""
    messages = [*history(task), *([m] if (m := status_message(task)) else [])]
    return any(m.get("messageId") == message_id for m in messages)


def decision(message: JSON, dialect: TaskDialect) -> JSON | None:
    """The human's answer to a confirmation a legacy user message carries (a data part with a
    `decision_type`: approve, reject, batch, or ask_user's answers), else None."""
    if not _is_user(message, dialect):
        return None
    for part in _data_parts(message):
        data = part.get("data")
        if isinstance(data, dict) and data.get("decision_type") is not None:
            return data
    return None


def carries_usage(message: JSON) -> bool:
    """Whether the message's metadata carries the model's token usage (as kagent's UI reads it)."""
    usage = _ui_meta(message.get("metadata"), "usage_metadata")
    # JavaScript truthiness: an empty object counts, 0 and "" do not.
    if isinstance(usage, bool | int | float | str):
        return bool(usage)
    return usage is not None


class _Status(msgspec.Struct):
    state: str | None = None


class _StateOnly(msgspec.Struct):
    status: _Status | None = None


_state_decoder = msgspec.json.Decoder(_StateOnly)


def state_of(data: str | bytes) -> str | None:
    """A task row's status.state without building the rest of the task (fast on large tasks)."""
    try:
        decoded = _state_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return decoded.status.state if decoded.status is not None else None


def is_terminal_state(value: str | None, dialect: TaskDialect) -> bool:
    return value in _TERMINAL[dialect]


def state(task: JSON) -> str | None:
    value = _status(task).get("state")
    return value if isinstance(value, str) else None


def is_terminal(task: JSON, dialect: TaskDialect) -> bool:
    return is_terminal_state(state(task), dialect)


def _is_user(message: JSON, dialect: TaskDialect) -> bool:
    return message.get("role") == _USER_ROLE[dialect]


def message_text(message: JSON) -> str:
    parts = message.get("parts")
    if not isinstance(parts, list):
        return ""
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(texts)


def last_agent_text(task: JSON, dialect: TaskDialect) -> str | None:
    """The agent's last text in a task: its last artifact with text, else its last agent message with text
    (what kagent's UI shows as the answer, whatever the agent's framework)."""
    for node in [*reversed(artifacts(task)), *(m for m in reversed(history(task)) if not _is_user(m, dialect))]:
        if text := message_text(node):
            return text
    return None


def chat_text_chars(task: JSON, dialect: TaskDialect) -> int:
    """The characters of a task's turn as kagent's UI shows it (its first user text and its answer): the
    token estimate's measure for an agent whose events hold no ADK text (text characters / 4)."""
    return len(first_user_text(task, dialect) or "") + len(last_agent_text(task, dialect) or "")


@dataclass(frozen=True, kw_only=True)
class ChatMessage:
    """One message of a task's conversation as a transcript shows it (chat_messages)."""

    from_user: bool
    kind: Literal["text", "tool_call", "tool_result"]
    text: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    args: object = None
    response: object = None


def chat_messages(task: JSON, dialect: TaskDialect) -> list[ChatMessage]:
    """The conversation a task holds, in order (both dialects): its history's user and agent texts and the
    function calls and responses in their data parts, each message once (kagent's task store can keep the
    user's message twice, with one message id); then the answer in its artifacts when no agent text of the
    history says it already."""
    out: list[ChatMessage] = []
    seen: set[str] = set()
    for message in history(task):
        message_id = message.get("messageId")
        if isinstance(message_id, str):
            if message_id in seen:
                continue
            seen.add(message_id)
        from_user = _is_user(message, dialect)
        for part in _parts(message):
            if isinstance(part.get("text"), str) and part["text"]:
                out.append(ChatMessage(from_user=from_user, kind="text", text=part["text"]))
                continue
            data = part.get("data")
            kind = _ui_meta(part.get("metadata"), "type")
            if not isinstance(data, dict) or kind not in ("function_call", "function_response"):
                continue
            name, call_id = data.get("name"), data.get("id")
            out.append(
                ChatMessage(
                    from_user=from_user, kind="tool_call" if kind == "function_call" else "tool_result",
                    tool_name=name if isinstance(name, str) else None,
                    tool_call_id=call_id if isinstance(call_id, str) else None,
                    args=data.get("args") if kind == "function_call" else None,
                    response=data.get("response") if kind == "function_response" else None,
                )
            )  # fmt: skip
    said = {m.text for m in out if not m.from_user and m.kind == "text"}
    for artifact in artifacts(task):
        text = message_text(artifact)
        if text and text not in said:
            out.append(ChatMessage(from_user=False, kind="text", text=text))
            said.add(text)
    return out


def first_user_text(task: JSON, dialect: TaskDialect, invocation_id: str | None = None) -> str | None:
    """The text of the task's first user message (of one invocation, when given)."""
    for index, message in enumerate(history(task)):
        if not _is_user(message, dialect) or not message_text(message):
            continue
        if invocation_id is None or _turn_of(history(task), index) == invocation_id:
            return message_text(message)
    return None


def user_message(task: JSON, dialect: TaskDialect, invocation_id: str) -> JSON | None:
    """The message the user sent to open the turn `invocation_id` (the first user message of that turn
    with parts: text or data), as the task's history holds it."""
    messages = history(task)
    # A history whose messages name no invocation (a v1.0 task: the ids are on its artifacts) is the
    # task's first turn's.
    first = next(iter(invocation_ids(task)), None)
    for index, message in enumerate(messages):
        parts = message.get("parts")
        if not (_is_user(message, dialect) and isinstance(parts, list) and parts):
            continue
        turn = _turn_of(messages, index)
        if turn == invocation_id or (turn is None and first == invocation_id):
            return message
    return None


def first_user_message(task: JSON, dialect: TaskDialect) -> JSON | None:
    """The first user message with parts of a task: the one that opened the turn of an agent that writes no
    invocation id (one turn per task)."""
    for message in history(task):
        parts = message.get("parts")
        if _is_user(message, dialect) and isinstance(parts, list) and parts:
            return message
    return None


def _turn_of(messages: list[JSON], index: int) -> str | None:
    """The invocation a history message belongs to: its own id, else the next message's that has one."""
    for message in messages[index:]:
        inv = _invocation_of(message)
        if inv is not None:
            return inv
    return None


def cut_index(task: JSON, dialect: TaskDialect, invocation_id: str) -> int | None:
    """Where the history must be cut so that the turn `invocation_id` and all later ones are gone.

    The cut goes before the user message that opens the turn: kagent stamps the invocation id on the
    user message, but when only an agent message of the turn carries it, the user messages just
    before it (carrying no other turn's id) open the turn too.
    """
    messages = history(task)
    first = next((i for i, m in enumerate(messages) if _invocation_of(m) == invocation_id), None)
    if first is None:
        return None
    cut = first
    while cut > 0:
        previous = messages[cut - 1]
        if not _is_user(previous, dialect) or _invocation_of(previous) not in (None, invocation_id):
            break
        cut -= 1
    return cut


@dataclass(kw_only=True)
class ChatMarks:
    """What of one turn survives on the messages kagent's chat renders from a task (its
    ui/src/lib/messageHandlers.ts on both lines): so that a UI can tell which turn a message belongs to."""

    message_ids: list[str] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    response_ids: list[str] = field(default_factory=list)
    text_count: int = 0


_UI_FAILED = frozenset({"TASK_STATE_FAILED", "TASK_STATE_AUTH_REQUIRED"})
_MODEL_INTERNAL = frozenset({"thoughtSignature", "thought_signature"})
_HIDDEN_CALLS = (CONFIRMATION_CALL, "adk_request_credential")


def chat_marks(task: JSON, dialect: TaskDialect) -> dict[str, ChatMarks]:
    """By invocation id, the marks of each turn the task holds: its history messages' ids, the function
    calls it makes and answers, and how many agent text messages kagent's chat shows for it when it loads
    the session (main: the text runs of the turn's artifacts, and a failed task's status text; 0.10.x: the
    agent history messages with text and no tool part). A message or artifact that names no turn belongs
    to the next history message's turn, else to the task's first turn (a history) or last (the rest)."""
    turns = _turns_in_order(task, dialect)
    if not turns:
        return {}
    marks = {inv: ChatMarks() for inv in turns}
    messages = history(task)
    paired = _paired_turns(task, dialect, messages, turns)
    seen: set[str] = set()
    for index, message in enumerate(messages):
        message_id = message.get("messageId")
        if isinstance(message_id, str):
            if message_id in seen:  # kagent's UI shows a repeated messageId once
                continue
            seen.add(message_id)
        own = _invocation_of(message)
        mark = marks[own if own in marks else paired[index] if paired else _turn_of(messages, index) or turns[0]]
        if isinstance(message_id, str):
            mark.message_ids.append(message_id)
        _add_calls(mark, message)
        if dialect is TaskDialect.LEGACY and _legacy_text_bubble(message, dialect):
            mark.text_count += 1
    status_message = _status(task).get("message")
    if isinstance(status_message, dict):
        mark = marks[_invocation_of(status_message) or turns[-1]]
        _add_calls(mark, status_message)
        if dialect is TaskDialect.V1 and state(task) in _UI_FAILED and _displayable(status_message):
            mark.text_count += 1
    for artifact in artifacts(task):
        mark = marks[_invocation_of(artifact) or turns[-1]]
        _add_calls(mark, artifact)
        if dialect is TaskDialect.V1:
            mark.text_count += _text_runs(artifact)
    return marks


def _turns_in_order(task: JSON, dialect: TaskDialect) -> list[str]:
    """The task's turns in the order they ran: as its artifacts name them on main (the history names few,
    the task's own metadata its last), as its history does on 0.10.x."""
    told, status_message, output = history(task), _status(task).get("message"), artifacts(task)
    if dialect is TaskDialect.V1:
        nodes: list[object] = [*output, *told, status_message, task]
    else:
        nodes = [*told, status_message, *output, task]
    seen: dict[str, None] = {}
    for node in nodes:
        inv = _invocation_of(node)
        if inv is not None:
            seen.setdefault(inv, None)
    return list(seen)


def _paired_turns(task: JSON, dialect: TaskDialect, messages: list[JSON], turns: list[str]) -> list[str] | None:
    """The turn of each history message of a kagent main task that holds several turns (a merged fork, an
    approval), or None. kagent main names no turn on a user message, so its user messages with text are
    paired, in order, with the turns a user message opens: all but those that only answer an earlier
    turn's call (the turn after an approval). Another message belongs with the text before it. None when
    the counts differ (then: the next message naming a turn, else the task's first turn)."""
    if dialect is not TaskDialect.V1 or len(turns) < 2 or not messages:
        return None
    per_turn = chat_marks({**task, "history": []}, dialect)
    calls: set[str] = set()
    opening = []
    for inv in turns:
        mark = per_turn.get(inv, ChatMarks())  # a turn only the history names: no call outside it
        if not (mark.response_ids and set(mark.response_ids) <= calls):
            opening.append(inv)
        calls.update(mark.call_ids)
    texts = [i for i, m in enumerate(messages) if _is_user(m, dialect) and message_text(m)]
    if len(texts) != len(opening):
        return None
    out, current = [], turns[0]
    for i in range(len(messages)):
        if i in texts:
            current = opening[texts.index(i)]
        out.append(current)
    return out


def _parts(node: JSON) -> list[JSON]:
    parts = node.get("parts")
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _add_calls(mark: ChatMarks, node: JSON) -> None:
    """The call ids kagent's UI keeps on tool cards: function calls (an approval request's original call
    too) and responses in data parts, and the tools of main's human-in-the-loop request message."""

    def add(target: list[str], value: object) -> None:
        if isinstance(value, str) and value and value not in target:
            target.append(value)

    for part in _data_parts(node):
        data = part.get("data")
        if not isinstance(data, dict):
            continue
        kind = _ui_meta(part.get("metadata"), "type")
        if kind == "function_call":
            add(mark.call_ids, data.get("id"))
            args = data.get("args")
            original = args.get("originalFunctionCall") if isinstance(args, dict) else None
            if isinstance(original, dict):
                add(mark.call_ids, original.get("id"))
        elif kind == "function_response":
            add(mark.response_ids, data.get("id"))
    metadata = node.get("metadata")
    for value in metadata.values() if isinstance(metadata, dict) else ():
        tools = value.get("tools") if isinstance(value, dict) else None
        for tool in tools if isinstance(tools, list) else ():
            if isinstance(tool, dict):
                add(mark.call_ids, tool.get("call_id"))
                add(mark.call_ids, tool.get("id"))


def _legacy_text_bubble(message: JSON, dialect: TaskDialect) -> bool:
    """kagent 0.10.x's extractMessagesFromTasks shows this agent history message as a text bubble."""
    if _is_user(message, dialect) or confirmation_requests(message) or not message_text(message).strip():
        return False
    for part in _data_parts(message):
        kind = _ui_meta(part.get("metadata"), "type")
        data = part.get("data")
        name = data.get("name") if isinstance(data, dict) else None
        if kind == "function_response" or (kind == "function_call" and name not in _HIDDEN_CALLS):
            return False
    return True


def _displayable(message: JSON) -> bool:
    for part in _parts(message):
        if isinstance(part.get("text"), str) and part["text"]:
            return True
        data = part.get("data")
        if "data" in part and not (isinstance(data, dict) and data and set(data) <= _MODEL_INTERNAL):
            return True
        if "raw" in part or "url" in part:
            return True
    return False


def _text_runs(artifact: JSON) -> int:
    """How many text messages kagent main's appendArtifactMessages makes of one artifact: runs of text
    (text parts, untyped data, files) split by the tool calls and results it shows."""
    runs, text = 0, False
    for part in _parts(artifact):
        if "text" in part:
            text = text or bool(part.get("text"))
            continue
        if "data" in part:
            data = part.get("data")
            kind = _ui_meta(part.get("metadata"), "type")
            if kind == "function_call" and isinstance(data, dict):
                if data.get("name") == "adk_request_credential":
                    continue
            elif kind == "function_response" and isinstance(data, dict):
                response = data.get("response")
                status = response.get("status") if isinstance(response, dict) else None
                pending_agent = (
                    status == "pending"
                    and "__NS__" in str(data.get("name"))
                    and isinstance(response, dict)
                    and isinstance(response.get("subagent_session_id"), str)
                )
                if status in ("confirmation_requested", "pending") and not pending_agent:
                    continue
            else:
                text = text or (isinstance(data, dict) and bool(data))
                continue
            runs, text = runs + text, False
            continue
        if "raw" in part or "url" in part:
            text = True
    return runs + text


# An id of a uuid4 string's length and characters (none escaped in JSON): the figures of a task copied with new
# uuid4 ids (its bytes, a merged task's) are the same with this in their place, as they depend only on the ids' length.
PLACEHOLDER_ID = "00000000-0000-4000-8000-000000000000"


@dataclass(frozen=True, kw_only=True)
class Rewrite:
    """The ids a copied task must carry so that it belongs to the fork and to its caller."""

    task_id: str
    context_id: str
    user_id: str


# Every metadata key _rewrite_metadata overwrites.
_REWRITTEN_KEYS = frozenset(
    {*(prefix + key for prefix in _PREFIXES for key in ("session_id", "user_id")), *_THREAD_KEYS}
)


def _rewrite_metadata(metadata: object, rw: Rewrite) -> object:
    if not isinstance(metadata, dict):
        return metadata
    if _REWRITTEN_KEYS.isdisjoint(metadata):
        return metadata  # most (an artifact's) names no session or user: not copied, copies were most of a rewrite
    out = dict(metadata)
    for prefix in _PREFIXES:
        if prefix + "session_id" in out:
            out[prefix + "session_id"] = rw.context_id
        if prefix + "user_id" in out:
            out[prefix + "user_id"] = rw.user_id
    for key in _THREAD_KEYS:
        if key in out:
            out[key] = rw.context_id
    return out


def _rewrite_message(message: JSON, rw: Rewrite) -> JSON:
    out = dict(message)
    if "taskId" in out:
        out["taskId"] = rw.task_id
    if "contextId" in out:
        out["contextId"] = rw.context_id
    if "metadata" in out:
        out["metadata"] = _rewrite_metadata(out["metadata"], rw)
    return out


def rewrite(task: JSON, rw: Rewrite) -> JSON:
    """A copy of the task with its own, its messages' and its metadata's ids pointing at the fork."""
    out = dict(task)
    out["id"] = rw.task_id
    out["contextId"] = rw.context_id
    if "metadata" in out:
        out["metadata"] = _rewrite_metadata(out["metadata"], rw)
    if isinstance(out.get("history"), list):
        out["history"] = [_rewrite_message(m, rw) for m in history(task)]
    status = _status(task)
    if isinstance(status.get("message"), dict):
        out["status"] = {**status, "message": _rewrite_message(status["message"], rw)}
    if isinstance(out.get("artifacts"), list):
        out["artifacts"] = [_rewrite_artifact(a, rw) for a in artifacts(task)]
    return out


@dataclass(frozen=True, kw_only=True)
class RewriteTargets:
    """The values tasks.rewrite overwrites, one entry per place: with the new task id, with the new
    context id, with the caller's user id."""

    task_ids: list[object]
    context_ids: list[object]
    user_ids: list[object]


# Every metadata key rewrite() overwrites (_rewrite_metadata).
_METADATA_TARGET_KEYS = frozenset(
    [*(prefix + key for prefix in _PREFIXES for key in ("session_id", "user_id")), *_THREAD_KEYS]
)


def _metadata_targets(metadata: object, out: RewriteTargets) -> None:
    # Most metadata (an artifact's, a message's) holds none of those keys: one set test passes it by
    # (a first whole fork checks every task's, issue 37).
    if isinstance(metadata, dict) and not _METADATA_TARGET_KEYS.isdisjoint(metadata):
        for prefix in _PREFIXES:
            if prefix + "session_id" in metadata:
                out.context_ids.append(metadata[prefix + "session_id"])
            if prefix + "user_id" in metadata:
                out.user_ids.append(metadata[prefix + "user_id"])
        out.context_ids.extend(metadata[key] for key in _THREAD_KEYS if key in metadata)


def rewrite_targets(task: JSON) -> RewriteTargets | None:
    """Every place rewrite() overwrites, with its present value (None where rewrite adds the key); None
    when rewrite would also change the task's shape (it drops history and artifact entries that are
    not objects). Walks the task exactly as rewrite does: keep the two in step."""
    for key in ("history", "artifacts"):
        value = task.get(key)
        if isinstance(value, list) and not all(isinstance(entry, dict) for entry in value):
            return None
    out = RewriteTargets(task_ids=[task.get("id")], context_ids=[task.get("contextId")], user_ids=[])
    if "metadata" in task:
        _metadata_targets(task["metadata"], out)
    message = _status(task).get("message")
    for m in [*history(task), *([message] if isinstance(message, dict) else [])]:
        if "taskId" in m:
            out.task_ids.append(m["taskId"])
        if "contextId" in m:
            out.context_ids.append(m["contextId"])
        if "metadata" in m:
            _metadata_targets(m["metadata"], out)
    for artifact in artifacts(task):
        if "metadata" in artifact:
            _metadata_targets(artifact["metadata"], out)
    return out


# A \uXXXX escape of a character that verbatim ids may hold (verbatim_in_json: letters, digits and
# "._:@+=-", over-approximated to 0x40-0x7F); Go's \u003c, \u003e and \u0026 are not among them.
_ESCAPED_ID_CHAR = re.compile(r"\\u00(?:2[bde]|3[0-9ad]|[4-7][0-9a-f])", re.IGNORECASE)


def replacing_ids_rewrites(text: str, task: JSON, *, task_id: str, context_id: str, user_id: str) -> bool:
    """Whether replacing, in the text, each whole JSON string "<task_id>" and then "<context_id>" by a
    new id (what copy_tasks_before in sql/queries/events.sql does) gives what rewrite(task, Rewrite(<new task
    id>, <new context id>, user_id)) makes, whatever the new ids (each new, a verbatim id); `task` is
    `text` decoded.

    It does when every place rewrite overwrites already holds the old value (the user's: the new one),
    each of those places is written as the plain token "<old id>" (no escape: verbatim ids and no
    escape of their characters anywhere in the text), and the text holds no other such token, not
    even inside a string: then the replacement touches exactly the rewrite's places.
    """
    targets = rewrite_targets(task)
    if targets is None or task_id == context_id:
        return False
    if not (
        all(v == task_id for v in targets.task_ids)
        and all(v == context_id for v in targets.context_ids)
        and all(v == user_id for v in targets.user_ids)
    ):
        return False
    if not (verbatim_in_json(task_id) and verbatim_in_json(context_id)) or _ESCAPED_ID_CHAR.search(text):
        return False
    return text.count(f'"{task_id}"') == len(targets.task_ids) and text.count(f'"{context_id}"') == len(
        targets.context_ids
    )


def _rewrite_artifact(artifact: JSON, rw: Rewrite) -> JSON:
    if "metadata" not in artifact:
        return artifact
    metadata = _rewrite_metadata(artifact["metadata"], rw)
    return artifact if metadata is artifact["metadata"] else {**artifact, "metadata": metadata}


def _closed_status(task: JSON, state: str) -> JSON:
    status: JSON = {"state": state}
    timestamp = _status(task).get("timestamp")
    if timestamp is not None:
        status["timestamp"] = timestamp
    return status


def cut(task: JSON, dialect: TaskDialect, index: int) -> JSON:
    """The task holding only history[:index] and the artifacts of the turns that remain, completed.

    An artifact without an invocation id cannot be placed in a turn; kagent's agents write artifacts at
    the end of a task, so it belongs to the last turn, which a cut always removes.
    """
    kept = history(task)[:index]
    kept_turns = {inv for m in kept if (inv := _invocation_of(m)) is not None}
    out = dict(task)
    out["history"] = kept
    if "artifacts" in task:
        out["artifacts"] = [a for a in artifacts(task) if _invocation_of(a) in kept_turns]
    out["status"] = _closed_status(task, _COMPLETED[dialect])
    return out


def cancel(task: JSON, dialect: TaskDialect) -> JSON:
    """The task closed as canceled (its status message, if any, belonged to the unfinished turn)."""
    return {**task, "status": _closed_status(task, _CANCELED[dialect])}


def _tag_artifacts(task: JSON) -> list[JSON]:
    """The task's artifacts, each stamped with its turn's invocation id if it has none, so that a later
    cut of the merged task knows which turn an artifact answers."""
    turns = invocation_ids(task)
    if len(turns) != 1:
        return artifacts(task)
    tagged = []
    for artifact in artifacts(task):
        if _invocation_of(artifact) is None:
            metadata = artifact.get("metadata")
            base = metadata if isinstance(metadata, dict) else {}
            artifact = {**artifact, "metadata": {**base, "kagent_invocation_id": turns[0]}}
        tagged.append(artifact)
    return tagged


class Merger:
    """Builds one completed task from the given tasks' histories in order, de-duplicated by messageId
    (kagent's fork design), and their artifacts, one task at a time, as JSON text in pieces.

    `add` gives the text of each kept message as soon as its task is added (after HEAD, joined by
    commas already), and `tail` the rest: the artifacts, the last task's other keys and a completed
    status. "history" comes first so that a long merge can be written while it is made: the merger
    holds the artifacts, never the whole merged task.
    """

    HEAD = b'{"history":['

    def __init__(self, dialect: TaskDialect, rw: Rewrite) -> None:
        self.dialect = dialect
        self.rw = rw
        self.count = 0
        self._artifacts: list[msgspec.Raw] | None = None
        self._seen: set[str] = set()
        self._last: JSON | None = None

    def add(self, task: JSON) -> list[bytes]:
        parts: list[bytes] = []
        for message in history(task):
            message_id = message.get("messageId")
            if isinstance(message_id, str):
                if message_id in self._seen:
                    continue
                self._seen.add(message_id)
            text = _encoder.encode(_rewrite_message(message, self.rw))
            parts.append(text if self.count == 0 and not parts else b"," + text)
        self.count += len(parts)
        if "artifacts" in task:
            self._artifacts = self._artifacts if self._artifacts is not None else []
            for artifact in _tag_artifacts(task):
                self._artifacts.append(msgspec.Raw(_encoder.encode(_rewrite_artifact(artifact, self.rw))))
        self._last = {k: v for k, v in task.items() if k not in ("history", "artifacts")}
        return parts

    def tail(self) -> bytes:
        """The merged task's text after its last message, up to its end."""
        if self._last is None:
            raise ValueError("merge needs at least one task")
        merged: JSON = {k: v for k, v in self._last.items() if k != "status"}
        merged["id"] = self.rw.task_id
        merged["contextId"] = self.rw.context_id
        if "metadata" in merged:
            merged["metadata"] = _rewrite_metadata(merged["metadata"], self.rw)
        merged["status"] = _closed_status(self._last, _COMPLETED[self.dialect])
        if self._artifacts is not None:
            merged["artifacts"] = self._artifacts
        self._artifacts = None
        return b"]," + _encoder.encode(merged)[1:]  # the object's keys, after the history's end


def merge(tasks: Iterable[JSON], dialect: TaskDialect, rw: Rewrite) -> tuple[JSON, int]:
    """The merged task of `tasks` (see Merger), decoded, and its message count."""
    merger = Merger(dialect, rw)
    parts = [Merger.HEAD]
    for task in tasks:
        parts += merger.add(task)
    return decode(b"".join([*parts, merger.tail()])), merger.count
