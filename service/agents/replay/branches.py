"""Writing a replay's branches: for each (agent, repeat), the fork operation itself into that agent
(`forking.fork` with `Into`), whose transaction also writes the branch's job and its turns (and, in the first
fork's, an experiment's row and its judgment, waiting; a what-if's judgment, waiting, keyed on its job; in the
last fork's, the start's answer, and under an Idempotency-Key that answer kept for its retries). Forks are
written one after another, each one transaction; a later fork that fails leaves the earlier branches written
but failed with the reason, never started."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import datetime

import msgspec

from service.agents import a2a_client
from service.agents.replay import grid, jobs, judge
from service.agents.replay.runner import Runner
from service.agents.replay.terms import Boundary, Replay, Span
from service.agents.replay.tools import ArmTools, ToolPolicy
from service.errors import ServiceError, Unprocessable
from service.identity import Caller, Seen
from service.kagent import dialects
from service.kagent.store.base import Connection
from service.kagent.store.experiments import ExperimentRow
from service.kagent.store.jobs import WhatifJob
from service.operations import forking
from service.schemas import ForkedSession, ForkRequest
from service.services import Services

_encoder = msgspec.json.Encoder()


def fork_name(agent_ref: str, turn: int | None, invocation_id: str, source_name: str | None) -> str:
    """A what-if fork's default name: the agent that answers and the turn it answers, so that forks of
    one session made at different turns or for different agents can be told apart."""
    at = f"turn {turn}" if turn is not None else f"the turn {invocation_id[:40]}"
    label = " ".join((source_name or "").split())
    of = f' of "{label[:60]}{"..." if len(label) > 60 else ""}"' if label and label != "Chat" else ""
    return f"What-if: {agent_ref} answers {at}{of}"[:256]


def default_name(span: Span, agent_ref: str, repeat: int | None = None) -> str:
    """A branch's fork name when none is given: the agent, the turn, the repeat (when there are repeats)."""
    name = fork_name(agent_ref, span.position, span.turns[0].invocation_id, span.source.name)
    return name if repeat is None else f"{name} #{repeat}"[:256]


def branch_name(branch: Branch, experiment: ExperimentRow | None) -> str:
    """A branch's fork name. A what-if's: its `name`, else the agent and the turn (default_name). An
    experiment's is told apart in kagent's sidebar from its siblings and from other experiments' branches: the
    experiment's `name` with the agent (default: the agent and the turn), the repeat, the experiment's id."""
    replay, span = branch.replay, branch.span
    repeat = branch.repeat if int(replay.repeats) > 1 else None
    if experiment is None:
        return replay.name or default_name(span, branch.agent_ref, repeat)
    if replay.name:
        base = f"{' '.join(replay.name.split())[:120]} · {branch.agent_ref}"
    else:
        base = fork_name(branch.agent_ref, span.position, span.turns[0].invocation_id, span.source.name)
    again = f" #{repeat}" if repeat is not None else ""
    return f"{base[:200]}{again} · experiment {experiment.id[:8]}"


def edited(message: dialects.JSON, dialect: dialects.TaskDialect, text: str) -> dialects.JSON:
    """The message with its text replaced by `text` (its other parts kept): ask the turn differently."""
    parts = [p for p in message.get("parts", []) if isinstance(p, dict)]
    texts = [i for i, p in enumerate(parts) if isinstance(p.get("text"), str)]
    new = {"kind": "text", "text": text} if dialect is dialects.TaskDialect.LEGACY else {"text": text}
    at = texts[0] if texts else len(parts)
    kept = [p for i, p in enumerate(parts) if i not in texts]
    return {**message, "parts": [*kept[:at], new, *kept[at:]]}


@dataclass(frozen=True, kw_only=True)
class Branch:
    """What a branch's job is made of, the fork aside."""

    caller: Caller
    replay: Replay
    span: Span
    agent_ref: str
    agent_id: str  # the agent's id as kagent spells namespace/name (store.agents.agent_row_id): the fork's agent_id
    card: a2a_client.Card | None
    repeat: int
    policy: ToolPolicy  # what its agent's tools do, as the start decided (tools.decide)
    tools: ArmTools  # what its agent could do, its tools by class
    judge_card: a2a_client.Card | None = None  # the judge's card, written with the first branch


async def write_branch(
    svc: Services,
    conn: Connection,
    runner_id: str,
    branch: Branch,
    fork: ForkedSession,
    experiment: ExperimentRow | None,
    *,
    first: bool,
) -> WhatifJob:
    """The job row and its turns, in the fork's transaction: each message built for the fork, with its
    messageId fixed now (so that no runner ever sends it twice). `experiment`: its row, written with its first
    branch."""
    span, text = branch.span, branch.replay.message.text if branch.replay.message else None
    try:
        messages = [
            a2a_client.message_json(
                a2a_client.message_for(
                    edited(t.message, span.dialect, text) if i == 0 and text else t.message, span.dialect, fork.id
                )
            )
            for i, t in enumerate(span.turns)
        ]
    except a2a_client.AgentError as exc:  # raised in the fork's transaction: nothing is written
        raise Unprocessable(str(exc)) from None
    if experiment is not None and first:
        await svc.store.experiments.insert_experiment(conn, experiment)
        if branch.replay.judge is not None:  # it waits until the branches all ended (Runner.finish runs it)
            await svc.store.judgments.insert(
                conn, judge.judgment_row(experiment.id, branch.caller.user_id, branch.replay.judge, branch.judge_card,
                                         span.dialect.value, "waiting", runner_id),
            )  # fmt: skip
    card = None if branch.card is None else _encoder.encode(dataclasses.asdict(branch.card)).decode()
    job = WhatifJob(
        id=str(uuid.uuid4()), user_id=branch.caller.user_id, parent_session_id=span.source.id,
        parent_user_id=span.source.user_id, session_id=fork.id,
        rewind_before_invocation_id=None if span.turns[0].task_id else span.turns[0].invocation_id,
        rewind_before_task_id=span.turns[0].task_id,
        agent_ref=branch.agent_ref, dialect=span.dialect.value, message=messages[0], status="running", task_id=None,
        error=None, result=None, runner=runner_id, created_at=datetime.min, finished_at=None,
        experiment_id=experiment.id if experiment is not None else None, repeat=branch.repeat, agent_card=card,
        on_approval=branch.replay.on_approval, turns_total=len(messages),
        tool_policy=_encoder.encode(branch.policy).decode(), arm_tools=_encoder.encode(branch.tools).decode(),
    )  # fmt: skip
    created = await svc.store.jobs.insert_whatif_job(conn, job)
    if experiment is None and branch.replay.judge is not None:  # a what-if's, keyed on its job: waits for it
        await svc.store.judgments.insert(
            conn, judge.judgment_row(None, branch.caller.user_id, branch.replay.judge, branch.judge_card,
                                     span.dialect.value, "waiting", runner_id, job_id=job.id),
        )  # fmt: skip
    await svc.store.jobs.insert_whatif_turns(
        conn, job.id, [(t.invocation_id, m) for t, m in zip(span.turns, messages, strict=True)]
    )
    return dataclasses.replace(job, created_at=created)


def experiment_row(caller: Caller, plan: list[Branch], boundary: Boundary) -> ExperimentRow | None:
    """An experiment's own row (None for a what-if, whose one job is all it writes)."""
    replay, span = plan[0].replay, plan[0].span
    if replay.kind != "experiment":
        return None
    arms = list({b.agent_ref: b.tools for b in plan}.values())
    return ExperimentRow(
        id=str(uuid.uuid4()), user_id=caller.user_id, source_session_id=span.source.id,
        source_user_id=span.source.user_id, source_agent_ref=span.agent_ref,
        rewind_before_invocation_id=boundary.invocation_id, rewind_before_task_id=boundary.task_id,
        turns_requested="all" if replay.turns == "all" else str(int(replay.turns)), turns=len(span.turns),
        message=_encoder.encode(replay.message).decode() if replay.message else None, on_approval=replay.on_approval,
        repeats=int(replay.repeats), source_turns=None, status="running", created_at=datetime.min, finished_at=None,
        tool_policy=_encoder.encode(plan[0].policy).decode(), arms=_encoder.encode(arms).decode(),
    )  # fmt: skip


@dataclass(kw_only=True)
class Written:
    """What the start wrote: the jobs to launch, the experiment's row (if any) and the start's answer."""

    jobs: list[WhatifJob]
    experiment: ExperimentRow | None
    answer: msgspec.Struct | None = None


async def write(
    svc: Services,
    runner: Runner,
    seen: Seen,
    plan: list[Branch],
    boundary: Boundary,
    idempotency: tuple[str, str] | None,
) -> Written:
    """Every branch's fork and job, one fork after another (see the module's text), each of the source whose
    access the start settled (`seen`)."""
    caller = seen.caller
    written = Written(jobs=[], experiment=experiment_row(caller, plan, boundary))
    for i, branch in enumerate(plan):

        async def then(
            conn: Connection, fork: ForkedSession, branch: Branch = branch, last: bool = i == len(plan) - 1
        ) -> None:
            job = await write_branch(svc, conn, runner.id, branch, fork, written.experiment, first=not written.jobs)
            written.jobs.append(job)
            if last:  # the start's answer, read in the last fork's transaction
                judged = branch.replay.judge is not None
                written.answer = (
                    jobs.Started(
                        job=await jobs.judged_job(svc, conn, job, [], live=False) if judged else jobs.job_json(job),
                        session=fork,
                    )
                    if written.experiment is None
                    else grid.Started(
                        experiment=await grid.experiment(svc, conn, caller, written.experiment.id, live=False)
                    )
                )
                if idempotency is not None:
                    await svc.store.lineage.remember_answer(
                        conn, user_id=caller.user_id, key=idempotency[0], request_hash=idempotency[1],
                        session_id=fork.id, answer=_encoder.encode(written.answer).decode(),
                        ttl_seconds=svc.settings.idempotency_ttl_seconds,
                    )  # fmt: skip

        name = branch_name(branch, written.experiment)
        try:
            await forking.fork(
                svc, caller, seen.row.id,
                ForkRequest(
                    rewind_before_invocation_id=boundary.invocation_id, rewind_before_task_id=boundary.task_id,
                    name=name, if_boundary_missing="error",
                ),
                into=forking.Into(agent_id=branch.agent_id, then=then, found=branch.span.found), seen=seen,
            )  # fmt: skip
        except ServiceError as exc:
            if not written.jobs:
                raise
            for job in written.jobs:  # written before a later fork failed: failed, never started
                await runner.finish(job, "failed", f"the experiment could not make every branch's fork: {exc.message}")
            raise
    return written
