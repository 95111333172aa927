"""Load with invariants (issue 5), bounded: `python -m bench.load [--clients 16] [--seconds 30]`.

It creates a throw-away database on the server named by --server-url (default LOAD_DATABASE_URL, else
postgresql://postgres@127.0.0.1:5432/postgres), installs kagent's tables, writes many sessions with
bench.generate, starts `kagent-fork serve` on loopback, and lets N clients run for M seconds, each
mixing forks (some before a turn, some of forks, some retried with an Idempotency-Key), dry runs,
turn listings, and rewinds of sessions of its own, each undone at once. It reports throughput,
p50/p99 and errors; then, the service stopped, it checks in the database that:

- each lineage record's fork exists with exactly the events, tasks and history messages it counted;
- every 201 the clients got is one lineage record, and no fork exists that nobody asked for;
- no source changed (the forked sessions row for row; the rewound ones are whole again after undo);
- no id is duplicated, no row belongs to a session that does not exist, every task names its session.

Exit code 0 only with zero errors and zero violations. Not run in CI; its latest report is in
docs/reliability.md. The database is dropped at the end (--keep keeps it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.generate import SessionSpec, insert_session
from bench.run import bench_database

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
# The mix each client draws from (weights).
MIX = {"fork": 35, "fork_of_fork": 5, "fork_retry": 5, "dry_run": 15, "invocations": 25, "rewind_undo": 15}


@dataclass
class Source:
    session_id: str
    user_id: str
    invocation_ids: list[str]
    events: int
    tasks: int


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    errors: list[str] = field(default_factory=list)
    created: dict[str, str] = field(default_factory=dict)  # fork id -> its owner, from every 201
    replays: int = 0

    def record(self, op: str, started: float, status: int, expected: set[int], detail: str = "") -> None:
        self.latencies[op].append(time.perf_counter() - started)
        self.statuses[op][status] += 1
        if status not in expected:
            self.errors.append(f"{op}: {status} {detail[:200]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def serve(dsn: str, workers: int, log: Path) -> AsyncIterator[str]:
    """`kagent-fork serve` in a subprocess, as users run it; stopped (SIGINT) at the end."""
    async with serve_process(dsn, workers, log) as (url, _):
        yield url


@contextlib.asynccontextmanager
async def serve_process(
    dsn: str, workers: int, log: Path, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """serve, also giving the process (with --workers 1 the one that serves: its memory can be read) and
    taking settings for it (`env`, over this process's environment)."""
    port = free_port()
    command = Path(sys.executable).with_name("kagent-fork")
    cmd = [str(command)] if command.exists() else [sys.executable, "-m", "service"]
    cmd += ["serve", "--port", str(port), "--workers", str(workers)]
    environment = {**os.environ, **(env or {}), "DATABASE_URL": dsn, "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            *cmd, env=environment, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(base_url=url, timeout=5) as c:
            while True:
                if proc.returncode is not None:
                    raise RuntimeError(f"kagent-fork serve exited with {proc.returncode}; see {log}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await c.get("/readyz")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kagent-fork serve was not ready in 60 s; see {log}")
                await asyncio.sleep(0.2)
        yield url, proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 40)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def seed(dsn: str, sessions: int, turns: int, users: int) -> tuple[list[Source], list[Source]]:
    """`sessions` sessions of `turns` turns (both kagent lines), by `users` users: two thirds to fork,
    one third to rewind."""
    from service.embedded.server import install_kagent_schema

    conn = await asyncpg.connect(dsn)
    try:
        await install_kagent_schema(conn)
        made = []
        for i in range(sessions):
            spec = SessionSpec(
                turns=turns, dialect=("v1", "legacy")[i % 2], user_id=f"load-user-{i % users}@example.com", seed=i
            )
            g = await insert_session(conn, spec)
            made.append(Source(g.session_id, g.user_id, g.invocation_ids, g.events, g.tasks))
    finally:
        await conn.close()
    cut = sessions * 2 // 3
    return made[:cut], made[cut:]


# A session's rows, as one checksum. `session.updated_at` only when $3: a rewind and its undo lift the
# session in kagent's sidebar, as kagent does on every write; everything else must be as it was.
SESSION_ROWS = """
SELECT md5(coalesce((SELECT string_agg(s::text, '|') FROM (
           SELECT id, user_id, name, agent_id, source, created_at, CASE WHEN $3 THEN updated_at END, deleted_at
           FROM session WHERE id = $1 AND user_id = $2) s), '')
       || coalesce((SELECT string_agg(e::text, '|' ORDER BY e.id) FROM (
           SELECT id, created_at, updated_at, deleted_at, data FROM event
           WHERE session_id = $1 AND user_id = $2) e), '')
       || coalesce((SELECT string_agg(t::text, '|' ORDER BY t.id) FROM (
           SELECT id, created_at, updated_at, deleted_at, data, protocol_version, user_id FROM task
           WHERE session_id = $1) t), ''))
"""


async def fingerprints(dsn: str, forked: list[Source], rewound: list[Source]) -> dict[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        return {
            s.session_id: await conn.fetchval(SESSION_ROWS, s.session_id, s.user_id, s in forked)
            for s in forked + rewound
        }
    finally:
        await conn.close()


async def client(
    index: int, http: httpx.AsyncClient, forkable: list[Source], mine: list[Source], stop_at: float, stats: Stats
) -> None:
    """One client: weighted random operations until the time is up. Rewinds only touch its own sessions,
    so that every rewind and undo must succeed; forks and reads go anywhere."""
    rnd = random.Random(index)
    own_forks: list[tuple[str, str]] = []
    ops, weights = list(MIX), list(MIX.values())
    while time.monotonic() < stop_at:
        op = rnd.choices(ops, weights)[0]
        if op == "rewind_undo" and not mine:
            op = "invocations"
        if op == "fork_of_fork" and not own_forks:
            op = "fork"
        src = rnd.choice(forkable)
        me = {"X-User-Id": src.user_id}
        started = time.perf_counter()
        try:
            if op in ("fork", "dry_run", "fork_retry"):
                body: dict[str, Any] = {"dry_run": True} if op == "dry_run" else {}
                if rnd.random() < 0.6:
                    body["rewind_before_invocation_id"] = rnd.choice(src.invocation_ids)
                headers = dict(me)
                if op == "fork_retry":
                    headers["Idempotency-Key"] = f"load-{index}-{uuid.uuid4()}"
                path = f"/api/sessions/{src.session_id}/fork"
                r = await http.post(path, json=body, headers=headers)
                stats.record(op, started, r.status_code, {200} if op == "dry_run" else {201}, r.text)
                if r.status_code == 201:
                    stats.created[r.json()["data"]["id"]] = src.user_id
                    own_forks.append((r.json()["data"]["id"], src.user_id))
                    if op == "fork_retry":  # the retry answers the same fork
                        started = time.perf_counter()
                        again = await http.post(path, json=body, headers=headers)
                        same = again.status_code == 200 and again.json()["data"]["id"] == r.json()["data"]["id"]
                        stats.record("fork_replay", started, again.status_code if same else -1, {200}, again.text)
                        stats.replays += 1
            elif op == "fork_of_fork":
                fork_id, owner = rnd.choice(own_forks)
                r = await http.post(f"/api/sessions/{fork_id}/fork", json={}, headers={"X-User-Id": owner})
                # a chain deeper than MAX_FORK_DEPTH is refused by design (422), never an error
                stats.record(op, started, r.status_code, {201, 422}, r.text)
                if r.status_code == 201:
                    stats.created[r.json()["data"]["id"]] = owner
                    own_forks.append((r.json()["data"]["id"], owner))
            elif op == "invocations":
                target = rnd.choice(forkable + mine)
                r = await http.get(
                    f"/api/sessions/{target.session_id}/invocations", headers={"X-User-Id": target.user_id}
                )
                stats.record(op, started, r.status_code, {200}, r.text)
            else:
                target = rnd.choice(mine)
                who = {"X-User-Id": target.user_id}
                boundary = rnd.choice(target.invocation_ids[-5:])
                path = f"/api/sessions/{target.session_id}"
                r = await http.post(f"{path}/rewind", json={"rewind_before_invocation_id": boundary}, headers=who)
                stats.record("rewind", started, r.status_code, {200}, r.text)
                if r.status_code == 200:
                    started = time.perf_counter()
                    rewind_id = r.json()["data"]["rewind"]["id"]
                    u = await http.post(f"{path}/rewinds/{rewind_id}/undo", json={}, headers=who)
                    stats.record("undo", started, u.status_code, {200}, u.text)
        except httpx.HTTPError as exc:
            stats.record(op, started, -1, set(), f"{type(exc).__name__}: {exc}")


# Each invariant, and the query that counts the rows breaking it.
INVARIANTS: dict[str, str] = {
    "each lineage record's fork session exists, not deleted": """
        SELECT count(*) FROM {schema}.fork f
        LEFT JOIN session s ON s.id = f.session_id AND s.user_id = f.user_id AND s.deleted_at IS NULL
        WHERE s.id IS NULL""",
    "each fork holds exactly the events its lineage record counted": """
        SELECT count(*) FROM {schema}.fork f
        WHERE f.events_copied <> (SELECT count(*) FROM event e
                                  WHERE e.session_id = f.session_id AND e.user_id = f.user_id
                                    AND e.deleted_at IS NULL)""",
    "each fork holds exactly the tasks its lineage record counted": """
        SELECT count(*) FROM {schema}.fork f
        WHERE f.tasks_copied <> (SELECT count(*) FROM task t
                                 WHERE t.session_id = f.session_id AND t.user_id = f.user_id
                                   AND t.deleted_at IS NULL)""",
    "each fork's tasks hold exactly the history messages its lineage record counted": """
        SELECT count(*) FROM {schema}.fork f
        WHERE f.messages_copied <> (SELECT coalesce(sum(jsonb_array_length(coalesce(t.data::jsonb -> 'history',
                                                                                      '[]'::jsonb))), 0)
                                    FROM task t WHERE t.session_id = f.session_id AND t.user_id = f.user_id
                                      AND t.deleted_at IS NULL)""",
    "each fork task names its own session (contextId) and its own id": """
        SELECT count(*) FROM {schema}.fork f JOIN task t ON t.session_id = f.session_id AND t.user_id = f.user_id
        WHERE t.data::jsonb ->> 'contextId' IS DISTINCT FROM f.session_id
           OR t.data::jsonb ->> 'id' IS DISTINCT FROM t.id""",
    "each session is a seeded one or a recorded fork": """
        SELECT count(*) FROM session s
        WHERE NOT (s.id = ANY($1::text[]))
          AND NOT EXISTS (SELECT 1 FROM {schema}.fork f WHERE f.session_id = s.id AND f.user_id = s.user_id)""",
    "each event belongs to an existing session": """
        SELECT count(*) FROM event e
        WHERE NOT EXISTS (SELECT 1 FROM session s WHERE s.id = e.session_id AND s.user_id = e.user_id)""",
    "each task belongs to an existing session": """
        SELECT count(*) FROM task t
        WHERE NOT EXISTS (SELECT 1 FROM session s WHERE s.id = t.session_id AND s.user_id = t.user_id)""",
    "no event id is used twice": "SELECT count(*) FROM (SELECT id FROM event GROUP BY id HAVING count(*) > 1) d",
    "no session id is used twice": "SELECT count(*) FROM (SELECT id FROM session GROUP BY id HAVING count(*) > 1) d",
    "every rewind was undone (each client undid its own)": """
        SELECT count(*) FROM {schema}.rewind WHERE undone_at IS NULL""",
}


async def check(
    dsn: str, sources: list[Source], rewound: list[Source], before: dict[str, str], stats: Stats
) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        found = {}
        seeded = [s.session_id for s in sources + rewound]
        for name, query in INVARIANTS.items():
            sql = query.format(schema="kagent_fork")
            found[name] = int(await conn.fetchval(sql, seeded) if "$1" in sql else await conn.fetchval(sql))
        records = {
            r["session_id"]: r["user_id"] for r in await conn.fetch("SELECT session_id, user_id FROM kagent_fork.fork")
        }
        found["every 201 answer is one lineage record, and every record was answered"] = len(
            set(records.items()) ^ set(stats.created.items())
        )
    finally:
        await conn.close()
    after = await fingerprints(dsn, sources, rewound)
    found["no source changed: forked ones row for row, rewound ones whole again after undo"] = sum(
        before[k] != after[k] for k in before
    )
    return found


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


def report(args: argparse.Namespace, stats: Stats, found: dict[str, int], took: float, env: dict[str, Any]) -> str:
    total = sum(len(v) for v in stats.latencies.values())
    every = [x for v in stats.latencies.values() for x in v]
    lines = [
        f"Settings: {args.clients} clients for {args.seconds} s against `kagent-fork serve --workers {args.workers}` "
        f"on loopback (pool {env['pool']} connections a worker); {args.sessions} sessions of {args.turns} turns "
        f"({env['events']} events, {env['tasks']} tasks; both kagent lines) by {args.users} users; "
        f"{env['cpus']} cores, PostgreSQL {env['pg']}, Python {platform.python_version()}.",
        "",
        "| operation | requests | per second | p50 ms | p99 ms | statuses |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for op in sorted(stats.latencies):
        values = stats.latencies[op]
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(stats.statuses[op].items()))
        lines.append(
            f"| {op} | {len(values)} | {len(values) / took:.1f} | {pct(values, 0.5):.1f} | {pct(values, 0.99):.1f} "
            f"| {codes} |"
        )
    lines.append(
        f"| **all** | {total} | {total / took:.1f} | {pct(every, 0.5):.1f} | {pct(every, 0.99):.1f} "
        f"| errors: {len(stats.errors)} |"
    )
    lines += ["", f"Forks made: {len(stats.created)} (replays checked: {stats.replays}). Invariants:", ""]
    lines += [f"- {'ok' if n == 0 else f'VIOLATED ({n})'}: {name}" for name, n in found.items()]
    if stats.errors:
        lines += ["", "Errors (first 10):", *[f"- {e}" for e in stats.errors[:10]]]
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> tuple[str, bool]:
    async with bench_database(args.server_url, args.keep, prefix="kf_load_") as dsn:
        print(f"seeding {args.sessions} sessions of {args.turns} turns ...", flush=True)
        forkable, rewindable = await seed(dsn, args.sessions, args.turns, args.users)
        before = await fingerprints(dsn, forkable, rewindable)
        conn = await asyncpg.connect(dsn)
        try:
            env = {
                "events": await conn.fetchval("SELECT count(*) FROM event"),
                "tasks": await conn.fetchval("SELECT count(*) FROM task"),
                "pg": await conn.fetchval("SHOW server_version"),
                "cpus": os.cpu_count(),
                "pool": os.environ.get("DB_POOL_MAX_SIZE", "10"),
            }
        finally:
            await conn.close()
        stats = Stats()
        log = Path(tempfile.gettempdir()) / f"kagent-fork-load-{os.getpid()}.log"
        async with serve(dsn, args.workers, log) as url:
            print(f"{args.clients} clients for {args.seconds} s against {url} (log {log}) ...", flush=True)
            limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
            async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as http:
                started = time.monotonic()
                stop_at = started + args.seconds
                await asyncio.gather(
                    *[
                        client(i, http, forkable, rewindable[i :: args.clients], stop_at, stats)
                        for i in range(args.clients)
                    ]
                )
                took = time.monotonic() - started
        found = await check(dsn, forkable, rewindable, before, stats)
    text = report(args, stats, found, took, env)
    print(text)
    return text, not stats.errors and not any(found.values())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0])
    p.add_argument("--server-url", default=os.environ.get("LOAD_DATABASE_URL", DEFAULT_SERVER),
                   help="a PostgreSQL server the run may create a database in")  # fmt: skip
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--sessions", type=int, default=48)
    p.add_argument("--turns", type=int, default=20, help="turns a session (10 events and one task each)")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--workers", type=int, default=1, help="kagent-fork serve --workers")
    p.add_argument("--report", help="also write the report (markdown) to this file")
    p.add_argument("--keep", action="store_true", help="keep the database")
    return p


if __name__ == "__main__":
    arguments = parser().parse_args()
    if arguments.clients < 1 or arguments.seconds <= 0 or arguments.sessions < 3:
        parser().error("need at least 1 client, a positive duration and 3 sessions")
    text, passed = asyncio.run(main(arguments))
    if arguments.report:
        Path(arguments.report).write_text(text + "\n")
    raise SystemExit(0 if passed else 1)
