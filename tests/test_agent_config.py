"""kagent's `agent` table read as kagent's controller writes it: the config JSON of both product lines (the shape
of kagent's translator outputs: go/core/internal/controller/translator/agent/testdata/outputs/), a BYO agent's
empty config, a deleted agent, and a config this reader cannot decode."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg

from service.kagent.store import Store
from service.kagent.store.agents import agent_row_id

# kagent 0.10.x's translator output for an agent with approvals (agent_with_require_approval.json's config.json).
LEGACY = {
    "model": {"type": "openai", "model": "gpt-4o", "base_url": ""},
    "description": "",
    "instruction": "You help users manage files.",
    "http_tools": [
        {
            "params": {"url": "http://toolserver.test:8084/mcp", "headers": {}},
            "tools": ["read_file", "write_file", "delete_file"],
            "require_approval": ["delete_file", "write_file"],
        }
    ],
    "stream": False,
    "execute_code": True,
}
# kagent main adds stdio_tools and agent_plugins, and keys this reader does not know must be ignored.
MAIN = {
    "model": {"type": "anthropic", "model": "claude-sonnet-4-5", "headers": {"x": "y"}},
    "description": "d",
    "instruction": "i",
    "sse_tools": [
        {"params": {"url": "http://sse.test/sse", "headers": {"A": "b"}}, "allowed_headers": ["Authorization"]}
    ],
    "stdio_tools": [{"command": "npx", "args": ["-y", "server"]}],
    "remote_agents": [{"name": "helper", "url": "http://kagent-controller:8083/api/a2a/kagent/helper"}],
    "agent_plugins": {"something": {"new": True}},
}


async def _agent(
    pool: asyncpg.Pool, ref: str, config: object, *, deleted: bool = False, type_: str = "Declarative"
) -> None:
    text = None if config is None else (config if isinstance(config, str) else json.dumps(config))
    await pool.execute(
        "INSERT INTO agent (id, created_at, updated_at, deleted_at, type, config) "
        "VALUES ($1, now(), now(), CASE WHEN $4 THEN now() END, $2, $3::json)",
        agent_row_id(ref), type_, text, deleted,
    )  # fmt: skip


async def test_both_lines_configs_are_read(pool: asyncpg.Pool) -> None:
    tag = uuid.uuid4().hex[:8]
    await _agent(pool, f"ns-{tag}/files-agent", LEGACY)
    await _agent(pool, f"ns-{tag}/main-agent", MAIN)
    store = Store("kagent_fork")
    async with pool.acquire() as conn:
        legacy = await store.agents.get(conn, f"ns-{tag}/files-agent")
        main = await store.agents.get(conn, f"ns-{tag}/main-agent")
    assert legacy is not None and legacy.config is not None
    assert legacy.id == f"ns_{tag}__NS__files_agent"
    model = legacy.config.model
    assert model is not None and (model.type, model.model) == ("openai", "gpt-4o")
    (server,) = legacy.config.http_tools or []
    assert server.params.url == "http://toolserver.test:8084/mcp"
    assert server.require_approval == ["delete_file", "write_file"]
    assert server.tools == ["read_file", "write_file", "delete_file"]
    assert legacy.config.execute_code is True
    assert main is not None and main.config is not None and main.config.model is not None
    assert main.config.model.model == "claude-sonnet-4-5"
    assert [s.params.url for s in main.config.sse_tools or []] == ["http://sse.test/sse"]
    assert (main.config.sse_tools or [])[0].allowed_headers == ["Authorization"]
    assert [s.command for s in main.config.stdio_tools or []] == ["npx"]
    assert [r.name for r in main.config.remote_agents or []] == ["helper"]


async def test_missing_deleted_byo_and_undecodable(pool: asyncpg.Pool) -> None:
    tag = uuid.uuid4().hex[:8]
    await _agent(pool, f"ns-{tag}/gone", LEGACY, deleted=True)
    await _agent(pool, f"ns-{tag}/byo", None, type_="BYO")
    await _agent(pool, f"ns-{tag}/odd", {"model": "not an object"})
    store = Store("kagent_fork")
    async with pool.acquire() as conn:
        assert await store.agents.get(conn, f"ns-{tag}/gone") is None
        assert await store.agents.get(conn, f"ns-{tag}/never") is None
        byo = await store.agents.get(conn, f"ns-{tag}/byo")
        odd = await store.agents.get(conn, f"ns-{tag}/odd")
    assert byo is not None and byo.type == "BYO" and byo.config is None and byo.config_error is None
    assert odd is not None and odd.config is None and odd.config_error is not None and "model" in odd.config_error


async def test_the_explorer_lists_kagents_live_agents(client: Any, pool: asyncpg.Pool) -> None:
    """GET /api/fork-explorer/agents: kagent's live agents with the model their config names, as the page offers
    them; a deleted agent and an id that spells no namespace/name are left out."""
    tag = uuid.uuid4().hex[:8]
    await _agent(pool, f"ns-{tag}/files-agent", LEGACY)
    await _agent(pool, f"ns-{tag}/byo", None, type_="BYO")
    await _agent(pool, f"ns-{tag}/gone", LEGACY, deleted=True)
    await pool.execute(
        "INSERT INTO agent (id, created_at, updated_at, type) VALUES ($1, now(), now(), 'BYO')", f"odd_{tag}"
    )
    r = await client.get("/api/fork-explorer/agents")
    assert r.status_code == 200, r.text
    mine = {a["agent_ref"]: a for a in r.json()["data"] if tag in a["agent_ref"]}
    assert mine == {
        f"ns-{tag}/files-agent": {"agent_ref": f"ns-{tag}/files-agent", "type": "Declarative", "model": "gpt-4o"},
        f"ns-{tag}/byo": {"agent_ref": f"ns-{tag}/byo", "type": "BYO", "model": None},
    }
