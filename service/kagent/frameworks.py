"""Which framework an agent runs on, read from what its session holds in kagent's database.

kagent runs ADK agents (Python: snake_case events; Go: camelCase) and "bring your own" agents on its
runtimes for LangGraph, the OpenAI Agents SDK, CrewAI and the Claude Agent SDK, which keep their
conversation in different places (docs/frameworks.md)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Literal

from service.kagent import dialects
from service.kagent.store import Store
from service.kagent.store.base import Connection
from service.kagent.store.sessions import SessionRow

Framework = Literal["adk", "adk-go", "langgraph", "openai-agents", "crewai", "claude", "unknown"]

# kagent's default user: kagent-langgraph and kagent-openai 0.10.4 forward no user, so their rows (and
# kagent 0.10.x's checkpoint and crewai rows) are written under it whoever chats.
KAGENT_DEFAULT_USER = "admin@kagent.dev"

# The frameworks whose chat kagent's database holds in A2A tasks only (no events): their transcript,
# comparison and branch summaries are read from the tasks' history (docs/frameworks.md).
TASK_CHAT: tuple[Framework, ...] = ("langgraph", "crewai", "claude")


# The kinds framework_signals gives an event, in the order they decide.
_EVENT_KINDS: dict[str, Framework] = {"openai-agents": "openai-agents", "adk": "adk", "adk-go": "adk-go"}


async def runtime_users(store: Store, conn: Connection, session_id: str, owner: str) -> list[str]:
    """The users whose rows of the session are its owner's: the owner, and kagent's default user when the rows
    its agent's runtime wrote there are provably the owner's (store.sessions.runtime_rows_owned: a fork of the
    owner's, or the owner's row came first and no other user has one of that id). The one decision of whose
    rows a session's are, for reading and writing alike (docs/frameworks.md)."""
    if owner != KAGENT_DEFAULT_USER and await store.sessions.runtime_rows_owned(
        conn, session_id, owner, KAGENT_DEFAULT_USER
    ):
        return [owner, KAGENT_DEFAULT_USER]
    return [owner]


def _task(text: str | None) -> dialects.JSON | None:
    """A task's JSON as the service's one task reader reads it; None: no task, or not one it reads."""
    if text is None:
        return None
    try:
        return dialects.decode(text)
    except dialects.TaskFormatError:
        return None


def from_task(text: str | None) -> Framework | None:
    """What a task's metadata says: kagent-langgraph names its thread (`thread_id` on 0.10.x,
    `kagent_thread_id` on main), kagent-claude writes `kagent.claude.*` keys, kagent-crewai 0.10.x writes
    `app_name` and `session_id` and nothing else (kagent-langgraph 0.10.x writes them too, with its thread;
    kagent's other runtimes write `kagent_`-prefixed keys)."""
    task = _task(text)
    if task is None:
        return None
    metadata = task.get("metadata")
    keys = set(metadata) if isinstance(metadata, dict) else set()
    if keys & {"thread_id", "kagent_thread_id"}:
        return "langgraph"
    if any(key.startswith("kagent.claude.") for key in keys):
        return "claude"
    if keys == {"app_name", "session_id"}:
        return "crewai"
    return None


# What kagent-crewai 0.10.x's listener says, in a task's history, as a flow's method runs.
_FLOW_METHOD = re.compile(r"Method \S+ from flow \S+ (started|finished) execution\.")


def crewai_flow(text: str | None) -> bool:
    """Whether a task of kagent-crewai ran a CrewAI flow (its history tells each flow method's start and end),
    not a crew."""
    task = _task(text)
    if task is None:
        return False
    history = task.get("history")
    for message in history if isinstance(history, list) else []:
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str) and _FLOW_METHOD.fullmatch(part["text"]):
                return True
    return False


def decide(langgraph: bool, crewai: bool, event_kinds: list[str], first_task: str | None) -> Framework:
    """The framework the signals name, the state kept outside `event` first (it decides what a fork must
    copy), then the task's metadata, then the events' shape."""
    if langgraph:
        return "langgraph"
    if crewai:
        return "crewai"
    if (named := from_task(first_task)) is not None:
        return named
    for kind, framework in _EVENT_KINDS.items():
        if kind in event_kinds:
            return framework
    return "unknown"


async def detect(
    store: Store, conn: Connection, session_id: str, owner: str, users: Sequence[str] | None = None
) -> Framework:
    """The framework of the session `session_id` of `owner` (one query, and runtime_users' unless `users` gives
    its answer)."""
    if users is None:
        users = await runtime_users(store, conn, session_id, owner)
    return decide(*await store.sessions.framework_signals(conn, session_id, list(users)))


async def runtime_session(
    store: Store, conn: Connection, source: SessionRow, framework: Framework, users: Sequence[str] | None = None
) -> SessionRow | None:
    """The session row of the same id that the agent's runtime keeps under kagent's default user (or, when it
    made none, the owner's row as that user's), when the runtime wrote the conversation there and not under the
    session's owner (the 0.10.4 runtimes forward no user), and those rows are the owner's (runtime_users).
    None: the owner's rows hold the conversation. `users`: runtime_users' answer, when the caller has it."""
    if await written_elsewhere(store, conn, source, framework, users) is None:
        return None
    row = await store.sessions.get_session(conn, source.id, KAGENT_DEFAULT_USER)
    # kagent-langgraph 0.10.4 writes tasks under that user with no session row of his: the rows are his all
    # the same (a fork copies them under him, and writes no row the source lacks).
    return row or dataclasses.replace(source, user_id=KAGENT_DEFAULT_USER)


async def written_elsewhere(
    store: Store, conn: Connection, source: SessionRow, framework: Framework, users: Sequence[str] | None = None
) -> str | None:
    """Why this session's rows are read from kagent's default user's and not the owner's: its runtime wrote
    them there (kagent-openai 0.10.4: its events, tasks and a session row; kagent-langgraph, kagent-crewai,
    kagent-claude: their tasks), and they are the owner's (runtime_users). None: the owner's rows hold them."""
    owner = source.user_id
    if users is None:
        users = await runtime_users(store, conn, source.id, owner)
    if KAGENT_DEFAULT_USER not in users:
        return None
    if framework == "openai-agents" and not await store.sessions.has_events(conn, source.id, owner):
        return f"this session's agent (OpenAI Agents SDK) wrote its conversation under {KAGENT_DEFAULT_USER}"
    if (
        framework in ("langgraph", "crewai", "claude")
        and await store.tasks.count_tasks(conn, source.id, owner) == 0
        and await store.tasks.count_tasks(conn, source.id, KAGENT_DEFAULT_USER) > 0
    ):
        return f"this session's agent ({framework}) wrote its tasks under {KAGENT_DEFAULT_USER}"
    return None
