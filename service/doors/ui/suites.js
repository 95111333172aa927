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
  const cases = suite.cases.map((c, i) => el("li", { "data-case": c.case_id },
    el("span", { text: `${i + 1}. ${quoted(c.user_text || "", 80)} · ${c.agent_ref || "agent unknown"} · ${c.turns === "all" ? "every turn from there" : plural(c.turns, "turn")}${c.message ? ` · asked ${quoted(c.message.text, 40)}` : ""} ` }),
    el("span", { class: "actions" },
      el("button", { type: "button", onclick: () => go(c.session_id), text: "Open the chat" }),
      el("button", { type: "button", class: "danger", onclick: () => removeCase(suite, c, i + 1), text: "Remove" }))));
  return el("li", { class: "turn", "data-suite": suite.id },
    el("b", { text: `${suite.name} (${plural(suite.cases.length, "case")})` }),
    el("div", { class: "muted mono", text: `created ${when(suite.created_at)} · kagent-fork suite show ${suite.id}` }),
    el("ol", { class: "suite-cases" }, ...cases),
    el("span", { class: "actions" }, el("button", { type: "button", onclick: () => showFile(suite, file), text: "Show as YAML" })),
    file);
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
