"""Saved suites: made (by hand, by `select`, from a file), listed, read, a case added or removed, exported. Only
the creator sees a suite (404 alike for a suite that is missing or another's). Every case is checked before
anything is written, and a suite and its cases are written in one transaction."""

from __future__ import annotations

import uuid

import msgspec
import yaml

from service.agents.suites.cases import (
    MAX_CASES,
    CaseSpec,
    Suite,
    SuiteFile,
    SuiteItem,
    SuiteRequest,
    checked_cases,
    file_of,
    selected_cases,
    suite_json,
)
from service.errors import BadRequest, Forbidden, NotFound, Unprocessable
from service.identity import Caller
from service.kagent.store.base import Connection
from service.kagent.store.suites import SuiteRow
from service.schemas import rfc3339
from service.services import Services

MAX_LISTED = 200


async def _own(svc: Services, conn: Connection, caller: Caller) -> None:
    """Suites are the caller's own, with a share token or without; an unknown token is refused, as on every path
    (a known one only lets a case name the shared session, read as its owner's)."""
    if caller.share_token is not None and await svc.store.sessions.share_by_token(conn, caller.share_token) is None:
        raise Forbidden("Invalid or expired share token")


async def _found(svc: Services, conn: Connection, caller: Caller, suite_id: str, *, lock: bool = False) -> SuiteRow:
    suite = await svc.store.suites.suite(conn, suite_id, caller.user_id, lock=lock)
    if suite is None:
        raise NotFound("Suite not found")
    return suite


async def create(svc: Services, caller: Caller, req: SuiteRequest) -> Suite:
    """A new suite of the cases given, then those `select` picks; every case checked before one is written."""
    async with svc.connection() as conn:
        await _own(svc, conn, caller)
        rows = await checked_cases(svc, conn, caller, list(req.cases or []))
        if req.select is not None:
            rows += await selected_cases(svc, conn, caller, req.select)
        if len(rows) > MAX_CASES:
            raise Unprocessable(f"a suite holds at most {MAX_CASES} cases, this one would hold {len(rows)}")
        async with conn.transaction():
            suite = await svc.store.suites.insert_suite(conn, str(uuid.uuid4()), caller.user_id, req.name)
            await svc.store.suites.insert_cases(conn, suite.id, rows)
            return suite_json(suite, await svc.store.suites.cases(conn, suite.id))


async def of_user(svc: Services, caller: Caller) -> list[SuiteItem]:
    async with svc.connection() as conn:
        await _own(svc, conn, caller)
        suites = await svc.store.suites.suites_of(conn, caller.user_id, MAX_LISTED)
    return [SuiteItem(id=s.id, name=s.name, created_at=rfc3339(s.created_at), cases=s.cases) for s in suites]


async def get(svc: Services, caller: Caller, suite_id: str) -> Suite:
    async with svc.connection() as conn:
        await _own(svc, conn, caller)
        suite = await _found(svc, conn, caller, suite_id)
        return suite_json(suite, await svc.store.suites.cases(conn, suite.id))


async def add_case(svc: Services, caller: Caller, suite_id: str, spec: CaseSpec) -> Suite:
    """One case appended (the page's "Save as a case", the MCP tool `save_case`)."""
    async with svc.connection() as conn:
        await _own(svc, conn, caller)
        await _found(svc, conn, caller, suite_id)
        rows = await checked_cases(svc, conn, caller, [spec])
        async with conn.transaction():
            suite = await _found(svc, conn, caller, suite_id, lock=True)
            await svc.store.suites.insert_cases(conn, suite.id, rows)
            cases = await svc.store.suites.cases(conn, suite.id)
            if len(cases) > MAX_CASES:  # the insert is rolled back with the transaction
                raise Unprocessable(f"a suite holds at most {MAX_CASES} cases: suite {suite_id} is full")
            return suite_json(suite, cases)


async def delete_case(svc: Services, caller: Caller, suite_id: str, case_id: str) -> Suite:
    async with svc.connection() as conn, conn.transaction():
        await _own(svc, conn, caller)
        suite = await _found(svc, conn, caller, suite_id, lock=True)
        if not await svc.store.suites.delete_case(conn, suite.id, case_id):
            raise NotFound(f"case {case_id} not found in suite {suite_id}")
        return suite_json(suite, await svc.store.suites.cases(conn, suite.id))


async def export(svc: Services, caller: Caller, suite_id: str) -> bytes:
    """The suite as YAML: a file to keep beside the agent's manifests and import again."""
    return msgspec.yaml.encode(file_of(await get(svc, caller, suite_id)))


def parse_file(body: bytes, media: str) -> SuiteFile:
    """A suite file, YAML or JSON (by its Content-Type), checked as a request body is."""
    try:
        if media == "application/json" or media.endswith("+json"):
            file = msgspec.json.decode(body, type=SuiteFile)
        else:
            _no_aliases(body)
            file = msgspec.yaml.decode(body, type=SuiteFile)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid suite file: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the suite file is not valid {'JSON' if 'json' in media else 'YAML'}: {exc}") from None
    if file.version != 1:
        raise BadRequest(f"invalid suite file: version {file.version} is not one this service reads (1)")
    return file


def _no_aliases(body: bytes) -> None:
    """A suite file has no use for YAML's anchors: refused before the document is built, since a few aliased
    anchors in a small body stand for billions of nodes ("billion laughs")."""
    try:
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(body, Loader=yaml.SafeLoader)):
            raise BadRequest("the suite file uses YAML aliases (*name), which a suite file does not accept")
    except yaml.YAMLError as exc:
        raise BadRequest(f"the suite file is not valid YAML: {exc}") from None


async def import_file(svc: Services, caller: Caller, file: SuiteFile) -> Suite:
    return await create(svc, caller, SuiteRequest(name=file.name, cases=list(file.cases)))
