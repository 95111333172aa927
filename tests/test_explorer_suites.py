"""The explorer page's "Save as a case" (docs/suites.md) in Debian's Chromium: a turn saved into a new suite, then
another into the same suite, each answered in words beside its turn and kept as the API keeps a case; and a suite's
run started from its Suites tab, followed while it runs, its verdict per agent, plot and cases read there, at 1400
and 390 px."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
from playwright.async_api import Browser, Locator, Page, expect

from service.kagent.store.agents import agent_row_id
from tests.helpers import new_user, seed
from tests.support.a2a_agent import FLAWED_AGENT, MARKER_AGENT, SLOW_JUDGE, V1, Seen
from tests.test_experiments import ref
from tests.test_explorer_page import agents_seen, browser, open_as, page, page_url, served, shot

# the browser fixtures, and the live service with real A2A agents, shared with the page's other tests
__all__ = ["agents_seen", "browser", "page", "page_url", "served"]


async def _cases(pool: asyncpg.Pool, user: str) -> list[tuple[str, str, str, str]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT s.name, c.session_id, c.rewind_before_invocation_id, c.turns FROM kagent_fork.suite s "
            "JOIN kagent_fork.suite_case c ON c.suite_id = s.id WHERE s.user_id = $1 ORDER BY c.ordinal",
            user,
        )
    return [tuple(r) for r in rows]


async def test_save_turns_as_cases_of_a_new_suite_then_of_the_same(
    page: tuple[Page, list[str]], page_url: str, pool: asyncpg.Pool, client: Any
) -> None:
    tab, problems = page
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=3, user_id=user, name="Which pods are failing?")
    await open_as(tab, page_url, user)
    await tab.locator("#sessions li").first.click()
    turns = tab.locator("#turns > li.turn")
    await expect(turns).to_have_count(3)

    # the first case: the user has no suite yet, so the form asks for a new one's name
    await turns.nth(1).get_by_role("button", name="Save as a case").click()
    beside = turns.nth(1).locator(".turn-result")
    await expect(beside.get_by_label("The new suite's name")).to_be_visible()
    await beside.get_by_role("button", name="Save the case").click()
    await expect(tab.locator("#status")).to_have_text("Saving the case failed: name the new suite")
    await beside.get_by_label("The new suite's name").fill("failing pods")
    await beside.get_by_label("What a run replays").select_option("all")
    await beside.get_by_role("button", name="Save the case").click()
    await expect(beside).to_contain_text("Saved turn 2 as case 1 of the suite “failing pods” (1 case).")
    await shot(tab, "save-case")

    # the second: the suite is offered, and the case joins it
    await turns.nth(2).get_by_role("button", name="Save as a case").click()
    beside = turns.nth(2).locator(".turn-result")
    suite = beside.get_by_label("Suite", exact=True)
    await expect(suite.locator("option")).to_have_text(["failing pods (1 case)", "a new suite"])
    await expect(beside.get_by_label("The new suite's name")).to_be_hidden()
    await beside.get_by_role("button", name="Save the case").click()
    await expect(beside).to_contain_text("Saved turn 3 as case 2 of the suite “failing pods” (2 cases).")

    assert await _cases(pool, user) == [
        ("failing pods", conv.session_id, conv.invocation_ids[1], "all"),
        ("failing pods", conv.session_id, conv.invocation_ids[2], "1"),
    ]

    # the Suites tab: the suite and its cases in order, its file, a case removed
    await tab.get_by_role("button", name="Suites", exact=True).click()
    suite = tab.locator("#suites > li[data-suite]")
    await expect(suite).to_have_count(1)
    await expect(suite.locator("b").first).to_have_text("failing pods (2 cases)")
    cases = suite.locator(".suite-cases > li")
    await expect(cases).to_have_count(2)
    await expect(cases.nth(0)).to_contain_text(
        f"1. “{conv.turns[1].user_text}” · kagent/k8s-agent · every turn from there"
    )
    await expect(cases.nth(1)).to_contain_text("· 1 turn")
    await suite.get_by_role("button", name="Show as YAML").click()
    await expect(suite.locator(".suite-file")).to_contain_text("kind: kagent-fork/suite")
    await expect(suite.locator(".suite-file")).to_contain_text(f"rewind_before_invocation_id: {conv.invocation_ids[1]}")
    await shot(tab, "suites")
    await cases.nth(0).get_by_role("button", name="Remove").click()
    await expect(tab.locator("#status")).to_have_text("Case 1 removed from “failing pods” (1 case left)")
    await expect(cases).to_have_count(1)
    assert await _cases(pool, user) == [("failing pods", conv.session_id, conv.invocation_ids[2], "1")]
    assert problems == []


# --- issue 49, item 5: a suite's run from the page ---------------------------------------------------------------


async def _open_run_of(tab: Page, url: str, user: str) -> Locator:
    """The page as `user`, a chat opened, the Suites tab, and the runs of the user's one suite."""
    await open_as(tab, url, user)
    await tab.locator("#sessions li").first.click()
    await tab.get_by_role("button", name="Suites", exact=True).click()
    suite = tab.locator("#suites > li[data-suite]")
    await suite.get_by_role("button", name="Runs", exact=True).click()
    return suite


async def test_a_suite_run_from_the_page_its_progress_verdict_and_plot(
    page: tuple[Page, list[str]], browser: Browser, page_url: str, pool: asyncpg.Pool, client: Any, agents_seen: Seen
) -> None:
    """Five chats with v1-agent; a run of marker-agent (better by the judge's rule) and flawed-agent (worse), with the
    control (v1-agent again: inconclusive), judged by the judge that waits to be released: the page shows the run's
    progress and its Cancel while it runs, then the verdict per agent, the control marked, the plot and the cases."""
    tab, problems = page
    await tab.set_viewport_size({"width": 1400, "height": 900})
    user = new_user()
    convs = [
        await seed(pool, dialect="v1", turns=2, user_id=user, name=f"Chat {i}", agent_id=agent_row_id(ref(V1)))
        for i in range(5)
    ]
    cases = [{"session_id": c.session_id, "rewind_before_invocation_id": c.invocation_ids[1]} for c in convs]
    made = await client.post("/api/suites", json={"name": "five chats", "cases": cases}, headers={"X-User-Id": user})
    assert made.status_code == 201, made.text
    suite = await _open_run_of(tab, page_url, user)
    form = suite.locator(".run-form")
    await expect(suite.locator(".run-list")).to_contain_text("No runs of this suite yet.")

    # the dry run: refused without agents, then the plan
    await form.get_by_label("Judge").fill(ref(SLOW_JUDGE))
    await form.get_by_role("button", name="Dry run").click()
    await expect(form.locator(".run-refusal")).to_contain_text("Would be refused: agents: name the agents")
    await form.get_by_label("Agents").fill(f"{ref(MARKER_AGENT)}\n{ref(FLAWED_AGENT)}")
    await form.locator(".run-control").check()
    await form.get_by_role("button", name="Dry run").click()
    await expect(form.locator(".run-plan")).to_contain_text("Dry run (nothing was written): 5 cases, 15 branches")
    assert await pool.fetchval("SELECT count(*) FROM kagent_fork.suite_run WHERE user_id = $1", user) == 0

    # started: followed while the judge is held
    agents_seen.judge_release.clear()
    try:
        await form.get_by_role("button", name="Start the run").click()
        run = suite.locator(".suite-run")
        await expect(run.locator("h3[data-status=running]")).to_be_visible()
        await expect(run.locator(".run-progress")).to_contain_text(
            re.compile(r"[1-9]\d* of 15 branches ended, 0 of 5 cases judged")
        )
        await expect(run.locator("table.run-cases tr[data-status=running]").first).to_be_visible()
        await expect(run.get_by_role("button", name="Cancel the run")).to_be_visible()
        await expect(run.locator(".run-money")).to_have_text("Spent $0.00; estimate unknown")
        await expect(run.locator("table.run-verdict")).to_have_count(0)  # nothing judged: no table yet
        await run.locator("h3").evaluate("h => h.scrollIntoView({ block: 'start' })")
        await shot(tab, "suite-run-running")
    finally:
        agents_seen.judge_release.set()
    await expect(run.locator("h3[data-status=completed]")).to_be_visible(timeout=120_000)
    await expect(run.get_by_role("button", name="Cancel the run")).to_have_count(0)
    await expect(run.locator(".run-progress")).to_contain_text("15 of 15 branches ended, 5 of 5 cases judged")
    await expect(run.locator(".run-progress progress")).to_have_attribute("value", "15")

    # the verdict per agent, the control marked as the noise floor
    rows = run.locator("table.run-verdict tbody tr")
    await expect(rows).to_have_count(3)
    outcomes = {ref(MARKER_AGENT): "better", ref(FLAWED_AGENT): "worse", ref(V1): "inconclusive"}
    for agent, outcome in outcomes.items():
        row = run.locator(f'table.run-verdict tr[data-agent="{agent}"]')
        await expect(row.locator("td.outcome")).to_have_text(outcome)
        await expect(row.locator("td[data-col=cases]")).to_have_text("5")
    await expect(run.locator("table.run-verdict tr.control")).to_contain_text("control: the noise floor")
    await expect(run.locator(f'tr[data-agent="{ref(MARKER_AGENT)}"] td[data-col=record]')).to_have_text("5 / 0 / 0")
    await expect(run.locator(".verdict-headline")).to_contain_text(
        f"{ref(MARKER_AGENT)}: better than the source over 5"
    )
    await expect(run.locator(".verdict-lines li")).to_have_count(3)
    # the plot: the SVG the API draws, fetched with the user's header and drawn
    plot = run.locator("img.run-plot")
    await expect(plot).to_be_visible()
    await tab.wait_for_function("() => document.querySelector('.suite-run img.run-plot').naturalWidth > 0")
    # the cases: each one's best, and its chat a click away
    case_rows = run.locator("table.run-cases tbody tr")
    await expect(case_rows).to_have_count(5)
    for i in range(5):
        await expect(case_rows.nth(i).locator("td").nth(1)).to_have_text(ref(MARKER_AGENT))
    # a case's branches, read through the run (they are the run's own user's rows): its table, as Markdown
    branches = await case_rows.first.locator("a.case-branches").get_attribute("href")
    assert branches is not None
    table = await tab.evaluate("async (u) => (await fetch(u)).text()", branches)
    assert table.startswith("# Experiment") and ref(FLAWED_AGENT) in table, table[:300]
    await expect(suite.locator(".run-list > li[data-status=completed]")).to_have_count(1)
    await run.locator("h3").evaluate("h => h.scrollIntoView({ block: 'start' })")
    await shot(tab, "suite-run-1400")
    assert all("422" in p for p in problems), problems  # the browser logs the refused dry run itself

    # at 390 px: the same run, nothing wider than the phone
    context = await browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        phone = await context.new_page()
        phone_suite = await _open_run_of(phone, page_url, user)
        await phone_suite.get_by_role("button", name="Show the run").click()
        phone_run = phone_suite.locator(".suite-run")
        await expect(phone_run.locator("h3[data-status=completed]")).to_be_visible()
        await expect(phone_run.locator("img.run-plot")).to_be_visible()
        assert await phone.evaluate("document.documentElement.scrollWidth") <= 390
        await phone_run.locator("h3").evaluate("h => h.scrollIntoView({ block: 'start' })")
        await shot(phone, "suite-run-390")
    finally:
        await context.close()

    # another run, cancelled from the page while its judge is held
    agents_seen.judge_release.clear()
    try:
        await form.get_by_label("Agents").fill(ref(MARKER_AGENT))
        await form.locator(".run-control").uncheck()
        await form.get_by_role("button", name="Start the run").click()
        await expect(run.locator("h3[data-status=running]")).to_be_visible()
        await run.get_by_role("button", name="Cancel the run").click()
        await expect(run.locator("h3[data-status=cancelled]")).to_be_visible()
        await expect(run.get_by_role("button", name="Cancel the run")).to_have_count(0)
        await expect(tab.locator("#status")).to_have_text("Run cancelled")
    finally:
        agents_seen.judge_release.set()
    await expect(suite.locator(".run-list > li")).to_have_count(2)
    await expect(suite.locator(".run-list > li").first).to_have_attribute("data-status", "cancelled")
