"""A small CrewAI crew with memory for kagent-crewai 0.10.4, written as kagent's BYO sample is
(python/samples/crewai/research-crew on release/v0.10.x, with its `memory=True` line switched on): one agent and
one task answering the user's `input`, served by kagent's KAgentApp with uvicorn. The model is crewai's LLM
pointed at OPENAI_BASE_URL (the tests' scripted model); the memory's embeddings go to OPENAI_API_BASE (the same
model's /v1/embeddings). Run inside .venv-kagent-crewai, never imported by the tests.

The task's description is the same every turn (the question is in its expected output): crewai's long-term
memory is looked up by the task's description, so the memory of earlier turns is found.

With CREW_MEMORY_IN_KAGENT=1 the crew re-validates on assignment: kagent-crewai's executor sets the crew's
public `long_term_memory` to its KagentMemoryStorage (kagent's /api/crewai/memory) for each request, but a
plain crewai 1.6.1 Crew reads the private `_long_term_memory` made when it was built (its SQLite file in the
pod), so without this the memory never reaches kagent (docs/frameworks.md).
"""

import json
import os
from pathlib import Path

import uvicorn
from crewai import LLM, Agent, Crew, Process, Task
from kagent.core import KAgentConfig
from kagent.crewai import KAgentApp
from pydantic import ConfigDict


class KagentMemoryCrew(Crew):
    model_config = ConfigDict(**{**Crew.model_config, "validate_assignment": True})


llm = LLM(model="openai/gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
helper = Agent(
    role="kagent-fork test agent",
    goal="Answer the user's question briefly",
    backstory="You help an SRE with a Kubernetes cluster.",
    llm=llm,
    allow_delegation=False,
    verbose=False,
)
answer = Task(
    description="Answer the user's latest question.",
    expected_output="A short answer to the question: {input}",
    agent=helper,
)
crew_class = KagentMemoryCrew if os.getenv("CREW_MEMORY_IN_KAGENT") == "1" else Crew
crew = crew_class(agents=[helper], tasks=[answer], process=Process.sequential, memory=True, verbose=False)

if __name__ == "__main__":
    card = json.loads((Path(__file__).parent / "agent-card.json").read_text())
    app = KAgentApp(crew=crew, agent_card=card, config=KAgentConfig(), tracing=False)
    uvicorn.run(app.build(), host=os.getenv("HOST", "127.0.0.1"), port=int(os.environ["PORT"]), log_level="warning")
