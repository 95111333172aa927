"""The work a first touch does, against its floor's: `python -m bench.first_touch_cpu [--turns 1000] [--reps 15]`.

A first touch (issue 37: the first listing page, or the first dry run before the 90 % turn, of a session with no
turn map) runs in-process, as the HTTP handlers run it, on a generated session in a throw-away database; after
each, its floor (bench.first_touch.FLOOR_TURNS). Each is timed, and its CPU time is taken: this process's (the
service's Python) and that of every PostgreSQL backend of the database (from /proc, so PostgreSQL on this
machine; parallel query off, so that no worker's time escapes the count). On N cores, a request cannot end before
its CPU time over N: the wall time a first touch could reach against its floor's, however well it overlaps.
The map is never built (every ask stays a first touch). Run it on a quiet machine: it reads /proc's ticks (10 ms),
so it reports medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from bench.first_touch import FLOOR_TURNS
from bench.generate import SessionSpec, insert_session
from bench.inprocess import kagent_database, service_parts

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # a backend that ended meanwhile
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


async def measure(args: argparse.Namespace) -> None:
    from service.branches import turns
    from service.identity import Caller
    from service.kagent import turn_map
    from service.operations import forking
    from service.schemas import ForkRequest

    async with kagent_database() as (dsn, conn):
        s = await insert_session(conn, SessionSpec(turns=args.turns, seed=37))
        await conn.execute(f"ALTER DATABASE {await conn.fetchval('SELECT current_database()')} "
                           "SET max_parallel_workers_per_gather = 0")  # fmt: skip
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("SET jit = off")
        await conn.execute("SET plan_cache_mode = force_custom_plan")  # the floor at its best (bench.run)
        await conn.execute("SET max_parallel_workers_per_gather = 0")
        turn_map._start = lambda *_: None  # no build: every ask stays a first touch
        async with service_parts(dsn) as svc:
            caller = Caller(user_id=s.user_id)
            boundary = s.invocation_ids[len(s.invocation_ids) * 9 // 10]

            async def ask() -> None:
                if args.op == "listing":
                    await turns.invocations(svc, caller, s.session_id, limit=100)
                else:
                    req = ForkRequest(rewind_before_invocation_id=boundary, dry_run=True)
                    await forking.fork(svc, caller, s.session_id, req)

            for _ in range(3):  # every pooled connection made and its statements prepared
                await ask()
            rows: list[tuple[float, float, float, float, float]] = []
            floor_pid = await conn.fetchval("SELECT pg_backend_pid()")
            for _ in range(args.reps):
                pids = [r[0] for r in await conn.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )]  # fmt: skip
                pg, py, wall = sum(map(_cpu_seconds, pids)), time.process_time(), time.perf_counter()
                await ask()
                wall, py = time.perf_counter() - wall, time.process_time() - py
                pg = sum(map(_cpu_seconds, pids)) - pg
                floor_cpu, floor_wall = _cpu_seconds(floor_pid), time.perf_counter()
                await conn.fetch(FLOOR_TURNS, s.session_id, s.user_id)
                floor_wall, floor_cpu = time.perf_counter() - floor_wall, _cpu_seconds(floor_pid) - floor_cpu
                rows.append((wall, py, pg, floor_wall, floor_cpu))

    def ms(i: int) -> float:
        return statistics.median(r[i] for r in rows) * 1000

    cores = os.cpu_count() or 1
    work = ms(1) + ms(2)
    print(f"first {args.op} of {s.events:,} events, medians of {args.reps}: wall {ms(0):.0f} ms, CPU {work:.0f} ms "
          f"(Python {ms(1):.0f}, PostgreSQL {ms(2):.0f}); floor wall {ms(3):.0f} ms, CPU {ms(4):.0f} ms. Work "
          f"{work / ms(4):.2f}x the floor's; on {cores} cores at least {work / cores / ms(3):.2f}x its time, "
          f"measured {ms(0) / ms(3):.2f}x")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.first_touch_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=1000, help="turns of the generated session (10 events each)")
    p.add_argument("--op", choices=["listing", "dry-run"], default="listing")
    p.add_argument("--reps", type=int, default=15)
    asyncio.run(measure(p.parse_args()))


if __name__ == "__main__":
    main()
