"""The ownership check's cost, and a request's access before and after issue 48: `python -m bench.ownership
[--tasks 10000 100000] [--reps 31]`.

The ownership check of same-id rows (store.sessions.runtime_rows_owned, frameworks.runtime_users: whether the rows
of a session under kagent's default user are its owner's) reads every task row of the session through the
session_id index (kagent's table has no index on its user), so it grows with the session. Here, in a throw-away
database holding kagent's tables, a session of N tasks (owner's; short task data, as a TOASTed task's heap tuple
is short) among 1,000 other users' 20-task sessions, a share link to it; measured in turn, medians of --reps:

- `check`: runtime_rows_owned alone;
- `floor`: the same task rows counted through the same index (`SELECT count(*) FROM task WHERE session_id = $1`),
  the least a read of them costs;
- a request's access queries as 8fbcfa3 ran them (`before`: the counts tests/test_access_once.py measured there,
  the share token's and the session row's queries, the ownership check, the framework's signals) and as they run
  now (`after`: identity.settle, each once), for a fork (2, 2, 2, 1) and an experiment start of two branches
  (6, 6, 4, 2); a listing ran the check once before too (its share and row queries twice).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from bench.inprocess import kagent_database, service_parts

OTHERS = 1000  # other users' sessions, 20 tasks each: the planner's statistics look like a kagent database's
BEFORE = {"fork": (2, 2, 2, 1), "experiment start (2 branches)": (6, 6, 4, 2)}  # share, row, ownership, framework


async def _fill(conn: object, tasks: int, sid: str, owner: str) -> None:
    execute: Callable[..., Awaitable[object]] = conn.execute  # type: ignore[attr-defined]
    await execute(
        "INSERT INTO session (id, user_id, name, created_at, updated_at, agent_id) "
        "VALUES ($1, $2, 'bench', now(), now(), 'kagent__NS__k8s_agent')",
        sid,
        owner,
    )
    await execute(
        "INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id) "
        "SELECT $1 || '-' || g, now() + g * interval '1 ms', now() + g * interval '1 ms', "
        '\'{"kind":"task","id":"\' || g || \'"}\', $1, \'1.0\', $2 FROM generate_series(1, $3) g',
        sid,
        owner,
        tasks,
    )
    await execute(
        "INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id) "
        "SELECT 'o' || s || '-' || g, now(), now(), '{}', 'other-' || s, '1.0', 'user-' || s "
        "FROM generate_series(1, $1) s, generate_series(1, 20) g",
        OTHERS,
    )


async def _size(tasks: int, reps: int) -> dict[str, list[float]]:
    """Each measure's times (seconds) with a session of `tasks` tasks."""
    from service import identity
    from service.kagent.frameworks import KAGENT_DEFAULT_USER

    async with kagent_database() as (dsn, conn), service_parts(dsn) as svc:
        sid, owner = f"bench-{tasks}", "owner@example.com"
        await _fill(conn, tasks, sid, owner)
        token = await conn.fetchval(
            "INSERT INTO session_share (token, session_id, user_id, read_only) "
            "VALUES ('bench-token', $1, $2, false) RETURNING token",
            sid,
            owner,
        )
        await conn.execute("VACUUM ANALYZE")
        caller = identity.Caller(user_id="visitor@example.com", share_token=token)
        store = svc.store
        async with svc.connection() as c:

            async def check() -> None:
                await store.sessions.runtime_rows_owned(c, sid, owner, KAGENT_DEFAULT_USER)

            async def floor() -> None:
                await c.fetchval("SELECT count(*) FROM task WHERE session_id = $1", sid)

            async def after() -> None:
                await identity.settle(svc, c, caller, sid)

            def before(counts: tuple[int, int, int, int]) -> Callable[[], Awaitable[None]]:
                async def queries() -> None:
                    shares, rows, checks, signals = counts
                    for _ in range(shares):
                        await store.sessions.share_by_token(c, token)
                    for _ in range(rows):
                        await store.sessions.get_session(c, sid, owner)
                    for _ in range(checks):
                        await check()
                    for _ in range(signals):
                        await store.sessions.framework_signals(c, sid, [owner])

                return queries

            runs: dict[str, Callable[[], Awaitable[None]]] = {"check": check, "floor": floor, "after": after}
            runs |= {f"before: {name}": before(counts) for name, counts in BEFORE.items()}
            for run in runs.values():  # statements prepared, pages cached
                await run()
            timed: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(reps):  # alternating, so that each sees the same machine
                for name, run in runs.items():
                    start = time.perf_counter()
                    await run()
                    timed[name].append(time.perf_counter() - start)
    return timed


async def measure(args: argparse.Namespace) -> None:
    for tasks in args.tasks:
        timed = await _size(tasks, args.reps)
        ms = {name: statistics.median(times) * 1000 for name, times in timed.items()}
        print(f"{tasks:,} tasks, medians of {args.reps}: check {ms['check']:.2f} ms, floor {ms['floor']:.2f} ms "
              f"({ms['check'] / ms['floor']:.2f}x); a request's access after (settle: each query once) "
              f"{ms['after']:.2f} ms; before: " + ", ".join(
                  f"{name} {ms[f'before: {name}']:.2f} ms ({ms[f'before: {name}'] / ms['after']:.1f}x)"
                  for name in BEFORE))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.ownership", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, nargs="+", default=[10_000, 100_000], help="the session's tasks")
    p.add_argument("--reps", type=int, default=31)
    asyncio.run(measure(p.parse_args()))


if __name__ == "__main__":
    main()
