"""Planning a fork: pure functions over values, no I/O.

The operations in operations.py gather facts from the database and ask these functions what the
fork must hold; the task rows of the fork are built here, one at a time, from the source rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from service.errors import Unprocessable
from service.kagent import dialects
from service.kagent.dialects import TaskDialect
from service.kagent.store.tasks import NewTask, TaskRow

Layout = str  # "merged" | "per_task"


def default_name(source_name: str | None, first_user_text: str | None) -> str:
    """`Fork of <name>`; for an unnamed source or the UI's placeholder `Chat`, the first user message."""
    if source_name and source_name != "Chat":
        return f"Fork of {source_name}"
    if first_user_text and first_user_text.strip():
        return f'Fork of "{" ".join(first_user_text.split())[:60]}"'
    return "Fork of chat"


def choose_layout(requested: str, dialects: set[TaskDialect]) -> Layout:
    """`auto`: the layout kagent's UI of the tasks' line renders as the same conversation.

    The 0.10.x UI builds a chat from task.history alone, so one merged task reads right, unless a
    confirmation request reads across turns: the caller settles that with merge_hazard before
    writing merged tasks. The main line's UI shows each task's user messages and then its artifacts,
    so merging v1 tasks would put every question before every answer: they are copied one by one.
    """
    if requested == "merged":
        if len(dialects) > 1:
            raise Unprocessable("task_layout merged cannot merge legacy and A2A v1.0 tasks into one task")
        return "merged"
    if requested == "per_task":
        return "per_task"
    return "merged" if dialects == {TaskDialect.LEGACY} else "per_task"


V1_MERGED_WARNING = (
    "task_layout merged on A2A v1.0 tasks: kagent's main UI shows a task's user messages and then its "
    "artifacts, so this fork shows every question of the merged turns first, then every answer"
)


def merge_hazard(
    candidates: Sequence[TaskRow], *, partial: BoundaryTask | None, first_id: str | None, last_id: str | None
) -> str | None:
    """Why kagent 0.10.x's UI would show the kept legacy tasks merged into one task otherwise than one
    by one; None when it shows them the same.

    `candidates`: every kept task whose text holds a confirmation request (dialects.CONFIRMATION_CALL),
    oldest first, the cut one (`partial`) included; `first_id`/`last_id`: the oldest and newest kept
    tasks. The UI reads a task's history message by message; only two of its reads reach past a
    message, and only when the message is a confirmation request (tool approval or ask_user):
    findDecisionAfterIndex takes the first user decision after it *in the same task*, and the card
    takes the token usage of the last agent message before it *in the same task*. Everything else
    (the chat list, tool cards merged by call id, sub-agent session ids) is built over all tasks
    alike, and the merge keeps the messages in order, de-duplicated by messageId as the UI does.
    So a merge shows the same unless a request finds no decision in its own task (merged, it would
    take a later turn's: an approval or answer nobody gave) or no usage before it in its own task
    (merged, it would show an earlier turn's).
    """
    for row in candidates:
        try:
            data = dialects.decode(row.data)
        except dialects.TaskFormatError:
            continue  # the copy refuses it (422)
        if partial is not None and row.id == partial.row.id:
            data = dialects.cut(data, TaskDialect.LEGACY, partial.cut)
        reason = _task_merge_hazard(data, first=row.id == first_id, last=row.id == last_id)
        if reason is not None:
            return f"task {row.id} holds {reason}"
    return None


def _task_merge_hazard(task: dialects.JSON, *, first: bool, last: bool) -> str | None:
    messages = dialects.history(task)
    seen: set[str] = set()
    usage = False
    for index, message in enumerate(messages):
        message_id = message.get("messageId")
        if isinstance(message_id, str):
            if message_id in seen:
                continue  # the UI (and the merge) read a messageId once
            seen.add(message_id)
        if dialects.confirmation_requests(message):
            answered = any(dialects.decision(m, TaskDialect.LEGACY) is not None for m in messages[index + 1 :])
            if not answered and not last:
                return (
                    "a tool confirmation with no decision after it in that task: merged with the later turns, "
                    "kagent 0.10.x's UI would pair it with a later turn's decision (an approval or answer "
                    "nobody gave)"
                )
            if answered and not usage and not first:
                return (
                    "a tool confirmation with no token usage before it in that task: merged with the earlier "
                    "turns, kagent 0.10.x's UI would show an earlier turn's usage on its card"
                )
            continue
        if message.get("role") != "user" and dialects.carries_usage(message):
            usage = True
    return None


def merge_verdict(requested: str, hazard: str | None) -> tuple[Layout, list[str]]:
    """The layout of legacy tasks that `choose_layout` merges, given merge_hazard's answer, and the warning."""
    if hazard is None:
        return "merged", []
    if requested == "merged":
        return "merged", [f"task_layout merged: kagent 0.10.x's UI shows this fork otherwise than its source: {hazard}"]
    return "per_task", [f"the tasks are copied one by one (task_layout per_task), not merged: {hazard}"]


def dialect_of(row: TaskRow) -> TaskDialect:
    dialect = TaskDialect.of(row.protocol_version)
    if dialect is None:
        raise Unprocessable(f"task {row.id} has protocol_version {row.protocol_version!r}, unknown to this service")
    return dialect


@dataclass(frozen=True, kw_only=True)
class BoundaryTask:
    """The first task carrying the boundary invocation, and where its history is cut (0: not kept)."""

    row: TaskRow
    cut: int


def find_boundary_task(candidates: Sequence[TaskRow], invocation_id: str) -> BoundaryTask | None:
    for row in candidates:
        try:
            data = dialects.decode(row.data)
        except dialects.TaskFormatError:
            continue  # an unreadable row is never a boundary
        if invocation_id in dialects.invocation_ids(data):
            index = dialects.cut_index(data, dialect_of(row), invocation_id)
            return BoundaryTask(row=row, cut=index or 0)
    return None


TURN_OPENING = "header_update"  # the invocation id of the event kagent-adk 0.10.x writes before each turn


def turn_start(invocation_ids: Sequence[str | None], invocation_id: str) -> int | None:
    """Where the turn of `invocation_id` begins in a conversation's events, given their invocation ids in
    the order the runtime reads them: the index of its first event, or of the event just before it when
    that one is the "header_update" that opens the turn (kept, a hidden turn's request headers would stay
    in the state the runtime rebuilds). None when no event carries the id. This is `boundary_event`'s rule
    (sql/queries/events.sql) for rows already in hand: the turn map's boundary and a native ADK database
    (kagent 1.0's per-Actor SQLite, docs/kagent-1.0.md) are cut by it."""
    first = next((i for i, x in enumerate(invocation_ids) if x == invocation_id), None)
    if first is not None and first > 0 and invocation_ids[first - 1] == TURN_OPENING:
        return first - 1
    return first


def closed_warning(task_id: str, state: str | None) -> str:
    return f"task {task_id} was left in state {state!r}: its copy is closed as canceled"


@dataclass(kw_only=True)
class TaskCopier:
    """Builds the fork's task rows from the kept source tasks, fed oldest first.

    per_task: each task is copied with a new id (`add` gives its row, `size` only its bytes). merged: the
    kept histories become one completed task, whose text comes in pieces (`merge`, then `merged_end`) so
    that it can be written while it is made; `add` and `finish` gather the pieces into one row instead.

    `dry_run`: nothing made is written, only counted and measured, so the new task ids are
    dialects.PLACEHOLDER_ID (a uuid4's length: the same bytes), not a uuid4 each.
    """

    layout: Layout
    session_id: str
    user_id: str
    now: datetime
    dry_run: bool = False
    messages: int = 0
    written: int = 0
    warnings: list[str] = field(default_factory=list)
    _merger: dialects.Merger | None = None
    _merge_created_at: datetime | None = None
    _merge_version: str | None = None
    _gathered: list[bytes] = field(default_factory=list)

    def _rewrite(self) -> dialects.Rewrite:
        task_id = dialects.PLACEHOLDER_ID if self.dry_run else str(uuid.uuid4())
        return dialects.Rewrite(task_id=task_id, context_id=self.session_id, user_id=self.user_id)

    def _prepared(self, row: TaskRow, cut: int | None) -> dialects.JSON:
        """The source task decoded, cut (only history[:cut]) when cut is given, closed if unfinished."""
        dialect = dialect_of(row)
        try:
            data = dialects.decode(row.data)
        except dialects.TaskFormatError as exc:
            raise Unprocessable(f"task {row.id} cannot be copied: {exc}") from None
        if cut is not None:
            return dialects.cut(data, dialect, cut)
        if not dialects.is_terminal(data, dialect):
            # A turn that never finished (its agent gone): copying it live would make kagent's UI
            # resubscribe to a task nobody runs, so its copy is closed as canceled.
            self.warnings.append(closed_warning(row.id, dialects.state(data)))
            return dialects.cancel(data, dialect)
        return data

    def add(self, row: TaskRow, cut: int | None = None) -> NewTask | None:
        """Take one source task (only history[:cut] of it when cut is given); return a row to write."""
        if self.layout == "merged":
            self._gathered += self.merge(row, cut)
            return None
        rw = self._rewrite()
        return self._row(rw.task_id, row.created_at, dialects.encode(self._copy(row, cut, rw)), row.protocol_version)

    def size(self, row: TaskRow, cut: int | None = None) -> int:
        """per_task: the bytes (UTF-8) of the data of the row `add` makes of the task, counted as add counts it."""
        return dialects.encoded_size(self._copy(row, cut, self._rewrite()))

    def _copy(self, row: TaskRow, cut: int | None, rw: dialects.Rewrite) -> dialects.JSON:
        """per_task: the task's copy, counted."""
        data = self._prepared(row, cut)
        self.messages += len(dialects.history(data))
        self.written += 1
        return dialects.rewrite(data, rw)

    def merge(self, row: TaskRow, cut: int | None = None) -> list[bytes]:
        """Merged layout: the merged task's next pieces of text, from this kept task (the first call's
        begin with the task's beginning)."""
        data = self._prepared(row, cut)
        first = self._merger is None
        self._merger = self._merger or dialects.Merger(dialect_of(row), self._rewrite())
        self._merge_created_at = self._merge_created_at or row.created_at
        self._merge_version = row.protocol_version
        parts = self._merger.add(data)
        return [dialects.Merger.HEAD, *parts] if first else parts

    @property
    def merged_task_id(self) -> str | None:
        return self._merger.rw.task_id if self._merger is not None else None

    @property
    def merged_created_at(self) -> datetime | None:
        """The merged task's created_at: its first kept task's."""
        return self._merge_created_at

    @property
    def merged_version(self) -> str | None:
        """The merged task's protocol_version: its last kept task's."""
        return self._merge_version

    def merged_end(self) -> bytes | None:
        """The merged task's last piece of text, once every kept task was merged (None: there was
        none); the task counts as written from here."""
        if self._merger is None:
            return None
        self.messages += self._merger.count
        self.written += 1
        return self._merger.tail()

    def finish(self) -> NewTask | None:
        """The merged task, gathered by `add` (per_task: nothing more)."""
        end = self.merged_end()
        if end is None or self._merger is None or self._merge_created_at is None:
            return None
        data = b"".join([*self._gathered, end]).decode()
        self._gathered = []
        return self._row(self._merger.rw.task_id, self._merge_created_at, data, self._merge_version)

    def _row(self, task_id: str, created_at: datetime, data: str, protocol_version: str | None) -> NewTask:
        return NewTask(
            id=task_id,
            created_at=created_at,
            updated_at=self.now,
            data=data,
            session_id=self.session_id,
            protocol_version=protocol_version,
            user_id=self.user_id,
        )


@dataclass(kw_only=True)
class ServerCopyCheck:
    """Decides, task by task, whether the server-side copy of the kept tasks (their ids replaced as
    text inside PostgreSQL, copy_tasks_before in sql/queries/events.sql) writes exactly what TaskCopier would:
    the task is terminal and the replacement makes exactly dialects.rewrite's change
    (dialects.replacing_ids_rewrites). Anything else (an unfinished task to close, an id written with
    escapes, a message pointing at another task, metadata naming another user, the id as a text)
    needs TaskCopier.

    With `boundary` (a boundary task guessed from the last turns), a kept task that carries that
    invocation too proves the guess wrong.
    """

    source_session_id: str
    session_id: str
    user_id: str
    boundary: str | None = None
    messages: int = 0
    written: int = 0
    mismatch: str | None = None

    def add(self, row: TaskRow) -> bool:
        """Check one kept task (oldest first); False from the first that needs TaskCopier on."""
        if self.mismatch is not None:
            return False
        dialect = dialect_of(row)
        try:
            data = dialects.decode(row.data)
        except dialects.TaskFormatError as exc:
            raise Unprocessable(f"task {row.id} cannot be copied: {exc}") from None
        if (
            self.boundary is not None
            and self._mentions_boundary(row)
            and self.boundary in dialects.invocation_ids(data)
        ):
            self.mismatch = f"task {row.id}, older than the guessed boundary task, carries the boundary too"
        elif not dialects.is_terminal(data, dialect):
            self.mismatch = f"task {row.id} is not finished"
        elif not dialects.replacing_ids_rewrites(
            row.data, data, task_id=row.id, context_id=self.source_session_id, user_id=self.user_id
        ):
            self.mismatch = f"task {row.id} holds ids the text replacement would not rewrite exactly"
        if self.mismatch is not None:
            return False
        self.messages += len(dialects.history(data))
        self.written += 1
        return True

    def _mentions_boundary(self, row: TaskRow) -> bool:
        """Whether the row's text may carry the boundary (the same plain-text pre-filter as the SQL
        searches: an id of characters JSON never escapes appears verbatim wherever it is)."""
        assert self.boundary is not None
        return not dialects.verbatim_in_json(self.boundary) or self.boundary in row.data
