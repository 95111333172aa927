"""The suite-run calls over HTTP: start a run of a suite (or its dry run), list a suite's runs, read one (JSON,
Markdown, or its plot as SVG), cancel it, keep one of its branches (docs/suites.md, "Runs")."""

from __future__ import annotations

from litestar import Response, get, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from service.agents import experiments
from service.agents.suites import report, runs
from service.agents.suites.ledger import RunRequest
from service.doors.api import AnyRequest, bytes_answer, caller_of, decode_body, idempotency_key, ok, services
from service.errors import BadRequest
from service.identity import Caller
from service.schemas import EmptyRequest, checked_id

FORMATS = {"json": "application/json", "markdown": "text/markdown"}


def _caller(request: AnyRequest, *known: str) -> Caller:
    """The caller, once the query holds nothing but `user_id` and `known` (a misspelt parameter is a 400)."""
    unknown = sorted(set(request.query_params) - {"user_id", *known})
    if unknown:
        raise BadRequest(f"unknown query parameters: {', '.join(unknown)}")
    return caller_of(request)


def _form(request: AnyRequest) -> str:
    """?format: json (the default) or markdown, given once."""
    forms = request.query_params.getall("format", [])
    form = forms[0] if len(forms) == 1 else "json" if not forms else ""
    if form not in FORMATS:
        raise BadRequest(f"query parameter format must be given once, one of {sorted(FORMATS)}")
    return form


def _ids(suite_id: str, run_id: str | None = None) -> tuple[str, str]:
    return checked_id(suite_id, "suite id"), checked_id(run_id, "run id") if run_id is not None else ""


@post("/api/suites/{suite_id:str}/runs", status_code=202)
async def start_run(request: AnyRequest, suite_id: FromPath[str]) -> Response[bytes]:
    req = await decode_body(request, RunRequest)
    answer, replayed = await runs.start(
        services(request), request.app.state.whatif_runner, _caller(request), _ids(suite_id)[0], req,
        idempotency_key(request),
    )  # fmt: skip
    if replayed:
        return ok(answer, "Suite run already started for this Idempotency-Key", headers={"Idempotent-Replayed": "true"})
    if isinstance(answer, runs.RunPlan):
        return ok(answer, "Suite run dry run: nothing was written")
    assert isinstance(answer, runs.Run)
    location = f"/api/suites/{answer.suite_id}/runs/{answer.id}"
    return ok(answer, "Suite run started", status=202, headers={"Location": location})


@get("/api/suites/{suite_id:str}/runs")
async def list_runs(request: AnyRequest, suite_id: FromPath[str]) -> Response[bytes]:
    found = await runs.of_suite(services(request), _caller(request), _ids(suite_id)[0])
    return ok(found, "Successfully listed suite runs")


@get("/api/suites/{suite_id:str}/runs/{run_id:str}")
async def read_run(request: AnyRequest, suite_id: FromPath[str], run_id: FromPath[str]) -> Response[bytes]:
    caller = _caller(request, "format")
    form = _form(request)
    found = await runs.get(services(request), caller, *_ids(suite_id, run_id))
    if form == "markdown":
        return bytes_answer(report.markdown(found).encode(), FORMATS["markdown"])
    return ok(found, "Successfully read suite run")


@get("/api/suites/{suite_id:str}/runs/{run_id:str}/plot.svg")
async def run_plot(request: AnyRequest, suite_id: FromPath[str], run_id: FromPath[str]) -> Response[bytes]:
    found = await runs.get(services(request), _caller(request), *_ids(suite_id, run_id))
    return bytes_answer(report.plot_svg(found).encode(), "image/svg+xml")


@get("/api/suites/{suite_id:str}/runs/{run_id:str}/cases/{case_id:str}")
async def run_case(
    request: AnyRequest, suite_id: FromPath[str], run_id: FromPath[str], case_id: FromPath[str]
) -> Response[bytes]:
    caller = _caller(request, "format")
    form = _form(request)
    found = await runs.case_experiments(
        services(request), caller, *_ids(suite_id, run_id), checked_id(case_id, "case id")
    )
    if form == "markdown":
        text = "\n\n".join(experiments.markdown(e) for e in found.experiments)
        return bytes_answer(text.encode(), FORMATS["markdown"])
    return ok(found, "Successfully read the case's experiments")


@post("/api/suites/{suite_id:str}/runs/{run_id:str}/cancel", status_code=200)
async def cancel_run(request: AnyRequest, suite_id: FromPath[str], run_id: FromPath[str]) -> Response[bytes]:
    await decode_body(request, EmptyRequest)
    found = await runs.cancel(services(request), _caller(request), *_ids(suite_id, run_id))
    return ok(found, "Suite run cancelled")


@post("/api/suites/{suite_id:str}/runs/{run_id:str}/keep", status_code=201)
async def keep_branch(request: AnyRequest, suite_id: FromPath[str], run_id: FromPath[str]) -> Response[bytes]:
    req = await decode_body(request, runs.KeepRequest)
    outcome = await runs.keep(services(request), _caller(request), *_ids(suite_id, run_id), req)
    session_id = outcome.session_id
    headers = {"Location": f"/api/sessions/{session_id}"} if session_id else None
    return ok(outcome.data, "Branch kept in your chats", status=201, headers=headers)


def handlers() -> list[HTTPRouteHandler]:
    return [start_run, list_runs, read_run, run_plot, run_case, cancel_run, keep_branch]
