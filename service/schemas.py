"""Wire types (msgspec Structs), mirroring openapi.yaml."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from service.errors import BadRequest
from service.kagent.store.sessions import SessionRow

# Every string a caller sends: at most 256 characters and no NUL (PostgreSQL text cannot hold one).
# The two patterns of the wire types, and what each means in words (an error names the words, not the regex).
NO_NUL = r"^[^\x00]*$"
VISIBLE_NO_NUL = r"^[^\x00]*[^\x00\s][^\x00]*$"
PATTERN_WORDS = {
    NO_NUL: "must not hold a NUL character",
    VISIBLE_NO_NUL: "must hold a character other than spaces, and no NUL",
}
_PATTERN_ERROR = re.compile(r"Expected `str` matching regex (?P<pattern>'.*?') - at `(?P<at>[^`]+)`")

Text = Annotated[str, Meta(min_length=1, max_length=256, pattern=NO_NUL)]


def worded(error: str) -> str:
    """A validation error with a pattern's regex said in words: `$.message.text must hold a character ...`."""

    def words(match: re.Match[str]) -> str:
        said = {repr(p): w for p, w in PATTERN_WORDS.items()}.get(match["pattern"])
        return f"{match['at']} {said}" if said else match[0]

    return _PATTERN_ERROR.sub(words, error)


TaskLayout = Literal["auto", "merged", "per_task"]


class _Request(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class ForkRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    rewind_before_invocation_id: Text | None = None
    rewind_before_task_id: Text | None = None
    name: Text | None = None
    if_boundary_missing: Literal["copy_all", "error"] = "copy_all"
    task_layout: TaskLayout = "auto"
    dry_run: bool = False
    tasks_only: bool = False


class EmptyRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A body that takes no fields (undo): an empty body or {}."""


class RewindRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    rewind_before_invocation_id: Text | None = None
    rewind_before_task_id: Text | None = None
    dry_run: bool = False
    force: bool = False


class Session(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """kagent's Session JSON (go/api/database/models.go): optional fields are omitted when empty."""

    id: str
    user_id: str
    created_at: str
    updated_at: str
    name: str | None = None
    agent_id: str | None = None
    source: str | None = None


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    """A branch summary: what a fork left behind or a rewind hid (api-contract "Branch summary")."""

    strategy: Literal["deterministic_v1"] = "deterministic_v1"
    turns: int
    events: int
    tool_calls: dict[str, int]
    first_user_text: str | None
    last_agent_text: str | None
    total_tokens: int


class ForkInfo(msgspec.Struct, frozen=True, kw_only=True):
    parent_session_id: str
    fork_root_session_id: str
    depth: int
    rewind_before_invocation_id: str | None
    rewind_before_task_id: str | None
    framework: str | None
    boundary_found: bool
    events_copied: int
    tasks_copied: int
    messages_copied: int
    task_layout: str
    warnings: list[str]
    summary: Summary | None


class ForkedSession(Session, frozen=True, kw_only=True):
    fork: ForkInfo


class ForkPlan(ForkInfo, frozen=True, kw_only=True):
    """A dry run's answer: what a fork would hold; nothing is written."""

    dry_run: bool
    name: str
    bytes_to_copy: int
    estimated_context_tokens: int


class LineageRecord(ForkInfo, frozen=True, kw_only=True):
    """A fork's lineage record, as the forks and tree views show it."""

    created_at: str


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """kagent's success envelope: {"error": false, "data": ..., "message": ...}."""

    data: object
    message: str
    error: bool = False


def one_boundary(
    invocation_id: str | None,
    task_id: str | None,
    *,
    required: bool,
    names: tuple[str, str] = ("rewind_before_invocation_id", "rewind_before_task_id"),
) -> None:
    """A turn is named by its invocation or by its task, never both (400); `required`: one of them (400)."""
    if invocation_id is not None and task_id is not None:
        raise BadRequest(f"send {names[0]} or {names[1]}, not both")
    if required and invocation_id is None and task_id is None:
        raise BadRequest(f"{names[0]} or {names[1]} is required")


def is_utf8(body: bytes) -> bool:
    """Whether a request body is valid UTF-8, by Python's own codec (no JSON library's wording)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def checked_id(value: str, what: str = "session id") -> str:
    """An id from a path, a query or a tool's arguments: 1 to 256 characters without NUL, as `Text`."""
    if not value or len(value) > 256 or "\x00" in value:
        raise BadRequest(f"{what} must be 1 to 256 characters without NUL")
    return value


def rfc3339(value: datetime | None) -> str:
    """A timestamp as Go's time.RFC3339Nano writes it (UTC as 'Z', no trailing zeros)."""
    if value is None:
        return "0001-01-01T00:00:00Z"
    value = value.astimezone(UTC)
    # Not strftime: its %Y writes a year before 1000 with fewer than four digits, which Go (and RFC 3339) pad.
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text + "Z"


def session_json(row: SessionRow) -> Session:
    return Session(
        id=row.id,
        user_id=row.user_id,
        name=row.name,
        agent_id=row.agent_id,
        source=row.source,
        created_at=rfc3339(row.created_at),
        updated_at=rfc3339(row.updated_at),
    )
