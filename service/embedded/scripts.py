"""What the demo's scripted agents answer (service/embedded/scripted_agent.py serves them): no model, a script.
The answers read as an agent's, with no mark of the script in them: a replay's branch and the source it
continues must not be told apart by their words (a blind judge compares them; their cards say what they are).

- `script`, the demo's own agent (`kagent/k8s-agent`, also `kagent/scripted-agent`): a city's weather with one
  tool call, a comparison of the cities asked about from what it knows.
- `thorough_script` (`kagent/thorough-agent`): a second agent that really answers differently: slower (it takes
  about a second over each tool call), more tool calls (the weather *and* tomorrow's forecast of each city, and it
  looks every city up again before comparing them), and a different answer to the comparison (today's and
  tomorrow's). Its weather answers are the first agent's, word for word.
- `judge_script` (`kagent/demo-judge`): the demo's judge (docs/experiments.md). It is sent the conversation so far
  and two continuations, A and B, and answers by one stated rule: **the continuation that needed fewer tool calls
  for the same questions is better; as many: a tie**. Swapping A and B swaps its answer, so the service's two
  asks (each order) agree. Its answer is a reason sentence, then the JSON `{"winner", "reason"}`, last.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# What the script knows: a city's weather today (one tool call), and tomorrow's (the thorough agent's second one).
WEATHER = {
    "paris": (16.0, "sunny"),
    "berlin": (11.0, "cloudy"),
    "london": (12.0, "drizzle"),
    "tokyo": (21.0, "clear"),
    "madrid": (24.0, "sunny"),
}
FORECAST = {"paris": 15.0, "berlin": 18.0, "london": 13.0, "tokyo": 19.0, "madrid": 25.0}
TOOLS = ("get_weather", "get_forecast")


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any]
    result: dict[str, Any]


@dataclass(frozen=True)
class Step:
    """One scripted turn: its tool calls with their results, then the answer; `pause` the seconds the agent takes
    over each tool call (a slower agent)."""

    calls: tuple[Call, ...]
    answer: str
    pause: float = 0.0

    @property
    def tool(self) -> str | None:
        return self.calls[0].tool if self.calls else None

    @property
    def args(self) -> dict[str, Any] | None:
        return self.calls[0].args if self.calls else None


def _weather(city: str) -> Call:
    temp, sky = WEATHER[city]
    return Call("get_weather", {"city": city.title()}, {"temp_c": temp, "sky": sky})


def _forecast(city: str) -> Call:
    return Call("get_forecast", {"city": city.title(), "day": "tomorrow"}, {"temp_c": FORECAST[city]})


def _comparing(text: str) -> bool:
    return "warm" in text or "cold" in text or "compare" in text


def _unknown(question: str) -> Step:
    return Step((), f"I have no scripted answer to {question[:80]!r}; a real agent would answer here.")


def script(question: str) -> Step:
    """The demo agent's scripted answer to a question."""
    text = question.lower()
    cities = [c for c in WEATHER if c in text]
    if _comparing(text):
        known = cities or ["paris", "berlin"]
        best = max(known, key=lambda c: WEATHER[c][0])
        listed = ", ".join(f"{c.title()} {WEATHER[c][0]:g}°C" for c in known)
        return Step((), f"{best.title()} is the warmest: {listed}.")
    if cities:
        city = cities[0]
        temp, sky = WEATHER[city]
        return Step((_weather(city),), f"It is {temp:g}°C and {sky} in {city.title()}.")
    return _unknown(question)


def thorough_script(question: str) -> Step:
    """The second demo agent's answer: slower, more tool calls, and a different answer to a comparison."""
    text = question.lower()
    cities = [c for c in WEATHER if c in text]
    if _comparing(text):
        known = cities or ["paris", "berlin"]
        today = max(known, key=lambda c: WEATHER[c][0])
        tomorrow = max(known, key=lambda c: FORECAST[c])
        listed = ", ".join(f"{c.title()} {WEATHER[c][0]:g}°C today and {FORECAST[c]:g}°C tomorrow" for c in known)
        calls = tuple(call for c in known for call in (_weather(c), _forecast(c)))
        answer = f"I looked again: {today.title()} is the warmest today, {tomorrow.title()} tomorrow ({listed})."
        return Step(calls, answer, pause=0.4)
    if cities:
        plain = script(question)
        return Step((*plain.calls, _forecast(cities[0])), plain.answer, pause=0.4)
    return _unknown(question)


# The judge's message (the service's, docs/experiments.md): each section starts with a line `=== <name> ===`
# (`Conversation so far`, `Continuation A`, `Continuation B`, then the instructions, `Your answer`).
_SECTION = re.compile(r"^=== ([^=\n]+?) ===\s*$", re.MULTILINE)
# A line that shows a tool's result rather than its call ("Tool get_weather returned: {...}").
_RESULT = re.compile(r"\b(returned|returns|result|response)\b", re.IGNORECASE)


def _tool_calls(section: str) -> int:
    """The tool calls a continuation shows: its lines naming one of the demo's tools that are not a result."""
    named = [line for line in section.splitlines() if any(re.search(rf"\b{t}\b", line) for t in TOOLS)]
    return sum(1 for line in named if not _RESULT.search(line))


def _sections(message: str) -> dict[str, str]:
    """The message's sections by name, each the text up to the next section's line."""
    found = list(_SECTION.finditer(message))
    ends = [m.start() for m in found[1:]] + [len(message)] if found else []
    return {m.group(1): message[m.end() : end] for m, end in zip(found, ends, strict=True)}


def judge_script(message: str) -> Step:
    """The demo judge's answer to a judge's message: fewer tool calls for the same questions wins."""
    sections = _sections(message)
    a, b = sections.get("Continuation A"), sections.get("Continuation B")
    if a is None or b is None:
        return Step((), "I was not sent two continuations, A then B, to compare, so I give no verdict.")
    n_a, n_b = _tool_calls(a), _tool_calls(b)
    rule = "(the demo judge's rule: fewer tool calls for the same questions is better)"
    if n_a == n_b:
        winner, reason = "tie", f"Both continuations needed {n_a} tool call(s) for the same questions {rule}."
    else:
        winner = "A" if n_a < n_b else "B"
        few, many = sorted((n_a, n_b))
        loser = "B" if winner == "A" else "A"
        reason = (
            f"{winner} answered the same questions with {few} tool call(s) where {loser} needed {many}: "
            f"{loser}'s extra calls fetched what the questions did not ask for {rule}."
        )
    return Step((), f"{reason}\n\n" + json.dumps({"winner": winner, "reason": reason}, ensure_ascii=False))
