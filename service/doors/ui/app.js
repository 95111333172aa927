// kagent-fork explorer: every action is one call of the service's HTTP API, as the chosen user.
// Everything shown is set with textContent: names and messages are data, never markup.
"use strict";

// `epoch` changes with the user: work started for another user (a what-if being followed) stops there.
const state = { mode: "unsecure", session: null, sessions: [], epoch: 0, user: "" };
const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}

function say(text, error = false) {
  const status = $("status");
  status.textContent = text;
  status.className = error ? "error" : "";
}

// --- words for the API's data ---------------------------------------------------------------------------

const plural = (n, word, many = `${word}s`) => `${n} ${n === 1 ? word : many}`;

// kagent's agent_id as people know the agent: kagent__NS__k8s_agent is kagent/k8s-agent.
function agentName(agentId) {
  if (!agentId) return "no agent";
  const parts = agentId.split("__NS__");
  return parts.length === 2 ? `${parts[0]}/${parts[1]}`.replaceAll("_", "-") : agentId;
}

// A task state as stored (completed, TASK_STATE_COMPLETED, input-required, TASK_STATE_INPUT_REQUIRED) in words.
function stateName(value) {
  if (!value) return "no task";
  return value.replace(/^TASK_STATE_/, "").toLowerCase().replaceAll("_", "-");
}

// A time to the second, in the reader's own way of writing it (the API's answers carry microseconds).
function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

function quoted(text, chars = 80) {
  const line = (text || "").replace(/\s+/g, " ").trim();
  return line ? `“${line.length > chars ? `${line.slice(0, chars)}…` : line}”` : "(none)";
}

function toolList(calls) {
  const names = Object.entries(calls || {}).map(([name, n]) => (n > 1 ? `${name} ×${n}` : name));
  return names.length ? `tools: ${names.join(", ")}` : "no tool calls";
}

// A tool's arguments or result as text: strings as they are (a kubectl table keeps its lines), the rest
// as indented key: value lines.
function plain(value, indent = "") {
  if (value == null) return "";
  if (typeof value === "string") return value;
  if (typeof value !== "object") return String(value);
  const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
  if (!entries.length) return Array.isArray(value) ? "[]" : "{}";
  return entries.map(([key, v]) => {
    if (v !== null && typeof v === "object" && Object.keys(v).length) return `${indent}${key}:\n${plain(v, `${indent}  `)}`;
    const text = plain(v, `${indent}  `);
    return text.includes("\n") ? `${indent}${key}:\n${text.replace(/^/gm, `${indent}  `)}` : `${indent}${key}: ${text}`;
  }).join("\n");
}

// The turn (from 1) an invocation is in the open session, or null. A turn of an agent that writes no
// invocation id is named by its task (a job's or an experiment's turn key).
function turnNumber(inv) {
  const index = state.session ? state.session.turns.findIndex((t) => t.invocation_id === inv || (t.invocation_id === null && t.task_id === inv)) : -1;
  return index < 0 ? null : index + 1;
}

function turnLabel(inv) {
  const n = turnNumber(inv);
  if (n === null) return "a turn no longer shown here";
  const turn = state.session.turns[n - 1];
  const question = turn.messages.find((m) => m.role === "user" && m.kind === "text");
  return `Turn ${n} ${question ? quoted(question.text, 60) : ""}`.trim();
}

// --- the API ---------------------------------------------------------------------------------------------

// One API call: the identity header in unsecure mode (trusted-proxy: the proxy sends who it is),
// kagent's envelope unwrapped; a failure raises its {"error": ...} text.
async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (state.mode === "unsecure" && state.user) headers["X-User-Id"] = state.user;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let payload = null;
  try { payload = await response.json(); } catch { payload = null; }
  if (!response.ok) {
    const message = payload && typeof payload.error === "string" ? payload.error : `HTTP ${response.status}`;
    throw new Error(message);
  }
  return payload;
}

// `work` while the status line says `label...`; a failure is said in red and answers undefined. The
// caller says what came of it (never a bare "done" for work that goes on).
async function act(label, work) {
  say(`${label}...`);
  try {
    return await work();
  } catch (error) {
    say(`${label} failed: ${error.message}`, true);
    return undefined;
  }
}

// --- the user, the sessions and the address of each ------------------------------------------------------

function setUser(user) {
  if (user === state.user) return;
  state.user = user;
  state.epoch += 1;
  // Nothing of the previous user's stays on screen.
  state.session = null;
  state.sessions = [];
  $("session-pane").hidden = true;
  $("sessions").replaceChildren();
  for (const id of ["turns", "tree", "rewinds", "comparison", "whatifs", "experiments", "experiment", "suites"]) $(id).replaceChildren();
  notice(null);
}

function link(sessionId) {
  const params = new URLSearchParams({ session: sessionId });
  if (state.mode === "unsecure" && state.user) params.set("user", state.user);
  return `#${params}`;
}

async function loadSessions() {
  const agent = $("agent").value.trim();
  const query = agent ? `?agent_id=${enc(agent)}&limit=100` : "?limit=100";
  const epoch = state.epoch;
  const answer = await act("Listing sessions", () => api("GET", `/api/fork-explorer/sessions${query}`));
  if (!answer || epoch !== state.epoch) return false;
  state.sessions = answer.data;
  const list = $("sessions");
  list.replaceChildren(...answer.data.map((s) =>
    el("li", { "data-id": s.id, onclick: () => go(s.id) },
      el("div", { text: s.name || "(unnamed)" }),
      el("div", { class: "muted", text: `${agentName(s.agent_id)} · ${when(s.updated_at)}` }))));
  if (!answer.data.length) list.replaceChildren(el("li", { class: "muted", text: "No sessions for this user." }));
  markCurrent();
  say(plural(answer.data.length, "session"));
  return true;
}

function markCurrent() {
  const id = state.session ? state.session.session_id : null;
  for (const li of $("sessions").children) li.classList.toggle("current", li.dataset.id === id);
}

// Open a session and give it its own address (a link to it opens it, as this user).
async function go(id) {
  if (await openSession(id)) {
    if (location.hash !== link(id)) history.pushState(null, "", link(id));
    bringIntoView();
  }
}

// The session just opened, at the top of the window when its top is out of sight: opened from far down a long
// list (on a phone the session is under the whole list) or from a tab scrolled down.
function bringIntoView() {
  const top = $("session-pane").getBoundingClientRect().top;
  if (top < 0 || top > window.innerHeight / 2) $("session-pane").scrollIntoView({ block: "start" });
}

async function openSession(id, { keepNotice = false } = {}) {
  const epoch = state.epoch;
  const transcript = await act("Reading the transcript", () => api("GET", `/api/sessions/${enc(id)}/transcript`));
  if (!transcript || epoch !== state.epoch) return false;
  state.session = transcript.data;
  const listed = state.sessions.find((s) => s.id === id);
  markCurrent();
  $("session-pane").hidden = false;
  $("session-title").textContent = transcript.data.name || "(unnamed)";
  $("session-agent").textContent = listed ? agentName(listed.agent_id) : "";
  $("session-link").setAttribute("href", link(id));
  $("session-link").title = id;
  if (!keepNotice) notice(null);
  forgetExperiment();
  renderTurns(transcript.data);
  showTab("transcript");
  say(`${plural(transcript.data.turns.length, "turn")}, about ${plural(transcript.data.estimated_context_tokens, "context token")}`
      + (transcript.data.warnings.length ? ` · ${transcript.data.warnings.join("; ")}` : ""));
  return true;
}

// A sentence at the top of the session (what was just done to it), with its buttons; null clears it.
function notice(text, ...buttons) {
  buttons = buttons.filter((b) => b != null);
  const box = $("notice");
  box.hidden = !text;
  box.replaceChildren(...(text ? [el("span", { text }), ...buttons] : []));
}

// --- transcript and the actions at each turn -------------------------------------------------------------

function renderTurns(t) {
  const items = t.turns.map((turn) => {
    const messages = turn.messages.map((m) => {
      if (m.kind === "text") {
        return el("div", { class: `msg ${m.role}` }, el("span", { class: "who", text: m.author }), m.text);
      }
      const call = m.kind === "tool_call";
      const what = call ? `calls ${m.tool_name}` : `result of ${m.tool_name}`;
      return el("div", { class: "msg tool" }, el("div", { class: "who", text: `${m.author} ${what}` }),
        el("div", { class: "tool-text", text: plain(call ? m.args ?? {} : m.response ?? {}) }));
    });
    const key = turnKey(turn);
    const number = turn.index + 1;
    const actions = key ? el("span", { class: "actions" },
      el("button", { type: "button", onclick: () => dryRun(turn, number), text: "Dry run" }),
      el("button", { type: "button", class: "primary", onclick: () => forkAt(turn, `before turn ${number}`), text: "Fork before this turn" }),
      el("button", { type: "button", class: "danger", onclick: () => rewindAt(turn, number), text: "Rewind here" }),
      el("button", { type: "button", onclick: () => whatifAt(turn, number), text: "What-if" }),
      el("button", { type: "button", onclick: () => experimentAt(turn, number), text: "Experiment" }),
      el("button", { type: "button", onclick: () => saveCaseAt(turn, number), text: "Save as a case" })) : null;
    return el("li", { class: "turn", "data-turn": key || "" },
      el("div", { class: "turn-head" },
        el("b", { text: `Turn ${number}` }),
        el("span", { class: "muted", text: `${stateName(turn.state)} · ${plural(turn.usage.total_tokens, "token")} · ${when(turn.started_at)}` }),
        actions),
      ...messages,
      afterReply(t, turn),
      el("div", { class: "turn-result", hidden: "" }));
  });
  $("turns").replaceChildren(...items);
  if (!items.length) $("turns").replaceChildren(el("li", { class: "muted", text: "No turns." }));
}

// A turn is named by its invocation id, or by its task when its agent writes none (every framework but ADK:
// docs/frameworks.md); the key tells turns apart on the page.
function turnKey(turn) { return turn.invocation_id || turn.task_id || null; }
function boundaryOf(turn) {
  return turn.invocation_id ? { rewind_before_invocation_id: turn.invocation_id } : { rewind_before_task_id: turn.task_id };
}

// A reply offers a fork that ends with it, as kagent's own UI recipe does (docs/ui-integration.md): the
// fork before the next turn, or on the last turn the whole session.
function afterReply(t, turn) {
  const replied = turn.messages.some((m) => m.role === "agent" && m.kind === "text");
  const next = t.turns[turn.index + 1];
  if (!replied || (next && !turnKey(next))) return null;
  const words = `after turn ${turn.index + 1}'s reply`;
  return el("div", { class: "reply-actions" },
    el("button", { type: "button", onclick: () => forkAt(next || null, words), text: "Fork after this reply" }));
}

// What came of an action at a turn, shown beside that turn.
function besideTurn(turn, ...content) {
  const item = [...$("turns").children].find((li) => li.dataset.turn === turnKey(turn));
  const box = item && item.querySelector(".turn-result");
  if (!box) return null;
  box.hidden = false;
  box.replaceChildren(...content);
  return box;
}

function current() { return state.session.session_id; }

function leftBehind(summary) {
  if (!summary) return "It would leave nothing behind.";
  return `It would leave behind ${plural(summary.turns, "turn")} (${plural(summary.events, "event")}), starting ${quoted(summary.first_user_text, 60)}.`;
}

async function dryRun(turn, number) {
  notice(null);
  const answer = await act("Dry run", () => api("POST", `/api/sessions/${enc(current())}/fork`,
    { ...boundaryOf(turn), dry_run: true, if_boundary_missing: "error" }));
  if (!answer) return;
  const d = answer.data;
  besideTurn(turn,
    el("b", { text: `Dry run (nothing was written): a fork before turn ${number} would be “${d.name}”.` }),
    el("div", { text: `It would hold ${plural(d.events_copied, "event")} and ${plural(d.tasks_copied, "task")} (${d.task_layout.replace("_", " ")}), ${plural(d.bytes_to_copy, "byte")}, about ${plural(d.estimated_context_tokens, "context token")}.` }),
    el("div", { text: leftBehind(d.summary) }),
    ...d.warnings.map((w) => el("div", { class: "warning", text: `Warning: ${w}` })));
  say(`Dry run of a fork before turn ${number}: nothing was written`);
}

// A fork before `turn` (null: of the whole session), `words` saying where ("before turn 3").
async function forkAt(turn, words) {
  notice(null);
  const source = state.session;
  const body = turn ? { ...boundaryOf(turn), if_boundary_missing: "error" } : {};
  const answer = await act("Forking", () => api("POST", `/api/sessions/${enc(current())}/fork`, body));
  if (!answer) return;
  const f = answer.data;
  await loadSessions();
  await go(f.id);
  notice(`Forked “${source.name || source.session_id}” ${words} into this session: ${plural(f.fork.events_copied, "event")} and ${plural(f.fork.tasks_copied, "task")} copied.`,
    el("button", { type: "button", onclick: () => go(source.session_id), text: "Back to the source" }));
  say(`Forked: now showing the fork “${f.name}”`);
}

async function rewindAt(turn, number) {
  if (!window.confirm(`Rewind: hide turn ${number} and everything after it? (Undo brings it back.)`)) return;
  const answer = await act("Rewinding", () => api("POST", `/api/sessions/${enc(current())}/rewind`,
    boundaryOf(turn)));
  if (!answer) return;
  const r = answer.data.rewind;
  await openSession(current());
  notice(`Rewound: turn ${number} and everything after it are hidden (${plural(r.events_removed, "event")}, ${plural(r.tasks_removed, "task")}).`,
    el("button", { type: "button", onclick: () => undo(r.id), text: "Undo" }));
  await loadSessions();
  say(`Rewound before turn ${number}`);
}

function whatifWarning(agent, number, tools, plan) {
  return `What-if: ${agent} will answer turn ${number} again, in a new fork of this session.\n\n`
    + `${toolsWarning(tools, plan, "The agent's tools")}\n\nStart the what-if?`;
}

async function whatifAt(turn, number) {
  notice(null);
  const agent = $("whatif-agent").value.trim();
  const shown = agent || "this session's own agent";
  const body = boundaryOf(turn);
  if (agent) body.agent_ref = agent;
  const judge = $("whatif-judge").value.trim();
  if (judge) body.judge = { agent: judge };
  body.tools = TOOL_POLICIES[$("whatif-tools").value].tools;
  // The dry run first: the agent's tools by class, and the refusal it would get, before anything starts.
  const dry = await act("Checking the agent's tools", () => api("POST", `/api/sessions/${enc(current())}/whatif`,
    { ...body, dry_run: true }));
  if (!dry) return;
  const plan = dry.data;
  if (plan.refused) {
    besideTurn(turn, el("b", { class: "error", text: `Not started: ${plan.refused}` }),
      ...plan.arms.map((a) => el("div", { class: "muted arm-tools", text: armWords(a) })));
    say(`Starting a what-if failed: ${plan.refused}`, true);
    return;
  }
  if (!window.confirm(whatifWarning(shown, number, body.tools, plan))) {
    say("What-if not started");
    return;
  }
  const answer = await act("Starting a what-if", () => api("POST", `/api/sessions/${enc(current())}/whatif`, body));
  if (!answer) return;
  const { job, session } = answer.data;
  await loadSessions();
  const box = besideTurn(turn, el("b", { text: `What-if: ${job.agent_ref} is answering turn ${number} in the fork “${session.name}”...` }),
    el("div", { class: "muted arm-tools", text: `Tools: ${policyWords(job.tool_policy)}. ${armWords(job.tools)}` }));
  followJob(job.id, number, box);
}

// Follow a what-if until it ends: the status line says it is running until then.
async function followJob(jobId, number, box) {
  const epoch = state.epoch;
  const started = Date.now();
  for (let i = 0; i < 2400 && epoch === state.epoch; i++) {
    let job;
    try {
      job = (await api("GET", `/api/whatif/${enc(jobId)}`)).data;
    } catch (error) {
      if (epoch === state.epoch) say(`Following the what-if failed: ${error.message}`, true);
      return;
    }
    if (epoch !== state.epoch) return;
    if (job.status === "running" || job.status === "judging") {
      const doing = job.status === "running" ? `${job.agent_ref} is answering turn ${number}` : "its judge is comparing the answer with this chat's own";
      say(`What-if ${job.status}: ${doing} (${Math.round((Date.now() - started) / 1000)} s)...`);
      await new Promise((resolve) => setTimeout(resolve, 500));
      continue;
    }
    await loadSessions();
    if (box && box.isConnected) box.replaceChildren(...jobWords(job, `turn ${number}`));
    if (!$("tab-whatifs").hidden) await showWhatifs();
    say(`What-if ${job.status}` + (job.error ? `: ${job.error}` : ""), job.status === "failed");
    return;
  }
}

// A what-if job in words: who answered what, how it ended, the answer, and where to look.
function jobWords(job, what) {
  const parts = [el("b", { text: `What-if ${job.status}: ${job.agent_ref} answering ${what}` })];
  if (job.question) parts.push(el("div", { class: "msg user", text: `Asked: ${job.question}` }));
  if (job.error) parts.push(el("div", { class: "error", text: job.error }));
  if (job.result) {
    parts.push(el("div", { class: "msg agent", text: job.result.last_agent_text || "(no answer)" }),
      el("div", { class: "muted", text: `${toolList(job.result.tool_calls)} · ${plural(job.result.total_tokens, "token")}` }));
  }
  // A judged what-if: the verdict as an experiment's reads, its headline first, then its lines.
  if (job.verdict) {
    parts.push(el("div", { class: "verdict-headline", text: `Judged blind by ${job.verdict.judge.agent}: ${job.verdict.headline}` }),
      el("ul", { class: "verdict-lines" }, ...job.verdict.by_agent.map((a) => el("li", { text: a.summary }))));
  }
  const source = state.session ? state.session.session_id : null;
  parts.push(el("span", { class: "actions" },
    el("button", { type: "button", onclick: () => go(job.session_id), text: "Open the fork" }),
    source ? el("button", { type: "button", onclick: () => compareWith(job.session_id), text: "Compare with the fork" }) : null,
    job.status === "running" ? el("button", { type: "button", class: "danger", onclick: () => cancelJob(job.id), text: "Cancel" }) : null));
  return parts;
}

// --- tabs ------------------------------------------------------------------------------------------------

function showTab(name) {
  for (const button of document.querySelectorAll(".tabs button")) button.classList.toggle("active", button.dataset.tab === name);
  for (const tab of document.querySelectorAll(".tab")) tab.hidden = tab.id !== `tab-${name}`;
}

function nodeWords(n) {
  const parts = [agentName(n.agent_id)];
  if (n.turns != null) parts.push(`${plural(n.turns, "turn")}, ${plural(n.events, "event")} now`);
  if (n.fork) {
    const asked = n.fork.rewind_before_invocation_id ?? n.fork.rewind_before_task_id;
    let at = "forked whole";
    if (asked && !n.fork.boundary_found) at = `forked whole: a copy of the whole chat (the turn asked for, ${asked}, was not in it)`;
    else if (n.fork_turn != null) at = `forked at turn ${n.fork_turn} ${quoted(n.fork_question, 50)}`;
    else if (n.fork.rewind_before_invocation_id) at = "forked at a turn its parent no longer shows";
    else if (asked) at = `forked before the turn of task ${asked}`;
    parts.push(`${at}, ${plural(n.fork.events_copied, "event")} copied ${when(n.fork.created_at)}`);
  }
  return parts.join(" · ");
}

async function showTree() {
  const answer = await act("Drawing the fork tree", () => api("GET", `/api/sessions/${enc(current())}/tree`));
  if (!answer) return;
  const node = (n) => {
    const label = el("span", { class: n.status === "ok" ? "node" : n.status, text: n.name || n.session_id });
    if (n.status === "ok") label.addEventListener("click", () => go(n.session_id));
    const item = el("li", { "data-id": n.session_id }, label,
      n.status !== "ok" ? el("span", { class: "badge", text: n.status }) : null,
      n.session_id === current() ? el("b", { text: " ← this session" }) : null,
      el("div", { class: "muted", text: nodeWords(n) }));
    if (n.forks.length) item.append(el("ul", {}, ...n.forks.map(node)));
    return item;
  };
  $("tree").replaceChildren(el("ul", { class: "tree" }, node(answer.data)));
  say("Fork tree drawn");
}

async function showRewinds() {
  const answer = await act("Listing rewinds", () => api("GET", `/api/sessions/${enc(current())}/rewinds`));
  if (!answer) return;
  const items = answer.data.map((r) => el("li", { class: "turn", "data-id": r.id },
    el("div", { text: `${when(r.created_at)}: hid ${r.summary ? `${plural(r.summary.turns, "turn")} starting ${quoted(r.summary.first_user_text, 60)}` : "the turns from a turn"} (${plural(r.events_removed, "event")}, ${plural(r.tasks_removed, "task")}), by ${r.requested_by}` }),
    el("div", { class: "muted", text: r.undone_at ? `undone ${when(r.undone_at)}` : (r.undoable ? "can be undone" : "cannot be undone now (a later rewind, or new turns since)") }),
    r.undoable ? el("button", { type: "button", onclick: () => undo(r.id), text: "Undo" }) : null));
  $("rewinds").replaceChildren(...items);
  if (!items.length) $("rewinds").replaceChildren(el("li", { class: "muted", text: "No rewinds." }));
  say(plural(answer.data.length, "rewind"));
}

async function undo(rewindId) {
  const answer = await act("Undoing the rewind", () => api("POST", `/api/sessions/${enc(current())}/rewinds/${enc(rewindId)}/undo`, {}));
  if (!answer) return;
  const r = answer.data.rewind;
  await openSession(current());
  notice(`Rewind undone: ${plural(r.events_removed, "event")} and ${plural(r.tasks_removed, "task")} are back.`);
  await loadSessions();
  showTab("rewinds");
  await showRewinds();
  say("Rewind undone");
}

function fillCompareChoices(chosen) {
  const select = $("compare-with");
  select.replaceChildren(...state.sessions.filter((s) => s.id !== current())
    .map((s) => el("option", { value: s.id, text: `${s.name || "(unnamed)"} · ${agentName(s.agent_id)}` })));
  if (chosen) select.value = chosen;
}

function turnCell(t, side) {
  if (!t) return el("td", { class: "muted", text: "(no turn here)" });
  return el("td", { "data-side": side },
    el("div", { class: "msg user", text: t.question || "(no question)" }),
    el("div", { class: "msg agent", text: t.answer || "(no answer)" }),
    el("div", { class: "muted", text: `${toolList(t.tool_calls)} · ${plural(t.total_tokens, "token")} · ${t.duration_seconds.toFixed(1)} s` }));
}

async function compareWith(other) {
  if (typeof other === "string") {
    showTab("compare");
    fillCompareChoices(other);
  }
  const chosen = $("compare-with").value;
  if (!chosen) { say("Choose a session to compare with", true); return; }
  const answer = await act("Comparing", () => api("GET", `/api/sessions/${enc(current())}/compare/${enc(chosen)}`));
  if (!answer) return;
  const c = answer.data;
  const total = (s) => el("th", { "data-id": s.session_id },
    el("div", { text: s.name || s.session_id }),
    el("div", { class: "muted", text: `${plural(s.turns_after, "turn")} after the common part, ${plural(Object.values(s.tool_calls).reduce((a, b) => a + b, 0), "tool call")}, ${plural(s.total_tokens, "token")}, ${s.duration_seconds.toFixed(1)} s` }));
  const rows = c.aligned.map((row, i) => el("tr", {},
    el("th", { class: "turn-no", text: `Turn ${c.common_turns + i + 1}` }), turnCell(row.left, "left"), turnCell(row.right, "right")));
  $("comparison").replaceChildren(
    el("p", { text: `${plural(c.common_turns, "turn")} in common; then, turn by turn:` }),
    el("table", { class: "compare" },
      el("thead", {}, el("tr", {}, el("th", {}), total(c.left), total(c.right))),
      el("tbody", {}, ...rows)),
    ...(rows.length ? [] : [el("p", { class: "muted", text: "Nothing after the common part on either side." })]));
  say(`Compared: ${plural(c.aligned.length, "turn")} side by side`);
}

async function showWhatifs() {
  const answer = await act("Listing what-ifs", () => api("GET", `/api/sessions/${enc(current())}/whatifs`));
  if (!answer) return;
  const items = answer.data.map((j) => el("li", { class: "turn", "data-id": j.id, "data-status": j.status },
    ...jobWords(j, turnLabel(j.rewind_before_invocation_id ?? j.rewind_before_task_id)),
    el("div", { class: "muted", text: `started ${when(j.created_at)}${j.finished_at ? `, ended ${when(j.finished_at)}` : ""}` })));
  $("whatifs").replaceChildren(...items);
  if (!items.length) $("whatifs").replaceChildren(el("li", { class: "muted", text: "No what-ifs from this session." }));
  say(plural(answer.data.length, "what-if"));
}

async function cancelJob(jobId) {
  const answer = await act("Cancelling the what-if", () => api("POST", `/api/whatif/${enc(jobId)}/cancel`, {}));
  if (!answer) return;
  await showWhatifs();
  say("What-if cancelled");
}

// --- start -----------------------------------------------------------------------------------------------

// The address names a session (and, in unsecure mode, the user): open it.
async function follow() {
  const params = new URLSearchParams(location.hash.slice(1));
  const user = params.get("user");
  if (user && state.mode === "unsecure" && user !== state.user) {
    $("user").value = user;
    setUser(user);
    await loadSessions();
  }
  const session = params.get("session");
  if (session && (!state.session || state.session.session_id !== session) && await openSession(session)) bringIntoView();
}

async function start() {
  $("who").addEventListener("submit", async (event) => {
    event.preventDefault();
    setUser($("user").value.trim());
    if (await loadSessions() && !state.session && location.hash) history.pushState(null, "", location.pathname);
  });
  $("user").addEventListener("change", () => setUser($("user").value.trim()));
  const tabs = { transcript: null, tree: showTree, rewinds: showRewinds, compare: () => fillCompareChoices(), whatifs: showWhatifs,
    experiments: showExperiments, suites: showSuites };
  for (const button of document.querySelectorAll(".tabs button")) {
    button.addEventListener("click", async () => {
      showTab(button.dataset.tab);
      const load = tabs[button.dataset.tab];
      if (load) await load();
    });
  }
  $("compare-go").addEventListener("click", () => compareWith());
  window.addEventListener("popstate", follow);
  const who = await act("Asking who I am", () => api("GET", "/api/fork-explorer/whoami"));
  if (!who) return;
  state.mode = who.data.auth_mode;
  if (state.mode === "unsecure") {
    if (!$("user").value) $("user").value = who.data.user_id;
    $("mode").textContent = "auth: unsecure (the user field is sent as X-User-Id)";
  } else {
    $("user").value = who.data.user_id;
    $("user").disabled = true;
    $("mode").textContent = "auth: trusted-proxy (the proxy says who you are)";
  }
  const linked = new URLSearchParams(location.hash.slice(1)).get("user");
  if (linked && state.mode === "unsecure") $("user").value = linked;
  setUser($("user").value.trim());
  await Promise.all([loadSessions(), loadKnownAgents()]);
  await follow();
}

document.addEventListener("DOMContentLoaded", start);
