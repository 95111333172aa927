"""Concurrency over real sockets (tests/support/live_server.py; the server's pool holds 10 connections):
one Idempotency-Key makes one fork however many retries arrive at once; a fork taken while the agent
appends events holds one consistent prefix; forks interleaved with rewinds each hold the conversation
as it was before or after each rewind, never a mix; concurrent rewinds never hide a row twice."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

import asyncpg
import httpx
import pytest

from tests.helpers import new_user, seed
from tests.support.conversations import Conversation, build_conversation

# kagent's own InsertEvent (go/core/internal/database/queries/events.sql): the event and the session's
# updated_at, in one statement.
KAGENT_INSERT_EVENT = """
WITH inserted_event AS (
INSERT INTO event (id, user_id, session_id, data, created_at, updated_at)
VALUES ($1, $2, $3, $4, NOW(), NOW())
RETURNING user_id, session_id
)
UPDATE session
SET updated_at = NOW()
FROM inserted_event
WHERE inserted_event.session_id IS NOT NULL
  AND session.id = inserted_event.session_id
  AND session.user_id = inserted_event.user_id
  AND session.deleted_at IS NULL
"""


def http(live_url: str, connections: int = 50) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=live_url, limits=limits, timeout=60)


async def live_events(pool: asyncpg.Pool, session_id: str, user_id: str) -> list[asyncpg.Record]:
    async with pool.acquire() as conn:
        return await conn.fetch(
            "SELECT data, created_at, deleted_at FROM event WHERE session_id = $1 AND user_id = $2 "
            "AND deleted_at IS NULL ORDER BY created_at",
            session_id,
            user_id,
        )


async def test_200_retries_of_one_key_make_one_fork(live_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True)
    headers = {"X-User-Id": conv.user_id, "Idempotency-Key": f"retry-{uuid.uuid4()}"}
    body = {"rewind_before_invocation_id": conv.turns[2].invocation_id, "name": "One fork"}
    async with http(live_url, connections=200) as c:
        answers = await asyncio.gather(
            *[c.post(f"/api/sessions/{conv.session_id}/fork", json=body, headers=headers) for _ in range(200)]
        )
    statuses = Counter(r.status_code for r in answers)
    assert statuses == {201: 1, 200: 199}, statuses
    created = next(r for r in answers if r.status_code == 201).json()["data"]
    for r in answers:
        assert r.json()["data"] == created
        assert (r.headers.get("idempotent-replayed") == "true") is (r.status_code == 200)
    async with pool.acquire() as conn:
        forks = await conn.fetch(
            "SELECT session_id FROM kagent_fork.fork WHERE parent_session_id = $1 AND user_id = $2",
            conv.session_id,
            conv.user_id,
        )
        sessions = await conn.fetchval(
            "SELECT count(*) FROM session WHERE user_id = $1 AND id <> $2", conv.user_id, conv.session_id
        )
    assert [f["session_id"] for f in forks] == [created["id"]] and sessions == 1
    kept = [e.data for e in conv.events if e.created_at < conv.turns[2].started_at]
    assert [e["data"] for e in await live_events(pool, created["id"], conv.user_id)] == kept


async def test_forks_while_the_agent_appends_hold_a_consistent_prefix(live_url: str, pool: asyncpg.Pool) -> None:
    """Each fork, with or without a boundary in the turns being appended, equals the first k events of the
    source: no gap, nothing from after its snapshot, and the boundary lookup and the copy see one state."""
    conv = await seed(pool, dialect="v1", turns=2, tool_calls=True)
    more = build_conversation(dialect="v1", turns=12, tool_calls=True, user_id=conv.user_id)
    first_event_of = {
        t.invocation_id: more.events.index(next(e for e in more.events if e.id == t.event_ids[0])) for t in more.turns
    }
    appended: list[str] = []
    stop, progress = asyncio.Event(), asyncio.Event()

    def next_turn() -> str:
        """The turn the agent starts next: a fork before it races with the append of its first event."""
        upcoming = [t for t in more.turns if first_event_of[t.invocation_id] >= len(appended)]
        return (upcoming[0] if upcoming else more.turns[-1]).invocation_id

    async def agent() -> None:
        """Appends while the forks run, never more than three events ahead of them (however slow the machine)."""
        async with pool.acquire() as conn:
            for i, event in enumerate(more.events):
                if stop.is_set():
                    break
                await conn.execute(KAGENT_INSERT_EVENT, str(uuid.uuid4()), conv.user_id, conv.session_id, event.data)
                appended.append(event.data)
                if i % 3 == 2:
                    await progress.wait()
                    progress.clear()
                await asyncio.sleep(0.001)

    async def forks() -> list[dict[str, Any]]:
        made = []
        async with http(live_url) as c:
            for i in range(30):
                body: dict[str, Any] = {}
                if i % 3:  # a boundary in the turn being appended: found or not, depending on the snapshot
                    body["rewind_before_invocation_id"] = next_turn()
                batch = await asyncio.gather(
                    *[
                        c.post(f"/api/sessions/{conv.session_id}/fork", json=body, headers={"X-User-Id": conv.user_id})
                        for _ in range(2)
                    ]
                )
                for r in batch:
                    assert r.status_code == 201, r.text
                    made.append({**r.json()["data"], "boundary": body.get("rewind_before_invocation_id")})
                progress.set()
        stop.set()
        progress.set()
        return made

    made = (await asyncio.gather(agent(), forks()))[1]
    source = [e["data"] for e in await live_events(pool, conv.session_id, conv.user_id)]
    assert source == [e.data for e in conv.events] + appended
    copied = set()
    for fork in made:
        events = [e["data"] for e in await live_events(pool, fork["id"], conv.user_id)]
        k = fork["fork"]["events_copied"]
        assert events == source[:k], "a fork is a prefix of the source, without a gap"
        copied.add(k)
        if fork["fork"]["boundary_found"]:
            # exactly the events before the boundary turn's first event
            assert k == len(conv.events) + first_event_of[fork["boundary"]]
        elif fork["boundary"] is not None:
            # not appended yet in this fork's snapshot: the whole conversation as it was, without the turn
            assert more.events[first_event_of[fork["boundary"]]].data not in events
    assert len(copied) >= 3, f"the appends did not interleave with the forks: {sorted(copied)}"


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_forks_interleaved_with_rewinds_and_undos(live_url: str, pool: asyncpg.Pool, dialect: str) -> None:
    conv = await seed(pool, dialect=dialect, turns=8, tool_calls=True)
    me = {"X-User-Id": conv.user_id}
    states = {
        j: [e.data for e in conv.events if j == 8 or e.created_at < conv.turns[j].started_at] for j in range(3, 9)
    }
    done = asyncio.Event()
    made: list[dict[str, Any]] = []
    async with http(live_url) as c:
        path = f"/api/sessions/{conv.session_id}"

        async def rewinds_then_undos() -> None:
            ids = []
            for j in (7, 6, 5, 4, 3):
                r = await c.post(
                    f"{path}/rewind", json={"rewind_before_invocation_id": conv.turns[j].invocation_id}, headers=me
                )
                assert r.status_code == 200, r.text
                ids.append(r.json()["data"]["rewind"]["id"])
                await asyncio.sleep(0.01)
            for rewind_id in reversed(ids):
                r = await c.post(f"{path}/rewinds/{rewind_id}/undo", json={}, headers=me)
                assert r.status_code == 200, r.text
                await asyncio.sleep(0.01)
            done.set()

        async def forker() -> None:
            while not done.is_set():
                r = await c.post(f"{path}/fork", json={}, headers=me)
                assert r.status_code == 201, r.text
                made.append(r.json()["data"])

        await asyncio.gather(rewinds_then_undos(), forker(), forker(), forker())
    seen = Counter()
    for fork in made:
        events = [e["data"] for e in await live_events(pool, fork["id"], conv.user_id)]
        matching = [j for j, state in states.items() if state == events]
        assert matching, "a fork holds the conversation of one moment, before or after each rewind"
        seen[matching[0]] += 1
        assert fork["fork"]["events_copied"] == len(events)
        if dialect == "v1":
            assert fork["fork"]["tasks_copied"] == matching[0]
    assert len(seen) >= 3, f"the forks did not interleave with the rewinds: {seen}"
    assert [e["data"] for e in await live_events(pool, conv.session_id, conv.user_id)] == states[8]


async def test_concurrent_rewinds_never_hide_a_row_twice(live_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=8, tool_calls=True)
    me = {"X-User-Id": conv.user_id}
    path = f"/api/sessions/{conv.session_id}"
    boundaries = [conv.turns[j].invocation_id for j in (6, 2, 4, 2, 7, 5, 3, 6, 1, 4)]
    async with http(live_url) as c:
        answers = await asyncio.gather(
            *[c.post(f"{path}/rewind", json={"rewind_before_invocation_id": b}, headers=me) for b in boundaries]
        )
        assert {r.status_code for r in answers} <= {200, 404}, [r.text for r in answers]
        done = [r.json()["data"]["rewind"] for r in answers if r.status_code == 200]
        async with pool.acquire() as conn:
            hidden = await conn.fetch(
                "SELECT deleted_at, count(*) AS n FROM event WHERE session_id = $1 AND deleted_at IS NOT NULL "
                "GROUP BY deleted_at",
                conv.session_id,
            )
            stamps = await conn.fetch(
                "SELECT id, deleted_at, events_removed FROM kagent_fork.rewind WHERE session_id = $1", conv.session_id
            )
        by_stamp = {h["deleted_at"]: h["n"] for h in hidden}
        # each hidden row carries exactly one rewind's stamp, and each rewind counted exactly its own rows
        assert sum(r["events_removed"] for r in done) == sum(by_stamp.values())
        assert {s["id"]: by_stamp.get(s["deleted_at"], 0) for s in stamps} == {
            s["id"]: s["events_removed"] for s in stamps
        }
        assert sum(by_stamp.values()) == len([e for e in conv.events if e.created_at >= conv.turns[1].started_at])
        # newest first, every undo works and the conversation is whole again
        for record in sorted(done, key=lambda r: r["created_at"], reverse=True):
            r = await c.post(f"{path}/rewinds/{record['id']}/undo", json={}, headers=me)
            assert r.status_code == 200, r.text
    assert [e["data"] for e in await live_events(pool, conv.session_id, conv.user_id)] == [e.data for e in conv.events]


async def test_many_users_fork_at_once(live_url: str, pool: asyncpg.Pool) -> None:
    """60 forks of 20 sessions by 20 users at once: each complete, each its caller's, none lost."""
    convs = [await seed(pool, dialect=("legacy", "v1")[i % 2], turns=2, user_id=new_user()) for i in range(20)]
    async with http(live_url, connections=60) as c:
        answers = await asyncio.gather(
            *[
                c.post(f"/api/sessions/{conv.session_id}/fork", json={}, headers={"X-User-Id": conv.user_id})
                for conv in convs
                for _ in range(3)
            ]
        )
    assert [r.status_code for r in answers] == [201] * 60
    for i, r in enumerate(answers):
        conv: Conversation = convs[i // 3]
        data = r.json()["data"]
        assert data["user_id"] == conv.user_id
        assert [e["data"] for e in await live_events(pool, data["id"], conv.user_id)] == [e.data for e in conv.events]
    assert len({r.json()["data"]["id"] for r in answers}) == 60
