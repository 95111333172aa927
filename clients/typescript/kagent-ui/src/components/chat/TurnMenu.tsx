"use client";

// The "..." menu under a user message or an agent reply of kagent's chat (copy to kagent's
// ui/src/components/chat/TurnMenu.tsx). Renders nothing for tool cards, approvals and empty messages.
// A plain button until it is opened, so that a long chat pays for one button a message.

import { memo, useEffect, useRef, useState } from "react";
import type { Message } from "@a2a-js/sdk";
import { MoreHorizontal } from "lucide-react";
import { isTextReply, isUser, messageText, type TurnActions } from "@kagent-fork/client";
import type { TurnMenuActions } from "@/components/chat/useTurnActions";

const ITEM = "block w-full rounded-sm px-2 py-1.5 text-left text-sm hover:bg-accent disabled:pointer-events-none disabled:opacity-50";

function TurnMenu({ message, actions }: { message: Message; actions?: TurnMenuActions }) {
  const [open, setOpen] = useState(false);
  const [found, setFound] = useState<TurnActions | string | undefined>(undefined);
  const box = useRef<HTMLDivElement>(null);

  useEffect(() => {
    if (!open) return;
    const close = (event: MouseEvent | KeyboardEvent) => {
      if (event instanceof KeyboardEvent ? event.key === "Escape" : !box.current?.contains(event.target as Node)) {
        setOpen(false);
      }
    };
    document.addEventListener("mousedown", close);
    document.addEventListener("keydown", close);
    return () => {
      document.removeEventListener("mousedown", close);
      document.removeEventListener("keydown", close);
    };
  }, [open]);

  if (!actions) return null;
  const user = isUser(message);
  if (user ? !messageText(message).trim() : !isTextReply(message)) return null;

  const ready = typeof found === "object" && !actions.busy ? found : undefined;
  const pick = (run: (a: TurnActions) => Promise<void>) => () => {
    setOpen(false);
    if (ready) void run(ready);
  };
  return (
    <div ref={box} className={`relative flex ${user ? "justify-start" : "justify-end"} -mt-3 px-4`}>
      <button
        type="button"
        aria-label="Fork or rewind from this message"
        aria-haspopup="menu"
        aria-expanded={open}
        disabled={actions.busy}
        onClick={() => {
          if (!open) {
            setFound(undefined);
            actions.resolve(message).then(setFound, (error: unknown) => setFound(String(error)));
          }
          setOpen(!open);
        }}
        className="p-1 rounded-full text-muted-foreground hover:bg-gray-200 dark:hover:bg-gray-700 disabled:opacity-40"
      >
        <MoreHorizontal className="w-4 h-4" />
      </button>
      {open && (
        <div role="menu" className={`absolute top-full z-50 ${user ? "left-4" : "right-4"} min-w-[11rem] rounded-md border bg-popover p-1 text-popover-foreground shadow-md`}>
          <button type="button" role="menuitem" className={ITEM} disabled={!ready} onClick={pick(actions.fork)}>
            Fork chat from here
          </button>
          {!actions.readOnly && (
            <button type="button" role="menuitem" className={ITEM} disabled={!ready?.rewindBefore} onClick={pick(actions.rewind)}>
              Rewind to here
            </button>
          )}
          {found === undefined && <div className="px-2 py-1 text-xs text-muted-foreground">Finding the turn...</div>}
          {typeof found === "string" && <div className="px-2 py-1 text-xs text-muted-foreground">{found}</div>}
        </div>
      )}
    </div>
  );
}

// Re-rendered only when its message or the actions change (not on every keystroke in the input box).
export default memo(TurnMenu);
