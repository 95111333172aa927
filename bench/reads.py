"""What issue 25's readings cost: compare with its turns lined up, and the fork tree with each session's
counts now and its fork point, on generated sessions of 100 and 1,000 turns (about 10 events a turn).

    .venv/bin/python -m bench.reads

For compare, the source against a fork before its middle turn (half the turns after the common part on one
side): the whole call, and its two reads of the turns after the prefix apart, the totals (events_tally, what
compare read before) and the turns lined up (events_tally_by_turn, the new read). For the tree, a source
with 4 forks. Medians of 7 runs, after one warm-up, on BENCH_DATABASE_URL's server.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from bench.generate import SessionSpec, insert_session
from bench.inprocess import kagent_database, service_parts

RUNS = 7


async def _median_ms(work: Callable[[], Awaitable[object]]) -> float:
    await work()
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        await work()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def measure(turns: int) -> str:
    """One table row: a v1 session of `turns` turns and 4 forks of it, in a database of its own."""
    from service.branches import compare, lineage
    from service.identity import Caller
    from service.operations import forking, summary
    from service.schemas import ForkRequest

    async with kagent_database() as (dsn, conn):
        made = await insert_session(conn, SessionSpec(turns=turns, dialect="v1"))
        async with service_parts(dsn) as svc:
            caller = Caller(user_id=made.user_id)
            forks = []
            for at in (turns // 2, turns // 4, 1, turns - 1):
                req = ForkRequest(rewind_before_invocation_id=made.invocation_ids[at])
                forks.append((await forking.fork(svc, caller, made.session_id, req)).session_id)
            since = await conn.fetchval(
                "SELECT min(created_at) FROM event WHERE session_id = $1 AND strpos(data, $2) > 0",
                made.session_id, made.invocation_ids[turns // 2],
            )  # fmt: skip

            async def whole() -> object:
                return await compare.compare(svc, caller, made.session_id, str(forks[0]))

            async def totals() -> object:
                async with svc.connection() as c:
                    return await summary.tally(svc.store, c, made.session_id, made.user_id, since)

            async def by_turn() -> object:
                async with svc.connection() as c:
                    return await summary.turn_tallies(svc.store, c, made.session_id, made.user_id, since)

            async def tree() -> object:
                return await lineage.tree(svc, caller, made.session_id)

            figures = [await _median_ms(w) for w in (whole, totals, by_turn, tree)]
    return f"| {turns:,} | {made.events:,} | " + " | ".join(f"{ms:.1f} ms" for ms in figures) + " |"


async def main() -> None:
    print("| turns | events | compare | its totals read | its turns read | tree (source + 4 forks) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for turns in (100, 1000):
        print(await measure(turns), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
