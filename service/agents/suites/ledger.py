"""What a suite run is made of, read by its starting, its reading and its driving alike: its request, its own user,
the money its ended cases spent, and its verdict across the cases judged so far (across.py)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from service.agents.replay.judge import JudgeSpec
from service.agents.replay.terms import Dollars, TurnCount
from service.agents.replay.tools import Reads, ToolsField
from service.agents.suites import across
from service.errors import BadRequest
from service.identity import Caller
from service.kagent.store.suite_runs import RunCase, RunRow
from service.schemas import Text


class RunRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    agents: Annotated[list[Text], Meta(max_length=8)]  # none, or one twice: a 422 (runs.start)
    judge: JudgeSpec  # required: a run's verdict is the judge's
    # JSON Schema counts 2.0 as an integer, so a whole float is one too (a fraction is a 400: RunRequest.count).
    repeats: Annotated[int, Meta(ge=1, le=5)] | Annotated[float, Meta(ge=1, le=5)] = 1

    @property
    def count(self) -> int:
        """The repeats as a whole number."""
        if self.repeats != int(self.repeats):
            raise BadRequest(f"repeats must be a whole number, got {self.repeats}")
        return int(self.repeats)

    turns: TurnCount | None = None  # None: each case's own
    tools: ToolsField | None = None
    reads: Reads | None = None
    control: bool = False
    max_usd: Dollars | None = None
    dry_run: bool = False


class RunVerdict(msgspec.Struct, frozen=True, kw_only=True):
    judge: dict[str, str | None]
    headline: str
    by_agent: list[across.AgentAcross]
    control: across.AgentAcross | None


def arms(req: RunRequest) -> list[list[str] | None]:
    """The experiments each case runs: one per agent, and with `control` one of the source's own agent (None: no
    agent named, the source's own), whose records are the noise floor."""
    return [[agent] for agent in req.agents] + ([None] if req.control else [])


def run_caller(run: RunRow) -> Caller:
    """The run's own user: reads the creator's conversations, writes the run's branches under its own id."""
    return Caller(user_id=run.run_user, reads_as=run.user_id)


def results(cases: list[RunCase]) -> list[across.CaseResult]:
    return [msgspec.json.decode(c.result, type=across.CaseResult) for c in cases if c.result is not None]


# The verdicts across last computed, by their cases' results: the bootstrap over 100 cases x 4 agents takes about
# 0.3 s of CPU (bench/README.md, "Suites"), and every GET of a run (a page polling it each second), its Markdown
# and its plot read the verdict again, though it changes only when a case ends. Pure, so kept per process.
_ACROSS: dict[tuple[str, ...], across.Across] = {}
ACROSS_KEPT = 32


def across_of(cases: list[RunCase]) -> across.Across:
    key = tuple(c.result for c in cases if c.result is not None)
    found = _ACROSS.pop(key, None) or across.across(results(cases))
    _ACROSS[key] = found  # the newest last: the first is the least recently read
    while len(_ACROSS) > ACROSS_KEPT:
        del _ACROSS[next(iter(_ACROSS))]
    return found


def verdict_of(run: RunRow, cases: list[RunCase], judge_model: str | None = None) -> RunVerdict:
    req = msgspec.json.decode(run.request, type=RunRequest)
    found = across_of(cases)
    return RunVerdict(
        judge={"agent": req.judge.agent, "model": judge_model, "criteria": req.judge.criteria},
        headline=found.headline, by_agent=found.by_agent, control=found.control,
    )  # fmt: skip


def spent(cases: list[RunCase]) -> float | None:
    """What the ended cases' branches cost (None: a model unpriced); running ones are counted when they end."""
    ended = [c for c in cases if c.status == "done"]
    if any(c.spent_usd is None for c in ended):
        return None
    return round(sum(c.spent_usd or 0.0 for c in ended), 6)
