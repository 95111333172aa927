"""A replay's road through the code (issue 33): the request of a what-if and of an experiment followed, as it
runs, through the modules (rooms) it passes, counting how often it comes back to a room it already left and how
often it climbs back up (into a room that imports the one it was in: only a callback takes it there).

How it is counted: every call of a function of `service` whose arguments (or the variables its closure holds)
carry the request or a value taken from it (the request itself, a copy, or a string or list of its fields, as
such or inside a tuple, list, dict, Struct or dataclass), in the order the calls are made, by the start's own
tasks (not the runner's jobs it launches). A coroutine resumed is not a new call. A stay is a run of such calls
in one module; a return is a stay in a module visited before; a climb is a stay in a module that imports,
directly or not, the module of the stay before it (tests/test_layers.py's import graph). Flags too small to
follow by identity (numbers, `"all"`, `"stop"`) are not followed. Real PostgreSQL, real a2a-sdk agents."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import asyncpg
import msgspec
import pytest

from service.agents import experiments, whatif
from service.config import Settings
from service.identity import Caller
from service.kagent.store import Store
from service.services import Services, open_lock_pool
from tests.helpers import seed
from tests.support.a2a_agent import LEGACY, NAMESPACE, Seen, running_agents
from tests.test_layers import GRAPH

# The package a road is counted in (a call is followed when it, or its caller, is in it), and the most returns and
# climbs back up its road may make there. service.agents: the replay's own rooms (issue 33); service: every room,
# the fork's, the store's and the frame's too (issue 48: 15 returns and 7 climbs for a what-if before, 7 and 3
# after). ROAD_SCOPE names one package to count in alone (its limits: the whole package's, when not listed).
LIMITS = {"service.agents": (5, 3), "service": (8, 3)}
MAX_RETURNS, MAX_CLIMBS = LIMITS["service"]
SCOPES = [os.environ["ROAD_SCOPE"]] if os.environ.get("ROAD_SCOPE") else list(LIMITS)


@pytest.fixture(scope="module")
def agents(database_url: str) -> Iterator[tuple[str, Seen]]:
    with running_agents(database_url) as served:
        yield served


def _above() -> dict[str, set[str]]:
    """Every module each one imports, directly or not."""
    reach: dict[str, set[str]] = {}

    def visit(module: str) -> set[str]:
        if module not in reach:
            reach[module] = set()
            for target in GRAPH.get(module, ()):
                reach[module] |= {target, *visit(target)}
        return reach[module]

    for module in GRAPH:
        visit(module)
    return reach


IMPORTS = _above()


def _marks(req: msgspec.Struct) -> set[int]:
    """The ids of the request's values that can be followed by identity (long strings, lists, Structs)."""
    found = {id(req)}
    for name in req.__struct_fields__:
        value = getattr(req, name)
        if isinstance(value, msgspec.Struct):
            found |= _marks(value)
        elif isinstance(value, list) or (isinstance(value, str) and len(value) >= 8):
            found.add(id(value))
            found |= {id(v) for v in value if isinstance(value, list) and isinstance(v, str) and len(v) >= 8}
    return found


def _carries(value: object, marks: set[int], depth: int = 0) -> bool:
    if id(value) in marks:
        return True
    if depth >= 4 or isinstance(value, str | bytes | int | float | type(None)):
        return False
    if isinstance(value, list | tuple | set | frozenset):
        return any(_carries(v, marks, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_carries(v, marks, depth + 1) for v in value.values())
    if isinstance(value, msgspec.Struct):
        return any(_carries(getattr(value, f, None), marks, depth + 1) for f in value.__struct_fields__)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_carries(getattr(value, f.name, None), marks, depth + 1) for f in dataclasses.fields(value))
    return False


@dataclasses.dataclass
class Road:
    stays: list[str]

    @property
    def rooms(self) -> int:
        return len(set(self.stays))

    @property
    def returns(self) -> int:
        return len(self.stays) - self.rooms

    @property
    def climbs(self) -> int:
        """Returns into a room above the one the road was in (that imports it, directly or not)."""
        return sum(
            1
            for i, (a, b) in enumerate(zip(self.stays, self.stays[1:], strict=False))
            if b in self.stays[:i] and a in IMPORTS.get(b, set())
        )

    def __str__(self) -> str:
        return (
            f"{self.rooms} rooms, {len(self.stays)} stays, {self.returns} returns, {self.climbs} climbs: "
            + " > ".join(s.removeprefix("service.") for s in self.stays)
        )


def _a_value(frame: FrameType) -> bool:
    """Building or reading a value is not a visit: a dataclass's generated methods, a property, a comprehension
    (part of the function it stands in: inlined since Python 3.12)."""
    code = frame.f_code
    if code.co_name.startswith("<") and code.co_name != "<lambda>":
        return True
    if code.co_filename.startswith("<"):  # dataclasses' generated __init__, __eq__, ...
        return True
    owner = frame.f_locals.get("self")
    attr = getattr(type(owner), code.co_name, None) if owner is not None else None
    return isinstance(attr, property)


async def follow(req: msgspec.Struct, start: Any, scope: str = "service.agents") -> Road:
    """Run `start()` with a profiler that notes each call carrying the request (see the module's text)."""
    marks = _marks(req)
    calls: list[str] = []
    names: list[str] = []  # each call's module and function (ROAD_VERBOSE prints them)
    entered: dict[int, FrameType] = {}  # frames seen (kept, so that no id is reused): a resume is not a call

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event != "call" or not frame.f_globals.get("__name__", "").startswith("service."):
            return
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back is not None else ""
        if scope and not (frame.f_globals["__name__"].startswith(scope) or caller.startswith(scope)):
            return  # inside a room below the replay's (the fork's own road): not followed
        if id(frame) in entered:
            return
        if _a_value(frame):
            return
        entered[id(frame)] = frame
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is not None and task.get_name().startswith(("whatif-", "experiment-")):
            return  # the runner's jobs and chores, launched by the start: not the start's road
        if any(_carries(v, marks) for v in frame.f_locals.values()):
            calls.append(frame.f_globals["__name__"])
            names.append(f"{frame.f_globals['__name__'].removeprefix('service.')}.{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        await start()
    finally:
        sys.setprofile(None)
    if os.environ.get("ROAD_VERBOSE"):
        print("\n".join(names))
    stays = [m for i, m in enumerate(calls) if i == 0 or calls[i - 1] != m]
    return Road(stays=stays)


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("kind", ["whatif", "experiment"])
async def test_a_start_keeps_to_its_road(
    settings: Settings, database_url: str, pool: asyncpg.Pool, agents: tuple[str, Seen], kind: str, scope: str
) -> None:
    tight = dataclasses.replace(settings, kagent_a2a_url=agents[0], whatif_heartbeat_seconds=0.2)
    locks = await open_lock_pool(tight, database_url)
    svc = Services(settings=tight, store=Store(tight.service_schema), pool=pool, locks=locks)
    runner = whatif.Runner(svc=svc)
    conv = await seed(pool, dialect="legacy", turns=3)
    ref = f"{NAMESPACE}/{LEGACY}"
    body: dict[str, Any] = {
        "rewind_before_invocation_id": conv.invocation_ids[1], "turns": "all", "name": "a road followed",
        "message": {"text": "Asked another way: how many pods run?"},
    }  # fmt: skip
    caller = Caller(user_id=conv.user_id)
    try:
        if kind == "whatif":
            req: msgspec.Struct = msgspec.json.decode(
                msgspec.json.encode(body | {"agent_ref": ref}), type=whatif.WhatifRequest
            )
            road = await follow(
                req, lambda: whatif.start(svc, runner, caller, conv.session_id, req, idempotency_key="road-w"), scope
            )
        else:
            req = msgspec.json.decode(msgspec.json.encode(body | {"agents": [ref]}), type=experiments.ExperimentRequest)
            road = await follow(
                req,
                lambda: experiments.start(svc, runner, caller, conv.session_id, req, idempotency_key="road-e"),
                scope,
            )
        print(f"{kind} ({scope}): {road}")
        await asyncio.gather(*runner.jobs.values(), return_exceptions=True)
    finally:
        await runner.stop()
        await locks.close()
    most_returns, most_climbs = LIMITS.get(scope, (MAX_RETURNS, MAX_CLIMBS))
    assert road.returns <= most_returns and road.climbs <= most_climbs, str(road)
