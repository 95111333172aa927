"""Rewind, undo, the turn listing and lineage views, end to end on both product lines."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from service.identity import Caller
from service.operations.rewind import rewind
from service.schemas import RewindRequest
from service.services import Services
from tests.helpers import append_turns, digest, expected_summary, new_user, seed, session_rows, table_fingerprint
from tests.support import kagent_reads
from tests.support.conversations import create_share
from tests.support.ui_transcript import transcript_main, transcript_v010

LINES = ["legacy", "v1"]


def transcript(dialect: str, tasks: list[dict[str, Any]]) -> Any:
    return transcript_v010(tasks) if dialect == "legacy" else transcript_main(tasks)


async def post(client: Any, path: str, user: str, body: dict[str, Any] | None = None, **headers: str) -> Any:
    return await client.post(path, json=body or {}, headers={"X-User-Id": user, **headers})


async def kagent_sees(pool: asyncpg.Pool, session_id: str, user: str) -> tuple[list[str], list[dict[str, Any]]]:
    async with pool.acquire() as conn:
        events = await kagent_reads.list_events_for_session_asc(conn, session_id, user)
        tasks = await kagent_reads.list_tasks_for_session(conn, session_id, user)
    return [e["id"] for e in events], [json.loads(t["data"]) for t in tasks]


@pytest.mark.parametrize("dialect", LINES)
async def test_rewind_hides_the_turn_and_after_and_undo_restores_exactly(
    client: Any, pool: asyncpg.Pool, dialect: str
) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True, metadata_style="kagent")
    original = await session_rows(pool, conv.session_id, conv.user_id)
    boundary = conv.turns[2]
    path = f"/api/sessions/{conv.session_id}/rewind"

    dry = await post(
        client, path, conv.user_id, {"rewind_before_invocation_id": boundary.invocation_id, "dry_run": True}
    )
    assert dry.status_code == 200, dry.text
    hidden_events = [e for e in conv.events if e.created_at >= boundary.started_at]
    assert dry.json()["data"] == {
        "dry_run": True,
        "rewind": {"id": None, "rewind_before_invocation_id": boundary.invocation_id,
                   "rewind_before_task_id": None, "events_removed": len(hidden_events), "tasks_removed": 2,
                   "created_at": None,
                   "summary": expected_summary(conv, boundary.started_at)},
    }  # fmt: skip
    assert dry.json()["data"]["rewind"]["summary"]["turns"] == 2
    assert digest(await session_rows(pool, conv.session_id, conv.user_id)) == digest(original)

    r = await post(client, path, conv.user_id, {"rewind_before_invocation_id": boundary.invocation_id})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["rewind"]["events_removed"] == len(hidden_events) and data["rewind"]["tasks_removed"] == 2
    assert data["session"]["id"] == conv.session_id
    assert data["session"]["updated_at"] > original["events"][-1]["created_at"].isoformat()[:19]
    event_ids, tasks = await kagent_sees(pool, conv.session_id, conv.user_id)
    assert event_ids == [e.id for e in conv.events if e.created_at < boundary.started_at]
    assert transcript(dialect, tasks) == transcript(dialect, conv.task_data()[:2])
    async with pool.acquire() as conn:
        stamps = await conn.fetch(
            "SELECT DISTINCT deleted_at FROM event WHERE session_id = $1 AND deleted_at IS NOT NULL "
            "UNION SELECT DISTINCT deleted_at FROM task WHERE session_id = $1 AND deleted_at IS NOT NULL",
            conv.session_id,
        )
    assert len(stamps) == 1, "one deleted_at stamp for everything a rewind hides"

    undo = await post(client, f"/api/sessions/{conv.session_id}/rewinds/{data['rewind']['id']}/undo", conv.user_id)
    assert undo.status_code == 200, undo.text
    assert undo.json()["data"]["rewind"]["undone_at"]
    restored = await session_rows(pool, conv.session_id, conv.user_id)
    assert [e["id"] for e in restored["events"]] == [e["id"] for e in original["events"]]
    assert [(t["id"], t["data"]) for t in restored["tasks"]] == [(t["id"], t["data"]) for t in original["tasks"]]
    again = await post(client, f"/api/sessions/{conv.session_id}/rewinds/{data['rewind']['id']}/undo", conv.user_id)
    assert again.status_code == 409 and "already undone" in again.json()["error"]


async def test_rewind_inside_a_merged_task_replaces_it_and_undo_reverses_both(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=3, tool_calls=True, metadata_style="kagent")
    fork = (await post(client, f"/api/sessions/{conv.session_id}/fork", conv.user_id)).json()["data"]
    merged_before = await session_rows(pool, fork["id"], conv.user_id)
    assert len(merged_before["tasks"]) == 1
    r = await post(
        client, f"/api/sessions/{fork['id']}/rewind", conv.user_id,
        {"rewind_before_invocation_id": conv.turns[1].invocation_id},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["data"]["rewind"]["tasks_removed"] == 1
    _, tasks = await kagent_sees(pool, fork["id"], conv.user_id)
    assert len(tasks) == 1 and tasks[0]["id"] != merged_before["tasks"][0]["id"]
    assert transcript_v010(tasks) == transcript_v010(conv.task_data()[:1])
    undo = await post(
        client, f"/api/sessions/{fork['id']}/rewinds/{r.json()['data']['rewind']['id']}/undo", conv.user_id
    )
    assert undo.status_code == 200, undo.text
    after = await session_rows(pool, fork["id"], conv.user_id)
    assert [t["id"] for t in after["tasks"]] == [merged_before["tasks"][0]["id"]]
    assert len(after["events"]) == len(merged_before["events"])


async def test_rewind_refusals(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3, running_last_turn=True)
    path = f"/api/sessions/{conv.session_id}/rewind"
    before = await table_fingerprint(pool)
    assert (await post(client, path, conv.user_id, {})).status_code == 400
    missing = await post(client, path, conv.user_id, {"rewind_before_invocation_id": "e-nope"})
    assert missing.status_code == 404 and "e-nope" in missing.json()["error"]
    running = await post(client, path, conv.user_id, {"rewind_before_invocation_id": conv.turns[1].invocation_id})
    assert running.status_code == 409 and "force" in running.json()["error"]
    async with pool.acquire() as conn:
        read_only = await create_share(conn, session_id=conv.session_id, owner=conv.user_id, read_only=True)
        read_write = await create_share(conn, session_id=conv.session_id, owner=conv.user_id, read_only=False)
    visitor = new_user()
    body = {"rewind_before_invocation_id": conv.turns[1].invocation_id, "force": True}
    assert (await post(client, path, visitor, body, **{"X-Share-Token": read_only})).status_code == 403
    assert (await post(client, path, visitor, body)).status_code == 404
    assert await table_fingerprint(pool) == before
    # a read-write share may rewind; the rows stay the owner's
    r = await post(client, path, visitor, body, **{"X-Share-Token": read_write})
    assert r.status_code == 200, r.text
    assert r.json()["data"]["session"]["user_id"] == conv.user_id
    async with pool.acquire() as conn:
        by = await conn.fetchval(
            "SELECT requested_by FROM kagent_fork.rewind WHERE id = $1", r.json()["data"]["rewind"]["id"]
        )
    assert by == visitor


async def test_undo_refused_after_new_activity_or_out_of_order(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=4)
    path = f"/api/sessions/{conv.session_id}"
    first = (
        await post(client, f"{path}/rewind", conv.user_id, {"rewind_before_invocation_id": conv.turns[3].invocation_id})
    ).json()
    second = (
        await post(client, f"{path}/rewind", conv.user_id, {"rewind_before_invocation_id": conv.turns[2].invocation_id})
    ).json()
    out_of_order = await post(client, f"{path}/rewinds/{first['data']['rewind']['id']}/undo", conv.user_id)
    assert out_of_order.status_code == 409 and "later rewind" in out_of_order.json()["error"]
    # the agent answers a new message: the rewind can no longer be undone
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event (id, user_id, session_id, data, created_at, updated_at) "
            "VALUES ($1, $2, $3, $4, NOW(), NOW())",
            "new-event", conv.user_id, conv.session_id, conv.events[0].data,
        )  # fmt: skip
    blocked = await post(client, f"{path}/rewinds/{second['data']['rewind']['id']}/undo", conv.user_id)
    assert blocked.status_code == 409 and "new events" in blocked.json()["error"]
    assert (await post(client, f"{path}/rewinds/not-a-rewind/undo", conv.user_id)).status_code == 404


async def test_two_rewinds_at_once_never_hide_the_same_rows_twice(services: Services, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=6)
    caller = Caller(user_id=conv.user_id)
    results = await asyncio.gather(
        *[
            rewind(
                services,
                caller,
                conv.session_id,
                RewindRequest(rewind_before_invocation_id=conv.turns[i].invocation_id),
            )
            for i in (2, 3, 2, 4)
        ],
        return_exceptions=True,
    )
    done = [r for r in results if not isinstance(r, BaseException)]
    hidden = sum(r.rewind.events_removed for r in done)  # type: ignore[union-attr]
    async with pool.acquire() as conn:
        deleted = await conn.fetchval(
            "SELECT count(*) FROM event WHERE session_id = $1 AND deleted_at IS NOT NULL", conv.session_id
        )
    assert hidden == deleted == len([e for e in conv.events if e.created_at >= conv.turns[2].started_at])
    assert all(getattr(r, "status", None) == 404 for r in results if isinstance(r, BaseException))


@pytest.mark.parametrize("dialect", LINES)
@pytest.mark.parametrize("event_style", ["python", "go"])
async def test_invocations_list_every_turn_in_order(
    client: Any, pool: asyncpg.Pool, dialect: str, event_style: str
) -> None:
    conv = await seed(pool, dialect=dialect, turns=5, tool_calls=True, event_style=event_style, running_last_turn=True)
    path = f"/api/sessions/{conv.session_id}/invocations"
    r = await client.get(path, headers={"X-User-Id": conv.user_id})
    assert r.status_code == 200 and r.json()["message"] == "end"
    turns = r.json()["data"]
    assert [t["invocation_id"] for t in turns] == conv.invocation_ids
    for got, turn in zip(turns, conv.turns, strict=True):
        assert got["task_id"] == turn.task_id and got["state"] == turn.state
        assert got["user_text"] == turn.user_text[:200]
        assert got["event_count"] == len(turn.event_ids)
    # paging
    page1 = (await client.get(f"{path}?limit=2", headers={"X-User-Id": conv.user_id})).json()
    assert page1["message"] == "more" and len(page1["data"]) == 2
    page2 = (
        await client.get(
            f"{path}?limit=2&after={page1['data'][-1]['invocation_id']}", headers={"X-User-Id": conv.user_id}
        )
    ).json()
    assert [t["invocation_id"] for t in page2["data"]] == conv.invocation_ids[2:4]
    assert (await client.get(f"{path}?limit=0", headers={"X-User-Id": conv.user_id})).status_code == 400
    assert (await client.get(f"{path}?limit=1001", headers={"X-User-Id": conv.user_id})).status_code == 400
    assert (await client.get(f"{path}?after=e-nope", headers={"X-User-Id": conv.user_id})).status_code == 400
    assert (await client.get(path, headers={"X-User-Id": new_user()})).status_code == 404


async def test_forks_and_tree(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=3)
    user = conv.user_id

    async def fork_of(session_id: str, **body: Any) -> dict[str, Any]:
        r = await post(client, f"/api/sessions/{session_id}/fork", user, body)
        assert r.status_code == 201, r.text
        return r.json()["data"]  # type: ignore[no-any-return]

    a = await fork_of(conv.session_id)
    b = await fork_of(conv.session_id, rewind_before_invocation_id=conv.turns[1].invocation_id)
    a1 = await fork_of(a["id"])
    a11 = await fork_of(a1["id"])
    forks = (await client.get(f"/api/sessions/{conv.session_id}/forks", headers={"X-User-Id": user})).json()["data"]
    assert [f["session_id"] for f in forks] == [a["id"], b["id"]]
    assert forks[1]["fork"]["rewind_before_invocation_id"] == conv.turns[1].invocation_id
    assert forks[0]["name"] == a["name"] and forks[0]["fork"]["depth"] == 1

    # b is deleted the way kagent deletes (soft); a1's session row vanishes entirely
    async with pool.acquire() as conn:
        await conn.execute("UPDATE session SET deleted_at = NOW() WHERE id = $1", b["id"])
        await conn.execute("DELETE FROM session WHERE id = $1", a1["id"])
    tree = (await client.get(f"/api/sessions/{a11['id']}/tree", headers={"X-User-Id": user})).json()["data"]

    def shape(node: dict[str, Any]) -> Any:
        return (node["session_id"], node["status"], [shape(c) for c in node["forks"]])

    assert shape(tree) == (
        conv.session_id, "ok",
        [(a["id"], "ok", [(a1["id"], "missing", [(a11["id"], "ok", [])])]), (b["id"], "deleted", [])],
    )  # fmt: skip
    assert tree["fork"] is None and tree["forks"][0]["fork"]["depth"] == 1
    # another user sees nothing of it
    assert (await client.get(f"/api/sessions/{a11['id']}/tree", headers={"X-User-Id": new_user()})).status_code == 404


async def test_tree_survives_a_cycle_in_the_records(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=1)
    a = (await post(client, f"/api/sessions/{conv.session_id}/fork", conv.user_id)).json()["data"]
    async with pool.acquire() as conn:  # a corrupted record: the root claims to be a fork of its fork
        await conn.execute(
            "INSERT INTO kagent_fork.fork (session_id, user_id, parent_session_id, parent_user_id, root_session_id, "
            "root_user_id, depth, boundary_found, events_copied, tasks_copied, messages_copied, task_layout, "
            "created_by) "
            "VALUES ($1, $2, $3, $2, $3, $2, 2, false, 0, 0, 0, 'per_task', $2)",
            conv.session_id, conv.user_id, a["id"],
        )  # fmt: skip
    r = await client.get(f"/api/sessions/{a['id']}/tree", headers={"X-User-Id": conv.user_id})
    assert r.status_code == 200
    ids = json.dumps(r.json()["data"])
    assert ids.count(a["id"]) >= 1 and ids.count(f'"session_id": "{conv.session_id}"') <= 1


@pytest.mark.parametrize("dialect", LINES)
async def test_a_large_sessions_rewind_searches_on_two_connections_and_hides_the_same_rows(
    settings: Any, database_url: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, dialect: str
) -> None:
    from service.kagent.store import Store
    from service.kagent.store.database import Database
    from service.operations import copying
    from service.operations import rewind as rewinding

    class CountingDatabase(Database):
        snapshots = 0

        async def use_snapshot(self, conn: Any, snapshot: str) -> None:
            CountingDatabase.snapshots += 1
            await super().use_snapshot(conn, snapshot)

    counting = Store(settings.service_schema)
    counting.database = CountingDatabase(counting.queries)

    conv = await seed(pool, dialect=dialect, turns=6, tool_calls=True)
    roomy = await asyncpg.create_pool(database_url, min_size=2, max_size=4)
    svc = Services(settings=settings, store=counting, pool=roomy)
    req = RewindRequest(rewind_before_invocation_id=conv.turns[3].invocation_id)
    hidden, summaries = [], []
    try:
        for large in (True, False):
            monkeypatch.setattr(copying, "LARGE_FORK_TASKS", 0 if large else 10**9)
            result = await rewind(svc, Caller(user_id=conv.user_id), conv.session_id, req)
            assert isinstance(result, rewinding.RewindResult) and result.rewind.id is not None
            summaries.append(result.rewind.summary)
            async with pool.acquire() as conn:
                hidden.append(
                    await conn.fetch(
                        "SELECT 'event' AS t, id FROM event WHERE session_id = $1 AND deleted_at IS NOT NULL "
                        "UNION ALL SELECT 'task', id FROM task WHERE session_id = $1 AND deleted_at IS NOT NULL "
                        "ORDER BY 1, 2",
                        conv.session_id,
                    )
                )
            await rewinding.undo(svc, Caller(user_id=conv.user_id), conv.session_id, result.rewind.id)
    finally:
        await roomy.close()
    assert hidden[0] == hidden[1] and len(hidden[0]) > 2
    # the large rewind told on its reader, while it hid them, what the small one told before hiding them
    assert summaries[0] == summaries[1] and summaries[0] is not None and summaries[0].turns == 3
    assert CountingDatabase.snapshots == 1  # the large rewind's reader, and only that one


async def test_each_rewind_gets_its_own_stamp_after_the_sessions_last_one(
    services: Services, pool: asyncpg.Pool
) -> None:
    """A rewind's stamp is taken after the session lock and after every earlier rewind of the session,
    not the transaction's start: two rewinds that began in the same microsecond, or a clock that went
    back, would otherwise share one stamp or sort out of order, and one undo would restore both."""
    from service.operations import rewind as rewinding

    conv = await seed(pool, dialect="v1", turns=6, tool_calls=True)
    caller = Caller(user_id=conv.user_id)
    first = await rewind(
        services, caller, conv.session_id, RewindRequest(rewind_before_invocation_id=conv.turns[4].invocation_id)
    )
    assert isinstance(first, rewinding.RewindResult) and first.rewind.id is not None
    async with pool.acquire() as conn:  # as if the first rewind's stamp were later than the clock now
        ahead = await conn.fetchval(
            "UPDATE kagent_fork.rewind SET created_at = created_at + interval '1 hour', "
            "deleted_at = deleted_at + interval '1 hour' WHERE id = $1 RETURNING created_at",
            first.rewind.id,
        )
        for table in ("event", "task"):
            await conn.execute(
                f"UPDATE {table} SET deleted_at = deleted_at + interval '1 hour' "
                "WHERE session_id = $1 AND deleted_at IS NOT NULL",
                conv.session_id,
            )
    second = await rewind(
        services, caller, conv.session_id, RewindRequest(rewind_before_invocation_id=conv.turns[2].invocation_id)
    )
    assert isinstance(second, rewinding.RewindResult) and second.rewind.id is not None
    async with pool.acquire() as conn:
        stamps = await conn.fetch(
            "SELECT id, created_at, deleted_at FROM kagent_fork.rewind WHERE session_id = $1 ORDER BY created_at",
            conv.session_id,
        )
    assert [s["id"] for s in stamps] == [first.rewind.id, second.rewind.id]
    assert stamps[1]["deleted_at"] > ahead
    # newest first: the second undo restores its own rows only, then the first restores the rest
    await rewinding.undo(services, caller, conv.session_id, second.rewind.id)
    assert (await kagent_sees(pool, conv.session_id, conv.user_id))[0] == [
        e.id for e in conv.events if e.created_at < conv.turns[4].started_at
    ]
    await rewinding.undo(services, caller, conv.session_id, first.rewind.id)
    assert (await kagent_sees(pool, conv.session_id, conv.user_id))[0] == [e.id for e in conv.events]


@pytest.mark.parametrize("dialect", LINES)
async def test_rewinds_list_says_what_undo_would_do(client: Any, pool: asyncpg.Pool, dialect: str) -> None:
    conv = await seed(pool, dialect=dialect, turns=4, tool_calls=True)
    path = f"/api/sessions/{conv.session_id}"

    async def listed(user: str = conv.user_id, **headers: str) -> list[dict[str, Any]]:
        r = await client.get(f"{path}/rewinds", headers={"X-User-Id": user, **headers})
        assert r.status_code == 200, r.text
        data: list[dict[str, Any]] = r.json()["data"]
        return data

    assert await listed() == []
    first = await post(client, f"{path}/rewind", conv.user_id, {"rewind_before_invocation_id": conv.invocation_ids[3]})
    second = await post(client, f"{path}/rewind", conv.user_id, {"rewind_before_invocation_id": conv.invocation_ids[2]})
    ids = [first.json()["data"]["rewind"]["id"], second.json()["data"]["rewind"]["id"]]
    entries = await listed()
    assert [e["id"] for e in entries] == ids[::-1]  # newest first
    assert [e["undoable"] for e in entries] == [True, False]
    assert all(e["requested_by"] == conv.user_id and e["undone_at"] is None for e in entries)
    assert [e["rewind_before_invocation_id"] for e in entries] == conv.invocation_ids[2:4]
    assert [e["summary"]["turns"] for e in entries] == [1, 1]

    # `undoable` is undo's own decision: the older one is refused, the newer one done
    refused = await post(client, f"{path}/rewinds/{ids[0]}/undo", conv.user_id)
    assert refused.status_code == 409
    assert (await post(client, f"{path}/rewinds/{ids[1]}/undo", conv.user_id)).status_code == 200
    entries = await listed()
    assert [(e["id"], e["undoable"], e["undone_at"] is not None) for e in entries] == [
        (ids[1], False, True),
        (ids[0], True, False),
    ]
    # a read-only share sees the list but cannot undo; another user sees nothing
    async with pool.acquire() as conn:
        token = await create_share(conn, session_id=conv.session_id, owner=conv.user_id, read_only=True)
    assert [e["undoable"] for e in await listed(new_user(), **{"X-Share-Token": token})] == [False, False]
    other = await client.get(f"{path}/rewinds", headers={"X-User-Id": new_user()})
    assert other.status_code == 404
    # new activity in the session: nothing can be undone any more
    await append_turns(pool, conv.session_id, conv.user_id, dialect=dialect, turns=1)
    assert [e["undoable"] for e in await listed()] == [False, False]
    assert (await post(client, f"{path}/rewinds/{ids[0]}/undo", conv.user_id)).status_code == 409
