"""Experiments: one continuation replayed on several agents at once, laid out side by side with the source.

An experiment is a group of what-if jobs (its branches), one per agent and repeat. This module says what to
replay and hands it to the replay engine (service/agents/replay/: the span read once, the cost gate over every
branch and turn, every agent's card, then the forks one after another, the experiment row in the first fork's
transaction and each branch's job in its own fork's); reading one is the grid (replay/grid.py, replay/table.py),
cancelling one the replay's one cancel (replay/jobs.py), with its judgment's (replay/judge.py); judging one
again the judge's plan, gated and written at once.
"""

from __future__ import annotations

from typing import Annotated, Literal

import asyncpg
import msgspec
from msgspec import Meta

from service.agents.replay import engine, gate, grid, jobs, judge, listing, tools
from service.agents.replay.answerers import a2a_base, headers
from service.agents.replay.engine import DryRun
from service.agents.replay.judge import JudgeSpec
from service.agents.replay.runner import Runner
from service.agents.replay.table import markdown
from service.agents.replay.terms import (
    Count,
    Dollars,
    JudgeRef,
    MessageEdit,
    Replay,
    Tokens,
    TurnCount,
    whole_tokens,
)
from service.agents.replay.tools import Reads, ToolPolicy, ToolsField
from service.errors import Conflict, NotFound, Unprocessable
from service.identity import Caller, Seen, visible_session
from service.kagent.store.judgments import Vote
from service.schemas import Text
from service.services import Services

__all__ = [
    "DryRun", "ExperimentRequest", "JudgeRequest", "Started", "VoteRequest", "cancel", "get", "judge_experiment",
    "markdown", "of_session", "start", "vote",
]  # fmt: skip
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
    max_usd: Dollars | None = None  # refuse a start whose estimated price (judge included) is over it
    repeats: Count = 1
    on_approval: Literal["stop", "reject"] = "stop"
    tools: ToolsField | None = None  # what the agents' tools do: "replay", "live" or {mode, reads}
    reads: Reads | None = None
    dry_run: bool = False  # what it would do, each agent's tools by class; nothing written
    judge: JudgeSpec | None = None
    # The source's own agent added as an arm (if not named already): its verdict against the source is the noise
    # floor, what the same agent run again scores against itself.
    control: bool = False


async def start(
    svc: Services, runner: Runner, caller: Caller, session_id: str, req: ExperimentRequest, *,
    idempotency_key: str | None = None, authorization: str | None = None, seen: Seen | None = None,
) -> tuple[Started | DryRun | msgspec.Raw, bool]:  # fmt: skip
    """Check everything, write every branch's fork and job, start them: (answer, replayed); or, as a dry run,
    what it would do (DryRun). `seen`: the source's access, when the caller settled it already (identity.settle:
    a suite, once for the cases of one session); else the engine settles it, once."""
    digest = _encoder.encode([session_id, req]).hex()  # what a retry under the same Idempotency-Key sends again
    replay = Replay(
        kind="experiment", session_id=session_id, digest=digest, invocation_id=req.rewind_before_invocation_id,
        task_id=req.rewind_before_task_id, agents=req.agents, repeats=req.repeats, turns=req.turns,
        message=req.message, name=req.name, max_context_tokens=req.max_context_tokens, max_usd=req.max_usd,
        on_approval=req.on_approval,
        tools=req.tools, reads=req.reads, dry_run=req.dry_run, control=req.control,
        judge=JudgeRef(agent=req.judge.agent, criteria=req.judge.criteria) if req.judge else None,
    )  # fmt: skip
    answer, replayed = await engine.start(svc, runner, caller, replay, idempotency_key, authorization, seen)
    assert isinstance(answer, Started | DryRun | msgspec.Raw)
    return answer, replayed


async def get(svc: Services, caller: Caller, experiment_id: str) -> grid.Experiment:
    async with svc.connection() as conn:
        return await grid.experiment(svc, conn, caller, experiment_id)


async def of_session(svc: Services, caller: Caller, session_id: str) -> list[listing.Listed]:
    async with svc.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        source, _ = await visible_session(svc, conn, caller, session_id)
        rows = await svc.store.experiments.experiments(conn, source.id, source.user_id, caller.user_id)
        judging = await svc.store.judgments.being_judged(conn, [r.id for r in rows])
        out = []
        for r in rows:  # a source's experiments are few: each one's agents, judge and outcome read in turn
            found = await svc.store.judgments.of_experiment(conn, r.id)
            latest = found[-1] if found else None
            calls = await svc.store.judgments.calls(conn, latest.id) if latest else []
            jobs_ = await svc.store.experiments.branches(conn, r.id)
            out.append(listing.listed(r, r.id in judging, jobs_, latest, calls))
    return out


async def cancel(
    svc: Services, caller: Caller, experiment_id: str, authorization: str | None = None
) -> grid.Experiment:
    """Cancel every running branch (its A2A task too) and its judgment while it waits or runs (the judge's
    tasks too); 409 when the experiment ended and is not being judged."""
    async with svc.connection() as conn:
        row = await svc.store.experiments.experiment(conn, experiment_id, caller.user_id)
        if row is None:
            raise NotFound(f"experiment {experiment_id} not found")
        branches = await svc.store.experiments.branches(conn, row.id)
        open_ = [j for j in await svc.store.judgments.of_experiment(conn, row.id) if j.status in judge.OPEN]
        ran = await jobs.cancel(svc, conn, caller, branches, row.id, authorization)
        judging = await judge.cancel(svc, conn, open_)
        if not ran and not judging:
            raise Conflict(f"experiment {experiment_id} already ended ({row.status})")
    await judge.cancel_tasks(svc, judging, headers(caller.user_id, authorization))
    async with svc.connection() as conn:
        return await grid.experiment(svc, conn, caller, experiment_id)


class JudgeRequest(JudgeSpec, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """POST /api/experiments/{id}/judge: the judge, the caller's criteria, and the gate's limit for its calls."""

    max_context_tokens: Tokens | None = None


async def judge_experiment(
    svc: Services, runner: Runner, caller: Caller, experiment_id: str, req: JudgeRequest,
    authorization: str | None = None,
) -> grid.Experiment:  # fmt: skip
    """Judge an experiment that ended (again, with another judge or criteria: each judgment is kept). Its calls
    are planned and gated now, written with it, and run by this replica's runner."""
    req.checked()
    a2a_base(svc)
    limit = whole_tokens(req.max_context_tokens, svc.settings.whatif_max_context_tokens)
    async with svc.connection() as conn:
        row = await svc.store.experiments.experiment(conn, experiment_id, caller.user_id)
        if row is None:
            raise NotFound(f"experiment {experiment_id} not found")
        if row.status == "running":
            raise Conflict(f"experiment {experiment_id} is running: it is judged once its branches ended")
        if any(j.status in judge.OPEN for j in await svc.store.judgments.of_experiment(conn, row.id)):
            raise Conflict(f"experiment {experiment_id} is being judged: cancel it first, or wait")
        branches = await svc.store.experiments.branches(conn, row.id)
    hdrs = headers(caller.user_id, authorization)
    dialect = branches[0].dialect if branches else "v1"
    card = await judge.judge_card(svc, req, dialect, hdrs)
    # The judge may act only where the experiment said live (its stored policy), as at the start.
    stored = msgspec.json.decode(row.tool_policy, type=ToolPolicy) if row.tool_policy else None
    tools.judge_may_not_act(await tools.arm_tools(svc, caller, req.agent, authorization), stored)
    new = judge.judgment_row(row.id, caller.user_id, req, card, dialect, "running", runner.id)
    async with svc.connection() as conn:
        calls = await judge.plan(svc, conn, row, branches, new.id, req.criteria)
    tokens = gate.message_tokens(calls)
    if tokens > limit:
        raise Unprocessable(
            f"the judge's {len(calls)} calls send about {tokens} tokens, over the limit of {limit}: judge fewer "
            "branches, or raise the limit (max_context_tokens in the request; the service's default is "
            "WHATIF_MAX_CONTEXT_TOKENS)"
        )
    async with svc.connection() as conn:
        try:
            async with conn.transaction():
                # One at a time with a discard of the same experiment (discard.py locks the row too).
                if await svc.store.experiments.locked_experiment(conn, row.id, caller.user_id) is None:
                    raise NotFound(f"experiment {experiment_id} not found")
                await svc.store.judgments.insert(conn, new)
                await svc.store.judgments.insert_calls(conn, new.id, runner.id, calls)
        except asyncpg.UniqueViolationError:
            raise Conflict(f"experiment {experiment_id} is being judged: cancel it first, or wait") from None
    runner.launch_judgment(new, hdrs)
    async with svc.connection() as conn:
        return await grid.experiment(svc, conn, caller, experiment_id)


class VotedPair(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A pair as the verdict names it: `a` a branch's job (None: the source's own continuation), `b` a branch's."""

    a: Text | None
    b: Text


class VoteRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """POST /api/experiments/{id}/votes: a person's blind vote on one pair, said after the names were hidden."""

    pair: VotedPair
    winner: Literal["a", "b", "tie"]


async def vote(svc: Services, caller: Caller, experiment_id: str, req: VoteRequest) -> grid.Experiment:
    """Keep a person's vote on a pair the judge would compare (a voter's latest on a pair replaces their earlier
    one): anyone who can read the experiment's source (its owner, a share link's reader) votes, each voter's votes
    kept apart. 404 for one who cannot (as for a missing experiment), 409 while the experiment runs, 422 for a
    pair it does not have. Answers the grid (as its creator sees it: the voter can read the source it continues)."""
    async with svc.connection() as conn:
        row = await svc.store.experiments.experiment_to_vote(conn, experiment_id)
        if row is None:
            raise NotFound(f"experiment {experiment_id} not found")
        if row.user_id != caller.user_id:
            try:  # the source as the caller may read it: its owner, or a share link's reader
                await visible_session(svc, conn, caller, row.source_session_id)
            except NotFound:
                raise NotFound(f"experiment {experiment_id} not found") from None
        if row.status == "running":
            raise Conflict(f"experiment {experiment_id} is running: vote once its branches ended")
        pairs = {(left.id if left else None, right.id) for left, right in judge.pairs(
            await svc.store.experiments.branches(conn, row.id))}  # fmt: skip
        if (req.pair.a, req.pair.b) not in pairs:
            raise Unprocessable("pair must name two of the experiment's completed branches (a null: the source), as "
                                "its verdict's pairs do")  # fmt: skip
        winner = {"a": "left", "b": "right"}.get(req.winner, "tie")
        await svc.store.judgments.vote(
            conn, row.id, Vote(user_id=caller.user_id, left_job=req.pair.a or "", right_job=req.pair.b, winner=winner)
        )
        return await grid.experiment(svc, conn, Caller(user_id=row.user_id), experiment_id)
