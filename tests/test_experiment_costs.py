"""What a continuation cost, one definition: compare and an experiment's grid read the same figures on the same
branch (operations/continuation.py); and the money, each column priced by genai-prices for the model its agent's
configuration names in kagent's `agent` table, or "unknown" (docs/experiments.md, "What a continuation cost")."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import asyncpg
import genai_prices
import msgspec
import pytest

from service.agents.replay import grid
from service.agents.replay.figures import TurnFigures
from service.kagent.store.agents import ModelConfig, agent_row_id
from service.operations.prices import usd_text
from tests.helpers import seed
from tests.support.a2a_agent import APPROVAL_V1, FORGETFUL, JUDGE, V1
from tests.test_experiments import agents, eclient, ref, start, until  # noqa: F401 (fixtures)


@pytest.fixture
async def agent_rows(pool: asyncpg.Pool) -> AsyncIterator[Any]:
    """Writes kagent `agent` rows as kagent's controller does, and takes them away after the test (the agents'
    names are shared by the module's tests)."""
    written: list[str] = []

    async def write(agent_ref: str, model: dict[str, str] | None) -> None:
        config = None if model is None else json.dumps({"model": model, "instruction": "i", "http_tools": []})
        await pool.execute(
            "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), 'Declarative', "
            "$2::json) ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config, deleted_at = NULL",
            agent_row_id(agent_ref), config,
        )  # fmt: skip
        written.append(agent_row_id(agent_ref))

    yield write
    await pool.execute("DELETE FROM agent WHERE id = ANY($1::text[])", written)


async def test_compare_and_the_grid_agree_on_the_same_branch(eclient: Any, pool: asyncpg.Pool) -> None:  # noqa: F811
    conv = await seed(pool, dialect="v1", turns=4, tool_calls=True, metadata_style="kagent")
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(V1)], "turns": "all"}
    r = await start(eclient, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    done = await until(eclient, r.json()["data"]["experiment"]["id"], conv.user_id)
    assert done["status"] == "completed", done
    (branch,) = done["branches"]
    path = f"/api/sessions/{conv.session_id}/compare/{branch['session_id']}"
    compared = (await eclient.get(path, headers={"X-User-Id": conv.user_id})).json()["data"]
    assert compared["common_turns"] == 1
    for side, column in ((compared["left"], done["source"]), (compared["right"], branch)):
        totals = column["totals"]
        assert totals["turns"] == 3 and side["turns_after"] == 3
        assert sum(side["tool_calls"].values()) == totals["tool_calls"] > 0
        assert side["total_tokens"] == totals["total_tokens"] > 0
        assert side["duration_seconds"] == totals["duration_seconds"] > 0
    # turn by turn too: the same events, the same figures
    for row, source_turn, branch_turn in zip(
        compared["aligned"], done["source"]["turns"], branch["turns"], strict=True
    ):
        for side, turn in ((row["left"], source_turn), (row["right"], branch_turn)):
            assert (side["tool_calls"], side["total_tokens"], side["duration_seconds"]) == (
                turn["tool_calls"], turn["total_tokens"], turn["duration_seconds"],
            )  # fmt: skip


async def _usage_of_fork(pool: asyncpg.Pool, fork_id: str, kept: list[str]) -> list[tuple[int, int]]:
    """Each model call of the branch's own turns, read here from its events' JSON (not through the service)."""
    rows = await pool.fetch("SELECT data FROM event WHERE session_id = $1 ORDER BY created_at, id", fork_id)
    calls = []
    for r in rows:
        doc = json.loads(r["data"])
        usage = doc.get("usage_metadata") or {}
        if doc.get("invocation_id") in kept or not usage:
            continue
        calls.append((usage.get("prompt_token_count", 0), usage.get("candidates_token_count", 0)))
    return calls


async def test_each_column_is_priced_for_its_agents_model_or_unknown(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agent_rows: Any,
) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True, metadata_style="kagent")
    await agent_rows(ref(V1), {"type": "openai", "model": "gpt-4o", "base_url": ""})
    await agent_rows(ref(APPROVAL_V1), {"type": "openai", "model": "no-such-model-from-anyone"})
    await agent_rows("kagent/k8s-agent", {"type": "ollama", "model": "llama3.2"})  # the source's: a local model
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "turns": "all",
            "agents": [ref(V1), ref(APPROVAL_V1), ref(FORGETFUL)]}  # fmt: skip
    r = await start(eclient, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    experiment_id = r.json()["data"]["experiment"]["id"]
    done = await until(eclient, experiment_id, conv.user_id)
    assert done["status"] == "completed", done
    priced, unknown_model, no_row = done["branches"]

    calls = await _usage_of_fork(pool, priced["session_id"], conv.invocation_ids)
    assert len(calls) == 4  # two turns, two model calls each
    expected = sum(
        (genai_prices.calc_price(genai_prices.Usage(input_tokens=i, output_tokens=o), "gpt-4o", provider_id="openai")
         .total_price for i, o in calls),
        Decimal(0),
    )  # fmt: skip
    totals = priced["totals"]
    assert totals["model"] == "gpt-4o" and totals["cost_usd"] == pytest.approx(float(expected), abs=1e-6)
    assert totals["cost_usd"] > 0
    assert (totals["input_tokens"], totals["output_tokens"]) == (sum(i for i, _ in calls), sum(o for _, o in calls))
    assert [c for t in priced["turns"] for c in t["model_usage"]] == [list(c) for c in calls]

    # a model the table does not know: unknown, but the model is named; no agent row: unknown, no model
    assert unknown_model["totals"]["cost_usd"] is None
    assert unknown_model["totals"]["model"] == "no-such-model-from-anyone"
    assert unknown_model["totals"]["total_tokens"] == totals["total_tokens"]  # the same agent's tokens, unpriced
    assert no_row["totals"]["cost_usd"] is None and no_row["totals"]["model"] is None
    # the source's agent runs a local model: no price per token, so unknown
    assert done["source"]["totals"]["model"] == "llama3.2" and done["source"]["totals"]["cost_usd"] is None

    table = (
        await eclient.get(f"/api/experiments/{experiment_id}?format=markdown", headers={"X-User-Id": conv.user_id})
    ).text
    (row,) = [line for line in table.splitlines() if line.startswith("| **cost (USD)**")]
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert cells == ["unknown (llama3.2)", f"{totals['cost_text']} (gpt-4o)", "unknown (no-such-model-from-anyone)",
                     "unknown"]  # fmt: skip
    assert totals["cost_text"] == usd_text(totals["cost_usd"]) and no_row["totals"]["cost_text"] == "unknown"


async def test_with_repeats_the_price_spreads_only_when_every_repeat_is_known(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agent_rows: Any,
) -> None:
    conv = await seed(pool, dialect="v1", turns=2, tool_calls=True, metadata_style="kagent")
    await agent_rows(ref(V1), {"type": "anthropic", "model": "claude-sonnet-4-5"})
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(V1), ref(FORGETFUL)], "repeats": 2}
    r = await start(eclient, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    done = await until(eclient, r.json()["data"]["experiment"]["id"], conv.user_id)
    assert done["status"] == "completed", done
    costs = [b["totals"]["cost_usd"] for b in done["branches"] if b["agent_ref"] == ref(V1)]
    assert len(costs) == 2 and all(c is not None and c > 0 for c in costs)
    priced, unpriced = done["by_agent"]
    assert priced["agent_ref"] == ref(V1)
    assert priced["totals"]["cost_usd"] == {"mean": pytest.approx(sum(costs) / 2), "min": min(costs), "max": max(costs)}
    assert unpriced["agent_ref"] == ref(FORGETFUL) and "cost_usd" not in unpriced["totals"]
    path = f"/api/experiments/{done['id']}?format=markdown"
    table = (await eclient.get(path, headers={"X-User-Id": conv.user_id})).text
    (row,) = [line for line in table.splitlines() if line.startswith(f"| {ref(FORGETFUL)} |")]
    assert row.rstrip(" |").endswith("unknown")
    (row,) = [line for line in table.splitlines() if line.startswith(f"| {ref(V1)} |")]
    low, high = sorted(costs)
    text = f"{usd_text(sum(costs) / 2)} ({usd_text(low)}-{usd_text(high)})"
    assert priced["cost_text"] == text and row.rstrip(" |").endswith(f" {text}")  # never a float's own 9e-05
    # no float in exponent notation in the figures (the table's ids, e-<uuid> and uuids, may hold "4e-7")
    assert not re.search(r"\de-\d", row)


def _turn(model_calls: int, usage: list[tuple[int, int]] | None, state: str = "completed") -> TurnFigures:
    return TurnFigures(
        question="q", sent=None, answer="a", tool_calls={}, rejected_tool_calls=0, model_calls=model_calls,
        total_tokens=sum(i + o for i, o in usage or []), duration_seconds=1.0, state=state, model_usage=usage,
        input_tokens=None if usage is None else sum(i for i, _ in usage),
        output_tokens=None if usage is None else sum(o for _, o in usage),
    )  # fmt: skip


def test_tokens_not_reported_are_not_priced_zero() -> None:
    gpt = ModelConfig(type="openai", model="gpt-4o")
    priced = grid.totals([_turn(2, [(100, 10), (120, 30)]), _turn(1, [(50, 5)], state="working")], gpt)
    one = genai_prices.Usage(input_tokens=100, output_tokens=10)
    two = genai_prices.Usage(input_tokens=120, output_tokens=30)
    expected = sum(genai_prices.calc_price(u, "gpt-4o", provider_id="openai").total_price for u in (one, two))
    # the turn still working is not counted; each call priced on its own
    assert priced.cost_usd == pytest.approx(float(expected), abs=1e-6) and priced.turns == 1
    assert (priced.input_tokens, priced.output_tokens, priced.model) == (220, 40, "gpt-4o")
    # a model that answered without reporting tokens (a framework whose events carry no usage): unknown, not $0
    assert grid.totals([_turn(2, [])], gpt).cost_usd is None
    assert grid.totals([_turn(2, None)], gpt).input_tokens is None  # figured before tokens were counted
    no_events = msgspec.structs.replace(_turn(0, []), answer="an answer read from its A2A task")
    assert grid.totals([no_events], gpt).cost_usd is None  # LangGraph, CrewAI: an answer, no events, no usage
    nothing = msgspec.structs.replace(_turn(0, []), answer=None, state="failed")
    assert grid.totals([nothing], gpt).cost_usd == 0.0  # no model call and no answer at all: nothing to pay
    # an OpenAI-type model served elsewhere (a local or proxied model) is not OpenAI's price
    local = ModelConfig(type="openai", model="gpt-4o", base_url="http://vllm.local:8000/v1")
    assert grid.totals([_turn(2, [(100, 10)])], local).cost_usd is None
    for kind in ("ollama", "sap_ai_core", "something-new"):
        assert grid.totals([_turn(2, [(100, 10)])], ModelConfig(type=kind, model="gpt-4o")).cost_usd is None


def test_a_tiered_price_applies_to_each_call_not_to_the_sum() -> None:
    """gemini-2.5-pro's input costs more per token past 200k tokens in one request: two calls of 150k tokens are
    priced as two requests under the tier, not as one of 300k."""
    calls = [(150_000, 1_000), (150_000, 2_000)]
    gemini = ModelConfig(type="gemini", model="gemini-2.5-pro")

    def price(i: int, o: int) -> Decimal:
        usage = genai_prices.Usage(input_tokens=i, output_tokens=o)
        return genai_prices.calc_price(usage, "gemini-2.5-pro", provider_id="google").total_price

    each = float(sum((price(i, o) for i, o in calls), Decimal(0)))
    summed = float(price(300_000, 3_000))
    assert summed > each  # the tier is real in the table
    cost = grid.totals([_turn(2, calls)], gemini).cost_usd
    assert cost == pytest.approx(each, abs=1e-6) and cost != pytest.approx(summed, abs=1e-6)
    # a price without tiers: the same number whether summed or not
    gpt = grid.totals([_turn(2, calls)], ModelConfig(type="openai", model="gpt-4o")).cost_usd
    assert gpt == pytest.approx(
        float(sum((genai_prices.calc_price(genai_prices.Usage(input_tokens=i, output_tokens=o), "gpt-4o",
                                           provider_id="openai").total_price for i, o in calls), Decimal(0))),
        abs=1e-6,
    )  # fmt: skip


def test_money_is_printed_to_two_significant_figures() -> None:
    """One function rounds money for every door: two significant figures, never fewer than the cents."""
    assert [usd_text(v) for v in (0.00007, 0.00009, 0.000123, 0.0045, 0.012, 0.1, 0.999, 12.3, 0.0, None)] == [
        "$0.000070", "$0.000090", "$0.00012", "$0.0045", "$0.012", "$0.10", "$1.00", "$12.30", "$0.00", "unknown",
    ]  # fmt: skip


async def test_the_dry_run_estimates_the_whole_start_and_max_usd_refuses_over_it(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agent_rows: Any,
) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True, metadata_style="kagent")
    await agent_rows(ref(V1), {"type": "openai", "model": "gpt-4o", "base_url": ""})
    await agent_rows(ref(JUDGE), {"type": "anthropic", "model": "claude-sonnet-4-5"})
    hdr = {"X-User-Id": conv.user_id}
    base = {"rewind_before_invocation_id": conv.invocation_ids[1], "turns": "all", "agents": [ref(V1)]}
    judged = {**base, "judge": {"agent": ref(JUDGE)}}
    path = f"/api/sessions/{conv.session_id}/experiments"

    async def dry(body: dict[str, Any]) -> dict[str, Any]:
        r = await eclient.post(path, json={**body, "dry_run": True}, headers=hdr)
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()["data"]
        return data

    alone, whole = await dry(base), await dry(judged)
    assert alone["estimated_judge_tokens"] == 0 and whole["estimated_judge_tokens"] > 0
    assert whole["estimated_context_tokens"] == alone["estimated_context_tokens"] + whole["estimated_judge_tokens"]
    # the money, written again here: each turn's context one gpt-4o request, each judge call one Claude request
    span = alone["estimated_context_tokens"]
    calls = whole["estimated_judge_tokens"] // 2  # one pair (the branch against the source), asked twice

    def price(tokens: int, model: str, provider: str) -> Decimal:
        usage = genai_prices.Usage(input_tokens=tokens, output_tokens=0)
        return genai_prices.calc_price(usage, model, provider_id=provider).total_price

    expected = float(price(span, "gpt-4o", "openai") + 2 * price(calls, "claude-sonnet-4-5", "anthropic"))
    assert (
        whole["estimated_usd"] == pytest.approx(expected, abs=2e-6) and whole["estimated_usd"] > alone["estimated_usd"]
    )
    assert whole["estimated_usd_text"] == usd_text(whole["estimated_usd"]) and whole["unpriced"] == []
    # max_usd: under the estimate, a 422 that writes nothing (the dry run says the same refusal)
    async with pool.acquire() as conn:
        before = await conn.fetchval("SELECT count(*) FROM session WHERE user_id = $1", conv.user_id)
    under = {**judged, "max_usd": whole["estimated_usd"] / 2}
    r = await eclient.post(path, json=under, headers=hdr)
    assert r.status_code == 422 and "over max_usd" in r.json()["error"], r.text
    assert f"estimated at {whole['estimated_usd_text']}" in r.json()["error"]
    assert "over max_usd" in (await dry(under))["refused"]
    # a model without a price cannot be held to a budget: refused too, naming whose
    await agent_rows(ref(JUDGE), {"type": "ollama", "model": "llama3.2"})
    unknown = await dry(judged)
    assert unknown["estimated_usd"] is None and unknown["estimated_usd_text"] == "unknown"
    assert unknown["unpriced"] == [ref(JUDGE)]
    r = await eclient.post(path, json={**judged, "max_usd": 100}, headers=hdr)
    assert r.status_code == 422 and f"the price of {ref(JUDGE)}'s model is not known" in r.json()["error"], r.text
    for bad in (-1, "1", True):
        r = await eclient.post(path, json={**base, "max_usd": bad}, headers=hdr)
        assert r.status_code == 400, (bad, r.text)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM session WHERE user_id = $1", conv.user_id) == before
    # over the estimate: it starts
    r = await eclient.post(path, json={**base, "max_usd": alone["estimated_usd"] * 2}, headers=hdr)
    assert r.status_code == 202, r.text
    await until(eclient, r.json()["data"]["experiment"]["id"], conv.user_id)
