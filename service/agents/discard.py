"""Clearing an experiment's branches away, and back: discard them all, or keep one (the winner) and discard the
rest, in one call; undo brings back exactly what it hid.

The product never erases: a discarded branch's fork is hidden as kagent hides a deleted session (its
`session.deleted_at` stamped; its events and tasks stay as they are), so it leaves kagent's chat list and the
page's, and comes back on undo. A discard hides only the forks the experiment made that are still visible (one the
user deleted in kagent stays theirs), with one stamp, recorded in the service's own schema
(`kagent_fork.discard`); undo brings back those that still carry that stamp, never a session deleted since by
other hands.

Both run in one transaction that first locks the experiment's row (FOR UPDATE), so discards and undos of one
experiment run one at a time, and a branch's end cannot settle the experiment between the check that it ended
and the stamp. At most one discard is in force per experiment. A retry is idempotent: discarding again with the
same `keep` answers the discard in force, undoing again answers the undone one (`replayed`).
"""

from __future__ import annotations

import logging
import uuid

import msgspec

from service.agents.replay import grid, judge
from service.errors import Conflict, NotFound
from service.identity import Caller
from service.kagent.store.base import Connection
from service.kagent.store.experiments import DiscardRow, ExperimentRow
from service.kagent.store.jobs import WhatifJob
from service.schemas import Text
from service.services import Services

log = logging.getLogger("kagent_fork")


class DiscardRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # The branch to keep: its fork's session id or its job id (the grid's `session_id` or `job_id`).
    keep: Text | None = None


def kept_session(experiment_id: str, branches: list[WhatifJob], keep: str | None) -> str | None:
    """The fork of the branch `keep` names (its session id or its job id), or None to keep none."""
    if keep is None:
        return None
    for job in branches:
        if keep in (job.session_id, job.id):
            return job.session_id
    raise NotFound(
        f"experiment {experiment_id} has no branch {keep}: keep takes a branch's session_id or job_id "
        "(the experiment's own source is never discarded)"
    )


async def _locked(svc: Services, conn: Connection, caller: Caller, experiment_id: str) -> ExperimentRow:
    row = await svc.store.experiments.locked_experiment(conn, experiment_id, caller.user_id)
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return row


async def discard(
    svc: Services, caller: Caller, experiment_id: str, req: DiscardRequest
) -> tuple[grid.Experiment, bool]:
    """Hide every branch's fork but the kept one: (the grid, replayed). 409 while the experiment runs, or when
    a discard with another `keep` is in force."""
    store = svc.store.experiments
    async with svc.connection() as conn:
        async with conn.transaction():
            row = await _locked(svc, conn, caller, experiment_id)
            branches = await store.branches(conn, row.id)
            kept = kept_session(experiment_id, branches, req.keep)
            latest = await store.latest_discard(conn, row.id)
            replayed = latest is not None and latest.undone_at is None
            if latest is not None and replayed and latest.kept_session_id != kept:
                said = f"keeping {latest.kept_session_id}" if latest.kept_session_id else "all of them"
                raise Conflict(
                    f"the branches of experiment {experiment_id} are already discarded ({said}): "
                    "undo that discard first"
                )
            if row.status == "running":
                raise Conflict(
                    f"experiment {experiment_id} is still running: cancel it or wait for it to end, then discard its "
                    "branches"
                )
            # The judge reads the branches' forks while it runs: hiding them meanwhile is refused, and the
            # experiment's row lock makes a judgment asked for now wait for this transaction (judge_experiment).
            if not replayed and any(
                j.status in judge.OPEN for j in await svc.store.judgments.of_experiment(conn, row.id)
            ):
                raise Conflict(
                    f"experiment {experiment_id} is being judged: wait for its judgment to end (or cancel it), then "
                    "discard its branches"
                )
            if not replayed:
                await _hide(svc, conn, row, branches, kept)
        return await grid.experiment(svc, conn, caller, experiment_id), replayed


async def _hide(
    svc: Services, conn: Connection, row: ExperimentRow, branches: list[WhatifJob], kept: str | None
) -> None:
    store = svc.store.experiments
    forks = list(dict.fromkeys(j.session_id for j in branches if j.session_id != kept))
    stamp = await store.discard_stamp(conn)
    hidden = set(await store.hide_sessions(conn, forks, row.user_id, stamp)) if forks else set()
    record = DiscardRow(
        id=str(uuid.uuid4()), experiment_id=row.id, user_id=row.user_id, kept_session_id=kept,
        session_ids=[s for s in forks if s in hidden], deleted_at=stamp, created_at=stamp, undone_at=None,
        restored_ids=None,
    )  # fmt: skip
    await store.insert_discard(conn, record)
    log.info(
        "experiment branches discarded",
        extra={"action": "discard", "experiment_id": row.id, "user_id": row.user_id, "discard_id": record.id,
               "sessions_hidden": len(record.session_ids), "kept_session_id": kept},
    )  # fmt: skip


async def undo(svc: Services, caller: Caller, experiment_id: str) -> tuple[grid.Experiment, bool]:
    """Bring back the forks the discard in force hid: (the grid, replayed). 409 when the experiment's branches
    were never discarded."""
    store = svc.store.experiments
    async with svc.connection() as conn:
        async with conn.transaction():
            row = await _locked(svc, conn, caller, experiment_id)
            latest = await store.latest_discard(conn, row.id)
            if latest is None:
                raise Conflict(f"the branches of experiment {experiment_id} were never discarded: nothing to undo")
            replayed = latest.undone_at is not None
            if not replayed:
                back = set(await store.restore_sessions(conn, latest)) if latest.session_ids else set()
                await store.mark_discard_undone(conn, latest.id, [s for s in latest.session_ids if s in back])
                log.info(
                    "experiment discard undone",
                    extra={"action": "undo_discard", "experiment_id": row.id, "user_id": row.user_id,
                           "discard_id": latest.id, "sessions_restored": len(back)},
                )  # fmt: skip
        return await grid.experiment(svc, conn, caller, experiment_id), replayed
