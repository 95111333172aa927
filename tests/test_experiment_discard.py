"""Discarding an experiment's branches (issue 36): all of them, or all but the one kept, hidden from kagent's chat
list as kagent hides a deleted session, and brought back exactly by undo; retries idempotent, refusals writing
nothing. Against real a2a-sdk agents (tests/support/a2a_agent.py) and kagent's own reads of its tables."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from tests.helpers import caller_fingerprint, ended_experiment, new_user, seed
from tests.support import kagent_reads
from tests.support.a2a_agent import LEGACY, SLOW, V1, Seen
from tests.test_experiments import agents, eclient, ref, start, until

__all__ = ["agents", "eclient"]  # the fixtures this module uses, from the experiments' tests


async def finished(client: Any, pool: asyncpg.Pool, branches: int = 3) -> tuple[Any, dict[str, Any]]:
    """A source conversation and an ended experiment of `branches` branches on it."""
    conv = await seed(pool, dialect="v1", turns=2, name="Pods")
    agents_ = [ref(V1), ref(LEGACY)] if branches == 2 else [ref(V1)]
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": agents_}
    if branches != 2:
        body["repeats"] = branches
    r = await start(client, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    return conv, await until(client, r.json()["data"]["experiment"]["id"], conv.user_id)


async def post(client: Any, path: str, user: str, body: Any = None) -> Any:
    return await client.post(path, json={} if body is None else body, headers={"X-User-Id": user})


async def listed(pool: asyncpg.Pool, user: str) -> set[str]:
    """The user's sessions as kagent lists them (its sidebar: deleted_at IS NULL)."""
    async with pool.acquire() as conn:
        return {r["id"] for r in await kagent_reads.list_sessions(conn, user)}


async def delete_in_kagent(pool: asyncpg.Pool, session_id: str, user: str) -> None:
    """What kagent's own delete does: the session row stamped, nothing else."""
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE session SET deleted_at = NOW() WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL",
            session_id,
            user,
        )


async def rows_of(pool: asyncpg.Pool, session_ids: list[str]) -> list[Any]:
    """The forks' events and tasks, deleted or not: a discard must leave them as they are."""
    async with pool.acquire() as conn:
        return list(
            await conn.fetch(
                "SELECT 'e' AS t, id, deleted_at FROM event WHERE session_id = ANY($1) UNION ALL "
                "SELECT 't', id, deleted_at FROM task WHERE session_id = ANY($1) ORDER BY 1, 2",
                session_ids,
            )
        )


async def test_discard_every_branch_and_undo_brings_back_exactly_those(eclient: Any, pool: asyncpg.Pool) -> None:
    conv, done = await finished(eclient, pool)
    user, x = conv.user_id, done["id"]
    forks = [b["session_id"] for b in done["branches"]]
    assert done["discard"] is None and not any(b["discarded"] or b["kept"] for b in done["branches"])
    assert set(forks) | {conv.session_id} <= await listed(pool, user)
    # the user deleted the third branch in kagent already: it is none of the discard's business
    await delete_in_kagent(pool, forks[2], user)
    rows = await rows_of(pool, forks)

    r = await post(eclient, f"/api/experiments/{x}/discard", user)
    assert r.status_code == 200, r.text
    assert r.json()["message"] == "Successfully discarded branches" and "idempotent-replayed" not in r.headers
    grid = r.json()["data"]
    assert grid["discard"]["kept_session_id"] is None and grid["discard"]["undone_at"] is None
    assert grid["discard"]["discarded_session_ids"] == forks[:2]
    assert [b["discarded"] for b in grid["branches"]] == [True, True, False]
    assert not grid["source"]["discarded"] and not any(b["kept"] for b in grid["branches"])
    shown = await listed(pool, user)
    assert conv.session_id in shown and not set(forks) & shown  # gone from kagent's chat list, the source stays
    assert await rows_of(pool, forks) == rows  # hidden as kagent hides a session: its rows untouched
    page = await eclient.get("/api/fork-explorer/sessions", headers={"X-User-Id": user})
    assert {s["id"] for s in page.json()["data"]} == {conv.session_id}
    # the grid still reads, and says so
    read = (await eclient.get(f"/api/experiments/{x}", headers={"X-User-Id": user})).json()["data"]
    assert read["discard"] == grid["discard"] and read["branches"] == grid["branches"]

    # a retry answers the same discard and writes nothing
    before = await caller_fingerprint(pool, user)
    again = await post(eclient, f"/api/experiments/{x}/discard", user)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true", again.text
    assert again.json()["data"]["discard"] == grid["discard"]
    # another keep while this discard is in force: 409, nothing written
    other = await post(eclient, f"/api/experiments/{x}/discard", user, {"keep": forks[0]})
    assert other.status_code == 409 and "already discarded (all of them)" in other.json()["error"], other.text
    assert await caller_fingerprint(pool, user) == before

    undone = await post(eclient, f"/api/experiments/{x}/discard/undo", user)
    assert undone.status_code == 200, undone.text
    back = undone.json()["data"]
    assert back["discard"]["undone_at"] is not None and back["discard"]["restored_session_ids"] == forks[:2]
    assert not any(b["discarded"] for b in back["branches"])
    shown = await listed(pool, user)
    assert set(forks[:2]) <= shown and forks[2] not in shown  # exactly those: not the one the user deleted
    assert await rows_of(pool, forks) == rows
    before = await caller_fingerprint(pool, user)
    twice = await post(eclient, f"/api/experiments/{x}/discard/undo", user)
    assert twice.status_code == 200 and twice.headers["idempotent-replayed"] == "true"
    assert twice.json()["data"]["discard"] == back["discard"]
    assert await caller_fingerprint(pool, user) == before


async def test_keep_the_winner_and_discard_the_rest(eclient: Any, pool: asyncpg.Pool) -> None:
    conv, done = await finished(eclient, pool)
    user, x = conv.user_id, done["id"]
    forks = [b["session_id"] for b in done["branches"]]
    winner = done["branches"][1]
    r = await post(eclient, f"/api/experiments/{x}/discard", user, {"keep": winner["job_id"]})  # by its job id
    assert r.status_code == 200, r.text
    grid = r.json()["data"]
    assert grid["discard"]["kept_session_id"] == winner["session_id"]
    assert grid["discard"]["discarded_session_ids"] == [forks[0], forks[2]]
    assert [(b["discarded"], b["kept"]) for b in grid["branches"]] == [(True, False), (False, True), (True, False)]
    shown = await listed(pool, user)
    assert winner["session_id"] in shown and forks[0] not in shown and forks[2] not in shown
    # the same keep named by the fork's session id is the same discard
    same = await post(eclient, f"/api/experiments/{x}/discard", user, {"keep": winner["session_id"]})
    assert same.status_code == 200 and same.headers["idempotent-replayed"] == "true"
    # the user deletes the winner in kagent afterwards: undo brings back the others only
    await delete_in_kagent(pool, winner["session_id"], user)
    undone = await post(eclient, f"/api/experiments/{x}/discard/undo", user)
    assert undone.status_code == 200, undone.text
    shown = await listed(pool, user)
    assert forks[0] in shown and forks[2] in shown and winner["session_id"] not in shown
    # after an undo, another discard may keep another branch
    again = await post(eclient, f"/api/experiments/{x}/discard", user, {"keep": forks[0]})
    assert again.status_code == 200 and "idempotent-replayed" not in again.headers, again.text
    assert again.json()["data"]["discard"]["discarded_session_ids"] == [forks[2]]
    assert again.json()["data"]["discard"]["id"] != grid["discard"]["id"]
    assert forks[2] not in await listed(pool, user)


async def test_refusals_write_nothing(eclient: Any, pool: asyncpg.Pool, agents: tuple[str, Seen]) -> None:
    conv, done = await finished(eclient, pool, branches=2)
    user, x = conv.user_id, done["id"]
    stranger = new_user()
    before = await caller_fingerprint(pool, user, stranger)
    shown = await listed(pool, user)

    async def refused(status: int, path: str, body: bytes, says: str, who: str = user, media: str = "json") -> None:
        headers = {"X-User-Id": who, "Content-Type": f"application/{media}"}
        r = await eclient.post(path, content=body, headers=headers)
        assert r.status_code == status, (path, body, r.text)
        assert says in r.json()["error"], (path, body, r.json())

    discard, undo = f"/api/experiments/{x}/discard", f"/api/experiments/{x}/discard/undo"
    await refused(404, discard, b"{}", f"experiment {x} not found", who=stranger)
    await refused(404, "/api/experiments/no-such/discard", b"{}", "not found")
    await refused(404, undo, b"{}", "not found", who=stranger)
    await refused(404, discard, b'{"keep": "no-such-branch"}', "has no branch no-such-branch")
    keep_source = b'{"keep": "%s"}' % conv.session_id.encode()
    await refused(404, discard, keep_source, "source is never discarded")
    await refused(400, discard, b'{"keep": ""}', "invalid request body")
    await refused(400, discard, b'{"keep": 3}', "invalid request body")
    await refused(400, discard, b'{"keeps": "x"}', "invalid request body")
    await refused(400, discard, b"{nope", "not valid JSON")
    await refused(415, discard, b"{}", "Content-Type must be application/json", media="x-www-form-urlencoded")
    await refused(400, undo, b'{"keep": "x"}', "invalid request body")
    await refused(409, undo, b"{}", "were never discarded")
    assert await caller_fingerprint(pool, user, stranger) == before
    assert await listed(pool, user) == shown

    # a running experiment: 409 until it is cancelled (or ends)
    _, seen = agents
    seen.release.clear()
    seen.hold_on_turn = 0
    try:
        body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref(SLOW)]}
        running = (await start(eclient, conv.session_id, user, body)).json()["data"]["experiment"]
        await until(eclient, running["id"], user, lambda e: e["branches"][0]["turns"][0]["state"] == "working")
        # (the agent writes its turn into the fork meanwhile: the sessions and discards are compared, not its rows)
        shown = await listed(pool, user)
        r = await post(eclient, f"/api/experiments/{running['id']}/discard", user)
        assert r.status_code == 409 and "is still running: cancel it" in r.json()["error"], r.text
        assert await listed(pool, user) == shown and running["branches"][0]["session_id"] in shown
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM kagent_fork.discard WHERE user_id = $1", user) == 0
        cancelled = await post(eclient, f"/api/experiments/{running['id']}/cancel", user)
        assert cancelled.status_code == 200, cancelled.text
    finally:
        seen.release.set()
    r = await post(eclient, f"/api/experiments/{running['id']}/discard", user)
    assert r.status_code == 200, r.text
    assert r.json()["data"]["discard"]["discarded_session_ids"] == [running["branches"][0]["session_id"]]
    assert running["branches"][0]["session_id"] not in await listed(pool, user)


async def test_discards_and_undos_at_once_act_once(client: Any, pool: asyncpg.Pool) -> None:
    """Eight discards of one experiment at once make one discard (the others answer it, replayed), and eight
    undos at once undo it once: the experiment's row lock puts them in a line."""
    conv = await seed(pool, dialect="v1", turns=2)
    forks = [await seed(pool, dialect="v1", turns=1, user_id=conv.user_id) for _ in range(2)]
    x, _ = await ended_experiment(pool, conv, forks)
    for path in (f"/api/experiments/{x}/discard", f"/api/experiments/{x}/discard/undo"):
        answers = await asyncio.gather(*(post(client, path, conv.user_id) for _ in range(8)))
        assert [r.status_code for r in answers] == [200] * 8, [r.text for r in answers]
        assert sum("idempotent-replayed" not in r.headers for r in answers) == 1
        assert len({r.json()["data"]["discard"]["id"] for r in answers}) == 1
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT session_ids, restored_ids FROM kagent_fork.discard WHERE experiment_id = $1", x)
    assert [(sorted(r["session_ids"]), sorted(r["restored_ids"])) for r in rows] == [
        (sorted(f.session_id for f in forks), sorted(f.session_id for f in forks))
    ]
    assert {f.session_id for f in forks} <= await listed(pool, conv.user_id)
