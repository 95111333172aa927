"""Pure planning: names, layouts, boundary tasks and the task copier."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from service.errors import Unprocessable
from service.kagent import dialects
from service.kagent.dialects import TaskDialect
from service.kagent.store.tasks import TaskRow
from service.operations import plan
from service.services import Services
from tests.helpers import new_user
from tests.test_tasks import turn

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def row(data: dict, n: int, version: str | None) -> TaskRow:
    return TaskRow(id=data["id"], created_at=datetime(2026, 1, 1, 0, n, tzinfo=UTC), protocol_version=version,
                   data=json.dumps(data))  # fmt: skip


def test_default_name() -> None:
    assert plan.default_name("Weather", None) == "Fork of Weather"
    assert plan.default_name("Chat", "  What's   the weather\nin Paris? " + "x" * 80) == (
        "Fork of \"What's the weather in Paris? " + "x" * 31 + '"'
    )
    assert plan.default_name(None, None) == "Fork of chat"
    assert plan.default_name("Chat", "   ") == "Fork of chat"


def test_choose_layout() -> None:
    assert plan.choose_layout("auto", {TaskDialect.LEGACY}) == "merged"
    assert plan.choose_layout("auto", {TaskDialect.V1}) == "per_task"
    assert plan.choose_layout("auto", {TaskDialect.LEGACY, TaskDialect.V1}) == "per_task"
    assert plan.choose_layout("auto", set()) == "per_task"
    assert plan.choose_layout("merged", {TaskDialect.V1}) == "merged"
    with pytest.raises(Unprocessable):
        plan.choose_layout("merged", {TaskDialect.LEGACY, TaskDialect.V1})


def test_verbatim_prefilter_only_for_ids_json_cannot_escape() -> None:
    assert dialects.verbatim_in_json("e-6f1c2a7e-3b4d-4e8a-9c2f-1a2b3c4d5e6f")
    assert not dialects.verbatim_in_json('e-"quoted"')
    assert not dialects.verbatim_in_json("e-é")


def test_find_boundary_task_skips_unreadable_rows_and_cuts_merged_ones() -> None:
    merged, _ = dialects.merge([turn(TaskDialect.LEGACY, f"e-{i}", "q", "a", i) for i in (1, 2)], TaskDialect.LEGACY,
                            dialects.Rewrite(task_id="m", context_id="s", user_id="u"))  # fmt: skip
    bad = TaskRow(id="bad", created_at=NOW, protocol_version=None, data="{not json e-2")
    found = plan.find_boundary_task([bad, row(merged, 1, None)], "e-2")
    assert found is not None and found.row.id == "m" and found.cut == 2
    whole = plan.find_boundary_task([row(turn(TaskDialect.V1, "e-2", "q", "a", 2), 2, "1.0")], "e-2")
    assert whole is not None and whole.cut == 0
    assert plan.find_boundary_task([row(merged, 1, None)], "e-3") is None


def test_copier_per_task_rewrites_and_cancels_stale_turns() -> None:
    copier = plan.TaskCopier(layout="per_task", session_id="fork", user_id="bob", now=NOW)
    stale = turn(TaskDialect.V1, "e-1", "q1", "a1", 1)
    stale["status"]["state"] = "TASK_STATE_WORKING"
    first = copier.add(row(stale, 1, "1.0"))
    second = copier.add(row(turn(TaskDialect.V1, "e-2", "q2", "a2", 2), 2, "1.0"))
    assert first is not None and second is not None and copier.finish() is None
    assert copier.written == 2 and copier.messages == 2
    assert json.loads(first.data)["status"]["state"] == "TASK_STATE_CANCELED"
    assert copier.warnings and "canceled" in copier.warnings[0]
    for new in (first, second):
        data = json.loads(new.data)
        assert new.session_id == "fork" and new.user_id == "bob" and new.protocol_version == "1.0"
        assert data["id"] == new.id and data["contextId"] == "fork"
    assert first.id != second.id


def test_copier_merged_writes_one_task_at_the_first_tasks_time() -> None:
    copier = plan.TaskCopier(layout="merged", session_id="fork", user_id="bob", now=NOW)
    assert copier.add(row(turn(TaskDialect.LEGACY, "e-1", "q1", "a1", 1), 1, None)) is None
    assert copier.add(row(turn(TaskDialect.LEGACY, "e-2", "q2", "a2", 2), 2, None)) is None
    merged = copier.finish()
    assert merged is not None and merged.protocol_version is None
    assert merged.created_at == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert copier.written == 1 and copier.messages == 4
    assert [m["messageId"] for m in json.loads(merged.data)["history"]] == ["u1", "a1", "u2", "a2"]


TURN_SHAPES = [
    ["a", "a", "b", "b", "c"],  # no openings (Go ADK, kagent-adk 1.0): a turn begins at its first event
    ["header_update", "a", "a", "header_update", "b", "header_update", "c", "c"],  # kagent-adk 0.10.x
    ["a", "header_update", "header_update", "b"],  # two openings: only the one just before the turn counts
    ["header_update", "a", "b", "header_update"],  # a trailing opening belongs to no turn
    ["a", None, "b", "b"],  # a row that names no invocation
]


@pytest.mark.parametrize("ids", TURN_SHAPES)
def test_turn_start_is_the_first_event_or_its_opening(ids: list[str | None]) -> None:
    for wanted in ("a", "b", "c", "missing"):
        at = plan.turn_start(ids, wanted)
        if wanted not in ids:
            assert at is None
            continue
        assert at is not None
        first = ids.index(wanted)
        assert at == (first - 1 if first and ids[first - 1] == "header_update" else first)
        assert all(x != wanted for x in ids[:at])  # nothing of the turn is before its start


async def test_turn_start_agrees_with_the_boundary_event_query(services: Services, pool: asyncpg.Pool) -> None:
    """plan.turn_start is boundary_event's rule for rows in hand: on the same events, both find the same start."""
    for shape_index, ids in enumerate(TURN_SHAPES):
        user, session = new_user(), f"turn-start-{shape_index}-{new_user()}"
        times = [NOW + timedelta(seconds=i) for i in range(len(ids))]
        rows = [
            (f"e{i}", user, session, times[i], json.dumps({"invocation_id": x} if x else {"author": "user"}))
            for i, x in enumerate(ids)
        ]
        async with pool.acquire() as conn:
            await conn.executemany(
                "INSERT INTO event (id, user_id, session_id, created_at, updated_at, data)"
                " VALUES ($1, $2, $3, $4, $4, $5)",
                rows,
            )
            for wanted in ("a", "b", "c", "missing"):
                at = await services.store.events.boundary_event_at(conn, session, user, wanted, prefilter=True)
                index = plan.turn_start(ids, wanted)
                assert at == (times[index] if index is not None else None), (ids, wanted)
