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
