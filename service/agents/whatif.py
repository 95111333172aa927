"""What-if: regenerate a turn (or the turns from it on) on another agent over A2A, as a job. A what-if is an
experiment of one agent that writes no experiment row: this module says what to replay and hands it to the
replay engine (service/agents/replay/), which forks the source before the turn into the agent, writes the job
in the fork's transaction and has the runner re-ask the turns' user messages there, one after the other."""

from __future__ import annotations

import msgspec

from service.agents.replay import engine
from service.agents.replay.engine import DryRun
from service.agents.replay.jobs import Job, Started, get, of_session
from service.agents.replay.jobs import cancel_job as cancel
from service.agents.replay.judge import JudgeSpec
from service.agents.replay.runner import Runner
from service.agents.replay.terms import Dollars, JudgeRef, MessageEdit, Replay, Tokens, TurnCount
from service.agents.replay.tools import Reads, ToolsField
from service.identity import Caller
from service.operations import forking
from service.schemas import ForkRequest, Text
from service.services import Services

__all__ = ["DryRun", "Job", "Runner", "Started", "WhatifRequest", "cancel", "get", "of_session", "start"]
_encoder = msgspec.json.Encoder()


class WhatifRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    rewind_before_invocation_id: Text | None = None
    rewind_before_task_id: Text | None = None
    agent_ref: Text | None = None
    name: Text | None = None
    max_context_tokens: Tokens | None = None
    max_usd: Dollars | None = None  # refuse a start whose estimated price (judge included) is over it
    turns: TurnCount = 1
    message: MessageEdit | None = None
    tools: ToolsField | None = None  # what the agent's tools do: "replay", "live" or {mode, reads}
    reads: Reads | None = None
    judge: JudgeSpec | None = None  # its one branch judged blind against the source's own continuation
    dry_run: bool = False  # what it would do, the agent's tools by class; nothing written


async def start(
    svc: Services, runner: Runner, caller: Caller, session_id: str, req: WhatifRequest, *,
    idempotency_key: str | None = None, authorization: str | None = None,
) -> tuple[Started | DryRun | msgspec.Raw, bool]:  # fmt: skip
    """Fork the source before the turn into the agent, write the job, and start it: (answer, replayed); or, as
    a dry run, what it would do (DryRun)."""
    # What a retry under the same Idempotency-Key must send again: the fork it asks for, and the rest.
    fork_req = ForkRequest(
        rewind_before_invocation_id=req.rewind_before_invocation_id, rewind_before_task_id=req.rewind_before_task_id,
        name=req.name, if_boundary_missing="error",
    )  # fmt: skip
    digest = forking.request_hash(session_id, fork_req) + _encoder.encode(req).hex()
    replay = Replay(
        kind="whatif", session_id=session_id, digest=digest, invocation_id=req.rewind_before_invocation_id,
        task_id=req.rewind_before_task_id, agents=None if req.agent_ref is None else [req.agent_ref], turns=req.turns,
        message=req.message, name=req.name, max_context_tokens=req.max_context_tokens, max_usd=req.max_usd,
        tools=req.tools,
        reads=req.reads, dry_run=req.dry_run,
        judge=JudgeRef(agent=req.judge.agent, criteria=req.judge.criteria) if req.judge else None,
    )  # fmt: skip
    answer, replayed = await engine.start(svc, runner, caller, replay, idempotency_key, authorization)
    assert isinstance(answer, Started | DryRun | msgspec.Raw)
    return answer, replayed
