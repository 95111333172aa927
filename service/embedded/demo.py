"""A small demo conversation for the embedded database: one session per kagent product line.

The rows have the shapes kagent stores (docs/kagent-schema.md): Python ADK events without nulls,
legacy A2A tasks (0.10.x) and A2A v1.0 tasks (main), one task per turn.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from service.embedded import scripts
from service.kagent.store.agents import agent_row_id
from service.kagent.store.base import Connection

DEMO_USER = "admin@kagent.dev"
DEMO_AGENT = "kagent__NS__k8s_agent"
DEMO_AGENT_REF = "kagent/k8s-agent"
# The demo's replay twin of its agent: `serve` writes its row from `kagent-fork replay-twin`'s manifests.
TWIN = "kagent/k8s-agent-replay"
SUITE_NAME = "Demo: the weather chats"  # a case at every user turn of the demo's chats (cli.serve makes it)
LEGACY_SESSION = "demo-legacy-session"
V1_SESSION = "demo-v1-session"

# The demo agents' rows in kagent's `agent` table, as kagent's controller writes an agent's config (its
# AgentConfig JSON; docs/kagent-schema.md, "Agents"). They answer from scripts (scripted_agent.py), but their
# configurations name real models, so that an experiment's grid shows what the scripted tokens would cost on
# them (genai-prices' table): the demo's agent on gpt-4o-mini, the second one on gpt-4o, the judge on gpt-4o-mini.
DEMO_MODELS = {
    "kagent/k8s-agent": {"type": "openai", "model": "gpt-4o-mini", "base_url": ""},
    "kagent/scripted-agent": {"type": "anthropic", "model": "claude-haiku-4-5"},
    "kagent/thorough-agent": {"type": "openai", "model": "gpt-4o", "base_url": ""},
    "kagent/demo-judge": {"type": "openai", "model": "gpt-4o-mini", "base_url": ""},
}

# The demo agents' tools on the demo's tool server (weather_tools.py): the demo's agent may also set an alert
# (the tool that acts), the other two only read.
DEMO_TOOLS = {
    "kagent/k8s-agent": ["get_weather", "get_forecast", "set_alert"],
    "kagent/scripted-agent": ["get_weather", "get_forecast"],
    "kagent/thorough-agent": ["get_weather", "get_forecast"],
}

# The demo conversations' world, an hour ago: what their recorded tool results say (today's, the tool server's,
# differs: a replay that runs its reads live drifts from the source).
RECORDED_WEATHER = {"paris": (14.0, "cloudy"), "berlin": (9.0, "raining")}
QUESTIONS = ["What's the weather in Paris?", "And in Berlin?", "Which city is warmer?"]


def _recorded(ask: scripts.Ask) -> scripts.Result:
    """The recorded world's answer to a call the source made (only get_weather: the script asks no other)."""
    city = str(ask.args["city"])
    temp, sky = RECORDED_WEATHER[city.lower()]
    return scripts.tool_result({"city": city, "temp_c": temp, "sky": sky})


def _source_steps() -> list[tuple[str, scripts.Step]]:
    """The demo conversation's turns, answered by the demo agent's own script in the recorded world: a branch
    answered the same results says the same words."""
    known: dict[str, float] = {}
    out = []
    for question in QUESTIONS:
        plan = scripts.script(question, known)
        step = scripts.finish(plan, [_recorded(a) for a in plan.asks])
        for call in step.calls:
            if (temp := scripts.temperature(call.result)) is not None:
                known[str(call.args["city"]).lower()] = temp
        out.append((question, step))
    return out


@dataclass(frozen=True)
class _Turn:
    invocation_id: str
    question: str
    tool: str | None
    args: dict[str, Any] | None
    result: dict[str, Any] | None
    answer: str


def _turns() -> list[_Turn]:
    out = []
    for question, step in _source_steps():
        call = step.calls[0] if step.calls else None  # the demo agent's script makes one call a turn at most
        tool, args, result = (call.tool, call.args, call.result) if call else (None, None, None)
        out.append(_Turn(f"e-{uuid.uuid4()}", question, tool, args, result, step.answer))
    return out


def _responses(parts: list[dict[str, Any]]) -> bool:
    return bool(parts) and all("function_response" in p for p in parts)


def usage(prompt: int, completion: int) -> dict[str, dict[str, int]]:
    """An event's `usage_metadata` as the Python runtime writes a model response's: its prompt and output tokens."""
    return {"usage_metadata": {"prompt_token_count": prompt, "candidates_token_count": completion,
                               "total_token_count": prompt + completion}}  # fmt: skip


def event_json(
    invocation_id: str, author: str, parts: list[dict[str, Any]], at: datetime, extra: dict[str, Any] | None = None
) -> tuple[str, str]:
    """An ADK event as the Python runtime writes it (no nulls): (its id, its JSON). `extra`: more keys
    (e.g. usage_metadata)."""
    event_id = str(uuid.uuid4())
    data = {
        # ADK's role: a function's response goes back to the model as the user's turn (role "user", the agent as
        # its author); what the model wrote is "model".
        "content": {"parts": parts, "role": "user" if author == "user" or _responses(parts) else "model"},
        "invocation_id": invocation_id,
        "author": author,
        "actions": {"state_delta": {}, "artifact_delta": {}, "requested_auth_configs": {},
                    "requested_tool_confirmations": {}},
        "id": event_id,
        "timestamp": at.timestamp(),
        **(extra or {}),
    }  # fmt: skip
    return event_id, msgspec.json.encode(data).decode()


def _events(turn: _Turn, at: datetime) -> list[tuple[str, datetime, str]]:
    """The turn's ADK events, the model's with their token usage (as kagent-adk writes it)."""
    prompt = len(turn.question) // 4 + 90
    rows: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None]] = [("user", [{"text": turn.question}], None)]
    if turn.tool is not None:
        call_id = f"adk-{uuid.uuid4()}"
        call = {"function_call": {"id": call_id, "args": turn.args, "name": turn.tool}}
        rows.append(("k8s_agent", [call], usage(prompt, 12)))
        response = {"function_response": {"id": call_id, "name": turn.tool, "response": turn.result}}
        rows.append(("k8s_agent", [response], None))
    rows.append(("k8s_agent", [{"text": turn.answer}], usage(prompt + 30, len(turn.answer) // 4)))
    out = []
    for i, (author, parts, extra) in enumerate(rows):
        when = at + timedelta(milliseconds=10 * (i + 1))
        event_id, data = event_json(turn.invocation_id, author, parts, when, extra)
        out.append((event_id, when, data))
    return out


def _legacy_task(turn: _Turn, session_id: str, at: datetime) -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    meta: dict[str, Any] = {"adk_app_name": "k8s_agent", "adk_user_id": DEMO_USER, "adk_session_id": session_id}

    def message(role: str, parts: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
        return {"kind": "message", "messageId": str(uuid.uuid4()), "role": role, "parts": parts,
                "taskId": task_id, "contextId": session_id, "metadata": extra}  # fmt: skip

    history = [message("user", [{"kind": "text", "text": turn.question}], {"adk_invocation_id": turn.invocation_id})]
    agent_meta = {"adk_invocation_id": turn.invocation_id, "adk_author": "k8s_agent"}
    if turn.tool is not None:
        history.append(
            message(
                "agent",
                [
                    {
                        "kind": "data",
                        "data": {"name": turn.tool, "args": turn.args},
                        "metadata": {"adk_type": "function_call"},
                    }
                ],
                agent_meta,
            )
        )
        history.append(
            message(
                "agent",
                [
                    {
                        "kind": "data",
                        "data": {"name": turn.tool, "response": turn.result},
                        "metadata": {"adk_type": "function_response"},
                    }
                ],
                agent_meta,
            )
        )
    history.append(message("agent", [{"kind": "text", "text": turn.answer}], agent_meta))  # fmt: skip
    return {"kind": "task", "id": task_id, "contextId": session_id,
            "status": {"state": "completed", "timestamp": at.isoformat().replace("+00:00", "Z")},
            "history": history, "metadata": meta}  # fmt: skip


def _v1_task(turn: _Turn, session_id: str, at: datetime) -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    user = {
        "messageId": str(uuid.uuid4()),
        "contextId": session_id,
        "taskId": task_id,
        "role": "ROLE_USER",
        "parts": [{"text": turn.question}],
        "metadata": {"adk_invocation_id": turn.invocation_id},
    }
    artifacts = []
    if turn.tool is not None:
        artifacts.append(
            {
                "artifactId": str(uuid.uuid4()),
                "parts": [
                    {"data": {"name": turn.tool, "args": turn.args}, "metadata": {"adk_type": "function_call"}},
                    {
                        "data": {"name": turn.tool, "response": turn.result},
                        "metadata": {"adk_type": "function_response"},
                    },
                ],
            }
        )
    artifacts.append({"artifactId": str(uuid.uuid4()), "parts": [{"text": turn.answer}]})
    return {"id": task_id, "contextId": session_id,
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": at.isoformat().replace("+00:00", "Z")},
            "artifacts": artifacts, "history": [user],
            "metadata": {"adk_app_name": "k8s_agent", "adk_user_id": DEMO_USER,
                         "adk_session_id": session_id}}  # fmt: skip


async def insert_demo_agents(conn: Connection) -> None:
    """The demo agents' `agent` rows (if absent: a row kagent's controller or a person changed is kept)."""
    for ref, model in DEMO_MODELS.items():
        config = {"model": model, "description": f"the demo's {ref}", "instruction": "Answer from the script.",
                  "http_tools": None, "sse_tools": None, "remote_agents": None, "stream": False}  # fmt: skip
        await conn.execute(
            "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), 'Declarative', "
            "$2::json) ON CONFLICT (id) DO NOTHING",
            agent_row_id(ref), msgspec.json.encode(config).decode(),
        )  # fmt: skip


def tool_servers(tools_url: str, tools: list[str]) -> list[dict[str, Any]]:
    """An agent's `http_tools` as kagent's controller writes them for a RemoteMCPServer (streamable HTTP) the Agent
    names with its `toolNames`."""
    return [{"params": {"url": tools_url, "headers": {}}, "tools": tools, "allowed_headers": [],
             "require_approval": []}]  # fmt: skip


async def point_tools(conn: Connection, tools_url: str) -> None:
    """Point the demo agents' rows at the demo's tool server, whose port is new at every start (their other keys
    are kept)."""
    for ref, tools in DEMO_TOOLS.items():
        await conn.execute(
            "UPDATE agent SET config = (config::jsonb || jsonb_build_object('http_tools', $2::jsonb))::json, "
            "updated_at = now() WHERE id = $1",
            agent_row_id(ref), msgspec.json.encode(tool_servers(tools_url, tools)).decode(),
        )  # fmt: skip


async def saved_configs(conn: Connection, refs: list[str]) -> dict[str, str | None]:
    """The agents' configurations as they are now (None: no row), to put back with restore_configs."""
    rows = await conn.fetch(
        "SELECT id, config::text AS config FROM agent WHERE id = ANY($1::text[])", [agent_row_id(r) for r in refs]
    )
    found = {r["id"]: r["config"] for r in rows}
    return {ref: found.get(agent_row_id(ref)) for ref in refs}


async def restore_configs(conn: Connection, saved: dict[str, str | None]) -> None:
    """Put the agents' configurations back as saved_configs found them (a row that was absent is left)."""
    for ref, config in saved.items():
        if config is not None:
            await conn.execute("UPDATE agent SET config = $2::json WHERE id = $1", agent_row_id(ref), config)


async def write_agent(conn: Connection, ref: str, config: dict[str, Any]) -> None:
    """Write an agent's row as kagent's controller does when its Agent is applied (the demo's twin, at each start:
    its servers' addresses change with the ports)."""
    await conn.execute(
        "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), 'Declarative', "
        "$2::json) ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config, updated_at = now()",
        agent_row_id(ref), msgspec.json.encode(config).decode(),
    )  # fmt: skip


async def insert_demo(conn: Connection) -> list[tuple[str, list[str]]]:
    """Insert the two demo sessions and the demo agents' rows (if absent); return (session id, invocation ids)
    of each session, inserted now or before (so that every start logs them)."""
    await insert_demo_agents(conn)
    start = datetime.now(UTC) - timedelta(hours=1)
    made = []
    for offset, (session_id, name, protocol, build) in enumerate(
        [
            (LEGACY_SESSION, "Weather (kagent 0.10.x)", None, _legacy_task),
            (V1_SESSION, "Weather (kagent main)", "1.0", _v1_task),
        ]
    ):
        turns = _turns()
        at = start + timedelta(minutes=10 * offset)
        exists = await conn.fetchval(
            "SELECT count(*) FROM session WHERE id = $1 AND user_id = $2", session_id, DEMO_USER
        )
        if exists:
            # Already there (an earlier start): its turns as they are now, for the start-up log.
            rows = await conn.fetch(
                "SELECT data FROM event WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL "
                "ORDER BY created_at",
                session_id, DEMO_USER,
            )  # fmt: skip
            ids = [msgspec.json.decode(r["data"]).get("invocation_id") for r in rows]
            made.append((session_id, [i for i in dict.fromkeys(ids) if isinstance(i, str)]))
            continue
        await conn.execute(
            "INSERT INTO session (id, user_id, name, agent_id, source, created_at, updated_at) "
            "VALUES ($1, $2, $3, $4, 'user', $5, $5)",
            session_id, DEMO_USER, name, DEMO_AGENT, at,
        )  # fmt: skip
        for i, turn in enumerate(turns):
            turn_at = at + timedelta(minutes=i)
            task = build(turn, session_id, turn_at)
            await conn.execute(
                "INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id) "
                "VALUES ($1, $2, $2, $3, $4, $5, $6)",
                task["id"], turn_at, msgspec.json.encode(task).decode(), session_id, protocol, DEMO_USER,
            )  # fmt: skip
            await conn.executemany(
                "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data) "
                "VALUES ($1, $2, $3, $4, $4, $5)",
                [(eid, DEMO_USER, session_id, when, data) for eid, when, data in _events(turn, turn_at)],
            )
        made.append((session_id, [t.invocation_id for t in turns]))
    return made
