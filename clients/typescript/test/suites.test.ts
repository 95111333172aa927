// Suites' cases against a real kagent-fork (scripts/run-tests.mjs starts one on its embedded demo database and sets
// KAGENT_FORK_URL): demo-v1-session, three turns, owned by admin@kagent.dev, kagent's default user.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  type BaseResponse,
  cancelSuiteRun,
  createSuite,
  dryRunSuiteRun,
  exportSuite,
  getExperiment,
  getSuite,
  getSuiteRun,
  getSuiteRunCase,
  getTranscript,
  importSuite,
  keepSuiteRunBranch,
  listInvocations,
  listSuiteRuns,
  listSuites,
  removeCase,
  saveCase,
  startSuiteRun,
  suiteRunPlot,
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

// A run on the demo's replay twin, judged by its scripted judge: the plan, the run followed to its verdict, its
// Markdown and plot, one branch kept into the caller's chats, and the refusals.
test("dryRunSuiteRun, startSuiteRun, getSuiteRun, listSuiteRuns, suiteRunPlot, keepSuiteRunBranch and cancelSuiteRun", async () => {
  const turns = ok(await listInvocations(V1));
  const second = turns[1]?.invocation_id ?? "";
  const suite = ok(await createSuite(`runs ${Date.now()}`, { cases: [{ sessionId: V1, rewindBeforeInvocationId: second }] }));
  const agent = "kagent/k8s-agent-replay";
  const judge = "kagent/demo-judge";

  const plan = ok(await dryRunSuiteRun(suite.id, [agent], judge, { criteria: "Be brief." }));
  assert.equal(plan.dry_run, true);
  assert.equal(plan.cases, 1);
  assert.equal(plan.branches, 1);
  assert.equal(plan.refused, null);
  assert.ok(typeof plan.estimated_usd === "number" && plan.estimated_usd > 0, JSON.stringify(plan));
  assert.deepEqual(ok(await listSuiteRuns(suite.id)), []); // a dry run writes nothing

  const started = ok(await startSuiteRun(suite.id, [agent], judge, { criteria: "Be brief.", idempotencyKey: `k-${Date.now()}` }));
  assert.deepEqual([started.status, started.agents, started.judge, started.progress.branches_total], ["running", [agent], judge, 1]);
  let run = started;
  const deadline = Date.now() + 90_000;
  while (run.status === "running" || run.status === "judging") {
    assert.ok(Date.now() < deadline, `the run never ended: ${JSON.stringify(run)}`);
    await new Promise((resolve) => setTimeout(resolve, 300));
    run = ok(await getSuiteRun(suite.id, started.id));
  }
  assert.equal(run.status, "completed", JSON.stringify(run));
  assert.deepEqual(run.progress, { cases: 1, branches_done: 1, branches_total: 1, judged: 1 });
  assert.equal(run.verdict.judge.agent, judge);
  assert.equal(run.verdict.judge.criteria, "Be brief.");
  const verdict = run.verdict.by_agent[0];
  assert.ok(verdict !== undefined);
  assert.equal(verdict.agent_ref, agent);
  assert.deepEqual([verdict.cases, verdict.conversations], [1, 1]);
  assert.ok(verdict.outcome !== null && verdict.ci95 !== null && verdict.summary.startsWith(agent), JSON.stringify(verdict));
  assert.ok(typeof run.spent_usd === "number" && run.spent_usd > 0 && run.spent_usd_text.startsWith("$"));
  const only = run.cases[0];
  assert.ok(only !== undefined && only.experiment_ids.length === 1);
  assert.deepEqual([only.session_id, only.status], [V1, "done"]);
  assert.deepEqual(ok(await listSuiteRuns(suite.id)).map((r) => [r.id, r.status]), [[started.id, "completed"]]);

  const markdown = ok(await getSuiteRun(suite.id, started.id, { format: "markdown" }));
  assert.match(markdown, new RegExp(`^# Suite run ${started.id} \\(completed\\)`));
  assert.ok(markdown.includes(`| ${agent} | 1 (1) |`), markdown);
  const svg = ok(await suiteRunPlot(suite.id, started.id));
  assert.match(svg, /^<svg /);
  assert.ok(svg.includes("the source (50 %)") && svg.includes(`data-agent="${agent}"`));

  // a branch kept: the run's branches are its own user's (kagent's chat list per user never shows them); one is
  // forked whole into the caller's chats
  const grid = ok(await getExperiment(only.experiment_ids[0] ?? "", { userId: `admin@kagent.dev/suite-run/${started.id}` }));
  const through = ok(await getSuiteRunCase(suite.id, started.id, only.case_id));
  assert.deepEqual(through.experiments.map((e) => e.id), only.experiment_ids);
  failed(await getSuiteRunCase(suite.id, started.id, "no-such-case"), /no started case/);
  const branch = grid.branches[0]?.session_id ?? "";
  failed(await getTranscript(branch), /not found/);
  const kept = ok(await keepSuiteRunBranch(suite.id, started.id, branch));
  assert.notEqual(kept.id, branch);
  assert.equal(kept.fork.parent_session_id, branch);
  ok(await getTranscript(kept.id));

  // refusals in kagent's envelope
  failed(await cancelSuiteRun(suite.id, started.id), `suite run ${started.id} already ended (completed)`);
  failed(await keepSuiteRunBranch(suite.id, started.id, "no-such-branch"), `suite run ${started.id} has no branch no-such-branch`);
  failed(await getSuiteRun(suite.id, "no-such-run"), /not found/);
  failed(await getSuiteRun(suite.id, started.id, { userId: "alice@example.com" }), /not found/);
  failed(await startSuiteRun(suite.id, [], judge), "agents: name the agents to run (1 to 8, namespace/name)");
  const over = ok(await dryRunSuiteRun(suite.id, [agent], judge, { maxUsd: 0.000001 }));
  assert.match(over.refused ?? "", /^max_usd: the run would cost about \$/);
  failed(await startSuiteRun(suite.id, [agent], judge, { maxUsd: 0.000001 }), over.refused ?? "");
  failed(await suiteRunPlot("", started.id), /required/);
});
