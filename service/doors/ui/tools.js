// kagent-fork explorer, the agents' tools: the policy a what-if or an experiment is started with, and each
// agent's tools by class (asks, reads, acts) in words, as a dry run, a job and an experiment answer them
// (docs/whatif.md, "What an arm's tools do"). A classic script loaded after app.js, sharing its helpers.
"use strict";

// What the agents' tools do (docs/whatif.md, "What an arm's tools do"): the page's choice as the body's `tools`.
const TOOL_POLICIES = {
  replay: { tools: "replay", text: "replay: the source's recorded results only (replay twins); nothing runs" },
  reads_live: { tools: { mode: "replay", reads: "live" }, text: "replay, reads live: an unrecorded read runs on today's servers" },
  live: { tools: "live", text: "live: every tool runs for real" },
};

function policyChoices(cls) {
  return el("select", { class: cls }, ...Object.entries(TOOL_POLICIES).map(([value, p]) => {
    const option = el("option", { value, text: p.text });
    if (value === "replay") option.selected = true;
    return option;
  }));
}

function policyWords(p) {
  if (!p) return "every tool ran live (started before tool policies)";
  return p.mode === "live" ? "live, every tool ran for real" : `replay, nothing that acts ran (reads ${p.reads === "live" ? "live" : "from the recording"})`;
}

// An arm's tools by class, in words (a dry run's `arms`, a job's `tools`).
function armWords(arm) {
  if (!arm.known && !arm.acts.length) return `${arm.agent_ref}: its tools are not known (${arm.note})`;
  const parts = ["asks", "reads", "acts"].filter((c) => arm[c].length)
    .map((c) => `${c} ${arm[c].map((t) => t.name).join(", ")}`);
  return `${arm.agent_ref}${arm.twin ? " (replay twin)" : ""}: ${parts.join("; ") || "no tools"}`;
}

function toolsWarning(tools, plan, who) {
  const classes = plan.arms.map((a) => `  ${armWords(a)}`).join("\n");
  const what = tools === "live"
    ? `${who} run their tools for real: against the real cluster, with their real credentials. A tool that changes something changes it.`
    : tools.reads === "live"
      ? "Tools: replay, reads live. Nothing that acts runs; a read the source did not make runs live, as you, against today's world; a tool that asks for an approval waits (kagent-fork never approves)."
      : "Tools: replay. Each tool call the source made answers its recorded result; one it never made answers that it is not in the recording (missed); nothing runs.";
  return `${what}\n\nWhat each can do (asks: needs an approval; reads: read-only; acts: changes something):\n${classes}`;
}

// kagent's agents (GET /api/fork-explorer/agents), offered in the forms: the what-if's agent and a judge pick from
// the datalist, the experiment's form names them. Read once; a page that cannot read them still works by typing.
const knownAgents = [];

async function loadKnownAgents() {
  const answer = await api("GET", "/api/fork-explorer/agents").catch(() => null);
  if (!answer || answer.error) return;
  knownAgents.splice(0, knownAgents.length, ...answer.data.map((a) => a.agent_ref));
  $("known-agents").replaceChildren(...answer.data.map((a) => el("option", { value: a.agent_ref, label: a.model ? `${a.agent_ref} (${a.model})` : a.agent_ref })));
}
