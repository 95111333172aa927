// kagent-fork explorer, experiments: start one from a turn, its grid (a column per branch beside the
// source's own turns) followed while it runs, its branches discarded (or one kept) and back, and a session's list. A classic script loaded after app.js:
// it uses app.js's helpers (el, api, act, say, state, ...), which all scripts of the page share.
"use strict";

// The grid being followed: showing one (again, or another one, or another session) stops the follower
// of the one before, so one grid is polled at a time.
const shownExperiment = { follower: null };

function forgetExperiment() {
  shownExperiment.follower = null;
  $("experiment").replaceChildren();
}

function firstQuestion(turn) {
  const question = turn.messages.find((m) => m.role === "user" && m.kind === "text");
  return question ? question.text : "";
}

function choice(value, text, selected = false) {
  const option = el("option", { value, text });
  if (selected) option.selected = true;
  return option;
}

// The form to start an experiment from turn `number`, shown beside that turn. The agents are chosen as
// for a what-if (namespace/name), several at once.
function experimentAt(turn, number) {
  notice(null);
  const t = state.session;
  const left = t.turns.length - (number - 1);
  const listed = state.sessions.find((s) => s.id === t.session_id);
  const agents = el("input", { class: "exp-agents", autocomplete: "off", placeholder: "namespace/name, namespace/name",
    value: $("whatif-agent").value.trim() || (listed && listed.agent_id ? agentName(listed.agent_id) : "") });
  // One default on every door: this turn only (turns: 1, as the API, the CLI and MCP take it).
  const turns = el("select", { class: "exp-turns" },
    ...Array.from({ length: left - 1 }, (_, i) => choice(String(i + 1), i === 0 ? "this turn only" : `${i + 1} turns`, i === 0)),
    choice("all", `all ${plural(left, "turn")} from here`, left === 1));
  const message = el("textarea", { class: "exp-message", rows: "2", placeholder: firstQuestion(t.turns[number - 1]) });
  const repeats = el("input", { class: "exp-repeats", type: "number", min: "1", max: "5", value: "1" });
  const onApproval = el("select", { class: "exp-approval" },
    choice("stop", "stop the branch there (answer it in the fork)", true),
    choice("reject", "reject it as kagent's Reject button does, and go on"));
  const tools = policyChoices("exp-tools");
  const found = el("div", { class: "muted exp-arms" });
  const judge = el("input", { class: "exp-judge", autocomplete: "off", list: "known-agents", placeholder: "namespace/name (optional)" });
  // The control: this chat's own agent run again beside the others, its verdict against the source the noise floor
  // (what running the same agent twice scores), so that a difference can be told from chance.
  const control = el("input", { class: "exp-control", type: "checkbox" });
  const refusal = el("div", { class: "error exp-refusal" });
  const form = el("form", { class: "experiment-form" },
    el("b", { text: `Experiment from turn ${number}: the same questions, re-asked turn by turn, on each agent` }),
    el("label", {}, "Agents", agents),
    knownAgents.length ? el("div", { class: "muted exp-known", text: `kagent's agents: ${knownAgents.join(", ")}` }) : null,
    el("label", {}, "Turns", turns),
    el("label", {}, `Ask turn ${number} differently (empty: the source's own question)`, message),
    el("label", {}, "Repeats of each agent", repeats),
    el("label", {}, "When an agent asks to approve a tool", onApproval),
    el("label", {}, "What the agents' tools do", tools),
    found,
    el("label", {}, "A judge: one of your agents compares each branch with this session's own turns, blind", judge),
    el("label", { class: "inline" }, control,
      " Also run this chat's own agent again as a control: its verdict is the noise floor the others are read against"),
    refusal,
    el("span", { class: "actions" },
      el("button", { type: "submit", class: "primary", text: "Start the experiment" }),
      el("button", { type: "button", onclick: () => { box.hidden = true; }, text: "Close" })));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const body = { ...boundaryOf(turn), turns: turns.value === "all" ? "all" : Number(turns.value),
      repeats: Number(repeats.value), on_approval: onApproval.value, tools: TOOL_POLICIES[tools.value].tools };
    const names = agents.value.split(/[\s,]+/).filter(Boolean);
    if (names.length) body.agents = names;
    if (message.value.trim()) body.message = { text: message.value };
    if (judge.value.trim()) body.judge = { agent: judge.value.trim() };
    if (control.checked) body.control = true;
    startExperiment(body, number, refusal, found);
  });
  const box = besideTurn(turn, form);
}

function experimentWarning(body, number, plan) {
  const who = body.agents ? body.agents.join(", ") : "this session's own agent";
  return `Experiment: ${who} will answer turn ${number}${body.turns === 1 ? "" : " and the turns after it"} again, `
    + `each in a new fork of this session${body.repeats > 1 ? `, ${body.repeats} times each` : ""}.\n\n`
    + `${toolsWarning(body.tools, plan, "The agents")}\n\nStart the experiment?`;
}

// The dry run's estimate of the whole start, the judge's calls included; money as the service prints it.
function estimateWords(plan) {
  const judge = plan.estimated_judge_tokens ? ` (the judge's ${plural(plan.estimated_judge_tokens, "token")} included)` : "";
  const money = plan.estimated_usd === null ? `price unknown (${plan.unpriced.join(", ")})` : `${plan.estimated_usd_text} at least`;
  return `Estimate: about ${plural(plan.estimated_context_tokens, "context token")}${judge}, ${money}.`;
}

async function startExperiment(body, number, refusal, found) {
  refusal.textContent = "";
  found.replaceChildren();
  // The dry run first: each agent's tools by class, shown in the form, and the refusal it would get.
  let failure = "";
  const dry = await act("Checking the agents' tools", () => api("POST", `/api/sessions/${enc(current())}/experiments`,
    { ...body, dry_run: true }).catch((error) => { failure = error.message; throw error; }));
  if (!dry) {
    refusal.textContent = `Not started: ${failure}`;
    return;
  }
  const plan = dry.data;
  found.replaceChildren(el("div", { text: "What each agent can do (asks: needs an approval; reads: read-only; acts: changes something):" }),
    ...plan.arms.map((a) => el("div", { class: "arm-tools", text: armWords(a) })),
    el("div", { class: "estimate", text: estimateWords(plan) }));
  if (plan.refused) {
    refusal.textContent = `Not started: ${plan.refused}`;
    say(`Starting the experiment failed: ${plan.refused}`, true);
    return;
  }
  if (!window.confirm(experimentWarning(body, number, plan))) {
    say("Experiment not started");
    return;
  }
  const answer = await act("Starting the experiment", () => api("POST", `/api/sessions/${enc(current())}/experiments`, body)
    .catch((error) => { failure = error.message; throw error; }));
  if (!answer) {
    refusal.textContent = `Not started: ${failure}`;
    return;
  }
  await loadSessions();
  showTab("experiments");
  await showExperiments();
  await followExperiment(answer.data.experiment.id);
}

// --- a session's experiments ---------------------------------------------------------------------------

async function showExperiments() {
  const answer = await act("Listing experiments", () => api("GET", `/api/sessions/${enc(current())}/experiments`));
  if (!answer) return;
  const items = answer.data.map((x) => el("li", { class: "turn", "data-id": x.id, "data-status": x.status },
    el("b", { text: `Experiment ${x.status}: from ${turnLabel(x.rewind_before_invocation_id ?? x.rewind_before_task_id)}, ${plural(x.turns, "turn")}` }),
    el("div", { class: "muted", text: `${x.repeats > 1 ? `${x.repeats} repeats of each agent · ` : ""}on approval: ${x.on_approval} · started ${when(x.created_at)}${x.finished_at ? `, ended ${when(x.finished_at)}` : ""}` }),
    el("div", { class: "listed-agents", text: `Agents: ${x.agents.join(", ")}${x.judge ? ` · judged by ${x.judge}` : " · not judged"}` }),
    x.outcome ? el("div", { class: "listed-outcome", text: x.outcome }) : null,
    el("button", { type: "button", onclick: () => followExperiment(x.id), text: "Show the grid" })));
  $("experiments").replaceChildren(...items);
  if (!items.length) $("experiments").replaceChildren(el("li", { class: "muted", text: "No experiments from this session." }));
  say(plural(answer.data.length, "experiment"));
}

// Show an experiment's grid, read again every 700 ms while it runs.
async function followExperiment(id) {
  const follower = {};
  shownExperiment.follower = follower;
  const epoch = state.epoch;
  const started = Date.now();
  const mine = () => epoch === state.epoch && shownExperiment.follower === follower;
  for (let i = 0; i < 3600 && mine(); i++) {
    let x;
    try {
      x = (await api("GET", `/api/experiments/${enc(id)}`)).data;
    } catch (error) {
      if (mine()) say(`Reading the experiment failed: ${error.message}`, true);
      return;
    }
    if (!mine()) return;
    if (shownExperiment.voting !== x.id) $("experiment").replaceChildren(...experimentGrid(x));
    if (x.status !== "running" && x.status !== "judging") {
      await showExperiments();  // the list says how it ended too
      if (mine()) say(`Experiment ${x.status}`, x.status === "failed");
      return;
    }
    const ended = x.branches.filter((b) => b.status !== "running").length;
    const seconds = Math.round((Date.now() - started) / 1000);
    if (x.status === "judging") say(`Judging: ${x.judgment.calls_answered} of ${plural(x.judgment.calls, "question")} to the judge answered (${seconds} s)...`);
    else say(`Experiment running: ${ended} of ${plural(x.branches.length, "branch", "branches")} ended (${seconds} s)...`);
    await new Promise((resolve) => setTimeout(resolve, 700));
  }
}

// Clear an ended experiment's branches out of the chat list (all of them, or all but `keep`, a branch's fork), or
// bring them back: hidden as kagent hides a deleted session, so the session list is read again after either.
async function discardBranches(id, keep) {
  const label = keep ? "Keeping the branch, discarding the others" : "Discarding the branches";
  const answer = await act(label, () => api("POST", `/api/experiments/${enc(id)}/discard`, keep ? { keep } : {}));
  if (!answer) return;
  $("experiment").replaceChildren(...experimentGrid(answer.data));
  await loadSessions();
  const hidden = answer.data.discard.discarded_session_ids.length;
  say(`${plural(hidden, "branch", "branches")} discarded: hidden from the chat list (Undo the discard brings ${hidden === 1 ? "it" : "them"} back)`);
}

async function undoDiscard(id) {
  const answer = await act("Undoing the discard", () => api("POST", `/api/experiments/${enc(id)}/discard/undo`, {}));
  if (!answer) return;
  $("experiment").replaceChildren(...experimentGrid(answer.data));
  await loadSessions();
  say(`Discard undone: ${plural((answer.data.discard.restored_session_ids || []).length, "branch", "branches")} back in the chat list`);
}

async function cancelExperiment(id) {
  const answer = await act("Cancelling the experiment", () => api("POST", `/api/experiments/${enc(id)}/cancel`, {}));
  if (!answer) return;
  $("experiment").replaceChildren(...experimentGrid(answer.data));
  say("Experiment cancelled");
}

// --- the grid --------------------------------------------------------------------------------------------

function figures(f) {
  const parts = [toolList(f.tool_calls)];
  if (f.rejected_tool_calls) parts.push(`${plural(f.rejected_tool_calls, "tool call")} rejected`);
  parts.push(plural(f.model_calls, "model call"), plural(f.total_tokens, "token"), `${f.duration_seconds.toFixed(1)} s`);
  return parts;
}

// A replay twin's tool calls by where the replay endpoint answered them from (docs/replay-twins.md), and the calls
// it refused: what the arm wanted to run (its intent).
function answered(r) {
  return `tools: ${r.recorded} recorded, ${r.live} live, ${r.missed} missed, ${r.refused} refused`;
}

function intents(r) {
  return r.refused_calls.map((c) =>
    el("div", { class: "warning intent", text: `wanted ${c.tool}(${JSON.stringify(c.arguments)}): not run (a replay)` }));
}

function gridCell(turn, col, fated = "") {
  if (!turn) return el("td", { "data-col": col, "data-fate": fated, class: "muted", text: "(not played)" });
  return el("td", { "data-col": col, "data-fate": fated, "data-state": turn.state || "" },
    el("div", { class: "msg user", text: turn.question || "(no question)" }),
    el("div", { class: "msg agent", text: turn.answer || (turn.state === "pending" || turn.state === "working" ? "…" : "(no answer)") }),
    el("div", { class: "muted", text: [...figures(turn), stateName(turn.state)].join(" · ") }),
    turn.tool_policy ? el("div", { class: "muted replayed", text: answered(turn.tool_policy) }) : null,
    ...(turn.tool_policy ? intents(turn.tool_policy) : []));
}

// What a column's fork is now: discarded (hidden from the chat list), kept, or neither.
function fate(c) {
  return c.discarded ? "discarded" : c.kept ? "kept" : "";
}

// What the judge said of a branch against the source, heading its column; the reasons a click away.
const VERDICT_WORDS = { right: "better than the source", left: "worse than the source", tie: "as good as the source",
  invalid: "the judge's answers were not usable", failed: "not judged", pending: "being judged…" };

function columnVerdict(c, x) {
  const pair = x.judgment && x.judgment.pairs.find((p) => p.left_job_id === null && p.right_job_id === c.job_id);
  if (!pair) return null;
  const disagreed = pair.outcome === "tie" && pair.consistent === false ? " (the two orders disagreed)" : "";
  return el("div", { class: `verdict verdict-${pair.outcome}`, "data-verdict": pair.outcome },
    // One pair says nothing settled: the verdict's lines and headline say how sure the judge is overall.
    el("b", { text: `Judge: ${VERDICT_WORDS[pair.outcome]}${["left", "right", "tie"].includes(pair.outcome) ? " in this pair" : ""}${disagreed}` }),
    el("details", {}, el("summary", { text: "Why" }), ...pair.said.map((s) => el("div", { class: "muted",
      text: `Asked with this branch as ${s.a_is === "right" ? "A" : "B"}: ${s.winner || "no answer"}. ${s.reason || s.error || s.answer || ""}` }))));
}

function columnHead(c, col, x) {
  const title = col === "source" ? "Source: this session's own turns" : `${c.agent_ref}${x.repeats > 1 ? ` #${c.repeat}` : ""}`;
  const branch = col !== "source";
  // A branch is kept (the others discarded) once the experiment ended and no discard is in force.
  const choosing = branch && x.status !== "running" && !(x.discard && !x.discard.undone_at);
  return el("th", { "data-col": col, "data-fate": fate(c) },
    el("div", { text: title }),
    branch ? columnVerdict(c, x) : null,
    branch ? el("div", { class: `muted status-${c.status}`, text: c.status }) : null,
    c.discarded ? el("div", { class: "warning", text: "discarded: hidden from the chat list" }) : null,
    c.kept ? el("div", { class: "kept", text: "kept (the others discarded)" }) : null,
    c.agent_card ? el("div", { class: "muted", text: `card: ${c.agent_card.name} ${c.agent_card.version}` }) : null,
    c.error ? el("div", { class: "error", text: c.error }) : null,
    c.stopped_at ? el("div", { class: "warning", text: `stopped at ${turnLabel(c.stopped_at)}: it waits for an answer in the fork` }) : null,
    branch && !c.discarded ? el("button", { type: "button", onclick: () => go(c.session_id), text: "Open the fork" }) : null,
    choosing ? el("button", { type: "button", class: "keep", onclick: () => discardBranches(x.id, c.session_id), text: "Keep this branch" }) : null);
}

// The discard's pair of buttons under the experiment's line: discard every branch (or keep one, in its column),
// and, while a discard is in force, what it hid and its undo.
function discardBar(x) {
  const d = x.discard && !x.discard.undone_at ? x.discard : null;
  if (d) {
    const kept = x.branches.find((b) => b.kept);
    const keptName = kept ? ` · kept: ${kept.agent_ref}${x.repeats > 1 ? ` #${kept.repeat}` : ""}` : "";
    return el("p", { class: "discard", "data-discard": d.id },
      el("span", { text: `${plural(d.discarded_session_ids.length, "branch", "branches")} discarded: hidden from the chat list${keptName} ` }),
      el("button", { type: "button", onclick: () => undoDiscard(x.id), text: "Undo the discard" }));
  }
  if (x.status === "running" || !x.branches.length) return null;
  return el("p", { class: "discard" },
    el("button", { type: "button", class: "danger", onclick: () => discardBranches(x.id, null), text: "Discard the branches" }),
    el("span", { class: "muted", text: " hides every branch's fork from the chat list (undoable); Keep this branch, in a column, keeps that one" }));
}

function totalCell(c, col) {
  const t = c.totals;
  return el("td", { "data-col": col, "data-fate": fate(c) },
    el("b", { text: plural(t.turns, "turn") }),
    el("div", { class: "muted", text: `${plural(t.tool_calls, "tool call")}${t.rejected_tool_calls ? ` (${t.rejected_tool_calls} rejected)` : ""}, ${plural(t.model_calls, "model call")}, ${plural(t.total_tokens, "token")}, ${t.duration_seconds.toFixed(1)} s` }),
    el("div", { class: "muted cost", title: costNote(t), text: costText(t) }),
    t.tool_policy ? el("div", { class: "muted replayed", text: answered(t.tool_policy) }) : null);
}

// A column's price: in US dollars, or "unknown" (no model, or a model or price the table does not know).
function costText(t) {
  return t.cost_usd === null ? "cost unknown" : t.cost_text;  // rounded by the service, as on every door
}

function costNote(t) {
  const tokens = t.input_tokens === null ? "" : ` (${t.input_tokens} input, ${t.output_tokens} output tokens)`;
  if (t.cost_usd !== null) return `${t.model}${tokens}, at genai-prices' price`;
  return t.model ? `${t.model}: no known price${tokens}` : "the agent's model is not known (no configuration in kagent's agent table)";
}

// A figure over an agent's repeats: its mean, and its range when the repeats differ; `word` in the singular only
// when every repeat had exactly one ("1 tool call", "1.5 tool calls (1 to 2)").
function spread(s, word, digits = 0, many = `${word}s`) {
  const [mean, min, max] = [s.mean, s.min, s.max].map((n) => n.toFixed(digits));
  const figure = min === max ? mean : `${mean} (${min} to ${max})`;
  return `${figure} ${s.min === 1 && s.max === 1 ? word : many}`;
}

function experimentGrid(x) {
  const columns = [["source", x.source], ...x.branches.map((b, i) => [`b${i}`, b])];
  const rows = Math.max(...columns.map(([, c]) => c.turns.length));
  const from = x.rewind_before_invocation_id ?? x.rewind_before_task_id;
  const first = turnNumber(from);
  const body = Array.from({ length: rows }, (_, i) => el("tr", {},
    el("th", { class: "turn-no", text: first ? `Turn ${first + i}` : `Turn +${i}` }),
    ...columns.map(([col, c]) => gridCell(c.turns[i], col, fate(c)))));
  const span = x.turns_requested === "all" ? "every later turn" : plural(x.turns_requested, "turn");
  const parts = [
    el("p", { "data-status": x.status },
      el("b", { text: `Experiment ${x.status}: ` }),
      `from ${turnLabel(from)}, ${span}, ${plural(x.branches.length, "branch", "branches")}, on approval: ${x.on_approval}, started ${when(x.created_at)}`),
    x.message ? el("p", { class: "muted", text: `The first question asked differently: ${quoted(x.message.text, 200)}` }) : null,
    el("p", { class: "muted exp-policy", text: `Tools: ${policyWords(x.tool_policy)}` },
      ...(x.arms || []).map((a) => el("div", { class: "arm-tools", text: armWords(a) }))),
    x.status === "running" || x.status === "judging" ? el("button", { type: "button", class: "danger", onclick: () => cancelExperiment(x.id), text: x.status === "judging" ? "Cancel the judging" : "Cancel the experiment" }) : null,
    discardBar(x),
    el("div", { class: "grid-scroll" }, el("table", { class: "compare experiment" },
      el("thead", {}, el("tr", {}, el("th", {}), ...columns.map(([col, c]) => columnHead(c, col, x)))),
      el("tbody", {}, ...body),
      el("tfoot", {}, el("tr", {}, el("th", { text: "Total" }), ...columns.map(([col, c]) => totalCell(c, col)))))),
  ];
  if (x.by_agent) {
    parts.push(el("ul", { class: "by-agent" }, ...x.by_agent.map((a) => el("li", {},
      el("b", { text: `${a.agent_ref} over ${x.repeats} repeats: ` }),
      `${spread(a.totals.turns, "turn")}, ${spread(a.totals.tool_calls, "tool call")}, ${spread(a.totals.model_calls, "model call")}, ${spread(a.totals.total_tokens, "token")}, ${spread(a.totals.duration_seconds, "s", 1, "s")}${a.totals.cost_usd ? `, ${a.cost_text}` : ", cost unknown"}`))));
  }
  parts.push(...verdictSection(x));
  return parts.filter((p) => p != null);
}

// --- the verdict, judging again, and a person's blind votes ------------------------------------------------

// Who judged, on which model and by what, and how often its two orders agreed (a judge that flips with the order
// is judging the position, not the answers).
function judgeWords(j) {
  const said = j.pairs.filter((p) => p.consistent !== null);
  const agreed = said.length ? ` Its two orders agreed in ${said.filter((p) => p.consistent).length} of ${plural(said.length, "pair")}.` : "";
  return `Judge: ${j.judge_agent_ref}, model ${j.judge_model || "unknown"}; criteria: the default${j.criteria ? ` and: ${j.criteria}` : ""}.${agreed}`;
}

function verdictSection(x) {
  const j = x.judgment;
  const out = [];
  if (j) {
    out.push(el("h3", { text: `Verdict (${j.status}): judged blind by ${j.judge_agent_ref}, ${j.calls_answered} of ${plural(j.calls, "question")} answered` }),
      el("p", { class: "verdict-headline" }, el("b", { text: j.headline })),
      el("p", { class: "muted judge-info", text: judgeWords(j) }),
      j.error ? el("p", { class: "error", text: j.error }) : null,
      el("ul", { class: "verdict-lines" }, ...(j.lines.length ? j.lines : ["No pair judged yet."]).map((line) => el("li", { text: line }))));
  }
  if (x.earlier_judgments.length) {
    out.push(el("p", { class: "muted", text: `Earlier judgments: ${x.earlier_judgments.map((e) => `${e.judge_agent_ref} (${e.status}, ${when(e.created_at)})`).join("; ")}` }));
  }
  if (x.votes) {
    const agree = x.votes.agreement ? `; they agree with the judge on ${x.votes.agreement.agreed} of ${x.votes.agreement.compared}` : "";
    out.push(el("p", {}, el("b", { class: "votes-head", text: `People's blind votes (${x.votes.votes}, by ${plural(x.votes.voters, "voter")}${agree}), apart from the judge's:` })),
      el("ul", { class: "vote-lines" }, ...x.votes.lines.map((line) => el("li", { text: line }))));
  }
  if (x.status !== "running" && x.status !== "judging") {
    const agent = el("input", { class: "judge-agent", autocomplete: "off", list: "known-agents", placeholder: "namespace/name", value: j ? j.judge_agent_ref : "" });
    const criteria = el("input", { class: "judge-criteria", autocomplete: "off", placeholder: "what else to weigh (optional)" });
    const refusal = el("div", { class: "error judge-refusal" });
    const form = el("form", { class: "judge-form" },
      el("label", { class: "inline" }, j ? "Judge again with" : "Judge it with", agent), el("label", { class: "inline" }, "Criteria", criteria),
      el("button", { type: "submit", text: j ? "Judge again" : "Judge" }),
      el("button", { type: "button", onclick: () => voteBlind(x), text: "Vote blind yourself" }), refusal);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      judgeExperiment(x.id, { agent: agent.value.trim(), ...(criteria.value.trim() ? { criteria: criteria.value.trim() } : {}) }, refusal);
    });
    out.push(form);
  }
  return out;
}

async function judgeExperiment(id, body, refusal) {
  refusal.textContent = "";
  let failure = "";
  const answer = await act("Asking the judge", () => api("POST", `/api/experiments/${enc(id)}/judge`, body)
    .catch((error) => { failure = error.message; throw error; }));
  if (!answer) {
    refusal.textContent = `Not judged: ${failure}`;
    return;
  }
  await followExperiment(id);
}

// The pairs the judge compares (the source against each completed branch, each two agents' branches of a
// repeat), as the page can rebuild them when the experiment was never judged.
function pairsOf(x) {
  if (x.judgment) return x.judgment.pairs.map((p) => [p.left_job_id, p.right_job_id]);
  const done = x.branches.filter((b) => b.status === "completed");
  const out = done.map((b) => [null, b.job_id]);
  const refs = [...new Set(x.branches.map((b) => b.agent_ref))];
  refs.forEach((left, i) => refs.slice(i + 1).forEach((right) => done.filter((b) => b.agent_ref === left)
    .forEach((l) => done.filter((b) => b.agent_ref === right && b.repeat === l.repeat).forEach((r) => out.push([l.job_id, r.job_id])))));
  return out;
}

// A continuation without any name: the questions, the answers and the tools called.
function blindText(column) {
  return column.turns.map((t, i) => `Turn ${i + 1}\nUser: ${t.question || ""}\nAssistant: ${t.answer || "(no answer)"}${
    Object.keys(t.tool_calls).length ? `\nTools called: ${toolList(t.tool_calls)}` : ""}`).join("\n\n");
}

// One pair after another, as A and B in an order fixed per pair, no names until the vote.
function voteBlind(x, index = 0) {
  const pairs = pairsOf(x);
  shownExperiment.voting = x.id;
  if (index >= pairs.length) {
    shownExperiment.voting = null;
    followExperiment(x.id);
    return;
  }
  const [left, right] = pairs[index];
  const column = (id) => (id === null ? x.source : x.branches.find((b) => b.job_id === id));
  const name = (id) => (id === null ? "this session's own turns" : `${column(id).agent_ref}${x.repeats > 1 ? ` #${column(id).repeat}` : ""}`);
  const swapped = [...`${left}${right}`].reduce((n, ch) => n + ch.charCodeAt(0), 0) % 2 === 1;
  const [a, b] = swapped ? [right, left] : [left, right];
  const reveal = el("p", { class: "vote-reveal" });
  const vote = async (side) => {
    const winner = side === "tie" ? "tie" : (side === "A") === !swapped ? "a" : "b";
    const answer = await act("Keeping your vote", () => api("POST", `/api/experiments/${enc(x.id)}/votes`, { pair: { a: left, b: right }, winner }));
    if (!answer) return;
    reveal.replaceChildren(`A was ${name(a)}; B was ${name(b)}. `,
      el("button", { type: "button", onclick: () => voteBlind(answer.data, index + 1), text: index + 1 < pairs.length ? "Next pair" : "Done" }));
  };
  $("experiment").replaceChildren(
    el("h3", { text: `Blind vote: pair ${index + 1} of ${pairs.length}. Which continuation is better?` }),
    el("div", { class: "grid-scroll" }, el("table", { class: "compare blind" },
      el("thead", {}, el("tr", {}, el("th", { text: "A" }), el("th", { text: "B" }))),
      el("tbody", {}, el("tr", {}, el("td", { class: "msg agent blind-a", "data-side": "A", text: blindText(column(a)) }), el("td", { class: "msg agent blind-b", "data-side": "B", text: blindText(column(b)) }))))),
    el("span", { class: "actions" }, ...["A", "B", "tie"].map((side) => el("button", { type: "button", class: `vote-${side}`, onclick: () => vote(side), text: side === "tie" ? "Tie" : `${side} is better` })),
      el("button", { type: "button", onclick: () => { shownExperiment.voting = null; followExperiment(x.id); }, text: "Stop voting" })),
    reveal);
}
