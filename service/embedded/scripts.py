"""What the demo's scripted agents answer (service/embedded/scripted_agent.py serves them): no model, a script.
The answers read as an agent's, with no mark of the script in them: a replay's branch and the source it
continues must not be told apart by their words (a blind judge compares them; their cards say what they are).

A script plans a turn's tool calls (`Plan.asks`, among the tools the agent's configuration offers), the agent
makes them on its MCP servers, and the answer is written from what the tools answered (`Plan.answer`): so a
branch on a replay twin, answered the source's recorded results, says what the source said, and one whose reads
ran live says today's weather. The demo conversations' own answers are written by the same functions (demo.py).

- `script`, the demo's own agent (`kagent/k8s-agent`, also `kagent/scripted-agent` and the demo's twin): a city's
  weather with one tool call, an alert set for a city when asked (`set_alert`, the tool that acts), a comparison
  of the cities from the weather the conversation already holds (a call for a city it does not).
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Today's world, as the demo's tool server answers it (weather_tools.py): a city's weather, tomorrow's forecast.
WEATHER = {
    "paris": (16.0, "sunny"),
    "berlin": (11.0, "cloudy"),
    "london": (12.0, "drizzling"),
    "tokyo": (21.0, "clear"),
    "madrid": (24.0, "sunny"),
}
FORECAST = {"paris": 15.0, "berlin": 18.0, "london": 13.0, "tokyo": 19.0, "madrid": 25.0}
TOOLS = ("get_weather", "get_forecast", "set_alert")
Result = dict[str, Any]  # a tool's result as kagent's runtime records it (an MCP CallToolResult's JSON, or an error)


@dataclass(frozen=True)
class Ask:
    """A tool call the script wants made."""

    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Call:
    """A tool call made, with its result."""

    tool: str
    args: dict[str, Any]
    result: Result


@dataclass(frozen=True)
class Plan:
    """A turn before its tool calls: the calls, then the answer written from their results (in order); `pause`
    the seconds the agent takes over each tool call (a slower agent)."""

    asks: tuple[Ask, ...] = ()
    answer: Callable[[Sequence[Result]], str] = field(default=lambda _: "")
    pause: float = 0.0


@dataclass(frozen=True)
class Step:
    """One scripted turn as it happened: its tool calls with their results, then the answer."""

    calls: tuple[Call, ...]
    answer: str
    pause: float = 0.0


# A script: the question, the temperatures the conversation holds, the tools the agent's configuration offers.
Script = Callable[[str, Mapping[str, float], Sequence[str]], Plan]


def finish(plan: Plan, results: Sequence[Result]) -> Step:
    """The turn once its calls were answered."""
    calls = tuple(Call(a.tool, a.args, r) for a, r in zip(plan.asks, results, strict=True))
    return Step(calls, plan.answer(results), plan.pause)


def tool_result(value: dict[str, Any]) -> Result:
    """A tool's structured answer as kagent's runtime records an MCP tool's result (its CallToolResult's JSON)."""
    return {"content": [{"type": "text", "text": json.dumps(value, indent=2)}], "structuredContent": value,
            "isError": False}  # fmt: skip


def value_of(result: Result) -> dict[str, Any] | str:
    """What a tool answered: its structured value, or the text of its error."""
    if "error" in result and "content" not in result:  # the runtime's record of a call that raised
        return str(result["error"])
    if "content" not in result and "structuredContent" not in result:  # a plain value (an earlier demo's rows)
        return result
    texts = [str(c.get("text", "")) for c in result.get("content") or [] if isinstance(c, dict)]
    if result.get("isError"):
        return " ".join(texts) or "the tool failed"
    structured = result.get("structuredContent")
    if isinstance(structured, dict):
        inner = structured.get("result")
        return inner if isinstance(inner, dict) and len(structured) == 1 else structured
    try:
        parsed = json.loads(texts[0]) if texts else None
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else " ".join(texts) or "no answer"


def _failed(what: str, city: str, why: str) -> str:
    return f"I could not {what} {city}: {' '.join(why.split())[:200]}"


def _weather_said(city: str, result: Result) -> str:
    got = value_of(result)
    if isinstance(got, str) or "temp_c" not in got:
        return _failed("get the weather in", city, str(got))
    return f"It is {float(got['temp_c']):g}°C and {got.get('sky', 'unknown skies')} in {city}."


def _alert_said(city: str, result: Result) -> str:
    got = value_of(result)
    return f"I set a weather alert for {city}." if isinstance(got, dict) else _failed("set an alert for", city, got)


def temperature(result: Result) -> float | None:
    got = value_of(result)
    return float(got["temp_c"]) if isinstance(got, dict) and "temp_c" in got else None


def _cities(text: str) -> list[str]:
    return [c for c in WEATHER if c in text]


def _comparing(text: str) -> bool:
    return "warm" in text or "cold" in text or "compare" in text


def _unknown(question: str) -> Plan:
    return Plan((), lambda _: f"I have no scripted answer to {question[:80]!r}; a real agent would answer here.")


def _weather(city: str) -> Ask:
    return Ask("get_weather", {"city": city.title()})


def _forecast(city: str) -> Ask:
    return Ask("get_forecast", {"city": city.title(), "day": "tomorrow"})


def _alerts(cities: list[str], tools: frozenset[str]) -> Plan:
    """Each city's weather, then an alert set for it (the tool that acts), if the agent has the tool."""
    alert = "weather alert asked for in chat"
    pairs = [(_weather(c), Ask("set_alert", {"city": c.title(), "message": alert})) for c in cities]
    asks = tuple(a for pair in pairs for a in pair if a.tool in tools)

    def answer(results: Sequence[Result]) -> str:
        said, got = [], dict(zip([(a.tool, a.args["city"]) for a in asks], results, strict=True))
        for city in (c.title() for c in cities):
            if ("get_weather", city) in got:
                said.append(_weather_said(city, got[("get_weather", city)]))
            said.append(
                _alert_said(city, got[("set_alert", city)]) if ("set_alert", city) in got
                else f"I cannot set alerts for {city}: I have no tool for it."
            )  # fmt: skip
        return " ".join(said)

    return Plan(asks, answer)


def script(question: str, known: Mapping[str, float] | None = None, tools: Sequence[str] = TOOLS) -> Plan:
    """The demo agent's turn: `known`, the temperatures the conversation already holds (city in lower case);
    `tools`, those its configuration offers."""
    text, offered, known = question.lower(), frozenset(tools), dict(known or {})
    cities = _cities(text)
    if "alert" in text and cities:
        return _alerts(cities, offered)
    if _comparing(text):
        wanted = cities or list(known) or ["paris", "berlin"]
        asks = tuple(_weather(c) for c in wanted if c not in known and "get_weather" in offered)

        def compare(results: Sequence[Result]) -> str:
            temps = dict(known)
            for ask, result in zip(asks, results, strict=True):
                if (t := temperature(result)) is not None:
                    temps[ask.args["city"].lower()] = t
            seen = [c for c in wanted if c in temps]
            if not seen:
                return "I do not know the weather in those cities yet."
            best = max(seen, key=lambda c: temps[c])
            listed = ", ".join(f"{c.title()} {temps[c]:g}°C" for c in seen)
            return f"{best.title()} is the warmest: {listed}."

        return Plan(asks, compare)
    if cities and "get_weather" in offered:
        city = cities[0].title()
        return Plan((_weather(city),), lambda results: _weather_said(city, results[0]))
    return _unknown(question)


def thorough_script(question: str, known: Mapping[str, float] | None = None, tools: Sequence[str] = TOOLS) -> Plan:
    """The second demo agent's turn: slower, more tool calls, and a different answer to a comparison."""
    text, offered = question.lower(), frozenset(tools)
    cities = _cities(text)
    if _comparing(text) and {"get_weather", "get_forecast"} <= offered:
        wanted = cities or list(known or {}) or ["paris", "berlin"]
        asks = tuple(a for c in wanted for a in (_weather(c), _forecast(c)))

        def compare(results: Sequence[Result]) -> str:
            today = {c: temperature(r) for c, r in zip(wanted, results[0::2], strict=True)}
            later = {c: temperature(r) for c, r in zip(wanted, results[1::2], strict=True)}
            seen = [c for c in wanted if today[c] is not None and later[c] is not None]
            if not seen:
                return "I could not look the cities up again, so I cannot compare them."
            best = max(seen, key=lambda c: today[c] or 0.0)
            next_day = max(seen, key=lambda c: later[c] or 0.0)
            listed = ", ".join(f"{c.title()} {today[c]:g}°C today and {later[c]:g}°C tomorrow" for c in seen)
            return f"I looked again: {best.title()} is the warmest today, {next_day.title()} tomorrow ({listed})."

        return Plan(asks, compare, pause=0.4)
    plain = script(question, known, tools)
    if cities and plain.asks and plain.asks[0].tool == "get_weather" and "get_forecast" in offered:
        return Plan((*plain.asks, _forecast(cities[0])), lambda rs: plain.answer(rs[:1]), pause=0.4)
    return plain


def known_weather(events: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The temperatures a conversation's ADK events hold: each get_weather call's city and its result's
    temperature, the latest winning (what the agent has already seen)."""
    asked: dict[str, str] = {}
    known: dict[str, float] = {}
    for event in events:
        for part in (event.get("content") or {}).get("parts") or []:
            call, response = part.get("function_call"), part.get("function_response")
            if call and call.get("name") == "get_weather" and isinstance(call.get("args"), dict):
                asked[str(call.get("id"))] = str(call["args"].get("city", "")).lower()
            if response and response.get("name") == "get_weather" and str(response.get("id")) in asked:
                temp = temperature(response.get("response") or {})
                if temp is not None:
                    known[asked[str(response.get("id"))]] = temp
    return known


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


def judge_script(message: str, known: Mapping[str, float] | None = None, tools: Sequence[str] = ()) -> Plan:
    """The demo judge's turn (no tool calls): fewer tool calls for the same questions wins."""
    verdict = _verdict(message)
    return Plan((), lambda _: verdict)


def _verdict(message: str) -> str:
    sections = _sections(message)
    a, b = sections.get("Continuation A"), sections.get("Continuation B")
    if a is None or b is None:
        return "I was not sent two continuations, A then B, to compare, so I give no verdict."
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
    return f"{reason}\n\n" + json.dumps({"winner": winner, "reason": reason}, ensure_ascii=False)
