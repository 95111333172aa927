"""The task dialect functions, on the real samples and on merged histories."""

from __future__ import annotations

import copy
import json

import pytest
from a2a.compat.v0_3 import types as v03
from a2a.types import Task as V1Task
from google.protobuf import json_format

from service.kagent import dialects
from service.kagent.dialects import Rewrite, TaskDialect
from tests.conftest import SAMPLES

RW = Rewrite(task_id="new-task", context_id="new-session", user_id="bob")


def sample(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text())


def turn(dialect: TaskDialect, inv: str, question: str, answer: str, n: int) -> dict:
    """A one-turn task as kagent stores it, with the user message carrying the invocation id."""
    if dialect is TaskDialect.LEGACY:
        return {
            "kind": "task", "id": f"t{n}", "contextId": "src",
            "status": {"state": "completed", "timestamp": "2025-11-22T10:12:25.123Z"},
            "history": [
                {"kind": "message", "messageId": f"u{n}", "role": "user", "taskId": f"t{n}", "contextId": "src",
                 "parts": [{"kind": "text", "text": question}], "metadata": {"adk_invocation_id": inv}},
                {"kind": "message", "messageId": f"a{n}", "role": "agent", "taskId": f"t{n}", "contextId": "src",
                 "parts": [{"kind": "text", "text": answer}], "metadata": {"adk_author": "agent"}},
            ],
            "metadata": {"adk_session_id": "src", "adk_user_id": "alice"},
        }  # fmt: skip
    return {
        "id": f"t{n}", "contextId": "src",
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2025-11-22T10:12:25.123Z"},
        "artifacts": [{"artifactId": f"art{n}", "parts": [{"text": answer}]}],
        "history": [{"messageId": f"u{n}", "role": "ROLE_USER", "taskId": f"t{n}", "contextId": "src",
                     "parts": [{"text": question}], "metadata": {"adk_invocation_id": inv}}],
        "metadata": {"adk_session_id": "src", "kagent_user_id": "alice"},
    }  # fmt: skip


def parses(task: dict, dialect: TaskDialect) -> None:
    text = dialects.encode(task)
    if dialect is TaskDialect.V1:
        json_format.Parse(text, V1Task())
    else:
        v03.Task.model_validate_json(text)


def test_dialect_of_protocol_version() -> None:
    assert TaskDialect.of(None) is TaskDialect.LEGACY
    assert TaskDialect.of("0.3.0") is TaskDialect.LEGACY
    assert TaskDialect.of("1.0") is TaskDialect.V1
    assert TaskDialect.of("2.0") is None


@pytest.mark.parametrize(
    ("name", "dialect"), [("a2a_task.json", TaskDialect.V1), ("a2a_task_v0_3.json", TaskDialect.LEGACY)]
)
def test_rewrite_points_every_id_at_the_fork_and_keeps_the_rest(name: str, dialect: TaskDialect) -> None:
    source = sample(name)
    before = copy.deepcopy(source)
    out = dialects.rewrite(source, RW)
    assert source == before, "the source value is not modified"
    assert out["id"] == "new-task" and out["contextId"] == "new-session"
    for message in out["history"]:
        assert message["taskId"] == "new-task" and message["contextId"] == "new-session"
    if "adk_session_id" in out["metadata"]:
        assert out["metadata"]["adk_session_id"] == "new-session"
    if "adk_user_id" in out["metadata"]:
        assert out["metadata"]["adk_user_id"] == "bob"
    # message ids and invocation ids are kept, so tasks still match their events
    assert [m["messageId"] for m in out["history"]] == [m["messageId"] for m in source["history"]]
    assert dialects.invocation_ids(out) == dialects.invocation_ids(source)
    parses(out, dialect)


def test_invocation_ids_read_adk_then_kagent_prefix_everywhere() -> None:
    task = turn(TaskDialect.V1, "e-1", "q", "a", 1)
    task["status"]["message"] = {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": "x"}],
                                 "metadata": {"kagent_invocation_id": "e-2"}}  # fmt: skip
    task["artifacts"][0]["metadata"] = {"adk_invocation_id": "e-3", "kagent_invocation_id": "ignored"}
    assert dialects.invocation_ids(task) == ["e-1", "e-2", "e-3"]


@pytest.mark.parametrize("dialect", list(TaskDialect))
def test_merge_concatenates_histories_dedups_and_completes(dialect: TaskDialect) -> None:
    t1 = turn(dialect, "e-1", "q1", "a1", 1)
    t2 = turn(dialect, "e-2", "q2", "a2", 2)
    t2["history"].insert(0, copy.deepcopy(t1["history"][0]))  # a replayed message is shown once
    merged, count = dialects.merge([t1, t2], dialect, RW)
    ids = [m["messageId"] for m in merged["history"]]
    assert ids == (["u1", "a1", "u2", "a2"] if dialect is TaskDialect.LEGACY else ["u1", "u2"])
    assert count == len(ids)
    assert dialects.is_terminal(merged, dialect) and merged["id"] == "new-task"
    assert dialects.invocation_ids(merged)[:2] == ["e-1", "e-2"]
    parses(merged, dialect)


@pytest.mark.parametrize("dialect", list(TaskDialect))
def test_cut_of_a_merged_task_keeps_the_turns_before_the_boundary(dialect: TaskDialect) -> None:
    merged, _ = dialects.merge([turn(dialect, f"e-{i}", f"q{i}", f"a{i}", i) for i in range(1, 4)], dialect, RW)
    index = dialects.cut_index(merged, dialect, "e-2")
    assert index == (2 if dialect is TaskDialect.LEGACY else 1)
    assert index is not None
    out = dialects.cut(merged, dialect, index)
    assert dialects.invocation_ids(out) == ["e-1"]
    if dialect is TaskDialect.V1:
        assert [a["artifactId"] for a in out["artifacts"]] == ["art1"], "artifacts of later turns go"
    parses(out, dialect)


def test_cut_goes_before_user_messages_that_open_the_turn() -> None:
    task = turn(TaskDialect.LEGACY, "e-1", "q1", "a1", 1)
    second = turn(TaskDialect.LEGACY, "e-2", "q2", "a2", 2)["history"]
    del second[0]["metadata"]  # only the agent's reply carries the turn's id
    second[1]["metadata"] = {"adk_invocation_id": "e-2"}
    task["history"] += second
    assert dialects.cut_index(task, TaskDialect.LEGACY, "e-2") == 2
    assert dialects.cut_index(task, TaskDialect.LEGACY, "e-9") is None


def test_decode_refuses_what_is_not_a_json_object() -> None:
    with pytest.raises(dialects.TaskFormatError):
        dialects.decode("not json")
    with pytest.raises(dialects.TaskFormatError):
        dialects.decode("[1, 2]")
