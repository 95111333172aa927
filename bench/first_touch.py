"""Issue 37's first touch, run by bench.run (`--only first-touch`, in the map variant).

A session kagent wrote before kagent-fork first read it has no turn map. Its first listing page, its first
dry run (before its 90 % turn) and its first whole fork are timed over HTTP on a session whose map is
forgotten first (as the service finds a chat it never read), each against its floor taken on the same
session right after, in the same repetition:

- listing and dry run: one PostgreSQL pass that parses each event's invocation id once and groups the turns
  (first time, count, bytes), the least any answer about the turns must read;
- whole fork: the bare `INSERT ... SELECT` of every event and task row, in one transaction.

Between the first touch and its floor the service's background build of the map (started after the answer)
is waited for, and the same request is timed once more: the later touch, read with the map.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from typing import Any

from bench.generate import GeneratedSession
from bench.run import HEADERS, Bench, Row, median_ms

FLOOR_TURNS = """
SELECT invocation_id, min(created_at), count(*), sum(bytes)
FROM (SELECT created_at, octet_length(data) AS bytes,
             coalesce(doc ->> 'invocation_id', doc ->> 'invocationId') AS invocation_id
      FROM event
      CROSS JOIN LATERAL (SELECT data::jsonb AS doc OFFSET 0) AS p
      WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL) AS e
GROUP BY invocation_id
"""
LIMIT = 1.3  # issue 37's target: each first touch at most 1.3x its floor
EVER = datetime(9999, 1, 1, tzinfo=UTC)


WAIT_SECONDS = 600


async def map_built(b: Bench, session_id: str) -> None:
    """Once the service's map of the session is committed and nothing else runs in the database (its
    statistics gathered, the build's connection idle)."""
    deadline = time.monotonic() + WAIT_SECONDS
    quiet = 0
    while time.monotonic() < deadline:
        mapped = await b.conn.fetchval("SELECT count(*) FROM kagent_fork.turn_map WHERE session_id = $1", session_id)
        busy = await b.conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' "
            "AND pid <> pg_backend_pid()"
        )
        quiet = quiet + 1 if mapped and not busy else 0
        if quiet >= 3:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the map of session {session_id} was not built in {WAIT_SECONDS} s")


def steal_seconds() -> float | None:
    """The CPU time the hypervisor took from this virtual machine so far (`steal` in /proc/stat), None where it
    is not told. Read around each cell: a run on a machine whose neighbours take its cores says so."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 and fields[0] == "cpu" else None


async def _forget(b: Bench, s: GeneratedSession) -> None:
    for table in ("turn_map", "turn_map_run", "turn_map_task", "turn_map_turn"):
        await b.conn.execute(f"DELETE FROM kagent_fork.{table} WHERE session_id = $1", s.session_id)


async def _floor_turns(b: Bench, s: GeneratedSession) -> float:
    async with b.conn.transaction():
        await b.conn.execute("SET LOCAL jit = off")  # the floor at its best (a plan this size would compile)
        started = time.perf_counter()
        await b.conn.fetch(FLOOR_TURNS, s.session_id, s.user_id)
        return time.perf_counter() - started


async def _floor_fork(b: Bench, s: GeneratedSession) -> float:
    await b.conn.execute("SET jit = off")  # the floor at its best, as the service runs (jit off)
    try:
        took, new_id, _ = await b.floor_copy(s, (EVER, EVER))
    finally:
        await b.conn.execute("RESET jit")
    await b.drop_copy(new_id)
    return took


async def _ask(b: Bench, s: GeneratedSession, kind: str) -> float:
    started = time.perf_counter()
    if kind == "listing":
        response = await b.client.get(f"/api/sessions/{s.session_id}/invocations", params={"limit": 100},
                                      headers=HEADERS)  # fmt: skip
        if response.status_code != 200 or len(response.json()["data"]) != 100:
            raise RuntimeError(f"invocations answered {response.status_code}: {response.text[:300]}")
        return time.perf_counter() - started
    body: dict[str, Any] = {}
    if kind == "dry run":
        body = {"rewind_before_invocation_id": s.invocation_ids[len(s.invocation_ids) * 9 // 10], "dry_run": True}
    took, data = await b.http_fork(s, body)
    if kind == "whole fork":
        if data["fork"]["events_copied"] != s.events:
            raise RuntimeError(f"the whole fork copied {data['fork']['events_copied']} of {s.events} events")
        await b.drop_copy(data["id"])
    return took


async def measure(b: Bench, sessions: list[GeneratedSession]) -> None:
    """Each kind of first touch on each session, interleaved with its later touch and its floor."""
    for s in sessions:
        for kind in ("listing", "dry run", "whole fork"):
            firsts, laters, floors = [], [], []
            stolen = steal_seconds()
            for _ in range(b.args.reps):
                await _forget(b, s)
                await b.quiesce()
                firsts.append(await _ask(b, s, kind))
                await map_built(b, s.session_id)
                laters.append(await _ask(b, s, kind))
                await b.quiesce()
                floors.append(await (_floor_fork(b, s) if kind == "whole fork" else _floor_turns(b, s)))
            after = steal_seconds()
            took = None if after is None or stolen is None else after - stolen
            steal = "" if took is None else f"; the hypervisor took {took:.1f} s of CPU meanwhile"
            print(f"    {kind}: first {[round(x * 1000) for x in firsts]} later {[round(x * 1000) for x in laters]} "
                  f"floor {[round(x * 1000) for x in floors]} ms{steal}")  # fmt: skip
            first, floor = median_ms(firsts), median_ms(floors)
            ratio = first / floor
            what = "a listing page of 100 turns" if kind == "listing" else kind
            if kind == "dry run":
                what = "a dry run before the 90 % turn"
            b.report.add(
                Row(
                    measure=f"first touch of a never-read session of {s.events:,} events: {what} (then, with the map "
                    f"built after it: {median_ms(laters):.0f} ms), median of {b.args.reps}{steal}",
                    value=f"{first:.0f} ms",
                    floor=f"{floor:.0f} ms",
                    ratio=f"{ratio:.2f}x",
                    target=f"<= {LIMIT:g}x",
                    met="yes" if ratio <= LIMIT else "**no**",
                )
            )
