"""One turn of a kagent 1.0 Actor's ADK conversation, run with kagent-adk 1.0.0a17's own parts, then exit.

Run inside .venv-kagent-adk-1.0, never imported by the tests. `kagent-adk static` cannot start there: kagent-adk
1.0.0a17 needs kagent-proto (its config.json and runtime clients are protobufs), which is not on PyPI
(docs/kagent-1.0.md, "What is proven"). So this script wires, as `KAgentApp.build` (kagent/adk/_a2a.py) and
`create_agent` (kagent/adk/types.py) of 1.0.0a17 do, the parts that decide what the model is sent:

- the session store: kagent-adk's `LocalSessionService(db_url=<session_db_url>)` (the Actor's private SQLite
  database: google-adk's DatabaseSessionService with the fixed keys "conversation"/"conversation");
- the runner: google-adk's `App` with `ResumabilityConfig(is_resumable=True)` and no compaction, a `Runner` with
  that session service and an `InMemoryArtifactService`;
- the agent: an ADK `Agent` with kagent-adk's OpenAI model (`kagent.adk.models._openai.OpenAI`, type "openai",
  base_url), the instruction as `static_instruction`, and an MCP toolset (google-adk's McpToolset; kagent's
  KAgentMcpToolset subclasses it);
- the request: what google-adk's A2A executor and kagent's executor hand the runner (`_prepare_session`, then
  `run_async` with the A2A context as session id, the caller as user id, `state_delta={"headers": ...}`).

Not run: kagent's A2A executor and request handler, its gRPC task store, the gateway. kagent-adk's modules are
loaded from the installed 1.0.0a17 package without running its `kagent/adk/__init__.py`, which imports the
missing protobufs. Prints one JSON line: the answer and the invocation id of the turn.
"""

import argparse
import asyncio
import importlib.util
import json
import sys
import types
from pathlib import Path


def _kagent_adk_parts() -> tuple[type, type]:
    """LocalSessionService and the OpenAI model class, from the installed kagent-adk 1.0.0a17 files."""
    spec = importlib.util.find_spec("kagent")
    assert spec is not None and spec.submodule_search_locations, "kagent-adk is not installed"
    root = next(Path(p) / "adk" for p in spec.submodule_search_locations if (Path(p) / "adk").is_dir())
    for package, path in (("kagent.adk", root), ("kagent.adk.models", root / "models")):
        module = types.ModuleType(package)
        module.__path__ = [str(path)]
        sys.modules[package] = module
    from kagent.adk._local_session_service import LocalSessionService
    from kagent.adk.models._openai import OpenAI

    return LocalSessionService, OpenAI


async def turn(args: argparse.Namespace) -> dict[str, str]:
    from google.adk.agents import Agent
    from google.adk.agents.run_config import RunConfig, StreamingMode
    from google.adk.apps import App, ResumabilityConfig
    from google.adk.artifacts import InMemoryArtifactService
    from google.adk.runners import Runner
    from google.adk.tools.mcp_tool.mcp_session_manager import StreamableHTTPConnectionParams
    from google.adk.tools.mcp_tool.mcp_toolset import McpToolset
    from google.genai import types as genai

    local_session_service, openai_model = _kagent_adk_parts()
    agent = Agent(
        name=args.agent_name,
        model=openai_model(type="openai", model="scripted-model", base_url=args.model_url),
        description="kagent-fork's test agent",
        static_instruction=args.instruction,
        tools=[
            McpToolset(connection_params=StreamableHTTPConnectionParams(url=args.tools_url), tool_filter=["lookup"])
        ],
    )
    app = App(
        name=args.app_name,
        root_agent=agent,
        plugins=[],
        events_compaction_config=None,
        resumability_config=ResumabilityConfig(is_resumable=True),
    )
    runner = Runner(
        app=app, session_service=local_session_service(db_url=args.db), artifact_service=InMemoryArtifactService()
    )
    try:
        # kagent's A2aAgentExecutor._prepare_session: create the native session on the first turn
        session = await runner.session_service.get_session(
            app_name=runner.app_name, user_id=args.caller, session_id=args.context_id
        )
        if session is None:
            name = args.question.strip()
            state = {"session_name": name[:20] + ("..." if len(name) > 20 else "")}
            await runner.session_service.create_session(
                app_name=runner.app_name, user_id=args.caller, state=state, session_id=args.context_id
            )
        answer, invocation = "", ""
        async for event in runner.run_async(
            user_id=args.caller,
            session_id=args.context_id,
            new_message=genai.Content(role="user", parts=[genai.Part(text=args.question)]),
            state_delta={"headers": json.loads(args.headers)},
            run_config=RunConfig(streaming_mode=StreamingMode.NONE),
        ):
            invocation = event.invocation_id
            if event.error_code:  # the runner reports a failed model call as an event: fail the turn
                raise SystemExit(f"the turn failed: {event.error_code}: {event.error_message}")
            if event.is_final_response() and event.content and event.content.parts:
                answer = "".join(p.text or "" for p in event.content.parts)
        return {"answer": answer, "invocation_id": invocation}
    finally:
        await runner.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, help="the session_db_url, e.g. sqlite+aiosqlite:////durable/session.db")
    parser.add_argument("--question", required=True)
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--tools-url", required=True)
    parser.add_argument("--context-id", required=True, help="the public A2A context id")
    parser.add_argument("--caller", required=True, help="the caller the A2A request was authenticated as")
    parser.add_argument("--headers", default="{}", help="the request's headers, as JSON")
    parser.add_argument("--app-name", default="kagent__NS__adk_agent")
    parser.add_argument("--agent-name", default="adk_agent")
    parser.add_argument("--instruction", default="You are kagent-fork's test agent. Answer briefly.")
    print(json.dumps(asyncio.run(turn(parser.parse_args()))))


if __name__ == "__main__":
    main()
