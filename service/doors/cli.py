"""kagent-fork serve | fork | rewind | undo | invocations | tree | forks | show | rewinds | compare | whatif | whatifs |
job | experiment | experiments | grid | judge | cancel | discard | suite | index: one entry point for people and
scripts.

The operator commands call the same operations as the HTTP API (not HTTP), against DATABASE_URL (or
the embedded demo database when it is unset), acting as --user. Exit codes say what went wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from service.config import ConfigError, Settings, from_env
from service.doors import cli_suites

if TYPE_CHECKING:
    import asyncpg

    from service.identity import Caller
    from service.kagent.store import Store
    from service.services import Services

log = logging.getLogger("kagent_fork")

# HTTP status of a refusal -> exit code.
EXIT_CODES = {400: 2, 413: 2, 415: 2, 401: 4, 403: 4, 404: 3, 409: 5, 422: 6, 429: 7, 503: 8}
NOT_CONFIGURED = 9
NOT_KAGENT = 10  # no kagent tables, kagent 1.x's, or a dirty migration (as `serve` refuses it)
EXIT_HELP = (
    "exit codes: 0 done (also when the reader of the output went away, as `| head` does), 1 unexpected error, "
    "2 bad input, 3 not found, 4 not allowed, 5 conflict (e.g. a turn still running), 6 refused (e.g. fork "
    "depth), 7 rate limited, 8 database unavailable, 9 not configured (e.g. KAGENT_A2A_URL for a what-if), 10 the "
    "database is not one kagent-fork serves (no kagent tables, kagent 1.x's, or a dirty migration), 11 an agent's "
    "outcome is worse than the source (suite run --wait --fail-if-worse)"
)


# What whatif and experiment do without --wait, said in their help.
LEFT_TO_A_SERVER = (
    "Without --wait this process exits once {first}: {what} then wait in the database, marked running, for a "
    "kagent-fork server (`kagent-fork serve` with KAGENT_A2A_URL, on the same database) to take {them} over, "
    "which one does at its start or within about half a minute (a job silent for three heartbeats). With no such "
    "server running nothing follows {them} until one starts: use --wait, or end {them} with `kagent-fork cancel "
    "ID`. On the embedded demo (no DATABASE_URL) the demo's scripted agents answer in this process, which then "
    "always waits."
)


class OutputClosed(Exception):
    """Whoever read the output stopped reading (`kagent-fork show S | head -3`): a quiet exit."""


def _n(count: int, word: str, plural: str | None = None) -> str:
    """`1 turn`, `2 turns`."""
    return f"{count} {word if count == 1 else (plural or word + 's')}"


def _quoted(text: str | None, chars: int) -> str:
    """A text on one line, cut to `chars`, quoted; `(none)` when there is none."""
    line = " ".join((text or "").split())
    if not line:
        return "(none)"
    return repr(line[:chars] + ("..." if len(line) > chars else ""))


STREAMED = object()  # a command that wrote its output while it ran


def _database_url(settings: Settings, *, demo: bool) -> str:
    if settings.database_url:
        return settings.database_url
    from service.embedded.server import prepare_demo, start_embedded

    dsn = start_embedded(settings.embedded_data_dir)
    log.info("embedded PostgreSQL ready in %s (no DATABASE_URL given)", settings.embedded_data_dir)
    made = asyncio.run(prepare_demo(dsn)) if demo else []
    for session_id, invocations in made:
        log.info("demo session %s, turns %s", session_id, ", ".join(invocations))
    log.info("embedded database: %s", dsn)
    return dsn


def _scripted_agent(dsn: str, replay_url: str | None = None) -> tuple[str, Callable[[], None]]:
    """Start the embedded demo's scripted A2A agents and their tool server in this process; (their URL, for
    KAGENT_A2A_URL; a function that stops them). The demo is the operator of its tool server: its reads count as
    reads on its word (REPLAY_READ_ONLY_TOOLS, unless set), never on the server's readOnlyHint. With `replay_url`
    (the replay endpoint the service serves), the demo's replay twin's row is written too."""
    from service.embedded import demo, scripted_agent, weather_tools

    running = scripted_agent.start_demo(dsn)
    names = ", ".join(f"{scripted_agent.NAMESPACE}/{n}" for n in scripted_agent.AGENTS if n != "demo-judge")
    log.info("demo A2A agents (answer from scripts, no model): %s at %s (KAGENT_A2A_URL)", names, running.a2a_url)
    log.info("demo judge (prefers the continuation with fewer tool calls): %s/demo-judge", scripted_agent.NAMESPACE)
    reads = ",".join(["default", *(f"{running.tools_url}/{t}" for t in weather_tools.READS)])
    os.environ.setdefault("REPLAY_READ_ONLY_TOOLS", reads)
    log.info(
        "demo MCP tool server: %s (reads: %s; acts: %s; REPLAY_READ_ONLY_TOOLS=%s)", running.tools_url,
        ", ".join(weather_tools.READS), ", ".join(weather_tools.ACTS), os.environ["REPLAY_READ_ONLY_TOOLS"],
    )  # fmt: skip
    if replay_url is not None:
        twin = asyncio.run(_demo_twin(dsn, replay_url))
        log.info(
            "demo replay twin: %s, its tools the replay endpoint %s (kagent-fork replay-twin %s prints its manifests)",
            twin, replay_url, demo.DEMO_AGENT_REF,
        )  # fmt: skip
    return running.a2a_url, running.stop


async def _demo_twin(dsn: str, replay_url: str) -> str:
    """Write the demo's replay twin's row as kagent's controller would once `kagent-fork replay-twin`'s manifests of
    the demo's agent are applied (the demo has no controller): its servers are the replay endpoint."""
    import asyncpg

    from service.agents.replay.manifests import rendered_config, twin_manifests
    from service.embedded import demo
    from service.kagent.store.agents import AgentRow, agent_row_id, decode_config

    conn = await asyncpg.connect(dsn)
    try:
        text = await conn.fetchval("SELECT config::text FROM agent WHERE id = $1", agent_row_id(demo.DEMO_AGENT_REF))
        config, _ = decode_config(text)
        assert config is not None  # the demo's own row, just pointed at its tool server
        row = AgentRow(id=agent_row_id(demo.DEMO_AGENT_REF), type="Declarative", config=config)
        name = demo.TWIN.split("/")[1]
        docs, _ = twin_manifests(demo.DEMO_AGENT_REF, row, endpoint=replay_url, name=name, model_config="demo")
        await demo.write_agent(conn, demo.TWIN, rendered_config(docs, config))
    finally:
        await conn.close()
    return demo.TWIN


async def _demo_suite(settings: Settings, dsn: str) -> str:
    """The demo's suite: a case at every user turn of its chats, made once (its id at every start), so that a new
    user runs one and reads its verdict in minutes (docs/suites.md)."""
    from service import services
    from service.agents.suites import saved
    from service.agents.suites.cases import SuiteRequest, every_turn
    from service.database import open_pool, prepare_database
    from service.embedded import demo
    from service.identity import Caller
    from service.kagent.store import Store

    store = Store(settings.service_schema)
    pool = await open_pool(settings, dsn)
    try:
        await prepare_database(settings, store, pool)  # the service's schema, before the server makes it
        svc = services.Services(settings=settings, store=store, pool=pool, locks=pool)
        caller = Caller(user_id=demo.DEMO_USER)
        found = [s for s in await saved.of_user(svc, caller) if s.name == demo.SUITE_NAME]
        if found:
            return found[0].id
        async with pool.acquire() as conn:
            cases = [c for s in (demo.LEGACY_SESSION, demo.V1_SESSION) for c in await every_turn(svc, conn, caller, s)]
        made = await saved.create(svc, caller, SuiteRequest(name=demo.SUITE_NAME, cases=cases))
        return made.id
    finally:
        await pool.close()


def database_problem(settings: Settings, dsn: str) -> str | None:
    """Why the service cannot start on this database, in one line naming the setting to check; None if
    it can (reachable within DB_CONNECT_TIMEOUT_SECONDS, kagent's tables there, not dirty)."""
    import asyncpg

    from service.kagent.migrate import SchemaError, check_kagent_schema
    from service.kagent.store import Store
    from service.kagent.store.base import CONNECTION_ERRORS

    async def check() -> None:
        conn = await asyncpg.connect(dsn, timeout=settings.db_connect_timeout_seconds)
        try:
            await check_kagent_schema(Store(settings.service_schema), conn)
        finally:
            await conn.close()

    try:
        asyncio.run(check())
    except SchemaError as exc:
        return f"{exc} ({exc.hint})"
    except TimeoutError:
        return (
            f"the database did not answer within {settings.db_connect_timeout_seconds:g} s "
            "(check DATABASE_URL, or raise DB_CONNECT_TIMEOUT_SECONDS)"
        )
    except (*CONNECTION_ERRORS, asyncpg.PostgresError) as exc:  # type: ignore[misc]
        return f"cannot connect to the database: {type(exc).__name__}: {exc} (check DATABASE_URL)"
    return None


def serve(settings: Settings, host: str, port: int, workers: int) -> int:
    import uvicorn

    dsn = _database_url(settings, demo=True)
    if (problem := database_problem(settings, dsn)) is not None:
        print(f"kagent-fork: cannot start: {problem}", file=sys.stderr)
        return 2
    os.environ["KAGENT_FORK_RESOLVED_DSN"] = dsn
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    if not settings.database_url and settings.kagent_a2a_url is None:
        # The demo's twin reaches this service's replay endpoint (REPLAY_MCP_URL, unless set).
        replay = os.environ["REPLAY_MCP_URL"] = settings.replay_mcp_url or f"http://{shown}:{port}/replay/mcp"
        os.environ["KAGENT_A2A_URL"], _ = _scripted_agent(dsn, replay)
        suite_id = asyncio.run(_demo_suite(settings, dsn))
        log.info(
            "demo suite %s (every turn of the demo's chats): kagent-fork suite run %s --agent kagent/thorough-agent "
            "--agent kagent/scripted-agent --judge kagent/demo-judge --reads live --wait",
            suite_id, suite_id,
        )  # fmt: skip
    if not settings.database_url:
        # uvicorn re-raises SIGTERM after its graceful shutdown; turning it into a normal exit lets the
        # embedded PostgreSQL's exit handler stop the database instead of leaving it running.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    def hangup(*_: object) -> None:
        # A closed terminal: shut down as on Ctrl-C (uvicorn's graceful shutdown, then a normal exit).
        log.warning("SIGHUP received (terminal closed?): shutting down")
        os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGHUP, hangup)
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Every worker writes its metrics here so that /metrics, served by any one worker, adds them up.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="kagent-fork-metrics-")
    log.info("explorer page: http://%s:%d/ui/", shown, port)
    uvicorn.run(
        "service.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        loop="uvloop",
        http="httptools",
        log_level="info",
        access_log=False,
        log_config=None,  # the workers log JSON lines (service.observability)
        timeout_graceful_shutdown=30,
    )
    return 0


# --- readable output ---------------------------------------------------------------------------------


def turn_arguments(command: argparse.ArgumentParser, before_help: str, *, required: bool) -> None:
    """--before (an invocation id) or --before-task (the turn's task id, for agents that write no invocation
    id), never both."""
    turn = command.add_mutually_exclusive_group(required=required)
    turn.add_argument("--before", help=before_help)
    turn.add_argument("--before-task", help="rewind_before_task_id: the same turn named by its task")


def judge_arguments(command: argparse.ArgumentParser, what: str) -> None:
    """A judge for a replay's start (docs/experiments.md, "The judge"): a what-if's or an experiment's."""
    command.add_argument("--judge", help=f"namespace/name of a kagent agent that judges {what}")
    command.add_argument("--criteria", help="what the judge should weigh, beyond the default")


def tool_arguments(command: argparse.ArgumentParser) -> None:
    """What the agents' tools do (docs/whatif.md, "What an arm's tools do"), and the dry run that shows them."""
    command.add_argument(
        "--tools", choices=["replay", "live"],
        help="replay (the default: nothing that acts runs; an agent with tools that is not a replay twin is "
        "refused) or live (every tool runs for real)",
    )  # fmt: skip
    command.add_argument(
        "--reads", choices=["live", "recorded"],
        help="with replay: a call the source never made answers so (recorded, the default), or runs live when it "
        "only reads (live)",
    )  # fmt: skip
    command.add_argument(
        "--dry-run",
        action="store_true",
        help="print each agent's tools by class, the estimate in tokens and money, and what would be refused; "
        "start nothing",
    )
    command.add_argument(
        "--max-usd", type=float, help="refuse the start when its estimated price (the judge's too) is over this"
    )


def _show_fork(data: dict[str, Any]) -> str:
    if data.get("dry_run"):
        return (
            f"Dry run: would create {data['name']!r} with {_n(data['events_copied'], 'event')}, "
            f"{_n(data['tasks_copied'], 'task')} ({data['task_layout']}), {_n(data['bytes_to_copy'], 'byte')}, "
            f"~{_n(data['estimated_context_tokens'], 'context token')}"
            + _left_behind(data["summary"], "would leave")
            + "".join(f"\n  warning: {w}" for w in data["warnings"])
        )
    fork = data["fork"]
    return (
        f"Forked {fork['parent_session_id']} -> {data['id']} {data['name']!r}\n"
        f"  depth {fork['depth']} (root {fork['fork_root_session_id']}), {_n(fork['events_copied'], 'event')}, "
        f"{_n(fork['tasks_copied'], 'task')} ({fork['task_layout']}), {_n(fork['messages_copied'], 'message')}, "
        f"agent framework {fork['framework']}"
        + _left_behind(fork["summary"], "left")
        + "".join(f"\n  warning: {w}" for w in fork["warnings"])
    )


def _left_behind(summary: dict[str, Any] | None, verb: str) -> str:
    """The fork's branch summary, as the page and the API's `summary` give it: what stays in the source after the
    fork's turn and is not in the fork."""
    if not summary:
        return f"\n  {verb} nothing behind (the fork holds the whole chat)"
    return f"\n  {verb} behind: {_show_summary(summary)}"


def _show_rewind(data: dict[str, Any]) -> str:
    r = data["rewind"]
    counts = f"{_n(r['events_removed'], 'event')} and {_n(r['tasks_removed'], 'task')}"
    if data.get("dry_run"):
        return f"Dry run: would hide {counts} from turn {_turn(r)}"
    if r.get("undone_at"):
        return f"Undid rewind {r['id']}: restored {counts}"
    return f"Rewind {r['id']}: hid {counts} from turn {_turn(r)} (undo with this id)"


def _show_invocations(items: list[dict[str, Any]]) -> str:
    framework = items[0]["framework"] if items else "unknown"
    lines = [f"{'#':>4}  {'started':<27} {'events':>6}  {'state':<22} {'invocation':<40} {'task':<36} user"]
    for i, t in enumerate(items, 1):
        text = (t["user_text"] or "").replace("\n", " ")[:60]
        lines.append(
            f"{i:>4}  {t['started_at']:<27} {t['event_count']:>6}  {t['state'] or '-':<22} "
            f"{t['invocation_id'] or '-':<40} {t['task_id'] or '-':<36} {text}"
        )
    return "\n".join([*lines, f"Framework: {framework}"])


def _turn(r: dict[str, Any]) -> str:
    """How a rewind or a fork names its turn: its invocation, else its task (an agent without invocations)."""
    return str(r["rewind_before_invocation_id"] or f"of task {r['rewind_before_task_id']}")


def _show_tree(node: dict[str, Any], prefix: str = "", last: bool = True, top: bool = True) -> str:
    mark = "" if node["status"] == "ok" else f" [{node['status']}]"
    line = f"{node['session_id']} {node['name']!r}{mark}{_tree_detail(node)}"
    lines = [line if top else f"{prefix}{'└── ' if last else '├── '}{line}"]
    child_prefix = "" if top else prefix + ("    " if last else "│   ")
    for i, child in enumerate(node["forks"]):
        lines.append(_show_tree(child, child_prefix, i == len(node["forks"]) - 1, top=False))
    return "\n".join(lines)


def _tree_detail(node: dict[str, Any]) -> str:
    """What a tree node holds now and, for a fork, where it was made: `(k8s-agent · 2 turns, 7 events now ·
    forked at turn 2 'And in Berlin?', 4 events copied)`."""
    parts = []
    if node.get("agent_id"):
        parts.append(_agent(node["agent_id"]))
    if node.get("turns") is not None:
        parts.append(f"{_n(node['turns'], 'turn')}, {_n(node['events'], 'event')} now")
    fork = node.get("fork")
    if fork:
        asked = fork["rewind_before_invocation_id"] or fork.get("rewind_before_task_id")
        if asked is not None and not fork.get("boundary_found", True):
            at = f"forked whole: a copy of the whole chat (the turn asked for, {asked}, was not in it)"
        elif fork.get("rewind_before_task_id") is not None and fork["rewind_before_invocation_id"] is None:
            at = f"forked before the turn of task {fork['rewind_before_task_id']}"
        elif fork["rewind_before_invocation_id"] is None:
            at = "forked whole"
        elif node.get("fork_turn") is not None:
            at = f"forked at turn {node['fork_turn']} {_quoted(node.get('fork_question'), 40)}"
        else:
            at = f"forked before {fork['rewind_before_invocation_id']} (no longer in the parent)"
        parts.append(f"{at}, {_n(fork['events_copied'], 'event')} copied")
    return f" ({' · '.join(parts)})" if parts else ""


def _agent(agent_id: str) -> str:
    """kagent's agent_id as the namespace/name people know (`kagent__NS__k8s_agent` is kagent/k8s-agent)."""
    if agent_id.count("__NS__") == 1:
        return agent_id.replace("__NS__", "/").replace("_", "-")
    return agent_id


def _show_rewinds(items: list[dict[str, Any]]) -> str:
    if not items:
        return "No rewinds."
    lines = []
    for r in items:
        state = f"undone {r['undone_at']}" if r["undone_at"] else ("undoable" if r["undoable"] else "not undoable")
        lines.append(
            f"{r['id']}  {r['created_at']}  before {_turn(r)}: "
            f"{_n(r['events_removed'], 'event')}, {_n(r['tasks_removed'], 'task')} hidden by {r['requested_by']} "
            f"({state})"
        )
        if r["summary"]:
            lines.append("    " + _show_summary(r["summary"]))
    return "\n".join(lines)


def _show_summary(s: dict[str, Any]) -> str:
    return (
        f"{_n(s['turns'], 'turn')}, {_n(s['events'], 'event')}, {_tools(s['tool_calls'])}, "
        f"{_n(s['total_tokens'], 'token')}; starts {_quoted(s['first_user_text'], 60)}"
    )


def _tools(calls: dict[str, int]) -> str:
    return ", ".join(f"{name} x{count}" for name, count in calls.items()) or "no tool calls"


def _show_comparison(c: dict[str, Any]) -> str:
    """The totals of each side, then the turns after the common part lined up: position by position, each
    side's question, answer, tool calls, tokens and duration."""
    lines = [f"{_n(c['common_turns'], 'turn')} in common"]
    for side in ("left", "right"):
        s = c[side]
        lines.append(
            f"{side:<5} {s['session_id']} {s['name']!r}: {_n(s['turns_after'], 'turn')} after, "
            f"{_n(sum(s['tool_calls'].values()), 'tool call')}, {_n(s['total_tokens'], 'token')}, "
            f"{s['duration_seconds']:.1f} s; last answer {_quoted(s['last_agent_text'], 80)}"
        )
    for i, row in enumerate(c.get("aligned", []), c["common_turns"] + 1):
        lines.append(f"turn {i}:")
        for side in ("left", "right"):
            t = row[side]
            if t is None:
                lines.append(f"  {side:<5} (no turn {i})")
                continue
            lines.append(f"  {side:<5} asked {_quoted(t['question'], 80)}")
            lines.append(
                f"        answered {_quoted(t['answer'], 120)} ({_tools(t['tool_calls'])}, "
                f"{_n(t['total_tokens'], 'token')}, {t['duration_seconds']:.1f} s)"
            )
    return "\n".join(lines)


def _show_job(j: dict[str, Any]) -> str:
    lines = [
        f"What-if {j['id']}: {j['status']}, {j['agent_ref']} answering turn "
        f"{j['rewind_before_invocation_id'] or 'of task ' + str(j['rewind_before_task_id'])} "
        f"of {j['parent_session_id']} in the fork {j['session_id']}"
    ]
    if j.get("question"):
        lines.append(f"  asked: {_quoted(j['question'], 200)}")
    lines.append(f"  tools: {_policy(j.get('tool_policy'))}")
    if j.get("tools"):
        lines.append(_show_arm(j["tools"]))
    if j["error"]:
        lines.append(f"  error: {j['error']}")
    if j["result"]:
        r = j["result"]
        answer = _quoted(r["last_agent_text"], 200)
        lines.append(f"  {_tools(r['tool_calls'])}, {_n(r['total_tokens'], 'token')}; answer: {answer}")
    if j.get("judgment"):
        jd = j["judgment"]
        lines.append(f"  judged blind by {jd['judge_agent_ref']} ({jd['status']}, {jd['calls_answered']} of "
                     f"{jd['calls']} calls)" + (f": {jd['error']}" if jd["error"] else ""))  # fmt: skip
        lines += [f"  verdict: {line}" for line in jd["lines"]]
    return "\n".join(lines)


_READS = {"recorded": "only the source's recorded results", "live": "an unrecorded read runs live"}


def _policy(p: dict[str, Any] | None) -> str:
    if p is None:
        return "every tool live (started before tool policies)"
    return "every tool live" if p["mode"] == "live" else f"replay (reads {p['reads']}: {_READS[p['reads']]})"


def _show_arm(a: dict[str, Any]) -> str:
    if not a["known"] and not a["acts"]:
        return f"  {a['agent_ref']}: tools not known: {a['note']}"
    classes = [f"{cls} {', '.join(t['name'] for t in a[cls])}" for cls in ("asks", "reads", "acts") if a[cls]] or [
        "no tools"
    ]
    return f"  {a['agent_ref']}{' (replay twin)' if a['twin'] else ''}: {'; '.join(classes)}"


def _show_plan(d: dict[str, Any]) -> str:
    """A what-if's or an experiment's dry run: what it would start, each agent's tools by class."""
    head = (
        f"Dry run: {_n(d['branches'], 'branch', 'branches')} x {_n(d['turns'], 'turn')}, about "
        f"{_n(d['estimated_context_tokens'], 'token')} of context"
        + (f" (the judge's {d['estimated_judge_tokens']} included)" if d["estimated_judge_tokens"] else "")
        + (f", {d['estimated_usd_text']} at least; " if d["estimated_usd"] is not None else
           f", price unknown ({', '.join(d['unpriced'])}); ")
    )  # fmt: skip
    head += f"refused: {d['refused']}" if d["refused"] else f"would start, tools: {_policy(d['tools'])}"
    return "\n".join([head, *(_show_arm(a) for a in d["arms"])])


def _show_jobs(jobs: list[dict[str, Any]]) -> str:
    return "\n".join(_show_job(j) for j in jobs) or "No what-ifs from this session."


def _show_experiments(items: list[dict[str, Any]]) -> str:
    lines = [
        f"Experiment {e['id']}: {e['status']}, from turn "
        f"{e['rewind_before_invocation_id'] or 'of task ' + str(e['rewind_before_task_id'])}, "
        f"{_n(e['turns'], 'turn')} x {_n(e['repeats'], 'repeat')}, on approval {e['on_approval']}, "
        f"started {e['created_at']}\n  agents: {', '.join(e['agents'])}"
        + (f"; judged by {e['judge']}: {e['outcome']}" if e["judge"] else "; not judged")
        for e in items
    ]
    return "\n".join(lines) or "No experiments from this session."


# --- operator commands -------------------------------------------------------------------------------
# Each command imports what it uses when it runs: a read loads the branches and kagent's data, never the
# server's stack (the web framework, the MCP SDK, the A2A client; tests/test_cli.py holds it to that).

Command = Callable[["Services", "Caller", argparse.Namespace], Awaitable[tuple[object, str]]]

A2A_CLIENT = "service.agents.a2a_client"


def _defer_a2a_client() -> None:
    """Load the A2A client (the a2a SDK, httpx, protobuf: about a second) when it is first used, not when the
    what-if and experiment modules are imported: reading a job or a grid never sends a message. A command
    that does talk to an agent loads it at its first use, as an import would have."""
    import importlib
    import importlib.util

    if A2A_CLIENT in sys.modules:
        return
    parent = importlib.import_module(A2A_CLIENT.rpartition(".")[0])
    spec = importlib.util.find_spec(A2A_CLIENT)
    assert spec is not None and spec.loader is not None
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[A2A_CLIENT] = module
    setattr(parent, A2A_CLIENT.rpartition(".")[2], module)
    spec.loader.exec_module(module)


async def _fork(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.operations import forking
    from service.schemas import ForkRequest

    req = msgspec.convert(
        {k: v for k, v in {"rewind_before_invocation_id": args.before,
                           "rewind_before_task_id": args.before_task, "name": args.name,
                           "if_boundary_missing": args.if_boundary_missing, "task_layout": args.layout,
                           "dry_run": args.dry_run}.items() if v is not None},
        ForkRequest,
    )  # fmt: skip
    outcome = await forking.fork(svc, caller, args.session_id, req, args.idempotency_key)
    data = msgspec.json.decode(msgspec.json.encode(outcome.data))
    return data, _show_fork(data)


async def _rewind(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.operations import rewind
    from service.schemas import RewindRequest

    req = RewindRequest(rewind_before_invocation_id=args.before, rewind_before_task_id=args.before_task,
                        dry_run=args.dry_run, force=args.force)  # fmt: skip
    data = msgspec.to_builtins(await rewind.rewind(svc, caller, args.session_id, req))
    return data, _show_rewind(data)


async def _undo(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.operations import rewind

    data = msgspec.to_builtins(await rewind.undo(svc, caller, args.session_id, args.rewind_id))
    return data, _show_rewind(data)


async def _invocations(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.branches import turns

    items, after = [], None
    while True:  # every page: an operator wants the whole list
        page = await turns.invocations(svc, caller, args.session_id, limit=turns.MAX_PAGE, after=after)
        items += msgspec.to_builtins(page.items)
        if page.last or not page.items:
            break
        after = page.items[-1].invocation_id or page.items[-1].task_id
    return items, _show_invocations(items)


async def _forks(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.branches import lineage

    data = msgspec.to_builtins(await lineage.forks(svc, caller, args.session_id))
    lines = [
        f"{f['session_id']} {f['name']!r}: before {f['fork']['rewind_before_invocation_id'] or '(all)'}, "
        f"{f['fork']['events_copied']} events, {f['created_at']}"
        for f in data
    ]
    return data, "\n".join(lines) or "No forks."


async def _tree(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.branches import lineage

    data = msgspec.to_builtins(await lineage.tree(svc, caller, args.session_id))
    return data, _show_tree(data)


async def _rewinds(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.operations import rewind

    data = msgspec.to_builtins(await rewind.rewinds(svc, caller, args.session_id))
    return data, _show_rewinds(data)


async def _compare(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.branches import compare

    data = msgspec.to_builtins(await compare.compare(svc, caller, args.session_id, args.other_session_id))
    return data, _show_comparison(data)


async def _show(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.branches import transcript

    # Written while it is read, as the HTTP answer is: nothing is returned to print afterwards.
    try:
        async with transcript.reading(
            svc, caller, args.session_id, before=args.before, before_task=args.before_task
        ) as r:
            chunks = transcript.json_chunks(r, message=None) if args.json else transcript.markdown_chunks(r)
            async for chunk in chunks:
                sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise OutputClosed from None
    return STREAMED, ""


async def _whatif(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents import whatif

    body = {"rewind_before_invocation_id": args.before, "rewind_before_task_id": args.before_task,
            "agent_ref": args.agent, "name": args.name, "tools": args.tools, "reads": args.reads,
            "dry_run": args.dry_run or None, "max_usd": args.max_usd,
            "judge": {"agent": args.judge, **({"criteria": args.criteria} if args.criteria else {})}
            if args.judge else None}  # fmt: skip
    req = msgspec.convert({k: v for k, v in body.items() if v is not None}, whatif.WhatifRequest)
    # This process runs the job: without --wait it returns once the agent has the turn (the job is then
    # followed by the service's replicas, which take over a job whose runner stopped).
    runner = whatif.Runner(svc=svc)
    answer, _ = await whatif.start(svc, runner, caller, args.session_id, req)
    if isinstance(answer, whatif.DryRun):
        await runner.stop()
        plan = msgspec.to_builtins(answer)
        return plan, _show_plan(plan)
    assert isinstance(answer, whatif.Started)
    job_id = answer.job.id
    # --wait: until the job ended and its judge (if any) answered ("judging" meanwhile).
    while (job := await whatif.get(svc, caller, job_id)).status in ("running", "judging") and (
        args.wait or (job.status == "running" and not job.task_id)
    ):
        if not runner.jobs and not args.wait:
            break  # taken over by a replica (this process beat too late): --wait waits for that one's end
        await asyncio.sleep(0.2)
    await runner.stop()
    data = msgspec.to_builtins(await whatif.get(svc, caller, job_id))
    return data, _show_job(data)


async def _experiment(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    """Start an experiment; this process runs its branches while it waits (--wait), else until every
    agent has its first turn (the service's replicas then take the branches over)."""
    from service.agents import experiments, whatif
    from service.errors import NotConfigured

    if svc.settings.kagent_a2a_url is None:
        raise NotConfigured(
            "experiments need kagent's A2A endpoint: set KAGENT_A2A_URL (e.g. http://kagent-controller.kagent:8083"
            "/api/a2a); on the embedded demo (no DATABASE_URL) the demo's scripted agents answer"
        )
    turns: int | str = "all" if args.turns == "all" else int(args.turns)
    body = {"rewind_before_invocation_id": args.before, "rewind_before_task_id": args.before_task,
            "agents": args.agent or None, "turns": turns,
            "message": {"text": args.message} if args.message is not None else None, "repeats": args.repeats,
            "on_approval": args.on_approval, "name": args.name, "tools": args.tools, "reads": args.reads,
            "dry_run": args.dry_run or None, "max_usd": args.max_usd, "control": args.control,
            "judge": {"agent": args.judge, **({"criteria": args.criteria} if args.criteria else {})}
            if args.judge else None}  # fmt: skip
    req = msgspec.convert({k: v for k, v in body.items() if v is not None}, experiments.ExperimentRequest)
    runner = whatif.Runner(svc=svc)
    answer, _ = await experiments.start(svc, runner, caller, args.session_id, req)
    if isinstance(answer, experiments.DryRun):
        await runner.stop()
        plan = msgspec.to_builtins(answer)
        return plan, _show_plan(plan)
    assert isinstance(answer, experiments.Started)
    experiment_id = answer.experiment.id
    while runner.jobs:
        found = await experiments.get(svc, caller, experiment_id)
        # Without --wait: until every agent has its first turn, known by its task id, as a what-if waits. A turn
        # merely stamped as sent ("working") may still be on its way: stopping the runner then would leave a
        # branch whose agent never got its turn and can never be asked to cancel it.
        jobs = [await whatif.get(svc, caller, b.job_id) for b in found.branches if b.job_id is not None]
        if not args.wait and all(j.task_id is not None or j.status != "running" for j in jobs):
            break
        await asyncio.sleep(0.2)
    await runner.stop()
    found = await experiments.get(svc, caller, experiment_id)
    return msgspec.to_builtins(found), experiments.markdown(found)


async def _job(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents import experiments, whatif
    from service.errors import NotFound

    try:
        data = msgspec.to_builtins(await whatif.get(svc, caller, args.session_id))
    except NotFound:
        try:
            await experiments.get(svc, caller, args.session_id)
        except NotFound:
            raise NotFound(f"what-if job {args.session_id} not found") from None
        raise NotFound(
            f"{args.session_id} is an experiment, not a what-if job: kagent-fork grid {args.session_id} shows it"
        ) from None
    return data, _show_job(data)


async def _whatifs(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents import whatif

    jobs = msgspec.to_builtins(await whatif.of_session(svc, caller, args.session_id))
    return jobs, _show_jobs(jobs)


async def _cancel(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    """A what-if job or an experiment, whichever the id names (both are random UUIDs, never the same)."""
    from service.agents import experiments, whatif
    from service.errors import NotFound

    try:
        data = msgspec.to_builtins(await whatif.cancel(svc, caller, args.session_id))
        return data, _show_job(data)
    except NotFound:
        pass
    try:
        found = await experiments.cancel(svc, caller, args.session_id)
    except NotFound:
        raise NotFound(f"no what-if job or experiment {args.session_id}") from None
    return msgspec.to_builtins(found), experiments.markdown(found)


async def _judge(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    """Judge an experiment that ended (again); this process runs the judge's calls while it waits (--wait), else
    the judgment waits for a server's runner, as a branch does."""
    from service.agents import experiments, whatif

    body = {"agent": args.agent, "criteria": args.criteria}
    req = msgspec.convert({k: v for k, v in body.items() if v is not None}, experiments.JudgeRequest)
    runner = whatif.Runner(svc=svc)
    found = await experiments.judge_experiment(svc, runner, caller, args.session_id, req)
    if args.wait:
        await asyncio.gather(*runner.jobs.values(), return_exceptions=True)
    await runner.stop()
    found = await experiments.get(svc, caller, found.id)
    return msgspec.to_builtins(found), experiments.markdown(found)


async def _experiments(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents import experiments

    listed = msgspec.to_builtins(await experiments.of_session(svc, caller, args.session_id))
    return listed, _show_experiments(listed)


async def _grid(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents import experiments

    found = await experiments.get(svc, caller, args.session_id)
    return msgspec.to_builtins(found), experiments.markdown(found)


def _show_discard(x: dict[str, Any]) -> str:
    d = x["discard"]
    if d is None:
        return f"The branches of experiment {x['id']} were never discarded."
    names = {b["session_id"]: f"{b['agent_ref']} #{b['repeat']}" for b in x["branches"]}
    if d["undone_at"] is not None:
        back = d["restored_session_ids"] or []
        lines = [f"Discard undone: {_n(len(back), 'branch fork', 'branch forks')} back in the chat list"]
        lines += [f"  {names.get(s, '?')}: {s}" for s in back]
        return "\n".join(lines)
    kept = f", kept {names.get(d['kept_session_id'], '?')}: {d['kept_session_id']}" if d["kept_session_id"] else ""
    hidden = d["discarded_session_ids"]
    lines = [f"Discarded {_n(len(hidden), 'branch fork', 'branch forks')} of experiment {x['id']}{kept}"]
    lines += [f"  hidden {names.get(s, '?')}: {s}" for s in hidden]
    lines.append(f"Undo: kagent-fork discard {x['id']} --undo")
    return "\n".join(lines)


async def _discard(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents import discard

    if args.undo:
        if args.keep is not None:
            from service.errors import BadRequest

            raise BadRequest("--keep names the branch a discard keeps: not with --undo")
        found, _ = await discard.undo(svc, caller, args.session_id)
    else:
        req = msgspec.convert({"keep": args.keep} if args.keep is not None else {}, discard.DiscardRequest)
        found, _ = await discard.discard(svc, caller, args.session_id, req)
    data = msgspec.to_builtins(found)
    return data, _show_discard(data)


async def _replay_twin(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents.replay.manifests import twin_manifests, yaml_text
    from service.agents.replay.terms import checked_agent_ref

    source = checked_agent_ref(args.session_id, "agent")
    async with svc.connection() as conn:
        row = await svc.store.agents.get(conn, source)
    endpoint = args.endpoint or svc.settings.replay_mcp_url or DEFAULT_REPLAY_ENDPOINT
    docs, notes = twin_manifests(source, row, endpoint=endpoint, name=args.name, model_config=args.model_config)
    return {"manifests": docs, "notes": notes}, yaml_text(docs, notes).rstrip("\n")


# Where kagent-fork serves its replay endpoint in deploy/ (the Service kagent-fork.kagent, port 8083).
DEFAULT_REPLAY_ENDPOINT = "http://kagent-fork.kagent.svc:8083/replay/mcp"

COMMANDS: dict[str, Command] = {
    "fork": _fork, "rewind": _rewind, "undo": _undo, "invocations": _invocations, "forks": _forks, "tree": _tree,
    "rewinds": _rewinds, "compare": _compare, "show": _show, "whatif": _whatif, "experiment": _experiment,
    "job": _job, "whatifs": _whatifs, "cancel": _cancel, "experiments": _experiments, "grid": _grid,
    "replay-twin": _replay_twin,
    "discard": _discard,
    "judge": _judge,
    "suite": cli_suites.run,
}  # fmt: skip
# Commands that read what-if jobs and experiments (or cancel or discard them): the A2A client is loaded only if used.
DEFERS_A2A = {"job", "whatifs", "cancel", "experiments", "grid", "discard", "suite"}


def _on_the_demo(settings: Settings, dsn: str, args: argparse.Namespace) -> tuple[object, str]:
    """A command that asks agents, run on the embedded demo: the demo's agents and tool server in this process, and
    a replay endpoint of its own for the demo's twin (its row points there while the command runs; stopping the
    demo puts the rows back)."""
    from service.embedded.threaded import bound

    sock = bound("127.0.0.1")
    sock.listen(128)  # a twin's first call waits in the backlog until the endpoint serves, never refused
    replay_url = f"http://127.0.0.1:{sock.getsockname()[1]}/replay/mcp"
    a2a_url, stop = _scripted_agent(dsn, replay_url)
    word = from_env(os.environ)  # the demo's tools' reads, on its word (REPLAY_READ_ONLY_TOOLS)
    settings = dataclasses.replace(
        settings, kagent_a2a_url=a2a_url, replay_mcp_url=replay_url,
        replay_read_only_tools=word.replay_read_only_tools, replay_server_names=word.replay_server_names,
    )  # fmt: skip
    args.wait = True
    try:
        return asyncio.run(_run(settings, dsn, args, sock))
    finally:
        stop()
        sock.close()


@contextlib.asynccontextmanager
async def _replay_endpoint(svc: Services, sock: socket.socket) -> AsyncIterator[None]:
    """The replay endpoint served on `sock` in this event loop while the block runs (the CLI's demo)."""
    import uvicorn

    from service.doors import replay_mcp

    manager = replay_mcp.session_manager(lambda: svc)
    app = replay_mcp.endpoint(manager, svc.settings.max_body_bytes)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False))
    async with manager.run():
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            yield
        finally:
            server.should_exit = True
            await serving


async def _run(
    settings: Settings, dsn: str, args: argparse.Namespace, replay_sock: socket.socket | None = None
) -> tuple[object, str]:
    from service import services
    from service.database import open_pool, prepare_database
    from service.identity import Caller
    from service.kagent.store import Store

    store = Store(
        settings.service_schema,
        max_fork_events=settings.max_fork_events,
        turn_map_min_tasks=settings.turn_map_min_tasks,
    )
    pool = await open_pool(settings, dsn)
    locks = await services.open_lock_pool(settings, dsn)  # min_size 0: a connection only for a keyed start
    try:
        await prepare_database(settings, store, pool)
        if args.command == "index":
            return await _index(store, pool, args.action)
        svc = services.Services(settings=settings, store=store, pool=pool, locks=locks)
        if args.command in DEFERS_A2A:
            _defer_a2a_client()
        caller = Caller(user_id=args.user, share_token=args.share_token)
        if replay_sock is None:
            return await COMMANDS[args.command](svc, caller, args)
        failed: Exception | None = None
        async with _replay_endpoint(svc, replay_sock):
            try:
                return await COMMANDS[args.command](svc, caller, args)
            except Exception as exc:  # raised outside the endpoint's task group, which would wrap it in a group
                failed = exc
        assert failed is not None  # the block returned, or failed
        raise failed
    finally:
        await pool.close()
        await locks.close()


async def _index(store: Store, pool: asyncpg.Pool, action: str) -> tuple[object, str]:
    from service.errors import Unprocessable
    from service.kagent import invocation_index

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)  # a build can take minutes: say what it does meanwhile

    if action == "install":
        raise Unprocessable(f"{invocation_index.RETIRED}; nothing was installed")
    async with pool.acquire() as conn:  # outside any transaction, as DROP INDEX CONCURRENTLY needs
        if action == "uninstall":
            now = await invocation_index.uninstall(store, conn, say)
        else:
            now = await invocation_index.status(store, conn)
    lines = [f"invocation index (retired): {now.state}"] + [
        f"  {i.name} on {i.table}: {i.state}{f', {i.bytes:,} bytes' if i.bytes else ''}" for i in now.indexes
    ]
    if now.state != "absent":
        lines.append("  (still on kagent's tables, costing its writes: kagent-fork index uninstall removes it)")
    return msgspec.to_builtins(now), "\n".join(lines)


def operate(settings: Settings, args: argparse.Namespace) -> int:
    try:
        return _operate(settings, args)
    except (OutputClosed, BrokenPipeError):
        # The reader went away (`| head`): nothing more to say. Python would still try to flush stdout at
        # exit and print a traceback for that too, so stdout is pointed at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _operate(settings: Settings, args: argparse.Namespace) -> int:
    from service.errors import NotConfigured, ServiceError
    from service.kagent.migrate import SchemaError
    from service.kagent.store.base import CONNECTION_ERRORS

    try:
        dsn = _database_url(settings, demo=True)
        replays = ("whatif", "experiment", "judge")  # the commands that ask agents (a judge is one)
        asks = args.command in replays or (args.command == "suite" and args.suite_action == "run")
        if asks and not settings.database_url and settings.kagent_a2a_url is None:
            # The embedded demo: its scripted agents (its judge too), their tool server and the replay endpoint
            # its twin reaches answer in this process, so the command waits.
            data, text = _on_the_demo(settings, dsn, args)
        else:
            data, text = asyncio.run(_run(settings, dsn, args))
    except NotConfigured as exc:
        return _fail(args, exc.message, NOT_CONFIGURED)
    except ServiceError as exc:
        return _fail(args, exc.message, EXIT_CODES.get(exc.status, 1))
    except msgspec.ValidationError as exc:
        return _fail(args, f"invalid arguments: {exc}", 2)
    except BrokenPipeError:
        raise OutputClosed from None
    except CONNECTION_ERRORS as exc:
        return _fail(args, f"database unavailable: {type(exc).__name__}: {exc}", 8)
    except SchemaError as exc:  # as `serve` refuses it: one line, no traceback
        return _fail(args, f"{exc} ({exc.hint})", NOT_KAGENT)
    if data is not STREAMED:
        print(msgspec.json.encode(data).decode() if args.json else text, flush=True)
    return int(getattr(args, "exit_code", 0))  # a command's own verdict (suite run --fail-if-worse)


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    if args.json:
        print(msgspec.json.encode({"error": message}).decode(), flush=True)
    print(f"kagent-fork: {message}", file=sys.stderr)
    return code


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's ArgumentDefaultsHelpFormatter, without `(default: None)` and `(default: False)` where
    an option has no default worth saying."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Each paragraph filled on its own (argparse runs a description's or an epilog's paragraphs together)."""
        fill = super()._fill_text
        return "\n\n".join(fill(paragraph, width, indent) for paragraph in text.split("\n\n"))

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "%(default)" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            text += " (default: %(default)s)"
        return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kagent-fork")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


REPLAY_TWIN_HELP = (
    "print the kagent manifests of a replay twin of an agent: the same prompt and tools, its MCP servers replaced "
    "by kagent-fork's replay endpoint (kubectl apply -f -)"
)


def _replay_twin_arguments(rt: argparse.ArgumentParser) -> None:
    rt.add_argument("--name", help="the twin's name (default: <agent's name>-replay)")
    rt.add_argument(
        "--endpoint",
        help=f"the replay endpoint as the twin reaches it (default: REPLAY_MCP_URL, else {DEFAULT_REPLAY_ENDPOINT})",
    )
    rt.add_argument(
        "--model-config", default="default-model-config", help="the twin's ModelConfig (kagent's table names none)"
    )


def parser() -> argparse.ArgumentParser:
    formatter = _HelpFormatter
    p = argparse.ArgumentParser(prog="kagent-fork", description=__doc__, epilog=EXIT_HELP, formatter_class=formatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    # --json is accepted before the command too (kagent-fork --json tree S) and after it.
    p.add_argument("--json", action="store_true", dest="global_json", help="print the API's data as JSON")
    commands = p.add_subparsers(dest="command", required=True)
    s = commands.add_parser("serve", help="serve the HTTP API", formatter_class=formatter)
    s.add_argument("--host", default="127.0.0.1", help="address to listen on")
    s.add_argument("--port", type=int, default=8083, help="port to listen on")
    s.add_argument("--workers", type=int, default=1, help="worker processes (one per core in production)")

    def operator(name: str, help_text: str, *, metavar: str = "session_id") -> argparse.ArgumentParser:
        c = commands.add_parser(
            name, help=help_text, description=help_text, epilog=EXIT_HELP, formatter_class=formatter
        )
        c.add_argument("session_id", metavar=metavar)
        c.add_argument("--user", default="admin@kagent.dev", help="act as this kagent user")
        c.add_argument("--share-token", default=None, help="act through this share link")
        c.add_argument("--json", action="store_true", help="print the API's data as JSON")
        return c

    f = operator("fork", "fork a session into a new one, up to a turn")
    turn_arguments(f, "rewind_before_invocation_id: the first turn not copied", required=False)
    f.add_argument("--name", help="the new session's name (the API's default: Fork of <source name>)")
    f.add_argument(
        "--if-boundary-missing",
        choices=["copy_all", "error"],
        help="a --before naming no turn: copy all (the API's default, copy_all) or refuse (error)",
    )
    f.add_argument("--layout", choices=["auto", "merged", "per_task"], help="task_layout (the API's default: auto)")
    f.add_argument("--dry-run", action="store_true", default=None, help="answer the plan, write nothing")
    f.add_argument("--idempotency-key", help="a retry with the same key returns the same fork")
    r = operator("rewind", "hide a turn and everything after it (undoable)")
    turn_arguments(r, "rewind_before_invocation_id: the first turn hidden (or --before-task)", required=True)
    r.add_argument("--dry-run", action="store_true", help="answer what would be hidden, write nothing")
    r.add_argument("--force", action="store_true", help="even while the agent is still running a hidden turn")
    u = operator("undo", "undo a rewind")
    u.add_argument("rewind_id", help="the id a rewind answered (kagent-fork rewinds SESSION lists them)")
    operator("invocations", "list the turns of a session")
    operator("tree", "print the fork tree that holds a session")
    operator("forks", "list the direct forks of a session")
    sh = operator("show", "print a session's transcript (Markdown; --json for the API's data)")
    turn_arguments(sh, "only the turns before this invocation (what a fork there would hold)", required=False)
    sh.add_argument("--markdown", action="store_true", help="Markdown (the default without --json)")
    operator("rewinds", "list a session's rewinds, newest first, and whether each can be undone now")
    c = operator("compare", "compare two sessions: their common turns and what each holds after them")
    c.add_argument("other_session_id")
    w = operator("whatif", "regenerate a turn on another agent over A2A (KAGENT_A2A_URL): fork, then ask the agent")
    turn_arguments(w, "rewind_before_invocation_id: the turn to regenerate (or --before-task)", required=True)
    w.add_argument("--agent", help="namespace/name of the agent to answer (default: the session's own agent)")
    w.add_argument("--name", help="the fork's name")
    tool_arguments(w)
    judge_arguments(w, "it blind against the source once it ends")
    w.add_argument("--wait", action="store_true", help="wait until the job and its judge end (else: the agent's turn)")
    w.epilog = f"{LEFT_TO_A_SERVER.format(first='the agent has the turn', what='the job', them='it')}\n\n{EXIT_HELP}"
    operator("job", "show a what-if job", metavar="job_id")
    operator("whatifs", "list the what-ifs started from a session, newest first")
    operator(
        "cancel",
        "cancel a running what-if job or experiment (its agents are asked to cancel their tasks)",
        metavar="job_or_experiment_id",
    )
    e = operator("experiment", "replay the turns from one on several agents over A2A and print them side by side")
    turn_arguments(e, "rewind_before_invocation_id: the first turn replayed (or --before-task)", required=True)
    e.add_argument(
        "--agent", action="append", help="namespace/name of an agent (repeat for each; default: the session's)"
    )
    e.add_argument("--turns", default="1", help="how many turns to replay from --before on, or all")
    e.add_argument("--message", help="ask the first replayed turn with this text instead")
    e.add_argument("--repeats", type=int, default=1, help="branches per agent (1-5)")
    e.add_argument(
        "--on-approval", choices=["stop", "reject"], default="stop", help="when an agent asks to approve a tool"
    )
    e.add_argument("--name", help="the forks' name")
    tool_arguments(e)
    judge_arguments(e, "the branches blind once they end")
    e.add_argument("--control", action="store_true", default=None, help="add the source's own agent: the noise floor")
    e.add_argument(
        "--wait", action="store_true", help="wait until every branch ended (and the judge), then print the table"
    )
    alone = LEFT_TO_A_SERVER.format(first="every agent has its first turn", what="the branches", them="them")
    e.epilog = f"{alone}\n\n{EXIT_HELP}"
    operator("experiments", "list the experiments started from a session, newest first")
    jg = operator("judge", "judge an experiment that ended (again): blind, by a kagent agent", metavar="experiment_id")
    jg.add_argument("--agent", required=True, help="namespace/name of the judging kagent agent")
    jg.add_argument("--criteria", help="what the judge should weigh, beyond the default")
    jg.add_argument("--wait", action="store_true", help="wait until the judge answered every call")
    jg.epilog = LEFT_TO_A_SERVER.format(first="the judgment is written", what="its calls", them="them")
    jg.epilog += f"\n\n{EXIT_HELP}"
    operator(
        "grid", "show an experiment: its branches beside the source's own turns (Markdown)", metavar="experiment_id"
    )
    _replay_twin_arguments(operator("replay-twin", REPLAY_TWIN_HELP, metavar="agent"))
    d = operator(
        "discard",
        "clear an ended experiment's branches out of kagent's chat list, all of them or all but --keep (undoable)",
        metavar="experiment_id",
    )
    d.add_argument("--keep", help="the branch to keep (the winner): its fork's session id or its job id (grid --json)")
    d.add_argument("--undo", action="store_true", help="bring back the branch forks the discard hid")
    d.epilog = (
        "A discarded branch's fork is hidden as kagent hides a deleted session (nothing is erased), and comes back "
        "with --undo; a fork the user deleted in kagent is left as it is. Refused (exit 5) while the experiment "
        f"runs: cancel it first. Running it again changes nothing.\n\n{EXIT_HELP}"
    )
    cli_suites.add_parser(commands, formatter, EXIT_HELP)
    ix = commands.add_parser(
        "index",
        help="the retired invocation index on kagent's tables: status, uninstall",
        description="The expression indexes that earlier versions added to kagent's event and task tables on "
        "request. Retired: the turn map, in the service's own schema, serves every read they served and adds "
        "nothing to kagent's writes. status says whether one is still there; uninstall removes it (DROP INDEX "
        "CONCURRENTLY: kagent keeps writing meanwhile); install is refused.",
        epilog=EXIT_HELP,
        formatter_class=formatter,
    )
    ix.add_argument("action", choices=["install", "status", "uninstall"])
    ix.add_argument("--json", action="store_true", help="print the status as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)  # --help and --version answer here, before anything else is loaded
    from service.observability import configure_logging

    configure_logging()
    args.json = getattr(args, "json", False) or args.global_json
    try:
        settings = from_env(os.environ)
    except ConfigError as exc:
        print(f"kagent-fork: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        return serve(settings, args.host, args.port, args.workers)
    logging.getLogger().setLevel(logging.WARNING)  # operator output stays readable
    return operate(settings, args)
