"""kagent's session retention purges sessions idle past `database.postgres.sessionRetentionDays`, forks and their
parents alike (tests/support/retention.py runs kagent's own DELETE), and leaves kagent-fork's rows: the lineage,
compare and experiment reads answer with the purged session marked, never an error (issue 45, item 5d)."""

from __future__ import annotations

from typing import Any

import asyncpg

from service.agents.replay import grid
from service.services import Services
from tests.helpers import ended_experiment, seed
from tests.support.retention import purge_idle


async def _fork(client: Any, user: str, session_id: str, **body: Any) -> str:
    r = await client.post(f"/api/sessions/{session_id}/fork", json=body, headers={"X-User-Id": user})
    assert r.status_code == 201, r.text
    return r.json()["data"]["id"]  # type: ignore[no-any-return]


async def _get(client: Any, user: str, path: str, status: int = 200) -> Any:
    r = await client.get(path, headers={"X-User-Id": user})
    assert r.status_code == status, (path, r.text)
    return r.json()["data"] if status == 200 and path.find("format=markdown") < 0 else r


def _shape(node: dict[str, Any]) -> Any:
    return (node["session_id"], node["status"], [_shape(c) for c in node["forks"]])


async def test_a_purged_parent_leaves_its_forks_lineage_readable(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3)
    user = conv.user_id
    a = await _fork(client, user, conv.session_id, rewind_before_invocation_id=conv.invocation_ids[2])
    b = await _fork(client, user, conv.session_id)
    a1 = await _fork(client, user, a)
    assert await purge_idle(pool, user, conv.session_id) == 1
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event WHERE session_id = $1", conv.session_id) == 0

    tree = await _get(client, user, f"/api/sessions/{a}/tree")
    assert _shape(tree) == (conv.session_id, "missing", [(a, "ok", [(a1, "ok", [])]), (b, "ok", [])])
    assert tree["name"] is None and tree["forks"][0]["fork"]["parent_session_id"] == conv.session_id
    assert tree["forks"][0]["turns"] == 2 and tree["forks"][0]["fork_turn"] is None  # the parent's turns are gone
    assert [f["session_id"] for f in await _get(client, user, f"/api/sessions/{a}/forks")] == [a1]
    compared = await _get(client, user, f"/api/sessions/{a}/compare/{b}")  # two forks of a purged parent
    assert compared["common_turns"] == 2 and compared["right"]["turns_after"] == 1
    # the purged session itself is gone, as any session that is not there
    for path in (f"/api/sessions/{conv.session_id}/forks", f"/api/sessions/{a}/compare/{conv.session_id}"):
        assert (await _get(client, user, path, 404)).json() == {"error": "Session not found"}


async def test_a_purged_fork_is_shown_missing_among_its_parents_forks(client: Any, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=2)
    user = conv.user_id
    a = await _fork(client, user, conv.session_id)
    a1 = await _fork(client, user, a)
    b = await _fork(client, user, conv.session_id)
    assert await purge_idle(pool, user, a) == 1

    forks = await _get(client, user, f"/api/sessions/{conv.session_id}/forks")
    assert [(f["session_id"], f["status"], f["name"]) for f in forks][:1] == [(a, "missing", None)]
    assert [(f["session_id"], f["status"]) for f in forks][1:] == [(b, "ok")]
    assert forks[0]["fork"]["events_copied"] > 0  # the record of what the fork copied stays
    for start in (conv.session_id, a1):
        tree = await _get(client, user, f"/api/sessions/{start}/tree")
        assert _shape(tree) == (conv.session_id, "ok", [(a, "missing", [(a1, "ok", [])]), (b, "ok", [])]), start


async def test_an_experiment_with_a_purged_source_and_branch_is_read_with_them_marked(
    client: Any, pool: asyncpg.Pool, services: Services
) -> None:
    conv = await seed(pool, dialect="v1", turns=2)
    user = conv.user_id
    forks = [await seed(pool, dialect="v1", turns=1, user_id=user) for _ in range(2)]
    experiment_id, _ = await ended_experiment(pool, conv, forks)
    await grid.keep_source_column(services, experiment_id, user)  # as the engine does after a start
    before = await _get(client, user, f"/api/experiments/{experiment_id}")
    assert before["source"]["purged"] is False and [c["purged"] for c in before["branches"]] == [False, False]
    assert await purge_idle(pool, user, conv.session_id, forks[0].session_id) == 2

    after = await _get(client, user, f"/api/experiments/{experiment_id}")
    assert after["source"]["purged"] is True and [c["purged"] for c in after["branches"]] == [True, False]
    assert [c["session_id"] for c in after["branches"]] == [f.session_id for f in forks]
    assert after["branches"][0]["turns"] == before["branches"][0]["turns"]  # the figures kept with each turn
    assert after["source"]["turns"] == before["source"]["turns"] != []  # the source column kept at the start
    markdown = (await _get(client, user, f"/api/experiments/{experiment_id}?format=markdown", 200)).text
    assert f"`{conv.session_id}` (purged)" in markdown
    assert "Purged by kagent's session retention" in markdown and forks[0].session_id in markdown
    listing = f"/api/sessions/{conv.session_id}/experiments"
    assert (await _get(client, user, listing, 404)).json() == {"error": "Session not found"}
