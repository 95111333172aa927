"""Issue 22's experiment measures, run by bench.run (`--only experiments`).

The service is started with KAGENT_A2A_URL pointing at the embedded demo's scripted agents (real a2a-sdk
servers that write each turn into kagent's tables, as kagent's runtime does), served from a thread of the
benchmark's process, so that the cards are asked for and the branches really run. The demo serves two agent
names; more branches come from `repeats`, as a user comparing two agents with repeats would have them.

- the 202 of an experiment of 4 branches (2 agents x 2 repeats, one turn) of the 10,000-event session,
  against 4 forks of the same boundary over HTTP in the same repetition (target: within 4 forks + 10 %);
- the workers' peak RSS growth while 8 branches (2 x 4 repeats) re-ask 10 turns each (target: flat, <= 10 MB);
- the GET of that finished 8 x 10 experiment (target: < 50 ms).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench.generate import GeneratedSession
from bench.run import HEADERS, Bench, Row, _status_kb, median_ms, ratio_row

AGENTS = ["kagent/k8s-agent", "kagent/scripted-agent"]  # service.embedded.scripted_agent.AGENTS


async def _start(
    b: Bench, s: GeneratedSession, boundary: int, *, repeats: int, turns: int
) -> tuple[float, dict[str, Any]]:
    body = {
        "rewind_before_invocation_id": s.invocation_ids[boundary],
        "agents": AGENTS,
        "repeats": repeats,
        "turns": turns,
        # The bench's generated turns are large; the gate is measured by the dry run, not what is tested here.
        "max_context_tokens": 10**9,
    }
    started = time.perf_counter()
    response = await b.client.post(f"/api/sessions/{s.session_id}/experiments", json=body, headers=HEADERS)
    took = (time.perf_counter() - started) * 1000
    if response.status_code != 202:
        raise RuntimeError(f"experiment answered {response.status_code}: {response.text[:300]}")
    return took, response.json()["data"]["experiment"]


async def finished(b: Bench, path: str, *, sample: Any = None, limit_s: float = 300) -> dict[str, Any]:
    """Poll a what-if job or an experiment (its path) until it no longer runs (bounded); `sample()` at each poll."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if sample is not None:
            sample()
        data: dict[str, Any] = (await b.client.get(path, headers=HEADERS)).json()["data"]
        if data["status"] != "running":  # jobs and experiments: running until they end
            return data
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{path} still running after {limit_s:.0f} s")


async def _drop(b: Bench, experiment: dict[str, Any]) -> None:
    for branch in experiment["branches"]:
        await b.drop_copy(branch["session_id"])


async def measure_start(b: Bench, s: GeneratedSession) -> None:
    """The 202 of 4 branches against 4 forks of the same boundary, alternating, median of reps."""
    boundary = len(s.invocation_ids) - 1
    body = {"rewind_before_invocation_id": s.invocation_ids[boundary]}
    starts, forks = [], []
    for _ in range(b.args.reps):
        await b.quiesce()
        took = 0.0
        for _ in range(4):
            seconds, data = await b.http_fork(s, body)
            took += seconds * 1000
            await b.drop_copy(data["id"])
        forks.append(took)
        await b.quiesce()
        ms, experiment = await _start(b, s, boundary, repeats=2, turns=1)
        starts.append(ms)
        await _drop(b, await finished(b, f"/api/experiments/{experiment['id']}"))
    print(f"    4 forks {[round(x) for x in forks]} experiment {[round(x) for x in starts]} ms", flush=True)
    b.report.add(
        ratio_row(
            f"experiment of 4 branches on {s.events:,} events: time to 202 (cards, gate, 4 forks), against 4 forks "
            f"of the same boundary, median of {b.args.reps}",
            statistics.median(starts),
            statistics.median(forks),
            1.10,
        )
    )


async def measure_run(b: Bench, s: GeneratedSession) -> None:
    """8 branches x 10 turns: the workers' peak RSS growth while they run, then the finished GET's time."""
    await b.quiesce()
    base = b.service.reset_peaks()
    peak: dict[int, int] = dict(base)

    def sample() -> None:
        for pid in base:
            peak[pid] = max(peak[pid], _status_kb(pid, "VmHWM"))

    started = time.monotonic()
    _, experiment = await _start(b, s, len(s.invocation_ids) - 10, repeats=4, turns=10)
    done = await finished(b, f"/api/experiments/{experiment['id']}", sample=sample)
    sample()
    ran = time.monotonic() - started
    turns = sum(len(branch["turns"]) for branch in done["branches"])
    growth = max(peak[pid] - base[pid] for pid in base) / 1024
    b.report.add(
        Row(
            measure=f"service peak RSS growth while 8 branches x 10 turns run ({turns} turns {done['status']} in "
            f"{ran:.0f} s; worst worker)",
            value=f"{growth:.1f} MB",
            target="<= 10 MB",
            met="yes" if growth <= 10 else "**no**",
        )
    )
    took = []
    for _ in range(max(b.args.reps, 10)):
        t0 = time.perf_counter()
        response = await b.client.get(f"/api/experiments/{experiment['id']}", headers=HEADERS)
        took.append(time.perf_counter() - t0)
        response.raise_for_status()
    ms = median_ms(took)
    b.report.add(
        Row(
            measure=f"GET of a finished experiment of 8 branches x 10 turns ({len(response.content):,} B), median "
            f"of {len(took)}",
            value=f"{ms:.0f} ms",
            target="< 50 ms",
            met="yes" if ms < 50 else "**no**",
        )
    )
    await _drop(b, done)
