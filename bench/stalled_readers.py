"""Memory held by stalled readers (issue 45, item 4): `python -m bench.stalled_readers [--readers 60]`.

It creates a throw-away database (on --server-url, default BENCH_DATABASE_URL or the local PostgreSQL), writes one
v1 session whose JSON transcript is about 3.3 MB (bench.generate), starts `kagent-fork serve --workers 1` (one
process: its memory is the service's) and reads the transcript once with an ordinary client (the reference body,
and every code path warmed). Then N clients ask for the transcript at once over raw sockets with 4 KiB receive
buffers, read the first bytes of the answer and stop reading. It reports the service's RSS before (after the
warm-up), while all N are stalled (their answers built and waiting) and after (every reader has read its whole
answer and gone), the peak (VmHWM, reset before the readers come), the service's own count of the bytes its
answers hold (`kagent_fork_response_bytes_held`, at /metrics, when the service has it), and whether every reader
got the reference body byte for byte. Settings for the service go in the environment (`--env NAME=VALUE`).
Not run in CI; the numbers are in bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx

from bench.generate import SessionSpec, insert_session
from bench.load import serve_process
from bench.run import bench_database

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
USER = "stalled-reader@example.com"
HELD_METRICS = "kagent_fork_response"


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) * 1024
    return found


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # 5: reset VmHWM to the current RSS


async def _held(http: httpx.AsyncClient) -> dict[str, float]:
    """The service's own gauges and counters of what its answers hold (none before the change)."""
    text = (await http.get("/metrics")).text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(HELD_METRICS) and "_created" not in line
    }


async def _stalled(host: str, port: int, path: str) -> tuple[socket.socket, bytes]:
    """A client with a 4 KiB receive buffer that sends the request, reads the first bytes and no more."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, (host, port))
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nX-User-Id: {USER}\r\nConnection: close\r\n\r\n"
    await loop.sock_sendall(sock, request.encode())
    return sock, await loop.sock_recv(sock, 64)


async def _read_rest(sock: socket.socket, head: bytes) -> bytes:
    """The whole answer's body (chunked or not), read to the end of the connection."""
    loop = asyncio.get_running_loop()
    parts = [head]
    while block := await loop.sock_recv(sock, 1 << 16):
        parts.append(block)
    sock.close()
    raw = b"".join(parts)
    header, _, body = raw.partition(b"\r\n\r\n")
    if not header.startswith(b"HTTP/1.1 200"):
        return b""
    if b"transfer-encoding: chunked" not in header.lower():
        return body
    out, at = [], 0
    while True:
        end = body.index(b"\r\n", at)
        size = int(body[at:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[end + 2 : end + 2 + size])
        at = end + 2 + size + 2


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}"


async def _round(
    url: str, pid: int, path: str, reference: bytes, readers: int, at_once: int, settle: float
) -> dict[str, str]:
    """One round: the readers come (at_once at a time), stall, then read everything and go."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        _reset_peak(pid)
        host, port = url.removeprefix("http://").split(":")
        began = time.monotonic()
        opened = []
        for first in range(0, readers, at_once):
            wave = min(at_once, readers - first)
            opened += await asyncio.gather(*(_stalled(host, int(port), path) for _ in range(wave)))
        answered = time.monotonic() - began
        statuses = sorted({head[:12].decode(errors="replace") for _, head in opened})
        await asyncio.sleep(settle)
        during = _status(pid)["VmRSS"]
        held_during = await _held(http)
        bodies = await asyncio.gather(*(_read_rest(sock, head) for sock, head in opened))
        await asyncio.sleep(settle)
        after = _status(pid)
        held_after = await _held(http)
    found = {
        f"RSS with all {readers} stalled, MB": _mb(during),
        "peak RSS (VmHWM) while they came and read, MB": _mb(after["VmHWM"]),
        "RSS after every reader read its answer and went, MB": _mb(after["VmRSS"]),
        f"first bytes of all {readers} answers after, s": f"{answered:.1f}",
        "answers' first lines": ", ".join(statuses),
        "readers that got the whole, correct body": f"{sum(body == reference for body in bodies)} of {readers}",
    }
    found.update({f"`{name}` while stalled": f"{value:,.0f}" for name, value in held_during.items()})
    found.update({f"`{name}` after": f"{value:,.0f}" for name, value in held_after.items()})
    return found


async def measure(
    dsn: str, readers: int, at_once: int, turns: int, env: dict[str, str], settle: float, rounds: int
) -> str:
    from service.embedded.server import install_kagent_schema

    conn = await asyncpg.connect(dsn)
    try:
        await install_kagent_schema(conn)
        session = await insert_session(conn, SessionSpec(turns=turns, dialect="v1", user_id=USER, seed=45))
    finally:
        await conn.close()
    path = f"/api/sessions/{session.session_id}/transcript"
    log = Path(tempfile.gettempdir()) / f"kagent-fork-stalled-{os.getpid()}.log"
    async with serve_process(dsn, 1, log, env) as (url, proc), httpx.AsyncClient(base_url=url, timeout=120) as http:
        reference = (await http.get(path, headers={"X-User-Id": USER})).content
        await asyncio.sleep(settle)
        before = _status(proc.pid)["VmRSS"]
        found = [await _round(url, proc.pid, path, reference, readers, at_once, settle) for _ in range(rounds)]
    names = list(dict.fromkeys(name for one in found for name in one))
    lines = [
        f"{readers} stalled readers (4 KiB receive buffers) of a {_mb(len(reference))} MB JSON transcript "
        f"({turns} turns), {at_once} asking at once, {rounds} round(s) one after the other; "
        f"`kagent-fork serve --workers 1`; settings: {env or 'defaults'}",
        "",
        "| measure | " + " | ".join(f"round {i + 1}" for i in range(rounds)) + " |",
        "|---|" + "---:|" * rounds,
        f"| RSS before (after one warm-up read), MB | {_mb(before)} |" + " |" * (rounds - 1),
    ]
    lines += [f"| {name} | " + " | ".join(one.get(name, "") for one in found) + " |" for name in names]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.stalled_readers", description=__doc__.split("\n\n")[0])
    p.add_argument("--server-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_SERVER),
                   help="a PostgreSQL server the run may create a database in")  # fmt: skip
    p.add_argument("--readers", type=int, default=60)
    p.add_argument("--at-once", type=int, default=10,
                   help="readers that ask at the same time (the pool's size: more wait for a connection)")  # fmt: skip
    p.add_argument("--turns", type=int, default=345, help="turns of the session (10 events and one task each)")
    p.add_argument("--rounds", type=int, default=1, help="times the readers come, stall, read and go")
    p.add_argument("--settle", type=float, default=2.0, help="seconds waited before each reading of the RSS")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE, a setting of the service")
    p.add_argument("--keep", action="store_true", help="keep the database")
    return p


async def main(args: argparse.Namespace) -> None:
    env = dict(item.split("=", 1) for item in args.env)
    async with bench_database(args.server_url, args.keep, prefix="kf_stalled_") as dsn:
        print(await measure(dsn, args.readers, args.at_once, args.turns, env, args.settle, args.rounds))


if __name__ == "__main__":
    asyncio.run(main(parser().parse_args()))
