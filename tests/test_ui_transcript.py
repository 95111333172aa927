"""Tests of the Python port of kagent's chat-transcript logic (tests/support/ui_transcript.py).

Task dicts are shaped like kagent stores them in ``task.data``:

* release/v0.10.x (legacy A2A 0.3): one history message per ADK event, function calls / responses as
  ``{"kind": "data", "data": {...}, "metadata": {"kagent_type": "function_call"}}``, approvals as a
  long-running ``adk_request_confirmation`` call and a user ``{"decision_type": ...}`` data part.
* main (A2A v1.0): user messages in history, agent output in artifacts with ``adk_type`` part metadata,
  approvals as ``https://kagent.dev/extensions/hitl/v1`` message extensions.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

try:
    from tests.support.ui_transcript import (
        AGENT,
        AGENT_CALL,
        HITL_EXTENSION_URI,
        TOOL,
        USER,
        Entry,
        js_stringify,
        load_status_main,
        load_status_v010,
        transcript_main,
        transcript_v010,
    )
except ModuleNotFoundError:  # tests/ itself on sys.path (plain `pytest`, rootdir not importable)
    from support.ui_transcript import (  # type: ignore[no-redef]
        AGENT,
        AGENT_CALL,
        HITL_EXTENSION_URI,
        TOOL,
        USER,
        Entry,
        js_stringify,
        load_status_main,
        load_status_v010,
        transcript_main,
        transcript_v010,
    )

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"

CTX = "ctx-5b1e9d2a"
APP = "kagent__NS__k8s_agent"
FRIENDLY_APP = "kagent/k8s-agent"
HINT = "Tool 'delete_pod' requires approval before execution."


# --------------------------------------------------------------------------------------------------
# legacy (release/v0.10.x) builders
# --------------------------------------------------------------------------------------------------


def l_text(text: str) -> dict[str, Any]:
    return {"kind": "text", "text": text}


def l_data(data: Any, **metadata: Any) -> dict[str, Any]:
    return {"kind": "data", "data": data, "metadata": metadata}


def l_call(call_id: str, name: str, args: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return l_data({"id": call_id, "name": name, "args": args}, kagent_type="function_call", **metadata)


def l_response(call_id: str, name: str, response: Any) -> dict[str, Any]:
    return l_data({"id": call_id, "name": name, "response": response}, kagent_type="function_response")


def l_confirmation(conf_id: str, call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return l_data(
        {
            "id": conf_id,
            "name": "adk_request_confirmation",
            "args": {
                "originalFunctionCall": {"id": call_id, "name": name, "args": args},
                "toolConfirmation": {"hint": HINT, "confirmed": False},
            },
        },
        kagent_type="function_call",
        kagent_is_long_running=True,
    )


def l_msg(mid: str, role: str, *parts: dict[str, Any], tid: str = "task-1") -> dict[str, Any]:
    metadata: dict[str, Any] = {"kagent_invocation_id": "e-1"}
    if role == "agent":
        metadata |= {"kagent_app_name": APP, "kagent_author": "k8s_agent", "kagent_session_id": CTX}
    return {
        "kind": "message",
        "messageId": mid,
        "role": role,
        "parts": list(parts),
        "contextId": CTX,
        "taskId": tid,
        "metadata": metadata,
    }


def l_task(
    tid: str, state: str, history: list[dict[str, Any]], status_message: dict[str, Any] | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state, "timestamp": "2025-11-22T10:12:25.123456789Z"}
    if status_message is not None:
        status["message"] = status_message
    return {
        "kind": "task",
        "id": tid,
        "contextId": CTX,
        "status": status,
        "history": history,
        "metadata": {"kagent_app_name": APP},
    }


# --------------------------------------------------------------------------------------------------
# A2A v1.0 (main) builders
# --------------------------------------------------------------------------------------------------


def v_text(text: str, **metadata: Any) -> dict[str, Any]:
    return {"text": text, **({"metadata": metadata} if metadata else {})}


def v_data(data: Any, **metadata: Any) -> dict[str, Any]:
    return {"data": data, **({"metadata": metadata} if metadata else {})}


def v_call(call_id: str, name: str, args: dict[str, Any], prefix: str = "adk") -> dict[str, Any]:
    return v_data({"id": call_id, "name": name, "args": args}, **{f"{prefix}_type": "function_call"})


def v_response(call_id: str, name: str, response: Any, prefix: str = "adk") -> dict[str, Any]:
    return v_data({"id": call_id, "name": name, "response": response}, **{f"{prefix}_type": "function_response"})


def v_msg(
    mid: str,
    role: str,
    *parts: dict[str, Any],
    tid: str = "task-1",
    hitl: dict[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "messageId": mid,
        "contextId": CTX,
        "taskId": tid,
        "role": role,
        "parts": list(parts),
        "metadata": {"adk_invocation_id": "e-1"},
    }
    if hitl is not None:
        message["extensions"] = [HITL_EXTENSION_URI]
        message["metadata"][HITL_EXTENSION_URI] = hitl
    return message


def v_artifact(aid: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {
        "artifactId": aid,
        "parts": list(parts),
        "metadata": {"adk_invocation_id": "e-1", "adk_author": "k8s_agent", "adk_event_id": f"ev-{aid}"},
    }


def v_task(
    tid: str,
    state: str,
    history: list[dict[str, Any]],
    artifacts: list[dict[str, Any]] | None = None,
    status_message: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state, "timestamp": "2025-11-22T10:12:25.123456789Z"}
    if status_message is not None:
        status["message"] = status_message
    task: dict[str, Any] = {"id": tid, "contextId": CTX, "status": status, "history": history}
    if artifacts:
        task["artifacts"] = artifacts
    task["metadata"] = {"kagent_app_name": APP, "kagent_session_id": CTX}
    return task


APPROVAL_REQUEST = {
    "type": "tool_approval_request",
    "hint": HINT,
    "tools": [{"id": "adk-confirm-1", "call_id": "call_del", "name": "delete_pod", "args": {"pod": "x"}}],
}


def approval_response(approved: bool) -> dict[str, Any]:
    return {"type": "tool_approval_response", "approvals": [{"id": "adk-confirm-1", "approved": approved}]}


# --------------------------------------------------------------------------------------------------
# samples
# --------------------------------------------------------------------------------------------------


def load_sample(name: str) -> dict[str, Any]:
    return json.loads((SAMPLES / name).read_text())


def test_sample_v1_task_main_shows_user_then_artifacts_not_history_agent_text() -> None:
    task = load_sample("a2a_task.json")
    entries = transcript_main([task])
    # The history's agent message is not shown on main; the untyped data artifact is JSON.stringify'd
    # (sorted keys, JS number formatting: 14.0 -> 14).
    assert entries == [
        Entry.user("What's the weather in Paris?"),
        Entry.agent('{"sky":"cloudy","temp_c":14}'),
    ]
    assert all("It is 14" not in e.text for e in entries)
    assert load_status_main([task]) == "ready"


def test_sample_legacy_task_v010_shows_history() -> None:
    task = load_sample("a2a_task_v0_3.json")
    assert transcript_v010([task]) == [Entry.user("What's the weather in Paris?")]
    # The same JSON given as a string is accepted too.
    assert transcript_v010([json.dumps(task)]) == [Entry.user("What's the weather in Paris?")]
    assert load_status_v010([task]) == "ready"


def test_dialects_are_not_mixed() -> None:
    with pytest.raises(ValueError, match="legacy"):
        transcript_main([load_sample("a2a_task_v0_3.json")])
    with pytest.raises(ValueError, match=r"v1\.0"):
        transcript_v010([load_sample("a2a_task.json")])


# --------------------------------------------------------------------------------------------------
# release/v0.10.x
# --------------------------------------------------------------------------------------------------


def v010_qa_tasks() -> list[dict[str, Any]]:
    return [
        l_task(
            "task-1",
            "completed",
            [
                l_msg("m1", "user", l_text("list pods"), tid="task-1"),
                l_msg("m2", "agent", l_text("There are 3 pods."), tid="task-1"),
            ],
        ),
        l_task(
            "task-2",
            "completed",
            [
                l_msg("m3", "user", l_text("and services?"), tid="task-2"),
                l_msg("m4", "agent", l_text("There are 2 "), l_text("services."), tid="task-2"),
            ],
        ),
    ]


def test_v010_plain_qa() -> None:
    assert transcript_v010(v010_qa_tasks()) == [
        Entry.user("list pods"),
        Entry.agent("There are 3 pods.", author=FRIENDLY_APP),
        Entry.user("and services?"),
        Entry.agent("There are 2 services.", author=FRIENDLY_APP),
    ]


def test_v010_dedupes_message_ids_and_skips_empty_messages() -> None:
    tasks = v010_qa_tasks()
    # A repeated messageId (a status message moved to history twice) is shown once; an agent message
    # without text (an actions-only event) is not shown at all.
    tasks[1]["history"].insert(0, copy.deepcopy(tasks[0]["history"][1]))
    tasks[1]["history"].append(l_msg("m5", "agent", tid="task-2"))
    assert [e.text for e in transcript_v010(tasks)] == [
        "list pods",
        "There are 3 pods.",
        "and services?",
        "There are 2 services.",
    ]


def v010_tool_task() -> dict[str, Any]:
    return l_task(
        "task-1",
        "completed",
        [
            l_msg("m1", "user", l_text("weather in Paris?")),
            l_msg(
                "m2",
                "agent",
                l_text("Let me check the current weather in Paris for you."),
                l_call("adk-call-1", "get_weather", {"unit": "celsius", "city": "Paris"}),
            ),
            l_msg(
                "m3",
                "agent",
                l_response(
                    "adk-call-1",
                    "get_weather",
                    {"content": [{"type": "text", "text": "14°C, cloudy"}], "isError": False},
                ),
            ),
            l_msg("m4", "agent", l_text("It is 14°C and cloudy in Paris.")),
        ],
    )


def test_v010_tool_call_turn() -> None:
    entries = transcript_v010([v010_tool_task()])
    assert entries == [
        Entry.user("weather in Paris?"),
        Entry.tool("get_weather", {"city": "Paris", "unit": "celsius"}, "completed", "14°C, cloudy"),
        Entry.agent("It is 14°C and cloudy in Paris.", author=FRIENDLY_APP),
    ]
    assert entries[1].args == '{"city":"Paris","unit":"celsius"}'
    assert entries[1].args_obj == {"city": "Paris", "unit": "celsius"}
    # 0.10.x drops the text of a message that also carries a function call.
    assert all("Let me check" not in e.text for e in entries)


def test_v010_tool_error_and_call_ids_not_compared() -> None:
    task = v010_tool_task()
    response = task["history"][2]["parts"][0]["data"]["response"]
    response["isError"] = True
    entries = transcript_v010([task])
    assert entries[1].is_error is True
    assert entries[1].call_id == "adk-call-1"
    renamed = json.loads(json.dumps(task).replace("adk-call-1", "adk-call-9"))
    assert transcript_v010([renamed]) == entries


def v010_approval_history(decision: dict[str, Any] | None, result: str | None) -> list[dict[str, Any]]:
    history = [
        l_msg("m1", "user", l_text("delete pod x")),
        l_msg("m2", "agent", l_call("call_del", "delete_pod", {"pod": "x"})),
        l_msg("m3", "agent", l_response("call_del", "delete_pod", {"status": "confirmation_requested"})),
        l_msg("m4", "agent", l_confirmation("adk-confirm-1", "call_del", "delete_pod", {"pod": "x"})),
    ]
    if decision is not None:
        text = "Approved" if decision.get("decision_type") == "approve" else "Rejected"
        history.append(l_msg("m5", "user", l_data(decision), l_text(text)))
        history.append(l_msg("m6", "agent", l_response("call_del", "delete_pod", {"result": result})))
        history.append(l_msg("m7", "agent", l_text("Done.")))
    return history


def test_v010_approval_pending_then_approved() -> None:
    confirmation = v010_approval_history(None, None)[3]
    pending = l_task("task-1", "input-required", v010_approval_history(None, None), status_message=confirmation)
    assert transcript_v010([pending]) == [
        Entry.user("delete pod x"),
        # The approval renders on the card of the first message that introduced call_del.
        Entry.tool("delete_pod", {"pod": "x"}, "pending_approval"),
    ]
    assert load_status_v010([pending]) == "input_required"

    history = v010_approval_history({"decision_type": "approve"}, "pod x deleted")
    history.insert(4, copy.deepcopy(confirmation))  # status message moved to history again on resume
    done = l_task("task-1", "completed", history)
    assert transcript_v010([done]) == [
        Entry.user("delete pod x"),
        Entry.tool("delete_pod", {"pod": "x"}, "approved", "pod x deleted"),
        Entry.agent("Done.", author=FRIENDLY_APP),
    ]
    assert load_status_v010([done]) == "ready"


def test_v010_approval_rejected_and_batch() -> None:
    rejected = l_task(
        "task-1",
        "completed",
        v010_approval_history({"decision_type": "reject"}, "Tool call was rejected by user."),
    )
    assert transcript_v010([rejected])[1] == Entry.tool(
        "delete_pod", {"pod": "x"}, "rejected", "Tool call was rejected by user."
    )
    batch = l_task(
        "task-1",
        "completed",
        v010_approval_history({"decision_type": "batch", "decisions": {"call_del": "approve"}}, "pod x deleted"),
    )
    assert transcript_v010([batch])[1].status == "approved"


def test_v010_ask_user_resolved() -> None:
    questions = [{"question": "Which namespace?", "choices": ["default", "prod"]}]
    ask = l_data(
        {
            "id": "adk-confirm-2",
            "name": "adk_request_confirmation",
            "args": {"originalFunctionCall": {"id": "call_ask", "name": "ask_user", "args": {"questions": questions}}},
        },
        kagent_type="function_call",
        kagent_is_long_running=True,
    )
    task = l_task(
        "task-1",
        "completed",
        [
            l_msg("m1", "user", l_text("clean up")),
            l_msg("m2", "agent", l_call("call_ask", "ask_user", {"questions": questions})),
            l_msg("m3", "agent", l_response("call_ask", "ask_user", {"status": "pending"})),
            l_msg("m4", "agent", ask),
            l_msg(
                "m5",
                "user",
                l_data({"decision_type": "approve", "ask_user_answers": [{"answer": ["prod"]}]}),
                l_text("Answered questions"),
            ),
            l_msg("m6", "agent", l_text("Cleaning prod.")),
        ],
    )
    assert transcript_v010([task]) == [
        Entry.user("clean up"),
        Entry.ask_user(questions, [{"answer": ["prod"]}], status="answered"),
        Entry.agent("Cleaning prod.", author=FRIENDLY_APP),
    ]


def test_v010_running_last_task() -> None:
    tasks = v010_qa_tasks()[:1]
    tasks.append(
        l_task(
            "task-2",
            "working",
            [
                l_msg("m3", "user", l_text("weather in Paris?"), tid="task-2"),
                l_msg("m4", "agent", l_call("adk-call-1", "get_weather", {"city": "Paris"}), tid="task-2"),
            ],
        )
    )
    assert transcript_v010(tasks)[2:] == [
        Entry.user("weather in Paris?"),
        Entry.tool("get_weather", {"city": "Paris"}, "requested"),
    ]
    assert load_status_v010(tasks) == "working"
    tasks[1]["status"]["state"] = "submitted"
    assert load_status_v010(tasks) == "submitted"


def test_v010_agent_tool_card_is_shown_after_the_tool_group() -> None:
    # groupToolCallMessages: agent-tool calls stay outside groups without closing them, so a sub-agent
    # call between two ordinary calls renders after the group of those calls.
    task = l_task(
        "task-1",
        "completed",
        [
            l_msg("m1", "user", l_text("check everything")),
            l_msg(
                "m2",
                "agent",
                l_call("c1", "get_pods", {}),
                l_call("c2", "kagent__NS__helm_agent", {"request": "list releases"}),
                l_call("c3", "get_services", {}),
            ),
            l_msg(
                "m3",
                "agent",
                l_response("c1", "get_pods", {"result": "3 pods"}),
                l_response("c2", "kagent__NS__helm_agent", {"result": "2 releases"}),
                l_response("c3", "get_services", {"result": "2 services"}),
            ),
            l_msg("m4", "agent", l_text("All good.")),
        ],
    )
    assert transcript_v010([task]) == [
        Entry.user("check everything"),
        Entry.tool("get_pods", {}, "completed", "3 pods"),
        Entry.tool("get_services", {}, "completed", "2 services"),
        Entry.tool("kagent__NS__helm_agent", {"request": "list releases"}, "completed", "2 releases", kind=AGENT_CALL),
        Entry.agent("All good.", author=FRIENDLY_APP),
    ]


def test_v010_file_chip_on_user_message() -> None:
    task = l_task(
        "task-1",
        "completed",
        [
            l_msg(
                "m1",
                "user",
                {"kind": "file", "file": {"name": "pods.yaml", "mimeType": "text/yaml", "bytes": "YQ=="}},
            )
        ],
    )
    assert transcript_v010([task]) == [Entry(kind=USER, text="", author="user", files=("pods.yaml",))]


# --------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------


def main_qa_tasks() -> list[dict[str, Any]]:
    return [
        v_task(
            "task-1",
            "TASK_STATE_COMPLETED",
            [
                v_msg("m1", "ROLE_USER", v_text("list pods"), tid="task-1"),
                v_msg("m2", "ROLE_AGENT", v_text("ignored: history agent text"), tid="task-1"),
            ],
            [v_artifact("a1", v_text("There are "), v_text("3 pods."))],
        ),
        v_task(
            "task-2",
            "TASK_STATE_COMPLETED",
            [v_msg("m3", "ROLE_USER", v_text("and services?"), tid="task-2")],
            [v_artifact("a2", v_text("There are 2 services."))],
        ),
    ]


def test_main_plain_qa() -> None:
    tasks = main_qa_tasks()
    assert transcript_main(tasks) == [
        Entry.user("list pods"),
        Entry.agent("There are 3 pods."),
        Entry.user("and services?"),
        Entry.agent("There are 2 services."),
    ]
    # The bubble is named after the artifact's app name when it has one.
    tasks[0]["artifacts"][0]["metadata"]["kagent_app_name"] = APP
    assert transcript_main(tasks)[1] == Entry.agent("There are 3 pods.", author=FRIENDLY_APP)


def main_tool_task(prefix: str = "adk") -> dict[str, Any]:
    return v_task(
        "task-1",
        "TASK_STATE_COMPLETED",
        [v_msg("m1", "ROLE_USER", v_text("weather in Paris?"))],
        [
            v_artifact(
                "a1",
                v_text("Let me check the current weather in Paris for you."),
                v_call("adk-call-1", "get_weather", {"city": "Paris", "unit": "celsius"}, prefix),
            ),
            v_artifact(
                "a2",
                v_response(
                    "adk-call-1",
                    "get_weather",
                    {"content": [{"type": "text", "text": "14°C, cloudy"}], "isError": False},
                    prefix,
                ),
            ),
            v_artifact("a3", v_text("It is 14°C and cloudy in Paris.")),
        ],
    )


@pytest.mark.parametrize("prefix", ["adk", "kagent"])
def test_main_tool_call_turn(prefix: str) -> None:
    assert transcript_main([main_tool_task(prefix)]) == [
        Entry.user("weather in Paris?"),
        # Unlike 0.10.x, main keeps the text that precedes the call in the same artifact.
        Entry.agent("Let me check the current weather in Paris for you."),
        Entry.tool("get_weather", {"city": "Paris", "unit": "celsius"}, "completed", "14°C, cloudy"),
        Entry.agent("It is 14°C and cloudy in Paris."),
    ]


def test_main_adk_prefix_wins_over_kagent_prefix() -> None:
    task = main_tool_task()
    task["artifacts"][1]["parts"][0]["metadata"] = {"adk_type": "function_response", "kagent_type": "function_call"}
    assert transcript_main([task])[2].status == "completed"


def test_main_untyped_data_and_thought_signature() -> None:
    task = v_task(
        "task-1",
        "TASK_STATE_FAILED",
        [v_msg("m1", "ROLE_USER", v_text("go"))],
        [v_artifact("a1", v_text("Result: "), v_data({"b": [1.5, 2.0], "a": None}), v_data({}))],
        status_message=v_msg(
            "s1", "ROLE_AGENT", v_text("Model error: "), v_data({"thoughtSignature": "abc"}), v_data({"code": 429})
        ),
    )
    assert transcript_main([task]) == [
        Entry.user("go"),
        Entry.agent('Result: {"a":null,"b":[1.5,2]}'),
        # The status message of a failed task is shown after the artifacts.
        Entry.agent('Model error: {"code":429}'),
    ]
    assert load_status_main([task]) == "ready"


def main_approval_task(state: str, approved: bool | None, result: str | None) -> dict[str, Any]:
    history = [v_msg("m1", "ROLE_USER", v_text("delete pod x"))]
    artifacts = [
        v_artifact("a1", v_call("call_del", "delete_pod", {"pod": "x"})),
        v_artifact(
            "a2", v_response("call_del", "delete_pod", {"status": "confirmation_requested", "tool": "delete_pod"})
        ),
    ]
    status_message = None
    request = v_msg("c1", "ROLE_AGENT", v_text(HINT), hitl=APPROVAL_REQUEST)
    if approved is None:
        status_message = request
    else:
        history.append(request)
        history.append(v_msg("d1", "ROLE_USER", v_text("Approved"), hitl=approval_response(approved)))
        artifacts.append(v_artifact("a3", v_response("call_del", "delete_pod", {"result": result})))
        artifacts.append(v_artifact("a4", v_text("Done.")))
    return v_task("task-1", state, history, artifacts, status_message=status_message)


def test_main_approval_pending_then_approved() -> None:
    pending = main_approval_task("TASK_STATE_INPUT_REQUIRED", None, None)
    assert transcript_main([pending]) == [
        Entry.user("delete pod x"),
        Entry.tool("delete_pod", {"pod": "x"}, "pending_approval"),
    ]
    assert load_status_main([pending]) == "input_required"

    done = main_approval_task("TASK_STATE_COMPLETED", True, "pod x deleted")
    assert transcript_main([done]) == [
        Entry.user("delete pod x"),
        # The resolved HITL card replaces the artifact's function call; the decision message is hidden.
        Entry.tool("delete_pod", {"pod": "x"}, "approved", "pod x deleted"),
        Entry.agent("Done."),
    ]
    assert load_status_main([done]) == "ready"


def test_main_approval_rejected() -> None:
    done = main_approval_task("TASK_STATE_COMPLETED", False, "Tool call was rejected by user.")
    assert transcript_main([done])[1] == Entry.tool(
        "delete_pod", {"pod": "x"}, "rejected", "Tool call was rejected by user."
    )


def test_main_ask_user_pending_and_not_rebuilt_once_answered() -> None:
    questions = [{"question": "Which namespace?", "choices": ["default", "prod"]}]
    ask = {"type": "ask_user_request", "id": "adk-confirm-2", "questions": questions}
    request = v_msg("c1", "ROLE_AGENT", v_text("Human input is required."), hitl=ask)
    artifacts = [v_artifact("a1", v_call("call_ask", "ask_user", {"questions": questions}))]
    pending = v_task(
        "task-1",
        "TASK_STATE_INPUT_REQUIRED",
        [v_msg("m1", "ROLE_USER", v_text("clean up"))],
        artifacts,
        status_message=request,
    )
    assert transcript_main([pending]) == [Entry.user("clean up"), Entry.ask_user(questions)]

    answer = {"type": "ask_user_response", "id": "adk-confirm-2", "answers": [{"answer": ["prod"]}]}
    done = v_task(
        "task-1",
        "TASK_STATE_COMPLETED",
        [
            v_msg("m1", "ROLE_USER", v_text("clean up")),
            request,
            v_msg("d1", "ROLE_USER", v_text("Answered questions"), hitl=answer),
        ],
        [*artifacts, v_artifact("a2", v_text("Cleaning prod."))],
    )
    # main indexes historical HITL by tool call id only, which an ask_user request has none of:
    # after reload the answered card is gone (and the ask_user call itself is never a card).
    assert transcript_main([done]) == [Entry.user("clean up"), Entry.agent("Cleaning prod.")]


def test_main_running_last_task() -> None:
    tasks = main_qa_tasks()[:1]
    tasks.append(
        v_task(
            "task-2",
            "TASK_STATE_WORKING",
            [v_msg("m3", "ROLE_USER", v_text("weather in Paris?"), tid="task-2")],
            [v_artifact("a2", v_call("adk-call-1", "get_weather", {"city": "Paris"}))],
        )
    )
    assert transcript_main(tasks)[2:] == [
        Entry.user("weather in Paris?"),
        Entry.tool("get_weather", {"city": "Paris"}, "requested"),
    ]
    assert load_status_main(tasks) == "working"
    tasks.append(v_task("task-3", "TASK_STATE_SUBMITTED", [v_msg("m4", "ROLE_USER", v_text("?"), tid="task-3")]))
    assert load_status_main(tasks) == "submitted"
    assert transcript_main(tasks)[-1] == Entry.user("?")


def test_main_dedupes_message_ids_across_tasks() -> None:
    tasks = main_qa_tasks()
    tasks[1]["history"].insert(0, copy.deepcopy(tasks[0]["history"][0]))
    assert [e.kind for e in transcript_main(tasks)] == [USER, AGENT, USER, AGENT]


# --------------------------------------------------------------------------------------------------
# properties the fork tests rely on
# --------------------------------------------------------------------------------------------------


def rewrite_ids(tasks: list[dict[str, Any]], mapping: dict[str, str]) -> list[dict[str, Any]]:
    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            return mapping.get(value, value)
        return value

    return walk(tasks)


@pytest.mark.parametrize(
    ("transcript", "tasks"),
    [
        (
            transcript_v010,
            [
                *v010_qa_tasks(),
                l_task("task-3", "completed", v010_approval_history({"decision_type": "approve"}, "pod x deleted")),
            ],
        ),
        (transcript_main, [*main_qa_tasks(), main_approval_task("TASK_STATE_COMPLETED", True, "pod x deleted")]),
    ],
)
def test_volatile_ids_do_not_matter_and_prefixes_are_prefixes(transcript: Any, tasks: list[dict[str, Any]]) -> None:
    ids = {CTX: "ctx-fork", "task-1": "task-f1", "task-2": "task-f2", "task-3": "task-f3"}
    ids |= {f"m{i}": f"fork-m{i}" for i in range(1, 8)}
    ids |= {"c1": "fork-c1", "d1": "fork-d1"}
    full = transcript(tasks)
    assert transcript(rewrite_ids(tasks, ids)) == full
    assert transcript(tasks[:1]) == full[:2]
    assert transcript(tasks[:2]) == full[:4]
    assert transcript(tasks[:2]) != full


def test_js_stringify_matches_javascript() -> None:
    assert js_stringify({"b": 1, "10": 2, "2": [1.0, 1e-5, 1e-7, 1e21, 0.1, "é\n", True, None]}) == (
        '{"2":[1,0.00001,1e-7,1e+21,0.1,"é\\n",true,null],"10":2,"b":1}'
    )
    assert js_stringify(2**60) == "1152921504606846976"
    assert js_stringify([]) == "[]"
    assert Entry.tool("t", None, "requested").args == "{}"
    assert Entry(kind=TOOL, call_id="a") == Entry(kind=TOOL, call_id="b")
