"""What the invocation index costs kagent's writes, variant by variant: `python -m bench.write_cost [--rounds 3]`.

bench.run's `writes` measure installs and removes the real index between rounds, so its ratio carries the
machine's drift between rounds (this machine's rounds spread by a third). Here each variant has its own
copy of kagent's table (`CREATE TABLE ... (LIKE event|task INCLUDING ALL)`, the benchmark's 10,000-event
session's rows in it) with its indexes, and kagent's statement (bench.kagent_writes: `InsertEvent` of a
1.25 KB event; the upsert of a 12.8 KB task, an insert then an update, each its own transaction) runs on
every copy in turn for each row, the order reversed every other row, so that every variant meets the same
moment of the machine. Variants:

- none: no index of the service (the baseline);
- as installed: the indexes of sql/invocation_index.sql on that table;
- for the task, also: an index that only parses the task as jsonb (in an exception block), the least any
  index over the task's JSON costs; the index with GIN's fastupdate on; version 1 of the task index
  (task_invocation_ids, migration 0006).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import asyncpg

from bench.generate import SessionSpec, insert_session
from bench.inprocess import kagent_database
from bench.kagent_writes import INSERT_EVENT, UPSERT_TASK

PARSE_ONLY = """
CREATE FUNCTION bench_parse_only(data TEXT) RETURNS TEXT[] LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN ARRAY[jsonb_typeof(data::jsonb)];
EXCEPTION WHEN others THEN
    RETURN ARRAY['']::TEXT[];
END;
$$
"""

LIVE = "WHERE deleted_at IS NULL"
VARIANTS: dict[str, dict[str, list[str]]] = {
    "event": {
        "none": [],
        "as installed": [
            f"(session_id, user_id, kagent_fork.invocation_id_of(data)) {LIVE}",
            f"(session_id, user_id, created_at, id) {LIVE}",
        ],
        "invocation index only": [f"(session_id, user_id, kagent_fork.invocation_id_of(data)) {LIVE}"],
        "time index only": [f"(session_id, user_id, created_at, id) {LIVE}"],
    },
    "task": {
        "none": [],
        "as installed": [f"USING gin (kagent_fork.task_invocation_candidates(data)) WITH (fastupdate = off) {LIVE}"],
        "parse only": [f"USING gin (bench_parse_only(data)) {LIVE}"],
        "fastupdate on": [f"USING gin (kagent_fork.task_invocation_candidates(data)) {LIVE}"],
        "version 1 (task_invocation_ids)": [f"USING gin (kagent_fork.task_invocation_ids(data)) {LIVE}"],
    },
}
ROWS = 300


async def _copies(conn: asyncpg.Connection, table: str) -> dict[str, str]:
    """A copy of `table` for each variant, with its indexes; the statement to time on each."""
    statements = {}
    for i, (name, indexes) in enumerate(VARIANTS[table].items()):
        copy = f"{table}_copy_{i}"
        await conn.execute(f"CREATE TABLE {copy} (LIKE {table} INCLUDING ALL)")
        await conn.execute(f"INSERT INTO {copy} SELECT * FROM {table}")
        for index in indexes:
            await conn.execute(f"CREATE INDEX ON {copy} {index}")
        await conn.execute(f"VACUUM ANALYZE {copy}")
        statement = INSERT_EVENT if table == "event" else UPSERT_TASK
        statements[name] = statement.replace(f"INTO {table} ", f"INTO {copy} ").replace(f"{table}.", f"{copy}.")
    return statements


async def measure(args: argparse.Namespace) -> None:
    from service.kagent.migrate import migrate

    results: dict[str, dict[str, list[float]]] = {}
    async with kagent_database() as (_, conn):
        await migrate(conn, "kagent_fork")
        await conn.execute(PARSE_ONLY)
        s = await insert_session(conn, SessionSpec(turns=1000))
        target = str(uuid.uuid4())
        await conn.execute(
            "INSERT INTO session (id, user_id, name, created_at, updated_at) VALUES ($1, $2, 'b', NOW(), NOW())",
            target, s.user_id,
        )  # fmt: skip
        for table in ("event", "task"):
            statements = await _copies(conn, table)
            rows = await conn.fetch(
                f"SELECT data FROM {table} WHERE session_id = $1 ORDER BY created_at LIMIT $2", s.session_id, ROWS
            )
            times: dict[str, list[float]] = {name: [] for name in statements}
            names = list(statements)
            for round_ in range(args.rounds):
                for k, row in enumerate(rows):
                    row_id = str(uuid.uuid4())
                    for name in names if (k + round_) % 2 == 0 else names[::-1]:
                        started = time.perf_counter()
                        if table == "event":
                            await conn.execute(statements[name], str(uuid.uuid4()), s.user_id, target, row["data"])
                            times[name].append(time.perf_counter() - started)
                        else:
                            for _ in range(2):
                                await conn.execute(statements[name], row_id, row["data"], target, "1.0", s.user_id)
                            times[name].append((time.perf_counter() - started) / 2)
                for i in range(len(statements)):
                    await conn.execute(f"DELETE FROM {table}_copy_{i} WHERE session_id = $1", target)
                    await conn.execute(f"VACUUM {table}_copy_{i}")
            results[table] = times
    for table, title in (("event", "kagent's InsertEvent of a 1.25 KB event"),
                         ("task", "kagent's task upsert of a 12.8 KB task ((insert + update) / 2)")):  # fmt: skip
        times = results[table]
        base = statistics.median(times["none"])
        print(f"{title}, median of {len(times['none'])}:")
        for name, samples in times.items():
            us = statistics.median(samples) * 1e6
            print(f"  {name:32s} {us:5.0f} us  {us / (base * 1e6):.2f}x  ({us - base * 1e6:+4.0f} us)")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.write_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help=f"rounds of {ROWS} rows of each table")
    asyncio.run(measure(p.parse_args()))


if __name__ == "__main__":
    main()
