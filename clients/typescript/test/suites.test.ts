// Suites' cases against a real kagent-fork (scripts/run-tests.mjs starts one on its embedded demo database and sets
// KAGENT_FORK_URL): demo-v1-session, three turns, owned by admin@kagent.dev, kagent's default user.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  type BaseResponse,
  createSuite,
  exportSuite,
  getSuite,
  importSuite,
  listInvocations,
  listSuites,
  removeCase,
  saveCase,
} from "../src/index.js";

const V1 = "demo-v1-session";
const QUESTIONS = ["What's the weather in Paris?", "And in Berlin?", "Which city is warmer?"];

assert.ok(process.env.KAGENT_FORK_URL, "run through `npm test`: it starts kagent-fork and sets KAGENT_FORK_URL");

function ok<T>(answer: BaseResponse<T>): T {
  assert.equal(answer.error, undefined, `unexpected error: ${answer.error}`);
  assert.ok(answer.data !== undefined);
  return answer.data;
}

function failed<T>(answer: BaseResponse<T>, text: string | RegExp): void {
  assert.deepEqual(Object.keys(answer).sort(), ["error", "message"], JSON.stringify(answer));
  if (typeof text === "string") assert.equal(answer.error, text);
  else assert.match(answer.error ?? "", text);
}

test("createSuite, saveCase, getSuite, listSuites, exportSuite, importSuite and removeCase", async () => {
  const turns = ok(await listInvocations(V1));
  const first = turns[0]?.invocation_id ?? "";
  const second = turns[1]?.invocation_id ?? "";
  const name = `weather ${Date.now()}`;
  const made = ok(await createSuite(name, { cases: [{ sessionId: V1, rewindBeforeInvocationId: second, turns: "all" }] }));
  assert.deepEqual(made.cases.map((c) => [c.session_id, c.rewind_before_invocation_id, c.turns, c.user_text, c.agent_ref]), [
    [V1, second, "all", QUESTIONS[1], "kagent/k8s-agent"],
  ]);
  const saved = ok(await saveCase(made.id, { sessionId: V1, rewindBeforeInvocationId: first, message: "And in Rome?" }));
  assert.deepEqual(saved.cases.map((c) => [c.rewind_before_invocation_id, c.turns, c.message]), [
    [second, "all", null],
    [first, 1, { text: "And in Rome?" }],
  ]);
  assert.deepEqual(ok(await getSuite(made.id)), saved);
  assert.ok(ok(await listSuites()).some((s) => s.id === made.id && s.name === name && s.cases === 2));

  // the file, and the same cases made again from it
  const file = ok(await exportSuite(made.id));
  assert.match(file, /^kind: kagent-fork\/suite$/m);
  const again = ok(await importSuite(file));
  assert.notEqual(again.id, made.id);
  const spec = (c: { rewind_before_invocation_id: string | null; turns: number | "all"; message: unknown }) => [
    c.rewind_before_invocation_id, c.turns, c.message,
  ];
  assert.deepEqual(again.cases.map(spec), saved.cases.map(spec));
  const json = ok(await importSuite(JSON.stringify({ name: "from JSON", cases: [{ session_id: V1, rewind_before_invocation_id: first }] }), { format: "json" }));
  assert.equal(json.cases.length, 1);

  const fewer = ok(await removeCase(made.id, saved.cases[0]?.case_id ?? ""));
  assert.deepEqual(fewer.cases.map((c) => c.rewind_before_invocation_id), [first]);

  // refusals in kagent's envelope, nothing saved
  failed(await saveCase(made.id, { sessionId: V1, rewindBeforeInvocationId: "e-no-such-turn" }), `invocation e-no-such-turn not found in session ${V1}`);
  failed(await getSuite(made.id, { userId: "alice@example.com" }), "Suite not found");
  failed(await importSuite("name: [unclosed"), /^the suite file is not valid YAML/);
  failed(await removeCase(made.id, "no-such-case"), `case no-such-case not found in suite ${made.id}`);
  assert.equal(ok(await getSuite(made.id)).cases.length, 1);
});
