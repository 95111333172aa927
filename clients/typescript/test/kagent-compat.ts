// Compile-time check (never run): the client's answers are what kagent's UI server actions return, and
// kagent's chat messages are what turnOfMessage takes. The interfaces restate kagent's declarations
// (kagent ui/src/types/index.ts, the same on main and on release/v0.10.x, and the `Message` of each
// line's @a2a-js/sdk); if the client's types drift from them, `tsc` fails.

import { type ChatMessageLike, forkSession, rewindSession, turnActions, undoRewind } from "../src/index.js";

interface KagentBaseResponse<T> {
  message: string;
  data?: T;
  error?: string;
}

interface KagentSession {
  id: string;
  name: string;
  agent_id: string;
  user_id: string;
  created_at: string;
  updated_at: string;
  deleted_at: string;
  share_token?: string | null;
  share_read_only?: boolean | null;
}

// kagent's type says deleted_at is a string; kagent's backend, like kagent-fork, leaves it out of a live
// session. The client's Session is kagent's without it, so it drops into kagent's code once given one.
type LiveKagentSession = Omit<KagentSession, "deleted_at"> & { deleted_at?: string };

export async function forkAsKagentAction(sessionId: string, turn?: string): Promise<KagentBaseResponse<LiveKagentSession>> {
  return forkSession(sessionId, turn);
}

export async function rewindAsKagentAction(sessionId: string, turn: string): Promise<KagentBaseResponse<LiveKagentSession>> {
  return rewindSession(sessionId, turn);
}

export async function undoAsKagentAction(sessionId: string, rewindId: string): Promise<KagentBaseResponse<LiveKagentSession>> {
  return undoRewind(sessionId, rewindId);
}

export async function asKagentSession(sessionId: string): Promise<KagentSession | undefined> {
  const answer = await forkSession(sessionId);
  return answer.data ? { ...answer.data, deleted_at: answer.data.deleted_at ?? "" } : undefined;
}

// @a2a-js/sdk 0.3 (kagent 0.10.x): parts with `kind`, role "user" | "agent".
interface LegacyMessage {
  kind: "message";
  messageId: string;
  role: "user" | "agent";
  parts: Array<{ kind: "text"; text: string } | { kind: "data"; data: Record<string, unknown>; metadata?: Record<string, unknown> }>;
  contextId?: string;
  taskId?: string;
  metadata?: { [k: string]: unknown };
}

// @a2a-js/sdk 1.x (kagent main): ts-proto messages, role an enum (ROLE_USER = 1).
enum Role {
  ROLE_UNSPECIFIED = 0,
  ROLE_USER = 1,
  ROLE_AGENT = 2,
}
interface V1Message {
  messageId: string;
  contextId: string;
  taskId: string;
  role: Role;
  parts: Array<{ content?: { $case: "text"; value: string } | { $case: "data"; value: unknown }; metadata: { [k: string]: unknown } | undefined; filename: string; mediaType: string }>;
  metadata: { [k: string]: unknown } | undefined;
  extensions: string[];
  referenceTaskIds: string[];
}

export function legacyMessages(m: LegacyMessage, all: LegacyMessage[]): ChatMessageLike[] {
  void turnActions(m, all, []);
  return all;
}

export function v1Messages(m: V1Message, all: V1Message[]): ChatMessageLike[] {
  void turnActions(m, all, []);
  return all;
}
