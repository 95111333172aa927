"""dialects.replacing_ids_rewrites, the check that lets PostgreSQL copy a task by replacing its ids as
text, against its definition: the replaced text decodes to what dialects.rewrite makes. The check must
never say yes where the definition says no (or the server copy would write a wrong task), and must say
yes for the tasks kagent really writes (or the server copy would never be used)."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from service.kagent import dialects
from tests.conftest import SAMPLES
from tests.support.conversations import build_conversation

USER = "admin@kagent.dev"
Task = dict[str, Any]


def quoted_ids_replaced(text: str, ids: list[tuple[str, str]]) -> str:
    """What copy_tasks_before (sql/queries/events.sql) does to a task's text: each old id, as a whole JSON
    string "<old>", replaced by "<new>", pair by pair (PostgreSQL's replace() and Python's agree)."""
    for old, new in ids:
        text = text.replace(f'"{old}"', f'"{new}"')
    return text


def definition(text: str, task_id: str, context_id: str, user: str = USER) -> bool:
    """What the check stands for, computed the slow way (decode the replaced text and compare)."""
    new_task, new_context = str(uuid.uuid4()), str(uuid.uuid4())
    replaced = quoted_ids_replaced(text, [(task_id, new_task), (context_id, new_context)])
    try:
        got = dialects.decode(replaced)
    except dialects.TaskFormatError:
        return False
    rw = dialects.Rewrite(task_id=new_task, context_id=new_context, user_id=user)
    return got == dialects.rewrite(dialects.decode(text), rw)


def check(text: str, task_id: str, context_id: str, user: str = USER) -> bool:
    return dialects.replacing_ids_rewrites(
        text, dialects.decode(text), task_id=task_id, context_id=context_id, user_id=user
    )


def real_tasks() -> list[tuple[str, str, str, str]]:
    """(text, task id, session id, owner) of tasks as kagent writes them: the samples (whose metadata
    names their user) and built conversations."""
    out = []
    for name in ("a2a_task.json", "a2a_task_v0_3.json"):
        data = json.loads((SAMPLES / name).read_text())
        users = dialects.rewrite_targets(data).user_ids if dialects.rewrite_targets(data) else []
        owner = str(users[0]) if users else USER
        out.append((json.dumps(data), data["id"], data["contextId"], owner))
    for dialect in ("v1", "legacy"):
        for style in ("sample", "kagent"):
            conv = build_conversation(dialect=dialect, turns=3, tool_calls=True, metadata_style=style, user_id=USER)
            out += [(t.data, t.id, conv.session_id, USER) for t in conv.tasks]
    return out


def _first_history_message(task: Task) -> Task:
    history = task.setdefault("history", [])
    if not history:
        history.append({"messageId": "m", "role": "user", "parts": []})
    message: Task = history[0]
    return message


def _escape(text: str, value: str, skip: int) -> str:
    """The text with the n-th (skip) token "value" written with one character escaped."""
    token = f'"{value}"'
    at = -1
    for _ in range(skip + 1):
        at = text.find(token, at + 1)
        if at < 0:
            return text
    escaped = f'"\\u{ord(value[0]):04x}{value[1:]}"'
    return text[:at] + escaped + text[at + len(token) :]


def _mutations(tid: str, sid: str) -> dict[str, Callable[[str], str]]:
    def on_value(fn: Callable[[Task], None]) -> Callable[[str], str]:
        def apply(text: str) -> str:
            task = json.loads(text)
            fn(task)
            return json.dumps(task)

        return apply

    return {
        "none": lambda text: text,
        "indented": lambda text: json.dumps(json.loads(text), indent=2),
        "go html escapes": on_value(lambda t: _first_history_message(t).update(parts=[{"text": "<none> & <x>"}])),
        "text is the session id": on_value(lambda t: _first_history_message(t).update(parts=[{"text": sid}])),
        "text is the task id": on_value(lambda t: _first_history_message(t).update(parts=[{"text": tid}])),
        "text ends with a quoted id": on_value(
            lambda t: _first_history_message(t).update(parts=[{"text": f'x "{sid}'}])
        ),
        "key is the task id": on_value(lambda t: t.setdefault("metadata", {}).update({tid: 1})),
        "message of another task": on_value(lambda t: _first_history_message(t).update(taskId="other")),
        "message of another context": on_value(lambda t: _first_history_message(t).update(contextId="other")),
        "metadata of another session": on_value(lambda t: t.setdefault("metadata", {}).update(adk_session_id="x")),
        "metadata of another user": on_value(lambda t: t.setdefault("metadata", {}).update(kagent_user_id="x")),
        "history entry not an object": on_value(lambda t: t.setdefault("history", []).append(5)),
        "artifact not an object": on_value(lambda t: t.setdefault("artifacts", []).append("x")),
        "no contextId": on_value(lambda t: t.pop("contextId")),
        "no id": on_value(lambda t: t.pop("id")),
        "escaped task id": lambda text: _escape(text, tid, 0),
        "escaped session id": lambda text: _escape(text, sid, 0),
        "escaped task id and the id as a text": lambda text: _escape(
            json.dumps({**json.loads(text), "note": tid}), tid, 0
        ),
    }


EXPECTED_YES = {"none", "indented", "go html escapes"}


@pytest.mark.parametrize("index", range(len(real_tasks())))
def test_the_check_says_yes_only_where_the_replacement_is_the_rewrite(index: int) -> None:
    text, tid, sid, owner = real_tasks()[index]
    for name, mutate in _mutations(tid, sid).items():
        mutated = mutate(text)
        said, truth = check(mutated, tid, sid, owner), definition(mutated, tid, sid, owner)
        assert not (said and not truth), f"{name}: the check accepts a task the replacement would get wrong"
        if name in EXPECTED_YES:
            assert said and truth, f"{name}: a task kagent writes is refused"


def test_ids_that_json_may_escape_or_that_are_equal_are_refused() -> None:
    text, tid, sid, _ = real_tasks()[2]
    weird = "a/b"  # "/" may be written as "\/"
    assert not check(text.replace(sid, weird), tid, weird)
    assert not check(text.replace(sid, tid), tid, tid)


def test_random_single_mutations_never_fool_the_check() -> None:
    rng = random.Random(7)
    corpus = real_tasks()
    for _ in range(300):
        text, tid, sid, owner = rng.choice(corpus)
        task = json.loads(text)
        strings = [tid, sid, owner, "other", f'"{sid}', f"{tid}\\"]
        # put one of those strings at a random place of a random message, artifact or metadata
        holders = [task, *[m for m in task.get("history", []) if isinstance(m, dict)], *task.get("artifacts", [])]
        holder = rng.choice(holders)
        key = rng.choice(["taskId", "contextId", "id", "metadata", "parts", "note"])
        value = rng.choice(strings)
        holder[key] = {"adk_session_id": value} if key == "metadata" else value
        mutated = json.dumps(task, separators=(",", ":") if rng.random() < 0.5 else None)
        if check(mutated, tid, sid, owner):
            assert definition(mutated, tid, sid, owner), (key, value)


# Every metadata key dialects.rewrite overwrites (_rewrite_metadata), spelled out here on purpose: the
# check passes by metadata holding none of its own list of them, so a key missing from that list must
# show up as a failure here.
REWRITTEN_METADATA_KEYS = (
    "adk_session_id", "kagent_session_id", "adk_user_id", "kagent_user_id",
    "session_id", "thread_id", "kagent_thread_id",
)  # fmt: skip


@pytest.mark.parametrize("key", REWRITTEN_METADATA_KEYS)
def test_each_rewritten_metadata_key_on_any_holder_is_checked(key: str) -> None:
    text, tid, sid, owner = real_tasks()[2]
    task = json.loads(text)
    holders = [task, *task.get("history", []), *task.get("artifacts", [])]
    assert len(holders) > 2  # the task, its messages and its artifacts
    for holder in holders:
        for value in ("other", sid, owner):
            mutated = json.loads(text)
            at = [mutated, *mutated.get("history", []), *mutated.get("artifacts", [])][holders.index(holder)]
            at["metadata"] = {**(at.get("metadata") or {}), key: value}
            changed = json.dumps(mutated)
            assert check(changed, tid, sid, owner) == definition(changed, tid, sid, owner), (key, value)
