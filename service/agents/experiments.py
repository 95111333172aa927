"""Experiments: one continuation replayed on several agents at once, laid out side by side with the source.

An experiment is a group of what-if jobs (its branches), one per agent and repeat, each a fork before the
boundary turn into its agent that re-asks the source's later user messages in order (service/agents/
runner.py plays them). Starting one reads the span of source turns once, applies the cost gate over every
branch and turn, asks every agent's card, and only then writes: the forks one after another, the
experiment row in the first fork's transaction and each branch's job in its own fork's. Reading one
lays out the grid (service/agents/grid.py): the source's own turns over the same span, a column per
branch, totals, and per agent when there are repeats.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from service.agents import grid, whatif
from service.agents.runner import Runner, headers
from service.errors import Conflict, NotFound, ServiceError, Unprocessable
from service.identity import Caller, visible_session
from service.kagent.store.base import Connection
from service.kagent.store.experiments import ExperimentRow
from service.kagent.store.jobs import WhatifJob
from service.observability import EXPERIMENTS, WHATIF_JOBS
from service.operations import forking
from service.schemas import ForkedSession, Text
from service.services import Services

MAX_BRANCHES = 8
MAX_REPEATS = 5
_encoder = msgspec.json.Encoder()


class ExperimentRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    rewind_before_invocation_id: Text | None = None
    rewind_before_task_id: Text | None = None
    # Their count, their distinctness and repeats are checked in _agents (422, as the contract asks).
    agents: Annotated[list[Text], Meta(max_length=64)] | None = None
    turns: whatif.TurnCount = 1
    message: whatif.MessageEdit | None = None
    name: Text | None = None
    max_context_tokens: whatif.Tokens | None = None
    repeats: whatif.Count = 1
    on_approval: Literal["stop", "reject"] = "stop"


class Started(msgspec.Struct, frozen=True, kw_only=True):
    experiment: grid.Experiment


def _agents(req: ExperimentRequest, source_agent: str | None) -> list[str]:
    if req.agents is not None and not req.agents:
        raise Unprocessable("agents must name 1 to 8 agents (namespace/name), got an empty list")
    repeats = whatif.whole(req.repeats, "repeats")
    if not 1 <= repeats <= MAX_REPEATS:
        raise Unprocessable(f"repeats must be 1 to {MAX_REPEATS}, got {repeats}")
    agents = req.agents if req.agents is not None else ([source_agent] if source_agent else [])
    if not agents:
        raise Unprocessable("agents: the source session's agent is not namespace/name: name the agents")
    for ref in agents:
        whatif.checked_agent_ref(ref, "each of agents")
    twice = sorted({a for a in agents if agents.count(a) > 1})
    if twice:
        raise Unprocessable(f"agents names {', '.join(twice)} more than once (use repeats to run an agent again)")
    if len(agents) * repeats > MAX_BRANCHES:
        raise Unprocessable(
            f"{len(agents)} agents x {repeats} repeats is {len(agents) * repeats} branches, over {MAX_BRANCHES}"
        )
    return agents


async def start(
    svc: Services,
    runner: Runner,
    caller: Caller,
    session_id: str,
    req: ExperimentRequest,
    *,
    idempotency_key: str | None = None,
    authorization: str | None = None,
) -> tuple[Started | msgspec.Raw, bool]:
    """Check everything, write every branch's fork and job, start them: (answer, replayed)."""
    # The shape of the agents' list is checked before anything is read.
    boundary = await whatif.begin(svc, caller, session_id, req, lambda: req.agents is None or _agents(req, None))
    req = msgspec.structs.replace(
        req, rewind_before_invocation_id=boundary.invocation_id, rewind_before_task_id=boundary.task_id
    )
    digest = _encoder.encode([session_id, req]).hex()
    return await whatif.once(
        svc, caller, "experiment", idempotency_key, digest,
        lambda idempotency: _checked_start(svc, runner, caller, session_id, req, boundary, idempotency, authorization),
    )  # fmt: skip


async def _checked_start(
    svc: Services,
    runner: Runner,
    caller: Caller,
    session_id: str,
    req: ExperimentRequest,
    boundary: whatif.Boundary,
    idempotency: tuple[str, str] | None,
    authorization: str | None,
) -> Started:
    async with svc.connection() as conn:
        span = await whatif.span_of(svc, conn, caller, session_id, boundary, req.turns)
    agents = _agents(req, span.agent_ref)
    repeats = int(req.repeats)
    branches = [(ref, repeat) for ref in agents for repeat in range(1, repeats + 1)]
    whatif.gate(
        span, len(branches), whatif.whole_tokens(req.max_context_tokens, svc.settings.whatif_max_context_tokens)
    )
    rate = svc.settings.fork_rate_per_minute
    if rate and len(branches) > rate:
        raise Unprocessable(f"{len(branches)} branches need {len(branches)} forks, over FORK_RATE_PER_MINUTE ({rate})")
    hdrs = headers(caller.user_id, authorization)
    cards = await whatif.cards(svc, agents, span.dialect, hdrs)
    row = ExperimentRow(
        id=str(uuid.uuid4()), user_id=caller.user_id, source_session_id=span.source.id,
        source_user_id=span.source.user_id, source_agent_ref=span.agent_ref,
        rewind_before_invocation_id=boundary.invocation_id, rewind_before_task_id=boundary.task_id,
        turns_requested="all" if req.turns == "all" else str(int(req.turns)), turns=len(span.turns),
        message=_encoder.encode(req.message).decode() if req.message else None, on_approval=req.on_approval,
        repeats=repeats, source_turns=None, status="running", created_at=datetime.min, finished_at=None,
    )  # fmt: skip
    fork_req = boundary.fork_request(None)
    jobs: list[WhatifJob] = []
    forks: list[ForkedSession] = []
    for ref, repeat in branches:
        branch = whatif.Branch(
            caller=caller, span=span, agent_ref=ref, card=cards[ref],
            message_text=req.message.text if req.message else None, on_approval=req.on_approval,
            experiment_id=row.id, repeat=repeat,
        )  # fmt: skip
        last = len(jobs) == len(branches) - 1

        async def write(
            conn: Connection, fork: ForkedSession, branch: whatif.Branch = branch, last: bool = last
        ) -> None:
            if not jobs:
                await svc.store.experiments.insert_experiment(conn, row)
            jobs.append(await whatif.write_branch(svc, conn, runner, branch, fork))
            forks.append(fork)
            if last and idempotency is not None:
                answer = Started(experiment=await grid.experiment(svc, conn, caller, row.id, live=False))
                await svc.store.lineage.remember_answer(
                    conn, user_id=caller.user_id, key=idempotency[0], request_hash=idempotency[1], session_id=fork.id,
                    answer=_encoder.encode(answer).decode(), ttl_seconds=svc.settings.idempotency_ttl_seconds,
                )  # fmt: skip

        name = req.name or whatif.default_name(span, ref, repeat if repeats > 1 else None)
        try:
            await forking.fork(
                svc,
                caller,
                session_id,
                msgspec.structs.replace(fork_req, name=name),
                into=forking.Into(agent_id=whatif.agent_id_of(ref), then=write),
            )
        except ServiceError as exc:
            if not jobs:
                raise
            await _abandon(svc, runner, jobs, f"the experiment could not make every branch's fork: {exc.message}")
            raise
    EXPERIMENTS.labels("started").inc()
    for job in jobs:
        WHATIF_JOBS.labels("started").inc()
        runner.launch(job, hdrs)
    runner.chore(grid.keep_source_column(svc, row.id, caller.user_id), f"experiment-{row.id}-source")
    async with svc.connection() as conn:
        return Started(experiment=await grid.experiment(svc, conn, caller, row.id, live=False))


async def _abandon(svc: Services, runner: Runner, jobs: list[WhatifJob], reason: str) -> None:
    """Branches whose forks were written before a later fork failed: failed, never started."""
    for job in jobs:
        await runner.finish(job, "failed", reason)


async def get(svc: Services, caller: Caller, experiment_id: str) -> grid.Experiment:
    async with svc.connection() as conn:
        return await grid.experiment(svc, conn, caller, experiment_id)


async def of_session(svc: Services, caller: Caller, session_id: str) -> list[grid.Listed]:
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, _ = await visible_session(svc, conn, caller, session_id)
        rows = await svc.store.experiments.experiments(conn, source.id, source.user_id, caller.user_id)
    return [grid.listed(r) for r in rows]


async def cancel(
    svc: Services, caller: Caller, experiment_id: str, authorization: str | None = None
) -> grid.Experiment:
    """Cancel every running branch (its A2A task too); 409 when the experiment already ended."""
    async with svc.connection() as conn:
        row = await svc.store.experiments.experiment(conn, experiment_id, caller.user_id)
        if row is None:
            raise NotFound(f"experiment {experiment_id} not found")
        # Every branch marked and the experiment settled first, in one transaction: a runner that sees its
        # agent's task cancelled then finds its job and the experiment ended already, and a branch that ends
        # meanwhile cannot settle the experiment as completed between the marks and the settling.
        async with conn.transaction():
            cancelled = [
                j
                for j in await svc.store.experiments.branches(conn, row.id)
                if await whatif.mark_cancelled(svc, conn, j)
            ]
            if not cancelled:
                raise Conflict(f"experiment {experiment_id} already ended ({row.status})")
            settled = await svc.store.experiments.settle(conn, row.id, "cancelled")
        if settled is not None:
            EXPERIMENTS.labels("cancelled").inc()
        hdrs = headers(caller.user_id, authorization)
        for job in cancelled:
            await whatif.cancel_task(svc, job, hdrs)
        return await grid.experiment(svc, conn, caller, experiment_id)
