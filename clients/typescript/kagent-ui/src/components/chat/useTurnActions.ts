"use client";

// "Fork chat from here" and "Rewind to here" for kagent's ChatInterface (copy to kagent's
// ui/src/components/chat/useTurnActions.ts). The same file works on kagent main and release/v0.10.x.
//
// The turns are listed when a message's menu opens, for the session open at that moment: a chat started
// on the page (/chat, whose URL changes by replaceState) and turns added since the page loaded are known
// too. turnActions (the client) finds the message's turn from the ids kagent's chat keeps on it.

import { useCallback, useEffect, useMemo, useRef } from "react";
import { useRouter } from "next/navigation";
import { toast } from "sonner";
import type { Message } from "@a2a-js/sdk";
import { turnActions, type TurnActions } from "@kagent-fork/client";
import {
  forkSessionAction,
  listTurnsAction,
  rewindSessionAction,
  undoRewindAction,
} from "@/app/actions/kagentFork";

export interface TurnActionsOptions {
  /** The open session: ChatInterface's `session?.id ?? sessionId`. */
  sessionId?: string;
  namespace: string;
  agentName: string;
  shareToken?: string;
  /** A read-only share link: forking is allowed, rewinding is not (`shareReadOnly`). */
  readOnly: boolean;
  /** The agent is mid-turn (`chatStatus !== "ready"`): both entries are disabled. */
  busy: boolean;
  /** The chat as rendered (`allMessages`). */
  messages: Message[];
  /** Load the session's tasks again (`reloadSessionFromDB`). */
  reload: () => Promise<void>;
  /** Show an empty chat (a rewind before the first turn leaves no task to load). */
  clear: () => void;
  /** Put text in the input box (`setCurrentInputMessage`). */
  setInput: (text: string) => void;
}

export interface TurnMenuActions {
  busy: boolean;
  readOnly: boolean;
  /** What the entries send for this message, or why there is nothing to send. */
  resolve: (message: Message) => Promise<TurnActions | string>;
  fork: (actions: TurnActions) => Promise<void>;
  rewind: (actions: TurnActions) => Promise<void>;
}

export function useTurnActions(options: TurnActionsOptions): TurnMenuActions {
  const router = useRouter();
  // The callbacks read the latest options (and router) from here, so that they never change identity.
  const latest = useRef({ ...options, router });
  useEffect(() => {
    latest.current = { ...options, router };
  });

  const resolve = useCallback(async (message: Message): Promise<TurnActions | string> => {
    const { sessionId, shareToken } = latest.current;
    if (!sessionId) return "This chat is not saved yet";
    const listed = await listTurnsAction(sessionId, shareToken);
    if (listed.error !== undefined || !listed.data) return listed.error ?? "Could not list the turns";
    return turnActions(message, latest.current.messages, listed.data) ?? "This message is not saved yet";
  }, []);

  const fork = useCallback(async (actions: TurnActions) => {
    const { sessionId, shareToken, namespace, agentName, router } = latest.current;
    if (!sessionId) return;
    const answer = await forkSessionAction(sessionId, actions.forkBefore, shareToken);
    if (answer.error !== undefined || !answer.data) {
      toast.error(answer.error ?? "Fork failed");
      return;
    }
    const session = { ...answer.data, deleted_at: answer.data.deleted_at ?? "" };
    // The sidebar (ChatLayoutUI) adds the new chat on this event, as after createSession.
    window.dispatchEvent(new CustomEvent("new-session-created", {
      detail: { agentRef: `${namespace}/${agentName}`, session },
    }));
    router.push(`/agents/${namespace}/${agentName}/chat/${session.id}`);
  }, []);

  const rewind = useCallback(async (actions: TurnActions) => {
    const { sessionId, shareToken } = latest.current;
    const before = actions.rewindBefore;
    if (!sessionId || !before) return;
    const answer = await rewindSessionAction(sessionId, before, shareToken);
    if (answer.error !== undefined || !answer.data) {
      toast.error(answer.error ?? "Rewind failed");
      return;
    }
    if (actions.index === 0 && before === actions.turn.invocation_id) latest.current.clear();
    else await latest.current.reload();
    if (actions.restoreText !== undefined) latest.current.setInput(actions.restoreText);
    const rewindId = answer.data.rewind.id;
    toast.success("Rewound", {
      action: {
        label: "Undo",
        onClick: async () => {
          const undone = await undoRewindAction(sessionId, rewindId, shareToken);
          if (undone.error !== undefined) toast.error(undone.error);
          else await latest.current.reload();
        },
      },
    });
  }, []);

  // One object while nothing it holds changes, so that the memoized menus skip a re-render per keystroke.
  const { busy, readOnly } = options;
  return useMemo(() => ({ busy, readOnly, resolve, fork, rewind }), [busy, readOnly, resolve, fork, rewind]);
}
