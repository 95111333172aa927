"""Fixture sessions of kagent's BYO runtimes (kagent-langgraph, kagent-openai, kagent-crewai 0.10.4), as JSON files
under tests/fixtures/frameworks/, and the loader that puts one into a test database.

A fixture is what a real runtime wrote while a user talked to it through kagent's A2A path (the controller
stand-in, tests/support/kagent_controller.py, storing into kagent's tables): every row of every kagent table
of the database it ran on (``tables``: table name -> rows as PostgreSQL's ``to_jsonb`` writes them), the
turns (question, A2A task id, the task's final state) and the messages the scripted model was sent for each
turn (``model_requests``). They are made by ``python -m tests.support.capture_frameworks`` (see there), never
by hand.

``load_fixture(conn, name)`` inserts the rows as they are (``json_populate_record`` on each table's row
type, so every column keeps its stored value and type). ``fresh_copy(fixture, user)`` gives the same
conversation under new ids (session, tasks, events, checkpoints' task ids) and another user, so that one
database can hold it many times: ids are replaced in every text column and inside the base64 JSON metadata
of ``lg_checkpoint`` (the checkpoint blobs name no session or task).
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"

# kagent's tables a runtime can write, in an order that respects the one foreign key (session_share_access).
KAGENT_TABLES = (
    "agent",
    "session",
    "event",
    "task",
    "lg_checkpoint",
    "lg_checkpoint_write",
    "crewai_agent_memory",
    "crewai_flow_state",
    "session_share",
    "session_share_access",
)
# The user kagent's runtimes write under when no user reaches them (KAgentCheckpointer, KAgentSessionFactory).
RUNTIME_DEFAULT_USER = "admin@kagent.dev"


def fixture_path(name: str) -> Path:
    return FIXTURES / f"{name}.json"


def read_fixture(name: str) -> dict[str, Any]:
    """A fixture by name: `langgraph_3_turns`, `openai_3_turns`, `crewai_3_turns`, `crewai_flow_3_turns`."""
    fixture: dict[str, Any] = json.loads(fixture_path(name).read_text())
    return fixture


async def dump_tables(conn: Any) -> dict[str, list[dict[str, Any]]]:
    """Every row of kagent's tables, in a stable order (by creation, then the primary key's text)."""
    tables: dict[str, list[dict[str, Any]]] = {}
    for table in KAGENT_TABLES:
        rows = await conn.fetch(f"SELECT to_jsonb(t)::text AS row FROM {table} t")
        decoded = [json.loads(r["row"]) for r in rows]
        decoded.sort(key=lambda r: (str(r.get("created_at") or ""), json.dumps(r, sort_keys=True)))
        tables[table] = decoded
    return tables


async def load_fixture(conn: Any, fixture: dict[str, Any] | str) -> dict[str, Any]:
    """Insert the fixture's rows (in one transaction); returns the fixture. Rows of `agent` already present
    are left as they are (an agent is shared by every session of it)."""
    if isinstance(fixture, str):
        fixture = read_fixture(fixture)
    async with conn.transaction():
        for table in KAGENT_TABLES:
            conflict = " ON CONFLICT (id) DO NOTHING" if table == "agent" else ""
            for row in fixture["tables"].get(table, []):
                await conn.execute(
                    f"INSERT INTO {table} SELECT * FROM json_populate_record(NULL::{table}, $1::json){conflict}",
                    json.dumps(row),
                )
    return fixture


def fresh_copy(fixture: dict[str, Any], user: str) -> dict[str, Any]:
    """The fixture's conversation under new session, task and event ids, the chatting user replaced by
    `user` (rows the runtime wrote under kagent's default user stay under it, as the runtime wrote them)."""
    tables = fixture["tables"]
    ids = {fixture["session_id"]: str(uuid.uuid4())}
    ids.update({t["id"]: str(uuid.uuid4()) for t in tables.get("task", [])})
    ids.update({e["id"]: str(uuid.uuid4()) for e in tables.get("event", [])})
    ids[fixture["user"]] = user

    def swap(text: str) -> str:
        for old, new in ids.items():
            text = text.replace(old, new)
        return text

    copy: dict[str, Any] = json.loads(swap(json.dumps(fixture)))
    for row in copy["tables"].get("lg_checkpoint", []):
        row["metadata"] = base64.b64encode(swap(base64.b64decode(row["metadata"]).decode()).encode()).decode()
    copy["tables"]["agent"] = fixture["tables"].get("agent", [])
    return copy
