// Test stand-in for kagent's chat host of MCP Apps (ui/src/components/mcp-apps/McpAppRenderer.tsx): the same
// host library and versions kagent's UI pins (@mcp-ui/client's AppRenderer over @modelcontextprotocol/ext-apps),
// wired as kagent wires it: the resource and the app's tool calls go through the host's bridge (here
// window.hostReadResource / window.hostCallTool, which the test serves the way kagent's controller does),
// theme and locale handed over after the app's first size report, `ui/message` turned into a chat turn.
import React, { useCallback, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";
import { AppRenderer } from "@mcp-ui/client";

window.hostLog = { messages: [], errors: [], sizes: 0 };

function App({ config }) {
  const [connected, setConnected] = useState(false);
  const [csp, setCsp] = useState(undefined);
  const [error, setError] = useState(null);
  const sandbox = useMemo(() => {
    const url = new URL("/sandbox_proxy.html", window.location.origin);
    url.searchParams.set("parentOrigin", window.location.origin);
    return { url, csp };
  }, [csp]);
  const hostContext = useMemo(
    () => (connected ? { theme: config.theme || "light", locale: "en-US" } : undefined),
    [connected, config.theme],
  );
  const hostCapabilities = useMemo(
    () => ({ serverTools: {}, serverResources: {}, openLinks: {}, message: { text: {} } }), []);
  const onReadResource = useCallback(async ({ uri }) => {
    const result = await window.hostReadResource(uri);
    const ui = result.contents?.[0]?._meta?.ui;
    if (ui?.csp) setCsp(ui.csp);
    return result;
  }, []);
  const onCallTool = useCallback(async (params) => window.hostCallTool(params.name, params.arguments || {}), []);
  const onMessage = useCallback(async (params) => {
    const text = (params.content || []).filter((b) => b.type === "text").map((b) => b.text).join("\n").trim();
    if (!text) return { isError: true };
    window.hostLog.messages.push(text);
    const bubble = document.createElement("div");
    bubble.className = "message user";
    bubble.textContent = text;
    document.getElementById("chat").append(bubble);
    return {};
  }, []);
  const onFallbackRequest = useCallback(async () => ({}), []);
  const onSizeChanged = useCallback(() => {
    window.hostLog.sizes += 1;
    setConnected(true);
  }, []);
  const onError = useCallback((err) => {
    window.hostLog.errors.push(err.message);
    setError(err.message);
  }, []);
  if (error) return <div className="app-error">MCP App error: {error}</div>;
  return (
    <AppRenderer
      toolName={config.toolName}
      toolResourceUri={config.resourceUri}
      toolInput={config.toolInput}
      toolResult={config.toolResult}
      sandbox={sandbox}
      hostContext={hostContext}
      hostCapabilities={hostCapabilities}
      onReadResource={onReadResource}
      onCallTool={onCallTool}
      onMessage={onMessage}
      onFallbackRequest={onFallbackRequest}
      onSizeChanged={onSizeChanged}
      onError={onError}
    />
  );
}

// What kagent's chat hands the app of a tool call (ui/src/lib/mcpAppToolResult.ts): the stored result, with
// the call's arguments merged under its structured content.
function asKagentShows(result, args) {
  if (!result || Object.keys(args || {}).length === 0) return result;
  return { ...result, structuredContent: { ...args, ...(result.structuredContent || {}) } };
}

// One agent message holding one app, as kagent's chat shows a tool call with a UI resource.
window.renderApp = (given) => {
  const config = { ...given, toolResult: asKagentShows(given.toolResult, given.toolInput) };
  const chat = document.getElementById("chat");
  const bubble = document.createElement("div");
  bubble.className = "message agent app";
  chat.append(bubble);
  createRoot(bubble).render(<App config={config} />);
};
