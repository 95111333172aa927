"""A small LangGraph agent for kagent-langgraph 0.10.4, written as kagent's BYO LangGraph samples are
(python/samples/langgraph on release/v0.10.x): a graph compiled with kagent's KAgentCheckpointer, served by
kagent's KAgentApp with uvicorn. Run inside .venv-kagent-langgraph, never imported by the tests.

Two tools: `lookup` runs at once; `delete_pod` asks for approval first with LangGraph's interrupt(), in the
`action_requests` shape kagent's executor turns into an A2A input-required task (as the hitl-tools sample).
The model is langchain-openai's ChatOpenAI at OPENAI_BASE_URL (the tests' scripted model).
"""

import json
import os
from pathlib import Path
from typing import Annotated, Any

import httpx
import uvicorn
from kagent.core import KAgentConfig
from kagent.langgraph import KAgentApp, KAgentCheckpointer
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict


@tool
def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: what to look up.
    """
    return f"looked up: {query}"


@tool
def delete_pod(name: str) -> str:
    """Delete a pod (asks the user first).

    Args:
        name: the pod's name.
    """
    return f"deleted pod {name}"


TOOLS = {t.name: t for t in (lookup, delete_pod)}
NEEDS_APPROVAL = {"delete_pod"}


class State(TypedDict):
    messages: Annotated[list, add_messages]


llm = ChatOpenAI(
    model="scripted-model", base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]
).bind_tools(list(TOOLS.values()))


async def call_model(state: State) -> dict[str, Any]:
    return {"messages": [await llm.ainvoke(state["messages"])]}


async def run_tools(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    results = []
    for call in last.tool_calls:
        if call["name"] in NEEDS_APPROVAL:
            decision = interrupt({"action_requests": [{"name": call["name"], "args": call["args"], "id": call["id"]}]})
            if not (isinstance(decision, dict) and decision.get("decision_type") == "approve"):
                results.append(ToolMessage(content="rejected by the user", tool_call_id=call["id"], name=call["name"]))
                continue
        output = await TOOLS[call["name"]].ainvoke(call["args"])
        results.append(ToolMessage(content=str(output), tool_call_id=call["id"], name=call["name"]))
    return {"messages": results}


def route(state: State) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


config = KAgentConfig()
builder = StateGraph(State)
builder.add_node("agent", call_model)
builder.add_node("tools", run_tools)
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route, {"tools": "tools", END: END})
builder.add_edge("tools", "agent")
graph = builder.compile(
    checkpointer=KAgentCheckpointer(client=httpx.AsyncClient(base_url=config.url), app_name=config.app_name)
)

if __name__ == "__main__":
    card = json.loads((Path(__file__).parent / "agent-card.json").read_text())
    app = KAgentApp(graph=graph, agent_card=card, config=config, tracing=False)
    uvicorn.run(app.build(), host=os.getenv("HOST", "127.0.0.1"), port=int(os.environ["PORT"]), log_level="warning")
