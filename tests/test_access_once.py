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
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import TypeVar

import asyncpg
import msgspec
import pytest

from service.agents import experiments, whatif
from service.branches import turns
from service.config import Settings
from service.identity import Caller, settle
from service.kagent.store import Store
from service.operations import forking, plan, rewind
from service.schemas import ForkedSession, ForkRequest, RewindRequest
from service.services import Services, open_lock_pool
from tests.helpers import new_user, seed
from tests.support.a2a_agent import LEGACY, NAMESPACE, Seen, running_agents
from tests.support.conversations import Conversation, create_share

T = TypeVar("T")
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

    async def of(self, request: Awaitable[T]) -> T:
        """The request's answer, its queries counted."""
        self.on = True
        try:
            return await request
        finally:
            self.on = False


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
    queries.names[store.tasks.q["tasks_mentioning"]] = "tasks_mentioning"  # the boundary task's search

    async def init(conn: asyncpg.Connection) -> None:
        conn.add_query_logger(queries.log)

    logged = await asyncpg.create_pool(database_url, min_size=1, max_size=4, init=init)
    locks = await open_lock_pool(tight, database_url)
    try:
        yield Services(settings=tight, store=store, pool=logged, locks=locks), queries
    finally:
        await locks.close()
        await logged.close()


@pytest.fixture
async def shared(pool: asyncpg.Pool) -> tuple[Conversation, Caller]:
    """A new conversation, and a caller who comes to it by a share link (its token's query counted too)."""
    conv = await seed(pool, dialect="legacy", turns=3)
    async with pool.acquire() as conn:
        token = await create_share(conn, session_id=conv.session_id, owner=conv.user_id, read_only=False)
    return conv, Caller(user_id=new_user(), share_token=token)


# Once each; the row is not locked (only a rewind locks it).
ONCE = {"share_by_token": 1, "get_session": 1, "lock_session": 0, "runtime_rows_owned": 1, "framework_signals": 1}


async def test_an_experiment_start_settles_its_access_once(
    counted: tuple[Services, Queries], shared: tuple[Conversation, Caller]
) -> None:
    (svc, queries), (conv, caller) = counted, shared
    ref = f"{NAMESPACE}/{LEGACY}"
    req = msgspec.convert(
        {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [ref], "repeats": 2, "turns": 1},
        experiments.ExperimentRequest,
    )
    runner = whatif.Runner(svc=svc)
    try:
        answer, replayed = await queries.of(experiments.start(svc, runner, caller, conv.session_id, req))
        await asyncio.gather(*runner.jobs.values(), return_exceptions=True)
    finally:
        await runner.stop()
    assert not replayed and isinstance(answer, experiments.Started)
    assert len(answer.experiment.branches) == 2  # two branches, two forks: the access settled for both
    assert queries.counted() == ONCE


async def test_a_fork_settles_its_access_once(
    counted: tuple[Services, Queries], shared: tuple[Conversation, Caller]
) -> None:
    (svc, queries), (conv, caller) = counted, shared
    req = ForkRequest(rewind_before_invocation_id=conv.invocation_ids[2])
    assert (await queries.of(forking.fork(svc, caller, conv.session_id, req))).created
    assert queries.counted() == ONCE


async def test_a_listing_settles_its_access_once(
    counted: tuple[Services, Queries], shared: tuple[Conversation, Caller]
) -> None:
    (svc, queries), (conv, caller) = counted, shared
    page = await queries.of(turns.invocations(svc, caller, conv.session_id))
    assert [t.invocation_id for t in page.items] == conv.invocation_ids
    assert queries.counted() == ONCE


async def test_a_start_given_its_settled_access_asks_none_again(
    counted: tuple[Services, Queries], shared: tuple[Conversation, Caller]
) -> None:
    """A door that settled the source's access already (a suite, once for its cases) passes it: the start asks
    none of it again."""
    (svc, queries), (conv, caller) = counted, shared
    async with svc.connection() as conn:
        seen = await settle(svc, conn, caller, conv.session_id)
    req = msgspec.convert(
        {"rewind_before_invocation_id": conv.invocation_ids[1], "agents": [f"{NAMESPACE}/{LEGACY}"], "turns": 1},
        experiments.ExperimentRequest,
    )
    runner = whatif.Runner(svc=svc)
    try:
        answer, _ = await queries.of(experiments.start(svc, runner, caller, conv.session_id, req, seen=seen))
        await asyncio.gather(*runner.jobs.values(), return_exceptions=True)
    finally:
        await runner.stop()
    assert isinstance(answer, experiments.Started)
    assert queries.counted() == dict.fromkeys(COUNTED, 0)


async def test_a_rewind_settles_its_access_once_and_locks_the_row(
    counted: tuple[Services, Queries], shared: tuple[Conversation, Caller]
) -> None:
    (svc, queries), (conv, caller) = counted, shared
    req = RewindRequest(rewind_before_invocation_id=conv.invocation_ids[2])
    done = await queries.of(rewind.rewind(svc, caller, conv.session_id, req))
    assert isinstance(done, rewind.RewindResult) and done.rewind.events_removed > 0
    assert queries.counted() == {**ONCE, "lock_session": 1}  # the row locked, its access not asked again


async def test_a_replays_fork_takes_the_spans_boundary_task_only_unchanged(
    counted: tuple[Services, Queries], shared: tuple[Conversation, Caller]
) -> None:
    """A replay's fork given the boundary task its span found (Into.found) takes it without searching the tasks
    when its snapshot holds it unchanged, and searches when it does not: the same fork either way."""
    (svc, queries), (conv, caller) = counted, shared
    inv = conv.invocation_ids[1]
    async with svc.connection() as conn:
        candidates = await svc.store.tasks.tasks_mentioning(conn, conv.session_id, conv.user_id, inv, prefilter=True)
    found = plan.find_boundary_task(candidates, inv)
    assert found is not None
    stale = dataclasses.replace(found, row=dataclasses.replace(found.row, data=found.row.data + " "))
    req = ForkRequest(rewind_before_invocation_id=inv)
    made = {}
    for name, into in [("searched", None), ("taken", forking.Into(found=found)), ("stale", forking.Into(found=stale))]:
        queries.seen.clear()
        outcome = await queries.of(forking.fork(svc, caller, conv.session_id, req, into=into))
        assert isinstance(outcome.data, ForkedSession)
        info = outcome.data.fork
        made[name] = (info.events_copied, info.tasks_copied, info.messages_copied, info.boundary_found, info.warnings)
        assert queries.seen["tasks_mentioning"] == (0 if name == "taken" else 1), name
    assert made["taken"] == made["searched"] == made["stale"]
