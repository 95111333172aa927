// The transcript, the rewinds list, what-if jobs and the experiments list, against a real kagent-fork
// (scripts/run-tests.mjs starts one on its embedded demo database and sets KAGENT_FORK_URL; the demo's
// scripted agent answers the what-ifs over A2A): demo-legacy-session (kagent 0.10.x rows) and
// demo-v1-session (kagent main rows), three turns each, owned by admin@kagent.dev.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  type BaseResponse,
  cancelExperiment,
  dryRunExperiment,
  dryRunWhatif,
  cancelWhatif,
  type Experiment,
  forkSession,
  getExperiment,
  getTranscript,
  getWhatif,
  listExperiments,
  listInvocations,
  listRewinds,
  listWhatifs,
  rewindSession,
  startExperiment,
  startWhatif,
  undoRewind,
  type WhatifJob,
} from "../src/index.js";

/** An ADK turn's invocation id (the demo's agents write one on every turn). */
function inv(turn: { invocation_id: string | null } | undefined): string {
  assert.ok(turn?.invocation_id, "an ADK turn carries its invocation id");
  return turn.invocation_id;
}

const LEGACY = "demo-legacy-session";
const V1 = "demo-v1-session";
const OWNER = "admin@kagent.dev";
const QUESTIONS = ["What's the weather in Paris?", "And in Berlin?", "Which city is warmer?"];

// client.test.ts rewinds demo-legacy-session for a while (its share-link test): these tests read a copy.
async function legacyCopy(): Promise<string> {
  return ok(await forkSession(LEGACY, null, { name: "legacy copy" })).id;
}

assert.ok(process.env.KAGENT_FORK_URL, "run through `npm test`: it starts kagent-fork and sets KAGENT_FORK_URL");

function ok<T>(answer: BaseResponse<T>): T {
  assert.equal(answer.error, undefined, `unexpected error: ${answer.error}`);
  assert.deepEqual(Object.keys(answer).sort(), ["data", "message"]);
  assert.equal(typeof answer.message, "string");
  assert.ok(answer.data !== undefined);
  return answer.data;
}

/** kagent's createErrorResponse shape: the error text in both fields, no data. */
function failed<T>(answer: BaseResponse<T>, text: string | RegExp): void {
  assert.deepEqual(Object.keys(answer).sort(), ["error", "message"], JSON.stringify(answer));
  assert.equal(answer.message, answer.error);
  if (typeof text === "string") assert.equal(answer.error, text);
  else assert.match(answer.error ?? "", text);
}

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    assert.ok(Date.now() < deadline, `${what} never ended: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

const userTexts = (t: { turns: { messages: { role: string; kind: string; text?: string }[] }[] }) =>
  t.turns.map((turn) => turn.messages.find((m) => m.role === "user" && m.kind === "text")?.text ?? null);

test("getTranscript: the turns as the agent sees them, before a turn, and as Markdown", async () => {
  for (const session of [await legacyCopy(), V1]) {
    const listed = ok(await listInvocations(session));
    const answer = await getTranscript(session);
    const transcript = ok(answer);
    assert.equal(answer.message, "Successfully read transcript");
    assert.equal(transcript.session_id, session);
    assert.deepEqual(userTexts(transcript), QUESTIONS);
    assert.deepEqual(
      transcript.turns.map((t) => [t.index, t.invocation_id, t.task_id]),
      listed.map((t, i) => [i, t.invocation_id, t.task_id]),
    );
    const first = transcript.turns[0]!;
    assert.ok(first.messages.some((m) => m.role === "agent" && m.kind === "tool_call" && typeof m.tool_name === "string"));
    assert.ok(first.usage.total_tokens >= first.usage.prompt_tokens);
    assert.ok(transcript.estimated_context_tokens > 0);
    assert.deepEqual(transcript.warnings, []);

    // Before the third turn: what the agent would see in a fork there.
    const before = ok(await getTranscript(session, { before: inv(listed[2]), format: "json" }));
    assert.deepEqual(userTexts(before), QUESTIONS.slice(0, 2));
    assert.ok(before.estimated_context_tokens < transcript.estimated_context_tokens);

    const markdown = await getTranscript(session, { format: "markdown", before: inv(listed[1]) });
    const text = ok(markdown);
    assert.equal(typeof text, "string");
    assert.match(text, new RegExp(`^# .*\\n\\nSession \`${session}\``));
    assert.match(text, /## Turn 1/);
    assert.ok(text.includes(QUESTIONS[0]!));
    assert.ok(!text.includes(QUESTIONS[1]!), "the Markdown stops before the turn asked for");
    assert.match(text, /1 turn, about \d+ context tokens/);
  }
  failed(await getTranscript("no-such-session"), "Session not found");
  failed(await getTranscript("no-such-session", { format: "markdown" }), "Session not found");
  failed(await getTranscript(V1, { before: "e-no-such-turn" }), /not found/);
  failed(await getTranscript(V1, { before: "" }), /before/);
  failed(await getTranscript(V1, { userId: "alice@example.com" }), "Session not found");
  failed(await getTranscript(""), /required/);
});

test("listRewinds: newest first, undoable until undone", async () => {
  const fork = ok(await forkSession(V1, null, { name: "rewinds list" }));
  assert.deepEqual(ok(await listRewinds(fork.id)), []);
  const listed = ok(await listInvocations(fork.id));
  const older = ok(await rewindSession(fork.id, inv(listed[2]))).rewind;
  const newer = ok(await rewindSession(fork.id, inv(listed[1]))).rewind;
  const answer = await listRewinds(fork.id);
  const entries = ok(answer);
  assert.equal(answer.message, "Successfully listed rewinds");
  assert.deepEqual(
    entries.map((e) => [e.id, e.rewind_before_invocation_id, e.undone_at, e.undoable]),
    [
      [newer.id, inv(listed[1]), null, true],
      [older.id, inv(listed[2]), null, false],
    ],
  );
  assert.equal(entries[0]!.requested_by, OWNER);
  assert.equal(entries[0]!.events_removed, newer.events_removed);
  assert.equal(entries[0]!.summary?.turns, 1);
  ok(await undoRewind(fork.id, newer.id));
  const after = ok(await listRewinds(fork.id));
  assert.equal(typeof after[0]!.undone_at, "string");
  assert.equal(after[0]!.undoable, false);
  assert.equal(after[1]!.undoable, true, "the older rewind can be undone once the newer one is");
  failed(await listRewinds("no-such-session"), "Session not found");
  failed(await listRewinds(fork.id, { userId: "alice@example.com" }), "Session not found");
});

test("startWhatif, getWhatif, listWhatifs: the scripted agent answers in a fork, turn by turn", async () => {
  const listed = ok(await listInvocations(V1));
  const second = inv(listed[1]);
  const key = `whatif-${Date.now()}`;
  const answer = await startWhatif(V1, second, {
    agentRef: "kagent/scripted-agent",
    reads: "live", // its tools only read (the demo's tool server, on the demo's word): they run live when asked
    name: "what if Madrid",
    turns: "all",
    messageText: "And in Madrid?",
    maxContextTokens: 100_000,
    idempotencyKey: key,
  });
  const started = ok(answer);
  assert.equal(answer.message, "What-if started");
  assert.equal(started.job.status, "running");
  assert.equal(started.job.parent_session_id, V1);
  assert.equal(started.job.rewind_before_invocation_id, second);
  assert.equal(started.job.agent_ref, "kagent/scripted-agent");
  assert.equal(started.job.session_id, started.session.id);
  assert.equal(started.job.turns_total, 2);
  assert.equal(started.session.name, "what if Madrid");
  assert.equal(started.session.fork.rewind_before_invocation_id, second);
  assert.equal(started.job.experiment_id, null);
  // What its tools do: replay, nothing that acts runs, and its reads live as asked
  assert.deepEqual(started.job.tool_policy, { mode: "replay", reads: "live" });
  assert.equal(started.job.tools?.agent_ref, "kagent/scripted-agent");
  assert.equal(started.job.tools?.known, true); // the demo writes its agents' rows in kagent's agent table

  // A retry with the same key answers the same job; another body under that key is refused.
  const again = await startWhatif(V1, second, {
    agentRef: "kagent/scripted-agent", reads: "live", name: "what if Madrid", turns: "all",
    messageText: "And in Madrid?", maxContextTokens: 100_000, idempotencyKey: key,
  });
  assert.equal(ok(again).job.id, started.job.id);
  failed(await startWhatif(V1, second, { idempotencyKey: key }), /Idempotency-Key/);

  const job = await until(
    async () => ok(await getWhatif(started.job.id)),
    (j: WhatifJob) => j.status !== "running",
    "the what-if",
  );
  assert.equal(job.status, "completed", JSON.stringify(job));
  assert.equal(job.turns_done, 2);
  assert.equal(job.error, null);
  assert.equal(typeof job.task_id, "string");
  assert.match(job.result?.last_agent_text ?? "", /is the warmest/); // the last re-asked turn: the comparison
  assert.ok((job.result?.total_tokens ?? 0) > 0);
  // The fork now holds the first turn, the edited question and the source's third one, answered.
  const transcript = ok(await getTranscript(job.session_id));
  assert.deepEqual(userTexts(transcript), [QUESTIONS[0], "And in Madrid?", QUESTIONS[2]]);

  const jobs = ok(await listWhatifs(V1));
  assert.ok(jobs.some((j) => j.id === job.id && j.status === "completed"));
  failed(await listWhatifs(V1, { userId: "alice@example.com" }), "Session not found");

  failed(await cancelWhatif(job.id), `what-if job ${job.id} already ended (completed)`);
  failed(await getWhatif(job.id, { userId: "alice@example.com" }), `what-if job ${job.id} not found`);
  failed(await getWhatif("no-such-job"), "what-if job no-such-job not found");
  failed(await cancelWhatif("no-such-job"), "what-if job no-such-job not found");
  failed(await startWhatif(V1, second, { agentRef: "kagent/no-such-agent" }), /no-such-agent/);
  failed(await startWhatif(V1, second, { maxContextTokens: 1 }), /max_context_tokens|context/);
  failed(await startWhatif(V1, second, { messageText: "" }), /text|message/);
  failed(await startWhatif("no-such-session", second), "Session not found");
  failed(await startWhatif(V1, second, { tools: { mode: "live", reads: "recorded" } }), /applies to tools/);
  failed(await listWhatifs("no-such-session"), "Session not found");
  failed(await getWhatif(""), /required/);
  failed(await cancelWhatif(""), /required/);
  failed(await startWhatif(V1, ""), /required/);
});

test("cancelWhatif: a running job is cancelled, an ended one is refused", async (t) => {
  const source = await legacyCopy();
  const first = inv(ok(await listInvocations(source))[0]);
  const started = ok(await startWhatif(source, first, { agentRef: "kagent/k8s-agent-replay", turns: "all" }));
  const answer = await cancelWhatif(started.job.id);
  // The scripted agent is quick: the job may have ended before the cancel arrived, and the service says so.
  if (answer.error !== undefined) {
    failed(answer, new RegExp(`^what-if job ${started.job.id} already ended \\((completed|failed)\\)$`));
    t.diagnostic("the job ended before the cancel arrived: only the refusal was checked");
    return;
  }
  const cancelled = ok(answer);
  assert.equal(answer.message, "Successfully cancelled what-if job");
  assert.equal(cancelled.id, started.job.id);
  assert.equal(cancelled.status, "cancelled");
  assert.equal(ok(await getWhatif(started.job.id)).status, "cancelled");
  failed(await cancelWhatif(started.job.id), `what-if job ${started.job.id} already ended (cancelled)`);
});

test("listExperiments, getExperiment as Markdown, cancelExperiment", async (t) => {
  const source = await legacyCopy();
  const listed = ok(await listInvocations(source));
  const second = inv(listed[1]);
  const started = ok(
    await startExperiment(source, second, {
      agents: ["kagent/k8s-agent", "kagent/scripted-agent"], turns: 2, tools: "live",
    }),
  );
  const grid = await until(
    async () => ok(await getExperiment(started.id)),
    (e: Experiment) => e.status !== "running",
    "the experiment",
  );
  assert.equal(grid.status, "completed", JSON.stringify(grid));
  assert.deepEqual(
    grid.branches.map((b) => [b.agent_ref, b.status, b.turns.length]),
    [
      ["kagent/k8s-agent", "completed", 2],
      ["kagent/scripted-agent", "completed", 2],
    ],
  );

  const answer = await listExperiments(source);
  const experiments = ok(answer);
  assert.equal(answer.message, "Successfully listed experiments");
  const mine = experiments.find((e) => e.id === started.id);
  assert.deepEqual(mine && { ...mine, created_at: "", finished_at: "" }, {
    id: started.id, status: "completed", rewind_before_invocation_id: second, rewind_before_task_id: null,
    turns_requested: 2, turns: 2, repeats: 1, on_approval: "stop", created_at: "", finished_at: "",
    tool_policy: { mode: "live", reads: "live" }, agents: ["kagent/k8s-agent", "kagent/scripted-agent"],
    judge: null, outcome: null,
  });
  assert.equal(typeof mine?.finished_at, "string");
  failed(await listExperiments(source, { userId: "alice@example.com" }), "Session not found");

  const markdown = ok(await getExperiment(started.id, { format: "markdown" }));
  assert.ok(markdown.startsWith(`# Experiment ${started.id}: completed`), markdown);
  assert.ok(markdown.includes("| kagent/k8s-agent (completed) | kagent/scripted-agent (completed) |"), markdown);
  assert.ok(markdown.includes(`| 1. ${QUESTIONS[1]} |`), markdown);
  assert.ok(markdown.includes(`| 2. ${QUESTIONS[2]} |`), markdown);
  assert.equal(ok(await getExperiment(started.id, { format: "json" })).id, started.id);

  failed(await cancelExperiment(started.id), `experiment ${started.id} already ended (completed)`);
  failed(await cancelExperiment("no-such-experiment"), "experiment no-such-experiment not found");
  failed(await getExperiment("no-such-experiment", { format: "markdown" }), "experiment no-such-experiment not found");
  failed(await getExperiment(started.id, { userId: "alice@example.com" }), `experiment ${started.id} not found`);
  failed(await listExperiments("no-such-session"), "Session not found");
  failed(await cancelExperiment(""), /required/);
  failed(await listExperiments(""), /required/);

  // Cancelled at once, every branch still running is cancelled (or the experiment ended first).
  const running = ok(await startExperiment(V1, inv(ok(await listInvocations(V1))[0]), { turns: "all", tools: "live" }));
  const cancel = await cancelExperiment(running.id);
  if (cancel.error !== undefined) {
    failed(cancel, new RegExp(`^experiment ${running.id} already ended \\((completed|failed)\\)$`));
    t.diagnostic("the experiment ended before the cancel arrived: only the refusal was checked");
    return;
  }
  const cancelled = ok(cancel);
  assert.equal(cancel.message, "Successfully cancelled experiment");
  assert.equal(cancelled.status, "cancelled");
  assert.ok(cancelled.branches.every((b) => b.status !== "running"), JSON.stringify(cancelled.branches));
  assert.equal(ok(await getExperiment(running.id)).status, "cancelled");
});

test("dryRunExperiment, dryRunWhatif: each agent's tools by class and the refusal it would get, nothing written", async () => {
  const second = inv(ok(await listInvocations(V1))[1]);
  const before = ok(await listExperiments(V1)).length;
  const plan = ok(await dryRunExperiment(V1, second, {
    agents: ["kagent/scripted-agent", "kagent/k8s-agent"], repeats: 2, tools: "live",
  }));
  assert.equal(plan.dry_run, true);
  assert.equal(plan.branches, 4);
  assert.equal(plan.refused, null);
  assert.deepEqual(plan.tools, { mode: "live", reads: "live" });
  assert.deepEqual(plan.arms.map((a) => [a.agent_ref, a.known, a.acts.length]), [
    ["kagent/scripted-agent", true, 0], ["kagent/k8s-agent", true, 1], // set_alert, the demo's tool that acts
  ]);
  // unsaid, a replay: the demo's agent has tools and is no twin, so the plan says the refusal and the twin to make
  const refused = ok(await dryRunExperiment(V1, second, { agents: ["kagent/k8s-agent"] }));
  assert.match(refused.refused ?? "", /kagent-fork replay-twin kagent\/k8s-agent/);
  const capped = ok(await dryRunWhatif(V1, second, { agentRef: "kagent/scripted-agent", maxContextTokens: 1 }));
  assert.match(capped.refused ?? "", /over the limit of 1/);
  assert.equal(capped.tools, null);
  assert.equal(ok(await listExperiments(V1)).length, before);
});
