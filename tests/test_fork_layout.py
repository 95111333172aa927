"""The layout `auto` chooses shows what the source shows in kagent's UI, human-in-the-loop turns included.

kagent 0.10.x's UI pairs a tool confirmation with the first user decision after it in the same task's
history, so merging a task whose confirmation was never answered with a later turn's answered one
would show an approval nobody gave (issue 15). Every fork here is read back as kagent reads it and
rendered by the port of kagent's UI (tests/support/ui_transcript.py) on its product line.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import asyncpg
import pytest

from service.kagent.store.tasks import TaskRow
from service.operations import plan
from tests.helpers import seed
from tests.support.conversations import Conversation, build_conversation
from tests.support.ui_transcript import AGENT_CALL, ASK_USER, TOOL, transcript_main, transcript_v010
from tests.test_fork_api import fork, kagent_view


def transcript(dialect: str, tasks: list[dict[str, Any]]) -> Any:
    return transcript_v010(tasks) if dialect == "legacy" else transcript_main(tasks)


async def forked(
    client: Any, pool: asyncpg.Pool, conv: Conversation, body: dict[str, Any]
) -> tuple[dict[str, Any], list[Any]]:
    r = await fork(client, conv, body)
    assert r.status_code == 201, r.text
    data = r.json()["data"]
    view = await kagent_view(pool, data["id"], conv.user_id, conv.dialect)
    return data["fork"], [json.loads(t["data"]) for t in view["tasks"]]


# Sessions whose kept turns hold human-in-the-loop requests: (shapes, turns, whether the port shows the
# merge's difference: a batch decision names its own calls, so the borrowed one resolves nothing the
# port renders; the rule does not depend on it).
UNSAFE = {
    "unanswered_then_approved": ({0: "unanswered", 1: "approved"}, 3, True),
    "unanswered_ask_user_then_ask_user": ({0: "unanswered_ask_user", 2: "ask_user"}, 3, True),
    "unanswered_then_batch": ({1: "unanswered", 2: "batch"}, 4, False),
}
SAFE = {
    "every_answered_form": ({0: "ask_user", 1: "batch", 2: "agent_tool", 3: "approved"}, 5),
    "unanswered_last_kept": ({0: "agent_tool", 1: "approved", 2: "unanswered"}, 3),
}


@pytest.mark.parametrize("case", list(UNSAFE))
async def test_legacy_unanswered_confirmation_is_never_merged_with_a_later_decision(
    client: Any, pool: asyncpg.Pool, case: str
) -> None:
    shapes, turns, visible = UNSAFE[case]
    conv = await seed(pool, dialect="legacy", turns=turns, tool_calls=True, shapes=shapes)
    source = transcript_v010(conv.task_data())
    info, copied = await forked(client, pool, conv, {})
    assert info["task_layout"] == "per_task" and info["tasks_copied"] == turns
    assert len(info["warnings"]) == 1 and "no decision after it" in info["warnings"][0]
    assert transcript_v010(copied) == source
    # What `auto` avoids: merged, the unanswered request borrows the later decision.
    info, merged = await forked(client, pool, conv, {"task_layout": "merged"})
    assert info["task_layout"] == "merged" and "otherwise than its source" in info["warnings"][0]
    shown = transcript_v010(merged)
    if not visible:
        return
    assert shown != source
    borrowed = [
        e for e in shown if e.kind in (TOOL, ASK_USER) and e.status in ("approved", "answered", "pending_approval")
    ]
    assert len(borrowed) > len([e for e in source if e in borrowed])


@pytest.mark.parametrize("case", list(SAFE))
async def test_legacy_answered_requests_and_agent_tools_merge_and_render_the_same(
    client: Any, pool: asyncpg.Pool, case: str
) -> None:
    shapes, turns = SAFE[case]
    conv = await seed(pool, dialect="legacy", turns=turns, shapes=shapes)
    source = transcript_v010(conv.task_data())
    info, copied = await forked(client, pool, conv, {})
    assert info["task_layout"] == "merged" and info["tasks_copied"] == 1 and info["warnings"] == []
    assert transcript_v010(copied) == source
    kinds = {e.kind for e in source}
    assert {TOOL, AGENT_CALL} <= kinds or TOOL in kinds
    calls = [e for e in source if e.kind == AGENT_CALL]
    assert all(e.subagent_session_id for e in calls), "the agent card links its sub-agent's session"


async def test_every_legacy_shape_forked_before_each_turn(client: Any, pool: asyncpg.Pool) -> None:
    """A prefix of each length: the fork renders as the source's first n turns, whatever layout `auto` took."""
    conv = await seed(
        pool, dialect="legacy", turns=6,
        shapes={0: "unanswered", 1: "ask_user", 2: "agent_tool", 3: "batch", 4: "unanswered_ask_user", 5: "approved"},
    )  # fmt: skip
    for n in range(1, 6):
        info, copied = await forked(client, pool, conv, {"rewind_before_invocation_id": conv.turns[n].invocation_id})
        assert transcript_v010(copied) == transcript_v010(conv.task_data()[:n]), n
        # A request left unanswered in a turn that is not the last kept one forces per_task.
        assert info["task_layout"] == ("per_task" if n >= 2 else "merged"), n


async def test_a_fork_of_a_merged_fork_stays_exact(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=4, shapes={1: "ask_user", 2: "approved"})
    first = (await fork(client, conv, {})).json()["data"]
    assert first["fork"]["task_layout"] == "merged"
    r = await fork(
        client,
        Conversation(**{**conv.__dict__, "session_id": first["id"]}),
        {"rewind_before_invocation_id": conv.turns[3].invocation_id},
    )
    assert r.status_code == 201, r.text
    view = await kagent_view(pool, r.json()["data"]["id"], conv.user_id, "legacy")
    copied = [json.loads(t["data"]) for t in view["tasks"]]
    assert transcript_v010(copied) == transcript_v010(conv.task_data()[:3])


@pytest.mark.parametrize(
    "shapes", [{0: "unanswered", 1: "approved"}, {1: "approved"}, {0: "agent_tool", 1: "unanswered", 2: "approved"}]
)
async def test_v1_forks_are_per_task_and_an_explicit_merge_says_how_main_shows_it(
    client: Any, pool: asyncpg.Pool, shapes: dict[int, Any]
) -> None:
    conv = await seed(pool, dialect="v1", turns=4, tool_calls=True, shapes=shapes)
    source = transcript_main(conv.task_data())
    info, copied = await forked(client, pool, conv, {})
    assert info["task_layout"] == "per_task" and info["warnings"] == []
    assert transcript_main(copied) == source
    for n in range(1, 4):
        info, prefix = await forked(client, pool, conv, {"rewind_before_invocation_id": conv.turns[n].invocation_id})
        assert transcript_main(prefix) == transcript_main(conv.task_data()[:n]), n
    calls = [e for e in source if e.kind == AGENT_CALL]
    assert len(calls) == list(shapes.values()).count("agent_tool")
    assert all(e.subagent_session_id for e in calls), "the agent card links its sub-agent's session"
    info, merged = await forked(client, pool, conv, {"task_layout": "merged"})
    assert info["task_layout"] == "merged" and info["warnings"] == [plan.V1_MERGED_WARNING]
    shown = transcript_main(merged)
    users = [i for i, e in enumerate(shown) if e.kind == "user"]
    assert users == list(range(len(users))), "every question first, as the warning says"


@pytest.mark.parametrize("pool_size", [1, 4], ids=["serial", "overlapped"])
@pytest.mark.parametrize(
    ("shapes", "layout"),
    [({0: "unanswered", 2: "approved"}, "per_task"), ({0: "ask_user", 1: "approved"}, "merged")],
    ids=["hazard", "safe"],
)
async def test_large_fork_path_takes_the_same_layout(
    settings: Any,
    database_url: str,
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    pool_size: int,
    shapes: dict[int, Any],
    layout: str,
) -> None:
    """Large forks (a second connection streams the merged task) decide the layout the same way."""
    from service.identity import Caller
    from service.kagent.store import Store
    from service.operations import copying, forking
    from service.schemas import ForkRequest

    monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0)
    conv = await seed(pool, dialect="legacy", turns=4, tool_calls=True, shapes=shapes)
    small = await asyncpg.create_pool(database_url, min_size=1, max_size=pool_size)
    try:
        svc = forking.Services(settings=settings, store=Store(settings.service_schema), pool=small)
        req = ForkRequest(rewind_before_invocation_id=conv.turns[3].invocation_id)
        outcome = await forking.fork(svc, Caller(user_id=conv.user_id), conv.session_id, req)
        assert outcome.created and outcome.session_id is not None
        assert small.get_size() == min(pool_size, 2), "the overlapped path checked on its reader"
    finally:
        await small.close()
    info = outcome.data.fork  # type: ignore[union-attr]
    assert info.task_layout == layout and len(info.warnings) == (layout == "per_task")
    view = await kagent_view(pool, outcome.session_id, conv.user_id, "legacy")
    assert len(view["tasks"]) == (3 if layout == "per_task" else 1)
    assert transcript_v010([json.loads(t["data"]) for t in view["tasks"]]) == transcript_v010(conv.task_data()[:3])


def _rows(conv: Conversation) -> list[TaskRow]:
    return [TaskRow(id=t.id, created_at=t.created_at, protocol_version=None, data=t.data) for t in conv.tasks]


def test_merge_hazard_rules() -> None:
    conv = build_conversation(dialect="legacy", turns=3, shapes={0: "unanswered", 1: "approved"})
    rows = _rows(conv)
    first, last = rows[0].id, rows[-1].id
    assert "no decision after it" in (plan.merge_hazard(rows, partial=None, first_id=first, last_id=last) or "")
    # The unanswered request in the last kept task has no later decision to borrow.
    assert plan.merge_hazard(rows[:1], partial=None, first_id=first, last_id=first) is None
    assert plan.merge_hazard(rows[1:], partial=None, first_id=rows[1].id, last_id=last) is None
    # Merged, the card of an answered request takes the token usage of the last agent message before it:
    # if its own task has none, an earlier turn's would show.
    data = json.loads(rows[1].data)
    for message in data["history"]:
        message.get("metadata", {}).pop("kagent_usage_metadata", None)
    stripped = dataclasses.replace(rows[1], data=json.dumps(data))
    assert "token usage" in (plan.merge_hazard([stripped], partial=None, first_id=first, last_id=last) or "")
    assert plan.merge_hazard([stripped], partial=None, first_id=stripped.id, last_id=last) is None
    assert plan.merge_verdict("auto", None) == ("merged", [])
    layout, warnings = plan.merge_verdict("auto", "x")
    assert layout == "per_task" and warnings[0].endswith(": x")
    assert plan.merge_verdict("merged", "x")[0] == "merged"
