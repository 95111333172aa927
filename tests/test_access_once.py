"""A session's access is settled once per operation, at its door (issue 48, identity.settle): the queries of one
experiment start (two agents, so two forks), one fork and one turn listing are counted as PostgreSQL gets them
(asyncpg's query logger on every pooled connection), and the access queries (the share token's, the session
row's), the ownership check of the rows under kagent's default user (runtime_rows_owned) and the framework's
signals run once each. Real PostgreSQL, real a2a-sdk agents; the callers come by a share link, so that the share
token's query is counted too."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import asyncpg
import msgspec
import pytest

from service.agents import experiments, whatif
from service.branches import turns
from service.config import Settings
from service.identity import Caller
from service.kagent.store import Store
from service.operations import forking
from service.schemas import ForkRequest
from service.services import Services, open_lock_pool
from tests.helpers import new_user, seed
from tests.support.a2a_agent import LEGACY, NAMESPACE, Seen, running_agents
from tests.support.conversations import create_share

COUNTED = ("share_by_token", "get_session", "lock_session", "runtime_rows_owned", "framework_signals")


@dataclasses.dataclass
class Queries:
    """The statements the pool's connections ran, by the store's name for them (COUNTED), while `on`."""

    names: dict[str, str]
    seen: Counter[str] = dataclasses.field(default_factory=Counter)
    on: bool = False

    def log(self, query: asyncpg.connection.LoggedQuery) -> None:
        if self.on and (name := self.names.get(query.query)) is not None:
            self.seen[name] += 1

    def counted(self) -> dict[str, int]:
        return {name: self.seen[name] for name in COUNTED}


@pytest.fixture(scope="module")
def agents(database_url: str) -> Iterator[tuple[str, Seen]]:
    with running_agents(database_url) as served:
        yield served


@pytest.fixture
async def counted(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen]
) -> AsyncIterator[tuple[Services, Queries]]:
    tight = dataclasses.replace(settings, kagent_a2a_url=agents[0], whatif_heartbeat_seconds=0.2)
    store = Store(tight.service_schema)
    queries = Queries(names={store.sessions.q[name]: name for name in COUNTED})

    async def init(conn: asyncpg.Connection) -> None:
        conn.add_query_logger(queries.log)

    logged = await asyncpg.create_pool(database_url, min_size=1, max_size=4, init=init)
    locks = await open_lock_pool(tight, database_url)
    try:
        yield Services(settings=tight, store=store, pool=logged, locks=locks), queries
    finally:
        await locks.close()
        await logged.close()


async def _shared(pool: asyncpg.Pool, owner: str, session_id: str) -> Caller:
    async with pool.acquire() as conn:
        token = await create_share(conn, session_id=session_id, owner=owner, read_only=False)
    return Caller(user_id=new_user(), share_token=token)


ONCE = {name: 1 for name in ("share_by_token", "get_session", "runtime_rows_owned", "framework_signals")}


async def test_an_experiment_start_settles_its_access_once(
    pool: asyncpg.Pool, counted: tuple[Services, Queries]
) -> None:
    svc, queries = counted
    conv = await seed(pool, dialect="legacy", turns=3)
    caller = await _shared(pool, conv.user_id, conv.session_id)
    ref = f"{NAMESPACE}/{LEGACY}"
    req = msgspec.convert(
        {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref], "repeats": 2, "turns": 1},
        experiments.ExperimentRequest,
    )
    runner = whatif.Runner(svc=svc)
    try:
        queries.on = True
        answer, replayed = await experiments.start(svc, runner, caller, conv.session_id, req)
        queries.on = False
        await asyncio.gather(*runner.jobs.values(), return_exceptions=True)
    finally:
        await runner.stop()
    assert not replayed and isinstance(answer, experiments.Started)
    assert len(answer.experiment.branches) == 2  # two branches, two forks: the access settled for both
    assert queries.counted() == {**ONCE, "lock_session": 0}


async def test_a_fork_settles_its_access_once(pool: asyncpg.Pool, counted: tuple[Services, Queries]) -> None:
    svc, queries = counted
    conv = await seed(pool, dialect="legacy", turns=3)
    caller = await _shared(pool, conv.user_id, conv.session_id)
    queries.on = True
    outcome = await forking.fork(
        svc, caller, conv.session_id, ForkRequest(rewind_before_invocation_id=conv.invocation_ids[2])
    )
    queries.on = False
    assert outcome.created
    assert queries.counted() == {**ONCE, "lock_session": 0}


async def test_a_listing_settles_its_access_once(pool: asyncpg.Pool, counted: tuple[Services, Queries]) -> None:
    svc, queries = counted
    conv = await seed(pool, dialect="legacy", turns=3)
    caller = await _shared(pool, conv.user_id, conv.session_id)
    queries.on = True
    page = await turns.invocations(svc, caller, conv.session_id)
    queries.on = False
    assert [t.invocation_id for t in page.items] == conv.invocation_ids
    assert queries.counted() == {**ONCE, "lock_session": 0}
