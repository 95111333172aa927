"""`kagent-fork suite create|add|remove|list|show|export|import`: a suite's cases from a shell, through the same
operations as the HTTP API (service/agents/suites/). The parser loads nothing of the service; `run` loads the
suites' operations when a suite command runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from service.identity import Caller
    from service.services import Services

HELP = "suites: saved cases of real conversations to continue from (create, add, remove, list, show, export, import)"


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
