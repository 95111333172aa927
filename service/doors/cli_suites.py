"""`kagent-fork suite create|add|remove|list|show|export|import|run|runs|status|cancel|keep`: a suite's cases and
runs from a shell, through the same operations as the HTTP API (service/agents/suites/). The parser loads nothing
of the service; `run` loads the suites' operations when a suite command runs.

`suite run ... --wait --fail-if-worse` is the check a pipeline runs before it changes an agent: it prints the
verdict and exits WORSE when an agent's outcome (not the control's) is `worse`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from service.identity import Caller
    from service.services import Services

HELP = (
    "suites: saved cases of real conversations to continue from, and their runs (create, add, remove, list, show, "
    "export, import, run, runs, status, cancel, keep)"
)
WORSE = 11  # suite run --fail-if-worse: an agent's outcome is `worse` (said in EXIT_HELP)


def _positive_or_all(value: str) -> int | str:
    return value if value in ("all", "first", "last") else int(value)


def add_parser(commands: Any, formatter: type[argparse.HelpFormatter], epilog: str) -> None:
    suite = commands.add_parser("suite", help=HELP, description=HELP, epilog=epilog, formatter_class=formatter)
    actions = suite.add_subparsers(dest="suite_action", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = actions.add_parser(
            name, help=help_text, description=help_text, epilog=epilog, formatter_class=formatter
        )
        a.add_argument("--user", default="admin@kagent.dev", help="act as this kagent user")
        a.add_argument("--json", action="store_true", help="print the API's data as JSON")
        a.set_defaults(share_token=None)
        return a

    c = action("create", "make a suite: empty, or of the conversations --select-agent picks")
    c.add_argument("name")
    c.add_argument("--select-agent", help="namespace/name: one case per conversation of yours with this agent")
    c.add_argument("--limit", type=int, default=20, help="with --select-agent: the newest conversations, at most")
    c.add_argument(
        "--turn", type=_positive_or_all, default="first", help="with --select-agent: first, last or a user turn's N"
    )
    c.add_argument("--since", help="with --select-agent: last active at or after (RFC 3339)")
    c.add_argument("--until", help="with --select-agent: last active before (RFC 3339)")
    a = action("add", "add a case: a turn of a conversation to continue from (Save as a case)")
    a.add_argument("suite_id")
    a.add_argument("session_id")
    turn = a.add_mutually_exclusive_group(required=True)
    turn.add_argument("--before", help="rewind_before_invocation_id: the turn the case continues from")
    turn.add_argument("--before-task", help="rewind_before_task_id: the same turn named by its task")
    a.add_argument("--turns", type=_positive_or_all, default=1, help="how many turns a run replays, or all")
    a.add_argument("--message", help="ask the case's first turn with this text instead")
    r = action("remove", "remove a case from a suite")
    r.add_argument("suite_id")
    r.add_argument("case_id")
    action("list", "list your suites, newest first")
    action("show", "show a suite and its cases").add_argument("suite_id")
    action("export", "print a suite as YAML, a file to keep beside the agent's manifests").add_argument("suite_id")
    i = action("import", "make a suite from a YAML or JSON file (- reads standard input)")
    i.add_argument("file")
    run = action("run", "run a suite: every case continued on each agent, judged against the source")
    run.add_argument("suite_id")
    run.add_argument("--agent", action="append", required=True, help="namespace/name (repeat for more, at most 8)")
    run.add_argument("--judge", required=True, help="namespace/name of the judging kagent agent")
    run.add_argument("--criteria", help="added to the judge's default criteria")
    run.add_argument("--repeats", type=int, default=1, help="branches per case and agent (1-5)")
    run.add_argument("--turns", type=_positive_or_all, help="how many turns each case replays (default: the case's)")
    run.add_argument("--tools", choices=["replay", "live"], help="what the agents' tools do (default: replay)")
    run.add_argument("--reads", choices=["recorded", "live"], help="a replay's reads (default: recorded)")
    run.add_argument("--control", action="store_true", help="add the source's own agent: the noise floor")
    run.add_argument("--max-usd", type=float, help="refuse a run estimated over it; stop starting cases at it")
    run.add_argument("--dry-run", action="store_true", help="say what it would do and cost; write nothing")
    run.add_argument("--wait", action="store_true", help="drive the run in this process until it ends")
    run.add_argument(
        "--fail-if-worse", action="store_true",
        help=f"wait (as --wait), then exit {WORSE} when an agent's outcome is worse than the source",
    )  # fmt: skip
    action("runs", "list a suite's runs, newest first").add_argument("suite_id")
    for name, text in (("status", "a run's progress and verdict (Markdown)"), ("cancel", "end a run")):
        one = action(name, text)
        one.add_argument("suite_id")
        one.add_argument("run_id")
    k = action("keep", "show one branch of a run in your chats (forked into them)")
    k.add_argument("suite_id")
    k.add_argument("run_id")
    k.add_argument("session_id", help="the branch: its session id (a case's experiment grid lists them)")


def _show(suite: dict[str, Any]) -> str:
    lines = [f"Suite {suite['name']!r} ({suite['id']}), {len(suite['cases'])} cases"]
    for n, c in enumerate(suite["cases"], 1):
        turn = c["rewind_before_invocation_id"] or f"task {c['rewind_before_task_id']}"
        asked = f", asked {c['message']['text']!r}" if c["message"] else ""
        lines.append(
            f"  {n}. {c['case_id']}: session {c['session_id']} before {turn}, turns {c['turns']}{asked}"
            f" ({c['agent_ref'] or 'agent unknown'}: {(c['user_text'] or '')[:60]!r})"
        )
    return "\n".join(lines)


def _file(path: str) -> tuple[bytes, str]:
    body = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    json_file = path.endswith(".json") or body.lstrip()[:1] in (b"{", b"[")
    return body, "application/json" if json_file else "application/yaml"


async def run(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents.suites import saved
    from service.agents.suites.cases import CaseSpec, SuiteRequest
    from service.errors import BadRequest

    act = args.suite_action
    if act in RUN_ACTIONS:
        return await RUN_ACTIONS[act](svc, caller, args)
    if act == "create":
        select = None
        if args.select_agent:
            fields = {"agent": args.select_agent, "limit": args.limit, "turn": args.turn, "since": args.since,
                      "until": args.until}  # fmt: skip
            select = {k: v for k, v in fields.items() if v is not None}
        req = msgspec.convert({"name": args.name, "select": select}, SuiteRequest)
        data = msgspec.to_builtins(await saved.create(svc, caller, req))
    elif act == "add":
        message = {"text": args.message} if args.message is not None else None
        spec = msgspec.convert(
            {"session_id": args.session_id, "rewind_before_invocation_id": args.before,
             "rewind_before_task_id": args.before_task, "turns": args.turns, "message": message},
            CaseSpec,
        )  # fmt: skip
        data = msgspec.to_builtins(await saved.add_case(svc, caller, args.suite_id, spec))
    elif act == "remove":
        data = msgspec.to_builtins(await saved.delete_case(svc, caller, args.suite_id, args.case_id))
    elif act == "list":
        listed = msgspec.to_builtins(await saved.of_user(svc, caller))
        lines = [f"{s['id']} {s['name']!r}: {s['cases']} cases, {s['created_at']}" for s in listed]
        return listed, "\n".join(lines) or "No suites."
    elif act == "show":
        data = msgspec.to_builtins(await saved.get(svc, caller, args.suite_id))
    elif act == "export":
        text = (await saved.export(svc, caller, args.suite_id)).decode()
        return {"yaml": text}, text.rstrip("\n")
    else:
        try:
            body, media = _file(args.file)
        except OSError as exc:
            raise BadRequest(f"cannot read {args.file}: {exc.strerror}") from None
        data = msgspec.to_builtins(await saved.import_file(svc, caller, saved.parse_file(body, media)))
    return data, _show(data)


async def _run_suite(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    """Start a run; with --wait this process drives it (its branches and its judge's calls) to its end, else it
    returns once started and a kagent-fork server takes the run over (within three heartbeats)."""
    from service.agents import whatif
    from service.agents.suites import ledger, report, runs

    body = {"agents": args.agent, "repeats": args.repeats, "turns": args.turns, "tools": args.tools,
            "reads": args.reads, "control": args.control, "max_usd": args.max_usd, "dry_run": args.dry_run,
            "judge": {"agent": args.judge, **({"criteria": args.criteria} if args.criteria else {})}}  # fmt: skip
    req = msgspec.convert({k: v for k, v in body.items() if v is not None}, ledger.RunRequest)
    runner = whatif.Runner(svc=svc)
    try:
        answer, _ = await runs.start(svc, runner, caller, args.suite_id, req, None)
        if isinstance(answer, runs.RunPlan):
            plan = msgspec.to_builtins(answer)
            text = (f"Dry run: {plan['cases']} cases, {plan['branches']} branches, about "
                    f"{plan['estimated_usd_text']} (judge included); ")  # fmt: skip
            return plan, text + (f"refused: {plan['refused']}" if plan["refused"] else "it would start")
        assert isinstance(answer, runs.Run)
        found = answer
        while (args.wait or args.fail_if_worse) and found.status in runs.OPEN:
            await asyncio.sleep(0.5)
            found = await runs.get(svc, caller, args.suite_id, answer.id)
    finally:
        await runner.stop()
    worse = [a.agent_ref for a in found.verdict.by_agent if a.outcome == "worse" and not a.control]
    if args.fail_if_worse and worse:
        args.exit_code = WORSE
    return msgspec.to_builtins(found), report.markdown(found)


async def _runs(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents.suites import runs

    listed = msgspec.to_builtins(await runs.of_suite(svc, caller, args.suite_id))
    lines = [f"{r['id']} {r['status']}: {', '.join(r['agents'])} judged by {r['judge']}, {r['created_at']}"
             for r in listed]  # fmt: skip
    return listed, "\n".join(lines) or "No runs."


async def _status(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents.suites import report, runs

    found = await runs.get(svc, caller, args.suite_id, args.run_id)
    return msgspec.to_builtins(found), report.markdown(found)


async def _cancel(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents.suites import report, runs

    found = await runs.cancel(svc, caller, args.suite_id, args.run_id)
    return msgspec.to_builtins(found), report.markdown(found)


async def _keep(svc: Services, caller: Caller, args: argparse.Namespace) -> tuple[object, str]:
    from service.agents.suites import runs

    outcome = await runs.keep(svc, caller, args.suite_id, args.run_id, runs.KeepRequest(session_id=args.session_id))
    data = msgspec.json.decode(msgspec.json.encode(outcome.data))
    return data, f"Kept: session {outcome.session_id} is in your chats"


RUN_ACTIONS = {"run": _run_suite, "runs": _runs, "status": _status, "cancel": _cancel, "keep": _keep}
