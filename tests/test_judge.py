"""The judge and the verdict (issue 35): an experiment judged blind by a scripted a2a-sdk judge
(tests/support/a2a_agent.py: it prefers the continuation holding MARKER and records what it was sent), each
pair in both orders; a position-biased judge gives ties, an answer without JSON is invalid; the numbers equal
an independent computation; cancel, takeover after a stopped replica, the cost gate, and judging again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest

from service.agents.replay import blind, judged, verdict
from service.config import Settings
from service.kagent.store.agents import agent_row_id
from tests.helpers import caller_fingerprint, seed
from tests.support.a2a_agent import (
    BIASED_JUDGE,
    JUDGE,
    MARKER,
    MARKER_AGENT,
    MUTE_JUDGE,
    NAMESPACE,
    SLOW_JUDGE,
    V1,
    Seen,
)
from tests.support.classified_tools import classified_servers
from tests.test_experiments import agents, eclient, ref, start  # noqa: F401 (fixtures)
from tests.test_whatif import service, whatif_settings

OVER = ("running", "judging")


async def until_over(client: Any, experiment_id: str, user: str, seconds: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        r = await client.get(f"/api/experiments/{experiment_id}", headers={"X-User-Id": user})
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()["data"]
        if data["status"] not in OVER:
            return data
        assert time.monotonic() < deadline, f"never ended: {data['status']} {data.get('judgment')}"
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def judged_mcp(settings: Settings, database_url: str, a2a_url: str, user: str) -> AsyncIterator[Any]:
    """An MCP session of `user` with a live service whose replays reach the scripted agents at `a2a_url`."""
    from service.app import create_app
    from tests.support.live_server import live_server
    from tests.test_mcp_tools import mcp_session

    with live_server(create_app(whatif_settings(settings, a2a_url), database_url)) as url:
        async with mcp_session(url, {"X-User-Id": user}) as mcp:
            yield mcp


async def mcp_until_over(mcp: Any, tool: str, args: dict[str, str], seconds: float = 60) -> dict[str, Any]:
    """The status the MCP tool answers once it no longer reads running or judging."""
    from tests.test_mcp_tools import text_of

    deadline = time.monotonic() + seconds
    while True:
        status: dict[str, Any] = json.loads(text_of(await mcp.call_tool(tool, args)))
        if status["status"] not in OVER:
            return status
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.1)


def sides_of(text: str) -> tuple[str, str]:
    a = text.split(blind.CONTINUATION_A, 1)[1].split(blind.CONTINUATION_B, 1)[0]
    b = text.split(blind.CONTINUATION_B, 1)[1].split(blind.ANSWER, 1)[0]
    return a.strip(), b.strip()


# -- the numbers, against an independent computation -------------------------------------------------------


def independent_interval(scores: list[float]) -> tuple[float, float]:
    return independent_wilson(sum(scores) / len(scores), len(scores))


def independent_wilson(p: float, n: int) -> tuple[float, float]:
    """The Wilson score interval written again here (Wilson 1927; z = 1.96)."""
    z = 1.96
    centre, spread = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n)), min(1.0, (centre + spread) / (1 + z * z / n))


@pytest.mark.parametrize(
    "outcomes",
    [["left"] * 5 + ["right"], ["left", "tie", "right", "left", "tie", "left"], ["tie"] * 3, ["right", "right"],
     ["left"] * 3, ["left"] * 12],
)  # fmt: skip
def test_win_rate_and_interval_equal_an_independent_computation(outcomes: list[str]) -> None:
    t = verdict.tally([*outcomes, "invalid", "failed", "pending"])
    scores = [{"left": 1.0, "tie": 0.5, "right": 0.0}[o] for o in outcomes]
    low, high = independent_interval(scores)
    assert (t.wins, t.ties, t.losses, t.not_judged) == (
        outcomes.count("left"), outcomes.count("tie"), outcomes.count("right"), 2
    )  # fmt: skip
    assert t.win_rate == round(sum(scores) / len(scores), 4)
    assert (t.ci_low, t.ci_high) == (round(low, 4), round(high, 4))
    assert t.outcome == ("better" if low > 0.5 else "worse" if high < 0.5 else "inconclusive")
    assert t.ci_high - t.ci_low > 0.05  # never a point while the pairs are finite


def test_three_wins_of_three_are_not_a_certainty() -> None:
    t = verdict.tally(["left"] * 3)
    assert t.ci_high is not None and t.ci_low is not None
    assert t.ci_high - t.ci_low > 0.40 and 0.43 < t.ci_low < 0.45 and t.ci_high == 1.0  # about 44-100 %
    assert t.outcome == "inconclusive"
    line = verdict.line("a/b", "the source", t)
    assert "95 % CI 44-100 %" in line and "better than" not in line and "inconclusive against the source" in line
    # how many more repeats would settle it, were every later pair won too: the least n whose interval is above 50 %
    settle = next(n for n in range(4, 100) if independent_wilson(1.0, n)[0] > 0.5)
    assert settle == 4 and t.more_repeats == 1 and "about 1 more repeat would settle it at this rate" in line
    assert verdict.tally(["right"] * 3).outcome == "inconclusive"
    assert verdict.tally(["right"] * 6).outcome == "worse" and verdict.tally(["left"] * 6).outcome == "better"


def test_a_line_says_better_or_worse_only_when_the_interval_does() -> None:
    t = verdict.tally(["left"] * 5 + ["right"])
    line = verdict.line("kagent/sonnet-agent", "the source", t, tokens="0.6x the tokens", money="$0.012 against $0.020")
    settle = next(n for n in range(7, 200) if independent_wilson(5 / 6, n)[0] > 0.5)
    assert line == (
        "kagent/sonnet-agent: inconclusive against the source over 6 judged continuations: 5 better, 1 worse "
        "(83 %, 95 % CI 44-97 %), 0.6x the tokens, $0.012 against $0.020; about "
        f"{settle - 6} more repeats would settle it at this rate"
    )
    assert t.settle_with == settle
    assert verdict.line("a/b", "the source", verdict.tally(["left"] * 6)).startswith(
        "a/b: better than the source over 6 judged continuations: 6 better, 0 worse (100 %, 95 % CI 61-100 %)"
    )
    assert "would settle" not in verdict.line("a/b", "the source", verdict.tally(["left"] * 6))
    even = verdict.tally(["left", "right"])
    assert even.more_repeats is None and "more repeats at this rate would not settle it" in verdict.line(
        "a/b", "the source", even
    )
    assert verdict.dollars(0.012, 0.02) == "$0.012 against $0.020" and verdict.dollars(None, 0.02) == "money unknown"
    assert verdict.dollars(0.000123, 0.0000456) == "$0.00012 against $0.000046"  # fractions of a cent, said
    assert verdict.dollars(0.0, 0.001) == "$0.00 against $0.0010"


def test_pairs_agree_in_both_orders_or_tie() -> None:
    def asked(a: str | None, b: str | None) -> list[verdict.Asked]:
        return [verdict.Asked(winner=a, swapped=False, error=None, ended=True),
                verdict.Asked(winner=b, swapped=True, error=None, ended=True)]  # fmt: skip

    assert verdict.pair_outcome(asked("A", "B")) == ("left", True)  # left was A, then B: both say left
    assert verdict.pair_outcome(asked("B", "A")) == ("right", True)
    assert verdict.pair_outcome(asked("A", "A")) == ("tie", False)  # a position-biased judge
    assert verdict.pair_outcome(asked("tie", "tie")) == ("tie", True)
    assert verdict.pair_outcome(asked("A", "invalid")) == ("invalid", None)
    assert verdict.pair_outcome(asked("A", None))[0] == "failed"


def test_the_answer_is_the_last_json_object_with_a_winner() -> None:
    assert blind.parse_answer('B is better {"winner": "A", "reason": "x"} no: {"winner": "b", "reason": "y"}') == (
        "B", "y"
    )  # fmt: skip
    assert blind.parse_answer('{"winner": "tie", "reason": "same {braces}"}') == ("tie", "same {braces}")
    assert blind.parse_answer("I cannot tell {which} one")[0] == "invalid"
    assert blind.parse_answer('{"winner": "C"}')[0] == "invalid"
    assert blind.parse_answer(None)[0] == "invalid"


def test_refused_tool_calls_are_said_without_telling_which_side_was_replayed() -> None:
    refused = {"recorded": 2, "live": 1, "refused": 1,
               "refused_calls": [{"tool": "delete_pod", "arguments": {"name": "web-1"}}]}  # fmt: skip
    note = blind.tool_policy_note([{"tool_policy": None}, {"tool_policy": refused}])
    assert note == (
        "These tool calls were refused, not run (the results shown for them are errors): "
        'turn 2: delete_pod with {"name":"web-1"}'
    )
    assert "record" not in note and "replay" not in note
    assert (
        blind.tool_policy_note([{"tool_policy": {"recorded": 3, "live": 0, "refused": 0, "refused_calls": []}}]) is None
    )
    assert blind.tool_policy_note([{"answer": "x"}]) is None  # figures from before the policy


# -- end to end, on real a2a-sdk agents and judges ---------------------------------------------------------


async def test_an_experiment_is_judged_blind_in_both_orders(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    _, seen = agents
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True, metadata_style="kagent")
    body = {
        "rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(MARKER_AGENT), ref(V1)],
        "turns": "all", "judge": {"agent": ref(JUDGE), "criteria": "Prefer the shorter answer when equal."},
    }  # fmt: skip
    # the judge's model, as kagent's agent table names it, is said with the verdict
    judge_config = json.dumps(
        {"model": {"type": "openai", "model": "gpt-4o-mini"}, "instruction": "i", "http_tools": []}
    )
    await pool.execute(
        "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), 'Declarative', $2) "
        "ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config, deleted_at = NULL", agent_row_id(ref(JUDGE)),
        judge_config,
    )  # fmt: skip
    try:
        r = await start(eclient, conv.session_id, conv.user_id, body)
        assert r.status_code == 202, r.text
        await _judged_blind_in_both_orders(eclient, pool, conv, seen, r.json()["data"]["experiment"])
    finally:
        await pool.execute("DELETE FROM agent WHERE id = $1", agent_row_id(ref(JUDGE)))


async def _judged_blind_in_both_orders(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    conv: Any,
    seen: Seen,
    started: dict[str, Any],
) -> None:
    assert started["judgment"]["status"] == "waiting" and started["judgment"]["judge_agent_ref"] == ref(JUDGE)
    assert started["judgment"]["judge_card"]["name"] == JUDGE
    before = len(seen.judged)
    done = await until_over(eclient, started["id"], conv.user_id)
    assert done["status"] == "completed", done
    j = done["judgment"]
    assert j["status"] == "completed" and j["calls"] == 6 and j["calls_answered"] == 6, j
    marker, other = (b["job_id"] for b in done["branches"])
    outcomes = {(p["left_job_id"], p["right_job_id"]): (p["outcome"], p["consistent"]) for p in j["pairs"]}
    assert outcomes == {
        (None, marker): ("right", True), (None, other): ("tie", True), (marker, other): ("left", True)
    }  # fmt: skip
    v = done["verdict"]  # the contract's shape of the same judgment
    criteria = "Prefer the shorter answer when equal."
    assert v["judge"] == {"agent": ref(JUDGE), "model": "gpt-4o-mini", "criteria": criteria}
    assert v["criteria"] == criteria
    # one pair each won or tied: nothing settled, which the headline says, naming the best so far
    assert v["headline"] == (
        f"No agent is shown better than the source yet: the best so far, {ref(MARKER_AGENT)}: 1 better, 0 worse of 1 "
        "judged (95 % CI 21-100 %); about 3 more repeats would settle it"
    )
    assert [(a["agent_ref"], a["against"], a["consistency"]) for a in v["by_agent"]] == [
        (ref(MARKER_AGENT), "source", {"agreed": 1, "asked": 1}), (ref(V1), "source", {"agreed": 1, "asked": 1}),
        (ref(MARKER_AGENT), ref(V1), {"agreed": 1, "asked": 1}),
    ]  # fmt: skip
    assert all((a["invalid"], a["failed"]) == (0, 0) for a in v["by_agent"])
    assert {(p["a"], p["b"]): (p["verdict"], p["order_1"], p["order_2"]) for p in v["pairs"]} == {
        (None, marker): ("b", "B", "A"), (None, other): ("tie", "tie", "tie"), (marker, other): ("a", "A", "B")
    }  # fmt: skip
    first = v["by_agent"][0]
    assert (first["agent_ref"], first["against"], first["wins"], first["ci95"], first["outcome"]) == (
        ref(MARKER_AGENT), "source", 1, [0.2065, 1.0], "inconclusive"
    )  # fmt: skip
    # 1 of 1 is the Wilson interval's 21-100 %: no certainty
    assert first["more_repeats"] == 3
    assert first["cost"]["usd"] is None and first["cost"]["turns"] == 2 and first["summary"] == j["lines"][0]
    lines = j["lines"]
    assert lines[0].startswith(
        f"{ref(MARKER_AGENT)}: inconclusive against the source over 1 judged continuations: 1 better, 0 worse (100 %, "
        "95 % CI 21-100 %)"
    )
    assert "money unknown" in lines[0] and "x the tokens" in lines[0]
    # what the branch did and how long its agent worked, against the source's, a continuation each
    marker_totals = done["branches"][0]["totals"]
    assert f"{marker_totals['tool_calls']} tool calls in 2 turns against the source's " in lines[0]
    assert re.search(r", [0-9.]+ s against [0-9.]+ s;", lines[0]), lines[0]
    assert lines[1].startswith(
        f"{ref(V1)}: inconclusive against the source over 1 judged continuations: 0 better, 0 worse, 1 tied (50 %"
    )
    assert "more repeats at this rate would not settle it" in lines[1]
    assert lines[2].startswith(f"{ref(MARKER_AGENT)}: inconclusive against {ref(V1)} over 1 judged continuations")

    # what the judge received: both orders of each pair, each call in its own context, and nothing naming
    # an agent, a model, a session, a fork or which side is the source
    got = seen.judged[before:]
    assert len(got) == 6 and len({c for c, _ in got}) == 6
    by_pair: dict[frozenset[str], list[tuple[str, str]]] = {}
    for _, text in got:
        a, b = sides_of(text)
        by_pair.setdefault(frozenset((a, b)), []).append((a, b))
        assert text.rstrip().endswith('"reason": "<one or two sentences>"}')
        assert text.index(blind.CONVERSATION) < text.index(blind.CONTINUATION_A) < text.index(blind.CONTINUATION_B)
        assert "Prefer the shorter answer when equal." in text
        assert conv.turns[0].user_text in text.split(blind.CONTINUATION_A)[0]  # the conversation before
        for name in [*(b["session_id"] for b in done["branches"]), conv.session_id, *conv.invocation_ids,
                     MARKER_AGENT, V1, NAMESPACE, "whatif_agent"]:  # fmt: skip
            assert name not in text, name
        for word in ("source", "original", "fork", "model", "session", "experiment", "branch"):
            assert not re.search(rf"\b{word}s?\b", text, re.IGNORECASE), word  # ("agent": the arms say it)
    assert sorted(len(v) for v in by_pair.values()) == [2, 2, 2]
    for (a1, b1), (a2, b2) in by_pair.values():
        assert (a1, b1) == (b2, a2)  # A and B swapped
    assert all(sum(MARKER in s for s in pair) in (0, 1) for pair in by_pair)
    for b in done["branches"]:
        assert b["status"] == "completed"

    hdr = {"X-User-Id": conv.user_id}
    md = await eclient.get(f"/api/experiments/{started['id']}?format=markdown", headers=hdr)
    assert "## Verdict (completed): judged blind by kagent/judge, 6 of 6 calls" in md.text
    assert lines[0] in md.text and f"**{v['headline']}**" in md.text
    assert f"Judge: kagent/judge, model gpt-4o-mini; criteria: the default and: {criteria}" in md.text
    assert "The judge's two orders agreed in 3 of 3 pairs asked both ways." in md.text

    # a person's blind votes: counted as the judge's pairs are, shown apart from them
    votes = f"/api/experiments/{started['id']}/votes"
    r = await eclient.post(votes, json={"pair": {"a": None, "b": other}, "winner": "a"}, headers=hdr)
    assert r.status_code == 200, r.text
    voted = r.json()["data"]
    assert voted["votes"]["votes"] == 1 and voted["judgment"]["lines"] == lines  # the judge's unchanged
    assert voted["votes"]["lines"] == [
        f"{ref(V1)}: inconclusive against the source over 1 judged continuations: 0 better, 1 worse (0 %, 95 % CI "
        "0-79 %)" + voted["votes"]["lines"][0].split("0-79 %)", 1)[1]
    ]
    votes_verdict = voted["verdict"]["votes"]
    assert votes_verdict["by_agent"][0]["outcome"] == "inconclusive" and votes_verdict["voters"] == 1
    # the judge called that pair a tie, the person the source: they agree on 0 of 1
    assert votes_verdict["agreement"] == {"agreed": 0, "compared": 1} == voted["votes"]["agreement"]
    for bad, status in (({"pair": {"a": other, "b": marker}, "winner": "a"}, 422),
                        ({"pair": {"a": None, "b": other}, "winner": "A"}, 400),
                        ({"pair": {"a": None, "b": other}, "winner": "tie", "who": 1}, 400)):  # fmt: skip
        assert (await eclient.post(votes, json=bad, headers=hdr)).status_code == status, bad
    md = await eclient.get(f"/api/experiments/{started['id']}?format=markdown", headers=hdr)
    assert (
        "People's blind votes (1, by 1 voter; they agree with the judge on 0 of 1), apart from the judge's:" in md.text
    )
    await _others_vote(eclient, pool, conv, started["id"], other, marker)

    # judged again, by a position-biased judge: every pair a tie (the two orders disagree); the first kept
    again = await eclient.post(
        f"/api/experiments/{started['id']}/judge",
        json={"agent": ref(BIASED_JUDGE)},
        headers={"X-User-Id": conv.user_id},
    )
    assert again.status_code == 202, again.text
    redone = await until_over(eclient, started["id"], conv.user_id)
    j2 = redone["judgment"]
    assert j2["judge_agent_ref"] == ref(BIASED_JUDGE) and j2["status"] == "completed"
    assert [(p["outcome"], p["consistent"]) for p in j2["pairs"]] == [("tie", False)] * 3
    assert all(s["winner"] == "A" for p in j2["pairs"] for s in p["said"])
    assert [e["id"] for e in redone["earlier_judgments"]] == [j["id"]]
    assert all("inconclusive" in line for line in j2["lines"])


async def test_an_answer_without_json_is_invalid_and_kept(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
) -> None:
    conv = await seed(pool, dialect="legacy", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(MARKER_AGENT + "-legacy")],
            "judge": {"agent": ref(MUTE_JUDGE + "-legacy")}}  # fmt: skip
    r = await start(eclient, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    done = await until_over(eclient, r.json()["data"]["experiment"]["id"], conv.user_id)
    j = done["judgment"]
    assert j["status"] == "failed" and [p["outcome"] for p in j["pairs"]] == ["invalid"]
    assert j["error"] == "no call to the judge gave a usable answer: 2 of 2 answers held no JSON verdict"
    assert [s["winner"] for s in j["pairs"][0]["said"]] == ["invalid", "invalid"]
    assert all(s["answer"] == "I cannot tell {which} one is better." for s in j["pairs"][0]["said"])
    assert j["against_source"][0]["not_judged"] == 1 and j["against_source"][0]["win_rate"] is None
    assert "no continuation judged against the source yet (1 without a usable answer)" in j["lines"][0]


async def test_refusals_write_nothing(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    a2a_url, _ = agents
    conv = await seed(pool, dialect="v1", turns=3)
    base = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(V1)], "turns": "all"}
    async with service(whatif_settings(settings, a2a_url), database_url) as client:
        prints = await caller_fingerprint(pool, conv.user_id)
        # the cost gate counts the judge's calls: a limit the branch alone fits is refused with the judge
        r = await start(client, conv.session_id, conv.user_id, base)
        alone = r.json()["data"]["experiment"]["id"]
        await until_over(client, alone, conv.user_id)
        prints = await caller_fingerprint(pool, conv.user_id)
        refusals = [
            ({**base, "judge": {"agent": "not a ref"}}, 422, "judge.agent must be namespace/name"),
            ({**base, "judge": {"agent": ref("no-such-agent")}}, 422, "the judge kagent/no-such-agent did not answer"),
            ({**base, "judge": {"agent": ref(JUDGE), "extra": 1}}, 400, "extra"),
            ({**base, "judge": {"agent": ref(JUDGE), "criteria": "a\u0000b"}}, 400, "criteria must not hold a NUL"),
        ]
        for body, status, said in refusals:
            r = await start(client, conv.session_id, conv.user_id, body)
            assert r.status_code == status and said in r.text, r.text
        assert await caller_fingerprint(pool, conv.user_id) == prints
        gated = await _gate_limit(client, conv, base)
        r = await start(client, conv.session_id, conv.user_id, {**base, "max_context_tokens": gated})
        assert r.status_code == 202, r.text
        await until_over(client, r.json()["data"]["experiment"]["id"], conv.user_id)
        prints = await caller_fingerprint(pool, conv.user_id)
        r = await start(
            client, conv.session_id, conv.user_id,
            {**base, "max_context_tokens": gated, "judge": {"agent": ref(JUDGE)}},
        )  # fmt: skip
        assert r.status_code == 422 and "and of the judge's calls" in r.text, r.text
        assert await caller_fingerprint(pool, conv.user_id) == prints
        # judging again: an unknown experiment, an unknown judge, a limit too low for its calls
        hdr = {"X-User-Id": conv.user_id}
        missing = await client.post("/api/experiments/nope/judge", json={"agent": ref(JUDGE)}, headers=hdr)
        assert missing.status_code == 404
        r = await client.post(f"/api/experiments/{alone}/judge", json={"agent": ref("no-such-agent")}, headers=hdr)
        assert r.status_code == 422 and "did not answer" in r.text
        r = await client.post(
            f"/api/experiments/{alone}/judge", json={"agent": ref(JUDGE), "max_context_tokens": 5}, headers=hdr
        )
        assert r.status_code == 422 and "the judge's 2 calls send about" in r.text, r.text
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM kagent_fork.judgment WHERE experiment_id = $1", alone) == 0


async def test_a_judge_that_could_act_is_refused_unless_live(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    """The judge is a kagent agent run on the caller's behalf: one whose configuration (kagent's agent table) lets
    it call tools that act without an approval is refused, naming it and the tools, nothing written, unless the
    experiment said tools: "live"; judging again follows the experiment's own policy."""
    a2a_url, _ = agents
    conv = await seed(pool, dialect="v1", turns=3)
    base = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(V1)], "turns": "all"}
    hdr = {"X-User-Id": conv.user_id}
    with classified_servers() as servers:
        config = {"http_tools": [{"params": {"url": servers.http_url}, "require_approval": ["delete_pod"]}]}
        await pool.execute(
            "INSERT INTO agent (id, created_at, updated_at, type, config) VALUES ($1, now(), now(), 'Declarative', "
            "$2::json) ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config, deleted_at = NULL",
            agent_row_id(ref(JUDGE)), json.dumps(config),
        )  # fmt: skip
        try:
            async with service(whatif_settings(settings, a2a_url), database_url) as client:
                plain = await start(client, conv.session_id, conv.user_id, base)
                assert plain.status_code == 202, plain.text
                plain_id = plain.json()["data"]["experiment"]["id"]
                await until_over(client, plain_id, conv.user_id)
                prints = await caller_fingerprint(pool, conv.user_id)
                r = await start(client, conv.session_id, conv.user_id, {**base, "judge": {"agent": ref(JUDGE)}})
                assert r.status_code == 422, r.text
                said = r.json()["error"]
                assert f"judge: the agent {ref(JUDGE)} could call tools that act" in said, said
                assert "scale_deployment" in said and "delete_pod" not in said, said
                r = await client.post(f"/api/experiments/{plain_id}/judge", json={"agent": ref(JUDGE)}, headers=hdr)
                assert r.status_code == 422 and "could call tools that act" in r.text, r.text
                assert await caller_fingerprint(pool, conv.user_id) == prints
                live = await start(
                    client, conv.session_id, conv.user_id, {**base, "tools": "live", "judge": {"agent": ref(JUDGE)}}
                )
                assert live.status_code == 202, live.text
                done = await until_over(client, live.json()["data"]["experiment"]["id"], conv.user_id)
                assert done["judgment"]["status"] == "completed", done["judgment"]
        finally:
            await pool.execute("DELETE FROM agent WHERE id = $1", agent_row_id(ref(JUDGE)))


async def _gate_limit(client: Any, conv: Any, base: dict[str, Any]) -> int:
    """The smallest limit the experiment without a judge passes: found from the gate's own refusal."""
    r = await start(client, conv.session_id, conv.user_id, {**base, "max_context_tokens": 1})
    assert r.status_code == 422, r.text
    found = re.search(r"about (\d+) tokens", r.text)
    assert found is not None
    return int(found.group(1))


async def test_cancel_while_judging_and_takeover_after_a_stopped_replica(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    a2a_url, seen = agents
    config = whatif_settings(settings, a2a_url)
    seen.judge_release.clear()
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(MARKER_AGENT)],
            "judge": {"agent": ref(SLOW_JUDGE)}}  # fmt: skip
    hdr = {"X-User-Id": conv.user_id}
    try:
        # cancel: the judgment ends cancelled, the judge is asked to cancel its tasks, the branches stay as they are
        async with service(config, database_url) as client:
            eid = (await start(client, conv.session_id, conv.user_id, body)).json()["data"]["experiment"]["id"]
            await _judge_holding(client, eid, conv.user_id, seen, pool)
            listed = await client.get(f"/api/sessions/{conv.session_id}/experiments", headers=hdr)
            assert [x["status"] for x in listed.json()["data"]] == ["judging"]
            held = set(seen.running)
            r = await client.post(f"/api/experiments/{eid}/cancel", json={}, headers=hdr)
            assert r.status_code == 200, r.text
            data = r.json()["data"]
            assert data["status"] == "completed" and data["judgment"]["status"] == "cancelled"
            assert data["branches"][0]["status"] == "completed"
            assert all(s["error"] == "cancelled" for p in data["judgment"]["pairs"] for s in p["said"] if s["error"])
            assert held <= set(seen.cancelled)
            again = await client.post(f"/api/experiments/{eid}/cancel", json={}, headers=hdr)
            assert again.status_code == 409
        seen.judge_release.clear()
        # takeover: a replica stops while the judge holds a call; the next one follows that call (never sends it
        # again) and the verdict lands
        before = len(seen.judged)
        async with service(config, database_url) as first:
            eid = (await start(first, conv.session_id, conv.user_id, body)).json()["data"]["experiment"]["id"]
            await _judge_holding(first, eid, conv.user_id, seen, pool)
        await asyncio.sleep(1.0)
        seen.judge_release.set()
        async with service(config, database_url) as second:
            done = await until_over(second, eid, conv.user_id)
    finally:
        seen.judge_release.set()
    j = done["judgment"]
    assert j["status"] == "completed" and [p["outcome"] for p in j["pairs"]] == ["right"], j
    assert len(seen.judged) - before == 2  # each call sent once
    assert math.isclose(j["against_source"][0]["win_rate"], 1.0)


async def _judge_holding(client: Any, eid: str, user: str, seen: Seen, pool: asyncpg.Pool) -> None:
    """Until the judge holds both calls, each one's task known to the service."""
    deadline = time.monotonic() + 30
    while True:
        r = await client.get(f"/api/experiments/{eid}", headers={"X-User-Id": user})
        async with pool.acquire() as conn:
            known = await conn.fetchval(
                "SELECT count(*) FROM kagent_fork.judge_call c JOIN kagent_fork.judgment j ON j.id = c.judgment_id "
                "WHERE j.experiment_id = $1 AND c.task_id IS NOT NULL", eid,
            )  # fmt: skip
        if r.json()["data"]["status"] == "judging" and len(seen.running) == 2 and known == 2:
            return
        assert time.monotonic() < deadline, r.text
        await asyncio.sleep(0.05)


async def test_mcp_starts_a_judged_experiment_reads_its_verdict_and_judges_it_again(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    from tests.test_mcp_tools import text_of

    conv = await seed(pool, dialect="v1", turns=2)
    async with judged_mcp(settings, database_url, agents[0], conv.user_id) as mcp:
        started = await mcp.call_tool(
            "start_experiment",
            {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[1],
             "agents": [ref(MARKER_AGENT)], "judge_agent": ref(JUDGE), "judge_criteria": "Be strict."},
        )  # fmt: skip
        assert not started.isError, text_of(started)
        eid = json.loads(text_of(started))["experiment"]["id"]
        status = await mcp_until_over(mcp, "experiment_status", {"experiment_id": eid})
        assert status["judgment"]["lines"][0].startswith(f"{ref(MARKER_AGENT)}: inconclusive against the source")
        table = await mcp.call_tool("experiment_status", {"experiment_id": eid, "format": "markdown"})
        assert "## Verdict (completed)" in text_of(table) and status["judgment"]["lines"][0] in text_of(table)
        assert status["verdict"]["headline"] and f"**{status['verdict']['headline']}**" in text_of(table)
        assert status["verdict"]["judge"] == {"agent": ref(JUDGE), "model": None, "criteria": "Be strict."}
        again = await mcp.call_tool("judge_experiment", {"experiment_id": eid, "agent": ref(BIASED_JUDGE)})
        assert not again.isError, text_of(again)
        assert json.loads(text_of(again))["judgment"]["judge_agent_ref"] == ref(BIASED_JUDGE)
        refused = await mcp.call_tool("judge_experiment", {"experiment_id": eid, "agent": "nope"})
        assert refused.isError and "judge.agent must be namespace/name" in text_of(refused)


def cli_on_a_new_conversation(
    database_url: str, a2a_url: str
) -> tuple[Any, Callable[..., subprocess.CompletedProcess[str]]]:
    """A two-turn conversation of a new user, and the CLI run as that user on the test's database and agents."""
    from tests.helpers import new_user
    from tests.support.conversations import build_conversation, insert_conversation

    async def seeded() -> Any:
        conv = build_conversation(user_id=new_user(), dialect="v1", turns=2)
        conn = await asyncpg.connect(database_url)
        try:
            await insert_conversation(conn, conv, schema_version_ok=False)
        finally:
            await conn.close()
        return conv

    conv = asyncio.run(seeded())
    env = {**os.environ, "DATABASE_URL": database_url, "KAGENT_A2A_URL": a2a_url}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service", *args, "--user", conv.user_id], env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip

    return conv, run


def test_the_cli_judges_an_experiment_and_judges_it_again(
    database_url: str,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    conv, run = cli_on_a_new_conversation(database_url, agents[0])

    done = run("experiment", conv.session_id, "--before", conv.invocation_ids[1], "--agent", ref(MARKER_AGENT),
               "--judge", ref(JUDGE), "--criteria", "Be strict.", "--wait", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["status"] == "completed" and found["judgment"]["status"] == "completed", found["judgment"]
    assert found["judgment"]["criteria"] == "Be strict."
    assert found["judgment"]["lines"][0].startswith(f"{ref(MARKER_AGENT)}: inconclusive against the source over 1")
    again = run("judge", found["id"], "--agent", ref(BIASED_JUDGE), "--wait")
    assert again.returncode == 0, again.stderr
    assert f"## Verdict (completed): judged blind by {ref(BIASED_JUDGE)}, 2 of 2 calls" in again.stdout
    assert f"Earlier judgments: {ref(JUDGE)} (completed" in again.stdout
    assert f"Judge: {ref(BIASED_JUDGE)}, model unknown; criteria: the default" in again.stdout
    assert "**No agent is shown better than the source yet: the best so far" in again.stdout
    assert "The judge's two orders agreed in 0 of 1 pairs asked both ways." in again.stdout
    assert "more repeats at this rate would not settle it" in again.stdout


async def test_a_judge_that_does_not_answer_in_time_is_cancelled_and_its_pair_not_judged(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    import dataclasses

    a2a_url, seen = agents
    seen.judge_release.clear()
    conv = await seed(pool, dialect="v1", turns=2)
    config = dataclasses.replace(whatif_settings(settings, a2a_url), whatif_timeout_seconds=3)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(MARKER_AGENT)],
            "judge": {"agent": ref(SLOW_JUDGE)}}  # fmt: skip
    try:
        async with service(config, database_url) as client:
            r = await start(client, conv.session_id, conv.user_id, body)
            assert r.status_code == 202, r.text
            done = await until_over(client, r.json()["data"]["experiment"]["id"], conv.user_id)
    finally:
        seen.judge_release.set()
    j = done["judgment"]
    assert done["status"] == "completed" and j["status"] == "failed", j  # no call answered: failed, in words
    assert j["error"] == (
        "no call to the judge gave a usable answer: 2 of 2 calls failed (the judge did not answer within 3 s "
        "(WHATIF_TIMEOUT_SECONDS))"
    )
    [pair] = j["pairs"]
    assert pair["outcome"] == "failed" and pair["consistent"] is None
    assert [s["error"] for s in pair["said"]] == ["the judge did not answer within 3 s (WHATIF_TIMEOUT_SECONDS)"] * 2
    record = j["against_source"][0]
    assert record["not_judged"] == 1 and record["win_rate"] is None
    async with pool.acquire() as conn:
        tasks = {r["task_id"] for r in await conn.fetch(
            "SELECT task_id FROM kagent_fork.judge_call WHERE judgment_id = $1", j["id"])}  # fmt: skip
    assert len(tasks) == 2 and tasks <= set(seen.cancelled)  # the judge was asked to cancel both tasks


# -- issue 47: discarded branches are judged as they are; a continuation with no answer is not judged -------


async def _judge_again(client: Any, eid: str, user: str, judge: str = JUDGE) -> dict[str, Any]:
    r = await client.post(f"/api/experiments/{eid}/judge", json={"agent": ref(judge)}, headers={"X-User-Id": user})
    assert r.status_code == 202, r.text
    return await until_over(client, eid, user)


async def test_judging_again_after_a_discard_reads_the_branches_as_they_are(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    _, seen = agents
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(MARKER_AGENT)],
            "judge": {"agent": ref(JUDGE)}}  # fmt: skip
    hdr = {"X-User-Id": conv.user_id}
    eid = (await start(eclient, conv.session_id, conv.user_id, body)).json()["data"]["experiment"]["id"]
    first = await until_over(eclient, eid, conv.user_id)
    assert [p["outcome"] for p in first["judgment"]["pairs"]] == ["right"], first["judgment"]
    r = await eclient.post(f"/api/experiments/{eid}/discard", json={}, headers=hdr)
    assert r.status_code == 200 and r.json()["data"]["branches"][0]["discarded"], r.text
    before = len(seen.judged)
    again = await _judge_again(eclient, eid, conv.user_id)
    sent = [text for _, text in seen.judged[before:]]
    assert len(sent) == 2 and all(MARKER in text for text in sent)  # the hidden fork's answers, both orders
    assert all("(nothing)" not in text for text in sent)
    assert again["judgment"]["status"] == "completed"
    assert [p["outcome"] for p in again["judgment"]["pairs"]] == ["right"], again["judgment"]
    assert again["verdict"]["by_agent"][0]["wins"] == 1


async def test_a_discard_waits_for_the_judging_to_end(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    a2a_url, seen = agents
    seen.judge_release.clear()
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(MARKER_AGENT)],
            "judge": {"agent": ref(SLOW_JUDGE)}}  # fmt: skip
    hdr = {"X-User-Id": conv.user_id}
    try:
        async with service(whatif_settings(settings, a2a_url), database_url) as client:
            eid = (await start(client, conv.session_id, conv.user_id, body)).json()["data"]["experiment"]["id"]
            await _judge_holding(client, eid, conv.user_id, seen, pool)
            r = await client.post(f"/api/experiments/{eid}/discard", json={}, headers=hdr)
            assert r.status_code == 409 and "being judged" in r.json()["error"], r.text
            async with pool.acquire() as conn:
                assert (
                    await conn.fetchval("SELECT count(*) FROM kagent_fork.discard WHERE experiment_id = $1", eid) == 0
                )
                fork = (await client.get(f"/api/experiments/{eid}", headers=hdr)).json()["data"]["branches"][0]
                assert await conn.fetchval("SELECT deleted_at FROM session WHERE id = $1", fork["session_id"]) is None
            seen.judge_release.set()
            done = await until_over(client, eid, conv.user_id)
            assert [p["outcome"] for p in done["judgment"]["pairs"]] == ["right"], done["judgment"]
            r = await client.post(f"/api/experiments/{eid}/discard", json={}, headers=hdr)
            assert r.status_code == 200, r.text
    finally:
        seen.judge_release.set()


async def test_a_continuation_with_no_answer_is_not_judged_and_the_judgment_failed(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
    agents: tuple[str, Seen],  # noqa: F811
) -> None:
    _, seen = agents
    conv = await seed(pool, dialect="v1", turns=2)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(MARKER_AGENT)]}
    eid = (await start(eclient, conv.session_id, conv.user_id, body)).json()["data"]["experiment"]["id"]
    done = await until_over(eclient, eid, conv.user_id)
    fork = done["branches"][0]["session_id"]
    async with pool.acquire() as conn:  # the branch's turn as an agent that wrote nothing would leave it
        await conn.execute(
            "UPDATE event SET deleted_at = NOW() WHERE session_id = $1 AND created_at >= "
            "(SELECT created_at FROM kagent_fork.whatif_job WHERE id = $2)", fork, done["branches"][0]["job_id"],
        )  # fmt: skip
    before = len(seen.judged)
    judged = await _judge_again(eclient, eid, conv.user_id)
    assert len(seen.judged) == before  # nothing was sent to the judge
    j = judged["judgment"]
    [pair] = j["pairs"]
    reason = f"not judged: {ref(MARKER_AGENT)} #1's continuation holds no answer"
    assert pair["outcome"] == "failed" and [s["error"] for s in pair["said"]] == [reason, reason]
    assert judged["verdict"]["pairs"][0]["reasons"] == [reason, reason]
    assert j["status"] == "failed" and j["error"].startswith("no call to the judge gave a usable answer: 2 of 2 calls")
    assert judged["verdict"]["status"] == "failed"


def test_each_agents_line_answers_the_question_and_the_headline_names_the_best() -> None:
    """Issue 47 (3): one line per agent, tied to the question (is it better than the source here, and at what
    price): outcome, k of n, interval, tool calls and turns against the source's, tokens ratio, money per
    continuation against the source's, time; a headline naming the best; how often the two orders agreed."""
    source = judged.Side(label="source", agent_ref="kagent/k8s-agent", tokens=1000, cost_usd=0.002, turns=2,
                         tool_calls=6, duration_seconds=30.0)  # fmt: skip
    sides: dict[str | None, judged.Side] = {
        f"x{i}": judged.Side(label=f"kagent/x #{i}", agent_ref="kagent/x", tokens=600, cost_usd=0.0012, turns=2,
                             tool_calls=4, duration_seconds=12.0)
        for i in range(1, 7)
    }  # fmt: skip
    sides["y1"] = judged.Side(label="kagent/y", agent_ref="kagent/y", tokens=2000, cost_usd=None, turns=1,
                              tool_calls=9, duration_seconds=50.0)  # fmt: skip
    outcomes = {(None, f"x{i}"): "right" for i in range(1, 7)} | {(None, "y1"): "failed", ("x1", "y1"): "failed"}
    consistent: dict[tuple[str | None, str], bool | None] = {(None, f"x{i}"): i != 6 for i in range(1, 7)}
    against, between = judged.records(outcomes, sides, source, consistent)
    x, y = against
    assert x.line == (
        "kagent/x: better than the source over 6 judged continuations: 6 better, 0 worse (100 %, 95 % CI 61-100 %), "
        "4 tool calls in 2 turns against the source's 6 in 2, 0.6x the tokens, $0.0012 against $0.0020 a "
        "continuation, 12 s against 30 s"
    )
    assert x.consistency == judged.Consistency(agreed=5, asked=6) and x.outcome == "better"
    assert (y.failed, y.invalid, y.win_rate) == (1, 0, None) and "money unknown" in y.line
    assert between[0].line.startswith("kagent/x: no continuation judged against kagent/y yet (1 without a usable")
    assert judged.headline(against, "completed", None) == (
        "kagent/x is better than the source here: 6 better, 0 worse of 6 judged (95 % CI 61-100 %)"
    )
    unsure, _ = judged.records({(None, "x1"): "right", (None, "y1"): "left"}, sides, source)
    assert judged.headline(unsure, "completed", None) == (
        "No agent is shown better than the source yet: the best so far, kagent/x: 1 better, 0 worse of 1 judged "
        "(95 % CI 21-100 %); about 3 more repeats would settle it"
    )
    assert judged.headline(against, "failed", "no call to the judge gave a usable answer").startswith(
        "The judgment failed: no call"
    )


async def _others_vote(eclient: Any, pool: asyncpg.Pool, conv: Any, eid: str, other: str, marker: str) -> None:  # noqa: F811
    """Issue 47 (6): anyone who can read the source votes (its owner, a share link's reader), once a pair each (a
    second vote replaces the first), each voter's votes kept apart; who cannot read it gets a 404 and writes
    nothing."""
    from tests.helpers import new_user

    votes = f"/api/experiments/{eid}/votes"
    token = f"share-{new_user()}"
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO session_share (token, session_id, user_id, read_only) VALUES ($1, $2, $3, true)",
            token, conv.session_id, conv.user_id,
        )  # fmt: skip
        reader = {"X-User-Id": new_user(), "X-Share-Token": token}
        stranger = {"X-User-Id": new_user()}
        before = await conn.fetchval("SELECT count(*) FROM kagent_fork.judge_vote WHERE experiment_id = $1", eid)
        r = await eclient.post(votes, json={"pair": {"a": None, "b": other}, "winner": "b"}, headers=stranger)
        assert r.status_code == 404 and r.json()["error"] == f"experiment {eid} not found", r.text
        bad_share = {**stranger, "X-Share-Token": "no-such-share"}
        assert (await eclient.post(votes, json={"pair": {"a": None, "b": other}, "winner": "b"},
                                   headers=bad_share)).status_code == 403  # fmt: skip
        r = await eclient.post(votes, json={"pair": {"a": None, "b": marker}, "winner": "a"}, headers=reader)
        assert r.status_code == 200, r.text
        r = await eclient.post(votes, json={"pair": {"a": None, "b": marker}, "winner": "b"}, headers=reader)
        assert r.status_code == 200, r.text  # a second vote on the pair replaces the reader's first
        counted = r.json()["data"]["votes"]
        assert (counted["votes"], counted["voters"]) == (2, 2)
        # the judge said the marker's continuation is better, as the reader did: 1 of the 2 votes agree
        assert counted["agreement"] == {"agreed": 1, "compared": 2}
        after = await conn.fetchval("SELECT count(*) FROM kagent_fork.judge_vote WHERE experiment_id = $1", eid)
        assert after == before + 1
        mine = await conn.fetch("SELECT user_id, winner FROM kagent_fork.judge_vote WHERE experiment_id = $1", eid)
        assert {(m["user_id"], m["winner"]) for m in mine} == {(conv.user_id, "left"), (reader["X-User-Id"], "right")}
        # the reader still cannot read the experiment itself: only its creator sees it
        assert (await eclient.get(f"/api/experiments/{eid}", headers=reader)).status_code == 404


async def test_control_adds_the_sources_own_agent_as_the_noise_floor(
    eclient: Any,  # noqa: F811
    pool: asyncpg.Pool,
) -> None:
    """Issue 47 (4): `control: true` adds the source's own agent as an arm; its verdict against the source is the
    noise floor, said as such beside the others and never named the best."""
    conv = await seed(pool, dialect="v1", turns=2, agent_id="kagent__NS__v1_agent")  # the source's agent: v1-agent
    hdr = {"X-User-Id": conv.user_id}
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(MARKER_AGENT)], "control": True,
            "judge": {"agent": ref(JUDGE)}}  # fmt: skip
    path = f"/api/sessions/{conv.session_id}/experiments"
    dry = await eclient.post(path, json={**body, "dry_run": True}, headers=hdr)
    assert dry.status_code == 200 and dry.json()["data"]["branches"] == 2, dry.text
    eight = [ref(f"{MARKER_AGENT}-{i}") for i in range(8)]
    over = await eclient.post(path, json={**body, "agents": eight}, headers=hdr)
    assert over.status_code == 422, over.text
    assert "9 agents (the control among them) x 1 repeats is 9 branches, over 8" in over.text, over.text
    r = await start(eclient, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    done = await until_over(eclient, r.json()["data"]["experiment"]["id"], conv.user_id)
    assert [b["agent_ref"] for b in done["branches"]] == [ref(MARKER_AGENT), ref(V1)]
    v = done["verdict"]
    mine, floor = (a for a in v["by_agent"] if a["against"] == "source")
    assert (mine["agent_ref"], mine["control"], floor["agent_ref"], floor["control"]) == (
        ref(MARKER_AGENT), False, ref(V1), True
    )  # fmt: skip
    assert floor["summary"].startswith(
        f"{ref(V1)} (the source's own agent run again: the noise floor): inconclusive against the source"
    )
    assert v["headline"].startswith(
        f"No agent is shown better than the source yet: the best so far, {ref(MARKER_AGENT)}"
    )
    assert v["headline"].endswith(
        "; the noise floor, the source's own agent run again: 0 better, 0 worse, 1 tied of 1 judged (95 % CI 5-95 %)"
    )
    # issue 47 (7): the source's experiments are listed with their agents, judge and outcome
    listed = (await eclient.get(path, headers=hdr)).json()["data"]
    assert [(x["agents"], x["judge"], x["outcome"]) for x in listed] == [
        ([ref(MARKER_AGENT), ref(V1)], ref(JUDGE), v["headline"])
    ]
    # the source's own agent named already: control adds nothing
    again = await eclient.post(path, json={**body, "agents": [ref(V1)], "dry_run": True}, headers=hdr)
    assert again.status_code == 200 and again.json()["data"]["branches"] == 1, again.text
