"""The service's HTTP clients share one TLS context per process (service/outbound.py): httpx would otherwise load
the CA roots again for each client, and the service builds one for every A2A call (a judgment's asks and each
poll of their tasks), which made the TLS setup most of a suite run's CPU (bench/README.md, "Suites")."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from service.agents import a2a_client
from service.embedded import threaded
from service.kagent.dialects import TaskDialect
from service.outbound import tls


async def test_a2a_calls_load_the_ca_roots_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async def card(_: Any) -> JSONResponse:
        return JSONResponse({"name": "agent", "version": "1", "skills": []})

    app = Starlette(routes=[Route("/api/a2a/ns/agent/.well-known/agent-card.json", card)])
    port, stop = threaded.start(app, "card server")
    made: list[ssl.SSLContext] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ssl, "create_default_context", counted)
    tls.cache_clear()
    agent = a2a_client.Agent(
        ref="ns/agent", url=f"http://127.0.0.1:{port}/api/a2a/ns/agent/", dialect=TaskDialect.V1, headers={},
        timeout=5,
    )  # fmt: skip
    try:
        for _ in range(3):
            assert (await a2a_client.fetch_card(agent)).name == "agent"
            async with a2a_client._transport(agent):
                pass
    finally:
        stop()
    assert len(made) == 1 and tls() is made[0]
