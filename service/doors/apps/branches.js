// The branches view: the conversation's turns (fork before, rewind to here), its rewinds (undo), its
// fork tree and a compare of two branches. Every action is a kagent-fork tool called through the host.
const BranchesView = (() => {
  const state = { sessionId: null, token: null, data: null, busy: false };
  const $ = (id) => document.getElementById(id);

  async function load() {
    state.data = await Bridge.call("app_branches", { app_token: state.token, session_id: state.sessionId });
    render();
  }

  // One action at a time; its failure is shown as the service's message and nothing else changes.
  async function act(label, action) {
    if (state.busy) return;
    state.busy = true;
    show($("status"), label + "…");
    try {
      const done = await action();
      await load();
      show($("status"), done, "ok");
    } catch (error) {
      show($("status"), error.message, "error");
    } finally {
      state.busy = false;
    }
  }

  function chatLink(path) {
    return path ? " The new chat: " + path : "";
  }

  // A turn named by its invocation id, or by its task when its agent writes none (docs/frameworks.md).
  function named(turn) {
    return turn.invocation_id ? { rewind_before_invocation_id: turn.invocation_id } : { rewind_before_task_id: turn.task_id };
  }

  function fork(turn, n) {
    act("Forking", async () => {
      const answer = await Bridge.call("app_fork", {
        app_token: state.token, session_id: state.sessionId, ...named(turn),
      });
      const text = "I forked this chat before turn " + n + " (\"" + short(turn.user_text, 80) + "\")." +
        chatLink(answer.chat_path);
      await Bridge.say(text).catch(() => undefined);
      return "Forked before turn " + n + ": " + (answer.chat_path || answer.fork.id);
    });
  }

  function rewindTo(turn, n) {
    act("Rewinding", async () => {
      const answer = await Bridge.call("app_rewind", {
        app_token: state.token, session_id: state.sessionId, ...named(turn),
      });
      const text = "I rewound this chat to before turn " + n + " (rewind " + answer.rewind.id +
        "; undo it from the branches view). Reload the chat to see it: " + (state.data.chat_path || state.sessionId);
      await Bridge.say(text).catch(() => undefined);
      return "Rewound to before turn " + n + ".";
    });
  }

  function undo(entry) {
    act("Undoing", async () => {
      await Bridge.call("app_undo", { app_token: state.token, session_id: state.sessionId, rewind_id: entry.id });
      return "The rewind is undone.";
    });
  }

  function renderTurns() {
    const list = $("turns");
    list.replaceChildren();
    state.data.turns.forEach((turn, i) => {
      const n = i + 1;
      list.append(el("li", { "data-turn": turn.invocation_id || turn.task_id },
        el("span", { class: "n" }, n + "."),
        el("span", { class: "q" }, turn.user_text || "(no text)"),
        el("span", { class: "actions" },
          el("button", { onclick: () => fork(turn, n), title: "A new chat holding the turns before this one" },
            "Fork before this turn"),
          el("button", { onclick: () => rewindTo(turn, n), title: "Hide this turn and every later one" },
            "Rewind to here"))));
    });
    if (!state.data.turns.length) list.append(el("li", {}, el("span", { class: "muted" }, "No turns.")));
  }

  function renderRewinds() {
    const list = $("rewinds");
    list.replaceChildren();
    for (const entry of state.data.rewinds) {
      list.append(el("li", {},
        entry.undone_at ? "Undone: " : "Rewind: ",
        entry.events_removed + " events hidden, " + entry.created_at.slice(0, 19).replace("T", " ") + " ",
        entry.undoable ? el("button", { onclick: () => undo(entry) }, "Undo") : null));
    }
    if (!state.data.rewinds.length) list.append(el("li", { class: "muted" }, "None."));
  }

  function renderTree() {
    const ticked = new Set();
    const compareButton = $("compare");
    const node = (n) => {
      const box = el("input", { type: "checkbox", "data-session": n.session_id, style: "width:auto" });
      box.addEventListener("change", () => {
        if (box.checked) ticked.add(n.session_id);
        else ticked.delete(n.session_id);
        compareButton.disabled = ticked.size !== 2;
      });
      const here = n.session_id === state.sessionId ? " (this chat)" : "";
      const at = n.fork_turn ? ", forked before turn " + n.fork_turn : "";
      const item = el("li", {}, box, " ", n.name || n.session_id, here,
        el("span", { class: "muted" }, " " + (n.turns ?? "?") + " turns" + at));
      if (n.forks.length) item.append(el("ul", { class: "tree" }, ...n.forks.map(node)));
      return item;
    };
    $("tree").replaceChildren(node(state.data.tree));
    compareButton.disabled = true;
    compareButton.onclick = () => compareTwo([...ticked]);
  }

  async function compareTwo([left, right]) {
    show($("status"), "Comparing…");
    try {
      const c = await Bridge.call("app_compare", { app_token: state.token, session_id: left, other_session_id: right });
      const head = el("tr", {}, el("th", {}, "#"), el("th", {}, c.left.name || c.left.session_id),
        el("th", {}, c.right.name || c.right.session_id));
      const cell = (t) => el("td", {}, t ? el("div", {}, el("b", {}, short(t.question, 200)), el("div", {},
        short(t.answer, 400)), el("div", { class: "muted" }, t.total_tokens + " tokens")) : "—");
      const rows = c.aligned.map((row, i) => el("tr", {}, el("td", {}, c.common_turns + i + 1), cell(row.left),
        cell(row.right)));
      $("comparison").replaceChildren(el("h2", {}, "Compare"),
        el("div", { class: "muted" }, c.common_turns + " turns in common"),
        el("div", { class: "grid-wrap" }, el("table", { id: "compare-table" }, head, ...rows)));
      show($("status"), "");
    } catch (error) {
      show($("status"), error.message, "error");
    }
  }

  function render() {
    const s = state.data.session;
    $("title").textContent = "Branches of " + (s.name || s.id);
    $("where").textContent = state.data.chat_path || s.id;
    renderTurns();
    renderRewinds();
    renderTree();
  }

  function start() {
    Bridge.on("ui/notifications/tool-result", async (params) => {
      try {
        const view = resultData(params);
        state.sessionId = view.session_id;
        state.token = view.app_token;
        await load();
      } catch (error) {
        show($("status"), error.message, "error");
      }
    });
    Bridge.connect("kagent-fork branches").catch((error) => show($("status"), error.message, "error"));
  }

  return { start };
})();
