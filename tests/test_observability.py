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
