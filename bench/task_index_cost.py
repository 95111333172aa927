"""What a task index costs kagent's task upsert, variant by variant: `python -m bench.task_index_cost [--rounds 3]`.

bench.run's `writes` measure installs and removes the real index between rounds, so its ratio carries the
machine's drift between rounds (this machine's rounds spread by a third). Here each variant has its own
copy of kagent's `task` table (`CREATE TABLE ... (LIKE task INCLUDING ALL)`, the benchmark's 10,000-event
session's rows in it) with one index, and kagent's upsert (bench.kagent_writes.UPSERT_TASK: an insert, then
an update, of the same 12.8 KB task, each its own transaction) runs on every copy in turn for each task,
the order reversed every other task, so that every variant meets the same moment of the machine. Variants:

- none: no index (the baseline);
- parse only: a GIN index over a function that parses the task as jsonb (in an exception block) and
  answers one fixed value: what any index over the task's JSON costs at least;
- candidates: the index as installed (task_invocation_candidates, fastupdate off);
- candidates, fastupdate on: the same with GIN's pending list;
- task_invocation_ids: version 1 of the index (migration 0006).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from bench.generate import SessionSpec, insert_session
from bench.inprocess import kagent_database
from bench.kagent_writes import UPSERT_TASK

PARSE_ONLY = """
CREATE FUNCTION bench_parse_only(data TEXT) RETURNS TEXT[] LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN ARRAY[jsonb_typeof(data::jsonb)];
EXCEPTION WHEN others THEN
    RETURN ARRAY['']::TEXT[];
END;
$$
"""

VARIANTS = {
    "none": None,
    "parse only": "USING gin (bench_parse_only(data))",
    "candidates (as installed)": "USING gin (kagent_fork.task_invocation_candidates(data)) WITH (fastupdate = off)",
    "candidates, fastupdate on": "USING gin (kagent_fork.task_invocation_candidates(data))",
    "task_invocation_ids (version 1)": "USING gin (kagent_fork.task_invocation_ids(data))",
}
TASKS = 300


async def measure(args: argparse.Namespace) -> None:
    from service.migrate import migrate

    async with kagent_database() as (_, conn):
        await migrate(conn, "kagent_fork")
        await conn.execute(PARSE_ONLY)
        s = await insert_session(conn, SessionSpec(turns=1000))
        statements = {}
        for i, (name, index) in enumerate(VARIANTS.items()):
            table = f"task_copy_{i}"
            await conn.execute(f"CREATE TABLE {table} (LIKE task INCLUDING ALL)")
            await conn.execute(f"INSERT INTO {table} SELECT * FROM task")
            if index is not None:
                await conn.execute(f"CREATE INDEX ON {table} {index} WHERE deleted_at IS NULL")
            await conn.execute(f"VACUUM ANALYZE {table}")
            statements[name] = UPSERT_TASK.replace("INTO task ", f"INTO {table} ").replace("task.", f"{table}.")
        rows = await conn.fetch(
            "SELECT data FROM task WHERE session_id = $1 ORDER BY created_at LIMIT $2", s.session_id, TASKS
        )
        datas = [r["data"] for r in rows]
        target = str(uuid.uuid4())
        await conn.execute(
            "INSERT INTO session (id, user_id, name, created_at, updated_at) VALUES ($1, $2, 'b', NOW(), NOW())",
            target, s.user_id,
        )  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        names = list(VARIANTS)
        for round_ in range(args.rounds):
            for k, data in enumerate(datas):
                task_id = str(uuid.uuid4())
                for name in names if (k + round_) % 2 == 0 else names[::-1]:
                    started = time.perf_counter()
                    await conn.execute(statements[name], task_id, data, target, "1.0", s.user_id)
                    await conn.execute(statements[name], task_id, data, target, "1.0", s.user_id)
                    times[name].append((time.perf_counter() - started) / 2)
            for i in range(len(VARIANTS)):
                await conn.execute(f"DELETE FROM task_copy_{i} WHERE session_id = $1", target)
                await conn.execute(f"VACUUM task_copy_{i}")
    base = statistics.median(times["none"])
    print(f"kagent's task upsert of a 12.8 KB task, median of {len(times['none'])} (insert + update) / 2:")
    for name, samples in times.items():
        ms = statistics.median(samples)
        print(f"  {name:32s} {ms * 1e6:5.0f} us  {ms / base:.2f}x  ({(ms - base) * 1e6:+4.0f} us)")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.task_index_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help=f"rounds of {TASKS} tasks")
    asyncio.run(measure(p.parse_args()))


if __name__ == "__main__":
    main()
