"""The branch views as MCP Apps, in a test stand-in for kagent's chat host (tests/support/mcp_host: the host
library and versions kagent's UI pins, built with npm) in Debian's Chromium. The agent's call carries the
user's headers; the app's resource and its calls go through a bridge that calls the live service as kagent's
controller does: with the RemoteMCPServer's own headers only (none here), never the user's.
`UPDATE_SCREENSHOTS=1` also writes docs/mcp-apps-*.png."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import http.server
import json
import os
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Browser, ConsoleMessage, Frame, FrameLocator, Page, async_playwright, expect

from service.app import create_app
from service.config import ConfigError, Settings, from_env
from service.doors import mcp_apps
from service.errors import NotConfigured, Unauthorized
from service.identity import Caller
from service.services import Services
from tests.helpers import new_user, seed, table_fingerprint
from tests.support.a2a_agent import SLOW, V1, Seen, running_agents
from tests.support.live_server import live_server
from tests.test_explorer_page import HOSTILE, chromium
from tests.test_mcp_tools import mcp_session, ok

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "tests" / "support" / "mcp_host"
SHOTS = os.environ.get("UPDATE_SCREENSHOTS") == "1"


def built_host() -> Path:
    """The host page, built from its locked packages (npm ci when they are missing) into dist/, both
    gitignored; rebuilt when its source is newer."""
    if not (HOST / "node_modules" / "@mcp-ui" / "client").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HOST, check=True)
    bundle = HOST / "dist" / "host.js"
    sources = max((HOST / name).stat().st_mtime for name in ("host.jsx", "package.json", "package-lock.json"))
    if not bundle.exists() or bundle.stat().st_mtime < sources:
        subprocess.run(["npm", "run", "build"], cwd=HOST, check=True)
    return HOST


@pytest.fixture(scope="module")
def host_url() -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(built_host()))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(settings: Settings, database_url: str, pool: asyncpg.Pool) -> Iterator[tuple[str, Seen]]:
    with running_agents(database_url) as (a2a_url, seen):
        config = dataclasses.replace(settings, kagent_a2a_url=a2a_url, whatif_heartbeat_seconds=0.5)
        with live_server(create_app(config, database_url)) as url:
            yield url, seen


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


class Chat:
    """One chat page of the stand-in host, wired to the live service as kagent's controller is."""

    def __init__(self, page: Page, service: str) -> None:
        self.page, self.service = page, service
        self.problems: list[str] = []
        self.app_calls: list[str] = []
        self.bridge_down = False  # kagent's controller failing to reach the server, as it answers then

    async def read_resource(self, uri: str) -> Any:
        async with mcp_session(self.service, {}) as mcp:
            result = (await mcp.read_resource(uri)).model_dump(by_alias=True, mode="json", exclude_none=True)
        assert all(c["mimeType"] == mcp_apps.MIME for c in result["contents"])  # as kagent's controller checks
        return result

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        self.app_calls.append(name)
        if self.bridge_down:
            raise RuntimeError("Failed to connect to MCP server")
        async with mcp_session(self.service, {}) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            visibility = ((tools[name].meta or {}).get("ui") or {}).get("visibility") or ["model", "app"]
            if "app" not in visibility:  # kagent's controller refuses these
                raise RuntimeError(f'MCP tool "{name}" is not callable by apps')
            result = await mcp.call_tool(name, arguments)
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def agent_calls(self, user: str, tool: str, arguments: dict[str, Any], theme: str = "light") -> Any:
        """The agent's own call (the user's headers forwarded), then the app in the chat, as kagent shows it."""
        async with mcp_session(self.service, {"X-User-Id": user}) as mcp:
            result = await mcp.call_tool(tool, arguments)
            meta = next(t.meta for t in (await mcp.list_tools()).tools if t.name == tool)
        assert not result.isError, result
        config = {
            "toolName": tool, "resourceUri": (meta or {})["ui"]["resourceUri"], "toolInput": arguments,
            "toolResult": result.model_dump(by_alias=True, mode="json", exclude_none=True), "theme": theme,
        }  # fmt: skip
        await self.page.evaluate("config => window.renderApp(config)", config)
        return result

    def app(self, n: int = 0) -> FrameLocator:
        return self.page.frame_locator(".message.app iframe").nth(n)

    def frame(self, n: int = 0) -> Frame:
        frames = [f for f in self.page.frames if f.parent_frame is self.page.main_frame]
        return frames[n]

    async def messages(self) -> list[str]:
        return list(await self.page.evaluate("window.hostLog.messages"))

    async def clean(self) -> None:
        assert self.problems == [], self.problems
        assert await self.page.evaluate("window.hostLog.errors") == []


@pytest.fixture
async def chat(browser: Browser, served: tuple[str, Seen], host_url: str) -> AsyncIterator[Chat]:
    context = await browser.new_context(viewport={"width": 820, "height": 900})
    page = await context.new_page()
    chat = Chat(page, served[0])

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            chat.problems.append(message.text)

    page.on("console", console)
    page.on("pageerror", lambda error: chat.problems.append(str(error)))
    await page.expose_function("hostReadResource", chat.read_resource)
    await page.expose_function("hostCallTool", chat.call_tool)
    await page.goto(f"{host_url}/index.html")
    try:
        yield chat
    finally:
        await context.close()


async def shot(chat: Chat, name: str) -> None:
    if SHOTS:
        await chat.page.locator(".message.app").last.screenshot(path=str(ROOT / "docs" / f"mcp-apps-{name}.png"))


async def test_the_server_declares_the_views_as_kagent_reads_them(served: tuple[str, Seen]) -> None:
    async with mcp_session(served[0], {}) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert tools["show_branches"].meta == {"ui": {"resourceUri": mcp_apps.BRANCHES_URI}}
        assert tools["show_experiment"].meta == {"ui": {"resourceUri": mcp_apps.EXPERIMENT_URI}}
        assert all(tools[t.__name__].meta == {"ui": {"visibility": ["app"]}} for t in mcp_apps.APP_TOOLS)
        page = (await mcp.read_resource(mcp_apps.BRANCHES_URI)).contents[0]
        assert page.mimeType == mcp_apps.MIME and page.meta and "csp" in page.meta["ui"]
        text = getattr(page, "text", "")
        assert "<script>" in text and "http" not in text.split("<body>")[0].replace("http-equiv", "")


def test_the_app_token_names_its_caller_and_nothing_else(services: Services) -> None:
    caller = Caller(user_id="zoë@example.com", share_token="share-1")
    token = mcp_apps.make_token(services, caller)
    assert mcp_apps.token_caller(services, token) == caller
    body, _, signature = token.partition(".")
    other = dataclasses.replace(
        services, settings=dataclasses.replace(services.settings, database_url="postgresql://x")
    )
    forged = base64.urlsafe_b64encode(b'{"u":"admin@kagent.dev","s":null,"e":9999999999}').decode().rstrip("=")
    for bad in (
        f"{forged}.{signature}",  # another user under this token's signature
        token[:-2] + ("AA" if token[-2:] != "AA" else "BB"),  # a changed signature
        "not a token", "", f"{body}.",
        mcp_apps.make_token(services, caller, now=time.time() - mcp_apps.TOKEN_SECONDS - 1),  # expired
    ):  # fmt: skip
        with pytest.raises(Unauthorized, match="app_token is not valid"):
            mcp_apps.token_caller(services, bad)
    with pytest.raises(Unauthorized):  # a key of another database (another kagent)
        mcp_apps.token_caller(other, token)


def test_in_trusted_proxy_mode_the_app_token_needs_a_real_secret(services: Services) -> None:
    """A token stands for a verified user there: a key anyone who knows the database URL could make is
    refused (503 without MCP_APP_SECRET), and tokens of the URL's key are not accepted with the secret."""
    caller = Caller(user_id="zoë@example.com")
    proxied = dataclasses.replace(services, settings=dataclasses.replace(services.settings, auth_mode="trusted-proxy"))
    with pytest.raises(NotConfigured, match="MCP_APP_SECRET"):
        mcp_apps.make_token(proxied, caller)
    secret = "s" * 32
    keyed = dataclasses.replace(proxied, settings=dataclasses.replace(proxied.settings, mcp_app_secret=secret))
    assert mcp_apps.token_caller(keyed, mcp_apps.make_token(keyed, caller)) == caller
    with pytest.raises(Unauthorized):
        mcp_apps.token_caller(keyed, mcp_apps.make_token(services, caller))
    with pytest.raises(ConfigError, match="MCP_APP_SECRET"):
        from_env({"MCP_APP_SECRET": "short"})
    assert from_env({"MCP_APP_SECRET": secret}).mcp_app_secret == secret


async def test_fork_rewind_undo_and_compare_inside_the_chat(chat: Chat, pool: asyncpg.Pool) -> None:
    user = new_user()
    conv = await seed(pool, dialect="legacy", turns=3, tool_calls=True, user_id=user)
    async with pool.acquire() as conn:  # a chat message that holds markup
        await conn.execute(
            "UPDATE event SET data = replace(data, $1, $2) WHERE session_id = $3",
            conv.turns[0].user_text, json.dumps(HOSTILE)[1:-1], conv.session_id,
        )  # fmt: skip
    await chat.agent_calls(user, "show_branches", {"session_id": conv.session_id})
    app = chat.app()
    turns = app.locator("#turns li")
    await expect(turns).to_have_count(3)
    await expect(turns.first).to_contain_text(HOSTILE)
    assert await chat.frame().evaluate("window.__pwned") is None
    assert await app.locator("#turns script, #turns img").count() == 0
    await shot(chat, "branches")

    # Fork before turn 2: a new session in kagent's tables holding turn 1's events, with its lineage.
    await turns.nth(1).get_by_role("button", name="Fork before this turn").click()
    await expect(app.locator("#status")).to_contain_text("Forked before turn 2")
    async with pool.acquire() as conn:
        fork = await conn.fetchrow(
            "SELECT session_id, events_copied FROM kagent_fork.fork WHERE parent_session_id = $1 AND user_id = $2",
            conv.session_id, user,
        )  # fmt: skip
        assert fork is not None
        copied = await conn.fetch(
            "SELECT data FROM event WHERE session_id = $1 AND user_id = $2 ORDER BY created_at",
            fork["session_id"],
            user,
        )
        source = await conn.fetch(
            "SELECT data FROM event WHERE session_id = $1 AND id = ANY($2::text[]) ORDER BY created_at",
            conv.session_id, list(conv.turns[0].event_ids),
        )  # fmt: skip
    assert [r["data"] for r in copied] == [r["data"] for r in source] and fork["events_copied"] == len(source)
    path = f"/agents/kagent/k8s-agent/chat/{fork['session_id']}"
    assert any(path in m and "before turn 2" in m for m in await chat.messages())
    await expect(chat.page.locator(".message.user").last).to_contain_text(path)
    await expect(app.locator("#tree li")).to_have_count(2)

    # Rewind to turn 3, then undo it.
    await turns.nth(2).get_by_role("button", name="Rewind to here").click()
    await expect(app.locator("#status")).to_contain_text("Rewound to before turn 3")
    await expect(turns).to_have_count(2)
    assert any("rewound this chat to before turn 3" in m for m in await chat.messages())
    await app.locator("#rewinds").get_by_role("button", name="Undo").click()
    await expect(app.locator("#status")).to_contain_text("undone")
    await expect(turns).to_have_count(3)

    # Compare the source with its fork.
    await app.locator(f'#tree input[data-session="{conv.session_id}"]').check()
    await app.locator(f'#tree input[data-session="{fork["session_id"]}"]').check()
    await app.locator("#compare").click()
    await expect(app.locator("#compare-table tr")).to_have_count(3)  # the head, turns 2 and 3 against nothing
    await expect(app.locator("#comparison")).to_contain_text("1 turns in common")
    await shot(chat, "compare")
    assert set(chat.app_calls) >= {"app_branches", "app_fork", "app_rewind", "app_undo", "app_compare"}
    await chat.clean()


async def test_the_branches_view_forks_and_rewinds_a_turn_known_by_its_task(chat: Chat, pool: asyncpg.Pool) -> None:
    """A session of an agent that writes no invocation id (kagent-openai's rows): the branches view forks before
    turn 2 and rewinds to turn 3 naming each turn by its task, and the undo brings turn 3 back."""
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=3, event_style="openai", user_id=user)
    await chat.agent_calls(user, "show_branches", {"session_id": conv.session_id})
    app = chat.app()
    turns = app.locator("#turns li")
    await expect(turns).to_have_count(3)
    await turns.nth(1).get_by_role("button", name="Fork before this turn").click()
    await expect(app.locator("#status")).to_contain_text("Forked before turn 2")
    async with pool.acquire() as conn:
        fork = await conn.fetchrow(
            "SELECT rewind_before_invocation_id, rewind_before_task_id FROM kagent_fork.fork"
            " WHERE parent_session_id = $1 AND user_id = $2",
            conv.session_id, user,
        )  # fmt: skip
    assert fork is not None and tuple(fork) == (None, conv.turns[1].task_id)
    await turns.nth(2).get_by_role("button", name="Rewind to here").click()
    await expect(app.locator("#status")).to_contain_text("Rewound to before turn 3")
    await expect(turns).to_have_count(2)
    async with pool.acquire() as conn:
        named = await conn.fetchval(
            "SELECT rewind_before_task_id FROM kagent_fork.rewind WHERE session_id = $1", conv.session_id
        )
    assert named == conv.turns[2].task_id
    await app.locator("#rewinds").get_by_role("button", name="Undo").click()
    await expect(app.locator("#status")).to_contain_text("undone")
    await expect(turns).to_have_count(3)
    await chat.clean()


async def test_bad_input_shows_the_service_message_and_changes_nothing(chat: Chat, pool: asyncpg.Pool) -> None:
    user, other = new_user(), new_user()
    conv = await seed(pool, dialect="v1", turns=3, user_id=user)
    foreign = await seed(pool, dialect="v1", turns=1, user_id=other)

    # The agent names a session the user cannot see: a tool error, no view.
    async with mcp_session(chat.service, {"X-User-Id": user}) as mcp:
        refused = await mcp.call_tool("show_branches", {"session_id": foreign.session_id})
        assert refused.isError and "not found" in refused.content[0].text  # type: ignore[union-attr]
        shown = await mcp.call_tool("show_branches", {"session_id": conv.session_id})
        view = ok(shown)  # and the same as structured content (all kagent passes on from an ADK `output`)
        assert shown.structuredContent == view and set(view) == {"session_id", "app_token"}
        # No session named: the user's newest (kagent moves updated_at on every event of the chat they type in).
        newest = await seed(pool, dialect="v1", turns=1, user_id=user)
        async with pool.acquire() as conn:
            touch = "UPDATE session SET updated_at = now() + interval '1 minute' WHERE id = $1 AND user_id = $2"
            await conn.execute(touch, newest.session_id, user)
        assert ok(await mcp.call_tool("show_branches", {}))["session_id"] == newest.session_id

    # The app asked with a foreign session id, a missing one, a forged token: the service's message.
    for arguments, says in (
        ({"session_id": foreign.session_id, "app_token": view["app_token"]}, "not found"),
        ({"session_id": "", "app_token": view["app_token"]}, "session id must be 1 to 256 characters"),
        ({"session_id": conv.session_id, "app_token": "forged.token"}, "app_token is not valid"),
    ):
        before = await table_fingerprint(pool)
        result = {"content": [{"type": "text", "text": json.dumps(arguments)}]}
        await chat.page.evaluate(
            "r => window.renderApp({toolName: 'show_branches', resourceUri: 'ui://kagent-fork/branches.html', "
            "toolInput: {}, toolResult: r})",
            result,
        )
        await expect(chat.app().locator("#status")).to_contain_text(says)
        assert await table_fingerprint(pool) == before
        await chat.page.evaluate("document.getElementById('chat').replaceChildren()")

    # A turn that no longer exists (rewound behind the view's back): refused, nothing written.
    await chat.agent_calls(user, "show_branches", {"session_id": conv.session_id})
    app = chat.app()
    await expect(app.locator("#turns li")).to_have_count(3)
    async with mcp_session(chat.service, {"X-User-Id": user}) as mcp:
        ok(await mcp.call_tool(
            "rewind_session", {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[1]}
        ))  # fmt: skip
    before = await table_fingerprint(pool)
    await app.locator("#turns li").nth(2).get_by_role("button", name="Fork before this turn").click()
    await expect(app.locator("#status")).to_have_class("status error")
    await expect(app.locator("#status")).to_contain_text(conv.invocation_ids[2])
    assert await table_fingerprint(pool) == before

    # kagent's bridge itself fails: its message, and the host sees no unhandled error.
    chat.bridge_down = True
    await app.locator("#turns li").first.get_by_role("button", name="Rewind to here").click()
    await expect(app.locator("#status")).to_contain_text("Failed to connect to MCP server")
    assert await table_fingerprint(pool) == before
    assert await chat.messages() == []
    await chat.clean()


async def test_an_experiment_from_a_turn_fills_its_grid(
    chat: Chat, served: tuple[str, Seen], pool: asyncpg.Pool
) -> None:
    seen = served[1]
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True, metadata_style="kagent", user_id=user)
    await chat.agent_calls(user, "show_experiment", {"session_id": conv.session_id}, theme="dark")
    app = chat.app()
    await expect(app.locator("#form")).to_be_visible()
    await expect(app.locator("html")).to_have_attribute("data-theme", "dark")  # the host's theme, handed over
    await app.locator("#turn").select_option(conv.invocation_ids[1])
    await expect(app.locator("#question")).to_have_value(conv.turns[1].user_text)
    await app.locator("#question").fill("Ask it differently: how many pods run?")
    await app.locator("#turns").fill("all")
    await expect(app.locator("#tools")).to_have_value("replay")  # nothing that acts runs, unless live is chosen

    # An agent the service refuses: its message, nothing written.
    await app.locator("#agents").fill("Not An Agent")
    before = await table_fingerprint(pool)
    await app.locator("#start").click()
    await expect(app.locator("#status")).to_contain_text("namespace/name")
    assert await table_fingerprint(pool) == before

    # Two agents; the slow one holds its second turn until the test lets it go: the grid fills as they answer.
    seen.release.clear()
    seen.hold_on_turn = 2
    try:
        await app.locator("#agents").fill(f"kagent/{V1}, kagent/{SLOW}")
        await shot(chat, "experiment-form")
        await app.locator("#start").click()
        grid = app.locator("#grid")
        rows = grid.locator("tr[data-row]")
        await expect(rows).to_have_count(2, timeout=30_000)
        await expect(grid).to_have_attribute("data-status", "running")
        await expect(rows.nth(1).locator("td").nth(2)).to_contain_text("by the other agent", timeout=30_000)
        await expect(rows.nth(1).locator("td").nth(3)).to_have_text("answering…")  # the slow agent's 2nd turn
    finally:
        seen.release.set()
        seen.hold_on_turn = 0
    await expect(grid).to_have_attribute("data-status", "completed", timeout=60_000)
    await expect(rows.nth(1).locator("td").nth(3)).to_contain_text("by slow agent")
    await expect(rows.first).to_contain_text("Ask it differently: how many pods run?")
    await expect(grid.locator("th")).to_have_count(4)  # turn, source, the two branches
    await shot(chat, "experiment-grid")
    assert chat.app_calls.count("app_experiment") >= 2  # read again while it ran

    # The agent shows that experiment again by its id: the grid, no form.
    async with pool.acquire() as conn:
        (row,) = await conn.fetch("SELECT id FROM kagent_fork.experiment WHERE source_session_id = $1", conv.session_id)
    await chat.agent_calls(user, "show_experiment", {"experiment_id": row["id"]})
    again = chat.app(1)
    await expect(again.locator("#grid")).to_have_attribute("data-status", "completed")
    await expect(again.locator("#grid tr[data-row]")).to_have_count(2)
    await expect(again.locator("#form")).to_be_hidden()
    await chat.clean()


async def test_an_experiment_from_a_turn_known_by_its_task(
    chat: Chat, served: tuple[str, Seen], pool: asyncpg.Pool
) -> None:
    """A session of an agent that writes no invocation id (kagent-openai's rows): the view lists its turns by
    task and starts the experiment from one by its task; the grid shows the source's and the branch's turns."""
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=3, event_style="openai", user_id=user)
    await chat.agent_calls(user, "show_experiment", {"session_id": conv.session_id})
    app = chat.app()
    await expect(app.locator("#form")).to_be_visible()
    await app.locator("#turn").select_option(conv.turns[1].task_id)
    await expect(app.locator("#question")).to_have_value(conv.turns[1].user_text)
    await app.locator("#turns").fill("all")
    await app.locator("#agents").fill(f"kagent/{V1}")
    await app.locator("#start").click()
    grid = app.locator("#grid")
    await expect(grid).to_have_attribute("data-status", "completed", timeout=60_000)
    rows = grid.locator("tr[data-row]")
    await expect(rows).to_have_count(2)
    await expect(rows.first).to_contain_text(conv.turns[1].user_text)
    await expect(rows.nth(1).locator("td").nth(2)).to_contain_text("by the other agent")
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT rewind_before_invocation_id, rewind_before_task_id FROM kagent_fork.experiment"
            " WHERE source_session_id = $1",
            conv.session_id,
        )
    assert tuple(row) == (None, conv.turns[1].task_id)
    await chat.clean()


async def test_a_running_experiment_is_cancelled_from_its_grid(
    chat: Chat, served: tuple[str, Seen], pool: asyncpg.Pool
) -> None:
    """Cancel, while the slow agent holds its turn: the grid says cancelled, the agent's task is cancelled over
    A2A, and the button is gone."""
    seen = served[1]
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=2, user_id=user)
    await chat.agent_calls(user, "show_experiment", {"session_id": conv.session_id})
    app = chat.app()
    await expect(app.locator("#form")).to_be_visible()
    await app.locator("#turn").select_option(conv.invocation_ids[1])
    seen.release.clear()
    seen.hold_on_turn = 0
    cancelled_before = len(seen.cancelled)
    try:
        await app.locator("#agents").fill(f"kagent/{SLOW}")
        await app.locator("#start").click()
        grid = app.locator("#grid")
        await expect(grid).to_have_attribute("data-status", "running", timeout=30_000)
        await expect(grid.locator("tr[data-row]").first.locator("td").nth(2)).to_have_text("answering…")
        await app.locator("#cancel").click()
        await expect(grid).to_have_attribute("data-status", "cancelled", timeout=30_000)
        await expect(app.locator("#cancel")).to_be_hidden()
        for _ in range(100):  # the agent's task, cancelled over A2A by the cancel or by the runner just after
            if len(seen.cancelled) > cancelled_before:
                break
            await asyncio.sleep(0.1)
        assert len(seen.cancelled) > cancelled_before
    finally:
        seen.release.set()
        seen.hold_on_turn = 0
    assert chat.app_calls.count("app_cancel_experiment") == 1
    await chat.clean()
