"""The suite calls over HTTP: make one (cases, `select`), list, read, add or remove a case, export it as YAML and
import one from YAML or JSON (docs/suites.md)."""

from __future__ import annotations

from litestar import Response, delete, get, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from service.agents.suites import saved
from service.agents.suites.cases import CaseSpec, SuiteRequest
from service.doors.api import AnyRequest, caller_of, decode_body, ok, raw_headers, services
from service.errors import BadRequest, UnsupportedMediaType
from service.identity import Caller
from service.schemas import checked_id, is_utf8

# A browser form on another site can send none of these without asking first (CORS), as with application/json.
FILE_TYPES = ("application/json", "application/yaml", "application/x-yaml", "text/yaml")


def _suite_id(value: str) -> str:
    return checked_id(value, "suite id")


def caller(request: AnyRequest) -> Caller:
    """The caller, once the query holds nothing but `user_id` (a misspelt parameter is a 400, not ignored)."""
    unknown = sorted(set(request.query_params) - {"user_id"})
    if unknown:
        raise BadRequest(f"unknown query parameters: {', '.join(unknown)} (only user_id is known here)")
    return caller_of(request)


@post("/api/suites", status_code=201)
async def create_suite(request: AnyRequest) -> Response[bytes]:
    req = await decode_body(request, SuiteRequest)
    suite = await saved.create(services(request), caller(request), req)
    return ok(suite, "Suite created", status=201, headers={"Location": f"/api/suites/{suite.id}"})


@get("/api/suites")
async def list_suites(request: AnyRequest) -> Response[bytes]:
    return ok(await saved.of_user(services(request), caller(request)), "Successfully listed suites")


@get("/api/suites/{suite_id:str}")
async def read_suite(request: AnyRequest, suite_id: FromPath[str]) -> Response[bytes]:
    found = await saved.get(services(request), caller(request), _suite_id(suite_id))
    return ok(found, "Successfully read suite")


@post("/api/suites/{suite_id:str}/cases", status_code=201)
async def add_case(request: AnyRequest, suite_id: FromPath[str]) -> Response[bytes]:
    spec = await decode_body(request, CaseSpec)
    found = await saved.add_case(services(request), caller(request), _suite_id(suite_id), spec)
    return ok(found, "Case saved", status=201)


@delete("/api/suites/{suite_id:str}/cases/{case_id:str}", status_code=200)
async def delete_case(request: AnyRequest, suite_id: FromPath[str], case_id: FromPath[str]) -> Response[bytes]:
    # No Content-Type asked for: a page on another site cannot send a DELETE without asking first (CORS), as it
    # can a form's POST.
    found = await saved.delete_case(
        services(request), caller(request), _suite_id(suite_id), checked_id(case_id, "case id")
    )
    return ok(found, "Case removed")


@get("/api/suites/{suite_id:str}/export")
async def export_suite(request: AnyRequest, suite_id: FromPath[str]) -> Response[bytes]:
    body = await saved.export(services(request), caller(request), _suite_id(suite_id))
    disposition = f'attachment; filename="suite-{_suite_id(suite_id)}.yaml"'
    return Response(body, media_type="application/yaml", headers={"Content-Disposition": disposition})


@post("/api/suites/import", status_code=201)
async def import_suite(request: AnyRequest) -> Response[bytes]:
    types = raw_headers(request).get("content-type", [])
    if len(types) != 1:
        raise UnsupportedMediaType(f"Content-Type must be one of {', '.join(FILE_TYPES)}")
    media = types[0].split(";", 1)[0].strip().lower()
    if media not in FILE_TYPES:
        raise UnsupportedMediaType(f"Content-Type must be one of {', '.join(FILE_TYPES)}, got {media!r}")
    body = await request.body()
    if not is_utf8(body):
        raise BadRequest("request body is not valid UTF-8")
    suite = await saved.import_file(services(request), caller(request), saved.parse_file(body, media))
    return ok(suite, "Suite imported", status=201, headers={"Location": f"/api/suites/{suite.id}"})


def handlers() -> list[HTTPRouteHandler]:
    return [create_suite, list_suites, read_suite, add_case, delete_case, export_suite, import_suite]
