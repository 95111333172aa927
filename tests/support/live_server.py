"""A real uvicorn server (uvloop and httptools, as `kagent-fork serve` runs) in a thread of the test process,
on 127.0.0.1 and a free port, and raw HTTP/1.1 for what httpx cannot send (repeated headers, invalid bytes)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec
import uvicorn


def bound_socket() -> socket.socket:
    """A socket bound to a free port of 127.0.0.1, for live_server."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def live_server(app: Any, *, limit_concurrency: int | None = None, sock: socket.socket | None = None) -> Iterator[str]:
    """Serve `app` (lifespan included) until the block ends; yields its base URL. `sock`: a socket bound
    beforehand (bound_socket), for an app that must know its own URL when it is made."""
    sock = sock or bound_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level="warning",
        access_log=False,
        limit_concurrency=limit_concurrency,
        backlog=1024,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        return msgspec.json.decode(self.body)


async def raw_request(base_url: str, request: bytes, *, seconds: float = 10, no_body: bool = False) -> RawResponse:
    """Send `request` byte for byte on a new connection and read one response (Content-Length framed,
    or until the server closes; `no_body` for HEAD). The server may answer (413) and close before the
    whole request is sent: the response is read while sending, and a reset after it is ignored."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))

    async def send() -> None:
        try:
            writer.write(request)
            await writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            pass

    sending = asyncio.create_task(send())
    try:
        async with asyncio.timeout(seconds):
            start = await reader.readuntil(b"\r\n\r\n")
            lines = start.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = [(n.strip().lower(), v.strip()) for n, v in (line.split(":", 1) for line in lines[1:] if line)]
            length = next((int(v) for n, v in headers if n == "content-length"), None)
            if no_body:  # the answer to HEAD
                body = b""
            elif length is not None:
                body = await reader.readexactly(length)
            else:
                body = await reader.read()
        return RawResponse(status=status, headers=headers, body=body)
    finally:
        sending.cancel()
        writer.close()


def http_request(
    method: str,
    target: bytes | str,
    headers: list[tuple[bytes | str, bytes | str]],
    body: bytes = b"",
) -> bytes:
    """An HTTP/1.1 request as bytes, headers exactly as given (repeated ones stay repeated)."""

    def b(value: bytes | str) -> bytes:
        return value if isinstance(value, bytes) else value.encode("latin-1")

    lines = [b(method) + b" " + b(target) + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    lines += [b(name) + b": " + b(value) for name, value in headers]
    framed = {b(name).lower() for name, _ in headers} & {b"content-length", b"transfer-encoding"}
    if not framed and (body or method in ("POST", "PUT", "PATCH")):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
