"""Everything a boundary search decides, read for every turn of a session, and the turn listing walked page
by page: what tests compare between two ways of answering (with and without the turn map, with and without
an index an earlier version left on kagent's tables)."""

from __future__ import annotations

from typing import Any

import msgspec

from service.branches import transcript, turns
from service.identity import Caller
from service.operations import forking, rewind
from service.schemas import ForkRequest, RewindRequest
from service.services import Services
from tests.helpers import digest, session_rows


def stable(value: Any) -> Any:
    """An answer without what differs between two runs of the same operation (new ids, times)."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in {"id", "created_at", "updated_at", "deleted_at"}}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


async def answers(svc: Services, caller: Caller, session_id: str, invocations: list[str]) -> dict[str, Any]:
    """Everything a boundary search decides, for every turn of one session: fork and rewind dry runs, a
    real fork's rows, what-if's source turn, the transcript before the turn, the turn listing's pages."""
    out: dict[str, Any] = {}
    for inv in [*invocations, "e-not-a-turn"]:
        plan = await forking.fork(svc, caller, session_id, ForkRequest(rewind_before_invocation_id=inv, dry_run=True))
        out[f"fork plan {inv}"] = stable(msgspec.to_builtins(plan.data))
        try:
            undo = await rewind.rewind(
                svc, caller, session_id, RewindRequest(rewind_before_invocation_id=inv, dry_run=True)
            )
            out[f"rewind plan {inv}"] = stable(msgspec.to_builtins(undo))
        except Exception as exc:  # a refusal is an answer too
            out[f"rewind plan {inv}"] = repr(exc)
        try:
            text = await transcript.read(svc, caller, session_id, before=inv)
            out[f"transcript before {inv}"] = stable(msgspec.to_builtins(text))
        except Exception as exc:
            out[f"transcript before {inv}"] = repr(exc)
    middle = invocations[len(invocations) // 2]
    forked = await forking.fork(svc, caller, session_id, ForkRequest(rewind_before_invocation_id=middle))
    data = msgspec.to_builtins(forked.data)
    out["fork"] = stable(data["fork"])
    rows = await session_rows(svc.pool, data["id"], caller.user_id)
    out["fork rows"] = {table: len(found) for table, found in rows.items()}
    out["fork event data"] = digest(sorted(r["data"] for r in rows["events"]))
    for limit in (1, 2, 100):
        out[f"pages of {limit}"] = await pages(svc, caller, session_id, limit)
    return out


async def pages(svc: Services, caller: Caller, session_id: str, limit: int) -> list[Any]:
    pages: list[Any] = []
    after = None
    while True:
        page = await turns.invocations(svc, caller, session_id, limit=limit, after=after)
        pages.append([*msgspec.to_builtins(page.items), page.last])
        if page.last or not page.items:
            return pages
        after = page.items[-1].invocation_id
