// What goes on the wire, with a recording fetch: the URL, the method, the body and the headers
// kagent's server actions forward (Authorization, X-Share-Token, and X-User-Id when given).

import assert from "node:assert/strict";
import { test } from "node:test";

import { type FetchLike, forkSession, forwardedHeaders, listInvocations, rewindSession, undoRewind } from "../src/index.js";

interface Sent {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: unknown;
}

function recorder(status = 200, answer: unknown = { error: false, data: {}, message: "ok" }) {
  const sent: Sent[] = [];
  const fetch: FetchLike = async (url, init) => {
    sent.push({ url, method: init.method, headers: init.headers, body: init.body && JSON.parse(init.body) });
    const text = typeof answer === "string" ? answer : JSON.stringify(answer);
    return {
      ok: status >= 200 && status < 300,
      status,
      statusText: status === 200 ? "OK" : "Error",
      headers: { get: () => "application/json" },
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
