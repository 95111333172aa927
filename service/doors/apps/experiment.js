// The experiment view: start one from a turn (agents, turns, the question edited), then its grid (a
// column for the source and one per branch, a row per turn), read again every second while it runs.
const ExperimentView = (() => {
  const state = { sessionId: null, token: null, turns: [] };
  const $ = (id) => document.getElementById(id);
  const key = (turn) => turn.invocation_id ?? turn.task_id;

  async function showForm() {
    const data = await Bridge.call("app_branches", { app_token: state.token, session_id: state.sessionId });
    state.turns = data.turns;
    const select = $("turn");
    // A turn is named by its invocation id, or by its task for an agent that writes none.
    select.replaceChildren(...data.turns.map((t, i) =>
      el("option", { value: key(t) }, (i + 1) + ". " + short(t.user_text || "(no text)", 70))));
    const pick = () => {
      const turn = state.turns.find((t) => key(t) === select.value);
      $("question").value = (turn && turn.user_text) || "";
    };
    select.onchange = pick;
    pick();
    const agentId = data.session.agent_id || "";
    $("agents").value = agentId.includes("__NS__") ? agentId.replace("__NS__", "/").replaceAll("_", "-") : "";
    $("title").textContent = "Experiment on " + (data.session.name || data.session.id);
    $("form").hidden = false;
    $("form").onsubmit = (event) => {
      event.preventDefault();
      startExperiment();
    };
  }

  async function startExperiment() {
    const button = $("start");
    button.disabled = true;
    show($("status"), "Starting…");
    try {
      const turn = state.turns.find((t) => key(t) === $("turn").value);
      const edited = $("question").value;
      const turns = $("turns").value.trim();
      const named = turn && turn.invocation_id === null
        ? { rewind_before_task_id: turn.task_id } : { rewind_before_invocation_id: $("turn").value };
      const answer = await Bridge.call("app_start_experiment", {
        app_token: state.token, session_id: state.sessionId, ...named,
        agents: $("agents").value.split(",").map((a) => a.trim()).filter(Boolean),
        turns: /^\d+$/.test(turns) ? Number(turns) : turns,
        // An emptied question asks the turn's own (the service refuses an empty text, as its HTTP body does).
        message_text: turn && edited !== "" && edited !== (turn.user_text || "") ? edited : null,
        tools: $("tools").value,
      });
      $("form").hidden = true;
      follow(answer.experiment.id);
    } catch (error) {
      show($("status"), error.message, "error");
      button.disabled = false;
    }
  }

  async function cancel(experimentId) {
    const button = $("cancel");
    button.disabled = true;
    try {
      render(await Bridge.call("app_cancel_experiment", { app_token: state.token, experiment_id: experimentId }));
    } catch (error) {
      show($("status"), error.message, "error");
      button.disabled = false;
    }
  }

  async function follow(experimentId) {
    $("cancel").onclick = () => cancel(experimentId);
    try {
      const grid = await Bridge.call("app_experiment", { app_token: state.token, experiment_id: experimentId });
      render(grid);
      if (grid.status === "running" || grid.status === "judging") setTimeout(() => follow(experimentId), 1000);
    } catch (error) {
      show($("status"), error.message, "error");
    }
  }

  function cell(turn) {
    if (!turn) return el("td", { class: "muted" }, "…");
    if (!turn.answer && /working|submitted/i.test(turn.state || "")) return el("td", { class: "muted" }, "answering…");
    return el("td", {}, el("div", {}, short(turn.answer, 300) || "(no answer)"),
      el("div", { class: "muted" }, turn.total_tokens + " tokens · " + (turn.state || "")),
      turn.tool_policy ? el("div", { class: "muted" }, "tools: " + turn.tool_policy.recorded + " recorded, " +
        turn.tool_policy.live + " live, " + turn.tool_policy.missed + " missed, " + turn.tool_policy.refused + " refused") : null);
  }

  // What the judge said of a branch against the source (the experiment's judgment), under its name.
  const SAID = { right: "judge: better than the source", left: "judge: worse than the source",
    tie: "judge: as good as the source", invalid: "judge: no usable answer", failed: "judge: not judged",
    pending: "judge: judging…" };
  function verdictOf(grid, branch) {
    const pair = grid.judgment && grid.judgment.pairs.find((p) => p.left_job_id === null && p.right_job_id === branch.job_id);
    return pair ? el("div", { class: "verdict" }, SAID[pair.outcome] || pair.outcome) : "";
  }

  function render(grid) {
    const columns = [grid.source, ...grid.branches];
    const rows = Math.max(...columns.map((c) => c.turns.length), grid.source.turns.length);
    const head = el("tr", {}, el("th", {}, "Turn"), el("th", {}, "Source"),
      ...grid.branches.map((b) => el("th", {}, (b.agent_ref || "?") + (grid.repeats > 1 ? " #" + b.repeat : ""),
        el("div", { class: "muted" }, b.status + (b.error ? ": " + b.error : "")), verdictOf(grid, b))));
    const body = [];
    for (let i = 0; i < rows; i++) {
      const question = (grid.branches[0] && grid.branches[0].turns[i] && grid.branches[0].turns[i].question) ||
        (grid.source.turns[i] && grid.source.turns[i].question) || "";
      body.push(el("tr", { "data-row": i + 1 }, el("td", {}, el("b", {}, String(i + 1) + ". "), short(question, 120)),
        ...columns.map((c) => cell(c.turns[i]))));
    }
    const table = $("grid");
    table.replaceChildren(head, ...body);
    table.hidden = false;
    table.dataset.status = grid.status;
    $("cancel").hidden = grid.status !== "running" && grid.status !== "judging";
    const lines = grid.judgment ? grid.judgment.lines : [];
    $("verdict").replaceChildren(...lines.map((line) => el("li", {}, line)));
    $("verdict").hidden = !lines.length;
    show($("status"), "Experiment " + grid.status + (grid.finished_at ? " (finished)" : ""),
      grid.status === "failed" ? "error" : grid.status === "running" ? "" : "ok");
  }

  function start() {
    Bridge.on("ui/notifications/tool-result", async (params) => {
      try {
        const view = resultData(params);
        state.sessionId = view.session_id;
        state.token = view.app_token;
        if (view.experiment_id) await follow(view.experiment_id);
        else await showForm();
      } catch (error) {
        show($("status"), error.message, "error");
      }
    });
    Bridge.connect("kagent-fork experiment").catch((error) => show($("status"), error.message, "error"));
  }

  return { start };
})();
