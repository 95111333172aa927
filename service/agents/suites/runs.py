"""Suite runs: every case of a suite continued on each agent as an experiment (the one replay engine, its tool
policy and judge), one verdict per agent across the cases (across.py). Started, read, listed, cancelled, and one
branch kept; driven in the background by driver.py.

Hidden from the start: a run's experiments are started as a user of the run's own (`run_user`), who reads the
creator's conversations (`Caller.reads_as`) and writes every fork, and every judge's session, under its own id.
kagent's chat list is per user, so the creator's gains nothing; `keep` forks one branch into the creator's chats.
A discard's stamp (`session.deleted_at`) cannot hide a branch before its turns run: kagent's handlers read no
session so stamped, so the agent could not write its turn (docs/suites.md).
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import msgspec

from service.agents import experiments
from service.agents.replay import engine, grid
from service.agents.replay.runner import Runner
from service.agents.replay.terms import MessageEdit, TurnCount
from service.agents.suites import across, driver
from service.agents.suites.ledger import RunRequest, RunVerdict, arms, results, run_caller, spent, verdict_of
from service.errors import Conflict, NotFound, Unprocessable
from service.identity import Caller
from service.kagent.store.base import Connection
from service.kagent.store.suite_runs import NewCase, RunRow
from service.kagent.store.suites import CaseRow
from service.operations import forking, prices
from service.schemas import ForkRequest, Text, rfc3339
from service.services import Services

MAX_RUNS_LISTED = 100
OPEN = ("running", "judging")
_encoder = msgspec.json.Encoder()


class KeepRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    session_id: Text  # a branch of the run (the grid's session_id)


class Progress(msgspec.Struct, frozen=True, kw_only=True):
    cases: int
    branches_done: int
    branches_total: int
    judged: int  # cases whose experiment was judged


class RunCaseOut(msgspec.Struct, frozen=True, kw_only=True):
    case_id: str
    session_id: str
    experiment_ids: list[str]  # one per agent (and the control), once started
    status: str  # waiting, running, done, failed, skipped
    error: str | None
    best: str | None  # the agent that did best against the source on it
    by_agent: list[across.AgentCase]


class RunItem(msgspec.Struct, frozen=True, kw_only=True):
    """A run as a suite's list of runs shows it."""

    id: str
    status: str
    reason: str | None
    created_at: str
    finished_at: str | None
    agents: list[str]
    judge: str


class Run(RunItem, frozen=True, kw_only=True):
    """A run as it stands (GET .../runs/{run}): its list entry, and its figures, verdict and cases."""

    suite_id: str
    repeats: int
    control: bool
    max_usd: float | None
    estimated_usd: float | None
    estimated_usd_text: str
    spent_usd: float | None
    spent_usd_text: str
    progress: Progress
    verdict: RunVerdict
    cases: list[RunCaseOut]


class RunPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What a run would do, nothing written: its cases (and those it would skip, with why), branches, the
    estimate over every case (the judge included), the tools' policy, and the refusal it would get."""

    dry_run: bool
    cases: int
    skipped: list[dict[str, str]]
    branches: int
    estimated_usd: float | None
    estimated_usd_text: str
    unpriced: list[str]
    tools: object | None
    refused: str | None


def case_requests(req: RunRequest, case: CaseRow, suite_name: str) -> list[experiments.ExperimentRequest]:
    """The experiments that continue one case, one per agent (ledger.arms): each agent's repeats are one
    experiment's branches (at most 5, under an experiment's 8), and its judge compares them with the source only."""
    turns: TurnCount = req.turns if req.turns is not None else (int(case.turns) if case.turns.isdigit() else "all")
    base = experiments.ExperimentRequest(
        rewind_before_invocation_id=case.rewind_before_invocation_id,
        rewind_before_task_id=case.rewind_before_task_id, turns=turns,
        message=MessageEdit(text=case.message) if case.message else None,
        name=f"suite {suite_name}, case {case.ordinal}", repeats=req.count, tools=req.tools, reads=req.reads,
        judge=req.judge,
    )  # fmt: skip
    return [msgspec.structs.replace(base, agents=agents) for agents in arms(req)]


async def _planned(
    svc: Services, runner: Runner, caller: Caller, cases: list[CaseRow], req: RunRequest, suite_name: str
) -> tuple[list[NewCase], RunPlan]:
    """Every case's dry run, as the run's user would start it: the cases to run and to skip, and the sum."""
    rows: list[NewCase] = []
    skipped: list[dict[str, str]] = []
    refused: list[str] = []
    branches, usd, unpriced, tools = 0, 0.0, set[str](), None
    priced = True
    for case in cases:
        specs = case_requests(req, case, suite_name)
        try:
            dries = [
                await experiments.start(svc, runner, caller, case.session_id, msgspec.structs.replace(s, dry_run=True))
                for s in specs
            ]
        except NotFound as exc:  # kagent's retention purged it, or it is no longer the creator's to read
            skipped.append({"case_id": case.id, "error": exc.message})
            rows.append(NewCase(case_id=case.id, session_id=case.session_id, spec="[]", branches=0,
                                status="skipped", error=exc.message))  # fmt: skip
            continue
        except Unprocessable as exc:
            raise Unprocessable(f"case {case.ordinal} ({case.id}): {exc.message}") from None
        count = 0
        for dry, _ in dries:
            assert isinstance(dry, engine.DryRun)
            if dry.refused and not refused:
                refused.append(f"case {case.ordinal} ({case.id}): {dry.refused}")
            count += dry.branches
            tools = tools or dry.tools
            unpriced |= set(dry.unpriced)
            if dry.estimated_usd is None:
                priced = False
            else:
                usd += dry.estimated_usd
        branches += count
        rows.append(NewCase(case_id=case.id, session_id=case.session_id, spec=_encoder.encode(specs).decode(),
                            branches=count, status="waiting", error=None))  # fmt: skip
    estimate = round(usd, 6) if priced else None
    if req.max_usd is not None and not refused:
        if estimate is None:
            refused.append(f"max_usd: the run's price is unknown ({', '.join(sorted(unpriced)) or 'a model'} unpriced)")
        elif estimate > req.max_usd:
            refused.append(
                f"max_usd: the run would cost about {prices.usd_text(estimate)} (every case, the judge included), "
                f"over {prices.usd_text(req.max_usd)}"
            )
    plan = RunPlan(
        dry_run=True, cases=sum(1 for r in rows if r.status == "waiting"), skipped=skipped, branches=branches,
        estimated_usd=estimate, estimated_usd_text=prices.usd_text(estimate), unpriced=sorted(unpriced),
        tools=tools, refused=" ".join(refused) or None,
    )  # fmt: skip
    return rows, plan


async def start(
    svc: Services, runner: Runner, caller: Caller, suite_id: str, req: RunRequest, idempotency_key: str | None
) -> tuple[Run | RunPlan | msgspec.Raw, bool]:
    """Check every case (a dry run of each, as the run's own user), refuse the whole run over `max_usd`, write
    the run and its cases, and let the driver start them: (answer, replayed)."""
    if svc.settings.auth_mode == "trusted-proxy":
        raise Unprocessable(
            "suite runs write their branches under a user of the run's own, which kagent's A2A endpoint takes only "
            "with AUTH_MODE=unsecure (with a trusted proxy it takes the user from the token): run the experiments "
            "one by one instead"
        )
    if not req.agents:
        raise Unprocessable("agents: name the agents to run (1 to 8, namespace/name)")
    if len(set(req.agents)) != len(req.agents):
        raise Unprocessable("agents: each agent once (repeats runs an agent again)")
    req.judge.checked()
    async with svc.connection() as conn:
        suite = await svc.store.suites.suite(conn, suite_id, caller.user_id)
        if suite is None:
            raise NotFound("Suite not found")
        cases = await svc.store.suites.cases(conn, suite.id)
    if not cases:
        raise Unprocessable("this suite has no case to run: add cases first")
    digest = _encoder.encode([suite_id, req]).hex()
    async with engine.once(svc, caller, "suite-run", idempotency_key, digest) as (stored, kept):
        if stored is not None:
            return stored, True
        run_id = str(uuid.uuid4())
        run_user = f"{caller.user_id}/suite-run/{run_id}"
        reader = Caller(user_id=run_user, reads_as=caller.user_id)  # as run_caller gives it once the row exists
        rows, plan = await _planned(svc, runner, reader, cases, req, suite.name)
        if req.dry_run:
            return plan, False
        if plan.refused:
            raise Unprocessable(plan.refused)
        if plan.cases == 0:
            raise Unprocessable("no case of this suite can be run: " + "; ".join(s["error"] for s in plan.skipped))
        async with svc.connection() as conn, conn.transaction():
            await svc.store.suite_runs.insert_run(
                conn,
                (run_id, suite.id, caller.user_id, run_user),
                _encoder.encode(req).decode(),
                plan.estimated_usd,
                runner.id,
            )
            await svc.store.suite_runs.insert_cases(conn, run_id, rows)
            answer = await read(svc, conn, caller, suite.id, run_id)
            if kept is not None:
                await svc.store.lineage.remember_answer(
                    conn, user_id=caller.user_id, key=kept[0], request_hash=kept[1], session_id=run_id,
                    answer=_encoder.encode(answer).decode(), ttl_seconds=svc.settings.idempotency_ttl_seconds,
                )  # fmt: skip
    driver.launch(svc, runner, run_id)
    return answer, False


def _item(run: RunRow, req: RunRequest) -> dict[str, Any]:
    """The fields a run's list entry and the run itself share."""
    return {
        "id": run.id, "status": run.status, "reason": run.reason, "created_at": rfc3339(run.created_at),
        "finished_at": rfc3339(run.finished_at) if run.finished_at else None, "agents": list(req.agents),
        "judge": req.judge.agent,
    }  # fmt: skip


async def read(svc: Services, conn: Connection, caller: Caller, suite_id: str, run_id: str) -> Run:
    """The run as it stands: its progress (the running cases' branches read from their experiments), the money
    spent, the verdict across the cases judged so far, and each case."""
    run = await svc.store.suite_runs.run(conn, run_id, suite_id, caller.user_id)
    if run is None:
        raise NotFound("Suite run not found")
    cases = await svc.store.suite_runs.cases(conn, run.id)
    req = msgspec.json.decode(run.request, type=RunRequest)
    done = sum(c.branches for c in cases if c.status in ("done", "failed"))
    for c in cases:
        for experiment_id in c.experiment_ids if c.status == "running" else []:
            jobs = await svc.store.experiments.branches(conn, experiment_id)
            done += sum(1 for j in jobs if j.status != "running")
    counted = [c for c in cases if c.status != "skipped"]
    judge_rows = await svc.store.agents.get_many(conn, [req.judge.agent])
    judge_row = judge_rows.get(req.judge.agent)
    model = judge_row.config.model if judge_row is not None and judge_row.config else None
    judge_model = model.model if model is not None else None
    money = spent(cases)
    by_id = {r.case_id: r for r in results(cases)}
    return Run(
        **_item(run, req), suite_id=run.suite_id, repeats=req.count, control=req.control, max_usd=req.max_usd,
        estimated_usd=run.estimated_usd, estimated_usd_text=prices.usd_text(run.estimated_usd), spent_usd=money,
        spent_usd_text=prices.usd_text(money),
        progress=Progress(cases=len(counted), branches_done=done, branches_total=sum(c.branches for c in counted),
                          judged=sum(1 for c in cases if c.status == "done")),
        verdict=verdict_of(run, cases, judge_model),
        cases=[
            RunCaseOut(
                case_id=c.case_id, session_id=c.session_id, experiment_ids=c.experiment_ids, status=c.status,
                error=c.error, best=by_id[c.case_id].best if c.case_id in by_id else None,
                by_agent=by_id[c.case_id].by_agent if c.case_id in by_id else [],
            )
            for c in cases
        ],
    )  # fmt: skip


async def get(svc: Services, caller: Caller, suite_id: str, run_id: str) -> Run:
    async with svc.connection() as conn:
        return await read(svc, conn, caller, suite_id, run_id)


async def of_suite(svc: Services, caller: Caller, suite_id: str) -> list[RunItem]:
    async with svc.connection() as conn:
        if await svc.store.suites.suite(conn, suite_id, caller.user_id) is None:
            raise NotFound("Suite not found")
        rows = await svc.store.suite_runs.runs_of_suite(conn, suite_id, caller.user_id, MAX_RUNS_LISTED)
    return [RunItem(**_item(r, msgspec.json.decode(r.request, type=RunRequest))) for r in rows]


async def cancel(svc: Services, caller: Caller, suite_id: str, run_id: str) -> Run:
    """End the run: no case starts after this, and every running case's experiment (its branches and its
    judgment) is cancelled; the verdict counts the cases judged before. 409 once it ended."""
    async with svc.connection() as conn:
        run = await svc.store.suite_runs.run(conn, run_id, suite_id, caller.user_id)
        if run is None:
            raise NotFound("Suite run not found")
        moved = await svc.store.suite_runs.set_status(conn, run.id, "cancelled", "cancelled")
        if moved is None:
            raise Conflict(f"suite run {run_id} already ended ({run.status})")
        # Read after the status moved: a case the driver started before it is here (and one it starts after
        # sees the run cancelled and cancels its own: driver.begin).
        cases = await svc.store.suite_runs.cases(conn, run.id)
        await svc.store.suite_runs.set_verdict(conn, run.id, _encoder.encode(verdict_of(run, cases)).decode())
    for c in cases:
        for experiment_id in c.experiment_ids if c.status == "running" else []:
            with contextlib.suppress(Conflict):  # it ended meanwhile: nothing to cancel
                await experiments.cancel(svc, run_caller(run), experiment_id)
    return await get(svc, caller, suite_id, run_id)


class CaseExperiments(msgspec.Struct, frozen=True, kw_only=True):
    """A case's experiments (one per agent, and the control's), as their grids show them."""

    case_id: str
    session_id: str
    experiments: list[grid.Experiment]


async def case_experiments(svc: Services, caller: Caller, suite_id: str, run_id: str, case_id: str) -> CaseExperiments:
    """A case's experiments as their grids show them (every branch's turns, answers, figures and the judge's pairs),
    read for the run's creator as the run's own user, whose rows they are."""
    async with svc.connection() as conn:
        run = await svc.store.suite_runs.run(conn, run_id, suite_id, caller.user_id)
        if run is None:
            raise NotFound("Suite run not found")
        found = next((c for c in await svc.store.suite_runs.cases(conn, run.id) if c.case_id == case_id), None)
    if found is None or not found.experiment_ids:
        raise NotFound(f"suite run {run_id} has no started case {case_id}")
    grids = [await experiments.get(svc, run_caller(run), e) for e in found.experiment_ids]
    return CaseExperiments(case_id=found.case_id, session_id=found.session_id, experiments=grids)


async def keep(svc: Services, caller: Caller, suite_id: str, run_id: str, req: KeepRequest) -> forking.ForkOutcome:
    """One branch of the run shown in the creator's chats: forked whole from the run's user into the creator's
    (the run's own rows stay hidden, as every other branch)."""
    async with svc.connection() as conn:
        run = await svc.store.suite_runs.run(conn, run_id, suite_id, caller.user_id)
        if run is None:
            raise NotFound("Suite run not found")
        branch = await svc.store.sessions.get_session(conn, req.session_id, run.run_user)
    if branch is None:
        raise NotFound(f"suite run {run_id} has no branch {req.session_id}")
    return await forking.fork(
        svc, Caller(user_id=caller.user_id, reads_as=run.run_user), branch.id, ForkRequest(name=branch.name)
    )
