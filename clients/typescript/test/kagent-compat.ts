// Compile-time check (never run): the client's answers are what kagent's UI server actions return.
// The two interfaces restate kagent's declarations (kagent ui/src/types/index.ts, on main and on
// release/v0.10.x alike); if the client's types drift from them, `tsc` fails.

import { forkSession, rewindSession, undoRewind } from "../src/index.js";

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

export async function forkAsKagentAction(sessionId: string, turn?: string): Promise<KagentBaseResponse<KagentSession>> {
  return forkSession(sessionId, turn);
}

export async function rewindAsKagentAction(sessionId: string, turn: string): Promise<KagentBaseResponse<KagentSession>> {
  return rewindSession(sessionId, turn);
}

export async function undoAsKagentAction(sessionId: string, rewindId: string): Promise<KagentBaseResponse<KagentSession>> {
  return undoRewind(sessionId, rewindId);
}
