"""The explorer page in a real browser: Playwright for Python driving Debian's Chromium, against a live
service on a seeded database and a real A2A agent. `UPDATE_SCREENSHOTS=1` also writes docs/explorer-*.png."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, async_playwright, expect

from service.app import create_app
from service.config import Settings
from tests.helpers import new_user, seed
from tests.support.a2a_agent import NAMESPACE, V1, running_agents
from tests.support.live_server import live_server

ROOT = Path(__file__).resolve().parents[1]
SHOTS = os.environ.get("UPDATE_SCREENSHOTS") == "1"
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def chromium() -> str:
    """Debian's Chromium (Playwright's own browser download cannot work here). scripts/test installs it
    when it runs as root; otherwise this fails, saying how: a browser test is never skipped."""
    path = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail(
            "Chromium is missing: apt-get install chromium (or set CHROMIUM_PATH); scripts/test does it as root"
        )
    return path


@pytest.fixture(scope="module")
def page_url(settings: Settings, database_url: str, pool: asyncpg.Pool) -> Iterator[str]:
    with running_agents(database_url) as (a2a_url, _):
        config = dataclasses.replace(settings, kagent_a2a_url=a2a_url, whatif_heartbeat_seconds=0.5)
        with live_server(create_app(config, database_url)) as url:
            yield url


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[tuple[Page, list[str]]]:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await context.new_page()
    problems: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(message.text)

    page.on("console", console)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        yield page, problems
    finally:
        await context.close()


async def shot(page: Page, name: str) -> None:
    if SHOTS:
        await page.screenshot(path=str(ROOT / "docs" / f"explorer-{name}.png"), full_page=False)


async def open_as(page: Page, url: str, user: str) -> None:
    await page.goto(f"{url}/ui/")
    await page.fill("#user", user)
    await page.click("#who button[type=submit]")


async def test_fork_rewind_undo_tree_compare_and_whatif_with_clicks(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool
) -> None:
    tab, problems = page
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=4, tool_calls=True, user_id=user, name="Why is the pod crashing?")
    await open_as(tab, page_url, user)
    sessions = tab.locator("#sessions li")
    await expect(sessions).to_have_count(1)
    await shot(tab, "sessions")

    await sessions.first.click()
    turns = tab.locator("#turns > li.turn")
    await expect(turns).to_have_count(4)
    await expect(turns.nth(0)).to_contain_text(conv.turns[0].user_text)
    await expect(tab.locator("#session-title")).to_have_text("Why is the pod crashing?")
    await shot(tab, "transcript")

    # dry run, then fork before the third turn: the database holds the fork
    await turns.nth(2).get_by_role("button", name="Dry run").click()
    await expect(tab.locator("#result")).to_contain_text('"dry_run": true')
    await turns.nth(2).get_by_role("button", name="Fork here").click()
    await expect(tab.locator("#status")).to_contain_text("Forked:")
    async with pool.acquire() as conn:
        fork = await conn.fetchrow(
            "SELECT session_id, rewind_before_invocation_id, events_copied FROM kagent_fork.fork "
            "WHERE parent_session_id = $1 AND user_id = $2",
            conv.session_id, user,
        )  # fmt: skip
    assert fork is not None and fork["rewind_before_invocation_id"] == conv.invocation_ids[2]
    await expect(sessions).to_have_count(2)

    # rewind the last turn, then undo it from the rewinds list
    await turns.nth(3).get_by_role("button", name="Rewind here").click()
    await expect(tab.locator("#rewinds li.turn")).to_have_count(1)
    await expect(turns).to_have_count(3)
    await tab.get_by_role("button", name="Rewinds").click()
    await shot(tab, "rewinds")
    await tab.locator("#rewinds").get_by_role("button", name="Undo").click()
    await expect(tab.locator("#rewinds li.turn")).to_contain_text("undone")
    await expect(turns).to_have_count(4)
    async with pool.acquire() as conn:
        undone = await conn.fetchval("SELECT undone_at FROM kagent_fork.rewind WHERE session_id = $1", conv.session_id)
    assert undone is not None

    # the tree: the source and its fork, as links
    await tab.get_by_role("button", name="Fork tree").click()
    tree = tab.locator("#tree li")
    await expect(tree).to_have_count(2)
    await expect(tab.locator(f"#tree li[data-id='{fork['session_id']}']")).to_be_visible()
    await shot(tab, "tree")

    # compare the source with its fork, side by side
    await tab.get_by_role("button", name="Compare", exact=True).click()
    await tab.select_option("#compare-with", fork["session_id"])
    await tab.click("#compare-go")
    await expect(tab.locator("#comparison")).to_contain_text("2 turn(s) in common")
    await expect(tab.locator("#comparison .compare > div")).to_have_count(2)
    await shot(tab, "compare")

    # a what-if of the second turn on another agent, followed until it completes
    await tab.get_by_role("button", name="Transcript").click()
    await tab.fill("#whatif-agent", f"{NAMESPACE}/{V1}")
    await turns.nth(1).get_by_role("button", name="What-if").click()
    await expect(tab.locator("#status")).to_contain_text("What-if completed", timeout=30_000)
    await expect(tab.locator("#result")).to_contain_text("Regenerated answer")
    await tab.get_by_role("button", name="What-ifs").click()
    await expect(tab.locator("#whatifs li[data-status=completed]")).to_have_count(1)
    await shot(tab, "whatif")
    assert problems == []


async def test_everything_shown_is_text(page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool) -> None:
    tab, problems = page
    user = new_user()
    conv = await seed(pool, dialect="legacy", turns=2, user_id=user, name=HOSTILE)
    async with pool.acquire() as conn:  # a message that holds markup too
        await conn.execute(
            "UPDATE event SET data = replace(data, $1, $2) WHERE session_id = $3",
            conv.turns[0].user_text, json.dumps(HOSTILE)[1:-1], conv.session_id,
        )  # fmt: skip
    await open_as(tab, page_url, user)
    item = tab.locator("#sessions li").first
    await expect(item).to_contain_text(HOSTILE)
    await item.click()
    await expect(tab.locator("#session-title")).to_have_text(HOSTILE)
    await expect(tab.locator("#turns .msg.user").first).to_contain_text(HOSTILE)
    assert await tab.evaluate("window.__pwned") is None
    assert await tab.locator("#turns script, #sessions script, #turns img").count() == 0
    # an error of the API is shown as its envelope's text
    await tab.fill("#whatif-agent", "Not An Agent")
    await tab.locator("#turns > li.turn").nth(1).get_by_role("button", name="What-if").click()
    await expect(tab.locator("#status")).to_contain_text("agent_ref must be namespace/name")
    await expect(tab.locator("#status")).to_have_class("error")
    assert problems == [] or all("422" in p for p in problems)  # the browser logs the refused request itself


async def test_readable_on_a_phone(browser: Browser, page_url: str, pool: asyncpg.Pool) -> None:
    user = new_user()
    await seed(pool, dialect="v1", turns=2, user_id=user, name="On a phone")
    context = await browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    tab = await context.new_page()
    try:
        await open_as(tab, page_url, user)
        await tab.locator("#sessions li").first.click()
        await expect(tab.locator("#turns > li.turn")).to_have_count(2)
        # nothing wider than the screen: no sideways scrolling
        width = await tab.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width
        await shot(tab, "phone")
    finally:
        await context.close()


def test_page_files_are_in_the_package() -> None:
    files = {p.name for p in (ROOT / "service" / "doors" / "ui").iterdir()}
    assert {"index.html", "app.js", "style.css"} <= files
    html = (ROOT / "service" / "doors" / "ui" / "index.html").read_text()
    assert "http" not in html.replace("https://", "").lower() or "http-equiv" in html  # no CDN, nothing from elsewhere
    assert "innerHTML" not in (ROOT / "service" / "doors" / "ui" / "app.js").read_text()


async def test_served_page(client: Any) -> None:
    page = await client.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    script = await client.get("/ui/app.js")
    assert script.status_code == 200 and "textContent" in script.text
    missing = await client.get("/ui/secrets.txt")
    assert missing.status_code == 404 and missing.json()["error"].startswith("no such file")
