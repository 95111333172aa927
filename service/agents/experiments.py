"""Experiments: one continuation replayed on several agents at once, laid out side by side with the source.

An experiment is a group of what-if jobs (its branches), one per agent and repeat. This module says what to
replay and hands it to the replay engine (service/agents/replay/: the span read once, the cost gate over every
branch and turn, every agent's card, then the forks one after another, the experiment row in the first fork's
transaction and each branch's job in its own fork's); reading one is the grid (replay/grid.py, replay/table.py),
cancelling one the replay's one cancel (replay/jobs.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from service.agents.replay import engine, grid, jobs
from service.agents.replay.engine import DryRun
from service.agents.replay.runner import Runner
from service.agents.replay.table import markdown
from service.agents.replay.terms import Count, MessageEdit, Replay, Tokens, TurnCount
from service.agents.replay.tools import Reads, ToolsField
from service.errors import Conflict, NotFound
from service.identity import Caller, visible_session
from service.schemas import Text
from service.services import Services

__all__ = ["DryRun", "ExperimentRequest", "Started", "cancel", "get", "markdown", "of_session", "start"]
Started = grid.Started
_encoder = msgspec.json.Encoder()


class ExperimentRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    rewind_before_invocation_id: Text | None = None
    rewind_before_task_id: Text | None = None
    # Their count, their distinctness and repeats are checked by the engine (answerers: 422, as the contract asks).
    agents: Annotated[list[Text], Meta(max_length=64)] | None = None
    turns: TurnCount = 1
    message: MessageEdit | None = None
    name: Text | None = None
    max_context_tokens: Tokens | None = None
    repeats: Count = 1
    on_approval: Literal["stop", "reject"] = "stop"
    tools: ToolsField | None = None  # what the agents' tools do: "replay", "live" or {mode, reads}
    reads: Reads | None = None
    dry_run: bool = False  # what it would do, each agent's tools by class; nothing written


async def start(
    svc: Services, runner: Runner, caller: Caller, session_id: str, req: ExperimentRequest, *,
    idempotency_key: str | None = None, authorization: str | None = None,
) -> tuple[Started | DryRun | msgspec.Raw, bool]:  # fmt: skip
    """Check everything, write every branch's fork and job, start them: (answer, replayed); or, as a dry run,
    what it would do (DryRun)."""
    digest = _encoder.encode([session_id, req]).hex()  # what a retry under the same Idempotency-Key sends again
    replay = Replay(
        kind="experiment", session_id=session_id, digest=digest, invocation_id=req.rewind_before_invocation_id,
        task_id=req.rewind_before_task_id, agents=req.agents, repeats=req.repeats, turns=req.turns,
        message=req.message, name=req.name, max_context_tokens=req.max_context_tokens, on_approval=req.on_approval,
        tools=req.tools, reads=req.reads, dry_run=req.dry_run,
    )  # fmt: skip
    answer, replayed = await engine.start(svc, runner, caller, replay, idempotency_key, authorization)
    assert isinstance(answer, Started | DryRun | msgspec.Raw)
    return answer, replayed


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
        branches = await svc.store.experiments.branches(conn, row.id)
        if not await jobs.cancel(svc, conn, caller, branches, row.id, authorization):
            raise Conflict(f"experiment {experiment_id} already ended ({row.status})")
        return await grid.experiment(svc, conn, caller, experiment_id)
