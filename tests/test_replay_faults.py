"""A replay's runner through a database that drops its connections or lends none in time (issue 32, item 5):
the branches' own database steps are run again, every turn is still sent to its agent exactly once, and a branch
fails only for what its agent did. Real PostgreSQL (connections killed with `pg_terminate_backend` from an admin
connection), real a2a-sdk agents."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from service.agents import experiments
from service.agents.replay.runner import Runner
from service.config import Settings
from service.identity import Caller
from service.kagent.store import Store
from service.services import Services, open_lock_pool
from tests.helpers import named_connections, seed
from tests.support.a2a_agent import FORGETFUL, NAMESPACE, V1, Seen, running_agents
from tests.test_experiments import texts
from tests.test_whatif import service, whatif_settings

# The service's own connections, told apart from the agents' (which write the turns) and the test's.
APPLICATION = "kagent-fork-replay-faults"


@pytest.fixture(scope="module")
def agents(database_url: str) -> Iterator[tuple[str, Seen]]:
    with running_agents(database_url) as served:
        yield served


async def _kill_the_service(admin: asyncpg.Connection, times: int, every: float) -> int:
    """Terminate every backend of the service, `times` times, `every` seconds apart: how many were killed."""
    killed = 0
    for _ in range(times):
        killed += await admin.fetchval(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1 AND pid <> pg_backend_pid()",
            APPLICATION,
        )
        await asyncio.sleep(every)
    return killed


async def _grid(client: Any, experiment_id: str, user: str, seconds: float = 90) -> dict[str, Any]:
    """The experiment once it ended; a read that meets the database away answers 503, and is asked again."""
    deadline = time.monotonic() + seconds
    while True:
        r = await client.get(f"/api/experiments/{experiment_id}", headers={"X-User-Id": user})
        assert r.status_code in (200, 503), r.text
        if r.status_code == 200 and r.json()["data"]["status"] != "running":
            data: dict[str, Any] = r.json()["data"]
            return data
        assert time.monotonic() < deadline, r.text[:2000]
        await asyncio.sleep(0.2)


async def test_a_brief_connection_loss_fails_no_branch(
    settings: Settings, server_url: str, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    """Eight kills of every service connection, 0.4 s apart, during a six-branch experiment: before the fix,
    every branch failed "internal error: ConnectionDoesNotExistError"; now each completes, each turn sent once."""
    a2a_url, seen = agents
    conv = await seed(pool, dialect="v1", turns=5)
    dsn = named_connections(database_url, APPLICATION)
    body = {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [f"{NAMESPACE}/{V1}",
            f"{NAMESPACE}/{FORGETFUL}"], "repeats": 3, "turns": "all"}  # fmt: skip
    admin = await asyncpg.connect(server_url)
    try:
        async with service(whatif_settings(settings, a2a_url), dsn) as client:
            r = await client.post(
                f"/api/sessions/{conv.session_id}/experiments", json=body, headers={"X-User-Id": conv.user_id}
            )
            assert r.status_code == 202, r.text
            experiment_id = r.json()["data"]["experiment"]["id"]
            assert await _kill_the_service(admin, 8, 0.4) > 0
            done = await _grid(client, experiment_id, conv.user_id)
    finally:
        await admin.close()
    questions = [[t.user_text] for t in conv.turns[1:]]
    assert done["status"] == "completed", done
    assert len(done["branches"]) == 6
    for branch in done["branches"]:
        assert branch["status"] == "completed" and branch["error"] is None, branch["error"]
        assert [t["state"] for t in branch["turns"]] == ["completed"] * 4
        got = [m for m in seen.messages if m.context_id == branch["session_id"]]
        assert [texts(m) for m in got] == questions  # every turn sent exactly once, in order


async def test_a_pool_that_lends_no_connection_in_time_fails_no_branch(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> None:
    """Every pooled connection held by others for a while (the runner's steps get 503 "busy" after
    DB_POOL_WAIT_SECONDS): the steps wait it out, and the branches complete, each turn sent once."""
    a2a_url, seen = agents
    tight = dataclasses.replace(whatif_settings(settings, a2a_url), pool_max_size=2, db_pool_wait_seconds=0.1)
    small = await asyncpg.create_pool(database_url, min_size=2, max_size=2)
    locks = await open_lock_pool(tight, database_url)
    svc = Services(settings=tight, store=Store(tight.service_schema), pool=small, locks=locks)
    runner = Runner(svc=svc)
    try:
        conv = await seed(pool, dialect="v1", turns=4)
        req = experiments.ExperimentRequest(
            rewind_before_invocation_id=conv.invocation_ids[1], agents=[f"{NAMESPACE}/{V1}"], repeats=2, turns="all"
        )
        started, _ = await experiments.start(svc, runner, Caller(user_id=conv.user_id), conv.session_id, req)
        assert isinstance(started, experiments.Started)
        # Both connections taken from the pool and held for 1.5 s while the branches run.
        held = [await small.acquire(), await small.acquire()]
        await asyncio.sleep(1.5)
        for conn in held:
            await small.release(conn)
        async with asyncio.timeout(60):
            await asyncio.gather(*runner.jobs.values())
        grid = await experiments.get(svc, Caller(user_id=conv.user_id), started.experiment.id)
    finally:
        await runner.stop()
        await locks.close()
        await small.close()
    assert grid.status == "completed"
    for branch in grid.branches:
        assert branch.status == "completed" and branch.error is None, branch.error
        assert [t.state for t in branch.turns] == ["completed"] * 3
        got = [m for m in seen.messages if m.context_id == branch.session_id]
        assert [texts(m) for m in got] == [[t.user_text] for t in conv.turns[1:]]
