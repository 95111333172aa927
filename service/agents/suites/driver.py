"""Driving a suite run: start its cases' experiments a few at a time, settle each case once its experiment ended
and was judged, stop starting at the budget, end the run with its verdict. One replica drives a run (it beats on
the run's row); another takes it over when that one stops beating (`sweep`), and starts nothing twice: a case's
experiment is started under an Idempotency-Key naming the run and the case, so a start the first replica made
answers the second with the same experiment.

How many cases at once: as many as fill WHATIF_MAX_PARALLEL with their branches (at least one), so a run takes
the replica's turns as one experiment at a time would not, and leaves room as each case ends. The budget is
checked before each case starts: once the ended cases' branches cost `max_usd`, no case starts (`stopped`,
`budget`), and what runs already is all the run can spend over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import msgspec

from service.agents import experiments
from service.agents.replay.grid import Experiment
from service.agents.replay.runner import Runner
from service.agents.replay.steady import TRANSIENT
from service.agents.suites import across, ledger
from service.errors import ServiceError
from service.kagent.store.suite_runs import RunCase, RunRow
from service.services import Services

log = logging.getLogger("kagent_fork")
_encoder = msgspec.json.Encoder()


def launch(svc: Services, runner: Runner, run_id: str) -> None:
    runner.chore(drive(svc, runner, run_id), f"suite-run-{run_id}")


async def sweep(svc: Services, runner: Runner) -> int:
    """Take over the open runs whose replica stopped beating; how many."""
    if svc.settings.kagent_a2a_url is None:
        return 0
    async with svc.connection() as conn:
        stale = await svc.store.suite_runs.claim_stale(conn, runner.id, 3 * svc.settings.whatif_heartbeat_seconds)
    for run_id in stale:
        log.info("suite run %s: taken over from a runner that stopped", run_id)
        launch(svc, runner, run_id)
    return len(stale)


async def drive(svc: Services, runner: Runner, run_id: str) -> None:
    """The run's loop, until it ends or another replica holds it."""
    poll = min(0.5, svc.settings.whatif_heartbeat_seconds / 2)
    while True:
        try:
            if not await step(svc, runner, run_id):
                return
        except TRANSIENT as exc:  # the database came and went: the next beat tries again
            log.warning("suite run %s: database unavailable: %s", run_id, type(exc).__name__)
        await asyncio.sleep(poll)


async def step(svc: Services, runner: Runner, run_id: str) -> bool:
    """One turn of the loop; False once the run ended or is no longer this replica's."""
    async with svc.connection() as conn:
        if await svc.store.suite_runs.beat(conn, run_id, runner.id) is None:
            return False
        run = await svc.store.suite_runs.run_by_id(conn, run_id)
        cases = await svc.store.suite_runs.cases(conn, run_id)
    assert run is not None
    req = msgspec.json.decode(run.request, type=ledger.RunRequest)
    for case in cases:
        if case.status == "running" and case.experiment_ids:
            await settle(svc, run, case)
    async with svc.connection() as conn:
        cases = await svc.store.suite_runs.cases(conn, run_id)
    running = [c for c in cases if c.status == "running"]
    waiting = [c for c in cases if c.status == "waiting"]
    money = ledger.spent(cases)
    over = req.max_usd is not None and money is not None and money >= req.max_usd
    if not waiting or over:
        if running:
            if not waiting and await _all_branches_ended(svc, run, running):
                await _set(svc, run, "judging")
            return True
        return await _end(svc, run, cases, "budget" if over and waiting else None)
    # As many cases at once as fill WHATIF_MAX_PARALLEL with their branches (one at least).
    at_once = max(1, svc.settings.whatif_max_parallel // max(1, waiting[0].branches))
    for case in waiting[: max(0, at_once - len(running))]:
        await begin(svc, runner, run, case)
    return True


async def _all_branches_ended(svc: Services, run: RunRow, running: list[RunCase]) -> bool:
    async with svc.connection() as conn:
        for experiment_id in (e for case in running for e in case.experiment_ids):
            row = await svc.store.experiments.experiment(conn, experiment_id, run.run_user)
            if row is None or row.status == "running":
                return False
    return True


async def _set(svc: Services, run: RunRow, status: str) -> None:
    async with svc.connection() as conn:
        await svc.store.suite_runs.set_status(conn, run.id, status)


async def _end(svc: Services, run: RunRow, cases: list[RunCase], reason: str | None) -> bool:
    """The run's end: `stopped` at the budget, else `completed` when a case was judged, `failed` when none."""
    verdict = ledger.verdict_of(run, cases)
    judged = any(a.cases for a in verdict.by_agent)
    status = "stopped" if reason else "completed" if judged else "failed"
    why = reason or (None if judged else "no case was judged: " + _first_error(cases))
    async with svc.connection() as conn:
        await svc.store.suite_runs.set_status(conn, run.id, status, why, _encoder.encode(verdict).decode())
    log.info("suite run %s: %s", run.id, status)
    return False


def _first_error(cases: list[RunCase]) -> str:
    return next((c.error for c in cases if c.error), "no judged continuation")


async def begin(svc: Services, runner: Runner, run: RunRow, case: RunCase) -> None:
    """Start one case's experiments (one per agent) as the run's user, each once: its key names the run, the case
    and the agent's place, so a replica taking the run over gets the experiment the first one started."""
    specs = msgspec.json.decode(case.spec, type=list[experiments.ExperimentRequest])
    started = []
    try:
        for i, spec in enumerate(specs):
            answer, _ = await experiments.start(
                svc, runner, ledger.run_caller(run), case.session_id, spec,
                idempotency_key=f"suite-run:{run.id}:{case.case_id}:{i}",
            )  # fmt: skip
            started.append(_experiment_id(answer))
    except ServiceError as exc:  # refused now (its session purged since the start, an agent gone): said per case
        for experiment_id in started:  # its other agents' experiments end with it
            with contextlib.suppress(ServiceError):
                await experiments.cancel(svc, ledger.run_caller(run), experiment_id)
        async with svc.connection() as conn:
            await svc.store.suite_runs.case_ended(conn, run.id, case.case_id, "failed", exc.message, None, None)
        return
    async with svc.connection() as conn:
        await svc.store.suite_runs.case_started(conn, run.id, case.case_id, started)
        now = await svc.store.suite_runs.run_by_id(conn, run.id)
    if now is not None and now.status == "cancelled":  # cancelled while these started: they end with it
        for experiment_id in started:
            with contextlib.suppress(ServiceError):
                await experiments.cancel(svc, ledger.run_caller(run), experiment_id)


def _experiment_id(answer: object) -> str:
    if isinstance(answer, msgspec.Raw):  # the stored answer of a start made before (a takeover)
        found: dict[str, dict[str, str]] = msgspec.json.decode(bytes(answer))
        return found["experiment"]["id"]
    assert isinstance(answer, experiments.Started)
    return answer.experiment.id


def _records(found: Experiment, control: bool) -> list[across.AgentCase]:
    """An experiment's verdict against the source, an agent's record each; `control`: the run's control arm (an
    experiment's grid calls the source's own agent a control whenever it is asked the same question, which a run's
    arm naming that agent is not)."""
    out = []
    for a in found.verdict.by_agent if found.verdict else []:
        if a.against != "source":
            continue
        cost = across.CaseCost(
            usd=a.cost.usd, total_tokens=a.cost.total_tokens, tool_calls=a.cost.tool_calls, turns=a.cost.turns,
            duration_seconds=a.cost.duration_seconds,
        )  # fmt: skip
        out.append(across.AgentCase(
            agent_ref=a.agent_ref, wins=a.wins, ties=a.ties, losses=a.losses, invalid=a.invalid, failed=a.failed,
            control=control, cost=cost,
        ))  # fmt: skip
    return out


async def settle(svc: Services, run: RunRow, case: RunCase) -> None:
    """A case whose experiments all ended and were judged: its record per agent against the source, its money."""
    caller = ledger.run_caller(run)
    async with svc.connection() as conn:
        for experiment_id in case.experiment_ids:
            row = await svc.store.experiments.experiment(conn, experiment_id, run.run_user)
            if row is None or row.status == "running":
                return
        if await svc.store.judgments.being_judged(conn, case.experiment_ids):
            return
    req = msgspec.json.decode(run.request, type=ledger.RunRequest)
    arms = ledger.arms(req)
    grids = [await experiments.get(svc, caller, e) for e in case.experiment_ids]
    records = [r for arm, found in zip(arms, grids, strict=True) for r in _records(found, control=arm is None)]
    costs = [b.totals.cost_usd for found in grids for b in found.branches]
    money = None if any(c is None for c in costs) else round(sum(c or 0.0 for c in costs), 6)
    result = across.CaseResult(
        case_id=case.case_id, session_id=case.session_id, experiment_ids=case.experiment_ids, by_agent=records,
        best=across.best_of(records), source_usd=grids[0].source.totals.cost_usd,
    )  # fmt: skip
    status = "done" if any(r.judged for r in records) else "failed"
    judgments = [found.judgment.error for found in grids if found.judgment and found.judgment.error]
    error = None if status == "done" else (judgments[0] if judgments else "no continuation was judged")
    async with svc.connection() as conn:
        await svc.store.suite_runs.case_ended(
            conn, run.id, case.case_id, status, error, _encoder.encode(result).decode(), money
        )
