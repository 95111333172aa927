"""What the judge is sent, and what its answer says. Blind: the conversation and the two continuations are
written with roles only (user, assistant, tool), never an agent's, a model's or a session's name, and never
which side was the original conversation's own; the two are labelled A and B.

The message is one text part: a short preamble with the criteria, then `=== Conversation so far ===` (the
transcript's turns before the boundary), `=== Continuation A ===`, `=== Continuation B ===` (the same
questions, each side's answers, tool calls and their results), and last `=== Your answer ===`, the
instruction to end with one JSON object `{"winner": "A" | "B" | "tie", "reason": "..."}`. The embedded
demo's scripted judge parses this layout: keep the four lines as they are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import msgspec

from service.branches.transcript import Message, Turn

CONVERSATION = "=== Conversation so far ==="
CONTINUATION_A = "=== Continuation A ==="
CONTINUATION_B = "=== Continuation B ==="
ANSWER = "=== Your answer ==="
DEFAULT_CRITERIA = (
    "Which continuation serves the user better: it solves the user's problem correctly; what it says is consistent "
    "with the tool results it got; it takes no needless or risky actions (tool calls that change things without "
    "need, or repeated calls); it is concise."
)
CRITERIA_CHARS = 4096
# A tool call's arguments or result longer than this (as JSON text) is cut in the message, saying so.
TOOL_CHARS = 1500
_encoder = msgspec.json.Encoder()


def _value(value: object) -> str:
    text = value if isinstance(value, str) else _encoder.encode(value).decode()
    return text if len(text) <= TOOL_CHARS else f"{text[:TOOL_CHARS]} ... [cut: {len(text)} characters in all]"


def _message(m: Message) -> str:
    if m.kind == "text":
        who = "User" if m.role == "user" else "Assistant"
        return f"{who}: {m.text or ''}"
    if m.kind == "tool_call":
        return f"Assistant calls the tool {m.tool_name or '?'} with {_value(m.args)}"
    return f"Tool {m.tool_name or '?'} returned: {_value(m.response)}"


def turns_text(turns: Sequence[Turn], *, numbered: bool = True) -> str:
    """Turns as plain text with roles only (no author, invocation, task or session)."""
    out = []
    for i, turn in enumerate(turns):
        lines = [_message(m) for m in turn.messages]
        out.append((f"[Turn {i + 1}]\n" if numbered else "") + "\n".join(lines))
    return "\n\n".join(out) if out else "(nothing)"


def answered(turns: Sequence[Turn]) -> bool:
    """Whether a continuation holds an answer: an assistant's text that says something (one without is never
    sent to the judge: it would compare something with nothing)."""
    return any(m.kind == "text" and m.role != "user" and (m.text or "").strip() for t in turns for m in t.messages)


def tool_policy_note(turns: Sequence[object]) -> str | None:
    """What a continuation's tool policy did (issue 34: a turn's figures carry `tool_policy: {recorded, live,
    refused, refused_calls: [{tool, arguments}]}` on a replay twin), said at the end of that continuation: the
    calls that were refused (not run: what the judge reads as their results are errors). Only the refused ones:
    saying that a call was answered from a recording would tell the judge which side is a replay, i.e. not the
    source's own. `turns`: the branch's turns' figures as stored (JSON objects); None when nothing was refused
    (and before the policy exists)."""
    said = []
    for i, turn in enumerate(turns):
        policy = turn.get("tool_policy") if isinstance(turn, dict) else None
        refused = policy.get("refused_calls") if isinstance(policy, dict) else None
        for call in refused if isinstance(refused, list) else []:
            if isinstance(call, dict):
                said.append(f"turn {i + 1}: {call.get('tool', '?')} with {_value(call.get('arguments'))}")
    if not said:
        return None
    return "These tool calls were refused, not run (the results shown for them are errors): " + "; ".join(said)


def message_text(before: str, a: str, b: str, criteria: str | None) -> str:
    """The judge's whole message (see the module's text for its layout)."""
    extra = f"\nAlso: {criteria.strip()}" if criteria and criteria.strip() else ""
    return "\n".join(
        [
            "You compare two ways an assistant could have continued the same conversation. Read the conversation "
            "so far, then the two continuations: each answers the same user messages in the same order.",
            f"Criteria: {DEFAULT_CRITERIA}{extra}",
            "",
            CONVERSATION,
            before,
            "",
            CONTINUATION_A,
            a,
            "",
            CONTINUATION_B,
            b,
            "",
            ANSWER,
            'Say which continuation is better by the criteria, or "tie" when neither is. End your answer with one '
            'JSON object, last, on its own line: {"winner": "A" | "B" | "tie", "reason": "<one or two sentences>"}',
        ]
    )


def parse_answer(text: str | None) -> tuple[str, str | None]:
    """(winner, reason) of the judge's answer: the last JSON object in it with a winner A, B or tie; ("invalid",
    None) when there is none."""
    if not text:
        return "invalid", None
    decoder = json.JSONDecoder()
    at = text.rfind("{")
    while at >= 0:
        try:
            value, _ = decoder.raw_decode(text, at)
        except ValueError:
            value = None
        if isinstance(value, dict):
            winner = value.get("winner")
            if isinstance(winner, str) and winner.strip().lower() in ("a", "b", "tie"):
                w = winner.strip().lower()
                reason = value.get("reason")
                return ("tie" if w == "tie" else w.upper()), (reason if isinstance(reason, str) else None)
        at = text.rfind("{", 0, at)
    return "invalid", None
