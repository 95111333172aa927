"""Whose rows a session's are (issue 32, item 3): kagent 0.10.x lets any user make a session row of any id, and
the 0.10.4 runtimes write a chat's rows under kagent's default user with the chat's id. Those rows are read,
copied and hidden for an owner only when they are provably the owner's (frameworks.runtime_users): never for a
row made after the chat began, nor when another user holds a row of the same id. Real PostgreSQL, kagent's
table layout, kagent-openai 0.10.4's captured rows and kagent ADK rows."""

from __future__ import annotations

from typing import Any

import asyncpg

from service.kagent.frameworks import KAGENT_DEFAULT_USER
from tests.helpers import new_user, seed
from tests.test_frameworks import loaded

MALLORY_ROW = (
    "INSERT INTO session (id, user_id, name, created_at, updated_at, agent_id) "
    "VALUES ($1, $2, 'dup', now(), now(), 'kagent__NS__k8s_agent')"
)


async def _rows(pool: asyncpg.Pool, sid: str) -> list[tuple[Any, ...]]:
    """Every event and task row of the id, whoever's, with whether it is live."""
    async with pool.acquire() as conn:
        return [
            tuple(r)
            for r in await conn.fetch(
                "SELECT 'event', id, user_id, deleted_at IS NULL FROM event WHERE session_id = $1 UNION ALL "
                "SELECT 'task', id, user_id, deleted_at IS NULL FROM task WHERE session_id = $1 ORDER BY 1, 2",
                sid,
            )
        ]


async def _claim(pool: asyncpg.Pool, sid: str, user: str) -> None:
    async with pool.acquire() as conn:
        await conn.execute(MALLORY_ROW, sid, user)


def _h(user: str) -> dict[str, str]:
    return {"X-User-Id": user}


async def test_a_same_id_row_reads_nothing_of_the_default_users_chat(client: Any, pool: asyncpg.Pool) -> None:
    """kagent's default user's own ADK chat; mallory makes a row of its id afterwards: her transcript, listing,
    fork and rewind see none of it, and his chat is untouched."""
    admin = await seed(pool, dialect="legacy", turns=3, user_id=KAGENT_DEFAULT_USER)
    mallory = new_user()
    await _claim(pool, admin.session_id, mallory)
    before = await _rows(pool, admin.session_id)
    sid = admin.session_id
    md = await client.get(f"/api/sessions/{sid}/transcript?format=markdown", headers=_h(mallory))
    assert md.status_code == 200, md.text
    for text in admin.user_texts:
        assert text not in md.text
    listed = await client.get(f"/api/sessions/{sid}/invocations", headers=_h(mallory))
    assert listed.status_code == 200 and listed.json()["data"] == []
    fork = await client.post(f"/api/sessions/{sid}/fork", json={}, headers=_h(mallory))
    assert fork.status_code == 201, fork.text  # a fork of mallory's own (empty) row, holding none of the chat
    assert fork.json()["data"]["fork"]["events_copied"] == 0 and fork.json()["data"]["fork"]["tasks_copied"] == 0
    rewind = await client.post(
        f"/api/sessions/{sid}/rewind",
        json={"rewind_before_invocation_id": admin.invocation_ids[0]},
        headers=_h(mallory),
    )
    assert rewind.status_code == 404, rewind.text
    assert await _rows(pool, sid) == before
    mine = await client.get(f"/api/sessions/{sid}/invocations", headers=_h(KAGENT_DEFAULT_USER))
    assert [t["invocation_id"] for t in mine.json()["data"]] == admin.invocation_ids


async def test_a_same_id_row_cannot_read_fork_or_rewind_another_users_runtime_chat(
    client: Any, pool: asyncpg.Pool
) -> None:
    """carol's OpenAI Agents SDK chat, which kagent-openai 0.10.4 wrote under kagent's default user; mallory
    makes a row of its id afterwards: she reads, copies and hides none of carol's chat, and carol keeps it whole,
    with no rewind she did not make."""
    fixture = await loaded(pool, "openai_3_turns")
    sid, carol, turns = fixture["session_id"], fixture["user"], fixture["turns"]
    mallory = new_user()
    await _claim(pool, sid, mallory)
    before = await _rows(pool, sid)
    md = await client.get(f"/api/sessions/{sid}/transcript?format=markdown", headers=_h(mallory))
    assert md.status_code == 200
    for t in turns:
        assert t["question"] not in md.text
    listed = await client.get(f"/api/sessions/{sid}/invocations", headers=_h(mallory))
    assert listed.json()["data"] == []
    fork = await client.post(f"/api/sessions/{sid}/fork", json={}, headers=_h(mallory))
    assert fork.status_code == 201, fork.text  # a fork of mallory's own (empty) row, holding none of the chat
    assert fork.json()["data"]["fork"]["events_copied"] == 0 and fork.json()["data"]["fork"]["tasks_copied"] == 0
    cut = await client.post(
        f"/api/sessions/{sid}/fork", json={"rewind_before_task_id": turns[1]["task_id"]}, headers=_h(mallory)
    )
    assert cut.status_code == 201 and cut.json()["data"]["fork"]["boundary_found"] is False
    assert cut.json()["data"]["fork"]["events_copied"] == cut.json()["data"]["fork"]["tasks_copied"] == 0
    rewind = await client.post(
        f"/api/sessions/{sid}/rewind", json={"rewind_before_task_id": turns[1]["task_id"]}, headers=_h(mallory)
    )
    assert rewind.status_code == 404, rewind.text
    assert await _rows(pool, sid) == before
    # carol's chat as it was: every turn, no rewind.
    listed = await client.get(f"/api/sessions/{sid}/invocations", headers=_h(carol))
    assert [t["task_id"] for t in listed.json()["data"]] == [t["task_id"] for t in turns]
    rewinds = await client.get(f"/api/sessions/{sid}/rewinds", headers=_h(carol))
    assert rewinds.json()["data"] == []


async def test_two_users_with_rows_of_one_id_share_nothing_of_the_runtimes_rows(
    client: Any, pool: asyncpg.Pool
) -> None:
    """When two users besides the default one hold a row of the id, the runtime's rows are no one's (as kagent
    decides a task without user_id): neither reads them."""
    fixture = await loaded(pool, "openai_3_turns")
    sid, carol = fixture["session_id"], fixture["user"]
    async with pool.acquire() as conn:  # a row older than the chat's, under a second user
        await conn.execute(
            "INSERT INTO session (id, user_id, name, created_at, updated_at) SELECT id, $2, 'early', "
            "created_at - interval '1 hour', updated_at FROM session WHERE id = $1 AND user_id = $3",
            sid, new_user(), carol,
        )  # fmt: skip
    listed = await client.get(f"/api/sessions/{sid}/invocations", headers=_h(carol))
    assert listed.json()["data"] == []
