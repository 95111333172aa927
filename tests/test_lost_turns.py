"""A turn its agent lost (issue 45, item 3): an agent restarted mid-turn answers `tasks/get` "Task not found"
(A2A's TaskNotFoundError, -32001, in both dialects), and the branch fails at once with that reason, logged once,
instead of waiting out its time limit; also after another replica took the job over. What is not a loss: "not
found" right after sending (an agent slow to save its task), and kagent's runtimes, which answer "not found" to
every `tasks/get` while the turn runs. Real a2a-sdk agents restarted on their own port (tests/support/lost_agent.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from service.config import Settings
from tests.helpers import seed
from tests.support.lost_agent import CALLERLESS, HOLDING, LATE, NAMESPACE, Restartable, restartable_agents
from tests.test_whatif import ended, job_until, service, start, whatif_settings


@pytest.fixture
def agents(database_url: str) -> Iterator[Restartable]:
    with restartable_agents(database_url) as served:
        yield served


@pytest.fixture
async def lclient(settings: Settings, database_url: str, agents: Restartable) -> AsyncIterator[Any]:
    async with service(whatif_settings(settings, agents.a2a_url), database_url) as client:
        yield client


async def _answered(agents: Restartable, pool: asyncpg.Pool, job_id: str, *, marked: bool = False) -> None:
    """Until the agent answered a `tasks/get` of the job's task (and, `marked`, the runner kept that it did, for
    a replica that takes the job over)."""
    deadline = time.monotonic() + 20
    while True:
        async with pool.acquire() as conn:
            row = await conn.fetchrow("SELECT * FROM kagent_fork.whatif_turn WHERE job_id = $1", job_id)
        if row["task_id"] in agents.hold.answered and (not marked or row.get("agent_found_at")):
            return
        assert time.monotonic() < deadline, "the agent was never asked the task"
        await asyncio.sleep(0.05)


def _lines(caplog: pytest.LogCaptureFixture, *words: str) -> list[str]:
    """The service's log lines that hold every word."""
    said = [r.getMessage() for r in caplog.records if r.name.startswith("kagent_fork")]
    return [m for m in said if all(w.lower() in m.lower() for w in words)]


async def _whatif(client: Any, pool: asyncpg.Pool, agent: str, dialect: str) -> tuple[Any, dict[str, Any]]:
    conv = await seed(pool, dialect=dialect, turns=3)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agent_ref": f"{NAMESPACE}/{agent}"}
    r = await start(client, conv.session_id, conv.user_id, body)
    assert r.status_code == 202, r.text
    job: dict[str, Any] = r.json()["data"]["job"]
    return conv, job


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_a_turn_the_restarted_agent_lost_fails_its_branch_within_seconds(
    lclient: Any, pool: asyncpg.Pool, agents: Restartable, caplog: pytest.LogCaptureFixture, dialect: str
) -> None:
    caplog.set_level(logging.INFO, logger="kagent_fork")
    agents.hold.release.clear()
    conv, job = await _whatif(lclient, pool, f"{HOLDING}-{dialect}", dialect)
    await _answered(agents, pool, job["id"])
    agents.restart()  # the agent's pod restarts mid-turn: its new process knows no task
    restarted = time.monotonic()
    done = await job_until(lclient, job["id"], conv.user_id, ended, seconds=30)
    took = time.monotonic() - restarted
    assert done["status"] == "failed", done
    assert done["error"] == f"the agent lost the turn: task {done['task_id']} not found (turn 1)"
    assert took < 8, f"the lost turn was noticed after {took:.1f} s"  # not the 600 s of the time limit
    assert len(_lines(caplog, "not found")) == 1 and len(_lines(caplog, "lost turn 1", done["task_id"])) == 1
    assert agents.hold.seen.messages and not agents.hold.running  # sent once; the new process works on nothing


async def test_a_replica_that_takes_over_a_lost_turn_fails_it_within_seconds(
    settings: Settings,
    database_url: str,
    pool: asyncpg.Pool,
    agents: Restartable,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kagent_fork")
    agents.hold.release.clear()
    config = whatif_settings(settings, agents.a2a_url)
    conv = await seed(pool, dialect="v1", turns=3)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [f"{NAMESPACE}/{HOLDING}-v1"]}
    async with service(config, database_url) as first:
        r = await first.post(
            f"/api/sessions/{conv.session_id}/experiments", json=body, headers={"X-User-Id": conv.user_id}
        )
        assert r.status_code == 202, r.text
        experiment_id = r.json()["data"]["experiment"]["id"]
        async with pool.acquire() as conn:
            job_id = await conn.fetchval(
                "SELECT id FROM kagent_fork.whatif_job WHERE experiment_id = $1", experiment_id
            )
        await _answered(agents, pool, job_id, marked=True)
    # the service was killed and the agent restarted meanwhile: another replica takes the branch over
    agents.restart()
    async with service(config, database_url) as second:
        took_over = time.monotonic()
        deadline = took_over + 30
        while True:
            got = await second.get(f"/api/experiments/{experiment_id}", headers={"X-User-Id": conv.user_id})
            (branch,) = got.json()["data"]["branches"]
            if branch["status"] != "running":
                break
            assert time.monotonic() < deadline, branch
            await asyncio.sleep(0.1)
        took = time.monotonic() - took_over
    assert branch["status"] == "failed" and branch["error"].startswith("the agent lost the turn: task "), branch
    assert [t["state"] for t in branch["turns"]] == ["failed"]
    assert took < 8, f"the lost turn was noticed {took:.1f} s after the takeover"
    assert len(_lines(caplog, "lost turn 1")) == 1 and len(_lines(caplog, "not found")) == 1


@pytest.mark.parametrize("dialect", ["legacy", "v1"])
async def test_an_agent_that_never_finds_its_tasks_is_followed_by_kagents_row(
    lclient: Any, pool: asyncpg.Pool, agents: Restartable, caplog: pytest.LogCaptureFixture, dialect: str
) -> None:
    """kagent's runtimes answer "Task not found" to every tasks/get (they lose the caller), for a turn that runs
    and saves its row: a turn longer than the grace is no loss, and the log says so once."""
    caplog.set_level(logging.INFO, logger="kagent_fork")
    agents.hold.release.clear()
    conv, job = await _whatif(lclient, pool, f"{CALLERLESS}-{dialect}", dialect)
    await asyncio.sleep(4)  # twice the grace, "not found" all along
    assert (await lclient.get(f"/api/whatif/{job['id']}", headers={"X-User-Id": conv.user_id})).json()["data"][
        "status"
    ] == "running"
    agents.hold.release.set()
    done = await job_until(lclient, job["id"], conv.user_id, ended, seconds=30)
    assert done["status"] == "completed", done
    assert len(_lines(caplog, "does not find task", done["task_id"])) == 1 and not _lines(caplog, "lost turn")


async def test_not_found_right_after_sending_is_no_loss(
    lclient: Any, pool: asyncpg.Pool, agents: Restartable, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent that answers "not found", and has written no task row, for its task's first second: waited for."""
    caplog.set_level(logging.INFO, logger="kagent_fork")
    conv, job = await _whatif(lclient, pool, LATE, "v1")
    done = await job_until(lclient, job["id"], conv.user_id, ended, seconds=30)
    assert done["status"] == "completed", done
    assert not _lines(caplog, "lost turn")
