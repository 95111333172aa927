"""Pure planning: names, layouts, boundary tasks and the task copier."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from service.errors import Unprocessable
from service.kagent import dialects
from service.kagent.dialects import TaskDialect
from service.kagent.store.tasks import TaskRow
from service.operations import plan
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
