"""Metrics and logs: what an operator watches, and that no conversation content leaks into logs."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import asyncpg
import pytest

from service.observability import JsonFormatter
from tests.helpers import seed


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample in exposition text (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match.group(1).split(","))) == want:
            return float(match.group(2))
    return 0.0


async def test_metrics_count_forks_rewinds_rows_and_requests(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3)
    user = {"X-User-Id": conv.user_id}
    before = (await client.get("/metrics")).text
    r = await client.post(f"/api/sessions/{conv.session_id}/fork", json={}, headers=user)
    assert r.status_code == 201
    assert (await client.post("/api/sessions/missing/fork", json={}, headers=user)).status_code == 404
    rw = await client.post(
        f"/api/sessions/{conv.session_id}/rewind",
        json={"rewind_before_invocation_id": conv.invocation_ids[2]},
        headers=user,
    )
    assert rw.status_code == 200
    after = (await client.get("/metrics")).text
    assert "text/plain" in (await client.get("/metrics")).headers["content-type"]

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("kagent_fork_forks_total", outcome="created") == 1
    assert grew("kagent_fork_forks_total", outcome="refused") == 1
    assert grew("kagent_fork_rewinds_total", outcome="rewound") == 1
    assert grew("kagent_fork_rows_copied_total", table="event") == len(conv.events)
    assert grew("kagent_fork_rows_copied_total", table="task") == 3
    route = "/api/sessions/{session_id}/fork"
    assert grew("kagent_fork_http_requests_total", route=route, method="POST", status="201") == 1
    assert grew("kagent_fork_http_requests_total", route=route, method="POST", status="404") == 1
    assert grew("kagent_fork_http_request_duration_seconds_count", route=route, method="POST") == 2
    assert sample(after, "kagent_fork_db_pool_connections", state="max") >= 1


async def test_request_ids_and_logs_without_content(
    client: Any, pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    conv = await seed(pool, dialect="legacy", turns=2)
    caplog.set_level(logging.INFO, logger="kagent_fork")
    r = await client.post(
        f"/api/sessions/{conv.session_id}/fork", json={}, headers={"X-User-Id": conv.user_id, "X-Request-Id": "req-42"}
    )
    assert r.status_code == 201 and r.headers["x-request-id"] == "req-42"
    made = await client.get("/healthz")
    assert len(made.headers["x-request-id"]) == 36  # a new uuid when none is given
    records = [rec for rec in caplog.records if getattr(rec, "action", None) == "fork"]
    assert records, "the fork's outcome is logged"
    line = json.loads(JsonFormatter().format(records[-1]))
    assert line["request_id"] == "req-42" and line["outcome"] == "created"
    assert line["session_id"] == conv.session_id and line["user_id"] == conv.user_id
    assert line["events_copied"] == len(conv.events)
    text = json.dumps(line)
    for turn in conv.turns:
        assert turn.user_text not in text


async def test_opentelemetry_tracing_when_switched_on(database_url: str, pool: asyncpg.Pool) -> None:
    from litestar.testing import AsyncTestClient
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from service.app import create_app
    from service.config import from_env

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    settings = from_env({"DATABASE_URL": database_url, "OTEL_TRACING_ENABLED": "true"})
    conv = await seed(pool, dialect="v1", turns=1)
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with AsyncTestClient(app=create_app(settings, database_url)) as c:
        r = await c.post(
            f"/api/sessions/{conv.session_id}/fork", json={}, headers={"X-User-Id": conv.user_id, "traceparent": parent}
        )
        assert r.status_code == 201
        await c.get("/healthz")  # excluded: probes make no spans
    spans = exporter.get_finished_spans()
    server = [s for s in spans if s.kind == trace.SpanKind.SERVER]
    assert len(server) == 1
    assert server[0].attributes is not None and server[0].attributes.get("http.status_code") == 201
    assert format(server[0].context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c", (
        "the caller's trace goes on"
    )


async def test_an_oversized_body_counts_as_refused(client: Any) -> None:
    before = (await client.get("/metrics")).text
    r = await client.post("/api/sessions/s/fork", content=b"{" + b" " * (2 * 1024 * 1024) + b"}",
                          headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 413
    after = (await client.get("/metrics")).text
    assert (
        sample(after, "kagent_fork_forks_total", outcome="refused")
        == sample(before, "kagent_fork_forks_total", outcome="refused") + 1
    )
    assert sample(after, "kagent_fork_forks_total", outcome="failed") == sample(
        before, "kagent_fork_forks_total", outcome="failed"
    )


async def test_logs_an_access_line_per_request_and_durations(
    client: Any, pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    caplog.set_level(logging.INFO)
    r = await client.post(
        f"/api/sessions/{conv.session_id}/fork", json={"rewind_before_invocation_id": conv.invocation_ids[1]},
        headers={"X-User-Id": conv.user_id},
    )  # fmt: skip
    assert r.status_code == 201
    access = [rec for rec in caplog.records if rec.name == "kagent_fork.access"]
    assert len(access) == 1
    line = json.loads(JsonFormatter().format(access[0]))
    assert line["route"] == "/api/sessions/{session_id}/fork" and line["status"] == 201
    assert line["method"] == "POST" and line["duration_ms"] >= 0 and line["request_id"] != "-"
    assert conv.session_id not in json.dumps(line)  # the template, not the ids; no content
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", line["time"])
    fork_line = next(rec for rec in caplog.records if getattr(rec, "action", None) == "fork")
    assert fork_line.duration_ms > 0  # type: ignore[attr-defined]
    colored = logging.makeLogRecord({"msg": "Started", "color_message": "\x1b[36mStarted\x1b[0m"})
    assert "\x1b" not in JsonFormatter().format(colored) and "color_message" not in JsonFormatter().format(colored)
