"""Timestamps as kagent's Go backend writes them (time.RFC3339Nano): UTC as 'Z', four-digit years, no trailing
zeros in the fraction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from service.schemas import rfc3339


def test_a_time_is_written_as_go_writes_it() -> None:
    assert rfc3339(datetime(2026, 11, 28, 6, 3, 54, tzinfo=UTC)) == "2026-11-28T06:03:54Z"
    assert rfc3339(datetime(2026, 11, 28, 6, 3, 54, 120000, tzinfo=UTC)) == "2026-11-28T06:03:54.12Z"
    assert rfc3339(datetime(2026, 11, 28, 6, 3, 54, 7, tzinfo=UTC)) == "2026-11-28T06:03:54.000007Z"
    east = timezone(timedelta(hours=2))
    assert rfc3339(datetime(2026, 11, 28, 8, 3, 54, tzinfo=east)) == "2026-11-28T06:03:54Z"
    assert rfc3339(None) == "0001-01-01T00:00:00Z"


def test_a_year_before_1000_has_four_digits() -> None:
    assert rfc3339(datetime(926, 1, 2, 3, 4, 5, tzinfo=UTC)) == "0926-01-02T03:04:05Z"
    assert rfc3339(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00Z"
