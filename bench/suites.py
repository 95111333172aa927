"""Issue 49's suite-run measures, run by bench.run (`--only suites`).

A suite of `--suite-cases` generated conversations (3 turns each, the case at the last turn) run on 4 scripted
agents x `--suite-repeats` repeats (3 by default: a case is one experiment an agent), judged by the
demo's judge (`kagent/demo-judge`): real a2a-sdk servers from service/embedded/scripted_agent.py, served from a
thread of the benchmark's process, that write each turn into kagent's tables as kagent's runtime does. Every
agent and the judge are timed inside their executors (the agents' and the judge's own time). The service runs as
`kagent-fork serve` with WHATIF_MAX_PARALLEL `--suite-parallel`.

- the run's wall time, from the POST to the GET that says it ended (and the POST's own 202);
- the service's own time per branch: its processes' CPU time over the run divided by the branches, against the
  CPU time of one fork of the same boundary (the floor, measured in the same run, before and after); and the wall
  time during which no agent and no judge was working, divided by the branches;
- the service's RSS (every process, summed) before the run, its peak sampled during it, after it;
- the answer time of GET /api/suites/{id}/runs/{run} (JSON, Markdown, plot) and of the explorer page with the
  suite's cases (GET /ui/, then the suites calls suites.js makes), once the run ended.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers.default_request_handler_v2 import DefaultRequestHandlerV2
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.types import a2a_pb2 as a2a
from starlette.applications import Starlette

from bench.generate import GeneratedSession, SessionSpec, insert_session
from bench.run import HEADERS, Bench, Row, _status_kb, median_ms, ratio_row
from service.embedded import scripts, threaded
from service.embedded.scripted_agent import KagentTaskStore, Pool, ScriptedTurn

AGENTS = [f"kagent/bench-agent-{i}" for i in range(1, 5)]
JUDGE = "kagent/demo-judge"
ENDED = ("completed", "stopped", "cancelled", "failed")
TICK = os.sysconf("SC_CLK_TCK")


class Timed(AgentExecutor):
    """An executor timed: (start, end) of each turn it runs, into `busy` (one event loop: no lock needed)."""

    def __init__(self, inner: AgentExecutor, busy: list[tuple[float, float]]) -> None:
        self.inner, self.busy = inner, busy

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        began = time.monotonic()
        try:
            await self.inner.execute(context, event_queue)
        finally:
            self.busy.append((began, time.monotonic()))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await self.inner.cancel(context, event_queue)


class Pooled(Pool):
    """The scripted agents' connections lent from one asyncpg pool (the demo's Pool opens one for each write, which
    made the agents, not the service, most of the run's CPU): fast agents."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.pool: asyncpg.Pool | None = None
        self.lock = asyncio.Lock()

    async def connect(self) -> Any:
        async with self.lock:  # made in the agents' own event loop, once
            if self.pool is None:
                self.pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=16)
        return Lent(await self.pool.acquire(), self.pool)


class Lent:
    """A pooled connection whose close() gives it back."""

    def __init__(self, conn: Any, pool: asyncpg.Pool) -> None:
        self.conn, self.pool = conn, pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    async def close(self) -> None:
        await self.pool.release(self.conn)


@contextmanager
def agents(dsn: str, agent_busy: list[tuple[float, float]], judge_busy: list[tuple[float, float]]) -> Iterator[str]:
    """The 4 scripted agents (the demo's own script; no tools offered: no agent row) and the demo's judge, under
    kagent's A2A paths: yields KAGENT_A2A_URL."""
    pool = Pooled(dsn)
    routes: list[Any] = []
    for ref, script, busy in [*((a, scripts.script, agent_busy) for a in AGENTS),
                              (JUDGE, scripts.judge_script, judge_busy)]:  # fmt: skip
        name = ref.split("/")[1]
        card = a2a.AgentCard(name=name, version="1.0", description="kagent-fork's bench agent (scripted)")
        turn = Timed(ScriptedTurn(pool, script, ref), busy)
        handler = DefaultRequestHandlerV2(agent_executor=turn, task_store=KagentTaskStore(pool), agent_card=card)
        routes += create_jsonrpc_routes(handler, f"/api/a2a/{ref}/", enable_v0_3_compat=True)
        routes += create_agent_card_routes(card, card_url=f"/api/a2a/{ref}/.well-known/agent-card.json")
    port, stop = threaded.start(Starlette(routes=routes), "bench suite agents")
    try:
        yield f"http://127.0.0.1:{port}/api/a2a"
    finally:
        stop()


def union(intervals: list[tuple[float, float]]) -> float:
    """Seconds during which at least one interval was open."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _pids(b: Bench) -> list[int]:
    assert b.service.proc is not None
    return [b.service.proc.pid, *b.service.worker_pids()]


def cpu_seconds(b: Bench) -> float:
    """User + system CPU of the service's processes (the supervisor and its workers) so far."""
    total = 0
    for pid in _pids(b):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def rss_mb(b: Bench) -> float:
    return sum(_status_kb(pid, "VmRSS") for pid in _pids(b)) / 1024


async def make_suite(b: Bench, cases: int) -> tuple[str, list[GeneratedSession]]:
    sessions = [await insert_session(b.conn, SessionSpec(turns=3, seed=100 + i)) for i in range(cases)]
    await b.conn.execute("VACUUM ANALYZE event, task, session")
    body = {
        "name": f"bench suite of {cases}",
        "cases": [{"session_id": s.session_id, "rewind_before_invocation_id": s.invocation_ids[-1]} for s in sessions],
    }
    r = await b.client.post("/api/suites", json=body, headers=HEADERS)
    if r.status_code != 201:
        raise RuntimeError(f"suite answered {r.status_code}: {r.text[:300]}")
    return r.json()["data"]["id"], sessions


async def fork_floor(b: Bench, s: GeneratedSession, n: int = 20) -> tuple[float, float]:
    """One fork of a case's session at its case's turn, over HTTP, n times: (median wall s, service CPU s each)."""
    body = {"rewind_before_invocation_id": s.invocation_ids[-1]}
    walls, cpu = [], 0.0
    for _ in range(n):
        before = cpu_seconds(b)
        took, data = await b.http_fork(s, body)
        cpu += cpu_seconds(b) - before
        walls.append(took)
        await b.drop_copy(data["id"])
    return statistics.median(walls), cpu / n


async def _timed_get(b: Bench, path: str, n: int, **kw: Any) -> tuple[float, int]:
    took, size = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        r = await b.client.get(path, headers=HEADERS, **kw)
        took.append(time.perf_counter() - t0)
        r.raise_for_status()
        size = len(r.content)
    return median_ms(took), size


async def measure(b: Bench, agent_busy: list[tuple[float, float]], judge_busy: list[tuple[float, float]]) -> None:
    cases, repeats = b.args.suite_cases, b.args.suite_repeats
    suite_id, sessions = await make_suite(b, cases)
    await fork_floor(b, sessions[0], 3)  # warm-up: connections, prepared statements
    floor_wall, floor_cpu = await fork_floor(b, sessions[0])
    await b.quiesce()
    rss_before = rss_mb(b)
    agent_busy.clear()
    judge_busy.clear()
    cpu0 = cpu_seconds(b)
    started = time.monotonic()
    body = {"agents": AGENTS, "judge": {"agent": JUDGE}, "repeats": repeats}
    r = await b.client.post(f"/api/suites/{suite_id}/runs", json=body, headers=HEADERS)
    if r.status_code != 202:
        raise RuntimeError(f"suite run answered {r.status_code}: {r.text[:300]}")
    accepted = time.monotonic() - started
    path = f"/api/suites/{suite_id}/runs/{r.json()['data']['id']}"
    peak, polls, last = rss_before, [], 0.0
    deadline = started + b.args.suite_limit
    while True:
        peak = max(peak, rss_mb(b))
        t0 = time.perf_counter()
        data: dict[str, Any] = (await b.client.get(path, headers=HEADERS)).json()["data"]
        polls.append(time.perf_counter() - t0)
        if data["status"] in ENDED:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the suite run did not end in {b.args.suite_limit:.0f} s: {data['progress']}")
        if time.monotonic() - last > 30:
            last = time.monotonic()
            print(f"    {time.monotonic() - started:.0f} s: {data['status']} {data['progress']}", flush=True)
        await asyncio.sleep(1)
    wall = time.monotonic() - started
    cpu = cpu_seconds(b) - cpu0
    await asyncio.sleep(5)  # the driver's last beats, then memory as the run left it
    rss_after = rss_mb(b)
    p = data["progress"]
    branches = p["branches_total"]
    asks = await b.conn.fetchval(
        "SELECT count(*) FROM kagent_fork.judge_call c JOIN kagent_fork.judgment j ON j.id = c.judgment_id "
        "JOIN kagent_fork.suite_run_case s ON j.experiment_id = ANY(s.experiment_ids) WHERE s.run_id = $1",
        data["id"],
    )
    outcomes = {a["agent_ref"]: a["outcome"] for a in data["verdict"]["by_agent"]}
    print(f"    run {data['status']} in {wall:.0f} s: {p}; judge asks {asks}; outcomes {outcomes}", flush=True)
    print(f"    fork floor: {floor_wall * 1000:.0f} ms wall, {floor_cpu * 1000:.0f} ms CPU", flush=True)
    size = f"{p['cases']} cases x {len(AGENTS)} agents x {repeats} repeats"
    if data["status"] != "completed" or p["branches_done"] != branches or p["judged"] != p["cases"]:
        raise RuntimeError(f"the suite run ended {data['status']} ({data['reason']}): {p}")
    agents_s, judge_s = sum(e - s for s, e in agent_busy), sum(e - s for s, e in judge_busy)
    idle = wall - union(agent_busy + judge_busy)
    b.report.add(Row(
        measure=f"suite run of {size} ({branches:,} branches, {asks:,} judge asks; WHATIF_MAX_PARALLEL "
                f"{b.args.suite_parallel}): wall time, POST to the GET that says it ended (the 202 in "
                f"{accepted * 1000:.0f} ms)",
        value=f"{wall:.0f} s", floor=f"{branches / wall:.1f} branches/s", target="reported",
    ))  # fmt: skip
    after_wall, after_cpu = await fork_floor(b, sessions[0])
    b.report.add(ratio_row(
        f"service CPU per branch over the run (its processes' user+system / {branches:,} branches, the judging "
        f"included), against the CPU of one fork of a case's session at its turn (20 forks before the run; "
        f"after it {after_cpu * 1000:.0f} ms, {after_wall * 1000:.0f} ms wall)",
        cpu / branches * 1000, floor_cpu * 1000, None,
    ))  # fmt: skip
    b.report.add(ratio_row(
        f"run wall time with no agent and no judge working, per branch (agents' own {agents_s:.0f} s in "
        f"{len(agent_busy):,} turns, {agents_s / max(1, len(agent_busy)) * 1000:.0f} ms each; judge's own "
        f"{judge_s:.0f} s in {len(judge_busy):,} asks), against one fork's wall time before the run",
        idle / branches * 1000, floor_wall * 1000, None,
    ))  # fmt: skip
    b.report.add(Row(
        measure=f"service RSS, every process summed: before the run -> peak sampled each second during it -> 5 s "
                f"after it ({len(polls)} samples)",
        value=f"{rss_before:.0f} -> {peak:.0f} -> {rss_after:.0f} MB", floor=f"+{peak - rss_before:.0f} MB peak",
        target="reported (flat)",
    ))  # fmt: skip
    b.report.add(Row(
        measure=f"GET of the run while it ran (JSON, every second), median / max of {len(polls)}",
        value=f"{median_ms(polls):.0f} ms", floor=f"max {max(polls) * 1000:.0f} ms", target="reported",
    ))  # fmt: skip
    n = max(b.args.reps, 10)
    for label, url, params in [
        ("GET of the ended run, JSON", path, None),
        ("GET of the ended run, Markdown", path, {"format": "markdown"}),
        ("GET of the ended run's plot.svg", f"{path}/plot.svg", None),
        ("explorer page: GET /ui/", "/ui/", None),
        ("explorer page's Suites tab: GET /api/suites", "/api/suites", None),
        (f"explorer page's Suites tab: GET /api/suites/{{id}} ({cases} cases)", f"/api/suites/{suite_id}", None),
        ("GET /api/suites/{id}/runs", f"/api/suites/{suite_id}/runs", None),
    ]:
        ms, size_b = await _timed_get(b, url, n, params=params)
        b.report.add(Row(measure=f"{label} ({size_b:,} B), median of {n}", value=f"{ms:.0f} ms", target="reported"))
