"""A small OpenAI Agents SDK agent for kagent-openai 0.10.4, written as kagent's BYO sample is
(python/samples/openai/basic_agent on release/v0.10.x): an Agent with one function tool, served by kagent's
KAgentApp with uvicorn. kagent-openai points the SDK at OPENAI_API_BASE (the tests' scripted model) with the
chat-completions API. Run inside .venv-kagent-openai, never imported by the tests.
"""

import json
import os
from pathlib import Path

import uvicorn
from a2a.types import AgentCard
from agents.agent import Agent
from agents.tool import function_tool
from kagent.core import KAgentConfig
from kagent.openai import KAgentApp


@function_tool
def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: what to look up.
    """
    return f"looked up: {query}"


agent = Agent(name="openai_agent", instructions="You are kagent-fork's test agent. Answer briefly.", tools=[lookup])

if __name__ == "__main__":
    card = AgentCard.model_validate(json.loads((Path(__file__).parent / "agent-card.json").read_text()))
    app = KAgentApp(agent=agent, agent_card=card, config=KAgentConfig())
    uvicorn.run(app.build(), host=os.getenv("HOST", "127.0.0.1"), port=int(os.environ["PORT"]), log_level="warning")
