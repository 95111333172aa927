"""Issue 35's judge measure: `python -m bench.judge` (a database of its own on BENCH_DATABASE_URL, as bench.run).

An experiment of 4 branches x 5 turns (the embedded demo's two scripted agents x 2 repeats) on a generated
session of 20 turns, judged by a bench judge: a real a2a-sdk agent under kagent's A2A paths, beside the demo's
agents (one KAGENT_A2A_URL), that works `--think` seconds on each question (a model's time), saves its task
into kagent's table as kagent's runtime does, and records when it worked on each. The service runs as
`kagent-fork serve`. Per repetition, alternating: the same experiment without a judge, then with one.

- judging, from the branches' end (the experiment's finished_at) to the verdict (the judgment's finished_at),
  against the judge's own time: the union of its tasks' lifetimes as kagent's task table records them (each
  task's created_at to its last save's updated_at: from the question received to the answer saved, the judge
  agent's work and its own bookkeeping, as kagent's runtime would do it): target at most 1.10x. The judge's
  busy time inside its executor alone (its `--think` sleeps) is printed too;
- the whole experiment with the judge against without it: what the judge added, against its own time
  (reported).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers.default_request_handler_v2 import DefaultRequestHandlerV2
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as a2a
from starlette.applications import Starlette

from bench.generate import SessionSpec, insert_session
from bench.run import DEFAULT_SERVER, HEADERS, Service, bench_database, machine, phase
from service.embedded.scripted_agent import open_turn

JUDGE = "kagent/bench-judge"
AGENTS = ["kagent/k8s-agent", "kagent/scripted-agent"]  # service.embedded.scripted_agent.AGENTS


class BenchJudge(AgentExecutor):
    """Works `think` seconds on each question, then answers the verdict JSON; records (start, end) of each."""

    def __init__(self, think: float) -> None:
        self.think, self.busy = think, []
        self.lock = threading.Lock()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        began = time.time()
        updater = await open_turn(context, event_queue)
        await asyncio.sleep(self.think)
        verdict = json.dumps({"winner": "tie", "reason": "the bench judge has no preference"})
        await updater.add_artifact([a2a.Part(text=f"Compared.\n{verdict}")])
        await updater.complete()
        with self.lock:
            self.busy.append((began, time.time()))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def busy_union(intervals: list[tuple[float, float]]) -> float:
    """Seconds during which at least one question was being worked on."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


@contextmanager
def agents(dsn: str, judge: BenchJudge) -> Iterator[str]:
    """The demo's scripted agents and the bench judge, one app under kagent's A2A paths: KAGENT_A2A_URL."""
    from service.embedded import scripted_agent

    demo = scripted_agent.agents_app(dsn)
    card = a2a.AgentCard(name="bench-judge", version="1.0", description="kagent-fork's bench judge")
    handler = DefaultRequestHandlerV2(
        agent_executor=judge, task_store=scripted_agent.KagentTaskStore(scripted_agent.Pool(dsn)), agent_card=card
    )
    base = f"/api/a2a/{JUDGE}/"
    routes = [*demo.routes, *create_jsonrpc_routes(handler, base, enable_v0_3_compat=True)]
    routes += create_agent_card_routes(card, card_url=f"{base}.well-known/agent-card.json")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(Starlette(routes=routes), log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/api/a2a"
    finally:
        server.should_exit = True
        thread.join(10)


def _at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def _experiment(client: httpx.AsyncClient, session: Any, judged: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "rewind_before_invocation_id": session.invocation_ids[-5], "agents": AGENTS, "repeats": 2, "turns": 5,
        "max_context_tokens": 10**9,
    }  # fmt: skip
    if judged:
        body["judge"] = {"agent": JUDGE}
    r = await client.post(f"/api/sessions/{session.session_id}/experiments", json=body, headers=HEADERS)
    if r.status_code != 202:
        raise RuntimeError(f"experiment answered {r.status_code}: {r.text[:300]}")
    path = f"/api/experiments/{r.json()['data']['experiment']['id']}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        data: dict[str, Any] = (await client.get(path, headers=HEADERS)).json()["data"]
        if data["status"] not in ("running", "judging"):
            return data
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{path} did not end in 300 s")


async def run(args: argparse.Namespace) -> None:
    import asyncpg

    from service.embedded.server import install_kagent_schema

    judge = BenchJudge(args.think)
    async with bench_database(args.server, keep=False, prefix="kagent_fork_bench_judge_") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            print(await machine(conn))
            await install_kagent_schema(conn)
            session = await insert_session(conn, SessionSpec(turns=20))
        finally:
            await conn.close()
        with agents(dsn, judge) as url:
            service = Service(dsn=dsn, workers=args.workers, log=Path(args.log), env={"KAGENT_A2A_URL": url})
            await phase(f"starting kagent-fork serve --workers {args.workers}", service.start())
            try:
                async with httpx.AsyncClient(base_url=service.url, timeout=60) as client:
                    await _experiment(client, session, judged=False)  # warm-up
                    rows = [await _rep(client, session, judge, dsn) for _ in range(args.reps)]
            finally:
                service.stop()
    plain, judged, judging, own, _, inside = (statistics.median(r[i] for r in rows) for i in range(6))
    print(
        f"\nper repetition (plain, judged, judging, the judge's tasks, calls, inside its executor) s: "
        f"{[tuple(round(x, 2) for x in r) for r in rows]}"
    )
    calls = rows[0][4]
    print("\n| measure | value | against | ratio | target | met |\n|---|---|---|---|---|---|")
    print(f"| judging an experiment of 4 branches x 5 turns ({calls} calls, the judge {args.think} s a call, "
          f"WHATIF_MAX_PARALLEL 4): the branches' end to the verdict, against the judge's own time (its tasks' "
          f"lifetimes in kagent's table; inside its executor {inside:.2f} s), "
          f"median of {args.reps} | {judging:.2f} s | {own:.2f} s | {judging / own:.2f}x | <= 1.10x | "
          f"{'yes' if judging <= 1.1 * own else '**no**'} |")  # fmt: skip
    print(
        f"| the whole experiment with the judge against without, median of {args.reps} | {judged:.2f} s | "
        f"{plain:.2f} s | +{judged - plain:.2f} s (the judge's own {own:.2f} s) | reported | |"
    )


async def _rep(
    client: httpx.AsyncClient, session: Any, judge: BenchJudge, dsn: str
) -> tuple[float, float, float, float, int, float]:
    import asyncpg

    plain = await _experiment(client, session, judged=False)
    first = len(judge.busy)
    done = await _experiment(client, session, judged=True)
    verdict = done["judgment"]
    if verdict["status"] != "completed" or done["status"] != "completed":
        raise RuntimeError(f"the judged experiment ended {done['status']}: {verdict}")
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT t.created_at, t.updated_at FROM kagent_fork.judge_call c JOIN task t ON t.id = c.task_id "
            "WHERE c.judgment_id = $1", verdict["id"],
        )  # fmt: skip
    finally:
        await conn.close()
    tasks = busy_union([(r["created_at"].timestamp(), r["updated_at"].timestamp()) for r in rows])
    return (
        _at(plain["finished_at"]) - _at(plain["created_at"]),
        _at(verdict["finished_at"]) - _at(done["created_at"]),
        _at(verdict["finished_at"]) - _at(done["finished_at"]),
        tasks,
        verdict["calls"],
        busy_union(judge.busy[first:]),
    )


def main(argv: list[str] | None = None) -> int:
    import os

    p = argparse.ArgumentParser(prog="python -m bench.judge", description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5, help="repetitions (median)")
    p.add_argument("--think", type=float, default=1.0, help="the bench judge's seconds on each question")
    p.add_argument("--workers", type=int, default=2, help="kagent-fork serve --workers")
    p.add_argument("--log", default="/tmp/kagent-fork-bench-judge.log", help="the service's log")
    args = p.parse_args(argv)
    args.server = os.environ.get("BENCH_DATABASE_URL", DEFAULT_SERVER)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
