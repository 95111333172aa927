"""How long a CLI command takes, from the shell's point of view (issue 36): `kagent-fork invocations S` and the
other read commands, start to exit, against `python -c pass` (the floor: starting Python at all).

    .venv/bin/python -m bench.cli [--repeats 9] [--before /path/to/an/older/checkout]

It creates a throw-away database on BENCH_DATABASE_URL's server (default postgresql://postgres@127.0.0.1:5432/
postgres) holding kagent's tables and the demo's two sessions, runs every command `--repeats` times, alternating
the commands so that a burst of load elsewhere touches them all alike, and prints a Markdown table of medians
(and the fastest run) with the load average before and after. Every command must exit 0 (a failing command is
not timed). `--before DIR` also runs every command from another checkout of the project (`python -m service` in
DIR, with this environment's packages), interleaved with this one's, so that both see the same load: e.g.
`git worktree add /tmp/before <commit>`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

SERVER = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
ROOT = Path(__file__).resolve().parent.parent


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def _create(name: str) -> str:
    from service.embedded.server import prepare_demo

    admin = await asyncpg.connect(SERVER)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = _with_database(SERVER, name)
    await prepare_demo(url)
    return url


async def _drop(name: str) -> None:
    admin = await asyncpg.connect(SERVER)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


READS = [
    ["--help"],
    ["invocations", "demo-v1-session"],
    ["tree", "demo-v1-session"],
    ["show", "demo-v1-session"],
    ["rewinds", "demo-v1-session"],
    ["compare", "demo-v1-session", "demo-legacy-session"],
    ["whatifs", "demo-v1-session"],
    ["experiments", "demo-v1-session"],
]


def commands(kagent_fork: str, before: str | None) -> list[tuple[str, list[str], str | None]]:
    """(label, argv, working directory): the floor, then the read commands on the demo's sessions (each also from
    the `before` checkout, when given, where it exists there)."""
    found: list[tuple[str, list[str], str | None]] = [("python -c pass (floor)", [sys.executable, "-c", "pass"], None)]
    for args in READS:
        found.append((f"kagent-fork {' '.join(args)}", [kagent_fork, *args], None))
        if before is not None and (args[0] != "experiments" or _has_command(before, args[0])):
            found.append(("  the same, before", [sys.executable, "-m", "service", *args], before))
    return found


def _has_command(checkout: str, command: str) -> bool:
    return f'"{command}"' in (Path(checkout) / "service" / "doors" / "cli.py").read_text()


def _run_once(argv: list[str], env: dict[str, str], cwd: str | None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return took


def measure(kagent_fork: str, before: str | None, url: str, repeats: int) -> list[tuple[str, list[float]]]:
    env = {**os.environ, "DATABASE_URL": url}
    todo = commands(kagent_fork, before)
    for _, argv, cwd in todo:  # once each, untimed: the page cache and the .pyc files, as for a user's second command
        _run_once(argv, env, cwd)
    samples: list[list[float]] = [[] for _ in todo]
    for _ in range(repeats):
        for i, (_, argv, cwd) in enumerate(todo):
            samples[i].append(_run_once(argv, env, cwd))
    return [(label, samples[i]) for i, (label, _, _) in enumerate(todo)]


def table(results: list[tuple[str, list[float]]]) -> str:
    lines = ["| command | median | fastest | slowest |", "|---|---:|---:|---:|"]
    for label, s in results:
        lines.append(f"| `{label}` | {statistics.median(s):.2f} s | {min(s):.2f} s | {max(s):.2f} s |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.cli", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--kagent-fork", default=str(ROOT / ".venv" / "bin" / "kagent-fork"), help="the command timed")
    p.add_argument("--before", help="another checkout to time the same commands from (python -m service there)")
    args = p.parse_args()
    name = "kf_bench_cli_" + secrets.token_hex(4)
    url = asyncio.run(_create(name))
    try:
        before = os.getloadavg()
        results = measure(args.kagent_fork, args.before, url, args.repeats)
        after = os.getloadavg()
    finally:
        asyncio.run(_drop(name))
    timed = args.kagent_fork + (f" and {args.before}" if args.before else "")
    print(
        f"{timed}, {args.repeats} runs each, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load average {before[0]:.2f} before, {after[0]:.2f} after\n"
    )
    print(table(results))


if __name__ == "__main__":
    main()
