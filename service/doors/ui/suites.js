// Suites on the page (docs/suites.md): "Save as a case" on a turn puts it into one of the user's suites, or into a
// new one named here. Every call is one of the HTTP API's, as everywhere on the page (app.js: api, act, el).
"use strict";

async function saveCaseAt(turn, number) {
  notice(null);
  const listed = await act("Reading your suites", () => api("GET", "/api/suites"));
  if (!listed) return;
  const suites = listed.data;
  const pick = el("select", { class: "case-suite", "aria-label": "Suite" },
    ...suites.map((s) => el("option", { value: s.id, text: `${s.name} (${plural(s.cases, "case")})` })),
    el("option", { value: "", text: "a new suite" }));
  const name = el("input", { class: "case-suite-name", "aria-label": "The new suite's name",
    placeholder: "the new suite's name" });
  name.hidden = suites.length > 0;
  pick.addEventListener("change", () => { name.hidden = pick.value !== ""; });
  const turns = el("select", { class: "case-turns", "aria-label": "What a run replays" },
    el("option", { value: "1", text: "this turn" }),
    el("option", { value: "all", text: "this turn and every later one" }));
  const save = el("button", { type: "button", class: "primary", text: "Save the case" });
  const box = besideTurn(turn, el("b", { text: `Save turn ${number} as a case of a suite` }),
    el("div", { class: "muted", text: "A suite's run continues each case on other agents and judges them against this chat's own answers." }),
    el("div", { class: "case-form" }, pick, name, turns, save));
  save.addEventListener("click", async () => {
    const spec = { session_id: current(), ...boundaryOf(turn), turns: turns.value === "all" ? "all" : 1 };
    const newName = name.value.trim();
    if (!pick.value && !newName) {
      say("Saving the case failed: name the new suite", true);
      return;
    }
    const answer = await act("Saving the case", () => pick.value
      ? api("POST", `/api/suites/${enc(pick.value)}/cases`, spec)
      : api("POST", "/api/suites", { name: newName, cases: [spec] }));
    if (!answer || !box) return;
    const suite = answer.data;
    const words = `Saved turn ${number} as case ${suite.cases.length} of the suite “${suite.name}” (${plural(suite.cases.length, "case")}).`;
    box.replaceChildren(el("b", { text: words }),
      el("div", { class: "muted mono", text: `kagent-fork suite show ${suite.id}` }));
    say(words);
  });
}

// The Suites tab: each of the user's suites with its cases in order; a case opens its chat or is removed, and a
// suite is shown as the YAML file its export writes (to keep beside the agent's manifests).
async function showSuites() {
  const listed = await act("Listing your suites", () => api("GET", "/api/suites"));
  if (!listed) return;
  const items = [];
  for (const item of listed.data) {
    const read = await act("Reading a suite", () => api("GET", `/api/suites/${enc(item.id)}`));
    if (!read) return;
    items.push(suiteItem(read.data));
  }
  $("suites").replaceChildren(...items);
  if (!items.length) $("suites").replaceChildren(el("li", { class: "muted", text: "No suites yet: Save as a case on a turn makes one." }));
  say(plural(listed.data.length, "suite"));
}

function suiteItem(suite) {
  const file = el("pre", { class: "suite-file", hidden: "" });
  const runs = el("div", { class: "suite-runs", hidden: "" });
  const cases = suite.cases.map((c, i) => el("li", { "data-case": c.case_id },
    el("span", { text: `${i + 1}. ${quoted(c.user_text || "", 80)} · ${c.agent_ref || "agent unknown"} · ${c.turns === "all" ? "every turn from there" : plural(c.turns, "turn")}${c.message ? ` · asked ${quoted(c.message.text, 40)}` : ""} ` }),
    el("span", { class: "actions" },
      el("button", { type: "button", onclick: () => go(c.session_id), text: "Open the chat" }),
      el("button", { type: "button", class: "danger", onclick: () => removeCase(suite, c, i + 1), text: "Remove" }))));
  return el("li", { class: "turn", "data-suite": suite.id },
    el("b", { text: `${suite.name} (${plural(suite.cases.length, "case")})` }),
    el("div", { class: "muted mono", text: `created ${when(suite.created_at)} · kagent-fork suite show ${suite.id}` }),
    el("ol", { class: "suite-cases" }, ...cases),
    el("span", { class: "actions" },
      el("button", { type: "button", onclick: () => showFile(suite, file), text: "Show as YAML" }),
      el("button", { type: "button", onclick: () => showRuns(suite, runs), text: "Runs" })),
    file, runs);
}

async function showFile(suite, box) {
  const headers = { Accept: "application/yaml" };
  if (state.mode === "unsecure" && state.user) headers["X-User-Id"] = state.user;
  const text = await act("Exporting the suite", async () => {
    const response = await fetch(`/api/suites/${enc(suite.id)}/export`, { headers });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    return response.text();
  });
  if (text === undefined) return;
  box.hidden = false;
  box.textContent = text;
  say(`The suite “${suite.name}” as its export writes it (POST /api/suites/import reads it back)`);
}

async function removeCase(suite, c, number) {
  if (!window.confirm(`Remove case ${number} of “${suite.name}”? The chat itself is not touched.`)) return;
  const answer = await act("Removing the case", () => api("DELETE", `/api/suites/${enc(suite.id)}/cases/${enc(c.case_id)}`));
  if (!answer) return;
  await showSuites();
  say(`Case ${number} removed from “${suite.name}” (${plural(answer.data.cases.length, "case")} left)`);
}

// --- a suite's runs (docs/suites.md, "Runs"): started from the form, listed, one followed while it runs --------

// The run being followed: showing another one (or another user) stops the follower of the one before.
const shownRun = { follower: null };
const RUN_OPEN = ["running", "judging"];

// Money as the service prints it (prices.usd_text): two significant figures, never fewer than the cents.
function usd(amount) {
  if (amount == null) return "unknown";
  if (amount <= 0) return "$0.00";
  return `$${amount.toFixed(Math.max(2, 1 - Math.floor(Math.log10(amount))))}`;
}

const pct = (rate) => (rate == null ? "-" : `${Math.round(rate * 100)} %`);

// A link the browser opens by itself (the verdict as Markdown) cannot carry X-User-Id: in unsecure mode the user
// goes in the query, as the API takes it (user_id).
function runAddress(suiteId, runId, tail = "") {
  const path = `/api/suites/${enc(suiteId)}/runs/${enc(runId)}${tail}`;
  const params = new URLSearchParams();
  if (state.mode === "unsecure" && state.user) params.set("user_id", state.user);
  const query = params.toString();
  return query ? `${path}${path.includes("?") ? "&" : "?"}${query}` : path;
}

async function showRuns(suite, box) {
  box.hidden = false;
  box.replaceChildren(runForm(suite, box), el("h3", { text: "Runs" }), el("ul", { class: "run-list" }), el("div", { class: "suite-run" }));
  await listRuns(suite, box);
}

async function listRuns(suite, box) {
  const answer = await act("Listing the suite's runs", () => api("GET", `/api/suites/${enc(suite.id)}/runs`));
  if (!answer) return;
  const items = answer.data.map((r) => el("li", { class: "turn", "data-run": r.id, "data-status": r.status },
    el("b", { text: `Run ${r.status}${reasonOf(r)}: ${r.agents.join(", ")}` }),
    el("div", { class: "muted", text: `judged by ${r.judge} · started ${when(r.created_at)}${r.finished_at ? `, ended ${when(r.finished_at)}` : ""}` }),
    el("button", { type: "button", onclick: () => followRun(suite, r.id, box), text: "Show the run" })));
  box.querySelector(".run-list").replaceChildren(...(items.length ? items : [el("li", { class: "muted", text: "No runs of this suite yet." })]));
  say(plural(answer.data.length, "run"));
}

// The form: the agents (one a line, or comma-separated), the judge, repeats, the control and a budget; Dry run
// shows the plan and the refusal before anything starts.
function runForm(suite, box) {
  const agents = el("textarea", { class: "run-agents", rows: "2", "aria-label": "Agents", placeholder: "namespace/name, one a line" });
  const judge = el("input", { class: "run-judge", "aria-label": "Judge", autocomplete: "off", list: "known-agents",
    placeholder: "namespace/name", value: $("whatif-judge").value.trim() });
  const repeats = el("input", { class: "run-repeats", "aria-label": "Repeats", type: "number", min: "1", max: "5", value: "1" });
  const control = el("input", { class: "run-control", type: "checkbox" });
  const maxUsd = el("input", { class: "run-max-usd", "aria-label": "Max $", type: "number", min: "0", step: "any", placeholder: "no limit" });
  const plan = el("div", { class: "run-plan" });
  const body = (dry) => {
    const out = { agents: agents.value.split(/[\s,]+/).filter(Boolean), judge: { agent: judge.value.trim() }, repeats: Number(repeats.value) };
    if (control.checked) out.control = true;
    if (maxUsd.value.trim()) out.max_usd = Number(maxUsd.value);
    if (dry) out.dry_run = true;
    return out;
  };
  const form = el("form", { class: "experiment-form run-form" },
    el("b", { text: `Run “${suite.name}”: each of its ${plural(suite.cases.length, "case")} continued on every agent, judged blind against the chat's own turns` }),
    el("label", {}, "Agents (namespace/name, one a line or comma-separated)", agents),
    el("label", {}, "Judge", judge),
    el("label", {}, "Repeats of each agent per case", repeats),
    el("label", { class: "inline" }, control, " Also run each chat's own agent again as a control: the noise floor"),
    el("label", {}, "Max $ (refused over it; no case starts once spent reaches it)", maxUsd),
    plan,
    el("span", { class: "actions" },
      el("button", { type: "button", onclick: () => dryRunSuite(suite, body(true), plan), text: "Dry run" }),
      el("button", { type: "submit", class: "primary", text: "Start the run" })));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    startRun(suite, body(false), plan, box);
  });
  return form;
}

// A refusal's text as the API said it, for the form (act() says it on the status line too).
async function attempt(label, work) {
  let failure = "";
  const answer = await act(label, () => work().catch((error) => { failure = error.message; throw error; }));
  return [answer, failure];
}

async function dryRunSuite(suite, body, plan) {
  const [answer, failure] = await attempt("Dry run of the suite", () => api("POST", `/api/suites/${enc(suite.id)}/runs`, body));
  if (!answer) {
    plan.replaceChildren(el("div", { class: "error run-refusal", text: `Would be refused: ${failure}` }));
    return;
  }
  const p = answer.data;
  const money = p.estimated_usd === null ? `price unknown (${p.unpriced.join(", ") || "a model"} unpriced)` : `${p.estimated_usd_text} at least`;
  plan.replaceChildren(
    el("div", { class: "estimate", text: `Dry run (nothing was written): ${plural(p.cases, "case")}, ${plural(p.branches, "branch", "branches")}; estimate, the judge included: ${money}.` }),
    ...p.skipped.map((s) => el("div", { class: "warning", text: `Case ${s.case_id} would be skipped: ${s.error}` })),
    p.refused ? el("div", { class: "error run-refusal", text: `Would be refused: ${p.refused}` }) : null);
  say(p.refused ? `The run would be refused: ${p.refused}` : "Dry run: nothing was written", Boolean(p.refused));
}

async function startRun(suite, body, plan, box) {
  const [answer, failure] = await attempt("Starting the run", () => api("POST", `/api/suites/${enc(suite.id)}/runs`, body));
  if (!answer) {
    plan.replaceChildren(el("div", { class: "error run-refusal", text: `Not started: ${failure}` }));
    return;
  }
  plan.replaceChildren();
  await listRuns(suite, box);
  await followRun(suite, answer.data.id, box);
}

// Show a run, read again every second while it runs.
async function followRun(suite, runId, box) {
  const follower = {};
  shownRun.follower = follower;
  const epoch = state.epoch;
  const shown = box.querySelector(".suite-run");
  // Stops once the view is gone: the suites listed again, Runs pressed again, or another user.
  const mine = () => epoch === state.epoch && shownRun.follower === follower && shown.isConnected;
  for (let i = 0; i < 7200 && mine(); i++) {
    let run;
    try {
      run = (await api("GET", `/api/suites/${enc(suite.id)}/runs/${enc(runId)}`)).data;
    } catch (error) {
      if (mine()) say(`Reading the run failed: ${error.message}`, true);
      return;
    }
    if (!mine()) return;
    shown.replaceChildren(...runView(suite, run, box));
    if (!RUN_OPEN.includes(run.status)) {
      await listRuns(suite, box);  // the list says how it ended too
      if (mine()) say(`Run ${run.status}${reasonOf(run)}`, run.status === "failed");
      return;
    }
    say(`Run ${run.status}: ${progressWords(run.progress)}...`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// Spent against the estimate and the budget; an unpriced model makes either unknown, said so rather than "$0.00".
function moneyWords(run) {
  const spent = run.spent_usd === null ? "Spent: unknown (a model is unpriced)" : `Spent ${run.spent_usd_text}`;
  const estimate = run.estimated_usd === null ? "estimate unknown" : `estimated ${run.estimated_usd_text} at least`;
  return `${spent}; ${estimate}${run.max_usd != null ? `; max ${usd(run.max_usd)}` : ""}`;
}

// Why a run ended, when its status does not say it already ("stopped (budget)", not "cancelled (cancelled)").
const reasonOf = (r) => (r.reason && r.reason !== r.status ? ` (${r.reason})` : "");

function progressWords(p) {
  return `${p.branches_done} of ${plural(p.branches_total, "branch", "branches")} ended, ${p.judged} of ${plural(p.cases, "case")} judged`;
}

async function cancelRun(suite, runId, box) {
  const answer = await act("Cancelling the run", () => api("POST", `/api/suites/${enc(suite.id)}/runs/${enc(runId)}/cancel`, {}));
  if (!answer) return;
  await followRun(suite, runId, box);
}

function runView(suite, run, box) {
  const p = run.progress;
  const v = run.verdict;
  const open = RUN_OPEN.includes(run.status);
  const model = v.judge.model ? `, model ${v.judge.model}` : "";
  const questions = new Map(suite.cases.map((c, i) => [c.case_id, `${i + 1}. ${quoted(c.user_text, 60)}`]));
  return [
    el("h3", { "data-status": run.status, text: `Run ${run.status}${reasonOf(run)}: ${run.agents.join(", ")}${run.control ? " and the control" : ""}${run.repeats > 1 ? `, ${run.repeats} repeats` : ""}` }),
    el("div", { class: "run-progress" },
      el("progress", { max: String(Math.max(p.branches_total, 1)), value: String(p.branches_done) }),
      el("span", { text: ` ${progressWords(p)}` })),
    el("div", { class: "run-money", text: moneyWords(run) }),
    el("div", { class: "muted", text: `Judged blind by ${v.judge.agent}${model}${v.judge.criteria ? `; criteria: ${v.judge.criteria}` : ""} · started ${when(run.created_at)}` }),
    open ? el("button", { type: "button", class: "danger", onclick: () => cancelRun(suite, run.id, box), text: "Cancel the run" }) : null,
    el("p", { class: "verdict-headline" }, el("b", { text: v.headline })),
    v.by_agent.length ? el("div", { class: "grid-scroll" }, verdictTable(v)) : null,
    el("ul", { class: "verdict-lines" }, ...v.by_agent.map((a) => el("li", { text: a.summary }))),
    v.by_agent.length ? el("div", { class: "grid-scroll" }, plotOf(suite, run)) : null,
    el("h4", { text: "Cases" }),
    el("div", { class: "grid-scroll" }, el("table", { class: "compare run-cases" },
      el("thead", {}, el("tr", {}, ...["Case", "Best", "Status", "Agents (won-tied-lost)", ""].map((t) => el("th", { text: t })))),
      el("tbody", {}, ...run.cases.map((c) => el("tr", { "data-case": c.case_id, "data-status": c.status },
        // data-label: on a phone each row is a card and each cell says what it is (style.css)
        el("td", { "data-label": "Case", text: questions.get(c.case_id) || c.case_id }),
        el("td", { "data-label": "Best", text: c.best === "source" ? "the source (every agent under 50 % there)" : c.best || (c.status === "done" ? "no single best" : "-") }),
        el("td", { "data-label": "Status", class: c.error ? "error" : "", text: c.error ? `${c.status}: ${c.error}` : c.status }),
        el("td", { "data-label": "Agents (won-tied-lost)", text: c.by_agent.map((a) => `${a.agent_ref} ${a.wins}-${a.ties}-${a.losses}`).join(", ") || "-" }),
        el("td", {}, el("button", { type: "button", onclick: () => go(c.session_id), text: "Open the chat" }),
          // its branches are the run's own user's rows: read through the run, as a table
          c.experiment_ids.length ? el("a", { class: "muted case-branches", href: runAddress(suite.id, run.id, `/cases/${enc(c.case_id)}?format=markdown`), target: "_blank", rel: "noopener", text: " Its branches" }) : null)))))),
    el("a", { class: "muted", href: runAddress(suite.id, run.id, "?format=markdown"), target: "_blank", rel: "noopener", text: "The verdict as Markdown" }),
  ].filter((part) => part != null);
}

// The plot as an <img> of the SVG the API draws, fetched as every call is (with the user's header) and shown as a
// data: address (the page's Content-Security-Policy allows images from itself and data: only); fetched again only
// when a case was judged since, so a poll each second neither refetches nor flickers.
function plotOf(suite, run) {
  const img = el("img", { class: "run-plot", alt: "The run's plot: money per case against the win rate, one point per agent" });
  const key = `${run.id} ${run.progress.judged} ${run.status}`;
  if (shownRun.plot && shownRun.plot.key === key) {
    img.src = shownRun.plot.url;
    return img;
  }
  const headers = { Accept: "image/svg+xml" };
  if (state.mode === "unsecure" && state.user) headers["X-User-Id"] = state.user;
  fetch(`/api/suites/${enc(suite.id)}/runs/${enc(run.id)}/plot.svg`, { headers })
    .then((response) => (response.ok ? response.text() : Promise.reject(new Error(`HTTP ${response.status}`))))
    .then((svg) => {
      shownRun.plot = { key, url: `data:image/svg+xml;charset=utf-8,${enc(svg)}` };
      img.src = shownRun.plot.url;
    })
    .catch((error) => say(`Drawing the run's plot failed: ${error.message}`, true));
  return img;
}

// One row per agent, its outcome first (on a phone the rest scrolls sideways); the control's row is marked: its
// score against the source is the noise floor.
function verdictTable(v) {
  const cols = [
    ["agent", "Agent", (a) => [a.agent_ref, a.control ? el("div", { class: "muted", text: "control: the noise floor" }) : null]],
    ["outcome", "Outcome", (a) => a.outcome || "not judged yet"],
    ["win-rate", "Win rate", (a) => pct(a.win_rate)],
    ["ci95", "95 % CI (conversations)", (a) => (a.ci95 ? `${pct(a.ci95[0])} – ${pct(a.ci95[1])}` : "-")],
    // The interval's n is the conversations (a chat's cases are drawn together); the cases only when they differ.
    ["cases", "Conversations", (a) => (a.conversations === a.cases ? String(a.conversations) : `${a.conversations} (${plural(a.cases, "case")})`)],
    ["record", "Won / tied / lost", (a) => `${a.wins} / ${a.ties} / ${a.losses}${a.invalid + a.failed ? ` (${a.invalid + a.failed} not judged)` : ""}`],
    ["usd", "Median $ / case", (a) => usd(a.cost.per_case.usd)],
  ];
  return el("table", { class: "compare run-verdict" },
    el("thead", {}, el("tr", {}, ...cols.map(([, title]) => el("th", { text: title })))),
    el("tbody", {}, ...v.by_agent.map((a) => el("tr", { "data-agent": a.agent_ref, class: a.control ? "control" : "" },
      ...cols.map(([col, , cell]) => el("td", { "data-col": col, class: col === "outcome" ? `outcome outcome-${a.outcome || "none"}` : "" },
        ...[cell(a)].flat()))))));
}
