"""What a replayed turn did, as a grid's cell shows it: what was asked (and sent), what the agent answered and
what it cost, read from the events of the turn's time (the branch summary's one query; a turn's figures as
operations/continuation.py defines them, compare's too), or, for an agent whose events hold no text, from its
task; and what a whole job left behind (its result)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from service.errors import ServiceError
from service.kagent import dialects, frameworks
from service.kagent.store.base import Connection
from service.kagent.store.jobs import WhatifJob
from service.kagent.store.replay import ReplayCall
from service.kagent.store.tasks import TaskRow
from service.operations import continuation, plan, summary
from service.services import Services


class JobResult(msgspec.Struct, frozen=True, kw_only=True):
    last_agent_text: str | None
    tool_calls: dict[str, int]
    total_tokens: int


class RefusedCall(msgspec.Struct, frozen=True, kw_only=True):
    """A call a replay twin's endpoint did not run: the arm's intent."""

    tool: str
    arguments: object


class Replayed(msgspec.Struct, frozen=True, kw_only=True):
    """A replay twin's tool calls (docs/replay-twins.md), by where their answers came from: the source's
    recording, the real server (a read, live), nowhere because the source never made the call (missed, under
    `reads: "recorded"`), or nowhere because it acts (refused: `refused_calls` say what the arm wanted)."""

    recorded: int
    live: int
    missed: int
    refused: int
    refused_calls: list[RefusedCall]


def replayed(calls: list[ReplayCall]) -> Replayed:
    """The calls by where their answers came from, the refused ones named (in the order they came)."""
    refused = [c for c in calls if c.answered_from == "refused"]
    return Replayed(
        recorded=sum(c.answered_from == "recorded" for c in calls), live=sum(c.answered_from == "live" for c in calls),
        missed=sum(c.answered_from == "missed" for c in calls), refused=len(refused),
        refused_calls=[RefusedCall(tool=c.tool, arguments=msgspec.json.decode(c.arguments)) for c in refused],
    )  # fmt: skip


class TurnFigures(msgspec.Struct, frozen=True, kw_only=True):
    """One turn of a column: what was asked (and sent), what the agent answered and what it cost, and, on a
    replay twin, what its tool calls were answered from (`tool_policy`; null elsewhere)."""

    question: str | None
    sent: list[object] | None  # the message's parts exactly as sent over A2A (None: the source's own turn)
    answer: str | None
    tool_calls: dict[str, int]
    rejected_tool_calls: int
    model_calls: int
    total_tokens: int
    duration_seconds: float
    state: str | None
    # The tokens a price needs (None: not counted, a turn figured before they were): the turn's input (prompt)
    # and output (candidates and thoughts) tokens, and each model call's [input, output], which is priced.
    input_tokens: int | None = None
    output_tokens: int | None = None
    model_usage: list[tuple[int, int]] | None = None
    tool_policy: Replayed | None = None


def sent_parts(message_json: str) -> list[object]:
    parts = msgspec.json.decode(message_json).get("parts", [])
    return parts if isinstance(parts, list) else []


def question_of(parts: list[object]) -> str | None:
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(texts) or None


async def turn_figures(
    svc: Services,
    conn: Connection,
    session_id: str,
    owner: str,
    since: datetime,
    until: datetime | None,
    **known: object,
) -> TurnFigures:
    """A turn's figures from the events written in [since, until) (the branch summary's one query), on the
    caller's connection (a task holds one pooled connection at a time)."""
    t = await summary.tally(svc.store, conn, session_id, owner, since, until)
    calls = t.model_usage or []
    fields: dict[str, object] = {
        "question": t.first_user_text, "sent": None, "answer": t.last_agent_text,
        "tool_calls": dict(sorted(t.tool_calls.items())), "rejected_tool_calls": 0, "model_calls": t.model_calls or 0,
        "total_tokens": t.total_tokens, "duration_seconds": continuation.turn_duration(t.first_at, t.last_at),
        "state": None, "input_tokens": sum(i for i, _ in calls), "output_tokens": sum(o for _, o in calls),
        "model_usage": calls,
    }  # fmt: skip
    fields.update({k: v for k, v in known.items() if v is not None or k in ("state",)})
    return msgspec.convert(fields, TurnFigures)


async def task_answer(svc: Services, conn: Connection, job: WhatifJob, task_id: str) -> str | None:
    """The answer of a job's turn by an agent whose events this service does not read (every framework but
    ADK): the last agent text of its A2A task in kagent's table. None for an ADK agent (its events say it)."""
    if await frameworks.detect(svc.store, conn, job.session_id, job.user_id) in ("adk", "adk-go"):
        return None
    row = await svc.store.tasks.task_by_id(conn, task_id, job.session_id)
    return None if row is None else task_text(row)


def task_text(row: TaskRow) -> str | None:
    """A task's last agent text, cut as summary.tally cuts an event's (None: none, or not JSON)."""
    try:
        text = dialects.last_agent_text(dialects.decode(row.data), plan.dialect_of(row))
    except (dialects.TaskFormatError, ServiceError):
        return None
    return text[: summary.AGENT_TEXT_CHARS] if text else None
