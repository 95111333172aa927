// turnOfMessage and turnActions on chats as kagent's UI renders them (no service needed): the rendered
// messages below are what each line's extractMessagesFromTasks and live stream make of the task layouts
// kagent's runtimes and kagent-fork write (kagent ui/src/lib/messageHandlers.ts, main 5229184e and
// release/v0.10.x 03e950f6).

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";

import { type ChatMessageLike, type Invocation, isTextReply, turnActions, turnOfMessage } from "../src/index.js";

function turn(id: string, fields: Partial<Invocation> = {}): Invocation {
  return {
    invocation_id: id, task_id: fields.task_ids?.[0] ?? null, framework: "adk", state: "completed",
    started_at: "2026-01-01T00:00:00Z",
    user_text: null, event_count: 2, task_ids: [], message_ids: [], call_ids: [], response_ids: [], text_count: 1,
    ...fields,
  };
}

// main (@a2a-js/sdk 1.x): user messages from history as stored, agent output rebuilt from artifacts by
// createMessage (a fresh messageId, the task's id).
const v1User = (id: string, taskId: string, text: string): ChatMessageLike => ({
  messageId: id, taskId, role: 1, parts: [{ content: { $case: "text", value: text }, metadata: undefined }],
  metadata: { displaySource: "user" },
});
const v1Text = (taskId: string, text: string): ChatMessageLike => ({
  messageId: `uuid-${Math.random()}`, taskId, role: 2, parts: [{ content: { $case: "text", value: text } }],
  metadata: { originalType: "TextMessage", displaySource: "k8s-agent" },
});
const v1Call = (taskId: string, callId: string): ChatMessageLike => ({
  messageId: `uuid-${Math.random()}`, taskId, role: 2, parts: [{ content: { $case: "text", value: "" } }],
  metadata: { originalType: "ToolCallRequestEvent", toolCallData: [{ id: callId, name: "k8s_get_resources", args: {} }] },
});
const v1Result = (taskId: string, callId: string): ChatMessageLike => ({
  messageId: `uuid-${Math.random()}`, taskId, role: 2, parts: [{ content: { $case: "text", value: "" } }],
  metadata: { originalType: "ToolCallExecutionEvent", toolResultData: [{ call_id: callId, name: "x", content: "ok" }] },
});
const v1Card = (taskId: string, callId: string, confirmationId: string): ChatMessageLike => ({
  messageId: `uuid-${Math.random()}`, taskId, role: 2, parts: [{ content: { $case: "text", value: "" } }],
  metadata: { hitlCard: { kind: "tool_approval", request: { type: "tool_approval_request", tools: [{ id: confirmationId, call_id: callId }] }, calls: [] } },
});

// 0.10.x (@a2a-js/sdk 0.3): history messages pushed as stored (agent text keeps its messageId), tool
// parts converted by createMessage.
const legacyUser = (id: string, taskId: string, text: string): ChatMessageLike => ({
  kind: "message", messageId: id, taskId, role: "user", parts: [{ kind: "text", text }], metadata: { displaySource: "user" },
} as ChatMessageLike);
const legacyText = (id: string, taskId: string, text: string): ChatMessageLike => ({
  kind: "message", messageId: id, taskId, role: "agent", parts: [{ kind: "text", text }],
  metadata: { kagent_invocation_id: "whatever", kagent_author: "k8s_agent" },
} as ChatMessageLike);

test("one turn per task (a fresh chat, a reloaded chat, a per-task fork): the task decides", () => {
  const turns = [turn("e-1", { task_ids: ["t1"], message_ids: ["u1"] }), turn("e-2", { task_ids: ["t2"], message_ids: ["u2"] })];
  const chat = [v1User("u1", "t1", "first"), v1Text("t1", "answer 1"), v1User("u2", "t2", "second"), v1Text("t2", "answer 2")];
  assert.deepEqual(chat.map((m) => turnOfMessage(m, chat, turns)), [0, 0, 1, 1]);
  // "Fork from here" on the last reply copies the whole chat; "Rewind to here" has nothing to hide.
  assert.deepEqual(turnActions(chat[3]!, chat, turns), {
    turn: turns[1], index: 1, forkBefore: null, rewindBefore: null, forkBeforeTask: null, rewindBeforeTask: null,
  });
  // On the first reply: both leave out turn 2.
  assert.equal(turnActions(chat[1]!, chat, turns)?.rewindBefore, "e-2");
  // On a user message: before its own turn, and its text goes back into the input box.
  assert.deepEqual(turnActions(chat[2]!, chat, turns), {
    turn: turns[1], index: 1, forkBefore: "e-2", rewindBefore: "e-2", forkBeforeTask: turns[1]!.task_id,
    rewindBeforeTask: turns[1]!.task_id, restoreText: "second",
  });
});

test("a live user message (taskId empty until saved) is found by its messageId once listed", () => {
  const live: ChatMessageLike = { messageId: "u9", taskId: "", role: 1, parts: [{ content: { $case: "text", value: "hi" } }] };
  assert.equal(turnOfMessage(live, [live], []), -1);
  assert.equal(turnOfMessage(live, [live], [turn("e-9", { task_ids: ["t9"], message_ids: ["u9"] })]), 0);
});

test("main, an approval: two turns in one task, placed by the tool cards' call ids", () => {
  const turns = [
    turn("e-1", { task_ids: ["t1"], message_ids: ["u1"], call_ids: ["c-del", "conf-1"], text_count: 1 }),
    turn("e-2", { task_ids: ["t1"], response_ids: ["c-del"], text_count: 1 }),
  ];
  const chat = [v1User("u1", "t1", "delete nginx"), v1Text("t1", "I will delete it"), v1Card("t1", "c-del", "conf-1"),
    v1Result("t1", "c-del"), v1Text("t1", "Deleted.")];
  assert.deepEqual(chat.map((m) => turnOfMessage(m, chat, turns)), [0, 0, 0, 1, 1]);
  // Live, the stream may show fewer texts than the stored task: the cards still place them.
  const live = [chat[0]!, chat[2]!, chat[3]!, chat[4]!];
  assert.deepEqual(live.map((m) => turnOfMessage(m, live, turns)), [0, 0, 1, 1]);
  assert.equal(turnActions(chat[4]!, chat, turns)?.rewindBefore, null);
  assert.equal(turnActions(chat[1]!, chat, turns)?.forkBefore, "e-2");
});

test("main, a merged task of text-only turns: user messages first, the replies placed by text_count", () => {
  const turns = [
    turn("e-1", { task_ids: ["m"], message_ids: ["u1"], text_count: 1 }),
    turn("e-2", { task_ids: ["m"], message_ids: ["u2"], text_count: 2 }),
    turn("e-3", { task_ids: ["m"], message_ids: ["u3"], text_count: 1 }),
  ];
  const chat = [v1User("u1", "m", "q1"), v1User("u2", "m", "q2"), v1User("u3", "m", "q3"),
    v1Text("m", "a1"), v1Text("m", "a2 start"), v1Text("m", "a2 end"), v1Text("m", "a3")];
  assert.deepEqual(chat.map((m) => turnOfMessage(m, chat, turns)), [0, 1, 2, 0, 1, 1, 2]);
  assert.equal(turnActions(chat[3]!, chat, turns)?.forkBefore, "e-2");
});

test("0.10.x, a merged fork: every turn in one task, each message by its own messageId", () => {
  const turns = [
    turn("e-1", { task_ids: ["m"], message_ids: ["u1", "a1"] }),
    turn("e-2", { task_ids: ["m"], message_ids: ["u2", "a2"] }),
    turn("e-3", { task_ids: ["m"], message_ids: ["u3", "a3"] }),
  ];
  const chat = [legacyUser("u1", "m", "q1"), legacyText("a1", "m", "r1"), legacyUser("u2", "m", "q2"),
    legacyText("a2", "m", "r2"), legacyUser("u3", "m", "q3"), legacyText("a3", "m", "r3")];
  assert.deepEqual(chat.map((m) => turnOfMessage(m, chat, turns)), [0, 0, 1, 1, 2, 2]);
  // "Rewind to here" on the last reply hides nothing; on the first it hides turns 2 and 3.
  assert.equal(turnActions(chat[5]!, chat, turns)?.rewindBefore, null);
  assert.equal(turnActions(chat[1]!, chat, turns)?.rewindBefore, "e-2");
});

test("0.10.x, an approval streamed live: the final reply follows the tool result of its turn", () => {
  const turns = [
    turn("e-1", { task_ids: ["t"], message_ids: ["u1", "fc", "conf"], call_ids: ["c-del", "conf-1"], text_count: 0 }),
    turn("e-2", { task_ids: ["t"], message_ids: ["dec", "res", "fin", "fin-2"], response_ids: ["c-del"], text_count: 2 }),
  ];
  const result: ChatMessageLike = { messageId: "x1", taskId: "t", role: "agent", parts: [{ kind: "text", text: "" }],
    metadata: { originalType: "ToolCallExecutionEvent", toolResultData: [{ call_id: "c-del" }] } } as ChatMessageLike;
  const final: ChatMessageLike = { messageId: "x2", taskId: "t", role: "agent", parts: [{ kind: "text", text: "Deleted." }],
    metadata: { originalType: "TextMessage" } } as ChatMessageLike;
  const chat = [legacyUser("u1", "t", "delete nginx"), result, final];
  assert.equal(turnOfMessage(final, chat, turns), 1);
});

test("what gets the entries: user messages and agent text, never tool or approval cards", () => {
  assert.equal(isTextReply(v1Text("t", "hello")), true);
  assert.equal(isTextReply(v1Text("t", "  ")), false);
  assert.equal(isTextReply(v1Call("t", "c")), false);
  assert.equal(isTextReply(v1Card("t", "c", "k")), false);
  assert.equal(isTextReply(v1User("u", "t", "q")), false);
  const legacyTool = { messageId: "m", role: "agent", parts: [{ kind: "data", data: {}, metadata: { kagent_type: "function_call" } }] };
  assert.equal(isTextReply(legacyTool), false);
});

test("the built package loads through require() (CommonJS: kagent's jest) and import", async () => {
  const require = createRequire(import.meta.url);
  const cjs = require("@kagent-fork/client") as typeof import("../src/index.js");
  const esm = await import("@kagent-fork/client");
  const src = await import("../src/index.js");
  const functions = (mod: object) =>
    Object.entries(mod).filter(([, value]) => typeof value === "function").map(([name]) => name).sort();
  assert.ok(functions(src).includes("getTranscript") && functions(src).includes("cancelExperiment"));
  for (const mod of [cjs, esm]) {
    assert.deepEqual(functions(mod), functions(src), "every function is in both builds");
  }
  assert.notEqual(cjs.turnOfMessage, esm.turnOfMessage); // two builds, not one re-exported
});
