"""create_app(settings): routes, the pool's lifespan, and the one mapping of errors to kagent's envelope."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import msgspec
from litestar import Litestar, Request, Response, asgi
from litestar.enums import ScopeType
from litestar.exceptions import HTTPException
from litestar.types import ASGIApp, Receive, Scope, Send

from service.agents import whatif
from service.agents.suites import driver
from service.config import Settings
from service.database import open_pool, prepare_database
from service.doors import (
    api,
    experiments_http,
    held,
    mcp_apps,
    mcp_http,
    mcp_tools,
    replay_mcp,
    suite_runs_http,
    suites_http,
)
from service.errors import DatabaseUnavailable, ServiceError, envelope
from service.kagent import turn_map
from service.kagent.store import Store
from service.kagent.store.base import CONNECTION_ERRORS
from service.observability import configure_logging, observe, stamp_request_ids
from service.services import Services, open_lock_pool
from service.tracing import tracing_middleware

log = logging.getLogger("kagent_fork")

_RETRYABLE = (asyncpg.exceptions.SerializationError, asyncpg.exceptions.DeadlockDetectedError)


_tasks: set[asyncio.Task[None]] = set()


def _background(coro: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[bytes]:
    return Response(
        content=msgspec.json.encode(body), status_code=status, media_type="application/json", headers=headers
    )


def error_response(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    """Every failure, the framework's own included, as {"error": "<text>"}: never a stack trace."""
    if isinstance(exc, ServiceError):
        return _json(exc.status, envelope(exc.message), headers=exc.headers)
    if isinstance(exc, HTTPException):
        detail = exc.detail if isinstance(exc.detail, str) and exc.detail else "request refused"
        headers = exc.headers
        if headers and "allow" in headers:  # a 405: the path's methods, HEAD with GET (see allow_header)
            headers = {**headers, "allow": allow_header(headers["allow"].split(", "))}
        return _json(exc.status_code, envelope(detail), headers=headers)
    if isinstance(exc, CONNECTION_ERRORS):
        services: Services | None = getattr(request.app.state, "services", None)
        if services is not None:
            # The pool's other connections are probably dead too: drop them all so the next
            # requests reconnect instead of failing one by one.
            _background(services.pool.expire_connections())
        log.warning("database unavailable: %s", type(exc).__name__)
        return _json(DatabaseUnavailable.status, envelope("database unavailable, try again later"))
    if isinstance(exc, _RETRYABLE):
        return _json(409, envelope("the session changed while this request ran; try again"))
    log.exception("unexpected error")
    return _json(500, envelope("internal error"))


def head_as_get(app: Callable[..., Any]) -> Callable[..., Any]:
    """HEAD is GET without the body (RFC 9110), for every GET route; a route that has no GET still answers
    405, naming what it allows. /mcp (the MCP SDK's own app) is left as it is. Wrapped around the app's
    router (Litestar's own middleware runs after routing, which already refused HEAD)."""

    async def middleware(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD" or scope["path"].startswith("/mcp"):
            await app(scope, receive, send)
            return

        async def headers_only(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # the rest of a streamed body: nothing of it is sent
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await app({**scope, "method": "GET"}, receive, headers_only)

    return middleware


def allow_header(methods: Iterable[str]) -> str:
    """`Allow` for a path: its methods, OPTIONS, and HEAD where GET is (head_as_get answers it)."""
    allowed = {m.upper() for m in methods} | {"OPTIONS"}
    return ", ".join(sorted(allowed | ({"HEAD"} if "GET" in allowed else set())))


def options_allow_every_method(app: ASGIApp) -> ASGIApp:
    """OPTIONS names every method of every handler of the path. Litestar's own answer names only those registered
    with the path's first handler: GET /api/sessions/{id}/experiments, registered after its POST, was left out."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or scope["method"] != "OPTIONS":
            await app(scope, receive, send)
            return
        handlers = Litestar.from_scope(scope).route_handler_method_map
        methods = {m for path in scope["route_handler"].paths for m in handlers.get(path, {})}
        allow = allow_header(methods).encode()
        await send({"type": "http.response.start", "status": 204, "headers": [(b"allow", allow)]})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return middleware


# How long a shutdown waits for borrowed connections to come back before cutting them.
POOL_CLOSE_SECONDS = 10.0


async def close_pool(pool: asyncpg.Pool, grace_seconds: float = POOL_CLOSE_SECONDS) -> None:
    """Close the pool, waiting for borrowed connections at most `grace_seconds`: asyncpg's close waits for
    every one of them without end, and a shutdown must end (a connection lost by a cancelled task, or a
    server that stopped answering, would hold it for ever). Past the grace the connections are cut."""
    try:
        await asyncio.wait_for(pool.close(), grace_seconds)
    except TimeoutError:
        log.warning("database pool not closed within %.0f s: its connections are cut", grace_seconds)
        pool.terminate()


@asynccontextmanager
async def _startup_frozen() -> AsyncIterator[None]:
    """While the app serves, what it made to start (modules, routes, the MCP servers: about 120,000 objects) is
    left out of the garbage collector's full passes, which otherwise walk all of it: one such pass took 75 ms in
    the middle of a first listing of 10,000 events, 1 ms with them frozen (docs/design.md, "Garbage collection").
    Given back at shutdown, so that an app stopped in a longer-lived process (the tests) can be collected."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def create_app(settings: Settings, dsn: str) -> Litestar:
    store = Store(
        settings.service_schema,
        max_fork_events=settings.max_fork_events,
        turn_map_min_tasks=settings.turn_map_min_tasks,
    )
    stamp_request_ids()

    runners: list[whatif.Runner] = []
    tools = mcp_tools.mcp_server(lambda: runners[0])
    mcp_apps.register(tools)
    tools_app = tools.streamable_http_app()
    guarded_tools = mcp_http.guarded(tools_app, settings.max_body_bytes)

    @asgi("/mcp", is_mount=True, copy_scope=True)
    async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        await guarded_tools(scope, receive, send)  # type: ignore[arg-type]

    services: list[Services] = []
    replays = replay_mcp.session_manager(lambda: services[0])
    replay_app = replay_mcp.endpoint(replays, settings.max_body_bytes)

    @asgi(replay_mcp.PREFIX, is_mount=True, copy_scope=True)
    async def replay_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        await replay_app(scope, receive, send)  # type: ignore[arg-type]

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        pool = await open_pool(settings, dsn)
        locks = await open_lock_pool(settings, dsn)
        try:
            await prepare_database(settings, store, pool)
            app.state.services = Services(settings=settings, store=store, pool=pool, locks=locks)
            services.append(app.state.services)
            runner = app.state.whatif_runner = whatif.Runner(svc=app.state.services)
            runners.append(runner)
            runner.sweepers.append(functools.partial(driver.sweep, app.state.services, runner))
            # What-if jobs whose replica stopped (this one, before a restart) are finished or resumed.
            await runner.sweep()
            runner.start_sweeping()
            try:
                async with tools.session_manager.run(), replays.run(), _startup_frozen():
                    yield
            finally:
                await runner.stop()
                await turn_map.settled(cancel=True)
        finally:
            await close_pool(pool)
            await close_pool(locks)

    app = Litestar(
        route_handlers=[
            *api.handlers(),
            *experiments_http.handlers(),
            *suites_http.handlers(),
            *suite_runs_http.handlers(),
            mcp_endpoint,
            replay_endpoint,
        ],
        lifespan=[lifespan],
        exception_handlers={Exception: error_response},
        request_max_body_size=settings.max_body_bytes,
        middleware=[
            *tracing_middleware(settings.otel_tracing_enabled),
            observe,
            options_allow_every_method,
            held.releasing(held.Budget(settings.response_memory_bytes, settings.response_disk_bytes)),
        ],
        logging_config=None,  # logs are configured once, as JSON lines (service.observability)
        openapi_config=None,
        debug=False,
    )
    app.asgi_handler = head_as_get(app.asgi_handler)
    return app


def app_from_env() -> Litestar:
    """The application as uvicorn builds it in each worker (`factory=True`): settings from the environment."""
    import os

    from service.config import from_env

    configure_logging()
    settings = from_env(os.environ)
    dsn = os.environ.get("KAGENT_FORK_RESOLVED_DSN") or settings.database_url
    if not dsn:
        raise RuntimeError("kagent-fork: DATABASE_URL is not set")
    return create_app(settings, dsn)
