"""Read kagent's tables the way kagent reads them, to check what the service writes.

The queries are those of kagent's Go backend (go/core/internal/database/queries/{sessions,events,tasks}.sql
on main, identical on release/v0.10.x for these), with explicit column lists instead of ``SELECT *``.

``parse_event`` and ``parse_task`` are stricter than kagent's Go backend, whose ``json.Unmarshal`` ignores
unknown keys: they apply the readers of the agent runtimes and A2A libraries that kagent pins, and refuse
what those would refuse or silently drop.

What the libraries themselves accept (google-adk 2.6.2, a2a-sdk 1.1.2, checked when this was written):

- ``google.adk.events.Event.model_validate_json`` accepts snake_case and camelCase keys alike
  (``populate_by_name`` with a camelCase alias generator). It REJECTS Go ADK's RFC 3339 ``timestamp``
  string (``float_parsing``): a Go agent's event cannot be read by the Python ADK as it is. Top-level
  unknown keys are IGNORED by 2.6.2 (``extra='ignore'`` on ``Event``; older ADKs, e.g. 1.4, forbid them),
  while unknown keys inside ``content``, its parts and ``actions`` are rejected (``extra='forbid'``).
  ``parse_event`` therefore also refuses unknown top-level keys.
- ``json_format.Parse(data, a2a.types.Task())`` rejects unknown fields and malformed enum names, but
  accepts snake_case field names (``context_id``) and integer enum values. ``parse_task`` refuses those too:
  kagent's Go reader (a2a-go, ``encoding/json``) would silently drop a snake_case field.
- ``a2a.compat.v0_3.types.Task.model_validate_json`` IGNORES unknown keys and accepts snake_case names
  (``validate_by_name``). ``parse_task`` refuses every key the model does not keep.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

SESSION_COLUMNS = "id, user_id, name, created_at, updated_at, deleted_at, agent_id, source"
EVENT_COLUMNS = "id, user_id, session_id, created_at, updated_at, deleted_at, data"
TASK_COLUMNS = "id, created_at, updated_at, deleted_at, data, session_id, protocol_version, user_id"
SHARE_COLUMNS = "id, token, session_id, user_id, read_only, created_at"

# The NULL-owner rule of tasks.sql: a task without user_id belongs to the only user that had a session
# with that id when the task was written.
_TASK_VISIBLE = """task.deleted_at IS NULL
  AND (task.user_id = $2 OR (task.user_id IS NULL AND $2 = (
      SELECT MIN(s.user_id) FROM session s
      WHERE s.id = task.session_id AND s.created_at <= task.created_at
      HAVING COUNT(DISTINCT s.user_id) = 1)))"""


# --------------------------------------------------------------------------------------------------
# Queries


async def get_session(conn: Any, session_id: str, user_id: str) -> Any:
    """GetSession: the caller's non-deleted session, or None."""
    return await conn.fetchrow(
        f"SELECT {SESSION_COLUMNS} FROM session WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL LIMIT 1",
        session_id,
        user_id,
    )


async def list_sessions(conn: Any, user_id: str) -> list[Any]:
    """ListSessions: the caller's sessions, most recently updated first (the sidebar's order)."""
    return list(
        await conn.fetch(
            f"SELECT {SESSION_COLUMNS} FROM session WHERE user_id = $1 AND deleted_at IS NULL "
            "ORDER BY updated_at DESC, created_at DESC",
            user_id,
        )
    )


async def list_events_for_session_asc(
    conn: Any, session_id: str, user_id: str, after: datetime | None = None
) -> list[Any]:
    """ListEventsForSessionAsc: what an agent runtime loads to rebuild its session (no tie-breaker)."""
    return list(
        await conn.fetch(
            f"SELECT {EVENT_COLUMNS} FROM event WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL "
            "AND ($3::timestamptz IS NULL OR created_at > $3) ORDER BY created_at ASC",
            session_id,
            user_id,
            after,
        )
    )


async def list_tasks_for_session(conn: Any, session_id: str, user_id: str) -> list[Any]:
    """ListTasksForSession: what the UI loads to show a chat, with the NULL-owner rule."""
    return list(
        await conn.fetch(
            f"SELECT {TASK_COLUMNS} FROM task WHERE task.session_id = $1 AND {_TASK_VISIBLE} ORDER BY created_at ASC",
            session_id,
            user_id,
        )
    )


async def get_task(conn: Any, task_id: str, user_id: str) -> Any:
    """GetTask, with the same ownership rule."""
    return await conn.fetchrow(
        f"SELECT {TASK_COLUMNS} FROM task WHERE task.id = $1 AND {_TASK_VISIBLE} LIMIT 1", task_id, user_id
    )


async def get_session_share_by_token(conn: Any, token: str) -> Any:
    """GetSessionShareByToken."""
    return await conn.fetchrow(f"SELECT {SHARE_COLUMNS} FROM session_share WHERE token = $1 LIMIT 1", token)


async def load_session_tasks(
    conn: Any, session_id: str, user_id: str, *, line: Literal["0.10.x", "main"] = "0.10.x"
) -> list[Any]:
    """The whole task list as kagent's ListTasksForSession returns it: one unreadable row fails it all."""
    parsed = []
    for index, row in enumerate(await list_tasks_for_session(conn, session_id, user_id)):
        try:
            parsed.append(parse_task(row["data"], row["protocol_version"], line=line))
        except Exception as exc:
            raise ValueError(f"failed to parse task row {index} ({row['id']}): {exc}") from exc
    return parsed


# --------------------------------------------------------------------------------------------------
# Events


@dataclass(frozen=True)
class ParsedEvent:
    kind: Literal["adk_python", "adk_go", "openai"]
    raw: dict[str, Any]
    event: Any = None  # google.adk.events.Event for ADK events
    items: list[dict[str, Any]] | None = None  # OpenAI-agents items

    @property
    def invocation_id(self) -> str | None:
        return self.event.invocation_id if self.event is not None else None


_GO_ONLY_KEYS = frozenset({"routes", "requestedInput"})  # Go ADK Event fields without a Python counterpart


def _event_keys() -> tuple[frozenset[str], frozenset[str]]:
    from google.adk.events import Event

    names = frozenset(Event.model_fields)
    aliases = frozenset(f.alias or n for n, f in Event.model_fields.items())
    return names, aliases


def _parse_rfc3339(text: str) -> float:
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no time zone")
    return when.timestamp()


def parse_event(data: str) -> ParsedEvent:
    """Validate one ``event.data`` as its runtime reads it; raise ValueError (or pydantic's) on failure.

    - Python ADK (snake_case, float timestamp): ``Event.model_validate_json(data)``.
    - Go ADK (camelCase, RFC 3339 timestamp string): the Python ADK rejects the string timestamp, so the
      timestamp is converted to float seconds and the rest validated with ``Event.model_validate``.
    - OpenAI-agents rows: ``{"timestamp": <ISO 8601>, "items": [<dict with role or type>...],
      "type": "conversation_items"}`` and nothing else.
    """
    from google.adk.events import Event

    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError("event data is not a JSON object")
    if obj.get("type") == "conversation_items":
        unknown = set(obj) - {"timestamp", "items", "type"}
        if unknown:
            raise ValueError(f"unknown keys in an OpenAI-agents event: {sorted(unknown)}")
        items, stamp = obj.get("items"), obj.get("timestamp")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ValueError("OpenAI-agents event: 'items' must be a list of objects")
        if not all(isinstance(i.get("role"), str) or isinstance(i.get("type"), str) for i in items):
            raise ValueError("OpenAI-agents event: every item needs a 'role' or a 'type'")
        if not isinstance(stamp, str):
            raise ValueError("OpenAI-agents event: 'timestamp' must be an ISO 8601 string")
        datetime.fromisoformat(stamp)
        return ParsedEvent(kind="openai", raw=obj, items=items)

    names, aliases = _event_keys()
    go = isinstance(obj.get("timestamp"), str) or "invocationId" in obj
    allowed = (aliases | _GO_ONLY_KEYS) if go else (names | aliases)
    unknown = set(obj) - allowed
    if unknown:
        raise ValueError(f"unknown top-level keys in an ADK event: {sorted(unknown)}")
    if go:
        converted = {k: v for k, v in obj.items() if k not in _GO_ONLY_KEYS}
        if isinstance(converted.get("timestamp"), str):
            converted["timestamp"] = _parse_rfc3339(converted["timestamp"])
        event = Event.model_validate(converted)
        kind: Literal["adk_python", "adk_go"] = "adk_go"
    else:
        event = Event.model_validate_json(data)
        kind = "adk_python"
    if not event.id or not event.author:
        raise ValueError("an ADK event needs a non-empty id and author")
    return ParsedEvent(kind=kind, raw=obj, event=event)


# --------------------------------------------------------------------------------------------------
# Tasks


def _check_v1_names(node: Any, descriptor: Any, path: str) -> None:
    """Refuse proto field names where the JSON name differs, and enums written as numbers."""
    from google.protobuf.descriptor import FieldDescriptor

    def repeated(field: Any) -> bool:
        flag = getattr(field, "is_repeated", None)  # protobuf >= 6; label() is deprecated there
        return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED

    if descriptor.full_name.startswith("google.protobuf."):
        return  # Struct, Value, Timestamp: free-form or checked by Parse
    if not isinstance(node, dict):
        return
    by_json = {f.json_name: f for f in descriptor.fields}
    for key, value in node.items():
        field = by_json.get(key)
        if field is None:
            raise ValueError(f"{path}.{key}: not a camelCase field of {descriptor.name}")
        values = value if repeated(field) and isinstance(value, list) else [value]
        for item in values:
            if field.type == FieldDescriptor.TYPE_ENUM and not isinstance(item, str):
                raise ValueError(f"{path}.{key}: enum written as {item!r}, not by name")
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                _check_v1_names(item, field.message_type, f"{path}.{key}")


def _subset(original: Any, kept: Any, path: str) -> None:
    """Every key and value of ``original`` survives in ``kept`` (what the model keeps)."""
    if isinstance(original, dict):
        if not isinstance(kept, dict):
            raise ValueError(f"{path}: expected an object")
        for key, value in original.items():
            if key not in kept:
                raise ValueError(f"{path}.{key}: unknown key, dropped by the A2A 0.3 model")
            _subset(value, kept[key], f"{path}.{key}")
    elif isinstance(original, list):
        if not isinstance(kept, list) or len(kept) != len(original):
            raise ValueError(f"{path}: list changed")
        for i, (a, b) in enumerate(zip(original, kept, strict=True)):
            _subset(a, b, f"{path}[{i}]")
    elif original != kept:
        raise ValueError(f"{path}: {original!r} read back as {kept!r}")


def parse_task(data: str, protocol_version: str | None, *, line: Literal["0.10.x", "main"] = "0.10.x") -> Any:
    """Parse one ``task.data`` as kagent does for its ``protocol_version``; raise on failure.

    ``"1.0"``: A2A v1.0 JSON, ``json_format.Parse(data, a2a.types.Task())`` (unknown fields rejected), plus
    camelCase names and enum names only; returns the protobuf ``Task``. NULL or ``""``: legacy A2A 0.2/0.3
    JSON, ``a2a.compat.v0_3.types.Task.model_validate_json`` plus no unknown or renamed key; returns the
    pydantic ``Task``. Any other version is refused, as by kagent. ``line="main"`` also refuses legacy rows:
    kagent main's ``parseVersionedTask`` only accepts ``protocol_version = '1.0'``.
    """
    if protocol_version == "1.0":
        from a2a.types import Task
        from google.protobuf import json_format

        task = json_format.Parse(data, Task())
        _check_v1_names(json.loads(data), Task.DESCRIPTOR, "task")
        if not task.id:
            raise ValueError("task: empty id")
        return task
    if protocol_version not in (None, ""):
        raise ValueError(f"unsupported task protocol_version {protocol_version!r}")
    if line == "main":
        raise ValueError("kagent main only reads tasks with protocol_version '1.0'")
    from a2a.compat.v0_3 import types as v03

    legacy = v03.Task.model_validate_json(data)
    _subset(json.loads(data), json.loads(legacy.model_dump_json(by_alias=True)), "task")
    return legacy
