"""The explorer page's "Save as a case" (docs/suites.md) in Debian's Chromium: a turn saved into a new suite, then
another into the same suite, each answered in words beside its turn and kept as the API keeps a case."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Page, expect

from service.app import create_app
from service.config import Settings
from tests.helpers import new_user, seed
from tests.support.live_server import live_server
from tests.test_explorer_page import browser, open_as, page, shot

__all__ = ["browser", "page"]  # the browser fixtures, shared with the page's other tests


@pytest.fixture(scope="module")
def suites_url(settings: Settings, database_url: str, pool: asyncpg.Pool) -> Iterator[str]:
    with live_server(create_app(settings, database_url)) as url:
        yield url


async def _cases(pool: asyncpg.Pool, user: str) -> list[tuple[str, str, str, str]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT s.name, c.session_id, c.rewind_before_invocation_id, c.turns FROM kagent_fork.suite s "
            "JOIN kagent_fork.suite_case c ON c.suite_id = s.id WHERE s.user_id = $1 ORDER BY c.ordinal",
            user,
        )
    return [tuple(r) for r in rows]


async def test_save_turns_as_cases_of_a_new_suite_then_of_the_same(
    page: tuple[Page, list[str]], suites_url: str, pool: asyncpg.Pool, client: Any
) -> None:
    tab, problems = page
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=3, user_id=user, name="Which pods are failing?")
    await open_as(tab, suites_url, user)
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
