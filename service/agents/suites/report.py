"""A suite run for people: its verdict as Markdown (the CLI prints it, a pipeline keeps it), and its plot (money
per case against the win rate with its interval, one point per agent, the source at 50 %) as SVG.
Pure: the run as runs.read gave it."""

from __future__ import annotations

from html import escape

from service.agents.suites.runs import Run
from service.operations.prices import usd_text


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{round(value * 100)} %"


def markdown(run: Run) -> str:
    v = run.verdict
    p = run.progress
    lines = [
        f"# Suite run {run.id} ({run.status}{f': {run.reason}' if run.reason else ''})",
        "",
        f"{p.judged} of {p.cases} cases judged, {p.branches_done} of {p.branches_total} branches ended; "
        f"spent {run.spent_usd_text} of an estimated {run.estimated_usd_text}"
        + (f" (max {usd_text(run.max_usd)})" if run.max_usd is not None else "")
        + f". Judge: {v.judge.get('agent')}"
        + (f", model {v.judge['model']}" if v.judge.get("model") else "")
        + ".",
        "",
        f"**{v.headline}**",
        "",
        "| agent | conversations (cases) | wins | ties | losses | not judged | win rate | 95 % CI (conversations) "
        "| outcome | median $ / case | median tokens | median tool calls |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in v.by_agent:
        ci = f"{_pct(a.ci95[0])}-{_pct(a.ci95[1])}" if a.ci95 else "-"
        med = a.cost.per_case
        name = f"{a.agent_ref} (control)" if a.control else a.agent_ref
        lines.append(
            f"| {name} | {a.conversations} ({a.cases}) | {a.wins} | {a.ties} | {a.losses} | {a.invalid + a.failed} "
            f"| {_pct(a.win_rate)} "
            f"| {ci} | {a.outcome or '-'} | {usd_text(med.usd)} | {med.total_tokens:.0f} | {med.tool_calls:.3g} |"
        )
    lines += ["", *[f"- {a.summary}" for a in v.by_agent], "", "## Cases", ""]
    for c in run.cases:
        record = ", ".join(f"{r.agent_ref} {r.wins}-{r.ties}-{r.losses}" for r in c.by_agent)
        said = c.error or (f"best: {c.best}" if c.best else "no single best")
        lines.append(f"- {c.case_id} ({c.session_id}): {c.status}; {said}" + (f"; {record}" if record else ""))
    return "\n".join(lines) + "\n"


W, H, PAD = 640, 400, 60


def plot_svg(run: Run) -> str:
    """Money per case (x, the median) against the win rate over the source (y), each agent a point with its 95 %
    interval as a bar; the source is the dashed line at 50 %. Agents whose price is unknown stand at x = 0,
    said so in their label."""
    agents = [a for a in run.verdict.by_agent if a.win_rate is not None and a.ci95 is not None]
    top = max([a.cost.per_case.usd or 0.0 for a in agents] + [1e-9]) * 1.15

    def x(usd: float) -> float:
        return PAD + (W - 2 * PAD) * usd / top

    def y(rate: float) -> float:
        return H - PAD - (H - 2 * PAD) * rate

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'font-family="sans-serif" font-size="12" role="img">',
        f"<title>Suite run {escape(run.id)}: win rate against the source by money per case</title>",
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#444"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#444"/>',
        f'<line x1="{PAD}" y1="{y(0.5):.1f}" x2="{W - PAD}" y2="{y(0.5):.1f}" stroke="#888" stroke-dasharray="6 4"/>',
        f'<text x="{W - PAD}" y="{y(0.5) - 6:.1f}" text-anchor="end" fill="#555">the source (50 %)</text>',
        f'<text x="{W / 2}" y="{H - 18}" text-anchor="middle">money per case (median)</text>',
        f'<text x="18" y="{H / 2}" text-anchor="middle" transform="rotate(-90 18 {H / 2})">'
        "win rate against the source, 95 % CI over conversations</text>",
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<text x="{PAD - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{round(tick * 100)} %</text>')
    out.append(f'<text x="{PAD}" y="{H - PAD + 16}" text-anchor="middle">$0</text>')
    if any(a.cost.per_case.usd is not None for a in agents):  # else the axis has no scale to print (1e-9)
        out.append(f'<text x="{W - PAD}" y="{H - PAD + 16}" text-anchor="middle">{escape(usd_text(top))}</text>')
    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
    for i, a in enumerate(agents):
        assert a.win_rate is not None and a.ci95 is not None
        usd = a.cost.per_case.usd
        cx, colour = x(usd or 0.0), colours[i % len(colours)]
        label = f"{a.agent_ref}{' (control)' if a.control else ''}: {a.outcome}"
        label += "" if usd is not None else " (money unknown)"
        out += [
            f'<g class="agent" data-agent="{escape(a.agent_ref)}">',
            f'<line x1="{cx:.1f}" y1="{y(a.ci95[0]):.1f}" x2="{cx:.1f}" y2="{y(a.ci95[1]):.1f}" '
            f'stroke="{colour}" stroke-width="3"/>',
            f'<circle cx="{cx:.1f}" cy="{y(a.win_rate):.1f}" r="6" fill="{colour}"/>',
            # a white halo: a label at 50 % or 0 % lies on the source's line or the axis, and stays readable
            f'<text x="{cx + 10:.1f}" y="{y(a.win_rate) + 4:.1f}" fill="{colour}" stroke="white" stroke-width="4" '
            f'paint-order="stroke">{escape(label)}</text>',
            "</g>",
        ]
    if not agents:
        out.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">nothing judged yet</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
