"""kagent 1.0's load-bearing assumption for kagent-fork (docs/kagent-1.0.md): an Actor's native conversation, cut
at a turn boundary by kagent-fork's own rule, is continued with exactly the kept turns in the model's context.

On kagent 1.0 each Actor keeps its one conversation in a private SQLite database (kagent-adk 1.0.0a17's
`LocalSessionService`, at the config's `session_db_url`, inside its durable directory). Here a three-turn chat is
made with kagent-adk 1.0.0a17's own parts in their own environment (.venv-kagent-adk-1.0), each turn a process of
its own that loads the database and exits (tests/support/runtime_agents/kagent_adk_1_0_turn.py, which says what it
wires and why `kagent-adk static` itself cannot start); the database is copied and cut before turn 3 by
`plan.turn_start` (the boundary of the 0.10.x fork, `boundary_event`), and the next turn, run on the cut copy, must
send the scripted model exactly turns 1-2 and the new question.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.operations import plan
from tests.support.runtimes import AGENTS, runtime_venv
from tests.support.scripted_model import RunningModel, call, running_model, say
from tests.support.tool_server import RunningTools, running_tools

RUNTIME = "kagent-adk-1.0"
APP = "kagent__NS__adk_agent"  # KAgentConfig.app_name of the agent kagent/adk-agent
KEYS = ("conversation", "conversation")  # LocalSessionService's fixed user and session ids
DB = "session.db"


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[RunningModel]:
    with running_model() as model:
        yield model


@pytest.fixture(scope="module")
def tool_server() -> Iterator[RunningTools]:
    with running_tools() as tools:
        yield tools


@dataclass(frozen=True)
class Actor:
    """A kagent 1.0 Actor's ADK runtime, one process per turn, on the durable directory it is given."""

    model: RunningModel
    tools: RunningTools
    context_id: str = "0199a3c2-7d1e-7000-8000-00000000c0de"  # the public A2A context (the AgentInstance's)
    caller: str = "alice@example.com"

    def turn(self, durable: Path, question: str, headers: dict[str, str]) -> dict[str, str]:
        venv = runtime_venv(RUNTIME)
        argv = [
            str(venv / "bin" / "python"), str(AGENTS / "kagent_adk_1_0_turn.py"),
            "--db", f"sqlite+aiosqlite:///{durable / DB}", "--question", question,
            "--model-url", self.model.url, "--tools-url", self.tools.url,
            "--context-id", self.context_id, "--caller", self.caller, "--headers", json.dumps(headers),
        ]  # fmt: skip
        env = {
            "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(durable),
            "OPENAI_API_KEY": "sk-scripted",  # the scripted model takes any key
            "OTEL_SDK_DISABLED": "true",
            "PYTHONUNBUFFERED": "1",
        }
        done = subprocess.run(argv, env=env, cwd=durable, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, f"the turn {question!r} failed:\n{done.stderr[-4000:]}"
        answer: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
        return answer


@pytest.fixture
def actor(scripted_model: RunningModel, tool_server: RunningTools) -> Actor:
    return Actor(scripted_model, tool_server)


def native_events(db: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, invocation id, event) of the conversation's events, in the order the runtime loads them
    (google-adk's DatabaseSessionService: by timestamp, then id)."""
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT id, invocation_id, event_data FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?"
            " ORDER BY timestamp, id",
            (APP, *KEYS),
        ).fetchall()
    return [(r[0], r[1], json.loads(r[2])) for r in rows]


def native_state(db: Path) -> dict[str, Any]:
    with closing(sqlite3.connect(db)) as conn:
        row = conn.execute(
            "SELECT state FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?", (APP, *KEYS)
        ).fetchone()
    state: dict[str, Any] = json.loads(row[0])
    return state


def cut_before(db: Path, invocation_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """kagent-fork's cut of a native database: every event from where the turn begins (plan.turn_start, the
    0.10.x fork's boundary) is deleted. Returns the kept and the deleted events."""
    events = native_events(db)
    start = plan.turn_start([invocation for _, invocation, _ in events], invocation_id)
    assert start is not None, f"no event of {invocation_id}"
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.executemany(
            "DELETE FROM events WHERE id = ? AND app_name = ? AND user_id = ? AND session_id = ?",
            [(event_id, APP, *KEYS) for event_id, _, _ in events[start:]],
        )
    return [e for _, _, e in events[:start]], [e for _, _, e in events[start:]]


def restore_state(db: Path, kept: list[dict[str, Any]], hidden: list[dict[str, Any]]) -> None:
    """What a cut needs besides deleting events: the session row's state is the sum of every event's
    state_delta (and the state it was created with), so each key a deleted event set takes the value the last
    kept event gave it, and is removed when no kept event set it."""
    state = native_state(db)
    for key in {k for e in hidden for k in ((e.get("actions") or {}).get("state_delta") or {})}:
        given = [d[key] for e in kept if key in (d := (e.get("actions") or {}).get("state_delta") or {})]
        if given:
            state[key] = given[-1]
        else:
            state.pop(key, None)
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(
            "UPDATE sessions SET state = ? WHERE app_name = ? AND user_id = ? AND id = ?",
            (json.dumps(state), APP, *KEYS),
        )


def said(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(author, text or tool call) of every event with content, for readable assertions."""
    out = []
    for e in events:
        for part in (e.get("content") or {}).get("parts") or []:
            if part.get("text"):
                out.append((e["author"], part["text"]))
            elif part.get("function_call"):
                out.append((e["author"], f"calls {part['function_call']['name']}"))
            elif part.get("function_response"):
                out.append((e["author"], f"result of {part['function_response']['name']}"))
    return out


def test_a_native_conversation_cut_before_turn_3_is_continued_with_exactly_turns_1_and_2(
    actor: Actor, tmp_path: Path
) -> None:
    model = actor.model.model
    q = ["N1: which namespace?", "N2: how many pods?", "N3: restart one", "N4: instead, scale it", "N5: and now?"]
    model.on(q[1], call("lookup", query="pods"), say("There are 3 pods."))
    source, at_turn_2, fork = tmp_path / "source", tmp_path / "at-turn-2", tmp_path / "fork"
    for d in (source, at_turn_2, fork):
        d.mkdir()
    invocations = []
    for n, question in enumerate(q[:3], 1):
        answer = actor.turn(source, question, {"authorization": f"Bearer token-of-turn-{n}"})
        assert answer["answer"] == ("There are 3 pods." if n == 2 else f"Answer to: {question}")
        invocations.append(answer["invocation_id"])
        if n == 2:  # the Actor's durable directory at the end of turn 2: what a checkpoint then would hold
            shutil.copy(source / DB, at_turn_2 / DB)
    before_turn_3 = model.requests_for(q[2])[0]["messages"][:-1]  # what the model knew when turn 3 began
    assert [m.get("content") for m in before_turn_3 if m["role"] == "user"] == [q[0], q[1]]

    # the cut: a copy of the source's database, every event from turn 3's first one deleted
    shutil.copy(source / DB, fork / DB)
    kept, hidden = cut_before(fork / DB, invocations[2])
    assert {e["invocation_id"] for e in hidden} == {invocations[2]}  # kagent-adk 1.0 writes no header_update
    assert [e for _, _, e in native_events(fork / DB)] == kept == [e for _, _, e in native_events(at_turn_2 / DB)]
    assert said(kept) == [
        ("user", q[0]), ("adk_agent", f"Answer to: {q[0]}"),
        ("user", q[1]), ("adk_agent", "calls lookup"), ("adk_agent", "result of lookup"),
        ("adk_agent", "There are 3 pods."),
    ]  # fmt: skip
    assert len(native_events(source / DB)) == len(kept) + len(hidden)  # the source is not touched

    # More than a cut: the session row's state still holds what turn 3 wrote (its request's headers, with the
    # Authorization of a turn the fork leaves out) until it is restored from the kept events.
    assert native_state(fork / DB)["headers"] == {"authorization": "Bearer token-of-turn-3"}
    restore_state(fork / DB, kept, hidden)
    assert native_state(fork / DB) == native_state(at_turn_2 / DB)
    assert native_state(fork / DB)["headers"] == {"authorization": "Bearer token-of-turn-2"}

    # the runtime, started on the cut copy, sends the model exactly turns 1-2 and the new question
    answer = actor.turn(fork, q[3], {"authorization": "Bearer token-of-the-fork"})
    assert answer["answer"] == f"Answer to: {q[3]}"
    sent = model.requests_for(q[3])
    assert len(sent) == 1
    assert sent[0]["messages"] == [*before_turn_3, {"role": "user", "content": q[3]}]
    assert q[2] not in json.dumps(sent[0]["messages"])
    assert said([e for _, _, e in native_events(fork / DB)])[6:] == [
        ("user", q[3]),
        ("adk_agent", f"Answer to: {q[3]}"),
    ]

    # and exactly as the database of the end of turn 2 (a checkpoint at that boundary) is continued
    actor.turn(at_turn_2, q[4], {"authorization": "Bearer token-of-the-checkpoint"})
    assert model.requests_for(q[4])[0]["messages"] == [*before_turn_3, {"role": "user", "content": q[4]}]
