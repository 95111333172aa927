"""Where a fork's time goes: `python -m bench.breakdown [--turns 10000] [--op fork] [--cprofile]`.

Runs one operation in-process (the same code the HTTP handlers call) on a generated session in a
throw-away database (as bench.run), and prints the time spent in each store call (each SQL statement or
stream) and, with --cprofile, the Python functions that took the most time. The rest of the wall time
is the service's own Python work between the calls.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import inspect
import pstats
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

from bench.generate import SessionSpec, insert_population, insert_session
from bench.inprocess import kagent_database, service_parts
from bench.run import USER

Span = tuple[str, object, float, float]  # store call, connection, start, end (perf_counter)


def _timed_store(store: Any, spent: dict[str, float], calls: dict[str, int], spans: list[Span]) -> None:
    """Wrap every public coroutine and async generator of the store's parts so that their time is summed
    (and each call's span kept, for --timeline)."""
    parts = [store.database, store.sessions, store.events, store.tasks, store.lineage, store.rewinds, store.jobs,
             store.turn_maps, store.turn_maps.figures, store.turn_maps.forks]  # fmt: skip
    for part, name, method in [(p, n, m) for p in parts for n, m in inspect.getmembers(p, inspect.ismethod)]:
        if name.startswith("_"):
            continue
        if inspect.isasyncgenfunction(method):

            def stream(method: Callable[..., AsyncIterator[Any]] = method, name: str = name) -> Any:
                @functools.wraps(method)
                async def wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                    calls[name] += 1
                    iterator = method(*args, **kwargs)
                    first = time.perf_counter()
                    while True:
                        started = time.perf_counter()
                        try:
                            item = await iterator.__anext__()
                        except StopAsyncIteration:
                            spent[name] += time.perf_counter() - started
                            spans.append((name, args[0] if args else None, first, time.perf_counter()))
                            return
                        spent[name] += time.perf_counter() - started
                        yield item

                return wrapper

            setattr(part, name, stream())
        elif inspect.iscoroutinefunction(method):

            def call(method: Callable[..., Any] = method, name: str = name) -> Any:
                @functools.wraps(method)
                async def wrapper(*args: Any, **kwargs: Any) -> Any:
                    # copy_kept copies either table: tell them apart
                    label = f"{name} {args[1]}" if name == "copy_kept" and len(args) > 1 else name
                    calls[label] += 1
                    started = time.perf_counter()
                    try:
                        return await method(*args, **kwargs)
                    finally:
                        spent[label] += time.perf_counter() - started
                        spans.append((label, args[0] if args else None, started, time.perf_counter()))

                return wrapper

            setattr(part, name, call())


def _timed_commit(spent: dict[str, float], calls: dict[str, int]) -> None:
    """Time the end of every transaction (COMMIT: the WAL flush) as one more step."""
    from asyncpg.transaction import Transaction

    end = Transaction.__aexit__

    async def timed(self: Transaction, *exc: Any) -> Any:
        calls["COMMIT"] += 1
        started = time.perf_counter()
        try:
            return await end(self, *exc)
        finally:
            spent["COMMIT"] += time.perf_counter() - started

    Transaction.__aexit__ = timed  # type: ignore[method-assign,assignment]


async def profile(args: argparse.Namespace) -> None:
    from service.branches import turns
    from service.identity import Caller
    from service.operations import forking, rewind
    from service.schemas import ForkRequest, RewindRequest

    async with kagent_database() as (dsn, conn):
        session = await insert_session(conn, SessionSpec(turns=args.turns, dialect=args.dialect))
        await insert_population(conn, args.population)
        await conn.execute("VACUUM ANALYZE")
        async with service_parts(dsn) as svc:
            if args.no_map:
                svc.store.turn_map_min_tasks = None
            caller = Caller(user_id=USER, share_token=None)
            sid = session.session_id
            boundary = session.invocation_ids[-1 if args.op != "rewind" else len(session.invocation_ids) * 9 // 10]

            async def once() -> None:
                if args.op in ("fork", "dry-run"):
                    req = ForkRequest(rewind_before_invocation_id=boundary, dry_run=args.op == "dry-run")
                    await forking.fork(svc, caller, sid, req)
                elif args.op == "rewind":
                    result = await rewind.rewind(svc, caller, sid, RewindRequest(rewind_before_invocation_id=boundary))
                    assert isinstance(result, rewind.RewindResult) and result.rewind.id is not None
                    await rewind.undo(svc, caller, sid, result.rewind.id)
                else:
                    await turns.invocations(svc, caller, sid, limit=100)

            await once()  # warm: connection, prepared statements, cached pages
            spent: dict[str, float] = defaultdict(float)
            calls: dict[str, int] = defaultdict(int)
            spans: list[Span] = []
            _timed_store(svc.store, spent, calls, spans)
            _timed_commit(spent, calls)
            profiler = cProfile.Profile() if args.cprofile else None
            started = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            await once()
            if profiler is not None:
                profiler.disable()
            wall = time.perf_counter() - started
    print(f"{args.op} of a {session.events:,}-event {args.dialect} session: {wall * 1000:.0f} ms in all")
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {seconds * 1000:8.1f} ms  {calls[name]:>3} x {name if name == 'COMMIT' else 'store.' + name}")
    print(f"  {(wall - sum(spent.values())) * 1000:8.1f} ms  the service's own work (Python) between them")
    if args.timeline:
        _print_timeline(spans, started)
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


def _print_timeline(spans: list[Span], started: float) -> None:
    """Each store call's start and end, in ms from the operation's start, by connection (A: the
    operation's own, B: the reader)."""
    labels: dict[int, str] = {}
    print("timeline (ms from the start; A = the operation's connection, B = its reader):")
    for name, conn, begin, end in sorted(spans, key=lambda span: span[2]):
        label = labels.setdefault(id(conn), "AB"[len(labels)] if len(labels) < 2 else "?")
        print(f"  {label}  {(begin - started) * 1000:7.1f} -> {(end - started) * 1000:7.1f}  {name}")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.breakdown", description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=10_000, help="turns of the session (10 events each)")
    p.add_argument("--dialect", choices=["v1", "legacy"], default="v1")
    p.add_argument("--op", choices=["fork", "dry-run", "rewind", "invocations"], default="fork")
    p.add_argument("--population", type=int, default=1000, help="other users' short sessions in the database")
    p.add_argument("--no-map", action="store_true", help="without the turn map (made by the warm-up otherwise)")
    p.add_argument("--cprofile", action="store_true", help="also profile the Python functions")
    p.add_argument("--top", type=int, default=25, help="lines of the Python profile")
    p.add_argument("--timeline", action="store_true", help="also print when each store call ran, by connection")
    asyncio.run(profile(p.parse_args()))


if __name__ == "__main__":
    main()
