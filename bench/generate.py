"""Realistic kagent sessions, generated fast and written straight into kagent's tables with COPY.

The rows have the shapes kagent's runtimes write (docs/kagent-schema.md; tests/support/conversations.py builds
them with google-adk and a2a-sdk), hand-built here so that the benchmark needs neither library:

- one turn = one invocation (``"e-<uuid4>"``) = 10 Python-ADK events (``model_dump_json(exclude_none=True)``,
  snake_case): the user's message, four tool calls each followed by its function_response, the final answer;
  about 1.1 KB per event on average (tool outputs make the responses about 2 KB, the rest 0.4-0.9 KB);
- one task per turn, written just before the turn's first event: A2A v1.0 (kagent main, ``protocol_version``
  '1.0': one artifact per agent event, about 13 KB) or legacy A2A 0.3 (kagent 0.10.x, ``protocol_version``
  NULL: every agent event as a status message moved into ``history``, the user message twice, about 13 KB).

Texts vary (random pod names, restarts, log lines, words), so PostgreSQL compresses the tasks about as much
as real ones (pglz about 2.5x). ``python -m bench.generate --turns 1000`` writes one session into
``DATABASE_URL``; the runner calls ``insert_session``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg
import msgspec

Dialect = Literal["v1", "legacy"]

USER_ID = "admin@kagent.dev"
AGENT_ID = "kagent__NS__k8s_agent"
AGENT = "k8s_agent"
MODEL = "gpt-4.1-mini"
ADK_EXTENSION = "https://google.github.io/adk-docs/a2a/a2a-extension/"
EVENTS_PER_TURN = 10
CHUNK_TURNS = 500  # turns per COPY: bounds the generator's memory on 100,000-event sessions

EVENT_COLUMNS = ["id", "user_id", "session_id", "created_at", "updated_at", "data"]
TASK_COLUMNS = ["id", "created_at", "updated_at", "data", "session_id", "protocol_version", "user_id"]

_encode = msgspec.json.Encoder().encode
_STEP = timedelta(milliseconds=1)

_VOCABULARY = """
pod deployment replica node namespace service ingress container image restart crash loop backoff memory
limit request cpu throttling probe readiness liveness volume claim secret configmap rollout revision
scale schedule taint toleration affinity label selector endpoint port timeout retry error warning
healthy pending running failed evicted oom killed exit code signal log stream cluster autoscaler
quota budget disruption latency network policy dns resolve certificate expire rotate upgrade
version helm chart values manifest apply patch diff annotate cordon drain the a of to and is in
it that this was for on with as be at by are not but from or have an they which one you had all
were when we there can been
"""
_WORDS = _VOCABULARY.split()
_QUESTIONS = (
    "Why does {pod} keep restarting?",
    "List the pods in the {ns} namespace",
    "Show me the logs of the previous container of {pod}",
    "Which deployments in {ns} have fewer ready replicas than desired?",
    "Scale {app} to {n} replicas and tell me when it is ready",
    "What changed in the last rollout of {app}?",
    "Is there a PodDisruptionBudget for {app} in {ns}?",
    "Summarize the health of the {ns} namespace",
)
_NAMESPACES = ("default", "payments", "checkout", "monitoring", "kube-system", "ingress-nginx", "search")
_APPS = ("web", "api", "worker", "nginx", "redis", "postgres", "cart", "auth", "search", "billing")
_STATUSES = ("Running", "Running", "Running", "CrashLoopBackOff", "Pending", "Completed", "OOMKilled", "Error")
_TOOLS = ("k8s_get_resources", "k8s_get_pod_logs", "k8s_describe_resource", "k8s_get_events")


@dataclass(frozen=True, kw_only=True)
class SessionSpec:
    turns: int
    dialect: Dialect = "v1"
    user_id: str = USER_ID
    session_id: str | None = None
    name: str | None = None  # default: what kagent's executor derives from the first message
    seed: int = 4
    start: datetime | None = None  # default: one day ago


@dataclass(kw_only=True)
class GeneratedSession:
    session_id: str
    user_id: str
    dialect: Dialect
    invocation_ids: list[str] = field(default_factory=list)
    events: int = 0
    tasks: int = 0
    event_bytes: int = 0
    task_bytes: int = 0
    max_event_bytes: int = 0
    max_task_bytes: int = 0


class _Text:
    """Random but readable texts: pod names, tables, log lines, prose."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def hexid(self, n: int) -> str:
        return f"{self.rng.getrandbits(4 * n):0{n}x}"

    def pod(self, app: str | None = None) -> str:
        return f"{app or self.rng.choice(_APPS)}-{self.hexid(9)}-{self.hexid(5)}"

    def words(self, n: int) -> str:
        return " ".join(self.rng.choices(_WORDS, k=n))

    def sentence(self, n: int) -> str:
        text = self.words(n)
        return text[0].upper() + text[1:] + "."

    def question(self) -> str:
        r = self.rng
        template = r.choice(_QUESTIONS)
        extra = f" {self.sentence(r.randint(4, 14))}" if r.random() < 0.5 else ""
        app = r.choice(_APPS)
        return template.format(pod=self.pod(app), ns=r.choice(_NAMESPACES), app=app, n=r.randint(2, 9)) + extra

    def answer(self) -> str:
        return " ".join(self.sentence(self.rng.randint(8, 20)) for _ in range(self.rng.randint(3, 6)))

    def tool_output(self, tool: str) -> str:
        r = self.rng
        lines: list[str]
        if tool == "k8s_get_resources":
            lines = ["NAME                                READY   STATUS             RESTARTS   AGE"]
            for _ in range(r.randint(18, 26)):
                lines.append(
                    f"{self.pod():<35} {r.randint(0, 2)}/{r.randint(1, 2)}     {r.choice(_STATUSES):<18} "
                    f"{r.randint(0, 40):<10} {r.randint(1, 59)}{r.choice('smhd')}"
                )
        elif tool == "k8s_get_pod_logs":
            lines = [
                f"2025-11-{r.randint(10, 28)}T{r.randint(0, 23):02}:{r.randint(0, 59):02}:{r.randint(0, 59):02}."
                f"{r.randint(0, 999):03}Z {r.choice(('INFO', 'WARN', 'ERROR', 'DEBUG'))} {self.words(r.randint(5, 12))}"
                for _ in range(r.randint(16, 24))
            ]
        elif tool == "k8s_describe_resource":
            pod = self.pod()
            lines = [
                f"Name:         {pod}",
                f"Namespace:    {r.choice(_NAMESPACES)}",
                f"Node:         node-{self.hexid(6)}/10.0.{r.randint(0, 255)}.{r.randint(0, 255)}",
                f"Status:       {r.choice(_STATUSES)}",
                f"IP:           10.244.{r.randint(0, 255)}.{r.randint(0, 255)}",
                "Containers:",
                f"  app:\n    Image:      registry.example.com/{r.choice(_APPS)}:{r.randint(1, 9)}.{r.randint(0, 30)}",
                f"    Limits:     cpu: {r.randint(1, 8) * 250}m, memory: {r.randint(1, 16) * 128}Mi",
                f"    Restart Count:  {r.randint(0, 40)}",
                "Events:",
            ]
            lines += [f"  {r.choice(('Normal', 'Warning'))}  {self.words(r.randint(6, 14))}" for _ in range(14)]
        else:
            lines = ["LAST SEEN   TYPE      REASON              OBJECT                          MESSAGE"]
            lines += [
                f"{r.randint(1, 59)}m         {r.choice(('Normal', 'Warning'))}   {r.choice(_WORDS):<18} "
                f"pod/{self.pod():<27} {self.words(r.randint(4, 9))}"
                for _ in range(r.randint(14, 20))
            ]
        return "\n".join(lines)

    def usage(self, base: int) -> tuple[int, int]:
        return base + self.rng.randint(0, 4000), self.rng.randint(12, 400)


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(kw_only=True)
class _Turn:
    """One turn's content, shared by its events and its task."""

    invocation_id: str
    task_id: str
    question: str
    user_message_id: str
    calls: list[tuple[str, str, dict[str, Any], str]]  # (call id, tool, args, output)
    answer: str
    event_ids: list[str]
    times: list[datetime]  # task created_at, then one per event
    usage: list[tuple[int, int]]  # per model event: 4 calls, then the answer


def _turn(text: _Text, clock: datetime) -> tuple[_Turn, datetime]:
    r = text.rng
    calls = []
    for _ in range(4):
        tool = r.choice(_TOOLS)
        args = {"resource_type": "pod", "namespace": r.choice(_NAMESPACES)}
        if tool != "k8s_get_resources":
            args["resource_name"] = text.pod()
        calls.append(("adk-" + text.uuid(), tool, args, text.tool_output(tool)))
    times = [clock + _STEP * i for i in range(EVENTS_PER_TURN + 2)]
    turn = _Turn(
        invocation_id="e-" + text.uuid(),
        task_id=text.uuid(),
        question=text.question(),
        user_message_id=text.uuid(),
        calls=calls,
        answer=text.answer(),
        event_ids=[text.uuid() for _ in range(EVENTS_PER_TURN)],
        times=times,
        usage=[text.usage(600 + 40 * i) for i in range(5)],
    )
    return turn, times[-1] + _STEP


def _usage_md(prompt: int, completion: int, *, camel: bool) -> dict[str, int]:
    if camel:
        return {"totalTokenCount": prompt + completion, "promptTokenCount": prompt, "candidatesTokenCount": completion}
    return {
        "candidates_token_count": completion,
        "prompt_token_count": prompt,
        "total_token_count": prompt + completion,
    }


_ACTIONS: dict[str, Any] = {
    "state_delta": {},
    "artifact_delta": {},
    "requested_auth_configs": {},
    "requested_tool_confirmations": {},
}


def _event(turn: _Turn, i: int, author: str, content: dict[str, Any], **extra: Any) -> bytes:
    """An ADK Event as ``model_dump_json(exclude_none=True)`` writes it (keys in the model's order)."""
    data: dict[str, Any] = {}
    if "model_version" in extra:
        data["model_version"] = extra.pop("model_version")
    data["content"] = content
    if "usage_metadata" in extra:
        data["usage_metadata"] = extra.pop("usage_metadata")
    data["invocation_id"] = turn.invocation_id
    data["author"] = author
    data["actions"] = extra.pop("actions", _ACTIONS)
    data["node_info"] = {"path": ""}
    data["id"] = turn.event_ids[i]
    data["timestamp"] = turn.times[i + 1].timestamp()
    return _encode(data)


def _events(turn: _Turn, user_id: str) -> list[bytes]:
    headers = {"x-user-id": user_id, "content-type": "application/json"}
    out = [
        _event(
            turn, 0, "user", {"parts": [{"text": turn.question}], "role": "user"},
            actions={**_ACTIONS, "state_delta": {"headers": headers}},
        )
    ]  # fmt: skip
    for n, (call_id, tool, args, output) in enumerate(turn.calls):
        prompt, completion = turn.usage[n]
        out.append(
            _event(
                turn, 1 + 2 * n, AGENT,
                {"parts": [{"function_call": {"id": call_id, "args": args, "name": tool}}], "role": "model"},
                model_version=MODEL, usage_metadata=_usage_md(prompt, completion, camel=False),
            )
        )  # fmt: skip
        response = {"id": call_id, "name": tool, "response": {"result": output}}
        out.append(_event(turn, 2 + 2 * n, AGENT, {"parts": [{"function_response": response}], "role": "user"}))
    prompt, completion = turn.usage[4]
    out.append(
        _event(
            turn, 9, AGENT, {"parts": [{"text": turn.answer}], "role": "model"},
            model_version=MODEL, usage_metadata=_usage_md(prompt, completion, camel=False),
        )
    )  # fmt: skip
    return out


def _v1_task(turn: _Turn, text: _Text, session_id: str, user_id: str) -> bytes:
    """A kagent main task (a2a-sdk 1.x ``MessageToDict``, compact): one artifact per agent event."""
    artifacts = []
    for n, (call_id, tool, args, output) in enumerate(turn.calls):
        prompt, completion = turn.usage[n]
        for i, part in (
            (
                1 + 2 * n,
                {"data": {"args": args, "name": tool, "id": call_id}, "metadata": {"adk_type": "function_call"}},
            ),
            (
                2 + 2 * n,
                {
                    "data": {"name": tool, "response": {"result": output}, "id": call_id},
                    "metadata": {"adk_type": "function_response"},
                },
            ),
        ):
            md: dict[str, Any] = {"adk_event_id": turn.event_ids[i], "adk_actions": {"stateDelta": {}}}
            if i % 2:
                md["adk_usage_metadata"] = _usage_md(prompt, completion, camel=True)
            md |= {"adk_invocation_id": turn.invocation_id, "adk_author": AGENT}
            artifacts.append({"artifactId": text.uuid(), "parts": [part], "metadata": md})
    prompt, completion = turn.usage[4]
    artifacts.append(
        {
            "artifactId": text.uuid(),
            "parts": [{"text": turn.answer}],
            "metadata": {
                "adk_event_id": turn.event_ids[9], "adk_actions": {"stateDelta": {}},
                "adk_usage_metadata": _usage_md(prompt, completion, camel=True),
                "adk_invocation_id": turn.invocation_id, "adk_author": AGENT,
            },
        }
    )  # fmt: skip
    task = {
        "id": turn.task_id,
        "contextId": session_id,
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": _rfc3339(turn.times[-1])},
        "artifacts": artifacts,
        "history": [
            {
                "messageId": turn.user_message_id, "contextId": session_id, "taskId": turn.task_id,
                "role": "ROLE_USER", "parts": [{"text": turn.question}],
                "metadata": {"adk_invocation_id": turn.invocation_id, "displaySource": "user"},
            },
            {
                "messageId": text.uuid(), "role": "ROLE_AGENT",
                "metadata": {
                    "adk_event_id": text.uuid(), "adk_actions": {"stateDelta": {}, "endOfAgent": True},
                    "adk_invocation_id": turn.invocation_id, "adk_author": AGENT,
                },
            },
        ],
        "metadata": {
            ADK_EXTENSION: {"adk_agent_executor_v2": True}, "kagent_session_id": session_id,
            "adk_user_id": user_id, "adk_session_id": session_id,
            "kagent_usage_metadata": _usage_md(prompt, completion, camel=True), "kagent_app_name": AGENT_ID,
            "kagent_invocation_id": turn.invocation_id, "kagent_user_id": user_id, "adk_app_name": AGENT_ID,
        },
    }  # fmt: skip
    return _encode(task)


def _legacy_task(turn: _Turn, text: _Text, session_id: str, user_id: str) -> bytes:
    """A kagent 0.10.x task (a2a 0.3 pydantic ``model_dump_json(by_alias=True, exclude_none=True)``)."""

    def context_md(i: int, usage: tuple[int, int] | None) -> dict[str, Any]:
        md: dict[str, Any] = {
            "kagent_app_name": AGENT_ID, "kagent_author": AGENT, "kagent_invocation_id": turn.invocation_id,
            "kagent_session_id": session_id, "kagent_user_id": user_id,
        }  # fmt: skip
        if usage is not None:
            md["kagent_usage_metadata"] = _usage_md(*usage, camel=True)
        return md

    def agent_message(i: int, parts: list[dict[str, Any]], usage: tuple[int, int] | None) -> dict[str, Any]:
        return {
            "contextId": session_id, "kind": "message", "messageId": text.uuid(), "metadata": context_md(i, usage),
            "parts": parts, "role": "agent", "taskId": turn.task_id,
        }  # fmt: skip

    user = {
        "contextId": session_id, "kind": "message", "messageId": turn.user_message_id,
        "metadata": {"adk_invocation_id": turn.invocation_id, "displaySource": "user"},
        "parts": [{"kind": "text", "text": turn.question}], "role": "user", "taskId": turn.task_id,
    }  # fmt: skip
    history = [user, user]  # a2a-sdk 0.3 keeps the request message, then the submitted status's copy of it
    for n, (call_id, tool, args, output) in enumerate(turn.calls):
        call = {
            "data": {"args": args, "id": call_id, "name": tool},
            "kind": "data",
            "metadata": {"kagent_type": "function_call"},
        }
        response = {
            "data": {"id": call_id, "name": tool, "response": {"result": output}}, "kind": "data",
            "metadata": {"kagent_type": "function_response"},
        }  # fmt: skip
        history.append(agent_message(1 + 2 * n, [call], turn.usage[n]))
        history.append(agent_message(2 + 2 * n, [response], None))
    final = agent_message(9, [{"kind": "text", "text": turn.answer}], turn.usage[4])
    history.append(final)
    task = {
        "artifacts": [{"artifactId": text.uuid(), "parts": final["parts"]}],
        "contextId": session_id,
        "history": history,
        "id": turn.task_id,
        "kind": "task",
        "metadata": {
            "kagent_app_name": AGENT_ID, "kagent_user_id": user_id, "kagent_session_id": session_id,
            "kagent_invocation_id": turn.invocation_id,
            "kagent_usage_metadata": _usage_md(*turn.usage[4], camel=True),
            "adk_app_name": AGENT_ID, "adk_user_id": user_id, "adk_session_id": session_id,
        },
        "status": {"state": "completed", "timestamp": _rfc3339(turn.times[-1])},
    }  # fmt: skip
    return _encode(task)


def _chunks(
    spec: SessionSpec, session_id: str, start: datetime, out: GeneratedSession
) -> Iterator[tuple[list[Any], list[Any]]]:
    """(event records, task records) for CHUNK_TURNS turns at a time."""
    text = _Text(random.Random(f"{spec.seed}:{session_id}"))
    clock = start + _STEP
    version = "1.0" if spec.dialect == "v1" else None
    build_task = _v1_task if spec.dialect == "v1" else _legacy_task
    events: list[Any] = []
    tasks: list[Any] = []
    for index in range(spec.turns):
        turn, clock = _turn(text, clock)
        out.invocation_ids.append(turn.invocation_id)
        task = build_task(turn, text, session_id, spec.user_id).decode()
        tasks.append((turn.task_id, turn.times[0], turn.times[-1], task, session_id, version, spec.user_id))
        out.task_bytes += len(task)
        out.max_task_bytes = max(out.max_task_bytes, len(task))
        for i, data in enumerate(_events(turn, spec.user_id)):
            when = turn.times[i + 1]
            events.append((turn.event_ids[i], spec.user_id, session_id, when, when, data.decode()))
            out.event_bytes += len(data)
            out.max_event_bytes = max(out.max_event_bytes, len(data))
        if (index + 1) % CHUNK_TURNS == 0 or index + 1 == spec.turns:
            yield events, tasks
            out.events += len(events)
            out.tasks += len(tasks)
            events, tasks = [], []


async def insert_session(conn: asyncpg.Connection, spec: SessionSpec) -> GeneratedSession:
    """Write one session, its events and tasks in one transaction with COPY; kagent's tables must exist."""
    session_id = spec.session_id or str(uuid.uuid4())
    out = GeneratedSession(session_id=session_id, user_id=spec.user_id, dialect=spec.dialect)
    start = spec.start or datetime.now(UTC) - timedelta(days=1)
    async with conn.transaction():
        for events, tasks in _chunks(spec, session_id, start, out):
            await conn.copy_records_to_table("event", records=events, columns=EVENT_COLUMNS)
            await conn.copy_records_to_table("task", records=tasks, columns=TASK_COLUMNS)
        first = out.invocation_ids[0] if out.invocation_ids else ""
        name = spec.name if spec.name is not None else f"Session {first[2:10]}"
        updated = start + _STEP * (spec.turns * (EVENTS_PER_TURN + 2) + 1)
        await conn.execute(
            "INSERT INTO session (id, user_id, name, created_at, updated_at, agent_id, source) "
            "VALUES ($1, $2, $3, $4, $5, $6, 'user')",
            session_id, spec.user_id, name, start, updated, AGENT_ID,
        )  # fmt: skip
    return out


async def insert_population(conn: asyncpg.Connection, sessions: int, *, turns: int = 2, users: int = 100) -> None:
    """Other users' short chats, so that the planner's statistics look like a kagent database's: many
    sessions, each a small share of the event table (with a handful of sessions, PostgreSQL takes
    `session_id = $1` for a filter that keeps a large share of the table and plans accordingly)."""
    for i in range(sessions):
        await insert_session(conn, SessionSpec(turns=turns, user_id=f"user{i % users}@example.com", seed=i))


async def _main(args: argparse.Namespace) -> None:
    from service.embedded.server import install_kagent_schema

    conn = await asyncpg.connect(args.database_url)
    try:
        await install_kagent_schema(conn)
        started = asyncio.get_running_loop().time()
        made = await insert_session(conn, SessionSpec(turns=args.turns, dialect=args.dialect, seed=args.seed))
        took = asyncio.get_running_loop().time() - started
    finally:
        await conn.close()
    print(
        f"session {made.session_id} ({made.dialect}): {made.events} events ({made.event_bytes / made.events:.0f} B "
        f"average), {made.tasks} tasks ({made.task_bytes / made.tasks:.0f} B average) in {took:.1f} s; "
        f"last turn {made.invocation_ids[-1]}"
    )


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.generate", description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL"), help="default: DATABASE_URL")
    p.add_argument("--turns", type=int, default=1000, help="turns (10 events and one task each)")
    p.add_argument("--dialect", choices=["v1", "legacy"], default="v1")
    p.add_argument("--seed", type=int, default=4)
    args = p.parse_args()
    if not args.database_url:
        p.error("give --database-url or set DATABASE_URL (kagent's tables are created if missing)")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
