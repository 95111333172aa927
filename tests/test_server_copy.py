"""Large per_task forks copy their tasks inside PostgreSQL (ids replaced as text) while a second
connection checks each row against the Python rewrite; whatever the check refuses is rewritten by
the service. Both ways must write the same fork."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest
from prometheus_client import REGISTRY

from service import services
from service.config import Settings
from service.errors import Unprocessable
from service.identity import Caller
from service.kagent.store import Store
from service.operations import copying, forking
from service.schemas import ForkedSession, ForkPlan, ForkRequest
from tests.helpers import new_user, seed, table_fingerprint
from tests.support.conversations import Conversation, build_conversation, create_share, insert_conversation


@pytest.fixture
async def roomy(settings: Settings, database_url: str) -> AsyncIterator[services.Services]:
    """Services whose pool always has a second connection at hand (the reader)."""
    pool = await asyncpg.create_pool(database_url, min_size=2, max_size=4)
    try:
        yield services.Services(settings=settings, store=Store(settings.service_schema), pool=pool)
    finally:
        await pool.close()


def copies(path: str) -> float:
    return REGISTRY.get_sample_value("kagent_fork_task_copies_total", {"path": path}) or 0.0


async def fork_via(
    svc: services.Services,
    monkeypatch: pytest.MonkeyPatch,
    conv: Conversation,
    *,
    server: bool,
    turn: int | None = -1,
    source: str | None = None,
    **req: Any,
) -> tuple[str, str]:
    """Fork the conversation (or `source`, a fork of it) before one of its turns (the last by default;
    None: the whole conversation), as a large fork (second connection, server copy tried) or not; the
    new session id and the path the tasks took."""
    monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0 if server else 10**9)
    before = {path: copies(path) for path in ("map", "server", "python", "streamed")}
    boundary = conv.turns[turn].invocation_id if turn is not None else None
    request = ForkRequest(rewind_before_invocation_id=boundary, **req)
    outcome = await forking.fork(svc, Caller(user_id=conv.user_id), source or conv.session_id, request)
    assert outcome.created and outcome.session_id is not None
    taken = [path for path, count in before.items() if copies(path) == count + 1]
    return outcome.session_id, taken[0] if taken else "none"


async def task_rows(pool: asyncpg.Pool, session_id: str) -> list[dict[str, Any]]:
    """The fork's task rows as values, each task's own new id replaced by a marker wherever it appears."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, created_at, updated_at, data, protocol_version, user_id, session_id FROM task "
            "WHERE session_id = $1 AND deleted_at IS NULL ORDER BY created_at",
            session_id,
        )
    out = []
    for row in rows:
        assert json.loads(row["data"])["id"] == row["id"]
        marks = {row["id"]: "<own id>", session_id: "<fork>"}
        data = _replace_strings(json.loads(row["data"]), marks)
        out.append({**dict(row), "id": None, "session_id": None, "data": data})
    return out


def _replace_strings(value: Any, marks: dict[str, str]) -> Any:
    if isinstance(value, str):
        return marks.get(value, value)
    if isinstance(value, list):
        return [_replace_strings(v, marks) for v in value]
    if isinstance(value, dict):
        return {k: _replace_strings(v, marks) for k, v in value.items()}
    return value


async def same_fork_both_ways(
    svc: services.Services,
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    conv: Conversation,
    *,
    kept: int | None = None,
    **req: Any,
) -> tuple[str, list[dict[str, Any]]]:
    """Fork twice, as a large fork and as a small one; the path the first took and its task rows
    (equal to the second's but for the fork's ids and updated_at). Both hold the same events."""
    server_id, path = await fork_via(svc, monkeypatch, conv, server=True, **req)
    python_id, _ = await fork_via(svc, monkeypatch, conv, server=False, **req)
    on_server, in_python = await task_rows(pool, server_id), await task_rows(pool, python_id)
    for row in on_server + in_python:
        row.pop("updated_at")
    assert on_server == in_python
    assert len(on_server) == (len(conv.turns) - 1 if kept is None else kept)
    assert await event_rows(pool, server_id) == await event_rows(pool, python_id)
    # what each left behind is told the same way, whichever way (and cut: guessed or exact) it took
    async with pool.acquire() as conn:
        summaries = await conn.fetch(
            "SELECT summary::text FROM kagent_fork.fork WHERE session_id = ANY($1::text[])", [server_id, python_id]
        )
    assert len({r[0] for r in summaries}) == 1 and len(summaries) == 2
    return path, on_server


async def event_rows(pool: asyncpg.Pool, session_id: str) -> list[tuple[Any, ...]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT created_at, data, user_id FROM event WHERE session_id = $1 ORDER BY created_at", session_id
        )
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("dialect", ["v1", "legacy"])
@pytest.mark.parametrize("metadata_style", ["sample", "kagent"])
async def test_the_server_copy_writes_what_the_python_rewrite_writes(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, dialect: str, metadata_style: str
) -> None:
    conv = await seed(pool, dialect=dialect, turns=6, tool_calls=True, metadata_style=metadata_style)
    path, rows = await same_fork_both_ways(roomy, pool, monkeypatch, conv, task_layout="per_task")
    assert path == "server"
    source = conv.task_data()
    for row, original in zip(rows, source, strict=False):
        assert row["data"]["contextId"] == "<fork>" and row["data"]["id"] == "<own id>"
        assert len(row["data"].get("history", [])) == len(original.get("history", []))
        assert conv.session_id not in json.dumps(row["data"])  # nothing points at the source any more


def _oddity(name: str, conv: Conversation) -> None:
    """Give the conversation's second task something the text replacement would get wrong."""
    task = conv.tasks[1]
    data = json.loads(task.data)
    if name == "a message text that is the session id":
        data["history"][0]["parts"] = [{"text": conv.session_id}]
        text = json.dumps(data)
    elif name == "a message of another task":
        data["history"][0]["taskId"] = "another-task"
        text = json.dumps(data)
    elif name == "its id written with escapes":
        compact = json.dumps(data, separators=(",", ":"))
        escaped = "".join(f"\\u{ord(c):04x}" for c in task.id)
        text = compact.replace(f'"id":"{task.id}"', f'"id":"{escaped}"', 1)
        assert text != compact and json.loads(text) == data
    elif name == "an unfinished task":
        data["status"]["state"] = "TASK_STATE_WORKING"
        text = json.dumps(data)
    else:
        raise AssertionError(name)
    conv.tasks[1] = task._replace(data=text)


ODDITIES = [
    "a message text that is the session id",
    "a message of another task",
    "its id written with escapes",
    "an unfinished task",
]


@pytest.mark.parametrize("oddity", ODDITIES)
async def test_tasks_the_text_replacement_would_get_wrong_are_rewritten_by_the_service(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, oddity: str
) -> None:
    conv = build_conversation(dialect="v1", turns=5, tool_calls=True, user_id=new_user())
    _oddity(oddity, conv)
    async with pool.acquire() as conn:
        await insert_conversation(conn, conv, schema_version_ok=False)
    path, rows = await same_fork_both_ways(roomy, pool, monkeypatch, conv)
    assert path == "python"  # tried on the server, refused by the check, undone, done in Python
    odd = rows[1]["data"]
    if oddity == "a message text that is the session id":
        assert odd["history"][0]["parts"] == [{"text": conv.session_id}]
    elif oddity == "a message of another task":
        assert odd["history"][0]["taskId"] == "<own id>"
    elif oddity == "an unfinished task":
        assert odd["status"]["state"] == "TASK_STATE_CANCELED"
    assert odd["id"] == "<own id>"


async def test_a_task_that_is_not_json_refuses_the_fork_and_writes_nothing(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = await seed(pool, dialect="v1", turns=5, tool_calls=True)
    async with pool.acquire() as conn:
        await conn.execute("UPDATE task SET data = '{\"id\": broken' WHERE id = $1", conv.tasks[2].id)
    before = await table_fingerprint(pool)
    with pytest.raises(Unprocessable, match="cannot be copied"):
        await fork_via(roomy, monkeypatch, conv, server=True)
    assert await table_fingerprint(pool) == before


async def test_another_users_fork_is_rewritten_by_the_service(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share visitor's fork names the visitor in *_user_id metadata: more than ids to replace."""
    conv = await seed(pool, dialect="v1", turns=5, tool_calls=True)
    async with pool.acquire() as conn:
        token = f"t-{conv.session_id}"
        await conn.execute(
            "INSERT INTO session_share (token, session_id, user_id, read_only) VALUES ($1, $2, $3, true)",
            token,
            conv.session_id,
            conv.user_id,
        )
    monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0)
    before = copies("streamed")
    request = ForkRequest(rewind_before_invocation_id=conv.turns[-1].invocation_id)
    visitor = Caller(user_id="visitor@example.com", share_token=token)
    outcome = await forking.fork(roomy, visitor, conv.session_id, request)
    assert outcome.session_id is not None and copies("streamed") == before + 1
    rows = await task_rows(pool, outcome.session_id)
    assert {r["user_id"] for r in rows} == {"visitor@example.com"}


async def test_a_wrong_guess_of_the_boundary_task_is_undone_and_the_fork_cut_exactly(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A large fork guesses its boundary task among the newest tasks; here an older task carries the
    boundary invocation too (as a merged task would), so the guess is wrong: undone, cut exactly."""
    conv = build_conversation(dialect="v1", turns=10, tool_calls=True, user_id=new_user())
    older = json.loads(conv.tasks[1].data)  # older than the 8 newest tasks: only the check can see it
    older.setdefault("metadata", {})["adk_invocation_id"] = conv.turns[-1].invocation_id
    conv.tasks[1] = conv.tasks[1]._replace(data=json.dumps(older))
    async with pool.acquire() as conn:
        await insert_conversation(conn, conv, schema_version_ok=False)
    with caplog.at_level(logging.INFO, logger="kagent_fork"):
        path, _ = await same_fork_both_ways(roomy, pool, monkeypatch, conv, kept=1)
    assert "guessed from the last turns" in caplog.text
    assert path == "server"  # the exact cut, copied inside PostgreSQL


@pytest.mark.parametrize("turn", [1, 5, 9])
async def test_a_boundary_anywhere_in_a_large_fork_gives_the_small_forks_cut(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, turn: int
) -> None:
    """Turns 1 and 5 are older than the newest tasks (no guess), turn 9 is among them (guessed)."""
    conv = await seed(pool, dialect="v1", turns=12, tool_calls=True)
    path, _ = await same_fork_both_ways(roomy, pool, monkeypatch, conv, kept=turn, turn=turn)
    assert path == "server"


async def test_a_large_legacy_fork_merges_its_tasks_in_python(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a guess: only the server copy of per_task tasks proves one, so a guess for a merged fork
    would always be undone (bench/pieces.py measured 360 ms lost at 100,000 events)."""
    conv = await seed(pool, dialect="legacy", turns=10, tool_calls=True)
    guesses = 0
    guess = forking._guess_cut  # pyright: ignore[reportPrivateUsage]

    async def counted(*args: Any) -> Any:
        nonlocal guesses
        guesses += 1
        return await guess(*args)

    monkeypatch.setattr(forking, "_guess_cut", counted)
    path, rows = await same_fork_both_ways(roomy, pool, monkeypatch, conv, kept=1)
    assert path == "streamed" and len(rows[0]["data"]["history"]) > 9
    assert guesses == 0
    # A per_task fork of the same legacy session may guess: the server copy proves it.
    path, _ = await same_fork_both_ways(roomy, pool, monkeypatch, conv, task_layout="per_task")
    assert path == "server" and guesses == 1


@pytest.mark.parametrize("last_turn", ["running_last_turn", "awaiting_approval_last_turn"])
@pytest.mark.parametrize("turn", [None, 3], ids=["whole", "before-turn-3"])
async def test_a_large_fork_leaves_a_running_last_turn_out_as_a_small_one_does(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, last_turn: str, turn: int | None
) -> None:
    conv = await seed(pool, dialect="v1", turns=6, tool_calls=True, **{last_turn: True})
    path, rows = await same_fork_both_ways(roomy, pool, monkeypatch, conv, kept=5 if turn is None else 3, turn=turn)
    assert path == "server"
    assert {row["data"]["status"]["state"] for row in rows} == {"TASK_STATE_COMPLETED"}


async def test_a_large_per_task_fork_of_a_merged_fork_cuts_the_merged_task_as_a_small_one_does(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork of a legacy session holds one merged task of all its turns; a fork of that fork before a
    middle turn cuts inside the merged task (in Python) after the server copy of the tasks before it."""
    conv = await seed(pool, dialect="legacy", turns=6, tool_calls=True)
    merged, _ = await fork_via(roomy, monkeypatch, conv, server=False, turn=None)
    path, rows = await same_fork_both_ways(
        roomy, pool, monkeypatch, conv, kept=1, turn=3, source=merged, task_layout="per_task"
    )
    assert path == "server"
    # turns 0-2 of the merged task (whose history is de-duplicated by messageId), cut before turn 3
    kept = dict.fromkeys(m["messageId"] for t in conv.tasks[:3] for m in json.loads(t.data)["history"])
    assert [m["messageId"] for m in rows[0]["data"]["history"]] == list(kept)


async def test_a_reader_slow_to_reset_does_not_fail_the_fork(
    settings: Settings, database_url: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg applies an acquire's timeout to the release's reset too; the reader is acquired with
    50 ms, so a reset slower than that (a busy server) used to fail the finished fork with a 503."""

    async def slow_reset(conn: asyncpg.Connection) -> None:
        await conn.reset()
        await asyncio.sleep(0.2)

    slow = await asyncpg.create_pool(database_url, min_size=2, max_size=4, reset=slow_reset)
    try:
        svc = services.Services(settings=settings, store=Store(settings.service_schema), pool=slow)
        conv = await seed(pool, dialect="v1", turns=6, tool_calls=True)
        new_id, path = await fork_via(svc, monkeypatch, conv, server=True)
        assert path == "server"
        assert len(await task_rows(pool, new_id)) == 5
        assert slow.get_idle_size() == slow.get_size()  # both connections back in the pool
    finally:
        await slow.close()


async def test_a_visitors_large_legacy_fork_streams_a_row_whose_text_needs_escaping(
    roomy: services.Services, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merged task of a large fork is written as COPY text while it is made: a caller id with a tab
    and a backslash (an X-User-Id may hold both) and JSON full of backslashes must arrive as they were."""
    conv = await seed(pool, dialect="legacy", turns=6, tool_calls=True)
    async with pool.acquire() as conn:
        token = await create_share(conn, session_id=conv.session_id, owner=conv.user_id, read_only=True)
    visitor = "DOMAIN\\\\jane\tdoe"
    request = ForkRequest(rewind_before_invocation_id=conv.turns[-1].invocation_id)
    made = []
    for large in (True, False):
        monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0 if large else 10**9)
        outcome = await forking.fork(roomy, Caller(user_id=visitor, share_token=token), conv.session_id, request)
        assert outcome.session_id is not None
        made.append([{**row, "updated_at": None} for row in await task_rows(pool, outcome.session_id)])
    assert made[0] == made[1] and len(made[0]) == 1
    (row,) = made[0]
    assert row["user_id"] == visitor and row["protocol_version"] is None
    assert {m.get("metadata", {}).get("kagent_user_id") for m in row["data"]["history"]} <= {visitor, None}


@pytest.mark.parametrize("large", [True, False])
@pytest.mark.parametrize(
    ("dialect", "layout", "task_ids"),
    [("legacy", "auto", "uuid4"), ("legacy", "per_task", "other_lengths"), ("v1", "auto", "other_lengths")],
)
async def test_a_dry_run_counts_the_bytes_the_fork_writes(
    roomy: services.Services,
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    large: bool,
    dialect: str,
    layout: str,
    task_ids: str,
) -> None:
    """The dry run measures copies made with placeholder ids (TaskCopier.dry_run): the same figures as the
    fork's own copies, whatever the length of the source's task ids."""
    conv = await seed(pool, dialect=dialect, turns=6, tool_calls=True, metadata_style="kagent")
    if task_ids == "other_lengths":  # 5, 10, 15... characters: each id replaced wherever the task's text holds it
        async with pool.acquire() as conn:
            await conn.execute(
                "UPDATE task SET id = n.id, data = replace(data, '\"' || task.id || '\"', '\"' || n.id || '\"')"
                " FROM (SELECT id AS old, left(md5(id), 5 * row_number() OVER (ORDER BY created_at)::int) AS id"
                " FROM task WHERE session_id = $1) AS n WHERE task.session_id = $1 AND task.id = n.old",
                conv.session_id,
            )
    monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0 if large else 10**9)
    boundary = conv.turns[4].invocation_id
    caller = Caller(user_id=conv.user_id)
    request = ForkRequest(rewind_before_invocation_id=boundary, task_layout=layout)
    planned = await forking.fork(roomy, caller, conv.session_id, msgspec.structs.replace(request, dry_run=True))
    made = await forking.fork(roomy, caller, conv.session_id, request)
    assert made.session_id is not None and isinstance(planned.data, ForkPlan) and isinstance(made.data, ForkedSession)
    async with pool.acquire() as conn:
        written = await conn.fetchval(
            "SELECT (SELECT sum(octet_length(data)) FROM event WHERE session_id = $1)"
            " + (SELECT sum(octet_length(data)) FROM task WHERE session_id = $1)",
            made.session_id,
        )
    assert planned.data.bytes_to_copy == written
    fork = made.data.fork
    assert (planned.data.tasks_copied, planned.data.messages_copied) == (fork.tasks_copied, fork.messages_copied)
    assert (planned.data.task_layout, planned.data.warnings) == (fork.task_layout, fork.warnings)
