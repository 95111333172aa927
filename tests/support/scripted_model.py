"""A scripted model behind an OpenAI-compatible ``POST /v1/chat/completions`` (what kagent's runtimes call
for a ModelConfig of provider OpenAI with a ``base_url``), that keeps every request it was sent.

The answer to a request is chosen by a *cue*: the text of the conversation's last user message (the
question of the turn being run). ``model.on(cue, step, step, ...)`` scripts a turn: its first model call is
answered by the first step, the call after a tool result by the second, and so on (the step is the number of
assistant messages after that user message). A step is ``say(text)`` or ``call(tool, args)``. A question
with no script gets ``Answer to: <question>``. Choosing by the conversation, not by call order, lets one
model serve many tests and runtimes at once.

``requests_for(cue)`` gives the requests of a turn, so a test can assert the exact messages the model was
sent. Streaming (``stream: true``) is answered as OpenAI's server-sent chunks.

``POST /v1/embeddings`` answers each input with a fixed vector made from its text's hash (CrewAI's memory
embeds what it stores and searches; the tests never look at the vectors).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.live_server import live_server


@dataclass(frozen=True)
class Step:
    text: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None


def say(text: str) -> Step:
    return Step(text=text)


def call(tool: str, **args: Any) -> Step:
    return Step(tool=tool, args=args)


def message_text(message: dict[str, Any]) -> str:
    """A chat message's text (content as a string, or a list of text parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def turn_question(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The last user message's text, and how many assistant messages follow it."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user" and message_text(messages[index]):
            after = sum(1 for m in messages[index + 1 :] if m.get("role") == "assistant")
            return message_text(messages[index]), after
    return "", sum(1 for m in messages if m.get("role") == "assistant")


@dataclass
class ScriptedModel:
    scripts: dict[str, list[Step]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, cue: str, *steps: Step) -> None:
        """Script the turn whose question contains `cue`."""
        with self._lock:
            self.scripts[cue] = list(steps)

    def requests_for(self, cue: str) -> list[dict[str, Any]]:
        """Every request made while running the turn whose question contains `cue`, oldest first."""
        with self._lock:
            return [r for r in self.requests if cue in turn_question(r.get("messages", []))[0]]

    def step_for(self, body: dict[str, Any]) -> Step:
        question, after = turn_question(body.get("messages", []))
        with self._lock:
            self.requests.append(body)
            script = next((steps for cue, steps in self.scripts.items() if cue in question), None)
        if script is None or after >= len(script):
            return say(f"Answer to: {question}")
        return script[after]

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)


def _usage(body: dict[str, Any]) -> dict[str, int]:
    prompt = sum(len(message_text(m)) for m in body.get("messages", [])) // 4 + 1
    return {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7}


def model_app(model: ScriptedModel) -> Starlette:
    async def completions(request: Request) -> Response:
        body = json.loads(await request.body())
        step = model.step_for(body)
        n = model.next_id()
        message: dict[str, Any] = {"role": "assistant", "content": step.text}
        finish = "stop"
        if step.tool is not None:
            arguments = json.dumps(step.args or {})
            message["tool_calls"] = [
                {"id": f"call_{n}", "type": "function", "function": {"name": step.tool, "arguments": arguments}}
            ]
            finish = "tool_calls"
        head = {"id": f"chatcmpl-{n}", "created": int(time.time()), "model": body.get("model", "scripted")}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            return JSONResponse({**head, "object": "chat.completion", "choices": [choice], "usage": _usage(body)})

        async def chunks() -> AsyncIterator[bytes]:
            delta = {**message}
            if "tool_calls" in delta:
                delta["tool_calls"] = [{"index": 0, **delta["tool_calls"][0]}]
            for choice in (
                {"index": 0, "delta": delta, "finish_reason": None},
                {"index": 0, "delta": {}, "finish_reason": finish},
            ):
                chunk = {**head, "object": "chat.completion.chunk", "choices": [choice]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            usage = {**head, "object": "chat.completion.chunk", "choices": [], "usage": _usage(body)}
            yield f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def embeddings(request: Request) -> Response:
        body = json.loads(await request.body())
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        data = []
        for index, value in enumerate(texts):
            vector = embedding(str(value))
            if body.get("encoding_format") == "base64":  # the openai client's default: little-endian float32
                encoded: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            else:
                encoded = vector
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
        return JSONResponse({"object": "list", "data": data, "model": body.get("model", "scripted"), "usage": usage})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
        ]
    )


def embedding(text: str, size: int = 256) -> list[float]:
    """A unit vector that depends only on the text: two texts' vectors are far apart (their cosine about
    0 ± 0.06), so a memory search finds only what was stored under the same text."""
    digest = b"".join(hashlib.sha256(f"{block}:{text}".encode()).digest() for block in range(size // 32))
    raw = [b - 127.5 for b in digest[:size]]
    norm = sum(x * x for x in raw) ** 0.5
    return [x / norm for x in raw]


@dataclass(frozen=True)
class RunningModel:
    url: str  # the OpenAI base URL: http://127.0.0.1:<port>/v1
    model: ScriptedModel


@contextmanager
def running_model() -> Iterator[RunningModel]:
    model = ScriptedModel()
    with live_server(model_app(model)) as url:
        yield RunningModel(url=f"{url}/v1", model=model)
