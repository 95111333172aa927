"""What each piece of the large-fork path buys: `python -m bench.pieces [--reps 3] [--turns 1000 10000]`.

A large fork (at least copying.LARGE_FORK_TASKS tasks) takes a second connection in the same snapshot
(the reader); without the turn map it guesses its boundary task from the last turns
(forking._guess_cut, undone by a savepoint when wrong); per_task tasks of the owner are copied by
PostgreSQL while the reader checks them (copying._server_copy), other tasks are rewritten in Python.
This times the same fork (before the last turn, in-process, as bench.breakdown) with each piece taken
away in turn, in one throw-away database, the variants alternating within each repetition:

- shipped: the code as it is;
- no guess: forking._guess_cut answers None (the exact cut is searched first);
- no server copy: the tasks go through the Python rewrite on the reader (no guess either: only the server
  copy proves a guess);
- no reader: copying.LARGE_FORK_TASKS raised out of reach (one connection: no guess, no server copy, the
  Python rewrite in batches).

The difference of a variant's median from the shipped median is what that piece buys (or costs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.generate import GeneratedSession, SessionSpec, insert_population, insert_session
from bench.inprocess import kagent_database, service_parts
from bench.run import USER


@contextlib.contextmanager
def _no_guess() -> Iterator[None]:
    from service.operations import forking

    async def none(*_: Any) -> None:
        return None

    with _patched(forking, "_guess_cut", none):
        yield


@contextlib.contextmanager
def _no_server_copy() -> Iterator[None]:
    from service.operations import copying

    async def refuse(*_: Any) -> int:
        raise copying._CopyInPython("bench.pieces: the server copy taken away")  # pyright: ignore[reportPrivateUsage]

    with _no_guess(), _patched(copying, "_server_copy", refuse):
        yield


@contextlib.contextmanager
def _no_reader() -> Iterator[None]:
    from service.operations import copying

    with _patched(copying, "LARGE_FORK_TASKS", 10**12):
        yield


@contextlib.contextmanager
def _patched(module: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


VARIANTS: dict[str, Callable[[], Any]] = {
    "shipped": contextlib.nullcontext,
    "no guess": _no_guess,
    "no server copy": _no_server_copy,
    "no reader": _no_reader,
}


async def measure(args: argparse.Namespace) -> None:
    from service.identity import Caller
    from service.operations import forking
    from service.schemas import ForkRequest

    async with kagent_database() as (dsn, conn):
        sessions: list[GeneratedSession] = []
        for turns in args.turns:
            for dialect in args.dialects:
                sessions.append(await insert_session(conn, SessionSpec(turns=turns, dialect=dialect)))
        await insert_population(conn, args.population)
        await conn.execute("VACUUM ANALYZE")
        async with service_parts(dsn) as svc:
            # The pieces of the path a fork takes without a turn map (a mapped fork has none of them).
            svc.store.turn_map_min_tasks = None
            caller = Caller(user_id=USER, share_token=None)
            for s in sessions:
                req = ForkRequest(rewind_before_invocation_id=s.invocation_ids[-1])
                times: dict[str, list[float]] = {name: [] for name in VARIANTS}
                for rep in range(args.reps + 1):  # the first repetition warms up, uncounted
                    for name, variant in VARIANTS.items():
                        await conn.execute("VACUUM event, task")
                        await conn.execute("CHECKPOINT")
                        with variant():
                            started = time.perf_counter()
                            out = await forking.fork(svc, caller, s.session_id, req)
                            took = time.perf_counter() - started
                        new_id = out.session_id
                        assert new_id is not None
                        for table in ("event", "task"):
                            await conn.execute(f"DELETE FROM {table} WHERE session_id = $1", new_id)
                        await conn.execute("DELETE FROM session WHERE id = $1", new_id)
                        if rep:
                            times[name].append(took)
                shipped = statistics.median(times["shipped"]) * 1000
                print(f"{s.events:,} events, {s.dialect}:", flush=True)
                for name, samples in times.items():
                    ms = statistics.median(samples) * 1000
                    print(f"  {name:15s} {ms:7.0f} ms  {ms - shipped:+6.0f} ms  "
                          f"{[round(x * 1000) for x in samples]}", flush=True)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.pieces", description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3, help="counted repetitions of each variant (median)")
    p.add_argument("--turns", type=int, nargs="+", default=[1000, 10_000], help="sessions' turns (10 events each)")
    p.add_argument("--dialects", nargs="+", choices=["v1", "legacy"], default=["v1"])
    p.add_argument("--population", type=int, default=1000, help="other users' short sessions in the database")
    asyncio.run(measure(p.parse_args()))


if __name__ == "__main__":
    main()
