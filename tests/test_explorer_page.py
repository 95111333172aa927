"""The explorer page in a real browser: Playwright for Python driving Debian's Chromium, against a live
service on a seeded database and a real A2A agent. `UPDATE_SCREENSHOTS=1` also writes docs/explorer-*.png."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import AsyncIterator, Awaitable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import genai_prices
import pytest
from playwright.async_api import Browser, ConsoleMessage, Dialog, Page, async_playwright, expect

from service.app import create_app
from service.config import Settings
from service.kagent.store.agents import agent_row_id
from service.operations.prices import usd_text
from tests.helpers import new_user, seed, table_fingerprint
from tests.support import kagent_reads
from tests.support.a2a_agent import FORGETFUL, NAMESPACE, SLOW, V1, Seen, running_agents
from tests.support.classified_tools import classified_servers
from tests.support.live_server import live_server
from tests.test_frameworks import loaded

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
def served(settings: Settings, database_url: str, pool: asyncpg.Pool) -> Iterator[tuple[str, Seen, Settings]]:
    with running_agents(database_url) as (a2a_url, seen):
        config = dataclasses.replace(settings, kagent_a2a_url=a2a_url, whatif_heartbeat_seconds=0.5)
        with live_server(create_app(config, database_url)) as url:
            yield url, seen, config


@pytest.fixture(scope="module")
def page_url(served: tuple[str, Seen, Settings]) -> str:
    return served[0]


@pytest.fixture(scope="module")
def agents_seen(served: tuple[str, Seen, Settings]) -> Seen:
    return served[1]


@pytest.fixture(scope="module")
def page_settings(served: tuple[str, Seen, Settings]) -> Settings:
    """The live service's settings (its agents' A2A address), for a second service with other limits."""
    return served[2]


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
    page.on("dialog", accept)
    try:
        yield page, problems
    finally:
        await context.close()


def accept(dialog: Dialog) -> Awaitable[None]:
    return dialog.accept()  # Playwright awaits what a handler returns


TABLE = "NAME    READY   STATUS\nweb-1   1/1     Running\ndb-0    0/1     CrashLoopBackOff"


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
    dialogs: list[str] = []
    tab.on("dialog", lambda dialog: dialogs.append(dialog.message))
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

    # the dry run's answer is shown beside its turn, in words
    await turns.nth(2).get_by_role("button", name="Dry run").click()
    beside = turns.nth(2).locator(".turn-result")
    await expect(beside).to_contain_text("Dry run (nothing was written): a fork before turn 3")
    await expect(beside).to_contain_text("It would leave behind 2 turns")
    assert '"dry_run"' not in await tab.locator("body").inner_text()
    # fork before the third turn: the page opens the fork (its own address), saying where it came from
    await turns.nth(2).get_by_role("button", name="Fork before this turn").click()
    await expect(tab.locator("#status")).to_contain_text("Forked: now showing the fork")
    async with pool.acquire() as conn:
        fork = await conn.fetchrow(
            "SELECT session_id, rewind_before_invocation_id, events_copied FROM kagent_fork.fork "
            "WHERE parent_session_id = $1 AND user_id = $2",
            conv.session_id, user,
        )  # fmt: skip
    assert fork is not None and fork["rewind_before_invocation_id"] == conv.invocation_ids[2]
    await expect(tab.locator("#session-title")).to_have_text("Fork of Why is the pod crashing?")
    await expect(turns).to_have_count(2)
    await expect(tab.locator("#notice")).to_contain_text("before turn 3 into this session")
    assert f"session={fork['session_id']}" in tab.url
    await expect(sessions).to_have_count(2)
    await tab.locator("#notice").get_by_role("button", name="Back to the source").click()
    await expect(tab.locator("#session-title")).to_have_text("Why is the pod crashing?")
    await expect(turns).to_have_count(4)

    # rewind the last turn (confirmed), then undo it from the notice's button
    await turns.nth(3).get_by_role("button", name="Rewind here").click()
    await expect(turns).to_have_count(3)
    await expect(tab.locator("#notice")).to_contain_text("Rewound: turn 4 and everything after it are hidden")
    await tab.get_by_role("button", name="Rewinds").click()
    await expect(tab.locator("#rewinds li.turn")).to_have_count(1)
    await expect(tab.locator("#rewinds li.turn")).to_contain_text("hid 1 turn starting")
    await shot(tab, "rewinds")
    await tab.locator("#rewinds").get_by_role("button", name="Undo").click()
    await expect(tab.locator("#rewinds li.turn")).to_contain_text("undone")
    await expect(turns).to_have_count(4)
    async with pool.acquire() as conn:
        undone = await conn.fetchval("SELECT undone_at FROM kagent_fork.rewind WHERE session_id = $1", conv.session_id)
    assert undone is not None

    # the tree: the source and its fork, as links, with the fork point and today's counts
    await tab.get_by_role("button", name="Fork tree").click()
    tree = tab.locator("#tree li")
    await expect(tree).to_have_count(2)
    node = tab.locator(f"#tree li[data-id='{fork['session_id']}']")
    await expect(node).to_contain_text(f"forked at turn 3 “{conv.turns[2].user_text[:50]}")
    await expect(node).to_contain_text("2 turns")
    await expect(tab.locator("#tree").first).to_contain_text("kagent/k8s-agent")
    await shot(tab, "tree")

    # compare the source with its fork: the turns after the common part, side by side
    await tab.get_by_role("button", name="Compare", exact=True).click()
    await tab.select_option("#compare-with", fork["session_id"])
    await tab.click("#compare-go")
    await expect(tab.locator("#comparison")).to_contain_text("2 turns in common")
    rows = tab.locator("#comparison tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.nth(0).locator("td[data-side=left]")).to_contain_text(conv.turns[2].user_text)
    await expect(rows.nth(0)).to_contain_text("(no turn here)")
    assert "null" not in await tab.locator("#comparison").inner_text()
    await shot(tab, "compare")

    # a what-if of the second turn on another agent, confirmed with the warning, followed until it completes
    await tab.get_by_role("button", name="Transcript").click()
    await tab.fill("#whatif-agent", f"{NAMESPACE}/{V1}")
    await turns.nth(1).get_by_role("button", name="What-if").click()
    await expect(tab.locator("#status")).to_contain_text("What-if completed", timeout=30_000)
    assert "Tools: replay. Each tool call the source made answers its recorded result" in dialogs[-1]
    assert "turn 2" in dialogs[-1]
    assert f"{NAMESPACE}/{V1}: its tools are not known (kagent's agent table has no row" in dialogs[-1]
    await expect(turns.nth(1).locator(".turn-result")).to_contain_text("Regenerated answer")
    await expect(sessions).to_have_count(3)  # the list knows the what-if's fork without a reload
    await expect(tab.locator("#sessions")).to_contain_text(f"What-if: {NAMESPACE}/{V1} answers turn 2")
    await tab.get_by_role("button", name="What-ifs").click()
    listed = tab.locator("#whatifs li[data-status=completed]")
    await expect(listed).to_have_count(1)
    await expect(listed).to_contain_text(f"answering Turn 2 “{conv.turns[1].user_text[:40]}")
    await shot(tab, "whatif")
    # what is shown is in words: agents as namespace/name, states as words, times to the second
    text = await tab.locator("body").inner_text()
    assert "__NS__" not in text and "TASK_STATE_" not in text
    assert not re.search(r"\d:\d\d\.\d{3,}", text), "a raw timestamp is shown"
    assert problems == []


async def test_a_whatif_asks_first_and_says_running_until_the_job_ends(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool, agents_seen: Seen
) -> None:
    tab, problems = page
    user = new_user()
    await seed(pool, dialect="v1", turns=2, user_id=user, name="Slow what-if")
    await open_as(tab, page_url, user)
    await tab.locator("#sessions li").first.click()
    turns = tab.locator("#turns > li.turn")
    await expect(turns).to_have_count(2)
    # refused at the warning (asked once the dry run showed the agent's tools): nothing is started
    await tab.fill("#whatif-agent", f"{NAMESPACE}/{V1}")
    tab.remove_listener("dialog", accept)
    async with tab.expect_event("dialog") as asked:
        await turns.nth(1).get_by_role("button", name="What-if").click()
    await (await asked.value).dismiss()
    await expect(tab.locator("#status")).to_have_text("What-if not started")
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM kagent_fork.whatif_job WHERE user_id = $1", user) == 0
    await expect(tab.locator("#sessions li")).to_have_count(1)
    tab.on("dialog", accept)
    # a slow agent: the status line says running (never "done") until the job ends
    agents_seen.release.clear()
    await tab.fill("#whatif-agent", f"{NAMESPACE}/{SLOW}")
    await turns.nth(1).get_by_role("button", name="What-if").click()
    await expect(tab.locator("#status")).to_contain_text("What-if running", timeout=15_000)
    await tab.wait_for_timeout(1500)  # three polls later, still running, still saying so
    await expect(tab.locator("#status")).to_contain_text("What-if running")
    assert "done" not in await tab.locator("#status").inner_text()
    beside = turns.nth(1).locator(".turn-result")
    await expect(beside).to_contain_text(f"What-if: {NAMESPACE}/{SLOW} is answering turn 2")
    # cancelled from the what-ifs list: the follower says how it ended
    await tab.get_by_role("button", name="What-ifs").click()
    await tab.locator("#whatifs li[data-status=running]").get_by_role("button", name="Cancel").click()
    await expect(tab.locator("#status")).to_contain_text("What-if cancelled", timeout=15_000)
    await expect(tab.locator("#whatifs li[data-status=cancelled]")).to_have_count(1)
    assert problems == []


async def test_the_experiment_form_proposes_a_control_whose_verdict_is_the_noise_floor(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool
) -> None:
    """Issue 47, item 4: the form offers the control (the chat's own agent run again); ticked, the experiment has its
    branch and the verdict reads it as the noise floor."""
    from tests.support.a2a_agent import JUDGE, MARKER_AGENT

    tab, problems = page
    user = new_user()
    await seed(
        pool, dialect="v1", turns=2, user_id=user, name="With a control", agent_id=agent_row_id(f"{NAMESPACE}/{V1}")
    )
    await open_as(tab, page_url, user)
    await tab.locator("#sessions li").first.click()
    await tab.locator("#turns > li.turn").nth(1).get_by_role("button", name="Experiment").click()
    form = tab.locator(".experiment-form")
    await form.locator(".exp-agents").fill(f"{NAMESPACE}/{MARKER_AGENT}")
    await form.locator(".exp-judge").fill(f"{NAMESPACE}/{JUDGE}")
    await expect(form.locator(".exp-control")).not_to_be_checked()
    await form.locator(".exp-control").check()
    await form.get_by_role("button", name="Start the experiment").click()
    await expect(tab.locator("#experiment p[data-status=completed]")).to_have_count(1, timeout=60_000)
    await expect(tab.locator("#experiment thead th[data-col]")).to_have_count(3)  # the source and two branches
    await expect(tab.locator(".verdict-headline")).to_contain_text("the noise floor")
    async with pool.acquire() as conn:
        agents = await conn.fetch(
            "SELECT agent_ref FROM kagent_fork.whatif_job WHERE user_id = $1 ORDER BY agent_ref", user
        )
    assert [r["agent_ref"] for r in agents] == sorted([f"{NAMESPACE}/{MARKER_AGENT}", f"{NAMESPACE}/{V1}"])
    assert problems == []


async def test_a_judged_whatif_ends_on_its_verdict_beside_the_turn(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool
) -> None:
    """Issue 47, item 7: a what-if started from the page with a judge is followed while it is judged, and ends on
    the verdict's headline and lines beside its turn, as an experiment's read."""
    from tests.support.a2a_agent import JUDGE, MARKER_AGENT

    tab, problems = page
    user = new_user()
    await seed(pool, dialect="v1", turns=2, user_id=user, name="Judge the what-if")
    await open_as(tab, page_url, user)
    await tab.locator("#sessions li").first.click()
    turns = tab.locator("#turns > li.turn")
    await tab.fill("#whatif-agent", f"{NAMESPACE}/{MARKER_AGENT}")
    await tab.fill("#whatif-judge", f"{NAMESPACE}/{JUDGE}")
    await turns.nth(1).get_by_role("button", name="What-if").click()
    beside = turns.nth(1).locator(".turn-result")
    await expect(beside.locator(".verdict-headline")).to_contain_text(
        f"Judged blind by {NAMESPACE}/{JUDGE}: ", timeout=60_000
    )
    await expect(beside.locator(".verdict-lines li").first).to_contain_text(
        f"{NAMESPACE}/{MARKER_AGENT}: inconclusive against the source over 1 judged continuations: 1 better"
    )
    await expect(tab.locator("#status")).to_have_text("What-if completed")
    async with pool.acquire() as conn:
        judged = await conn.fetchval(
            "SELECT count(*) FROM kagent_fork.judgment j JOIN kagent_fork.whatif_job w ON w.id = j.job_id "
            "WHERE w.user_id = $1 AND j.status = 'completed'",
            user,
        )
    assert judged == 1
    assert problems == []


async def test_the_page_follows_the_user_and_the_address(browser: Browser, page_url: str, pool: asyncpg.Pool) -> None:
    first, second = new_user(), new_user()
    mine = await seed(pool, dialect="legacy", turns=2, tool_calls=True, user_id=first, name="First user's chat")
    await seed(pool, dialect="v1", turns=1, user_id=second, name="Second user's chat")
    async with pool.acquire() as conn:  # a tool that answers a table, as kubectl does
        await conn.execute(
            "UPDATE event SET data = jsonb_set(data::jsonb, '{content,parts,0,function_response,response}', $2)::text "
            "WHERE session_id = $1 AND strpos(data, 'function_response') > 0",
            mine.session_id, json.dumps({"result": TABLE}),
        )  # fmt: skip
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    tab = await context.new_page()
    try:
        # a link to a session opens it, as the user it names
        await tab.goto(f"{page_url}/ui/#session={mine.session_id}&user={first}")
        await expect(tab.locator("#session-title")).to_have_text("First user's chat")
        await expect(tab.locator("#user")).to_have_value(first)
        # a tool's text keeps its line breaks
        result = tab.locator("#turns .msg.tool .tool-text", has_text="CrashLoopBackOff").first
        shown = await result.inner_text()
        assert shown == "result:\n" + "\n".join(f"  {line}" for line in TABLE.splitlines()), shown
        assert "\\n" not in await result.inner_text()
        # another user: the first user's session leaves the screen
        await tab.fill("#user", second)
        await tab.click("#who button[type=submit]")
        await expect(tab.locator("#sessions li")).to_have_count(1)
        await expect(tab.locator("#sessions")).to_contain_text("Second user's chat")
        await expect(tab.locator("#session-pane")).to_be_hidden()
        assert "First user's chat" not in await tab.locator("body").inner_text()
    finally:
        await context.close()


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
        # the experiment form fits too
        await tab.locator("#turns > li.turn").nth(0).get_by_role("button", name="Experiment").click()
        await expect(tab.locator(".experiment-form")).to_be_visible()
        width = await tab.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width
    finally:
        await context.close()


def test_page_files_are_in_the_package() -> None:
    ui = ROOT / "service" / "doors" / "ui"
    files = {p.name for p in ui.iterdir()}
    assert {"index.html", "app.js", "experiments.js", "suites.js", "tools.js", "style.css"} <= files
    html = (ui / "index.html").read_text()
    assert "http" not in html.replace("https://", "").lower() or "http-equiv" in html  # no CDN, nothing from elsewhere
    for script in ui.glob("*.js"):
        text = script.read_text()
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text, script.name
        assert len(text.splitlines()) <= 600, f"{script.name} is past 600 lines: split it"


async def test_served_page(client: Any) -> None:
    page = await client.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    script = await client.get("/ui/app.js")
    assert script.status_code == 200 and "textContent" in script.text
    second = await client.get("/ui/experiments.js")
    assert second.status_code == 200 and second.headers["content-type"].startswith("text/javascript")
    missing = await client.get("/ui/secrets.txt")
    assert missing.status_code == 404 and missing.json()["error"].startswith("no such file")


async def test_an_experiment_from_the_page_fills_its_grid_while_it_runs(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool, agents_seen: Seen
) -> None:
    tab, problems = page
    dialogs: list[str] = []
    tab.on("dialog", lambda dialog: dialogs.append(dialog.message))
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=4, tool_calls=True, user_id=user, name="Which agent does it best?")
    await open_as(tab, page_url, user)
    await tab.locator("#sessions li").first.click()
    turns = tab.locator("#turns > li.turn")
    await expect(turns).to_have_count(4)
    # the fast agent's kagent config names a model genai-prices knows; the slow one has no `agent` row
    v1_row = agent_row_id(f"{NAMESPACE}/{V1}")
    config = '{"model": {"type": "openai", "model": "gpt-4o", "base_url": ""}}'
    await pool.execute(
        "INSERT INTO agent (id, created_at, updated_at, type, config) "
        "VALUES ($1, now(), now(), 'Declarative', $2::json) "
        "ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config, deleted_at = NULL",
        v1_row, config,
    )  # fmt: skip
    # the slow agent answers its first turn at once and holds its second until released: the grid is
    # seen filling while the experiment runs
    agents_seen.release.clear()
    agents_seen.hold_on_turn = 2
    try:
        await turns.nth(1).get_by_role("button", name="Experiment").click()
        form = turns.nth(1).locator(".experiment-form")
        # one default on every door (issue 47): this turn only, as the API, the CLI and MCP take it
        await expect(form.locator(".exp-turns")).to_have_value("1")
        await form.locator(".exp-turns").select_option("all")
        await form.locator(".exp-agents").fill(f"{NAMESPACE}/{V1}, {NAMESPACE}/{SLOW}")
        await form.locator(".exp-message").fill("Ask it differently: how many pods run?")
        await form.get_by_role("button", name="Start the experiment").click()
        grid = tab.locator("#experiment table.experiment")
        await expect(grid).to_be_visible(timeout=15_000)
        assert "Tools: replay. Each tool call the source made answers its recorded result" in dialogs[-1]
        # the dry run's estimate of the whole start under the form: the slow agent has no agent row, no price
        await expect(form.locator(".estimate")).to_contain_text(f"context tokens, price unknown ({NAMESPACE}/{SLOW})")
        rows = grid.locator("tbody tr")
        await expect(rows).to_have_count(3)
        await expect(grid.locator("thead th[data-col=b0]")).to_contain_text(f"{NAMESPACE}/{V1}")
        await expect(grid.locator("thead th[data-col=b1]")).to_contain_text(f"{NAMESPACE}/{SLOW}")
        # while it runs: the fast column done, the slow one at its second turn, the page saying so
        cell = rows.nth(2).locator("td[data-col=b0]")
        await expect(cell).to_have_attribute("data-state", "completed", timeout=20_000)
        cell = rows.nth(1).locator("td[data-col=b1]")
        await expect(cell).to_have_attribute("data-state", "working", timeout=20_000)
        await expect(rows.nth(0).locator("td[data-col=b1]")).to_have_attribute("data-state", "completed")
        await expect(tab.locator("#status")).to_contain_text("Experiment running: 1 of 2 branches ended")
        await expect(tab.locator("#experiment")).to_contain_text("Cancel the experiment")
        agents_seen.release.set()
        await expect(tab.locator("#status")).to_have_text("Experiment completed", timeout=30_000)
    finally:
        agents_seen.hold_on_turn = 0
        agents_seen.release.set()
    await expect(tab.locator("#experiment p[data-status=completed]")).to_have_count(1)
    # the source column: the source's own turns over the same span, its questions as asked then
    for i, turn in enumerate(conv.turns[1:]):
        await expect(rows.nth(i).locator("td[data-col=source]")).to_contain_text(turn.user_text)
        await expect(rows.nth(i).locator("th")).to_have_text(f"Turn {i + 2}")
    # each branch: the edited first question, then the source's own; figures per turn and the totals
    for col in ("b0", "b1"):
        await expect(rows.nth(0).locator(f"td[data-col={col}] .msg.user")).to_have_text(
            "Ask it differently: how many pods run?"
        )
        await expect(rows.nth(2).locator(f"td[data-col={col}] .msg.user")).to_have_text(conv.turns[3].user_text)
        await expect(rows.nth(0).locator(f"td[data-col={col}]")).to_contain_text("tools: lookup · 2 model calls")
        await expect(grid.locator(f"tfoot td[data-col={col}]")).to_contain_text(
            "3 turns3 tool calls, 6 model calls, 864 tokens"
        )
    await expect(grid.locator("tfoot td[data-col=source]")).to_contain_text("3 turns")
    # the price under each column's totals: the fast agent's model priced call by call, the others unknown
    price = sum(
        (genai_prices.calc_price(genai_prices.Usage(input_tokens=i, output_tokens=o), "gpt-4o", provider_id="openai")
         .total_price for i, o in [(120, 8), (140, 20)] * 3),
        Decimal(0),
    )  # fmt: skip
    # as every door prints money (prices.usd_text): two significant figures
    assert usd_text(float(price)) == "$0.0028"
    await expect(grid.locator("tfoot td[data-col=b0] .cost")).to_have_text(usd_text(float(price)))
    await expect(grid.locator("tfoot td[data-col=b1] .cost")).to_have_text("cost unknown")
    await expect(grid.locator("tfoot td[data-col=source] .cost")).to_have_text("cost unknown")
    await pool.execute("DELETE FROM agent WHERE id = $1", v1_row)
    await expect(tab.locator("#experiment")).not_to_contain_text("Cancel the experiment")
    # what was shown is what the service holds, and the edited question reached each agent, in its fork
    async with pool.acquire() as conn:
        branches = await conn.fetch(
            "SELECT j.session_id, j.agent_ref FROM kagent_fork.whatif_job j JOIN kagent_fork.experiment x "
            "ON x.id = j.experiment_id WHERE x.source_session_id = $1 ORDER BY j.agent_ref",
            conv.session_id,
        )  # fmt: skip
    assert sorted(b["agent_ref"] for b in branches) == [f"{NAMESPACE}/{SLOW}", f"{NAMESPACE}/{V1}"]
    for branch in branches:
        got = [m for m in agents_seen.messages if m.context_id == branch["session_id"]]
        asked = [[p.text for p in m.parts if p.HasField("text")] for m in got]
        questions = ["Ask it differently: how many pods run?", conv.turns[2].user_text, conv.turns[3].user_text]
        assert asked == [[q] for q in questions]
    # the session's list of experiments shows it; its grid opens from there
    listed = tab.locator("#experiments li[data-status=completed]")
    await expect(listed).to_have_count(1)
    await expect(listed).to_contain_text(f"from Turn 2 “{conv.turns[1].user_text[:40]}")
    await tab.evaluate("window.scrollTo(0, 0)")
    if SHOTS:
        await tab.screenshot(path=str(ROOT / "docs" / "explorer-experiment.png"), full_page=True)
    # a fresh page on the session's address: the list, and the grid opened from it
    await tab.reload()
    await expect(tab.locator("#session-title")).to_have_text("Which agent does it best?")
    await tab.get_by_role("button", name="Experiments").click()
    await expect(tab.locator("#experiment")).to_be_empty()
    await listed.get_by_role("button", name="Show the grid").click()
    await expect(tab.locator("#experiment tbody tr")).to_have_count(3)
    text = await tab.locator("body").inner_text()
    assert "__NS__" not in text and "TASK_STATE_" not in text and "undefined" not in text and "null" not in text
    assert problems == []


async def test_an_experiment_can_be_cancelled_from_its_grid(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool, agents_seen: Seen
) -> None:
    tab, problems = page
    user = new_user()
    await seed(pool, dialect="v1", turns=2, user_id=user, name="Cancel me")
    await open_as(tab, page_url, user)
    await tab.locator("#sessions li").first.click()
    agents_seen.release.clear()
    agents_seen.hold_on_turn = 0
    try:
        await tab.locator("#turns > li.turn").nth(1).get_by_role("button", name="Experiment").click()
        form = tab.locator(".experiment-form")
        await form.locator(".exp-agents").fill(f"{NAMESPACE}/{SLOW}")
        await form.get_by_role("button", name="Start the experiment").click()
        await expect(tab.locator("#status")).to_contain_text("Experiment running", timeout=15_000)
        await tab.get_by_role("button", name="Cancel the experiment").click()
        await expect(tab.locator("#experiment p[data-status=cancelled]")).to_have_count(1, timeout=15_000)
    finally:
        agents_seen.release.set()
    async with pool.acquire() as conn:
        status = await conn.fetchval(
            "SELECT x.status FROM kagent_fork.experiment x JOIN session s ON s.id = x.source_session_id "
            "WHERE s.user_id = $1",
            user,
        )  # fmt: skip
    assert status == "cancelled"
    assert problems == []


async def test_a_refused_experiment_shows_the_services_reason_and_writes_nothing(
    page: tuple[Page, list[str]], page_settings: Settings, database_url: str, pool: asyncpg.Pool
) -> None:
    tab, problems = page
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=3, user_id=user, name="Too dear")
    # a service whose cost gate is low: every experiment on this conversation is over it
    config = dataclasses.replace(page_settings, whatif_max_context_tokens=20)
    before = await table_fingerprint(pool)
    with live_server(create_app(config, database_url)) as url:
        await open_as(tab, url, user)
        await tab.locator("#sessions li").first.click()
        turn = tab.locator("#turns > li.turn").nth(1)
        await turn.get_by_role("button", name="Experiment").click()
        await turn.locator(".exp-agents").fill(f"{NAMESPACE}/{V1}")
        await turn.locator(".exp-turns").select_option("all")
        await turn.get_by_role("button", name="Start the experiment").click()
        refusal = turn.locator(".exp-refusal")
        await expect(refusal).to_contain_text("Not started: the contexts of every branch's turns are about")
        await expect(refusal).to_contain_text("over the limit of 20: each is sent to the agent's model")
        await expect(tab.locator("#status")).to_contain_text("Starting the experiment failed: the contexts")
        await expect(tab.locator("#status")).to_have_class("error")
    assert await table_fingerprint(pool) == before
    async with pool.acquire() as conn:
        assert await conn.fetchval(
            "SELECT count(*) FROM kagent_fork.experiment WHERE source_session_id = $1", conv.session_id
        ) == 0  # fmt: skip
    assert all("422" in p for p in problems)  # the browser logs the refused request itself


async def test_fork_before_and_after_a_turn_make_the_forks_they_say(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool
) -> None:
    tab, problems = page
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True, user_id=user, name="Where to fork")
    await open_as(tab, page_url, user)
    await tab.locator("#sessions li").first.click()
    turns = tab.locator("#turns > li.turn")
    await expect(turns).to_have_count(3)

    async def forked(label: str, turn: int) -> tuple[str | None, list[str | None]]:
        """Click `label` on a turn (from 0) of the source; the fork's boundary and its events' turns, as
        kagent's readers read the fork's events."""
        await tab.locator(f"#sessions li[data-id='{conv.session_id}']").click()
        await expect(tab.locator("#session-title")).to_have_text("Where to fork")
        await turns.nth(turn).get_by_role("button", name=label).click()
        await expect(tab.locator("#status")).to_contain_text("Forked: now showing the fork")
        fork_id = tab.url.split("session=")[1].split("&")[0]
        async with pool.acquire() as conn:
            boundary = await conn.fetchval(
                "SELECT rewind_before_invocation_id FROM kagent_fork.fork WHERE session_id = $1", fork_id
            )
            events = await kagent_reads.list_events_for_session_asc(conn, fork_id, user)
        return boundary, [kagent_reads.parse_event(e["data"]).invocation_id for e in events]

    ids = conv.invocation_ids
    # after the first reply: the chat ends with that reply (the fork before turn 2)
    boundary, invocations = await forked("Fork after this reply", 0)
    assert boundary == ids[1] and set(invocations) == {ids[0]}
    assert len(invocations) == len(conv.turns[0].event_ids)
    await expect(tab.locator("#notice")).to_contain_text("after turn 1's reply into this session")
    await expect(turns).to_have_count(1)
    # after the last reply: the whole chat
    boundary, invocations = await forked("Fork after this reply", 2)
    assert boundary is None and len(invocations) == len(conv.events)
    await expect(turns).to_have_count(3)
    # before turn 2: the same as after the first reply
    boundary, invocations = await forked("Fork before this turn", 1)
    assert boundary == ids[1] and set(invocations) == {ids[0]}
    # before turn 1: an empty chat
    boundary, invocations = await forked("Fork before this turn", 0)
    assert boundary == ids[0] and invocations == []
    await expect(tab.locator("#turns")).to_contain_text("No turns.")
    assert problems == []


async def test_the_turns_of_an_agent_without_invocation_ids_act_by_their_task(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool
) -> None:
    """An OpenAI Agents SDK session (captured from kagent-openai 0.10.4: no invocation ids): its turns show their
    questions and offer every action, which names the turn by its task; "Fork before this turn" on turn 3 makes
    the fork before turn 3's task, and the fork shows turns 1 and 2."""
    tab, problems = page
    fixture = await loaded(pool, "openai_3_turns")
    user, sid, asked = fixture["user"], fixture["session_id"], fixture["turns"]
    await open_as(tab, page_url, user)
    await tab.locator(f"#sessions li[data-id='{sid}']").click()
    turns = tab.locator("#turns > li.turn")
    await expect(turns).to_have_count(3)
    for i, turn in enumerate(asked):
        await expect(turns.nth(i)).to_contain_text(turn["question"])
    await expect(turns.nth(2).get_by_role("button", name="Experiment")).to_be_visible()
    await turns.nth(2).get_by_role("button", name="Fork before this turn").click()
    await expect(tab.locator("#status")).to_contain_text("Forked: now showing the fork")
    fork_id = tab.url.split("session=")[1].split("&")[0]
    async with pool.acquire() as conn:
        named = await conn.fetchrow(
            "SELECT rewind_before_invocation_id, rewind_before_task_id FROM kagent_fork.fork WHERE session_id = $1",
            fork_id,
        )
    assert named is not None and tuple(named) == (None, asked[2]["task_id"])
    await expect(turns).to_have_count(2)
    await expect(turns.nth(1)).to_contain_text(asked[1]["question"])
    assert problems == []


# --- issue 36: the grid's labels at any width, a session opened from far down, the words -------------------


async def _experiment_of_four_branches(page_url: str, user: str, session_id: str, turn: str) -> str:
    """An experiment of 2 agents x 2 repeats (4 branches) of one turn, started over HTTP and waited for."""
    import asyncio

    import httpx

    async with httpx.AsyncClient(base_url=page_url, headers={"X-User-Id": user}, timeout=30) as http:
        body = {"rewind_before_invocation_id": turn, "agents": [f"{NAMESPACE}/{V1}", f"{NAMESPACE}/{SLOW}"],
                "repeats": 2, "turns": 1}  # fmt: skip
        started = await http.post(f"/api/sessions/{session_id}/experiments", json=body)
        assert started.status_code == 202, started.text
        experiment_id: str = started.json()["data"]["experiment"]["id"]
        for _ in range(300):
            if (await http.get(f"/api/experiments/{experiment_id}")).json()["data"]["status"] != "running":
                return experiment_id
            await asyncio.sleep(0.1)
    raise AssertionError("the experiment never ended")


# How many lines each row label of the grid (Turn 2, Total) is laid out on, and how wide it is against its text.
LABEL_LINES = """() => [...document.querySelectorAll("table.experiment tr > th:first-child")]
  .filter((th) => th.textContent)
  .map((th) => {
    const r = document.createRange();
    r.selectNodeContents(th);
    const needs = r.getBoundingClientRect().width;
    return { text: th.textContent, lines: r.getClientRects().length, width: th.clientWidth, needs };
  })"""


async def test_the_grid_of_four_branches_keeps_its_row_labels_readable(
    browser: Browser, page_url: str, pool: asyncpg.Pool, agents_seen: Seen
) -> None:
    """Issue 36: with 4 branches (and on a phone) the first column was squeezed to a letter a line ('T o t a l')."""
    agents_seen.release.set()
    agents_seen.hold_on_turn = 0
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=2, tool_calls=True, user_id=user, name="Four branches")
    await _experiment_of_four_branches(page_url, user, conv.session_id, conv.invocation_ids[1])
    for width, height, name in ((1280, 800, "experiment-four"), (390, 844, "experiment-phone")):
        context = await browser.new_context(viewport={"width": width, "height": height}, is_mobile=width < 720)
        tab = await context.new_page()
        try:
            await tab.goto(f"{page_url}/ui/#session={conv.session_id}&user={user}")
            await expect(tab.locator("#session-title")).to_have_text("Four branches")
            await tab.get_by_role("button", name="Experiments").click()
            await tab.get_by_role("button", name="Show the grid").click()
            grid = tab.locator("#experiment table.experiment")
            await expect(grid.locator("thead th[data-col=b3]")).to_be_visible()
            labels = await tab.evaluate(LABEL_LINES)
            assert [label["text"] for label in labels] == ["Turn 2", "Total"], labels
            for label in labels:
                assert label["lines"] == 1 and label["width"] >= label["needs"], (width, label)
            # the labels stay in sight while the branches scroll sideways
            await tab.locator("#experiment .grid-scroll").evaluate("(box) => { box.scrollLeft = box.scrollWidth; }")
            box = await grid.locator("tfoot th").bounding_box()
            assert box is not None and 0 <= box["x"] < width / 2, box
            # an agent's totals over its repeats say "1 tool call" as everywhere else
            by_agent = await tab.locator("#experiment .by-agent").inner_text()
            assert "1 tool call," in by_agent and "1 tool calls" not in by_agent and "1 turns" not in by_agent
            assert by_agent.count("cost unknown") == 2  # no agent row for either: no price, not $0
            await tab.locator("#experiment .grid-scroll").evaluate("(box) => { box.scrollLeft = 0; }")
            await tab.locator("#experiment").scroll_into_view_if_needed()
            await shot(tab, name)
        finally:
            await context.close()


async def test_a_session_opened_from_far_down_a_long_list_is_brought_into_view(
    browser: Browser, page_url: str, pool: asyncpg.Pool
) -> None:
    """Issue 36: the transcript was left out of view (on a phone 2,500 px below, under the whole list)."""
    user = new_user()
    for i in range(40):
        await seed(pool, dialect="v1", turns=2, user_id=user, name=f"Chat {i:02d}")
    for width, height in ((1280, 800), (390, 844)):
        context = await browser.new_context(viewport={"width": width, "height": height}, is_mobile=width < 720)
        tab = await context.new_page()
        try:
            await open_as(tab, page_url, user)
            await expect(tab.locator("#sessions li")).to_have_count(40)
            last = tab.locator("#sessions li").last
            await last.scroll_into_view_if_needed()
            assert await tab.evaluate("window.scrollY") > height / 2  # far down the list
            name = (await last.inner_text()).splitlines()[0]
            await last.click()
            await expect(tab.locator("#session-title")).to_have_text(name)
            await expect(tab.locator("#session-title")).to_be_in_viewport()
            await expect(tab.locator("#turns > li.turn").first).to_be_in_viewport()
            top = await tab.evaluate("document.getElementById('session-pane').getBoundingClientRect().top")
            assert -1 <= top <= height / 2, (width, top)
            if width < 720:
                await shot(tab, "phone-opened")
        finally:
            await context.close()


async def test_the_whatif_field_and_a_whole_copy_in_the_tree_say_what_they_mean(
    browser: Browser, page_url: str, pool: asyncpg.Pool
) -> None:
    """Issue 36: the What-if agent field's placeholder was cut off; a whole-chat fork made with a mistyped turn
    showed in the tree as 'forked at a turn its parent no longer shows'."""
    import httpx

    user = new_user()
    conv = await seed(pool, dialect="v1", turns=2, user_id=user, name="Mistyped")
    async with httpx.AsyncClient(base_url=page_url, headers={"X-User-Id": user}, timeout=30) as http:
        copied = await http.post(
            f"/api/sessions/{conv.session_id}/fork", json={"rewind_before_invocation_id": "e-mistyped", "name": "All"}
        )
    assert copied.status_code == 201 and not copied.json()["data"]["fork"]["boundary_found"], copied.text
    fits = """(input) => {
      const style = getComputedStyle(input);
      const ctx = document.createElement("canvas").getContext("2d");
      ctx.font = style.font;
      const has = input.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      return { needs: ctx.measureText(input.placeholder).width, has };
    }"""
    for width, height in ((1280, 800), (390, 844)):
        context = await browser.new_context(viewport={"width": width, "height": height}, is_mobile=width < 720)
        tab = await context.new_page()
        try:
            await tab.goto(f"{page_url}/ui/#session={conv.session_id}&user={user}")
            await expect(tab.locator("#session-title")).to_have_text("Mistyped")
            field = await tab.locator("#whatif-agent").evaluate(fits)
            assert field["needs"] <= field["has"], (width, field)
            await expect(tab.locator("#tab-transcript")).to_contain_text("empty: this session's own")
            await tab.get_by_role("button", name="Fork tree").click()
            tree = tab.locator("#tree")
            await expect(tree).to_contain_text(
                "forked whole: a copy of the whole chat (the turn asked for, e-mistyped, was not in it)"
            )
            assert "no longer shows" not in await tree.inner_text()
        finally:
            await context.close()


async def test_the_experiment_form_shows_each_agents_tools_and_asks_for_live(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool
) -> None:
    """Issue 34: the form's dry run shows the agents' tools by class before anything starts; an agent that could
    act is refused under the default policy (nothing written), and starts once live is chosen."""
    tab, problems = page
    dialogs: list[str] = []
    tab.on("dialog", lambda dialog: dialogs.append(dialog.message))
    user = new_user()
    await seed(pool, dialect="v1", turns=3, user_id=user, name="Which tools may run?")
    ref = f"{NAMESPACE}/{FORGETFUL}"
    with classified_servers() as servers:
        config = {"http_tools": [{"params": {"url": servers.http_url}, "require_approval": ["delete_pod"]}]}
        await pool.execute(
            "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), 'Declarative', "
            "$2::json) ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config, deleted_at = NULL",
            agent_row_id(ref), json.dumps(config),
        )  # fmt: skip
        try:
            await open_as(tab, page_url, user)
            await tab.locator("#sessions li").first.click()
            turn = tab.locator("#turns > li.turn").nth(1)
            await turn.get_by_role("button", name="Experiment").click()
            form = turn.locator(".experiment-form")
            await expect(form.locator(".exp-tools")).to_have_value("replay")  # the safe policy by default
            await expect(form.locator(".exp-known")).to_contain_text(ref)  # kagent's agents, named to pick from
            assert ref in await tab.locator("#known-agents option").evaluate_all("os => os.map((o) => o.value)")
            await form.locator(".exp-agents").fill(ref)
            before = await table_fingerprint(pool)
            await form.get_by_role("button", name="Start the experiment").click()
            await expect(form.locator(".exp-refusal")).to_contain_text(f"Not started: tools: the agent {ref} (")
            arms = form.locator(".exp-arms")
            await expect(arms).to_contain_text(  # no operator vouched for the test server: nothing only reads
                f"{ref}: asks delete_pod; acts count_widgets, get_pods, k8s_get_events, restart_everything, "
                "scale_deployment"
            )
            assert dialogs == []  # refused before any question
            assert await table_fingerprint(pool) == before
            # live, chosen: the classes are in the question, then it starts
            await form.locator(".exp-tools").select_option("live")
            await form.get_by_role("button", name="Start the experiment").click()
            grid = tab.locator("#experiment table.experiment")
            await expect(grid).to_be_visible(timeout=15_000)
            assert "run their tools for real" in dialogs[-1] and "acts count_widgets" in dialogs[-1]
            await expect(tab.locator("#experiment .exp-policy")).to_contain_text("Tools: live, every tool ran for real")
            await expect(tab.locator("#status")).to_have_text("Experiment completed", timeout=30_000)
        finally:
            await pool.execute("DELETE FROM agent WHERE id = $1", agent_row_id(ref))
    assert problems == []


async def test_the_grid_keeps_one_branch_or_discards_them_all_and_undoes_it(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool
) -> None:
    """Issue 36: an experiment's branches flooded the chat list. On its grid, "Keep this branch" hides every other
    branch's fork, "Discard the branches" hides them all, "Undo the discard" brings them back: the page's session
    list and kagent's own listing both follow."""
    import asyncio

    import httpx

    tab, problems = page
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=2, tool_calls=True, user_id=user, name="Pick the winner")
    async with httpx.AsyncClient(base_url=page_url, headers={"X-User-Id": user}, timeout=30) as http:
        body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [f"{NAMESPACE}/{V1}"], "repeats": 3}
        started = await http.post(f"/api/sessions/{conv.session_id}/experiments", json=body)
        assert started.status_code == 202, started.text
        experiment = started.json()["data"]["experiment"]
        for _ in range(300):
            if (await http.get(f"/api/experiments/{experiment['id']}")).json()["data"]["status"] != "running":
                break
            await asyncio.sleep(0.1)
    forks = [b["session_id"] for b in experiment["branches"]]

    async def kagent_lists() -> set[str]:
        async with pool.acquire() as conn:
            return {r["id"] for r in await kagent_reads.list_sessions(conn, user)}

    await tab.goto(f"{page_url}/ui/#session={conv.session_id}&user={user}")
    await expect(tab.locator("#session-title")).to_have_text("Pick the winner")
    sessions = tab.locator("#sessions li[data-id]")
    await expect(sessions).to_have_count(4)  # the source and its three branches
    await tab.get_by_role("button", name="Experiments").click()
    await tab.get_by_role("button", name="Show the grid").click()
    grid = tab.locator("#experiment table.experiment")
    await expect(grid.locator("thead th[data-col=b2]")).to_be_visible()
    await expect(grid.get_by_role("button", name="Keep this branch")).to_have_count(3)
    await expect(tab.locator("#experiment").get_by_role("button", name="Discard the branches")).to_be_visible()

    # keep the second branch: the two others leave both lists, their columns say so
    await grid.locator("thead th[data-col=b1]").get_by_role("button", name="Keep this branch").click()
    await expect(tab.locator("#status")).to_have_text(
        "2 branches discarded: hidden from the chat list (Undo the discard brings them back)"
    )
    await expect(sessions).to_have_count(2)
    assert await kagent_lists() == {conv.session_id, forks[1]}
    for col, fate in (("b0", "discarded"), ("b1", "kept"), ("b2", "discarded")):
        await expect(grid.locator(f"thead th[data-col={col}]")).to_have_attribute("data-fate", fate)
    await expect(grid.locator("thead th[data-col=b1]")).to_contain_text("kept (the others discarded)")
    await expect(grid.locator("thead th[data-col=b0]")).to_contain_text("discarded: hidden from the chat list")
    await expect(grid.locator("thead th[data-col=b0]").get_by_role("button", name="Open the fork")).to_have_count(0)
    await expect(grid.get_by_role("button", name="Keep this branch")).to_have_count(0)
    await expect(tab.locator("#experiment p.discard")).to_contain_text(
        f"2 branches discarded: hidden from the chat list · kept: {NAMESPACE}/{V1} #2"
    )
    await tab.locator("#experiment").scroll_into_view_if_needed()
    await shot(tab, "experiment-discard")

    # undo: all three back; then discard them all, and undo again
    await tab.get_by_role("button", name="Undo the discard").click()
    await expect(tab.locator("#status")).to_have_text("Discard undone: 2 branches back in the chat list")
    await expect(sessions).to_have_count(4)
    assert await kagent_lists() == {conv.session_id, *forks}
    await tab.get_by_role("button", name="Discard the branches").click()
    await expect(tab.locator("#status")).to_contain_text("3 branches discarded")
    await expect(sessions).to_have_count(1)
    assert await kagent_lists() == {conv.session_id}
    await expect(grid.locator("thead th[data-fate=discarded]")).to_have_count(3)
    await tab.get_by_role("button", name="Undo the discard").click()
    await expect(tab.locator("#status")).to_have_text("Discard undone: 3 branches back in the chat list")
    await expect(sessions).to_have_count(4)
    assert await kagent_lists() == {conv.session_id, *forks}
    assert problems == []


async def test_a_judged_experiment_heads_its_columns_with_the_verdict_and_takes_blind_votes(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool
) -> None:
    """Issue 35: an experiment started from the page with a judge; each branch's column headed by what the judge
    said (the reasons a click away), the verdict's lines under the grid; a person's blind vote shows A and B
    without names until the vote, then names them, and is counted apart from the judge's."""
    from tests.support.a2a_agent import JUDGE, MARKER_AGENT

    tab, problems = page
    user = new_user()
    await seed(pool, dialect="v1", turns=2, user_id=user, name="Judge me")
    await open_as(tab, page_url, user)
    await tab.locator("#sessions li").first.click()
    await tab.locator("#turns > li.turn").nth(1).get_by_role("button", name="Experiment").click()
    form = tab.locator(".experiment-form")
    await form.locator(".exp-agents").fill(f"{NAMESPACE}/{MARKER_AGENT}, {NAMESPACE}/{V1}")
    await form.locator(".exp-judge").fill(f"{NAMESPACE}/{JUDGE}")
    await form.get_by_role("button", name="Start the experiment").click()
    await expect(tab.locator("#experiment p[data-status=completed]")).to_have_count(1, timeout=60_000)
    heads = tab.locator("#experiment thead .verdict")
    await expect(heads).to_have_count(2)
    await expect(heads.nth(0)).to_contain_text("Judge: better than the source")
    await expect(heads.nth(1)).to_contain_text("Judge: as good as the source")
    await heads.nth(0).locator("summary").click()
    await expect(heads.nth(0).locator("details")).to_contain_text("the marker decides")
    await expect(tab.locator(".verdict-lines li").first).to_contain_text(
        f"{NAMESPACE}/{MARKER_AGENT}: inconclusive against the source over 1 judged continuations: 1 better"
    )
    await expect(tab.locator(".verdict-headline")).to_contain_text("No agent is shown better than the source yet")
    await expect(tab.locator(".judge-info")).to_contain_text(
        f"Judge: {NAMESPACE}/{JUDGE}, model unknown; criteria: the default. Its two orders agreed in 3 of 3 pairs."
    )
    await shot(tab, "experiment-verdict")

    await tab.get_by_role("button", name="Vote blind yourself").click()
    await expect(tab.locator("#experiment h3")).to_contain_text("Blind vote: pair 1 of 3")
    shown = await tab.locator("#experiment").inner_text()
    assert MARKER_AGENT not in shown and f"{NAMESPACE}/" not in shown and "source" not in shown.lower()
    # laid out evenly (issue 47: A was about 70 px wide at 1400 px): side by side at half each on a wide screen,
    # one above the other on a phone
    sides = tab.locator("#experiment td.blind-a"), tab.locator("#experiment td.blind-b")
    for width, height in ((1400, 900), (390, 844)):
        await tab.set_viewport_size({"width": width, "height": height})
        a, b = [await side.bounding_box() for side in sides]
        assert a and b, "both continuations shown"
        if width > 720:
            assert abs(a["width"] - b["width"]) <= 2 and a["width"] > 500 and a["y"] == b["y"], (a, b)
        else:
            assert a["width"] >= 300 and b["width"] >= 300 and b["y"] > a["y"], (a, b)
        await tab.locator("#experiment h3").scroll_into_view_if_needed()
        await shot(tab, f"experiment-vote-{width}")
    await tab.set_viewport_size({"width": 1280, "height": 800})
    await tab.get_by_role("button", name="Tie").click()
    await expect(tab.locator(".vote-reveal")).to_contain_text("A was ")
    await tab.get_by_role("button", name="Next pair").click()
    await expect(tab.locator("#experiment h3")).to_contain_text("pair 2 of 3")
    await tab.get_by_role("button", name="Stop voting").click()
    await expect(tab.locator(".vote-lines li")).to_have_count(1, timeout=15_000)
    await expect(tab.locator(".vote-lines li").first).to_contain_text("inconclusive against the source")
    assert problems == []
