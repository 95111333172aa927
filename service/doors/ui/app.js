// kagent-fork explorer: every action is one call of the service's HTTP API, as the chosen user.
// Everything shown is set with textContent: names and messages are data, never markup.
"use strict";

const state = { mode: "unsecure", session: null, sessions: [], jobs: new Map() };
const $ = (id) => document.getElementById(id);

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

function showResult(title, data) {
  $("result-pane").hidden = false;
  $("result").replaceChildren(el("p", { text: title }), el("pre", { class: "json", text: JSON.stringify(data, null, 2) }));
}

// One API call: the identity header in unsecure mode (trusted-proxy: the proxy sends who it is),
// kagent's envelope unwrapped; a failure raises its {"error": ...} text.
async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const user = $("user").value.trim();
  if (state.mode === "unsecure" && user) headers["X-User-Id"] = user;
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

async function act(label, work) {
  say(`${label}...`);
  try {
    const result = await work();
    say(`${label}: done`);
    return result;
  } catch (error) {
    say(`${label} failed: ${error.message}`, true);
    return undefined;
  }
}

const enc = encodeURIComponent;

// --- sessions -----------------------------------------------------------------------------------------

async function loadSessions() {
  const agent = $("agent").value.trim();
  const query = agent ? `?agent_id=${enc(agent)}&limit=100` : "?limit=100";
  const answer = await act("Listing sessions", () => api("GET", `/api/fork-explorer/sessions${query}`));
  if (!answer) return;
  state.sessions = answer.data;
  const list = $("sessions");
  list.replaceChildren(...answer.data.map((s) =>
    el("li", { "data-id": s.id, onclick: () => openSession(s.id) },
      el("div", { text: s.name || "(unnamed)" }),
      el("div", { class: "muted mono", text: `${s.id} · ${s.agent_id || "no agent"} · ${s.updated_at}` }))));
  if (!answer.data.length) list.replaceChildren(el("li", { class: "muted", text: "No sessions for this user." }));
  say(`${answer.data.length} session(s)`);
}

async function openSession(id) {
  const transcript = await act("Reading the transcript", () => api("GET", `/api/sessions/${enc(id)}/transcript`));
  if (!transcript) return;
  state.session = transcript.data;
  for (const li of $("sessions").children) li.classList.toggle("current", li.dataset.id === id);
  $("session-pane").hidden = false;
  $("session-title").textContent = transcript.data.name || "(unnamed)";
  $("session-id").textContent = id;
  renderTurns(transcript.data);
  showTab("transcript");
  say(`${transcript.data.turns.length} turn(s), about ${transcript.data.estimated_context_tokens} context tokens`
      + (transcript.data.warnings.length ? ` · ${transcript.data.warnings.join("; ")}` : ""));
}

// --- transcript and the actions at each turn ----------------------------------------------------------

function renderTurns(t) {
  const items = t.turns.map((turn) => {
    const messages = turn.messages.map((m) => {
      if (m.kind === "text") {
        return el("div", { class: `msg ${m.role}` }, el("span", { class: "who", text: m.author }), m.text);
      }
      const detail = m.kind === "tool_call" ? JSON.stringify(m.args ?? {}) : JSON.stringify(m.response ?? {});
      const what = m.kind === "tool_call" ? `calls ${m.tool_name}` : `result of ${m.tool_name}`;
      return el("div", { class: "msg tool" }, el("span", { class: "who", text: `${m.author} ${what}` }), detail);
    });
    const inv = turn.invocation_id;
    const actions = inv ? el("span", { class: "actions" },
      el("button", { type: "button", onclick: () => dryRun(inv), text: "Dry run" }),
      el("button", { type: "button", class: "primary", onclick: () => forkAt(inv), text: "Fork here" }),
      el("button", { type: "button", class: "danger", onclick: () => rewindAt(inv), text: "Rewind here" }),
      el("button", { type: "button", onclick: () => whatifAt(inv), text: "What-if" })) : null;
    return el("li", { class: "turn", "data-invocation": inv || "" },
      el("div", { class: "turn-head" },
        el("b", { text: `Turn ${turn.index + 1}` }),
        el("span", { class: "muted", text: `${turn.state || "no task"} · ${turn.usage.total_tokens} tokens` }),
        el("span", { class: "muted mono", text: inv || "" }),
        actions),
      ...messages);
  });
  $("turns").replaceChildren(...items);
  if (!items.length) $("turns").replaceChildren(el("li", { class: "muted", text: "No turns." }));
}

function current() { return state.session.session_id; }

async function dryRun(inv) {
  const answer = await act("Dry run", () => api("POST", `/api/sessions/${enc(current())}/fork`,
    { rewind_before_invocation_id: inv, dry_run: true, if_boundary_missing: "error" }));
  if (answer) showResult("A fork before this turn would hold (nothing was written):", answer.data);
}

async function forkAt(inv) {
  const answer = await act("Forking", () => api("POST", `/api/sessions/${enc(current())}/fork`,
    { rewind_before_invocation_id: inv, if_boundary_missing: "error" }));
  if (!answer) return;
  showResult(`Forked into ${answer.data.name}:`, answer.data);
  await loadSessions();
  say(`Forked: ${answer.data.id} (${answer.data.fork.events_copied} events copied)`);
}

async function rewindAt(inv) {
  if (!window.confirm("Rewind: hide this turn and everything after it? (Undo brings it back.)")) return;
  const answer = await act("Rewinding", () => api("POST", `/api/sessions/${enc(current())}/rewind`,
    { rewind_before_invocation_id: inv }));
  if (!answer) return;
  showResult("Rewound (undo it from the Rewinds tab):", answer.data);
  const id = current();
  await openSession(id);
  await showRewinds();
}

async function whatifAt(inv) {
  const agent = $("whatif-agent").value.trim();
  const body = { rewind_before_invocation_id: inv };
  if (agent) body.agent_ref = agent;
  const answer = await act("Starting a what-if", () => api("POST", `/api/sessions/${enc(current())}/whatif`, body));
  if (!answer) return;
  showResult("What-if started:", answer.data);
  await showWhatifs();
  followJob(answer.data.job.id);
}

async function followJob(jobId) {
  for (let i = 0; i < 1200; i++) {
    const answer = await act("Following the what-if", () => api("GET", `/api/whatif/${enc(jobId)}`));
    if (!answer) return;
    if (answer.data.status !== "running") {
      await showWhatifs();
      showResult(`What-if ${answer.data.status}:`, answer.data);
      say(`What-if ${answer.data.status}` + (answer.data.error ? `: ${answer.data.error}` : ""), answer.data.status === "failed");
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

// --- tabs ---------------------------------------------------------------------------------------------

function showTab(name) {
  for (const button of document.querySelectorAll(".tabs button")) button.classList.toggle("active", button.dataset.tab === name);
  for (const tab of document.querySelectorAll(".tab")) tab.hidden = tab.id !== `tab-${name}`;
}

async function showTree() {
  const answer = await act("Drawing the fork tree", () => api("GET", `/api/sessions/${enc(current())}/tree`));
  if (!answer) return;
  const node = (n) => {
    const label = el("span", { class: n.status === "ok" ? "node" : n.status, text: n.name || n.session_id });
    if (n.status === "ok") label.addEventListener("click", () => openSession(n.session_id));
    const item = el("li", { "data-id": n.session_id }, label,
      n.status !== "ok" ? el("span", { class: "badge", text: n.status }) : null,
      el("span", { class: "muted", text: n.fork ? ` depth ${n.fork.depth}, ${n.fork.events_copied} events` : " (root)" }),
      n.session_id === current() ? el("b", { text: " ← this session" }) : null);
    if (n.forks.length) item.append(el("ul", {}, ...n.forks.map(node)));
    return item;
  };
  $("tree").replaceChildren(el("ul", { class: "tree" }, node(answer.data)));
}

async function showRewinds() {
  const answer = await act("Listing rewinds", () => api("GET", `/api/sessions/${enc(current())}/rewinds`));
  if (!answer) return;
  const items = answer.data.map((r) => el("li", { class: "turn", "data-id": r.id },
    el("div", { text: `${r.created_at}: hid ${r.events_removed} events, ${r.tasks_removed} tasks from ${r.rewind_before_invocation_id}` }),
    el("div", { class: "muted", text: r.undone_at ? `undone ${r.undone_at}` : (r.undoable ? "can be undone" : "cannot be undone now") }),
    r.summary ? el("div", { class: "muted", text: `It hid ${r.summary.turns} turn(s), starting "${r.summary.first_user_text || ""}"` }) : null,
    r.undoable ? el("button", { type: "button", onclick: () => undo(r.id), text: "Undo" }) : null));
  $("rewinds").replaceChildren(...items);
  if (!items.length) $("rewinds").replaceChildren(el("li", { class: "muted", text: "No rewinds." }));
}

async function undo(rewindId) {
  const answer = await act("Undoing the rewind", () => api("POST", `/api/sessions/${enc(current())}/rewinds/${enc(rewindId)}/undo`, {}));
  if (!answer) return;
  showResult("Rewind undone:", answer.data);
  const id = current();
  await openSession(id);
  await showRewinds();
  showTab("rewinds");
}

function fillCompareChoices() {
  const select = $("compare-with");
  select.replaceChildren(...state.sessions.filter((s) => s.id !== current())
    .map((s) => el("option", { value: s.id, text: `${s.name || "(unnamed)"} · ${s.id}` })));
}

async function compareWith() {
  const other = $("compare-with").value;
  if (!other) { say("Choose a session to compare with", true); return; }
  const answer = await act("Comparing", () => api("GET", `/api/sessions/${enc(current())}/compare/${enc(other)}`));
  if (!answer) return;
  const side = (s) => el("div", { "data-id": s.session_id },
    el("h3", { text: s.name || s.session_id }),
    el("div", { class: "muted mono", text: s.session_id }),
    el("div", { text: `${s.turns_after} turn(s) after the common part, ${Object.values(s.tool_calls).reduce((a, b) => a + b, 0)} tool call(s), ${s.total_tokens} tokens, ${s.duration_seconds.toFixed(1)} s` }),
    el("div", { class: "msg user", text: s.first_user_text || "(nothing after the common part)" }),
    el("div", { class: "msg agent", text: s.last_agent_text || "" }));
  $("comparison").replaceChildren(el("p", { text: `${answer.data.common_turns} turn(s) in common` }),
    el("div", { class: "compare" }, side(answer.data.left), side(answer.data.right)));
}

async function showWhatifs() {
  const answer = await act("Listing what-ifs", () => api("GET", `/api/sessions/${enc(current())}/whatifs`));
  if (!answer) return;
  const items = answer.data.map((j) => el("li", { class: "turn", "data-id": j.id, "data-status": j.status },
    el("div", { text: `${j.status}: ${j.agent_ref} answering ${j.rewind_before_invocation_id}` }),
    j.error ? el("div", { class: "error", text: j.error }) : null,
    j.result ? el("div", { class: "msg agent", text: j.result.last_agent_text || "" }) : null,
    el("button", { type: "button", onclick: () => openSession(j.session_id), text: "Open the fork" }),
    j.status === "running" ? el("button", { type: "button", class: "danger", onclick: () => cancelJob(j.id), text: "Cancel" }) : null));
  $("whatifs").replaceChildren(...items);
  if (!items.length) $("whatifs").replaceChildren(el("li", { class: "muted", text: "No what-ifs from this session." }));
}

async function cancelJob(jobId) {
  const answer = await act("Cancelling the what-if", () => api("POST", `/api/whatif/${enc(jobId)}/cancel`, {}));
  if (answer) { showResult("What-if cancelled:", answer.data); await showWhatifs(); }
}

// --- start --------------------------------------------------------------------------------------------

async function start() {
  $("who").addEventListener("submit", (event) => { event.preventDefault(); loadSessions(); });
  const tabs = { transcript: null, tree: showTree, rewinds: showRewinds, compare: fillCompareChoices, whatifs: showWhatifs };
  for (const button of document.querySelectorAll(".tabs button")) {
    button.addEventListener("click", async () => {
      showTab(button.dataset.tab);
      const load = tabs[button.dataset.tab];
      if (load) await load();
    });
  }
  $("compare-go").addEventListener("click", compareWith);
  const who = await act("Asking who I am", () => api("GET", "/api/fork-explorer/whoami"));
  if (who) {
    state.mode = who.data.auth_mode;
    if (state.mode === "unsecure") {
      if (!$("user").value) $("user").value = who.data.user_id;
      $("mode").textContent = "auth: unsecure (the user field is sent as X-User-Id)";
    } else {
      $("user").value = who.data.user_id;
      $("user").disabled = true;
      $("mode").textContent = "auth: trusted-proxy (the proxy says who you are)";
    }
    await loadSessions();
  }
}

document.addEventListener("DOMContentLoaded", start);
