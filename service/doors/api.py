"""Thin HTTP handlers: decode, call one operation, encode in kagent's envelope."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath
from litestar.response import Redirect, Stream
from prometheus_client import Counter

from service.agents import whatif
from service.branches import compare, lineage, transcript, turns
from service.doors import explorer, held
from service.errors import BadRequest, DatabaseUnavailable, NotFound, ServiceError, UnsupportedMediaType
from service.identity import Caller, resolve_caller, scope_headers
from service.kagent import invocation_index
from service.kagent.migrate import check_kagent_schema
from service.observability import FORKS, POOL, REWINDS, ROWS_COPIED, metrics_text
from service.operations import forking, rewind
from service.schemas import (
    EmptyRequest,
    Envelope,
    ForkedSession,
    ForkRequest,
    RewindRequest,
    checked_id,
    is_utf8,
    worded,
)
from service.services import Services

T = TypeVar("T")
AnyRequest = Request[Any, Any, Any]
_encoder = msgspec.json.Encoder()
log = logging.getLogger("kagent_fork")


def services(request: AnyRequest) -> Services:
    svc: Services = request.app.state.services
    return svc


def ok(data: object, message: str, status: int = 200, headers: dict[str, str] | None = None) -> Response[Any]:
    return bytes_answer(_encoder.encode(Envelope(data=data, message=message)), "application/json", status, headers)


def bytes_answer(body: bytes, media: str, status: int = 200, headers: dict[str, str] | None = None) -> Response[Any]:
    """`body` as the answer. One larger than a block waits for its reader within the process's budget of held
    answers, as a transcript does (held.py): in memory or in a temporary file, given back as it is sent."""
    if len(body) <= held.BLOCK:
        return Response(content=body, status_code=status, media_type=media, headers=headers)
    spool = held.spool()  # closed when the request ends, however it ends
    spool.write(body)
    # Content-Length as a whole answer has it (a stream would otherwise be sent chunked).
    length = {"Content-Length": str(len(body))}
    return Stream(spool.blocks(), status_code=status, media_type=media, headers={**(headers or {}), **length})


async def decode_body(request: AnyRequest, kind: type[T]) -> T:
    """The JSON body as `kind`; an empty body means every field at its default."""
    body = await request.body()
    types = raw_headers(request).get("content-type", [])
    if len(types) > 1:
        raise BadRequest(f"header content-type must be given once, got {len(types)}")
    media = (types[0] if types else "").split(";", 1)[0].strip().lower()
    # Required with a body or without: a page on another site can send a form's types (and no body) without
    # asking, but not application/json, so no state-changing request can be forged from a browser.
    if media != "application/json" and not media.endswith("+json"):
        shown = repr(media) if media else "none"
        raise UnsupportedMediaType(f"Content-Type must be application/json (also with an empty body), got {shown}")
    # Checked here, not left to the JSON library: how a decoder words bad UTF-8 changed between msgspec
    # releases (0.22 raised UnicodeDecodeError, 0.23 a DecodeError), and the answer must not change with it.
    if not is_utf8(body):
        raise BadRequest("request body is not valid UTF-8")
    try:
        value = msgspec.json.decode(body if body.strip() else b"{}", type=kind)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid request body: {worded(str(exc))}") from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if body.strip():
        # msgspec keeps the last of two equal keys; a proxy in front may have read the first. Refuse
        # the ambiguity (the body is a flat object by now: msgspec accepted it).
        json.loads(body, object_pairs_hook=_unique_keys)
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise BadRequest(f"request body names the field {twice!r} more than once")
    return dict(pairs)


def raw_headers(request: AnyRequest) -> dict[str, list[str]]:
    return scope_headers(request.scope)


def caller_of(request: AnyRequest) -> Caller:
    headers = raw_headers(request)
    query = {name: request.query_params.getall(name) for name in request.query_params}
    return resolve_caller(services(request).settings, headers, query)


def idempotency_key(request: AnyRequest) -> str | None:
    values = raw_headers(request).get("idempotency-key", [])
    if len(values) > 1:
        raise BadRequest("header Idempotency-Key must be given once")
    if not values:
        return None
    return checked_id(values[0], "Idempotency-Key")


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


@contextmanager
def outcome_of(counter: Counter, action: str, session_id: str) -> Iterator[None]:
    """Count and log a refused or failed fork or rewind (ids and outcome only: never conversation content)."""
    fields = {"action": action, "session_id": session_id}
    try:
        yield
    except (ServiceError, HTTPException) as exc:
        status, reason = (exc.status, exc.message) if isinstance(exc, ServiceError) else (exc.status_code, exc.detail)
        if status >= 500:
            counter.labels("failed").inc()
            log.warning("%s failed", action, extra={**fields, "outcome": "failed", "status": status})
            raise
        counter.labels("refused").inc()
        log.info("%s refused", action, extra={**fields, "outcome": "refused", "status": status, "reason": reason})
        raise
    except Exception:
        counter.labels("failed").inc()
        log.warning("%s failed", action, extra={**fields, "outcome": "failed"})
        raise


@post("/api/sessions/{session_id:str}/fork", status_code=201)
async def fork_session(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    started = time.perf_counter()
    with outcome_of(FORKS, "fork", session_id):
        req = await decode_body(request, ForkRequest)
        caller = caller_of(request)
        outcome = await forking.fork(services(request), caller, checked_id(session_id), req, idempotency_key(request))
    kind = "replayed" if outcome.replayed else ("created" if outcome.created else "dry_run")
    FORKS.labels(kind).inc()
    extra: dict[str, object] = {"action": "fork", "session_id": session_id, "user_id": caller.user_id, "outcome": kind,
                                "duration_ms": _ms_since(started)}  # fmt: skip
    if isinstance(outcome.data, ForkedSession):
        ROWS_COPIED.labels("event").inc(outcome.data.fork.events_copied)
        ROWS_COPIED.labels("task").inc(outcome.data.fork.tasks_copied)
        extra.update(new_session_id=outcome.data.id, events_copied=outcome.data.fork.events_copied,
                     tasks_copied=outcome.data.fork.tasks_copied)  # fmt: skip
    log.info("fork %s", kind, extra=extra)
    if outcome.replayed:
        return ok(
            outcome.data, "Fork already created for this Idempotency-Key", headers={"Idempotent-Replayed": "true"}
        )
    if not outcome.created:
        return ok(outcome.data, "Fork plan: nothing was written")
    return ok(
        outcome.data,
        "Successfully forked session",
        status=201,
        headers={"Location": f"/api/sessions/{outcome.session_id}"},
    )


@post("/api/sessions/{session_id:str}/rewind", status_code=200)
async def rewind_session(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    started = time.perf_counter()
    with outcome_of(REWINDS, "rewind", session_id):
        req = await decode_body(request, RewindRequest)
        caller = caller_of(request)
        result = await rewind.rewind(services(request), caller, checked_id(session_id), req)
    kind = "dry_run" if isinstance(result, rewind.RewindPlan) else "rewound"
    REWINDS.labels(kind).inc()
    log.info(
        "rewind %s", kind,
        extra={"action": "rewind", "session_id": session_id, "user_id": caller.user_id, "outcome": kind,
               "rewind_id": result.rewind.id, "events_removed": result.rewind.events_removed,
               "tasks_removed": result.rewind.tasks_removed, "duration_ms": _ms_since(started)},
    )  # fmt: skip
    if isinstance(result, rewind.RewindPlan):
        return ok(result, "Rewind plan: nothing was written")
    return ok(result, "Successfully rewound session")


@post("/api/sessions/{session_id:str}/rewinds/{rewind_id:str}/undo", status_code=200)
async def undo_rewind(request: AnyRequest, session_id: FromPath[str], rewind_id: FromPath[str]) -> Response[bytes]:
    started = time.perf_counter()
    with outcome_of(REWINDS, "undo", session_id):
        await decode_body(request, EmptyRequest)
        caller = caller_of(request)
        result = await rewind.undo(
            services(request), caller, checked_id(session_id), checked_id(rewind_id, "rewind id")
        )
    REWINDS.labels("undone").inc()
    log.info(
        "rewind undone",
        extra={"action": "undo", "session_id": session_id, "user_id": caller.user_id, "outcome": "undone",
               "rewind_id": rewind_id, "duration_ms": _ms_since(started)},
    )  # fmt: skip
    return ok(result, "Successfully undid rewind")


def _query_int(request: AnyRequest, name: str, default: int) -> int:
    values = request.query_params.getall(name, [])
    if len(values) > 1:
        raise BadRequest(f"query parameter {name} must be given once")
    if not values:
        return default
    # ASCII digits only: int() also takes digits of other scripts (Arabic-Indic 5) and spaces, no client means them.
    if not re.fullmatch(r"-?[0-9]{1,9}", values[0]):
        raise BadRequest(f"query parameter {name} must be a whole number")
    return int(values[0])


def _query_text(request: AnyRequest, name: str) -> str | None:
    values = request.query_params.getall(name, [])
    if len(values) > 1:
        raise BadRequest(f"query parameter {name} must be given once")
    return checked_id(values[0], name) if values else None


@get("/api/sessions/{session_id:str}/invocations")
async def list_invocations(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    page = await turns.invocations(
        services(request),
        caller_of(request),
        checked_id(session_id),
        limit=_query_int(request, "limit", 100),
        after=_query_text(request, "after"),
    )
    return ok(page.items, "end" if page.last else "more")


# Litestar adds "; charset=utf-8" to text/* types itself.
TRANSCRIPT_FORMATS = {"json": "application/json", "markdown": "text/markdown"}


@get("/api/sessions/{session_id:str}/transcript")
async def session_transcript(request: AnyRequest, session_id: FromPath[str]) -> Stream:
    """Read whole, then sent: every refusal (400, 404, 503 when held answers fill their budget) is raised before
    the first byte. Read whole so that the connection and its snapshot are held for as long as PostgreSQL takes
    to give the rows, never for as long as a slow or stalled client takes to read them; the bytes wait for the
    client in memory or in a temporary file, within the process's budget (held.py, docs/reliability.md)."""
    form = _query_text(request, "format") or "json"
    if form not in TRANSCRIPT_FORMATS:
        raise BadRequest(f"query parameter format must be one of {sorted(TRANSCRIPT_FORMATS)}, got {form!r}")
    before, before_task = _query_text(request, "before"), _query_text(request, "before_task")
    svc, caller = services(request), caller_of(request)
    spool = held.spool()  # closed when the request ends, however it ends
    async with transcript.reading(svc, caller, checked_id(session_id), before=before, before_task=before_task) as r:
        chunks = (
            transcript.markdown_chunks(r)
            if form == "markdown"
            else transcript.json_chunks(r, message="Successfully read transcript")
        )
        async for chunk in chunks:
            spool.write(chunk)
    return Stream(spool.blocks(), media_type=TRANSCRIPT_FORMATS[form])


@get("/api/sessions/{session_id:str}/rewinds")
async def list_rewinds(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    entries = await rewind.rewinds(services(request), caller_of(request), checked_id(session_id))
    return ok(entries, "Successfully listed rewinds")


@get("/api/sessions/{session_id:str}/compare/{other_session_id:str}")
async def compare_sessions(
    request: AnyRequest, session_id: FromPath[str], other_session_id: FromPath[str]
) -> Response[bytes]:
    result = await compare.compare(
        services(request), caller_of(request), checked_id(session_id), checked_id(other_session_id)
    )
    return ok(result, "Successfully compared sessions")


@get("/api/sessions/{session_id:str}/forks")
async def list_forks(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    entries = await lineage.forks(services(request), caller_of(request), checked_id(session_id))
    return ok(entries, "Successfully listed forks")


@get("/api/sessions/{session_id:str}/tree")
async def fork_tree(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    node = await lineage.tree(services(request), caller_of(request), checked_id(session_id))
    return ok(node, "Successfully built fork tree")


def _authorization(request: AnyRequest) -> str | None:
    """The bearer token to pass on to kagent's A2A endpoint (trusted-proxy mode); never stored."""
    values = raw_headers(request).get("authorization", [])
    return values[0] if len(values) == 1 else None


@post("/api/sessions/{session_id:str}/whatif", status_code=202)
async def start_whatif(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    req = await decode_body(request, whatif.WhatifRequest)
    caller = caller_of(request)
    answer, replayed = await whatif.start(
        services(request), request.app.state.whatif_runner, caller, checked_id(session_id), req,
        idempotency_key=idempotency_key(request), authorization=_authorization(request),
    )  # fmt: skip
    if replayed:
        return ok(answer, "What-if already started for this Idempotency-Key", headers={"Idempotent-Replayed": "true"})
    if isinstance(answer, whatif.DryRun):
        return ok(answer, "What-if dry run: nothing was written")
    assert isinstance(answer, whatif.Started)
    return ok(answer, "What-if started", status=202, headers={"Location": f"/api/whatif/{answer.job.id}"})


@get("/api/whatif/{job_id:str}")
async def whatif_job(request: AnyRequest, job_id: FromPath[str]) -> Response[bytes]:
    job = await whatif.get(services(request), caller_of(request), checked_id(job_id, "job id"))
    return ok(job, "Successfully read what-if job")


@post("/api/whatif/{job_id:str}/cancel", status_code=200)
async def cancel_whatif(request: AnyRequest, job_id: FromPath[str]) -> Response[bytes]:
    await decode_body(request, EmptyRequest)
    job = await whatif.cancel(
        services(request), caller_of(request), checked_id(job_id, "job id"), _authorization(request)
    )
    return ok(job, "Successfully cancelled what-if job")


@get("/api/sessions/{session_id:str}/whatifs")
async def list_whatifs(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    jobs = await whatif.of_session(services(request), caller_of(request), checked_id(session_id))
    return ok(jobs, "Successfully listed what-if jobs")


@get("/api/fork-explorer/sessions")
async def explorer_sessions(request: AnyRequest) -> Response[bytes]:
    unknown = sorted(set(request.query_params) - {"agent_id", "limit", "user_id"})
    if unknown:
        raise BadRequest(f"unknown query parameters: {', '.join(unknown)} (agent_id and limit are known)")
    agent = _query_text(request, "agent_id")
    items = await explorer.sessions(
        services(request), caller_of(request), agent_id=agent, limit=_query_int(request, "limit", 50)
    )
    return ok(items, "Successfully listed sessions")


@get("/api/fork-explorer/agents")
async def explorer_agents(request: AnyRequest) -> Response[bytes]:
    return ok(await explorer.agents(services(request)), "Successfully listed agents")


@get("/api/fork-explorer/whoami")
async def explorer_whoami(request: AnyRequest) -> Response[bytes]:
    return ok(explorer.whoami(services(request), caller_of(request)), "The caller, as the API sees it")


def _page(name: str) -> Response[bytes]:
    try:
        content, media = explorer.page_file(name)
    except FileNotFoundError:
        raise NotFound(f"no such file of the explorer page: {name}") from None
    # The page loads nothing from elsewhere and runs no inline script.
    csp = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'"
    return Response(content, media_type=media, headers={"Content-Security-Policy": csp, "Cache-Control": "no-cache"})


@get("/", include_in_schema=False)
async def root() -> Redirect:
    """Nothing lives at /: people who open the service's address are sent to the explorer page."""
    return Redirect("/ui/", status_code=307)


@get("/ui/", include_in_schema=False)
async def explorer_page() -> Response[bytes]:
    return _page("index.html")


@get("/ui/{name:str}", include_in_schema=False)
async def explorer_file(name: FromPath[str]) -> Response[bytes]:
    return _page(name)


@get("/metrics", media_type="text/plain; version=0.0.4")  # Litestar adds "; charset=utf-8"
async def metrics(request: AnyRequest) -> bytes:
    pool = services(request).pool
    POOL.labels("open").set(pool.get_size())
    POOL.labels("idle").set(pool.get_idle_size())
    POOL.labels("max").set(pool.get_max_size())
    return metrics_text()


@get("/healthz")
async def healthz() -> Response[bytes]:
    return ok({"status": "ok"}, "alive")


@get("/readyz")
async def readyz(request: AnyRequest) -> Response[bytes]:
    svc = services(request)
    try:
        async with asyncio.timeout(5), svc.connection() as conn:
            schema = await check_kagent_schema(svc.store, conn)
            index = await invocation_index.status(svc.store, conn)
    except ServiceError:
        raise
    except Exception as exc:  # any failure to reach or read the database means "not ready"
        raise DatabaseUnavailable(f"not ready: {type(exc).__name__}") from None
    return ok(
        {
            "status": "ready",
            "product_line": schema.product_line,
            "migration_version": schema.migration_version,
            "invocation_index": msgspec.to_builtins(index),
        },
        "ready",
    )


def openapi_path() -> Path:
    """openapi.yaml beside the package in a checkout, or inside it in an installed wheel."""
    # service/openapi.yaml in a wheel, beside service/ in a checkout: the first found walking up from here
    for parent in Path(__file__).resolve().parents[:3]:
        if (parent / "openapi.yaml").is_file():
            return parent / "openapi.yaml"
    raise FileNotFoundError("openapi.yaml is missing from the installation")


@get("/openapi.yaml", media_type="application/yaml")
async def openapi_document() -> bytes:
    return openapi_path().read_bytes()


def handlers() -> list[HTTPRouteHandler]:
    return [
        fork_session,
        rewind_session,
        undo_rewind,
        list_invocations,
        session_transcript,
        list_rewinds,
        compare_sessions,
        list_forks,
        fork_tree,
        start_whatif,
        whatif_job,
        cancel_whatif,
        list_whatifs,
        explorer_sessions,
        explorer_agents,
        explorer_whoami,
        root,
        explorer_page,
        explorer_file,
        healthz,
        readyz,
        metrics,
        openapi_document,
    ]
