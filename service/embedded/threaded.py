"""An ASGI app served in a daemon thread of this process, on a port chosen at start: the demo's scripted agents
and its tool server run beside the service with nothing to deploy, and end with the process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import uvicorn


def bound(host: str) -> socket.socket:
    """A socket bound to a port of `host` chosen now (its server's URL can be known before it serves)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


def start(
    app: Any, name: str, host: str = "127.0.0.1", lifespan: Literal["on", "off"] = "off"
) -> tuple[int, Callable[[], None]]:
    """Serve `app` until the returned function is called; (its port, that function)."""
    sock = bound(host)
    port: int = sock.getsockname()[1]
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan=lifespan)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the {name} did not start")
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)
        sock.close()

    return port, stop
