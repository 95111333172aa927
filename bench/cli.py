"""How long a CLI command takes, from the shell's point of view (issue 36): `kagent-fork invocations S` and the
other read commands, start to exit, against `python -c pass` (the floor: starting Python at all).

    .venv/bin/python -m bench.cli [--repeats 9] [--kagent-fork .venv/bin/kagent-fork]

It creates a throw-away database on BENCH_DATABASE_URL's server (default postgresql://postgres@127.0.0.1:5432/
postgres) holding kagent's tables and the demo's two sessions, runs every command `--repeats` times, alternating
the commands so that a burst of load elsewhere touches them all alike, and prints a Markdown table of medians
(and the fastest run) with the load average before and after. Every command must exit 0 (a failing command is
not timed). `--kagent-fork` runs another installation's entry point (e.g. an older checkout's).
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


def commands(kagent_fork: str) -> list[tuple[str, list[str]]]:
    """(label, argv): the floor, then the read commands on the demo's sessions."""
    return [
        ("python -c pass (floor)", [sys.executable, "-c", "pass"]),
        ("kagent-fork --help", [kagent_fork, "--help"]),
        ("kagent-fork invocations demo-v1-session", [kagent_fork, "invocations", "demo-v1-session"]),
        ("kagent-fork tree demo-v1-session", [kagent_fork, "tree", "demo-v1-session"]),
        ("kagent-fork show demo-v1-session", [kagent_fork, "show", "demo-v1-session"]),
        ("kagent-fork rewinds demo-v1-session", [kagent_fork, "rewinds", "demo-v1-session"]),
        (
            "kagent-fork compare demo-v1-session demo-legacy-session",
            [kagent_fork, "compare", "demo-v1-session", "demo-legacy-session"],
        ),
        ("kagent-fork whatifs demo-v1-session", [kagent_fork, "whatifs", "demo-v1-session"]),
    ]


def _run_once(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return took


def measure(kagent_fork: str, url: str, repeats: int) -> list[tuple[str, list[float]]]:
    env = {**os.environ, "DATABASE_URL": url}
    todo = commands(kagent_fork)
    for _, argv in todo:  # once each, untimed: the page cache and the .pyc files, as for a user's second command
        _run_once(argv, env)
    samples: dict[str, list[float]] = {label: [] for label, _ in todo}
    for _ in range(repeats):
        for label, argv in todo:
            samples[label].append(_run_once(argv, env))
    return [(label, samples[label]) for label, _ in todo]


def table(results: list[tuple[str, list[float]]]) -> str:
    lines = ["| command | median | fastest | slowest |", "|---|---:|---:|---:|"]
    for label, s in results:
        lines.append(f"| `{label}` | {statistics.median(s):.2f} s | {min(s):.2f} s | {max(s):.2f} s |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.cli", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--kagent-fork", default=str(ROOT / ".venv" / "bin" / "kagent-fork"))
    args = p.parse_args()
    name = "kf_bench_cli_" + secrets.token_hex(4)
    url = asyncio.run(_create(name))
    try:
        before = os.getloadavg()
        results = measure(args.kagent_fork, url, args.repeats)
        after = os.getloadavg()
    finally:
        asyncio.run(_drop(name))
    print(
        f"{args.kagent_fork}, {args.repeats} runs each, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load average {before[0]:.2f} before, {after[0]:.2f} after\n"
    )
    print(table(results))


if __name__ == "__main__":
    main()
