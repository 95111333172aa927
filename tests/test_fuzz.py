"""Schemathesis against the served /openapi.yaml of a real server: no 5xx, every status documented, every
answer as the document says, every error `{"error": "<text>"}`, and a rejected request writes nothing.

The fuzzer's ids are replaced, half of the time, by those of seeded conversations (and their turns),
so that it reaches forks and rewinds of real sessions, not only 404s."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import hypothesis
import pytest
import schemathesis
import yaml
from schemathesis import Case, CheckContext, GenerationMode, Response
from schemathesis.checks import CheckFunction

from service.agents.suites import saved
from service.agents.suites.cases import CaseSpec, SuiteRequest
from service.app import create_app
from service.config import Settings
from service.identity import Caller
from service.operations.rewind import RewindResult, rewind
from service.schemas import RewindRequest
from service.services import Services
from tests.helpers import new_user, seed, table_fingerprint
from tests.support.a2a_agent import running_agents
from tests.support.conversations import Conversation, create_share
from tests.support.live_server import live_server

ROOT = Path(__file__).resolve().parents[1]
MAX_EXAMPLES = 30


class Seeded:
    """Real ids the hooks substitute into generated cases."""

    def __init__(
        self,
        conversations: list[Conversation],
        shares: list[str],
        rewound: Conversation,
        rewinds: list[str],
        jobs: list[str],
        explored: Conversation,
        experiments: list[str],
        ended: list[str],
        judged: list[tuple[str, str]],
        suites: list[tuple[str, list[str]]],
        runs: list[str],
    ) -> None:
        self.conversations = conversations
        self.shares = shares
        self.rewound = rewound  # a conversation of its own for undo, rewound turn after turn
        self.rewinds = rewinds
        self.jobs = jobs  # what-if jobs of the conversations' owner
        self.explored = explored  # a conversation no fuzzed rewind touches, for what-ifs
        self.experiments = experiments  # experiments of the owner, each with one of the running jobs
        # Ended experiments of the owner, for the discard and its undo: their branches' forks name no session, so
        # that a discard hides none of the sessions the other operations use; the first one's is discarded.
        self.ended = ended
        self.judged = judged  # (experiment, its completed branch): to judge and to vote on
        self.suites = suites  # the owner's suites, each with its cases' ids (a fuzzed DELETE removes some)
        # Runs of the first suite, written as a run is, running with a heartbeat no sweep finds stale (no replica
        # drives them; a fuzzed cancel ends some); their own user is the owner, so `keep` forks the owner's chats.
        self.runs = runs
        self.random = random.Random(5)

    def conversation(self) -> Conversation:
        return self.random.choice(self.conversations)


@pytest.fixture(scope="module")
async def seeded(pool: asyncpg.Pool, services: Services) -> AsyncIterator[Seeded]:
    user = new_user()
    conversations = [
        await seed(pool, dialect=dialect, turns=3, tool_calls=True, user_id=user) for dialect in ("legacy", "v1")
    ]
    async with pool.acquire() as conn:
        shares = [
            await create_share(conn, session_id=c.session_id, owner=c.user_id, read_only=read_only)
            for c in conversations
            for read_only in (True, False)
        ]
    rewound = await seed(pool, dialect="v1", turns=8, user_id=user)
    rewinds = []
    for turn in reversed(rewound.turns[1:]):
        request = RewindRequest(rewind_before_invocation_id=turn.invocation_id)
        done = await rewind(services, Caller(user_id=user), rewound.session_id, request)
        assert isinstance(done, RewindResult) and done.rewind.id
        rewinds.append(done.rewind.id)
    jobs = [str(uuid.uuid4()) for _ in range(8)]
    # The experiments' branches are jobs of their own: cancelling a what-if job (an earlier operation of the
    # document) must not end the experiments whose cancel is fuzzed later.
    branches = [str(uuid.uuid4()) for _ in range(8)]
    async with pool.acquire() as conn:
        # Jobs another replica is running (its heartbeat is fresh for the whole run, so no sweep takes
        # them over): GET and cancel act on them.
        await conn.executemany(
            "INSERT INTO kagent_fork.whatif_job (id, user_id, parent_session_id, parent_user_id, session_id, "
            "rewind_before_invocation_id, agent_ref, dialect, message, status, runner, heartbeat_at) "
            "VALUES ($1, $2, $3, $2, $3, $4, 'kagent/k8s-agent', 'v1', '{}', 'running', 'gone', "
            "NOW() + interval '1 day')",
            [(job, user, conversations[1].session_id, conversations[1].invocation_ids[0]) for job in jobs + branches],
        )
        experiments = [str(uuid.uuid4()) for _ in branches]
        await conn.executemany(
            "INSERT INTO kagent_fork.experiment (id, user_id, source_session_id, source_user_id, "
            "rewind_before_invocation_id, turns_requested, turns, on_approval, repeats) "
            "VALUES ($1, $2, $3, $2, $4, '1', 1, 'stop', 1)",
            [(e, user, conversations[1].session_id, conversations[1].invocation_ids[0]) for e in experiments],
        )
        await conn.executemany(
            "UPDATE kagent_fork.whatif_job SET experiment_id = $1 WHERE id = $2",
            list(zip(experiments, branches, strict=True)),
        )
        ended = [str(uuid.uuid4()) for _ in range(4)]
        await conn.executemany(
            "INSERT INTO kagent_fork.experiment (id, user_id, source_session_id, source_user_id, "
            "rewind_before_invocation_id, turns_requested, turns, on_approval, repeats, status, finished_at) "
            "VALUES ($1, $2, $3, $2, $4, '1', 1, 'stop', 1, 'completed', NOW())",
            [(e, user, conversations[1].session_id, conversations[1].invocation_ids[0]) for e in ended],
        )
        await conn.executemany(
            "INSERT INTO kagent_fork.whatif_job (id, user_id, parent_session_id, parent_user_id, session_id, "
            "rewind_before_invocation_id, agent_ref, dialect, message, status, runner, experiment_id) "
            "VALUES ($1, $2, $3, $2, $4, $5, 'kagent/k8s-agent', 'v1', '{}', 'completed', 'gone', $6)",
            [(str(uuid.uuid4()), user, conversations[1].session_id, f"no-such-fork-{e}",
              conversations[1].invocation_ids[0], e) for e in ended],
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO kagent_fork.discard (id, experiment_id, user_id, session_ids, deleted_at) "
            "VALUES ($1, $2, $3, '{}', NOW())",
            str(uuid.uuid4()), ended[0], user,
        )  # fmt: skip
    # Its own agent is one the test agents serve, so that an experiment or a what-if that names no agent (the
    # source's, by default) reaches the real thing too, not only the card check's refusal.
    explored = await seed(pool, dialect="v1", turns=3, tool_calls=True, user_id=user, agent_id="kagent__NS__v1_agent")
    # Experiments that ended on the conversation no fuzzed rewind touches, each with one completed branch:
    # judged and voted on (issue 35).
    judged = [(str(uuid.uuid4()), str(uuid.uuid4())) for _ in range(2)]
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO kagent_fork.experiment (id, user_id, source_session_id, source_user_id, "
            "rewind_before_invocation_id, turns_requested, turns, on_approval, repeats, status, finished_at) "
            "VALUES ($1, $2, $3, $2, $4, '1', 1, 'stop', 1, 'completed', NOW())",
            [(e, user, explored.session_id, explored.invocation_ids[1]) for e, _ in judged],
        )
        await conn.executemany(
            "INSERT INTO kagent_fork.whatif_job (id, user_id, parent_session_id, parent_user_id, session_id, "
            "rewind_before_invocation_id, agent_ref, dialect, message, status, runner, experiment_id, finished_at) "
            "VALUES ($1, $2, $3, $2, $3, $4, 'kagent/v1-agent', 'v1', '{}', 'completed', 'gone', $5, NOW())",
            [(b, user, explored.session_id, explored.invocation_ids[1], e) for e, b in judged],
        )
    suites = []
    for _ in range(2):
        cases = [CaseSpec(session_id=c.session_id, rewind_before_invocation_id=i)
                 for c in conversations for i in c.invocation_ids]  # fmt: skip
        made = await saved.create(services, Caller(user_id=user), SuiteRequest(name="fuzzed", cases=cases))
        suites.append((made.id, [c.case_id for c in made.cases]))
    runs = [str(uuid.uuid4()) for _ in range(8)]
    request = '{"agents": ["kagent/v1-agent"], "judge": {"agent": "kagent/v1-agent"}}'
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO kagent_fork.suite_run (id, suite_id, user_id, run_user, request, runner, heartbeat_at) "
            "VALUES ($1, $2, $3, $3, $4, 'gone', NOW() + interval '1 day')",
            [(r, suites[0][0], user, request) for r in runs],
        )
        # each run's cases, continued by the seeded experiments (the run's user is the owner, whose they are)
        await conn.executemany(
            "INSERT INTO kagent_fork.suite_run_case (run_id, case_id, ordinal, session_id, spec, experiment_ids, "
            "status) VALUES ($1, $2, $3, $4, '[]', $5, 'running')",
            [(r, c, n, conversations[0].session_id, [experiments[n % len(experiments)]])
             for r in runs for n, c in enumerate(suites[0][1])],
        )  # fmt: skip
    yield Seeded(conversations, shares, rewound, rewinds, jobs, explored, experiments, ended, judged, suites, runs)


@pytest.fixture(scope="module")
def fuzzed_url(settings: Settings, database_url: str, pool: asyncpg.Pool) -> Iterator[str]:
    # What-ifs reach real A2A agents; one that names no served agent ends `failed`, as it should.
    with running_agents(database_url) as (a2a_url, _):
        app = create_app(dataclasses.replace(settings, kagent_a2a_url=a2a_url), database_url)
        with live_server(app) as url:
            yield url


# What the document is held to, by this test and by schemathesis' own command alike.
CONFIG = ROOT / "tests" / "schemathesis.toml"


@pytest.fixture(scope="module")
def api_schema(fuzzed_url: str) -> Any:
    """The document as the server serves it, with the statuses a schema-valid request may meet (CONFIG)."""
    config = schemathesis.Config.from_path(CONFIG)
    return schemathesis.openapi.from_url(f"{fuzzed_url}/openapi.yaml", config=config)


def test_schemathesis_own_run_finds_nothing(fuzzed_url: str, tmp_path: Path) -> None:
    """Issue 45, 5b: schemathesis' own command, its coverage phase (each parameter's edges, the methods a path does
    not take, OPTIONS) with every check, against the served document. It found OPTIONS .../experiments leaving GET
    out of `Allow`."""
    run = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "run", f"{fuzzed_url}/openapi.yaml",
         "--phases", "coverage", "--checks", "all", "--no-color", "-H", f"X-User-Id: {new_user()}"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,  # its own files (.hypothesis) go there
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


def with_real_ids(case: Case, seeded: Seeded) -> None:
    """Half of the positive cases act on a seeded conversation, as its owner or through a share."""
    rnd = seeded.random
    if rnd.random() < 0.5:
        return
    own = path_has(case, "/whatif") or path_has(case, "/experiments")
    conv = seeded.explored if own else seeded.conversation()
    if case.path_parameters and "experiment_id" in case.path_parameters:
        discards = path_has(case, "/discard")
        case.path_parameters["experiment_id"] = rnd.choice(seeded.ended if discards else seeded.experiments)
        conv = seeded.conversations[1]
        if path_has(case, "/judge") or path_has(case, "/votes"):  # an ended experiment: judged, voted on
            experiment, branch = rnd.choice(seeded.judged)
            case.path_parameters["experiment_id"] = experiment
            if isinstance(case.body, dict) and "agent" in case.body:
                case.body["agent"] = rnd.choice(["kagent/v1-agent", "kagent/no-such-agent"])
            if isinstance(case.body, dict) and isinstance(case.body.get("pair"), dict):
                case.body["pair"] = {"a": None, "b": branch}
    if case.path_parameters and "suite_id" in case.path_parameters:  # the owner's suites, and their cases
        suite, cases = rnd.choice(seeded.suites)
        case.path_parameters["suite_id"] = suite
        if "case_id" in case.path_parameters:
            case.path_parameters["case_id"] = rnd.choice(cases)
        conv = seeded.explored  # no fuzzed rewind hides its turns, so a case of it is found
        if "run_id" in case.path_parameters:
            case.path_parameters["run_id"] = rnd.choice(seeded.runs)
    if path_has(case, "/suites") and not (case.headers and "X-User-Id" in case.headers):
        case.headers = {**(case.headers or {}), "X-User-Id": seeded.conversations[1].user_id}
    if isinstance(case.body, dict) and "session_id" in case.body:  # a suite's case, of a seeded conversation
        case.body["session_id"] = conv.session_id
    if case.path_parameters and "job_id" in case.path_parameters:
        case.path_parameters["job_id"] = rnd.choice(seeded.jobs)
        conv = seeded.conversations[1]
    if case.path_parameters and "rewind_id" in case.path_parameters:
        conv = seeded.rewound
        case.path_parameters["rewind_id"] = rnd.choice(seeded.rewinds)
    if case.path_parameters and "session_id" in case.path_parameters:
        case.path_parameters["session_id"] = conv.session_id
    if case.path_parameters and "other_session_id" in case.path_parameters:
        case.path_parameters["other_session_id"] = seeded.conversation().session_id
    if case.query and "before" in case.query:
        case.query["before"] = rnd.choice(conv.invocation_ids)
    if case.query and "before_task" in case.query:
        case.query.pop("before", None)
        case.query["before_task"] = rnd.choice(conv.turns).task_id
    if case.headers is not None and "X-User-Id" in case.headers:
        case.headers["X-User-Id"] = conv.user_id
    elif own and not (case.query and "user_id" in case.query):
        # what-ifs, experiments and their jobs are their creator's alone: act as the seeded owner
        case.headers = {**(case.headers or {}), "X-User-Id": conv.user_id}
    if case.query and "user_id" in case.query:
        case.query["user_id"] = conv.user_id
    if case.operation.path.endswith("/runs") and case.method.upper() == "POST" and isinstance(case.body, dict):
        case.body["dry_run"] = True  # a started run would write while other operations' fingerprints are taken
    if case.headers is not None and "X-Share-Token" in case.headers:
        case.headers["X-Share-Token"] = rnd.choice(seeded.shares)
    if isinstance(case.body, dict) and "rewind_before_invocation_id" in case.body:
        case.body["rewind_before_invocation_id"] = rnd.choice(conv.invocation_ids)
    if isinstance(case.body, dict) and case.body.get("rewind_before_task_id") is not None:
        # a turn named by its task instead (never both: the document says so)
        case.body.pop("rewind_before_invocation_id", None)
        case.body["rewind_before_task_id"] = rnd.choice(conv.turns).task_id
    if isinstance(case.body, dict) and "agent_ref" in case.body:  # an agent of kagent's naming
        case.body["agent_ref"] = rnd.choice(["kagent/v1-agent", "kagent/no-such-agent"])
    if isinstance(case.body, dict) and isinstance(case.body.get("judge"), dict):  # a judge of kagent's naming
        case.body["judge"]["agent"] = rnd.choice(["kagent/v1-agent", "kagent/no-such-agent"])
    if isinstance(case.body, dict) and "agents" in case.body:
        case.body["agents"] = rnd.choice([["kagent/v1-agent"], ["kagent/v1-agent", "kagent/legacy-agent"], []])
    if isinstance(case.body, dict) and "repeats" in case.body:
        case.body["repeats"] = rnd.choice([1, 2])
    if isinstance(case.body, dict) and "turns" in case.body:
        case.body["turns"] = rnd.choice([1, 2, "all"])
    if isinstance(case.body, dict) and "max_context_tokens" in case.body:  # above the seeded turns' context
        case.body["max_context_tokens"] = 100_000


def path_has(case: Case, text: str) -> bool:
    return text in case.operation.path


@schemathesis.check
def error_envelope(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """Every failure is kagent's envelope and nothing else: {"error": "<non-empty text>"}."""
    if response.status_code < 400:
        return None
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, f"not kagent's error envelope: {body!r}"
    assert isinstance(body["error"], str) and body["error"].strip(), f"an empty error message: {body!r}"
    return True


CHECKS: list[CheckFunction] = [error_envelope]
_PATHS = yaml.safe_load((ROOT / "openapi.yaml").read_text())["paths"]
OPERATIONS = [(method.upper(), path) for path, methods in _PATHS.items() for method in methods]
# Wrong input needs an input: an operation without parameters or body has no negative cases.
CASES = [
    (method, path, mode)
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE
    or _PATHS[path][method.lower()].get("parameters")
    or _PATHS[path][method.lower()].get("requestBody")
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {g.value}" for m, p, g in CASES])
def test_the_api_keeps_its_document(
    api_schema: Any, seeded: Seeded, database_url: str, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]

    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.generate],
    )
    def run(case: Case) -> None:
        if mode is GenerationMode.POSITIVE:
            with_real_ids(case, seeded)
        statuses[case.call_and_validate(additional_checks=CHECKS, timeout=30).status_code] += 1

    statuses: Counter[int] = Counter()
    asyncio.run(whatifs_settled(database_url))  # agents of earlier what-ifs write into their forks
    before = asyncio.run(fingerprint(database_url))
    run()
    if mode is GenerationMode.NEGATIVE:
        assert max(statuses) < 500 and min(statuses) >= 400, statuses
        assert asyncio.run(fingerprint(database_url)) == before, "a rejected request wrote something"
    else:
        # the fuzzer reached the real thing, not only refusals (GET / is a redirect to the page)
        assert any(200 <= status < 300 or (path, status) == ("/", 307) for status in statuses), statuses
        success = {"/fork": 201, "/whatif": 202, "/experiments": 202, "/judge": 202, "/suites": 201, "/cases": 201,
                   "/import": 201, "/keep": 201} if method.upper() == "POST" else {}  # fmt: skip
        expected = 307 if path == "/" else next((c for end, c in success.items() if path.endswith(end)), 200)
        assert statuses[expected] > 0, statuses


async def fingerprint(database_url: str) -> dict[str, tuple[int, str]]:
    """table_fingerprint from this synchronous test (the session's pool lives on another event loop)."""
    async with asyncpg.create_pool(database_url, min_size=1, max_size=1) as pool:
        return await table_fingerprint(pool)


async def whatifs_settled(database_url: str, seconds: float = 30) -> None:
    """Wait until no what-if or judgment started by a fuzzed request runs (its agent may still be writing)."""
    conn = await asyncpg.connect(database_url)
    try:
        for _ in range(int(seconds * 10)):
            running = await conn.fetchval(
                "SELECT count(*) FROM kagent_fork.whatif_job WHERE status = 'running' AND runner <> 'gone'"
            )
            # judgments (issue 35) ask their judge, which writes its tasks: those running, and those waiting for
            # branches a real runner runs
            running += await conn.fetchval(
                "SELECT count(*) FROM kagent_fork.judgment AS j WHERE j.status = 'running' OR (j.status = 'waiting' "
                "AND EXISTS (SELECT 1 FROM kagent_fork.whatif_job AS b WHERE b.experiment_id = j.experiment_id "
                "AND b.runner <> 'gone'))"
            )
            if not running:
                return
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    raise AssertionError("what-if jobs still running")


def test_the_document_says_what_it_means() -> None:
    """No key of the document is a fragment of a description: in YAML's flow style an unquoted comma ends a
    value, and the rest becomes a key without a value (a description cut short, which no validator sees)."""
    stray: list[str] = []

    def walk(node: object, path: list[str]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if value is None and key not in ("default", "example") and (not path or path[-1] != "properties"):
                    stray.append("/".join([*path, str(key)]))
                walk(value, [*path, str(key)])
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, [*path, str(i)])

    walk(yaml.safe_load((ROOT / "openapi.yaml").read_text()), [])
    assert stray == []
