"""The experiment calls over HTTP: start, read (JSON or a Markdown table), cancel, judge, a person's vote, a
source's list, and the discard of its branches and its undo."""

from __future__ import annotations

from litestar import Response, get, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from service.agents import discard, experiments
from service.doors.api import (
    AnyRequest,
    _authorization,
    _query_text,
    bytes_answer,
    caller_of,
    decode_body,
    idempotency_key,
    ok,
    services,
)
from service.errors import BadRequest
from service.schemas import EmptyRequest, checked_id

# Litestar adds "; charset=utf-8" to text/* types itself (given here too, it was sent twice).
FORMATS = {"json": "application/json", "markdown": "text/markdown"}


@post("/api/sessions/{session_id:str}/experiments", status_code=202)
async def start_experiment(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    req = await decode_body(request, experiments.ExperimentRequest)
    caller = caller_of(request)
    answer, replayed = await experiments.start(
        services(request), request.app.state.whatif_runner, caller, checked_id(session_id), req,
        idempotency_key=idempotency_key(request), authorization=_authorization(request),
    )  # fmt: skip
    if replayed:
        return ok(
            answer, "Experiment already started for this Idempotency-Key", headers={"Idempotent-Replayed": "true"}
        )
    if isinstance(answer, experiments.DryRun):
        return ok(answer, "Experiment dry run: nothing was written")
    assert isinstance(answer, experiments.Started)
    location = f"/api/experiments/{answer.experiment.id}"
    return ok(answer, "Experiment started", status=202, headers={"Location": location})


@get("/api/experiments/{experiment_id:str}")
async def experiment(request: AnyRequest, experiment_id: FromPath[str]) -> Response[bytes]:
    form = _query_text(request, "format") or "json"
    if form not in FORMATS:
        raise BadRequest(f"query parameter format must be one of {sorted(FORMATS)}, got {form!r}")
    found = await experiments.get(services(request), caller_of(request), checked_id(experiment_id, "experiment id"))
    if form == "markdown":
        return bytes_answer(experiments.markdown(found).encode(), FORMATS["markdown"])
    return ok(found, "Successfully read experiment")


@post("/api/experiments/{experiment_id:str}/cancel", status_code=200)
async def cancel_experiment(request: AnyRequest, experiment_id: FromPath[str]) -> Response[bytes]:
    await decode_body(request, EmptyRequest)
    found = await experiments.cancel(
        services(request), caller_of(request), checked_id(experiment_id, "experiment id"), _authorization(request)
    )
    return ok(found, "Successfully cancelled experiment")


@post("/api/experiments/{experiment_id:str}/discard", status_code=200)
async def discard_branches(request: AnyRequest, experiment_id: FromPath[str]) -> Response[bytes]:
    req = await decode_body(request, discard.DiscardRequest)
    found, replayed = await discard.discard(
        services(request), caller_of(request), checked_id(experiment_id, "experiment id"), req
    )
    if replayed:
        return ok(found, "Branches already discarded", headers={"Idempotent-Replayed": "true"})
    return ok(found, "Successfully discarded branches")


@post("/api/experiments/{experiment_id:str}/discard/undo", status_code=200)
async def undo_discard(request: AnyRequest, experiment_id: FromPath[str]) -> Response[bytes]:
    await decode_body(request, EmptyRequest)
    found, replayed = await discard.undo(
        services(request), caller_of(request), checked_id(experiment_id, "experiment id")
    )
    if replayed:
        return ok(found, "Discard already undone", headers={"Idempotent-Replayed": "true"})
    return ok(found, "Successfully undid the discard")


@post("/api/experiments/{experiment_id:str}/judge", status_code=202)
async def judge_experiment(request: AnyRequest, experiment_id: FromPath[str]) -> Response[bytes]:
    req = await decode_body(request, experiments.JudgeRequest)
    found = await experiments.judge_experiment(
        services(request), request.app.state.whatif_runner, caller_of(request),
        checked_id(experiment_id, "experiment id"), req, _authorization(request),
    )  # fmt: skip
    return ok(found, "Judging experiment", status=202, headers={"Location": f"/api/experiments/{found.id}"})


@post("/api/experiments/{experiment_id:str}/votes", status_code=200)
async def vote_experiment(request: AnyRequest, experiment_id: FromPath[str]) -> Response[bytes]:
    req = await decode_body(request, experiments.VoteRequest)
    found = await experiments.vote(
        services(request), caller_of(request), checked_id(experiment_id, "experiment id"), req
    )
    return ok(found, "Vote kept")


@get("/api/sessions/{session_id:str}/experiments")
async def list_experiments(request: AnyRequest, session_id: FromPath[str]) -> Response[bytes]:
    found = await experiments.of_session(services(request), caller_of(request), checked_id(session_id))
    return ok(found, "Successfully listed experiments")


def handlers() -> list[HTTPRouteHandler]:
    return [
        start_experiment, experiment, cancel_experiment, judge_experiment, vote_experiment, discard_branches,
        undo_discard, list_experiments,
    ]  # fmt: skip
