// Against a real kagent-fork (scripts/run-tests.mjs starts one on its embedded demo database and
// sets KAGENT_FORK_URL): demo-legacy-session (kagent 0.10.x rows) and demo-v1-session (kagent main
// rows), three turns each, owned by admin@kagent.dev.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  type BaseResponse,
  compareSessions,
  discardBranches,
  forkSession,
  getForkTree,
  getExperiment,
  getTranscript,
  getWhatif,
  judgeExperiment,
  voteExperiment,
  startExperiment,
  startWhatif,
  type Invocation,
  listInvocations,
  type TreeNode,
  rewindSession,
  turnActions,
  undoDiscard,
  undoRewind,
} from "../src/index.js";

const LEGACY = "demo-legacy-session";
const V1 = "demo-v1-session";
const OWNER = "admin@kagent.dev";
const READ_ONLY_SHARE = process.env.KF_TEST_SHARE_READ_ONLY;
const READ_WRITE_SHARE = process.env.KF_TEST_SHARE_READ_WRITE;

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

async function turns(sessionId: string, options = {}): Promise<Invocation[]> {
  return ok(await listInvocations(sessionId, options));
}

test("listInvocations: the turns in order, every page or one page", async () => {
  for (const session of [LEGACY, V1]) {
    const all = await listInvocations(session);
    const items = ok(all);
    assert.equal(all.message, "end");
    assert.equal(items.length, 3);
    assert.deepEqual(
      items.map((t) => t.user_text),
      ["What's the weather in Paris?", "And in Berlin?", "Which city is warmer?"],
    );
    for (const t of items) {
      assert.match(t.invocation_id ?? "", /^e-/);
      assert.equal(t.framework, "adk");
      assert.ok(t.task_id);
    }
    const first = await listInvocations(session, { limit: 2 });
    assert.equal(ok(first).length, 2);
    assert.notEqual(first.message, "end");
    const rest = await listInvocations(session, { limit: 2, after: items[1]!.invocation_id! });
    assert.deepEqual(ok(rest), [items[2]]);
    assert.equal(rest.message, "end");
  }
});

test("listInvocations: each turn carries the ids a rendered chat message keeps, and turnActions reads them", async () => {
  for (const session of [LEGACY, V1]) {
    const items = await turns(session);
    for (const t of items) {
      assert.ok(t.task_id !== null && t.task_ids.includes(t.task_id), JSON.stringify(t));
      assert.ok(t.message_ids.length > 0 && t.text_count > 0, JSON.stringify(t));
      assert.ok(Array.isArray(t.call_ids) && Array.isArray(t.response_ids));
    }
    // A user message as kagent shows it (its stored messageId), and the reply after it (its task's id).
    const second = items[1]!;
    const user = { messageId: second.message_ids[0], taskId: second.task_id!, role: "user", parts: [{ kind: "text", text: "And in Berlin?" }] };
    const reply = { messageId: "fresh-uuid", taskId: second.task_id!, role: 2, parts: [{ content: { $case: "text", value: "12 °C" } }] };
    const chat = [user, reply];
    assert.deepEqual(turnActions(user, chat, items), {
      turn: second, index: 1, forkBefore: second.invocation_id, rewindBefore: second.invocation_id,
      forkBeforeTask: second.task_id, rewindBeforeTask: second.task_id, restoreText: "And in Berlin?",
    });
    const after = turnActions(reply, chat, items);
    assert.equal(after?.forkBefore, items[2]!.invocation_id);
    // A fork ending with that reply holds the first two turns.
    const fork = ok(await forkSession(session, after!.forkBefore, { userId: OWNER }));
    assert.equal(ok(await listInvocations(fork.id, { userId: OWNER })).length, 2);
    assert.equal(fork.deleted_at, undefined);
    assert.ok(fork.fork.summary && fork.fork.summary.turns === 1);
  }
});

test("forkSession: the whole conversation into a new session", async () => {
  const answer = await forkSession(V1);
  const fork = ok(answer);
  assert.equal(answer.message, "Successfully forked session");
  assert.match(fork.id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(fork.user_id, OWNER);
  assert.equal(fork.agent_id, "kagent__NS__k8s_agent");
  assert.match(fork.name, /^Fork of /);
  assert.ok(!Number.isNaN(Date.parse(fork.created_at)));
  assert.equal(fork.fork.parent_session_id, V1);
  assert.equal(fork.fork.rewind_before_invocation_id, null);
  assert.equal(fork.fork.boundary_found, false);
  assert.equal(fork.fork.depth, 1);
  const source = await turns(V1);
  const copied = await turns(fork.id);
  assert.deepEqual(
    copied.map((t) => [t.invocation_id, t.user_text]),
    source.map((t) => [t.invocation_id, t.user_text]),
  );
});

test("forkSession: at a turn picked from listInvocations, with a name", async () => {
  for (const session of [LEGACY, V1]) {
    const source = await turns(session);
    const second = source[1]!.invocation_id;
    const fork = ok(await forkSession(session, second, { name: "Try Berlin again" }));
    assert.equal(fork.name, "Try Berlin again");
    assert.equal(fork.fork.rewind_before_invocation_id, second);
    assert.equal(fork.fork.boundary_found, true);
    assert.deepEqual(
      (await turns(fork.id)).map((t) => t.invocation_id),
      [source[0]!.invocation_id],
    );
    assert.equal((await turns(session)).length, 3, "the source is never changed");
  }
});

test("forkSession and rewindSession: a turn named by its task, as kagent's UI knows a message", async () => {
  for (const session of [LEGACY, V1]) {
    const source = await turns(session);
    const task = source[1]!.task_id!;
    const fork = ok(await forkSession(session, null, { rewindBeforeTaskId: task }));
    assert.equal(fork.fork.rewind_before_task_id, task);
    assert.equal(fork.fork.rewind_before_invocation_id, source[1]!.invocation_id);
    assert.equal(fork.fork.framework, "adk");
    assert.deepEqual(
      (await turns(fork.id)).map((t) => t.invocation_id),
      [source[0]!.invocation_id],
    );
    // Both names at once are refused (400), as the API says.
    const both = await forkSession(session, source[1]!.invocation_id, { rewindBeforeTaskId: task });
    failed(both, /not both/);
    // A rewind of the fork by the task its copy of turn 1 has.
    const copied = await turns(fork.id);
    const rewound = ok(await rewindSession(fork.id, null, { rewindBeforeTaskId: copied[0]!.task_id! }));
    assert.equal(rewound.rewind.rewind_before_task_id, copied[0]!.task_id);
    assert.equal(rewound.rewind.rewind_before_invocation_id, source[0]!.invocation_id);
    assert.deepEqual(await turns(fork.id), []);
    ok(await undoRewind(fork.id, rewound.rewind.id));
  }
});

test("forkSession: a retry with the same Idempotency-Key returns the same fork", async () => {
  const key = `key-${Date.now()}`;
  const first = ok(await forkSession(LEGACY, null, { idempotencyKey: key }));
  const again = await forkSession(LEGACY, null, { idempotencyKey: key });
  assert.equal(ok(again).id, first.id);
  failed(await forkSession(LEGACY, null, { idempotencyKey: key, name: "another body" }), /Idempotency-Key/);
});

test("rewindSession and undoRewind: hide the later turns, then bring them back", async () => {
  const fork = ok(await forkSession(LEGACY, null, { name: "rewind me" }));
  const before = await turns(fork.id);
  const rewound = await rewindSession(fork.id, before[1]!.invocation_id!);
  const session = ok(rewound);
  assert.equal(rewound.message, "Successfully rewound session");
  assert.equal(session.id, fork.id);
  assert.equal(session.name, "rewind me");
  assert.equal(session.rewind.rewind_before_invocation_id, before[1]!.invocation_id);
  assert.ok(session.rewind.events_removed > 0);
  assert.ok(session.rewind.tasks_removed > 0);
  assert.equal(session.rewind.undone_at, undefined);
  assert.deepEqual(
    (await turns(fork.id)).map((t) => t.invocation_id),
    [before[0]!.invocation_id],
  );

  const undone = ok(await undoRewind(fork.id, session.rewind.id));
  assert.equal(undone.id, fork.id);
  assert.equal(undone.rewind.id, session.rewind.id);
  assert.ok(undone.rewind.undone_at);
  assert.deepEqual(await turns(fork.id), before);

  failed(await undoRewind(fork.id, session.rewind.id), /already undone|undone/i);
});

test("errors: kagent's BaseResponse with the service's error text", async () => {
  failed(await forkSession("no-such-session"), "Session not found");
  failed(await rewindSession("no-such-session", "e-1"), "Session not found");
  failed(await listInvocations("no-such-session"), "Session not found");
  failed(await undoRewind(LEGACY, "no-such-rewind"), /not found/i);
  failed(await forkSession(LEGACY, "e-no-such-turn", { ifBoundaryMissing: "error" }), /not found|missing/i);
  failed(await rewindSession(LEGACY, "e-no-such-turn"), /not found|missing/i);
  // Another user does not see admin's session: the same 404 as a missing one.
  failed(await forkSession(LEGACY, null, { userId: "alice@example.com" }), "Session not found");
});

test("errors: no URL, nothing listening, missing ids", async () => {
  const saved = process.env.KAGENT_FORK_URL;
  delete process.env.KAGENT_FORK_URL;
  try {
    failed(await forkSession(LEGACY), /KAGENT_FORK_URL/);
  } finally {
    process.env.KAGENT_FORK_URL = saved;
  }
  failed(await forkSession(LEGACY, null, { baseUrl: "http://127.0.0.1:9" }), /^Network error - could not reach/);
  failed(await rewindSession("", "e-1"), /required/);
  failed(await rewindSession(LEGACY, ""), /required/);
  failed(await undoRewind(LEGACY, ""), /required/);
});

test("share links: X-Share-Token as kagent forwards it", { skip: !READ_ONLY_SHARE && "no share links" }, async () => {
  const alice = { userId: "alice@example.com" };
  // A fork never writes to its source: a read-only share may fork, and the fork is the caller's.
  const fork = ok(await forkSession(LEGACY, null, { ...alice, shareToken: READ_ONLY_SHARE! }));
  assert.equal(fork.user_id, "alice@example.com");
  // As kagent's getAuthHeadersFromContext() hands them over: a record of forwarded headers.
  const viaHeaders = ok(await forkSession(LEGACY, null, { ...alice, headers: { "X-Share-Token": READ_ONLY_SHARE! } }));
  assert.equal(viaHeaders.user_id, "alice@example.com");
  // A rewind writes: refused through a read-only share.
  const first = (await turns(LEGACY))[1]!.invocation_id;
  failed(await rewindSession(LEGACY, first, { ...alice, shareToken: READ_ONLY_SHARE! }), /read-only/i);
  // Through a read-write share it is allowed and the session stays the owner's; undo restores it.
  const rewound = ok(await rewindSession(LEGACY, first, { ...alice, shareToken: READ_WRITE_SHARE! }));
  assert.equal(rewound.user_id, OWNER);
  ok(await undoRewind(LEGACY, rewound.rewind.id, { ...alice, shareToken: READ_WRITE_SHARE! }));
  assert.equal((await turns(LEGACY)).length, 3);
  failed(await forkSession(LEGACY, null, { shareToken: "not-a-share" }), /share/i);
});

// The service under test is the embedded demo, whose scripted agent answers over A2A: an experiment
// replays the demo's later turns on its replay twin (the demo's agent itself has tools, and is refused
// without tools: "live"), and its grid is read back until every branch ended.
test("startExperiment and getExperiment: a real experiment, read back as a grid", async () => {
  const turns = ok(await listInvocations(V1));
  const second = turns[1];
  assert.ok(second !== undefined);
  failed(await startExperiment(V1, second.invocation_id, { agents: ["kagent/k8s-agent"] }), /kagent-fork replay-twin kagent\/k8s-agent/);
  const started = ok(await startExperiment(V1, second.invocation_id, { agents: ["kagent/k8s-agent-replay"], turns: "all" }));
  assert.equal(started.status, "running");
  assert.equal(started.branches.length, 1);
  let grid = started;
  const deadline = Date.now() + 60_000;
  while (grid.status === "running") {
    assert.ok(Date.now() < deadline, `the experiment never ended: ${JSON.stringify(grid)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
    grid = ok(await getExperiment(started.id));
  }
  const branch = grid.branches[0];
  assert.ok(branch !== undefined);
  assert.equal(grid.status, "completed", JSON.stringify(grid));
  assert.equal(branch.turns.length, turns.length - 1);
  assert.equal(grid.source.turns.length, turns.length - 1);
  assert.deepEqual(branch.turns.map((t) => t.question), grid.source.turns.map((t) => t.question));
  // priced: the demo's agent row names gpt-4o-mini, whose price genai-prices knows
  assert.equal(branch.totals.model, "gpt-4o-mini");
  assert.ok(typeof branch.totals.cost_usd === "number" && branch.totals.cost_usd > 0, JSON.stringify(branch.totals));
  assert.ok((branch.totals.input_tokens ?? 0) > 0 && (branch.totals.output_tokens ?? 0) > 0);
  assert.equal(grid.discard, null);
  assert.equal(branch.discarded, false);
  // its branch cleared out of the chat list, and back
  const cleared = ok(await discardBranches(started.id));
  assert.deepEqual(cleared.discard?.discarded_session_ids, [branch.session_id]);
  assert.equal(cleared.branches[0]?.discarded, true);
  failed(await getTranscript(branch.session_id), /not found/);
  const again = await discardBranches(started.id);
  assert.equal(again.message, "Branches already discarded");
  failed(await discardBranches(started.id, { keep: branch.session_id }), /already discarded/);
  const back = ok(await undoDiscard(started.id));
  assert.deepEqual(back.discard?.restored_session_ids, [branch.session_id]);
  ok(await getTranscript(branch.session_id));
  failed(await discardBranches(started.id, { keep: "no-such-branch" }), /has no branch no-such-branch/);
  failed(await getExperiment("no-such-experiment"), "experiment no-such-experiment not found");
  failed(await startExperiment(V1, ""), /required/);

  // judged: the demo's scripted agent as the judge (each pair asked in both orders), the verdict read back
  const judging = ok(await judgeExperiment(started.id, "kagent/demo-judge", { criteria: "Be brief." }));
  assert.equal(judging.status, "judging");
  assert.equal(judging.judgment?.judge_agent_ref, "kagent/demo-judge");
  let judged = judging;
  while (judged.status === "judging") {
    assert.ok(Date.now() < deadline + 60_000, `never judged: ${JSON.stringify(judged.judgment)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
    judged = ok(await getExperiment(started.id));
  }
  assert.equal(judged.judgment?.status, "completed", JSON.stringify(judged.judgment));
  assert.equal(judged.judgment?.calls, 2);
  assert.equal(judged.judgment?.pairs[0]?.said.length, 2);
  assert.equal(judged.judgment?.criteria, "Be brief.");
  assert.equal(judged.verdict?.judge.agent, "kagent/demo-judge");
  assert.ok(judged.verdict?.headline);
  assert.equal(judged.verdict?.pairs.length, 1);
  const voted = ok(await voteExperiment(started.id, { a: null, b: branch.job_id ?? "" }, "b"));
  assert.equal(voted.votes?.votes, 1);
  assert.equal(voted.verdict?.votes?.by_agent[0]?.wins, 1);
  assert.equal(voted.verdict?.votes?.voters, 1);
  failed(await judgeExperiment("no-such-experiment", "kagent/scripted-agent"), "experiment no-such-experiment not found");
  failed(await judgeExperiment(started.id, "not-a-ref"), /judge.agent must be namespace\/name/);
});

// A what-if takes a judge as an experiment does: its one branch judged against the source, in both orders.
test("startWhatif with a judge: the job reads judging, then holds its verdict", async () => {
  const [, second] = await turns(V1);
  assert.ok(second !== undefined);
  const started = ok(await startWhatif(V1, second.invocation_id, {
    agentRef: "kagent/k8s-agent-replay", judge: { agent: "kagent/demo-judge", criteria: "Be brief." },
  }));
  assert.equal(started.job.judgment?.status, "waiting");
  let job = started.job;
  const deadline = Date.now() + 120_000;
  while (job.status === "running" || job.status === "judging") {
    assert.ok(Date.now() < deadline, `never judged: ${JSON.stringify(job)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
    job = ok(await getWhatif(started.job.id));
  }
  assert.equal(job.status, "completed", JSON.stringify(job));
  assert.equal(job.judgment?.status, "completed", JSON.stringify(job.judgment));
  assert.equal(job.judgment?.calls, 2);
  assert.equal(job.judgment?.criteria, "Be brief.");
  assert.deepEqual(job.verdict?.pairs.map((p) => [p.a, p.b]), [[null, job.id]]);
  assert.equal(job.verdict?.by_agent[0]?.agent_ref, "kagent/k8s-agent-replay");
  failed(await startWhatif(V1, second.invocation_id, { judge: { agent: "not-a-ref" } }), /judge.agent must be namespace\/name/);
});

test("compareSessions: the turns after the common part, aligned by position", async () => {
  const [, second] = await turns(V1);
  assert.ok(second !== undefined);
  const fork = ok(await forkSession(V1, second.invocation_id, { name: "compare me" }));
  const c = ok(await compareSessions(V1, fork.id));
  assert.equal(c.common_turns, 1);
  assert.equal(c.left.session_id, V1);
  assert.equal(c.right.session_id, fork.id);
  assert.equal(c.left.turns_after, 2);
  assert.equal(c.right.turns_after, 0);
  assert.deepEqual(
    c.aligned.map((row) => [row.left?.question ?? null, row.right]),
    [
      ["And in Berlin?", null],
      ["Which city is warmer?", null],
    ],
  );
  const first = c.aligned[0]?.left;
  assert.ok(first !== null && first !== undefined);
  assert.equal(first.invocation_id, second.invocation_id);
  assert.equal(typeof first.answer, "string");
  assert.equal(typeof first.total_tokens, "number");
  // the other way round: the fork on the left
  const back = ok(await compareSessions(fork.id, V1));
  assert.equal(back.aligned[0]?.left, null);
  assert.equal(back.aligned[0]?.right?.question, "And in Berlin?");
  failed(await compareSessions(V1, "no-such-session"), /not found/);
  failed(await compareSessions(V1, ""), /required/);
});

test("getForkTree: each session's agent, its turns now, and the turn each fork was made at", async () => {
  const [, second] = await turns(V1);
  assert.ok(second !== undefined);
  const fork = ok(await forkSession(V1, second.invocation_id, { name: "tree me" }));
  const whole = ok(await forkSession(V1, null, { name: "tree me whole" }));
  const root = ok(await getForkTree(fork.id));
  assert.equal(root.session_id, V1);
  assert.equal(root.status, "ok");
  assert.equal(root.fork, null);
  assert.equal(root.fork_turn, null);
  assert.equal(root.turns, 3);
  assert.equal(typeof root.agent_id, "string");
  const find = (id: string): TreeNode => {
    const node = root.forks.find((n) => n.session_id === id);
    assert.ok(node !== undefined, `${id} is not under the root`);
    return node;
  };
  const mine = find(fork.id);
  assert.equal(mine.name, "tree me");
  assert.equal(mine.turns, 1);
  assert.equal(mine.events, fork.fork.events_copied);
  assert.equal(mine.fork_turn, 2);
  assert.equal(mine.fork_question, "And in Berlin?");
  assert.equal(mine.fork?.rewind_before_invocation_id, second.invocation_id);
  assert.equal(typeof mine.fork?.created_at, "string");
  assert.equal(mine.agent_id, root.agent_id);
  const copy = find(whole.id);
  assert.equal(copy.turns, 3);
  assert.equal(copy.fork_turn, null);
  assert.equal(copy.fork_question, null);
  failed(await getForkTree("no-such-session"), /not found/);
});
