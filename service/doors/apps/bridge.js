"use strict";
// A small guest of the MCP Apps protocol (ext-apps, 2026-01-26): JSON-RPC 2.0 over postMessage with the
// host page (kagent's chat). Every call that can fail is caught by its caller and shown in the view, so
// the host never sees an unhandled rejection. Chat content is only ever set as text (textContent).
const Bridge = (() => {
  let nextId = 1;
  const pending = new Map();
  const listeners = {};
  const post = (message) => window.parent.postMessage({ jsonrpc: "2.0", ...message }, "*");

  function request(method, params) {
    const id = nextId++;
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject });
      post({ id, method, params });
    });
  }

  function applyContext(context) {
    if (context && (context.theme === "dark" || context.theme === "light")) {
      document.documentElement.dataset.theme = context.theme;
    }
  }

  window.addEventListener("message", (event) => {
    if (event.source !== window.parent) return;
    const message = event.data;
    if (!message || message.jsonrpc !== "2.0") return;
    if (message.id !== undefined && !message.method) {
      const waiting = pending.get(message.id);
      if (!waiting) return;
      pending.delete(message.id);
      if (message.error) waiting.reject(new Error(message.error.message || "the host refused the call"));
      else waiting.resolve(message.result);
    } else if (message.method && message.id !== undefined) {
      post({ id: message.id, result: {} }); // ping, resource teardown: nothing to keep
    } else if (message.method === "ui/notifications/host-context-changed") {
      applyContext(message.params);
    } else if (message.method && listeners[message.method]) {
      listeners[message.method](message.params || {});
    }
  });

  function reportSize() {
    const height = Math.ceil(document.documentElement.scrollHeight);
    post({ method: "ui/notifications/size-changed", params: { height } });
  }

  return {
    on(method, listener) {
      listeners[method] = listener;
    },
    async connect(name) {
      const result = await request("ui/initialize", {
        appInfo: { name, version: "1.0.0" },
        appCapabilities: {},
        protocolVersion: "2026-01-26",
      });
      applyContext(result && result.hostContext);
      post({ method: "ui/notifications/initialized", params: {} });
      new ResizeObserver(reportSize).observe(document.body);
      reportSize();
    },
    // A tool of kagent-fork, through the host's bridge; a tool error becomes a thrown Error with the
    // service's own message.
    async call(name, args) {
      const result = await request("tools/call", { name, arguments: args });
      const text = ((result && result.content) || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
      if (result && result.isError) throw new Error(text || "the tool failed");
      return JSON.parse(text);
    },
    say(text) {
      return request("ui/message", { role: "user", content: [{ type: "text", text }] });
    },
  };
})();

// Small helpers shared by the views.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "onclick") node.addEventListener("click", value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
  return node;
}

function show(status, text, kind) {
  status.textContent = text || "";
  status.className = "status" + (kind ? " " + kind : "");
}

function short(text, length) {
  if (!text) return "";
  return text.length > length ? text.slice(0, length - 1) + "…" : text;
}

// The agent's call's result, as the host hands it over: kagent puts the view's data in structuredContent
// (merged with the call's arguments), and the same JSON is the result's text.
function resultData(params) {
  const structured = params && params.structuredContent;
  if (structured && typeof structured.app_token === "string") return structured;
  const text = ((params && params.content) || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
  if (params && params.isError) throw new Error(text || "the tool failed");
  return JSON.parse(text);
}
