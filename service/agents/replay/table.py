"""An experiment's grid as a Markdown table for people: a column per branch plus the source, a row per turn,
the totals underneath (the price last, with the model priced), then why a branch failed or stopped, what a replay
twin's arm wanted and was not run (its intent), and with repeats the spread per agent."""

from __future__ import annotations

import msgspec

from service.agents.replay.figures import Replayed, TurnFigures
from service.agents.replay.grid import FIGURES, Column, Experiment, Totals
from service.agents.replay.tools import ToolPolicy


def _answered(r: Replayed | None) -> str:
    """A replay twin's tool calls by where their answers came from (docs/replay-twins.md)."""
    return "" if r is None else f"{r.recorded} recorded, {r.live} live, {r.missed} missed, {r.refused} refused"


def _intents(name: str, c: Column) -> list[str]:
    """The calls a twin's endpoint refused, turn by turn: what the arm wanted to do."""
    out = []
    for i, turn in enumerate(c.turns):
        for call in turn.tool_policy.refused_calls if turn.tool_policy else []:
            arguments = msgspec.json.encode(call.arguments).decode().replace("`", "'")
            out.append(f"- {name}, turn {i + 1}: wanted `{call.tool}({arguments[:200]})`, not run (a replay)")
    return out


def _policy_words(p: ToolPolicy | None) -> str:
    """What the arms' tools did, as the page says it (ui/tools.js policyWords)."""
    if p is None:
        return "every tool ran live (started before tool policies)"
    if p.mode == "live":
        return "live, every tool ran for real"
    return f"replay, nothing that acts ran (reads {'live' if p.reads == 'live' else 'from the recording'})"


def _cell(turn: TurnFigures | None) -> str:
    if turn is None:
        return ""
    answer = (turn.answer or "").replace("|", "\\|").replace("\n", " ")
    if len(answer) > 120:
        answer = answer[:119] + "…"
    tools = sum(turn.tool_calls.values())
    rejected = f", {turn.rejected_tool_calls} rejected" if turn.rejected_tool_calls else ""
    figures = (
        f"{tools} tool calls{rejected} · {turn.model_calls} model calls · {turn.total_tokens} tokens"
        f" · {turn.duration_seconds:.1f} s"
    )
    if turn.tool_policy is not None:
        figures += f" · tools: {_answered(turn.tool_policy)}"
    return f"{answer}<br>*{turn.state or '?'}: {figures}*"


def _discarded(c: Column) -> str:
    """What the discard in force did to a branch: its fork hidden, or kept."""
    return ", discarded" if c.discarded else ", kept" if c.kept else ""


def _cost(t: Totals) -> str:
    """A column's price, with the model priced; "unknown" when the model or its price is not known."""
    model = f" ({t.model})" if t.model else ""
    return f"{t.cost_text}{model}"


def markdown(e: Experiment) -> str:
    """The comparison as a table: one column per agent plus the source, one row per turn, then the totals."""
    columns = [("source" + (f" ({e.source.agent_ref})" if e.source.agent_ref else ""), e.source)]
    columns += [
        (f"{c.agent_ref}{f' #{c.repeat}' if e.repeats > 1 else ''} ({c.status}{_discarded(c)})", c) for c in e.branches
    ]
    lines = [
        f"# Experiment {e.id}: {e.status}",
        "",
        f"Source `{e.source_session_id}`{' (purged)' if e.source.purged else ''}"
        f" from turn `{e.rewind_before_invocation_id or e.rewind_before_task_id}`"
        + ("" if e.rewind_before_invocation_id else " (its task)")
        + f", {e.turns_requested} turn(s), "
        f"on approval: {e.on_approval}"
        + (f", first question asked as: {e.message['text']!r}" if e.message else "")
        + ".",
        "",
        f"Tools: {_policy_words(e.tool_policy)}.",
        "",
        "| turn | " + " | ".join(name for name, _ in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    rows = max([len(c.turns) for _, c in columns] or [0])
    for i in range(rows):
        question = next((c.turns[i].question for _, c in columns if i < len(c.turns) and c.turns[i].question), "")
        q = (question or "").replace("|", "\\|").replace("\n", " ")[:80]
        lines.append(
            f"| {i + 1}. {q} | "
            + " | ".join(_cell(c.turns[i] if i < len(c.turns) else None) for _, c in columns)
            + " |"
        )
    for name in FIGURES:
        lines.append(f"| **{name}** | " + " | ".join(str(getattr(c.totals, name)) for _, c in columns) + " |")
    lines.append("| **cost (USD)** | " + " | ".join(_cost(c.totals) for _, c in columns) + " |")
    if any(c.totals.tool_policy is not None for _, c in columns):
        lines.append(
            "| **tool calls answered** | " + " | ".join(_answered(c.totals.tool_policy) for _, c in columns) + " |"
        )
    intents = [line for name, c in columns[1:] for line in _intents(name, c)]
    if intents:
        lines += ["", "What the replay twins' agents wanted to run and did not (their intent):", *intents]
    purged = [f"`{c.session_id}` ({name})" for name, c in columns if c.purged]
    if purged:
        lines += ["", "Purged by kagent's session retention (their rows are gone; the figures are those kept): "
                  + ", ".join(purged) + "."]  # fmt: skip
    failed = [c for c in e.branches if c.error]
    if failed:
        lines += ["", *[f"- {c.agent_ref} #{c.repeat}: {c.error}" for c in failed]]
    stopped = [c for c in e.branches if c.stopped_at]
    if stopped:
        # Why a column ends early although it completed: its agent waits for a person in the fork.
        lines += ["", *[
            f"- {c.agent_ref} #{c.repeat}: stopped at turn {len(c.turns)} ({c.stopped_at}): the agent waits for "
            f"input (a tool approval or a question); answer it in the fork {c.session_id}"
            for c in stopped
        ]]  # fmt: skip
    if e.by_agent:
        names = [*FIGURES, "cost_usd"]
        lines += ["", "| agent | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for a in e.by_agent:
            cells = [f"{a.totals[n].mean:g} ({a.totals[n].min:g}-{a.totals[n].max:g})" for n in FIGURES] + [
                a.cost_text
            ]  # money as every door prints it, never a float's own text (9e-05)
            lines.append(f"| {a.agent_ref} | " + " | ".join(cells) + " |")
    lines += verdict_section(e)
    return "\n".join(lines) + "\n"


def _one_line(text: str | None, limit: int = 200) -> str:
    flat = " ".join((text or "").split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def verdict_section(e: Experiment) -> list[str]:
    """The verdict under the grid: the judge, its lines, each pair's outcome and reasons; people's votes apart."""
    j = e.judgment
    if j is None:
        return _votes(e)
    lines = ["", f"## Verdict ({j.status}): judged blind by {j.judge_agent_ref}, {j.calls_answered} of {j.calls} calls"]
    lines += ["", f"**{j.headline}**", "", f"Judge: {j.judge_agent_ref}, model {j.judge_model or 'unknown'}; "
              f"criteria: the default{f' and: {_one_line(j.criteria)}' if j.criteria else ''}"]  # fmt: skip
    agreed = [p.consistent for p in j.pairs if p.consistent is not None]
    if agreed:
        lines.append(f"The judge's two orders agreed in {agreed.count(True)} of {len(agreed)} pairs asked both ways.")
    if j.error:
        lines.append(f"\nError: {j.error}")
    lines += ["", *[f"- {line}" for line in j.lines]] if j.lines else ["", "- no pair judged yet"]
    if j.pairs:
        lines += [
            "",
            "| pair | verdict | the first shown as A: the judge said | the second shown as A |",
            "|---|---|---|---|",
        ]
        for p in j.pairs:
            said = {s.a_is: s for s in p.said}
            cells = [
                _one_line(f"{s.winner or 'no answer'}: {s.reason or s.error or s.answer or ''}", 160)
                if (s := said.get(k)) else ""
                for k in ("left", "right")
            ]  # fmt: skip
            who = {"left": f"{p.left} better", "right": f"{p.right} better"}.get(p.outcome, p.outcome)
            if p.outcome == "tie" and p.consistent is False:
                who = "tie (the two orders disagreed)"
            lines.append(f"| {p.left} vs {p.right} | {who} | " + " | ".join(cells) + " |")
    if e.earlier_judgments:
        lines += ["", "Earlier judgments: " + ", ".join(
            f"{x.judge_agent_ref} ({x.status}, {x.created_at})" for x in e.earlier_judgments
        )]  # fmt: skip
    return lines + _votes(e)


def _votes(e: Experiment) -> list[str]:
    if e.votes is None:
        return []
    v = e.votes
    agree = f"; they agree with the judge on {v.agreement.agreed} of {v.agreement.compared}" if v.agreement else ""
    return ["", f"People's blind votes ({v.votes}, by {v.voters} voter{'s' if v.voters > 1 else ''}{agree}), apart "
            "from the judge's:", "", *[f"- {line}" for line in v.lines]]  # fmt: skip
