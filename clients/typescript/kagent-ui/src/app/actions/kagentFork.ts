"use server";

// kagent-fork's calls as kagent server actions (copy to kagent's ui/src/app/actions/kagentFork.ts).
// They run in the UI pod, forward the caller's headers as kagent's own actions do, and answer kagent's
// BaseResponse: { message, data } or { message, error } with kagent-fork's error text; never a throw.

import { revalidatePath } from "next/cache";
import { getAuthHeadersFromContext } from "@/lib/auth";
import { forkSession, listInvocations, rewindSession, undoRewind } from "@kagent-fork/client";

// Authorization (trusted-proxy mode), X-Share-Token and KAGENT_ADDITIONAL_FORWARDED_HEADERS; a share
// link's token comes from the page (?share=...), as for getSessionTasks(sessionId, shareToken).
async function options(shareToken?: string) {
  return { headers: await getAuthHeadersFromContext(), ...(shareToken ? { shareToken } : {}) };
}

/** A new session holding the chat before `beforeInvocationId` (null: all of it); the source is unchanged. */
export async function forkSessionAction(sessionId: string, beforeInvocationId: string | null, shareToken?: string) {
  const answer = await forkSession(sessionId, beforeInvocationId, await options(shareToken));
  if (answer.data) revalidatePath("/");
  return answer;
}

/** The same session without `beforeInvocationId` and every later turn; `data.rewind.id` undoes it. */
export async function rewindSessionAction(sessionId: string, beforeInvocationId: string, shareToken?: string) {
  return rewindSession(sessionId, beforeInvocationId, await options(shareToken));
}

export async function undoRewindAction(sessionId: string, rewindId: string, shareToken?: string) {
  return undoRewind(sessionId, rewindId, await options(shareToken));
}

/** Every turn, in order, with the ids a rendered chat message keeps (turnActions reads them). */
export async function listTurnsAction(sessionId: string, shareToken?: string) {
  return listInvocations(sessionId, await options(shareToken));
}
