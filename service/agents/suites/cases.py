"""A suite's cases: made by hand, picked by `select` from the caller's conversations with an agent, added one at
a time ("Save as a case"), exported as YAML and imported from YAML or JSON. Every case is checked as its caller
reads it, the way a fork checks its turn (404 alike for a session that is missing or not the caller's, and for a
turn the session does not have), and nothing is saved unless every case is found."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from service.agents.replay.terms import Count, MessageEdit, TurnCount, checked_agent_ref, whole
from service.branches.turns import TASK_TURN, TurnInfo, ordered_turns
from service.errors import BadRequest, NotFound, Unprocessable
from service.identity import Caller, visible_session
from service.kagent import frameworks
from service.kagent.store.agents import agent_ref_of, agent_row_id
from service.kagent.store.base import Connection
from service.kagent.store.suites import CaseRow, SuiteRow
from service.schemas import Text, one_boundary, rfc3339
from service.services import Services

MAX_CASES = 500  # a suite's cases in all; a run continues each on every agent, so this bounds a run too
MAX_SELECT = 200


class CaseSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """One case as a caller names it (the body of `POST .../cases`, an item of `cases`, a line of a file)."""

    session_id: Text
    rewind_before_invocation_id: Text | None = None
    rewind_before_task_id: Text | None = None
    turns: TurnCount = 1
    message: MessageEdit | None = None


class Select(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The caller's own conversations with one agent, newest first, one case each at the chosen user turn."""

    agent: Text  # namespace/name
    since: datetime | None = None  # last active at or after
    until: datetime | None = None  # last active before
    # Numbers as JSON has them: 5.0 is the whole number 5 (checked whole, as every count of the API).
    limit: Count = 20
    turn: Literal["first", "last"] | Count = "first"


class SuiteRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: Text
    cases: Annotated[list[CaseSpec], Meta(max_length=MAX_CASES)] | None = None
    select: Select | None = None


class SuiteFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A suite as a file people keep beside their agent's manifests (export, import): cases name sessions by id."""

    kind: Literal["kagent-fork/suite"] = "kagent-fork/suite"
    version: Count = 1
    name: Text
    cases: Annotated[list[CaseSpec], Meta(max_length=MAX_CASES)] = []


class Case(msgspec.Struct, frozen=True, kw_only=True):
    case_id: str
    session_id: str
    rewind_before_invocation_id: str | None
    rewind_before_task_id: str | None
    turns: int | Literal["all"]
    message: MessageEdit | None
    user_text: str | None  # the turn's own question, as the case was saved
    agent_ref: str | None  # the conversation's agent, as the case was saved


class Suite(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    created_at: str
    cases: list[Case]


class SuiteItem(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    created_at: str
    cases: int


def _turns(value: int | float | str) -> str:
    if value == "all":
        return "all"
    assert not isinstance(value, str)
    count = whole(value, "turns")
    if count < 1:
        raise Unprocessable(f'turns must be 1 or more, or "all", got {count}')  # as an experiment's
    return str(count)


def _matches(turn: TurnInfo, spec: CaseSpec) -> bool:
    if spec.rewind_before_invocation_id is not None:
        return turn.invocation_id == spec.rewind_before_invocation_id
    return spec.rewind_before_task_id in (turn.task_id, *turn.task_ids)


async def _session_turns(
    svc: Services, conn: Connection, caller: Caller, session_id: str
) -> tuple[str | None, list[TurnInfo]]:
    """The session's agent and every turn, in order, as the caller may read them; one snapshot."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        source, _ = await visible_session(svc, conn, caller, session_id)
        framework = await frameworks.detect(svc.store, conn, source.id, source.user_id)
        return source.agent_id, await ordered_turns(svc, conn, source, framework)


def _row(spec: CaseSpec, turn: TurnInfo, agent_id: str | None) -> CaseRow:
    return CaseRow(
        id=str(uuid.uuid4()), ordinal=0, session_id=spec.session_id,
        rewind_before_invocation_id=spec.rewind_before_invocation_id,
        rewind_before_task_id=spec.rewind_before_task_id, turns=_turns(spec.turns),
        message=spec.message.text if spec.message else None, user_text=turn.user_text, agent_id=agent_id,
    )  # fmt: skip


async def checked_cases(svc: Services, conn: Connection, caller: Caller, specs: list[CaseSpec]) -> list[CaseRow]:
    """The cases as they will be kept, once each session and turn are found as the caller reads them; a session
    named by several cases (a file of one chat's turns) is read once."""
    for spec in specs:  # the request's own words first, before anything is read
        one_boundary(spec.rewind_before_invocation_id, spec.rewind_before_task_id, required=True)
        _turns(spec.turns)
    read: dict[str, tuple[str | None, list[TurnInfo]]] = {}
    rows = []
    for spec in specs:
        if spec.session_id not in read:
            read[spec.session_id] = await _session_turns(svc, conn, caller, spec.session_id)
        agent_id, turns = read[spec.session_id]
        found = next((t for t in turns if _matches(t, spec)), None)
        if found is None:
            named = spec.rewind_before_invocation_id or spec.rewind_before_task_id
            kind = "invocation" if spec.rewind_before_invocation_id else "task"
            raise NotFound(f"{kind} {named} not found in session {spec.session_id}")
        rows.append(_row(spec, found, agent_id))
    return rows


def _pick(turns: list[TurnInfo], turn: str | int) -> TurnInfo | None:
    if not turns:
        return None
    if turn == "first":
        return turns[0]
    if turn == "last":
        return turns[-1]
    assert isinstance(turn, int)
    return turns[turn - 1] if turn <= len(turns) else None


def checked_select(select: Select) -> tuple[str, int, str | int]:
    """The agent's kagent id, the limit and the turn `select` names, checked (422 for a ref that names no agent,
    400 for a limit or a turn out of range)."""
    agent_id = agent_row_id(checked_agent_ref(select.agent, "select.agent"))
    limit = whole(select.limit, "select.limit")
    if not 1 <= limit <= MAX_SELECT:
        raise BadRequest(f"select.limit must be between 1 and {MAX_SELECT}, got {limit}")
    turn: str | int = select.turn if isinstance(select.turn, str) else whole(select.turn, "select.turn")
    if isinstance(turn, int) and turn < 1:
        raise BadRequest(f'select.turn must be "first", "last" or a turn\'s number from 1, got {turn}')
    return agent_id, limit, turn


def _spec_of(session_id: str, turn: TurnInfo) -> CaseSpec:
    if turn.invocation_id.startswith(TASK_TURN):
        return CaseSpec(
            session_id=session_id, rewind_before_task_id=turn.task_id or turn.invocation_id[len(TASK_TURN) :]
        )
    return CaseSpec(session_id=session_id, rewind_before_invocation_id=turn.invocation_id)


async def selected_cases(svc: Services, conn: Connection, caller: Caller, select: Select) -> list[CaseRow]:
    """One case per conversation `select` picks; a conversation without the chosen turn is passed over."""
    agent_id, limit, turn = checked_select(select)
    sessions = await svc.store.suites.select_sessions(conn, caller.user_id, agent_id, select.since, select.until, limit)
    rows = []
    for session in sessions:
        _, turns = await _session_turns(svc, conn, caller, session.id)
        picked = _pick(turns, turn)
        if picked is not None:
            rows.append(_row(_spec_of(session.id, picked), picked, agent_id))
    return rows


async def every_turn(svc: Services, conn: Connection, caller: Caller, session_id: str) -> list[CaseSpec]:
    """A case at every turn of a conversation, in order (the embedded demo's suite)."""
    _, turns = await _session_turns(svc, conn, caller, session_id)
    return [_spec_of(session_id, turn) for turn in turns]


def case_json(row: CaseRow) -> Case:
    return Case(
        case_id=row.id, session_id=row.session_id, rewind_before_invocation_id=row.rewind_before_invocation_id,
        rewind_before_task_id=row.rewind_before_task_id, turns="all" if row.turns == "all" else int(row.turns),
        message=MessageEdit(text=row.message) if row.message else None, user_text=row.user_text,
        agent_ref=agent_ref_of(row.agent_id) if row.agent_id else None,
    )  # fmt: skip


def suite_json(suite: SuiteRow, cases: list[CaseRow]) -> Suite:
    return Suite(
        id=suite.id, name=suite.name, created_at=rfc3339(suite.created_at), cases=[case_json(c) for c in cases]
    )


def file_of(suite: Suite) -> SuiteFile:
    specs = [
        CaseSpec(
            session_id=c.session_id,
            rewind_before_invocation_id=c.rewind_before_invocation_id,
            rewind_before_task_id=c.rewind_before_task_id,
            turns=c.turns,
            message=c.message,
        )
        for c in suite.cases
    ]
    return SuiteFile(name=suite.name, cases=specs)
