"""What the invocation index costs kagent: its own writes, timed without and with the index.

kagent's backend writes one event per statement (`InsertEvent`: the row, and the session's updated_at in
the same statement) and upserts a task many times a turn (`UpsertTask`: insert, or replace data when
the id exists and belongs to the same user, and touch the session). Each runs as its own transaction, so
each pays a commit. The statements below do what kagent's do (go/core/internal/database/queries/
{events,tasks}.sql on main), written here for the benchmark. They are timed on the benchmark's own
database, whose tables hold the generated sessions, with the index removed and installed in turn, and
the rows written are deleted after each round.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from bench.generate import GeneratedSession

INSERT_EVENT = """
WITH written AS (
    INSERT INTO event (id, user_id, session_id, data, created_at, updated_at)
    VALUES ($1, $2, $3, $4, NOW(), NOW())
    RETURNING user_id, session_id
)
UPDATE session SET updated_at = NOW()
FROM written
WHERE session.id = written.session_id AND session.user_id = written.user_id AND session.deleted_at IS NULL
"""

UPSERT_TASK = """
WITH written AS (
    INSERT INTO task (id, data, session_id, protocol_version, user_id, created_at, updated_at)
    VALUES ($1, $2, $3, $4, $5, NOW(), NOW())
    ON CONFLICT (id) DO UPDATE SET
        data = EXCLUDED.data, session_id = EXCLUDED.session_id, protocol_version = EXCLUDED.protocol_version,
        user_id = EXCLUDED.user_id, updated_at = NOW()
    WHERE task.deleted_at IS NULL AND task.user_id = EXCLUDED.user_id
    RETURNING id, session_id, user_id
), touched AS (
    UPDATE session SET updated_at = NOW()
    FROM written
    WHERE session.id = written.session_id AND session.user_id = written.user_id AND session.deleted_at IS NULL
)
SELECT id FROM written
"""

ROUND = 300  # statements of each kind per round


async def _round(
    conn: asyncpg.Connection, s: GeneratedSession, events: list[str], tasks: list[str]
) -> tuple[float, float]:
    """Median seconds of one InsertEvent and of one task upsert (an insert, then the same id updated,
    as kagent does while a turn runs) over one round; the rows are deleted afterwards."""
    target = str(uuid.uuid4())
    await conn.execute(
        "INSERT INTO session (id, user_id, name, created_at, updated_at) VALUES ($1, $2, 'bench', NOW(), NOW())",
        target, s.user_id,
    )  # fmt: skip
    event_times, task_times = [], []
    try:
        for data in events:
            started = time.perf_counter()
            await conn.execute(INSERT_EVENT, str(uuid.uuid4()), s.user_id, target, data)
            event_times.append(time.perf_counter() - started)
        for data in tasks:
            task_id = str(uuid.uuid4())
            started = time.perf_counter()
            await conn.execute(UPSERT_TASK, task_id, data, target, "1.0", s.user_id)
            await conn.execute(UPSERT_TASK, task_id, data, target, "1.0", s.user_id)
            task_times.append((time.perf_counter() - started) / 2)
    finally:
        await conn.execute("DELETE FROM event WHERE session_id = $1", target)
        await conn.execute("DELETE FROM task WHERE session_id = $1", target)
        await conn.execute("DELETE FROM session WHERE id = $1", target)
    return statistics.median(event_times), statistics.median(task_times)


async def measure_writes(
    conn: asyncpg.Connection,
    s: GeneratedSession,
    set_index: Callable[[asyncpg.Connection, bool], Awaitable[None]],
    *,
    reps: int,
) -> list[tuple[str, float, float]]:
    """Rounds without and with the index, alternating in ABBA order (a drift of the machine's speed
    during the run weighs on both alike): (statement, median us without, median us with)."""
    events = [r["data"] for r in await conn.fetch(
        "SELECT data FROM event WHERE session_id = $1 ORDER BY created_at LIMIT $2", s.session_id, ROUND)]  # fmt: skip
    tasks = [r["data"] for r in await conn.fetch(
        "SELECT data FROM task WHERE session_id = $1 ORDER BY created_at LIMIT $2", s.session_id, ROUND)]  # fmt: skip
    samples: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for rep in range(reps):
        for indexed in (False, True) if rep % 2 == 0 else (True, False):
            await set_index(conn, indexed)
            await conn.execute("VACUUM event, task")
            samples[indexed].append(await _round(conn, s, events, tasks))
    out = []
    for i, name in enumerate(("kagent's InsertEvent (one event, its own transaction)",
                              "kagent's task upsert (insert or update of one task, its own transaction)")):  # fmt: skip
        print(f"    {name}: without {[round(x[i] * 1e6) for x in samples[False]]} "
              f"with {[round(x[i] * 1e6) for x in samples[True]]} us")  # fmt: skip
        out.append((
            f"{name}, median of {ROUND} statements, median of {reps} rounds",
            statistics.median(x[i] for x in samples[False]) * 1e6,
            statistics.median(x[i] for x in samples[True]) * 1e6,
        ))  # fmt: skip
    return out
