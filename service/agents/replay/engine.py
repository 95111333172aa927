"""The one way to start a replay (a what-if, or an experiment: a what-if is an experiment of one agent). The
road, each step in its room, each room entered once:

1. what is refused before anything is read: one turn named (schemas), kagent's A2A endpoint known
   (answerers), the request's own words (terms: the agents' names, the repeats; the token limit's type);
2. once per Idempotency-Key (`once`, here: the key's lock, a stored answer replayed), then
3. the turn it starts from and what is re-asked (span.start_turn, span.span_of, in a snapshot of its own);
4. what it may cost (gate.gate: the branches' turns and the judge's calls);
5. who answers (answerers.cast: the agents and repeats, their cards and the judge's asked for at once);
6. what their tools may do (tools.arms: each agent's configuration, its servers' tools by class; tools.decide:
   the policy, or the refusal of an arm that could act);
7. the branches written (branches.write: the forks with their jobs, and the answer);
8. the jobs launched (runner), and an experiment's baseline column computed in the background (grid).

Nothing is written before step 7, so every refusal before it leaves nothing behind. A dry run walks steps 3 to 6
and answers what it found (`DryRun`): the refusals of steps 4 and 6 are said in it, not raised.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec

from service.agents.replay import answerers, branches, gate, grid, span, tools
from service.agents.replay.runner import Runner
from service.agents.replay.terms import Replay, whole_tokens
from service.agents.replay.tools import ArmTools, ToolPolicy
from service.errors import Unprocessable
from service.identity import Caller, Seen, settle
from service.kagent.store.agents import agent_row_id
from service.observability import EXPERIMENTS, WHATIF_JOBS
from service.operations import prices
from service.schemas import one_boundary
from service.services import Services


async def start(
    svc: Services,
    runner: Runner,
    caller: Caller,
    replay: Replay,
    key: str | None,
    authorization: str | None,
    seen: Seen | None = None,
) -> tuple[msgspec.Struct | msgspec.Raw, bool]:
    """Check, read, write every branch, launch them: (answer, replayed). `key`: the request's Idempotency-Key;
    `authorization`: its bearer token, sent on to kagent's A2A endpoint (kept in memory only); `seen`: the source's
    access when the door settled it already (a suite's, once for its cases), else settled here, once."""
    one_boundary(replay.invocation_id, replay.task_id, required=True)
    answerers.a2a_base(svc)
    replay.checked()
    whole_tokens(replay.max_context_tokens, 1)
    hdrs = answerers.headers(caller.user_id, authorization)
    if replay.dry_run:
        return await dry_run(svc, caller, replay, hdrs, authorization, seen), False
    async with once(svc, caller, replay.kind, key, replay.digest) as (stored, kept):
        if stored is not None:
            return stored, True
        async with svc.connection() as conn:
            seen = seen or await settle(svc, conn, caller, replay.session_id)
            boundary = await span.start_turn(svc, conn, seen, replay)
            replay = span.with_control(replay, seen.row)
            found = await span.span_of(svc, conn, seen, boundary, replay.turns)
        # The arms' and the judge's rows first, so that each room is entered once: the gates (the context, then
        # the money, which needs the models), then the cards, then the tools.
        own = found.agent_ref  # no agent named: the source's own (answerers.cast refuses one that is not ns/name)
        refs = list(dict.fromkeys(replay.agents if replay.agents is not None else ([own] if own else [])))
        judge = replay.judge.agent if replay.judge else None
        asked = list(dict.fromkeys([*refs, *([judge] if judge else [])]))
        async with svc.connection() as conn:
            rows = await svc.store.agents.get_many(conn, asked)
        ids = {ref: agent_row_id(ref) for ref in refs}
        models = {ref: row.config.model if row.config else None for ref, row in rows.items()}
        gate.gate(svc, replay, found)
        gate.money(
            replay, gate.estimate(replay, found, [ref for ref in refs for _ in range(int(replay.repeats))], models)
        )
        plan, cards = await answerers.cast(svc, replay, found, hdrs)
        classes = await tools.classed(svc, caller, {ref: rows.get(ref) for ref in asked}, authorization)
        arms = {ref: classes[ref] for ref in refs}
        policy = tools.decide(
            tools.policy_of(replay.tools, replay.reads), arms.values(), classes[judge] if judge else None
        )
        written = await branches.write(
            svc, runner, seen,
            [branches.Branch(caller=caller, replay=replay, span=found, agent_ref=ref, agent_id=ids[ref],
                             card=cards[ref], repeat=repeat, policy=policy, tools=arms[ref],
                             judge_card=cards.get(replay.judge.agent) if replay.judge else None)
             for ref, repeat in plan],
            boundary, kept,
        )  # fmt: skip
    for job in written.jobs:
        WHATIF_JOBS.labels("started").inc()
        runner.launch(job, hdrs)
    if written.experiment is not None:
        EXPERIMENTS.labels("started").inc()
        experiment = written.experiment
        runner.chore(grid.keep_source_column(svc, experiment.id, caller.user_id), f"experiment-{experiment.id}-source")
    assert written.answer is not None
    return written.answer, False


class DryRun(msgspec.Struct, frozen=True, kw_only=True):
    """What a start would do, nothing written: its branches and turns, the tokens the cost gate counts (the
    branches' and the judge's), their price where the models are priced (`estimated_usd`, the input side: at
    least that; null when a model's price is unknown, `unpriced` naming whose), each agent's tools by class
    (`arms`), the policy it would run with (`tools`; null when refused) and the refusal it would get (`refused`:
    the cost gate's, `max_usd`'s or the tools'; null when it would start)."""

    dry_run: bool
    branches: int
    turns: int
    estimated_context_tokens: int  # the branches' turns and the judge's calls
    estimated_judge_tokens: int
    estimated_usd: float | None
    estimated_usd_text: str  # as every door prints money (prices.usd_text)
    unpriced: list[str]
    tools: ToolPolicy | None
    arms: list[ArmTools]
    refused: str | None


async def dry_run(
    svc: Services, caller: Caller, replay: Replay, hdrs: dict[str, str], authorization: str | None,
    seen: Seen | None = None,
) -> DryRun:  # fmt: skip
    """The start's road up to the writing, with its two gates' refusals said instead of raised."""
    async with svc.connection() as conn:
        seen = seen or await settle(svc, conn, caller, replay.session_id)
        boundary = await span.start_turn(svc, conn, seen, replay)
        replay = span.with_control(replay, seen.row)
        found = await span.span_of(svc, conn, seen, boundary, replay.turns)
    refused: list[str] = []
    try:
        gate.gate(svc, replay, found)
    except Unprocessable as exc:
        refused.append(exc.message)
    plan, _ = await answerers.cast(svc, replay, found, hdrs)
    judge = replay.judge.agent if replay.judge else None
    async with svc.connection() as conn:
        models = await grid.models(svc, conn, [*(ref for ref, _ in plan), judge])
    cost = gate.estimate(replay, found, [ref for ref, _ in plan], models)
    try:
        gate.money(replay, cost)
    except Unprocessable as exc:
        refused.append(exc.message)
    classes = await tools.arms(svc, caller, [*(ref for ref, _ in plan), *([judge] if judge else [])], authorization)
    arms = {ref: classes[ref] for ref, _ in plan}
    policy: ToolPolicy | None = None
    try:
        policy = tools.decide(
            tools.policy_of(replay.tools, replay.reads), arms.values(), classes[judge] if judge else None
        )
    except Unprocessable as exc:
        refused.append(exc.message)
    return DryRun(
        dry_run=True, branches=replay.branches, turns=len(found.turns),
        estimated_context_tokens=cost.tokens, estimated_judge_tokens=cost.judge_tokens, estimated_usd=cost.usd,
        estimated_usd_text=prices.usd_text(cost.usd), unpriced=cost.unpriced, tools=None if refused else policy,
        arms=list(arms.values()), refused=" ".join(refused) or None,
    )  # fmt: skip


@asynccontextmanager
async def once(
    svc: Services, caller: Caller, kind: str, idempotency_key: str | None, digest: str
) -> AsyncIterator[tuple[msgspec.Raw | None, tuple[str, str] | None]]:
    """A start run once per Idempotency-Key and request (`digest`): the block gets the first answer, stored, to
    replay; or None and the (key, digest) under which its last transaction keeps its own. Retries of one key wait
    on its lock, held on a lock connection meanwhile; the block takes and returns its own request connections."""
    if idempotency_key is None:
        yield None, None
        return
    key = f"{kind}:{idempotency_key}"
    # The key's lock lives on a lock connection (Services.key_lock), never on a request connection: the block
    # takes request connections one at a time, so no burst of keyed starts can hold them all while waiting.
    async with svc.key_lock(f"{kind}:{caller.user_id}", idempotency_key):
        async with svc.connection() as conn:
            stored = await svc.store.lineage.idempotent_answer(
                conn, caller.user_id, key, svc.settings.idempotency_ttl_seconds
            )
        if stored is not None:
            if stored[0] != digest:
                raise Unprocessable("Idempotency-Key was already used with a different request")
            yield msgspec.Raw(stored[1].encode()), None
            return
        yield None, (key, digest)
