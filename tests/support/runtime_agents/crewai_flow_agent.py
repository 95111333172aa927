"""A small CrewAI flow with persisted state for kagent-crewai 0.10.4, written as kagent's BYO sample is
(python/samples/crewai/poem_flow on release/v0.10.x: a Flow with a pydantic state under `@persist`, served by
kagent's KAgentApp with uvicorn): its one step sends the model the questions of the earlier turns, which the
state keeps, and the new one. The model is crewai's LLM pointed at OPENAI_BASE_URL (the tests' scripted model).
Run inside .venv-kagent-crewai, never imported by the tests.
"""

import json
import os
from pathlib import Path

import uvicorn
from crewai import LLM
from crewai.flow import Flow, persist, start
from kagent.core import KAgentConfig
from kagent.crewai import KAgentApp
from pydantic import BaseModel

llm = LLM(model="openai/gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])


class ChatState(BaseModel):
    id: str = ""
    input: str = ""
    questions: list[str] = []


@persist()
class ChatFlow(Flow[ChatState]):
    @start()
    def answer(self) -> str:
        messages = [{"role": "system", "content": "You are kagent-fork's test flow. Answer briefly."}]
        messages += [{"role": "user", "content": q} for q in self.state.questions]
        messages.append({"role": "user", "content": self.state.input})
        self.state.questions.append(self.state.input)
        return str(llm.call(messages))


if __name__ == "__main__":
    card = json.loads((Path(__file__).parent / "agent-card.json").read_text())
    app = KAgentApp(crew=ChatFlow(), agent_card=card, config=KAgentConfig(), tracing=False)
    uvicorn.run(app.build(), host=os.getenv("HOST", "127.0.0.1"), port=int(os.environ["PORT"]), log_level="warning")
