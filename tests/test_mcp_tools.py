"""The MCP tools at /mcp, called with the MCP client of the same SDK against a running service: the
tool list, each tool once, identity from the headers, and refusals as tool errors with the HTTP message."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import CallToolResult

from service.doors import mcp_tools
from tests.helpers import ended_experiment, new_user, seed, table_fingerprint
from tests.support import kagent_reads

TOOLS = {
    "list_turns", "show_transcript", "fork_session", "rewind_session", "undo_rewind", "compare_sessions",
    "start_whatif", "whatif_status", "cancel_whatif", "list_whatifs", "list_rewinds", "fork_tree", "list_sessions",
    "cancel_experiment", "discard_branches", "undo_discard",
}  # fmt: skip


@asynccontextmanager
async def mcp_session(live_url: str, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{live_url}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.content[0].text


def ok(result: CallToolResult) -> Any:
    assert not result.isError, text_of(result)
    return json.loads(text_of(result))


async def test_every_tool_once_as_the_caller_the_headers_name(live_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=3, tool_calls=True)
    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        listed = await mcp.list_tools()
        assert {t.name for t in listed.tools} >= TOOLS
        schema = next(t for t in listed.tools if t.name == "fork_session").inputSchema
        assert schema["required"] == ["session_id"] and "rewind_before_invocation_id" in schema["properties"]
        assert all(t.description for t in listed.tools)

        turns = ok(await mcp.call_tool("list_turns", {"session_id": conv.session_id}))
        assert [t["invocation_id"] for t in turns["turns"]] == conv.invocation_ids and turns["last_page"]

        markdown = await mcp.call_tool("show_transcript", {"session_id": conv.session_id})
        assert not markdown.isError and text_of(markdown).startswith(f"# {conv.name}")
        before = ok(
            await mcp.call_tool(
                "show_transcript", {"session_id": conv.session_id, "before": conv.invocation_ids[2], "format": "json"}
            )
        )
        assert [t["invocation_id"] for t in before["turns"]] == conv.invocation_ids[:2]

        fork = ok(
            await mcp.call_tool(
                "fork_session", {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[2]}
            )
        )
        assert fork["user_id"] == conv.user_id and fork["fork"]["parent_session_id"] == conv.session_id
        assert fork["fork"]["summary"]["turns"] == 1
        compared = ok(
            await mcp.call_tool("compare_sessions", {"session_id": conv.session_id, "other_session_id": fork["id"]})
        )
        assert compared["common_turns"] == 2 and compared["left"]["turns_after"] == 1

        rewound = ok(
            await mcp.call_tool(
                "rewind_session", {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[1]}
            )
        )
        assert rewound["rewind"]["events_removed"] > 0
        undone = ok(
            await mcp.call_tool("undo_rewind", {"session_id": conv.session_id, "rewind_id": rewound["rewind"]["id"]})
        )
        assert undone["rewind"]["undone_at"]

    # the same calls over HTTP give the same data (the tools are the operations, not a copy of them)
    async with httpx.AsyncClient(base_url=live_url) as http:
        listing = await http.get(f"/api/sessions/{conv.session_id}/invocations", headers={"X-User-Id": conv.user_id})
    assert listing.json()["data"] == turns["turns"]


async def test_refusals_are_tool_errors_with_the_http_message(live_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    before = await table_fingerprint(pool)
    async with mcp_session(live_url, {"X-User-Id": new_user()}) as stranger:
        hidden = await stranger.call_tool("fork_session", {"session_id": conv.session_id})
        assert hidden.isError and text_of(hidden) == "Session not found"
    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        missing = await mcp.call_tool(
            "fork_session",
            {"session_id": conv.session_id, "rewind_before_invocation_id": "e-typo", "if_boundary_missing": "error"},
        )
        assert missing.isError and text_of(missing) == f"invocation e-typo not found in session {conv.session_id}"
        http_missing = await _http_fork(
            live_url,
            conv.session_id,
            conv.user_id,
            {"rewind_before_invocation_id": "e-typo", "if_boundary_missing": "error"},
        )
        assert http_missing == text_of(missing)
        too_long = await mcp.call_tool("fork_session", {"session_id": conv.session_id, "name": "x" * 300})
        assert too_long.isError and text_of(too_long).startswith("invalid arguments:")
        bad_id = await mcp.call_tool("list_turns", {"session_id": "x" * 300})
        assert bad_id.isError and "1 to 256 characters" in text_of(bad_id)
        no_turn = await mcp.call_tool(
            "rewind_session", {"session_id": conv.session_id, "rewind_before_invocation_id": "e-nope"}
        )
        assert no_turn.isError and "e-nope" in text_of(no_turn)
    assert await table_fingerprint(pool) == before


async def _http_fork(live_url: str, session_id: str, user: str, body: dict[str, Any]) -> str:
    async with httpx.AsyncClient(base_url=live_url) as http:
        r = await http.post(f"/api/sessions/{session_id}/fork", json=body, headers={"X-User-Id": user})
    error: str = r.json()["error"]
    return error


async def test_every_argument_is_described(live_url: str) -> None:
    async with mcp_session(live_url, {"X-User-Id": new_user()}) as mcp:
        listed = await mcp.list_tools()
    undescribed = [
        f"{t.name}.{name}" for t in listed.tools for name, arg in t.inputSchema["properties"].items()
        if not arg.get("description")
    ]  # fmt: skip
    assert undescribed == []


async def test_a_wrong_argument_is_answered_in_words(live_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        wrong_type = await mcp.call_tool("list_turns", {"session_id": conv.session_id, "limit": "ten"})
        missing = await mcp.call_tool("rewind_session", {"session_id": conv.session_id})
        wrong_choice = await mcp.call_tool("show_transcript", {"session_id": conv.session_id, "format": "html"})
    assert wrong_type.isError and text_of(wrong_type).startswith("invalid arguments: limit must be a valid integer")
    # A turn is named by its invocation or by its task: neither is the HTTP call's own 400, word for word.
    assert text_of(missing) == "rewind_before_invocation_id or rewind_before_task_id is required"
    assert text_of(wrong_choice).startswith("invalid arguments: format must be 'markdown' or 'json'")
    for result in (wrong_type, missing, wrong_choice):
        text = text_of(result)
        assert "pydantic" not in text and "http" not in text and "validation error" not in text, text


async def test_the_rewinds_the_tree_and_the_sessions_of_the_caller(live_url: str, pool: asyncpg.Pool) -> None:
    """Issue 25, 7: what an agent needs to find its way back (a lost rewind id, the forks, its sessions)."""
    conv = await seed(pool, dialect="legacy", turns=3, tool_calls=True)
    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        fork = ok(
            await mcp.call_tool(
                "fork_session", {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[1]}
            )
        )
        rewound = ok(
            await mcp.call_tool(
                "rewind_session", {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[2]}
            )
        )
        rewinds = ok(await mcp.call_tool("list_rewinds", {"session_id": conv.session_id}))
        assert [(r["id"], r["undoable"]) for r in rewinds] == [(rewound["rewind"]["id"], True)]
        tree = ok(await mcp.call_tool("fork_tree", {"session_id": fork["id"]}))
        assert tree["session_id"] == conv.session_id and [n["session_id"] for n in tree["forks"]] == [fork["id"]]
        assert tree["forks"][0]["fork_turn"] == 2 and tree["turns"] == 2  # the rewind hid turn 3
        sessions = ok(await mcp.call_tool("list_sessions", {}))
        assert {s["id"] for s in sessions} == {conv.session_id, fork["id"]}
        assert all(s["user_id"] == conv.user_id for s in sessions)
        unknown = await mcp.call_tool("cancel_whatif", {"job_id": "no-such-job"})
        assert unknown.isError and text_of(unknown) == "what-if job no-such-job not found"


async def test_unknown_arguments_are_refused(live_url: str, pool: asyncpg.Pool) -> None:
    """Issue 32: the same rules as the HTTP bodies: an argument a tool does not take is refused, not ignored."""
    conv = await seed(pool, dialect="v1", turns=2)
    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        unknown = await mcp.call_tool("list_turns", {"session_id": conv.session_id, "surprise": 1})
    assert unknown.isError and text_of(unknown) == "invalid arguments: unknown argument 'surprise'"


async def test_an_unexpected_failure_tells_no_internals() -> None:
    """A tool that fails unexpectedly says "internal error", as the HTTP door does, never the exception's text
    (a database DETAIL, a URL parser's message): the service's own MCP server, with one more tool that fails."""
    server = mcp_tools.mcp_server(lambda: None)  # type: ignore[arg-type,return-value]

    @server.tool()
    async def boom() -> str:
        raise ValueError("DETAIL: Key (id)=(secret) already exists at http://kagent-controller:8083/api/a2a")

    with pytest.raises(ToolError) as refused:
        await server.call_tool("boom", {})
    assert str(refused.value) == "internal error"


@pytest.mark.parametrize(
    ("body", "status", "code", "says"),
    [
        (b"[" * 200_000 + b"]" * 200_000, 400, -32700, "nested too deeply"),
        (b'{"jsonrpc": "2.0", "method": "tools/list", "id": 1, "params": {"x": "\xff"}}', 400, -32700,
         "not valid UTF-8"),
        (b"{not json", 400, -32700, "parse error"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "pad": "' + b"x" * (2 * 1024 * 1024) + b'"}', 413, -32600,
         "MAX_BODY_BYTES"),
    ],
)  # fmt: skip
async def test_bad_bodies_at_mcp_are_json_rpc_errors_with_a_4xx(
    live_url: str, body: bytes, status: int, code: int, says: str
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(
            f"{live_url}/mcp/",
            content=body,
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
        )
    assert r.status_code == status, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == code and says in error["message"], error


async def test_every_tool_says_truthfully_what_it_does_and_the_server_names_itself(live_url: str) -> None:
    """Issue 36: every tool (the views' too) carries MCP's annotations; the reads are read-only, a fork only
    adds, a rewind is destructive, a replay or its cancel reaches agents that run tools for real; serverInfo
    is kagent-fork's."""
    from service import __version__

    headers = {"X-User-Id": new_user()}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{live_url}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        listed = {t.name: t for t in (await session.list_tools()).tools}
    assert (init.serverInfo.name, init.serverInfo.version) == ("kagent-fork", __version__)
    assert {"cancel_experiment", "start_experiment", "experiment_status"} <= set(listed)
    for name, tool in listed.items():
        a = tool.annotations
        flags = (a.readOnlyHint, a.destructiveHint, a.idempotentHint, a.openWorldHint) if a else (None,)
        assert None not in flags, name
    reads = [n for n, t in listed.items() if t.annotations and t.annotations.readOnlyHint]
    assert {"list_turns", "show_transcript", "compare_sessions", "experiment_status"} <= set(reads)
    assert not {"fork_session", "rewind_session", "start_whatif", "cancel_experiment"} & set(reads)
    for name in ("start_whatif", "start_experiment", "cancel_whatif", "cancel_experiment"):
        hint = listed[name].annotations
        assert hint is not None and hint.openWorldHint and hint.destructiveHint, name
    judging = listed["judge_experiment"].annotations  # asks a kagent agent's model: open world, changes no session
    assert judging is not None and judging.openWorldHint and not judging.destructiveHint and not judging.readOnlyHint
    assert listed["rewind_session"].annotations.destructiveHint  # type: ignore[union-attr]
    discards, undoes = listed["discard_branches"].annotations, listed["undo_discard"].annotations
    assert discards is not None and discards.destructiveHint and discards.idempotentHint and not discards.openWorldHint
    assert undoes is not None and not undoes.destructiveHint and undoes.idempotentHint and not undoes.readOnlyHint
    assert not listed["fork_session"].annotations.destructiveHint  # type: ignore[union-attr]
    props = listed["start_whatif"].inputSchema["properties"]
    assert {"turns", "message_text", "tools", "reads", "dry_run"} <= set(props)
    assert {"tools", "reads", "dry_run"} <= set(listed["start_experiment"].inputSchema["properties"])


async def test_an_experiment_is_cancelled_by_its_tool(live_url: str, pool: asyncpg.Pool) -> None:
    """cancel_experiment answers as POST /api/experiments/{id}/cancel does: an unknown one is not found."""
    async with mcp_session(live_url, {"X-User-Id": new_user()}) as mcp:
        result = await mcp.call_tool("cancel_experiment", {"experiment_id": "no-such-experiment"})
    assert result.isError and text_of(result) == "experiment no-such-experiment not found"


async def test_an_experiments_branches_are_discarded_and_brought_back_by_their_tools(
    live_url: str, pool: asyncpg.Pool
) -> None:
    """discard_branches and undo_discard act as POST /api/experiments/{id}/discard[/undo] do (issue 36)."""
    conv = await seed(pool, dialect="v1", turns=2)
    forks = [await seed(pool, dialect="v1", turns=1, user_id=conv.user_id) for _ in range(2)]
    experiment_id, jobs = await ended_experiment(pool, conv, forks)

    async def visible() -> list[bool]:
        async with pool.acquire() as conn:
            return [await kagent_reads.get_session(conn, f.session_id, conv.user_id) is not None for f in forks]

    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        unknown = await mcp.call_tool("discard_branches", {"experiment_id": experiment_id, "keep": "no-such"})
        assert unknown.isError and text_of(unknown).startswith(f"experiment {experiment_id} has no branch no-such")
        assert await visible() == [True, True]
        grid = ok(await mcp.call_tool("discard_branches", {"experiment_id": experiment_id, "keep": jobs[1]}))
        assert grid["discard"]["discarded_session_ids"] == [forks[0].session_id]
        assert [(b["discarded"], b["kept"]) for b in grid["branches"]] == [(True, False), (False, True)]
        assert await visible() == [False, True]
        again = ok(await mcp.call_tool("discard_branches", {"experiment_id": experiment_id, "keep": jobs[1]}))
        assert again["discard"] == grid["discard"]
        back = ok(await mcp.call_tool("undo_discard", {"experiment_id": experiment_id}))
        assert back["discard"]["restored_session_ids"] == [forks[0].session_id]
        assert await visible() == [True, True]
    async with mcp_session(live_url, {"X-User-Id": new_user()}) as mcp:
        foreign = await mcp.call_tool("undo_discard", {"experiment_id": experiment_id})
    assert foreign.isError and text_of(foreign) == f"experiment {experiment_id} not found"


# Each: a tool's arguments, and the HTTP call and body that carry the same request (issue 45, 5a).
SAME_AS_HTTP = [
    ("start_whatif", {"turns": True}, "whatif", {"turns": True}),
    ("start_whatif", {"judge_criteria": "brevity"}, "whatif", {"judge": {"criteria": "brevity"}}),
    ("start_whatif", {"judge_agent": "kagent/judge", "judge_criteria": ""}, "whatif",
     {"judge": {"agent": "kagent/judge", "criteria": ""}}),
    ("start_whatif", {"dry_run": 1}, "whatif", {"dry_run": 1}),
    ("start_whatif", {"max_context_tokens": True}, "whatif", {"max_context_tokens": True}),
    ("start_experiment", {"turns": True}, "experiments", {"turns": True}),
    ("start_experiment", {"repeats": True}, "experiments", {"repeats": True}),
    ("start_experiment", {"judge_criteria": "brevity"}, "experiments", {"judge": {"criteria": "brevity"}}),
    ("start_experiment", {"dry_run": "yes"}, "experiments", {"dry_run": "yes"}),
    ("fork_session", {"dry_run": "true"}, "fork", {"dry_run": "true"}),
    ("rewind_session", {"force": 1}, "rewind", {"force": 1}),
]  # fmt: skip


@pytest.mark.parametrize(("tool", "arguments", "call", "body"), SAME_AS_HTTP, ids=[str(c[1]) for c in SAME_AS_HTTP])
async def test_a_tool_refuses_what_the_http_body_refuses(
    live_url: str, pool: asyncpg.Pool, tool: str, arguments: dict[str, Any], call: str, body: dict[str, Any]
) -> None:
    """Issue 45, 5a: the tools' arguments meet the HTTP bodies' checks, not a looser copy: a bool is not a
    number, "yes" is not a bool, and judge criteria without a judge are refused, not ignored."""
    conv = await seed(pool, dialect="v1", turns=2)
    turn = {"rewind_before_invocation_id": conv.invocation_ids[1]} if call != "fork" else {}
    before = await table_fingerprint(pool)
    async with httpx.AsyncClient(base_url=live_url, headers={"X-User-Id": conv.user_id}) as http:
        r = await http.post(f"/api/sessions/{conv.session_id}/{call}", json={**turn, **body})
    assert r.status_code == 400, r.text
    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        result = await mcp.call_tool(tool, {"session_id": conv.session_id, **turn, **arguments})
    assert result.isError and text_of(result).startswith("invalid arguments:"), text_of(result)
    assert await table_fingerprint(pool) == before


async def test_the_other_tools_take_no_bool_for_a_number(live_url: str, pool: asyncpg.Pool) -> None:
    """As `?limit=true` is a 400: a tool's number is a number (issue 45, 5a)."""
    conv = await seed(pool, dialect="v1", turns=2)
    async with httpx.AsyncClient(base_url=live_url, headers={"X-User-Id": conv.user_id}) as http:
        r = await http.get(f"/api/sessions/{conv.session_id}/invocations", params={"limit": "true"})
    assert r.status_code == 400
    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        listed = await mcp.call_tool("list_turns", {"session_id": conv.session_id, "limit": True})
        sessions = await mcp.call_tool("list_sessions", {"limit": True})
    assert listed.isError and text_of(listed).startswith("invalid arguments: limit"), text_of(listed)
    assert sessions.isError and text_of(sessions).startswith("invalid arguments: limit"), text_of(sessions)


async def test_the_apps_experiment_form_refuses_what_the_http_body_refuses(live_url: str, pool: asyncpg.Pool) -> None:
    """The experiment form of kagent's chat (app_start_experiment) is a door too (issue 45, 5a)."""
    conv = await seed(pool, dialect="v1", turns=2)
    before = await table_fingerprint(pool)
    async with mcp_session(live_url, {"X-User-Id": conv.user_id}) as mcp:
        token = ok(await mcp.call_tool("show_branches", {"session_id": conv.session_id}))["app_token"]
        start = {"app_token": token, "session_id": conv.session_id, "agents": ["kagent/k8s-agent"],
                 "rewind_before_invocation_id": conv.invocation_ids[1]}  # fmt: skip
        refused = [
            await mcp.call_tool("app_start_experiment", {**start, **wrong})
            for wrong in ({"turns": True}, {"message_text": ""}, {"turns": "2"})
        ]
    for result in refused:
        assert result.isError and text_of(result).startswith("invalid arguments:"), text_of(result)
    assert await table_fingerprint(pool) == before
