// What goes on the wire, with a recording fetch: the URL, the method, the body and the headers
// kagent's server actions forward (Authorization, X-Share-Token, and X-User-Id when given).

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  cancelExperiment,
  cancelWhatif,
  discardBranches,
  type FetchLike,
  forkSession,
  forwardedHeaders,
  getExperiment,
  getTranscript,
  getWhatif,
  listExperiments,
  listInvocations,
  listRewinds,
  listWhatifs,
  rewindSession,
  startSuiteRun,
  startWhatif,
  suiteRunPlot,
  undoDiscard,
  undoRewind,
} from "../src/index.js";

interface Sent {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: unknown;
}

function recorder(status = 200, answer: unknown = { error: false, data: {}, message: "ok" }, type = "application/json") {
  const sent: Sent[] = [];
  const fetch: FetchLike = async (url, init) => {
    sent.push({ url, method: init.method, headers: init.headers, body: init.body && JSON.parse(init.body) });
    const text = typeof answer === "string" ? answer : JSON.stringify(answer);
    return {
      ok: status >= 200 && status < 300,
      status,
      statusText: status === 200 ? "OK" : "Error",
      headers: { get: (name: string) => (name.toLowerCase() === "content-type" ? type : null) },
      text: async () => text,
    };
  };
  return { fetch, sent };
}

test("forkSession sends the body, the forwarded headers and an idempotency key", async () => {
  const { fetch, sent } = recorder(201, { error: false, data: { id: "new" }, message: "Successfully forked session" });
  const answer = await forkSession("s/1", "e-2", {
    baseUrl: "http://kagent-fork.kagent.svc:8083/",
    fetch,
    headers: { Authorization: "Bearer from-proxy", "x-share-token": "tok", host: "ui", "X-Extra": "1" },
    userId: "alice",
    name: "n",
    taskLayout: "merged",
    ifBoundaryMissing: "error",
    idempotencyKey: "k-1",
  });
  assert.deepEqual(answer, { message: "Successfully forked session", data: { id: "new" } });
  assert.equal(sent.length, 1);
  const [req] = sent;
  assert.equal(req!.url, "http://kagent-fork.kagent.svc:8083/api/sessions/s%2F1/fork");
  assert.equal(req!.method, "POST");
  assert.deepEqual(req!.body, {
    rewind_before_invocation_id: "e-2",
    name: "n",
    task_layout: "merged",
    if_boundary_missing: "error",
  });
  assert.deepEqual(req!.headers, {
    accept: "application/json",
    "content-type": "application/json",
    authorization: "Bearer from-proxy",
    "x-share-token": "tok",
    "x-extra": "1",
    "x-user-id": "alice",
    "idempotency-key": "k-1",
  });
});

test("explicit options win over forwarded headers; a base URL may end with /api", async () => {
  const { fetch, sent } = recorder(200, { error: false, data: { session: { id: "s" }, rewind: { id: "r" } }, message: "m" });
  const answer = await rewindSession("s", "e-1", {
    baseUrl: "https://kagent.example.com/api",
    fetch,
    headers: { authorization: "Bearer old", "x-share-token": "old" },
    authorization: "Bearer new",
    shareToken: "new",
    force: true,
  });
  assert.deepEqual(answer, { message: "m", data: { id: "s", rewind: { id: "r" } } });
  assert.equal(sent[0]!.url, "https://kagent.example.com/api/sessions/s/rewind");
  assert.deepEqual(sent[0]!.body, { rewind_before_invocation_id: "e-1", force: true });
  assert.equal(sent[0]!.headers.authorization, "Bearer new");
  assert.equal(sent[0]!.headers["x-share-token"], "new");
  assert.equal(sent[0]!.headers["x-user-id"], undefined);

  await undoRewind("s", "r/1", { baseUrl: "http://h:1", fetch });
  assert.equal(sent[1]!.url, "http://h:1/api/sessions/s/rewinds/r%2F1/undo");
  assert.deepEqual(sent[1]!.body, {});
});

test("forkSession without a turn sends an empty body; GET sends no body", async () => {
  const { fetch, sent } = recorder(201, { error: false, data: {}, message: "m" });
  await forkSession("s", undefined, { baseUrl: "http://h", fetch });
  await forkSession("s", null, { baseUrl: "http://h", fetch });
  assert.deepEqual(sent.map((s) => s.body), [{}, {}]);
  const list = recorder(200, { error: false, data: [], message: "end" });
  await listInvocations("s", { baseUrl: "http://h", fetch: list.fetch, limit: 5, after: "e-1" });
  assert.equal(list.sent[0]!.url, "http://h/api/sessions/s/invocations?limit=5&after=e-1");
  assert.equal(list.sent[0]!.method, "GET");
  assert.equal(list.sent[0]!.body, undefined);
  assert.equal(list.sent[0]!.headers["content-type"], undefined);
});

test("what-if, experiments, transcript and rewinds: paths, query, bodies and the idempotency key", async () => {
  const { fetch, sent } = recorder(202, { error: false, data: { job: { id: "j" } }, message: "What-if started" });
  const o = { baseUrl: "http://h", fetch, userId: "alice" };
  const started = await startWhatif("s/1", "e-2", {
    ...o, agentRef: "kagent/other", name: "n", turns: "all", messageText: "again?", maxContextTokens: 5000, idempotencyKey: "k",
  });
  assert.deepEqual(started, { message: "What-if started", data: { job: { id: "j" } } });
  assert.equal(sent[0]!.url, "http://h/api/sessions/s%2F1/whatif");
  assert.deepEqual(sent[0]!.body, {
    rewind_before_invocation_id: "e-2", agent_ref: "kagent/other", name: "n", turns: "all",
    message: { text: "again?" }, max_context_tokens: 5000,
  });
  assert.equal(sent[0]!.headers["idempotency-key"], "k");
  assert.equal(sent[0]!.headers["x-user-id"], "alice");
  await startWhatif("s", "e-1", { baseUrl: "http://h", fetch });
  assert.deepEqual(sent[1]!.body, { rewind_before_invocation_id: "e-1" });
  assert.equal(sent[1]!.headers["idempotency-key"], undefined);
  // a turn known by its task alone (an agent that writes no invocation id)
  await startWhatif("s", null, { baseUrl: "http://h", fetch, rewindBeforeTaskId: "t-2", turns: "all" });
  assert.deepEqual(sent[2]!.body, { rewind_before_task_id: "t-2", turns: "all" });
  sent.pop();
  // a judge, as an experiment takes it
  await startWhatif("s", "e-1", { baseUrl: "http://h", fetch, judge: { agent: "kagent/judge", criteria: "Be strict." } });
  assert.deepEqual(sent[2]!.body, { rewind_before_invocation_id: "e-1", judge: { agent: "kagent/judge", criteria: "Be strict." } });
  sent.pop();
  await getWhatif("j/1", o);
  await cancelWhatif("j/1", o);
  await listWhatifs("s", o);
  await cancelExperiment("x/1", o);
  await discardBranches("x/1", { ...o, keep: "b/2" });
  await discardBranches("x/1", o);
  await undoDiscard("x/1", o);
  await listExperiments("s", o);
  await getExperiment("x/1", { ...o, format: "json" });
  await listRewinds("s", o);
  await getTranscript("s", { ...o, before: "e 3&x" });
  assert.deepEqual(
    sent.slice(2).map((r) => [r.method, r.url.slice("http://h/api".length), r.body]),
    [
      ["GET", "/whatif/j%2F1", undefined],
      ["POST", "/whatif/j%2F1/cancel", {}],
      ["GET", "/sessions/s/whatifs", undefined],
      ["POST", "/experiments/x%2F1/cancel", {}],
      ["POST", "/experiments/x%2F1/discard", { keep: "b/2" }],
      ["POST", "/experiments/x%2F1/discard", {}],
      ["POST", "/experiments/x%2F1/discard/undo", {}],
      ["GET", "/sessions/s/experiments", undefined],
      ["GET", "/experiments/x%2F1?format=json", undefined],
      ["GET", "/sessions/s/rewinds", undefined],
      ["GET", "/sessions/s/transcript?before=e+3%26x", undefined],
    ],
  );
  assert.ok(sent.slice(2).every((r) => r.headers["x-user-id"] === "alice"));
});

test("format markdown: the document's text as data, a refusal as kagent's envelope", async () => {
  const doc = recorder(200, "# Experiment x: completed\n", "text/markdown; charset=utf-8");
  const grid = await getExperiment("x", { baseUrl: "http://h", fetch: doc.fetch, format: "markdown" });
  assert.deepEqual(grid, { message: "OK", data: "# Experiment x: completed\n" });
  assert.equal(doc.sent[0]!.url, "http://h/api/experiments/x?format=markdown");
  assert.equal(doc.sent[0]!.headers.accept, "text/markdown, application/json");
  await getTranscript("s", { baseUrl: "http://h", fetch: doc.fetch, format: "markdown", before: "e-2" });
  assert.equal(doc.sent[1]!.url, "http://h/api/sessions/s/transcript?before=e-2&format=markdown");
  // A format chosen at run time: the answer is either type, told apart by `typeof data`.
  const format = ["json", "markdown"][1] as "json" | "markdown";
  const either = await getTranscript("s", { baseUrl: "http://h", fetch: doc.fetch, format });
  assert.equal(typeof either.data, "string");
  const refused = recorder(404, { error: "Session not found" });
  const answer = await getTranscript("s", { baseUrl: "http://h", fetch: refused.fetch, format: "markdown" });
  assert.deepEqual(answer, { message: "Session not found", error: "Session not found" });
  // A 200 that is not Markdown (a proxy's page, say) is not handed over as the document.
  const html = recorder(200, "<html></html>", "text/html");
  const wrong = await getTranscript("s", { baseUrl: "http://h", fetch: html.fetch, format: "markdown" });
  assert.match(wrong.error!, /without a Markdown document/);
});

test("a failure that is not kagent's envelope still answers an error text", async () => {
  const { fetch } = recorder(502, "<html>Bad Gateway</html>");
  const answer = await forkSession("s", null, { baseUrl: "http://h", fetch });
  assert.deepEqual(Object.keys(answer).sort(), ["error", "message"]);
  assert.match(answer.error!, /^kagent-fork answered 502/);
  const odd = recorder(200, "not json");
  assert.match((await forkSession("s", null, { baseUrl: "http://h", fetch: odd.fetch })).error!, /envelope/);
});

test("a timeout answers an error text", async () => {
  const slow: FetchLike = (_url, init) =>
    new Promise((_ok, fail) => init.signal?.addEventListener("abort", () => fail(init.signal?.reason)));
  // AbortSignal.timeout's timer does not keep Node alive (a real request's socket does).
  const keepAlive = setTimeout(() => undefined, 10_000);
  try {
    const answer = await forkSession("s", null, { baseUrl: "http://h", fetch: slow, timeoutMs: 50 });
    assert.match(answer.error!, /^Request timed out after 50 ms/);
  } finally {
    clearTimeout(keepAlive);
  }
});

test("forwardedHeaders picks what kagent's server actions forward", () => {
  const incoming = new Headers({
    Authorization: "Bearer jwt",
    "X-Share-Token": "tok",
    "X-User-Id": "not-forwarded-by-default",
    "X-Auth-Request-User": "bob",
    Connection: "keep-alive",
  });
  assert.deepEqual(forwardedHeaders(incoming, ""), { authorization: "Bearer jwt", "x-share-token": "tok" });
  assert.deepEqual(forwardedHeaders(incoming, " X-Auth-Request-User , connection"), {
    authorization: "Bearer jwt",
    "x-share-token": "tok",
    "x-auth-request-user": "bob",
  });
});

test("a suite run's body and paths on the wire", async () => {
  const { fetch, sent } = recorder(202, { error: false, data: { id: "r" }, message: "Suite run started" });
  const o = { baseUrl: "http://h", fetch, userId: "alice" };
  await startSuiteRun("s/1", ["kagent/a", "kagent/b"], "kagent/judge", {
    ...o, repeats: 3, control: true, criteria: "Be strict.", tools: "replay", maxUsd: 2, turns: "all", idempotencyKey: "k",
  });
  assert.equal(sent[0]!.url, "http://h/api/suites/s%2F1/runs");
  assert.deepEqual(sent[0]!.body, {
    agents: ["kagent/a", "kagent/b"], judge: { agent: "kagent/judge", criteria: "Be strict." }, repeats: 3, turns: "all",
    control: true, tools: "replay", max_usd: 2,
  });
  assert.equal(sent[0]!.headers["idempotency-key"], "k");
  await startSuiteRun("s", ["kagent/a"], "kagent/judge", o);
  assert.deepEqual(sent[1]!.body, { agents: ["kagent/a"], judge: { agent: "kagent/judge" } });
  const svg = recorder(200, "<svg/>", "image/svg+xml");
  assert.deepEqual(await suiteRunPlot("s", "r/1", { baseUrl: "http://h", fetch: svg.fetch }), { message: "OK", data: "<svg/>" });
  assert.equal(svg.sent[0]!.url, "http://h/api/suites/s/runs/r%2F1/plot.svg");
  assert.equal(svg.sent[0]!.headers.accept, "image/svg+xml, application/json");
});
