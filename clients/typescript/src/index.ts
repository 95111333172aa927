/**
 * A dependency-free client of kagent-fork for kagent's UI (Next.js server actions) and other
 * Node 20+ callers.
 *
 * Every function resolves, never rejects, to the value kagent's server actions return:
 * `BaseResponse<T>` = `{ message, data? }` on success and `{ message, error }` on failure, where
 * `error` (and `message`) hold kagent-fork's error text, e.g. "Session not found". The requests
 * carry the headers kagent's server actions forward to kagent's backend: `Authorization` (the
 * JWT of oauth2-proxy in trusted-proxy mode) and `X-Share-Token`, plus `X-User-Id` when a user id
 * is given (kagent's unsecure mode).
 */

/** The answer of a kagent UI server action (kagent ui/src/types: `BaseResponse<T>`). */
export interface BaseResponse<T> {
  message: string;
  data?: T;
  error?: string;
}

/**
 * A session, typed as kagent's UI types it (ui/src/types: `Session`), so that the value drops into
 * kagent's code. The data is kagent-fork's answer as it comes, which is kagent's REST JSON: like
 * kagent's own answers, a live session has no `deleted_at`, and an unnamed session has no `name`.
 */
export interface Session {
  id: string;
  name: string;
  agent_id: string;
  user_id: string;
  created_at: string;
  updated_at: string;
  /**
   * Absent on a live session, as in kagent's own answers (kagent's UI type says `string`; a value of
   * this type is not assignable to kagent's `Session` until it is given one, e.g. `deleted_at: ""`).
   */
  deleted_at?: string;
  share_token?: string | null;
  share_read_only?: boolean | null;
  /** "user", "agent" (a sub-agent's session) or absent, as kagent stores it. */
  source?: string;
}

/**
 * What a fork left behind (the source's turns at and after its boundary) or what a rewind hid; null
 * when the operation left nothing behind.
 */
export interface BranchSummary {
  strategy: "deterministic_v1";
  turns: number;
  events: number;
  /** Calls by tool name. */
  tool_calls: Record<string, number>;
  first_user_text: string | null;
  last_agent_text: string | null;
  total_tokens: number;
}

/** The agent's framework, as kagent-fork reads it from what the session holds. */
export type Framework = "adk" | "adk-go" | "langgraph" | "openai-agents" | "crewai" | "claude" | "unknown";

/** What a fork copied (kagent-fork's `data.fork`). */
export interface ForkInfo {
  parent_session_id: string;
  fork_root_session_id: string;
  depth: number;
  /** The boundary turn's invocation (read from its task when named by task; null for agents without one). */
  rewind_before_invocation_id: string | null;
  /** The boundary turn's task, when the fork named it so. */
  rewind_before_task_id: string | null;
  framework: Framework | null;
  boundary_found: boolean;
  events_copied: number;
  tasks_copied: number;
  messages_copied: number;
  task_layout: string;
  warnings: string[];
  summary: BranchSummary | null;
}

/** The new session of a fork, with what was copied. */
export interface ForkedSession extends Session {
  fork: ForkInfo;
}

/** A rewind's record; its `id` undoes it (`undoRewind`). */
export interface RewindInfo {
  id: string;
  rewind_before_invocation_id: string | null;
  rewind_before_task_id: string | null;
  events_removed: number;
  tasks_removed: number;
  created_at: string;
  summary: BranchSummary | null;
  undone_at?: string;
  /** What the rewind could not do as asked (an OpenAI Agents SDK turn cut at its task's creation). */
  warnings?: string[];
}

/** The session after a rewind or an undo, with the rewind's record. */
export interface RewoundSession extends Session {
  rewind: RewindInfo;
}

/** One agent turn of a conversation: a place to fork or rewind before. */
export interface Invocation {
  /** null for an agent that writes no invocation id (every framework but ADK): name the turn by `task_id`. */
  invocation_id: string | null;
  task_id: string | null;
  framework: Framework;
  /** The turn's task state as stored (legacy "completed" or A2A v1.0 "TASK_STATE_COMPLETED"). */
  state: string | null;
  started_at: string;
  /** The first 200 characters of the user's message. */
  user_text: string | null;
  event_count: number;
  /** Every task that holds the turn, oldest first (a merged fork's task holds several turns). */
  task_ids: string[];
  /** The `messageId`s of the turn's messages in its tasks' histories (user and agent), in order. */
  message_ids: string[];
  /** The ids of the function calls the turn makes (tool calls, approval and ask-user requests). */
  call_ids: string[];
  /** The ids of the function calls the turn answers (tool results, also of an earlier turn's call). */
  response_ids: string[];
  /**
   * How many agent text messages kagent's chat shows for the turn when it loads the session: on main,
   * the text runs of the turn's artifacts (split by tool calls and results); on 0.10.x, the turn's agent
   * history messages with text and no tool part.
   */
  text_count: number;
}

/** The part of a fetch Response the client reads. */
export interface ResponseLike {
  ok: boolean;
  status: number;
  statusText: string;
  headers: { get(name: string): string | null };
  text(): Promise<string>;
}

export type FetchLike = (
  url: string,
  init: { method: string; headers: Record<string, string>; body?: string; signal?: AbortSignal; cache?: "no-store" },
) => Promise<ResponseLike>;

export interface ClientOptions {
  /**
   * kagent-fork's base URL, e.g. `http://kagent-fork.kagent.svc:8083` (with or without a trailing
   * `/api`). Default: the environment variable `KAGENT_FORK_URL`.
   */
  baseUrl?: string;
  /**
   * Headers to forward, as kagent's `getAuthHeadersFromContext()` returns them (`authorization`,
   * `x-share-token` and any `KAGENT_ADDITIONAL_FORWARDED_HEADERS`). Names are case-insensitive.
   */
  headers?: Record<string, string | undefined>;
  /** `Authorization` header value (e.g. `Bearer <jwt>`); overrides `headers`. */
  authorization?: string;
  /** `X-Share-Token`: act on another user's session through its share link; overrides `headers`. */
  shareToken?: string;
  /** `X-User-Id`: the caller in kagent's unsecure mode (kagent's default user when absent). */
  userId?: string;
  /** Give up after this many milliseconds (default 30000, as kagent's fetchApi). */
  timeoutMs?: number;
  /** Abort the request. */
  signal?: AbortSignal;
  /** A fetch implementation (default: the global fetch of Node 20+). */
  fetch?: FetchLike;
}

export interface ForkOptions extends ClientOptions {
  /** The new session's name (default "Fork of <source name>"). */
  name?: string;
  /** `copy_all` (default): fork the whole conversation when the turn is gone; `error`: answer 404. */
  ifBoundaryMissing?: "copy_all" | "error";
  /** `auto` (default), `merged` or `per_task`: how the fork's A2A tasks are laid out. */
  taskLayout?: "auto" | "merged" | "per_task";
  /** A retry with the same key and request returns the same fork instead of a second one. */
  idempotencyKey?: string;
  /** Name the first turn not copied by its task instead (pass null as the invocation). */
  rewindBeforeTaskId?: string;
}

export interface RewindOptions extends ClientOptions {
  /** Rewind even while the agent is still running a turn that the rewind hides. */
  force?: boolean;
  /** Name the first turn hidden by its task instead (pass null as the invocation). */
  rewindBeforeTaskId?: string;
}

export interface InvocationsOptions extends ClientOptions {
  /** One page of at most this many turns (1 to 1000) instead of every turn. */
  limit?: number;
  /** One page starting after this turn (its invocation id, or its task id when it has none). */
  after?: string;
}

const DEFAULT_TIMEOUT_MS = 30_000;
const MAX_PAGES = 1_000;

/**
 * "Fork chat from here": a new session holding the conversation before the turn
 * `rewindBeforeInvocationId` (the whole conversation when it is absent or null). The source is
 * never changed. `data` is the new session: navigate to `/agents/<namespace>/<name>/chat/<data.id>`.
 */
export async function forkSession(
  sessionId: string,
  rewindBeforeInvocationId?: string | null,
  options: ForkOptions = {},
): Promise<BaseResponse<ForkedSession>> {
  const body: Record<string, unknown> = {};
  if (rewindBeforeInvocationId) body.rewind_before_invocation_id = rewindBeforeInvocationId;
  if (options.rewindBeforeTaskId) body.rewind_before_task_id = options.rewindBeforeTaskId;
  if (options.name !== undefined) body.name = options.name;
  if (options.ifBoundaryMissing !== undefined) body.if_boundary_missing = options.ifBoundaryMissing;
  if (options.taskLayout !== undefined) body.task_layout = options.taskLayout;
  const extra: Record<string, string> = {};
  if (options.idempotencyKey) extra["idempotency-key"] = options.idempotencyKey;
  return call<ForkedSession>(options, "POST", sessionPath(sessionId, "fork"), body, extra, [sessionId]);
}

/**
 * "Rewind to here": the same session loses the turn `rewindBeforeInvocationId` and everything
 * after it. Nothing is erased: `data.rewind.id` undoes it (`undoRewind`).
 */
export async function rewindSession(
  sessionId: string,
  rewindBeforeInvocationId: string | null,
  options: RewindOptions = {},
): Promise<BaseResponse<RewoundSession>> {
  const body: Record<string, unknown> = {};
  if (rewindBeforeInvocationId !== null) body.rewind_before_invocation_id = rewindBeforeInvocationId;
  if (options.rewindBeforeTaskId !== undefined) body.rewind_before_task_id = options.rewindBeforeTaskId;
  if (options.force) body.force = true;
  const answer = await call<{ session: Session; rewind: RewindInfo }>(
    options,
    "POST",
    sessionPath(sessionId, "rewind"),
    body,
    {},
    [sessionId, rewindBeforeInvocationId ?? options.rewindBeforeTaskId ?? ""],
  );
  return flatten(answer);
}

/** Bring back what a rewind hid (refused with 409 once the session has moved on). */
export async function undoRewind(
  sessionId: string,
  rewindId: string,
  options: ClientOptions = {},
): Promise<BaseResponse<RewoundSession>> {
  const path = sessionId && rewindId ? sessionPath(sessionId, `rewinds/${encodeURIComponent(rewindId)}/undo`) : "";
  const answer = await call<{ session: Session; rewind: RewindInfo }>(options, "POST", path, {}, {}, [
    sessionId,
    rewindId,
  ]);
  return flatten(answer);
}

/**
 * The turns of a conversation, in order, to pick a fork or rewind point. Every turn unless
 * `limit` or `after` asks for one page (whose `message` is "end" when it is the last one).
 */
export async function listInvocations(
  sessionId: string,
  options: InvocationsOptions = {},
): Promise<BaseResponse<Invocation[]>> {
  const onePage = options.limit !== undefined || options.after !== undefined;
  const items: Invocation[] = [];
  let after = options.after;
  for (let page = 0; page < MAX_PAGES; page++) {
    const query = new URLSearchParams();
    if (options.limit !== undefined) query.set("limit", String(options.limit));
    if (after !== undefined) query.set("after", after);
    const search = query.toString();
    const suffix = search ? `invocations?${search}` : "invocations";
    const answer = await call<Invocation[]>(options, "GET", sessionPath(sessionId, suffix), undefined, {}, [
      sessionId,
    ]);
    if (answer.error !== undefined || onePage) return answer;
    const turns = answer.data ?? [];
    items.push(...turns);
    const last = turns[turns.length - 1];
    if (answer.message === "end" || last === undefined) return { message: answer.message, data: items };
    after = last.invocation_id ?? last.task_id ?? undefined;
  }
  return failure(`more than ${MAX_PAGES} pages of turns`);
}

// --- the transcript and the rewinds list ---------------------------------------------------------

/** One message of a transcript: a text, a tool call or a tool's result. */
export interface TranscriptMessage {
  /** The event's author (`user` or the agent's name). */
  author: string;
  role: "user" | "agent";
  kind: "text" | "tool_call" | "tool_result";
  /** The event's created_at. */
  at: string;
  text?: string;
  tool_name?: string;
  tool_call_id?: string;
  /** A call's arguments; over 2,000 characters of JSON, a string holding the first 2,000 and saying so. */
  args?: unknown;
  /** A tool's response, cut as `args` is. */
  response?: unknown;
}

/** The tokens a turn's events report. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** One turn of a transcript. */
export interface TranscriptTurn {
  index: number;
  /** null for an event that carries no invocation id (a turn of its own). */
  invocation_id: string | null;
  task_id: string | null;
  state: string | null;
  started_at: string;
  ended_at: string;
  messages: TranscriptMessage[];
  usage: Usage;
}

/** The conversation as the agent sees it (GET /api/sessions/{id}/transcript). */
export interface Transcript {
  session_id: string;
  name: string | null;
  turns: TranscriptTurn[];
  /** The messages' text, about 4 characters a token (as a fork's dry run counts it). */
  estimated_context_tokens: number;
  /** Rows left out (not a JSON object), counted. */
  warnings: string[];
}

export interface TranscriptOptions extends ClientOptions {
  /** Only the turns before this invocation: what the agent would see after a fork there. */
  before?: string;
  /** `json` (default): a `Transcript`; `markdown`: the same as a Markdown document, in `data` as text. */
  format?: "json" | "markdown";
}

/** A rewind in the session's list; `undoable` says whether `undoRewind` by this caller would succeed now. */
export interface RewindEntry {
  id: string;
  rewind_before_invocation_id: string;
  events_removed: number;
  tasks_removed: number;
  created_at: string;
  /** The user who asked for the rewind (the owner, or a read-write share's visitor). */
  requested_by: string;
  undone_at: string | null;
  undoable: boolean;
  summary: BranchSummary | null;
}

/**
 * The conversation as the agent sees it, turn by turn (its visible events only), or with
 * `format: "markdown"` the same as a Markdown document in `data`.
 */
export function getTranscript(
  sessionId: string,
  options: TranscriptOptions & { format: "markdown" },
): Promise<BaseResponse<string>>;
export function getTranscript(
  sessionId: string,
  options?: TranscriptOptions & { format?: "json" },
): Promise<BaseResponse<Transcript>>;
export function getTranscript(
  sessionId: string,
  options?: TranscriptOptions,
): Promise<BaseResponse<Transcript> | BaseResponse<string>>;
export async function getTranscript(
  sessionId: string,
  options: TranscriptOptions = {},
): Promise<BaseResponse<Transcript> | BaseResponse<string>> {
  const query = new URLSearchParams();
  if (options.before !== undefined) query.set("before", options.before);
  if (options.format !== undefined) query.set("format", options.format);
  const search = query.toString();
  const path = sessionPath(sessionId, search ? `transcript?${search}` : "transcript");
  if (options.format === "markdown") return callText(options, path, [sessionId]);
  return call<Transcript>(options, "GET", path, undefined, {}, [sessionId]);
}

/** The session's rewinds, newest first (undone ones too). */
export async function listRewinds(sessionId: string, options: ClientOptions = {}): Promise<BaseResponse<RewindEntry[]>> {
  return call<RewindEntry[]>(options, "GET", sessionPath(sessionId, "rewinds"), undefined, {}, [sessionId]);
}

/**
 * The headers kagent's server actions forward, read from an incoming request's headers (for
 * callers outside kagent's UI; inside it, pass `await getAuthHeadersFromContext()` as `headers`):
 * `authorization`, `x-share-token` and the comma-separated `additional` names (default: the
 * environment variable `KAGENT_ADDITIONAL_FORWARDED_HEADERS`, as kagent's UI reads it).
 */
export function forwardedHeaders(
  incoming: { get(name: string): string | null },
  additional: string | undefined = env("KAGENT_ADDITIONAL_FORWARDED_HEADERS"),
): Record<string, string> {
  const names = new Set(["authorization", "x-share-token"]);
  for (const name of (additional ?? "").split(",")) {
    const clean = name.trim().toLowerCase();
    if (clean && !HOP_BY_HOP.has(clean)) names.add(clean);
  }
  const out: Record<string, string> = {};
  for (const name of names) {
    const value = incoming.get(name);
    if (value) out[name] = value;
  }
  return out;
}

// Never forwarded: they describe one connection, not the caller.
const HOP_BY_HOP = new Set([
  "host",
  "connection",
  "keep-alive",
  "transfer-encoding",
  "upgrade",
  "te",
  "trailer",
  "proxy-authenticate",
  "proxy-authorization",
  "content-length",
  "content-encoding",
]);

// --- which turn a chat message belongs to -----------------------------------------------------

/**
 * A chat message as kagent's UI renders it (`Message` of `@a2a-js/sdk`, on main and on 0.10.x alike):
 * what `extractMessagesFromTasks` rebuilds from the stored tasks and what the live stream appends.
 */
export interface ChatMessageLike {
  messageId?: string | undefined;
  taskId?: string | undefined;
  /** "user"/"agent" (0.10.x), `Role.ROLE_USER` = 1 (main), or "ROLE_USER". */
  role?: unknown;
  parts?: readonly unknown[] | undefined;
  metadata?: unknown;
}

/** What "Fork chat from here" and "Rewind to here" send for one chat message. */
export interface TurnActions {
  /** The message's turn. */
  turn: Invocation;
  /** Its index in the turns. */
  index: number;
  /** The turn a fork leaves out first: `null` forks the whole chat. */
  forkBefore: string | null;
  /** The turn a rewind hides first: `null` when there is nothing after the message to hide. */
  rewindBefore: string | null;
  /**
   * The same turns named by their tasks. An agent that writes no invocation id (every framework but
   * ADK) has `forkBefore`/`rewindBefore` null where these are set: send them as `rewindBeforeTaskId`.
   */
  forkBeforeTask: string | null;
  rewindBeforeTask: string | null;
  /** A user message's text, to put back in the input box after a rewind. */
  restoreText?: string;
}

/**
 * The turn (an index into `turns`, as `listInvocations` answers them) that a message of kagent's chat
 * belongs to, or -1 when the listing does not know it yet (a turn still being saved: list the turns
 * again). `messages` is the chat as rendered, in order (kagent's `allMessages`).
 *
 * kagent keeps a stored message's `messageId` for user messages on both lines and for agent text on
 * 0.10.x; tool cards keep their call ids; every rendered message keeps its `taskId`. Other messages
 * (agent text on main, anything streamed live) are placed within their task by the turns' `text_count`
 * when the task shows as many text messages as the listing counts, else next to the nearest message of
 * the same task whose id names a turn.
 */
export function turnOfMessage(
  message: ChatMessageLike,
  messages: readonly ChatMessageLike[],
  turns: readonly Invocation[],
): number {
  const direct = byIds(message, turns);
  if (direct >= 0) return direct;
  const taskId = message.taskId;
  if (!taskId) return -1;
  const candidates: number[] = [];
  turns.forEach((turn, index) => {
    if ((turn.task_ids ?? [turn.task_id]).includes(taskId)) candidates.push(index);
  });
  if (candidates.length <= 1) return candidates[0] ?? -1;
  if (isTextReply(message)) {
    const shown = messages.filter((m) => m.taskId === taskId && isTextReply(m));
    const position = shown.indexOf(message);
    const counted = candidates.reduce((sum, i) => sum + (turns[i]?.text_count ?? 0), 0);
    if (position >= 0 && counted === shown.length) {
      let seen = 0;
      for (const i of candidates) {
        seen += turns[i]?.text_count ?? 0;
        if (position < seen) return i;
      }
    }
  }
  const at = messages.indexOf(message);
  if (at < 0) return -1;
  const near = (from: number, step: 1 | -1): number => {
    for (let i = from; i >= 0 && i < messages.length; i += step) {
      const other = messages[i];
      if (other === undefined || other.taskId !== taskId || isUser(other)) continue;
      const found = byIds(other, turns);
      if (candidates.includes(found)) return found;
    }
    return -1;
  };
  const before = near(at - 1, -1);
  return before >= 0 ? before : near(at + 1, 1);
}

/**
 * What the two entries send for a message: on a user message of turn k, fork and rewind before turn k
 * (and put its text back); on an agent message of turn k, fork and rewind before turn k + 1 (the new
 * chat ends with that reply; on the last turn a fork copies everything and a rewind has nothing to do).
 * `undefined` when the message's turn is not known (see turnOfMessage).
 */
export function turnActions(
  message: ChatMessageLike,
  messages: readonly ChatMessageLike[],
  turns: readonly Invocation[],
): TurnActions | undefined {
  const index = turnOfMessage(message, messages, turns);
  const turn = turns[index];
  if (turn === undefined) return undefined;
  if (isUser(message)) {
    const text = messageText(message);
    return {
      turn, index, forkBefore: turn.invocation_id, rewindBefore: turn.invocation_id,
      forkBeforeTask: turn.task_id, rewindBeforeTask: turn.task_id,
      ...(text ? { restoreText: text } : {}),
    };
  }
  const next = turns[index + 1];
  const inv = next?.invocation_id ?? null;
  const task = next?.task_id ?? null;
  return { turn, index, forkBefore: inv, rewindBefore: inv, forkBeforeTask: task, rewindBeforeTask: task };
}

/** Whether kagent's chat shows the message as a user message (either line's role spelling). */
export function isUser(message: ChatMessageLike): boolean {
  return message.role === "user" || message.role === "ROLE_USER" || message.role === 1;
}

/** The message's text parts joined (0.10.x `{kind: "text", text}`, main `{content: {$case: "text", value}}`). */
export function messageText(message: ChatMessageLike): string {
  let text = "";
  for (const part of message.parts ?? []) {
    if (!isRecord(part)) continue;
    if (typeof part.text === "string") text += part.text;
    const content = part.content;
    if (isRecord(content) && content.$case === "text" && typeof content.value === "string") text += content.value;
  }
  return text;
}

/**
 * An agent message kagent shows as a text bubble: text, and neither a tool card, an approval or
 * ask-user card, nor a tool-call summary. User messages and agent replies are what get the entries.
 */
export function isTextReply(message: ChatMessageLike): boolean {
  if (isUser(message) || !messageText(message).trim()) return false;
  const meta = isRecord(message.metadata) ? message.metadata : {};
  const type = meta.originalType;
  if (type !== undefined && type !== "TextMessage") return false;
  if (meta.hitlCard || meta.toolCallData || meta.toolResultData || meta.askUserData) return false;
  return !(message.parts ?? []).some((part) => {
    if (!isRecord(part) || !isRecord(part.metadata)) return false;
    const kind = part.metadata.adk_type ?? part.metadata.kagent_type;
    return kind === "function_call" || kind === "function_response";
  });
}

function byIds(message: ChatMessageLike, turns: readonly Invocation[]): number {
  const id = message.messageId;
  if (id) {
    const found = turns.findIndex((t) => (t.message_ids ?? []).includes(id));
    if (found >= 0) return found;
  }
  const { calls, responses } = callIdsOf(message);
  for (const call of calls) {
    const found = turns.findIndex((t) => (t.call_ids ?? []).includes(call));
    if (found >= 0) return found;
  }
  for (const response of responses) {
    const found = turns.findIndex((t) => (t.response_ids ?? []).includes(response));
    if (found >= 0) return found;
  }
  return -1;
}

// The call ids kagent's UI keeps on a tool card (both lines): a request's toolCallData, a result's
// toolResultData, an approval or ask-user card's request (main: hitlCard; 0.10.x: askUserData).
function callIdsOf(message: ChatMessageLike): { calls: string[]; responses: string[] } {
  const meta = isRecord(message.metadata) ? message.metadata : {};
  const calls: string[] = [];
  const responses: string[] = [];
  const add = (list: string[], value: unknown) => {
    if (typeof value === "string" && value) list.push(value);
  };
  for (const call of asArray(meta.toolCallData)) if (isRecord(call)) add(calls, call.id);
  for (const result of asArray(meta.toolResultData)) if (isRecord(result)) add(responses, result.call_id);
  if (isRecord(meta.askUserData)) add(calls, meta.askUserData.id);
  const card = meta.hitlCard;
  if (isRecord(card)) {
    if (isRecord(card.request)) {
      for (const tool of asArray(card.request.tools)) {
        if (isRecord(tool)) {
          add(calls, tool.call_id);
          add(calls, tool.id);
        }
      }
      add(calls, card.request.id);
    }
    for (const call of asArray(card.calls)) if (isRecord(call)) add(calls, call.id);
  }
  return { calls, responses };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function asArray(value: unknown): readonly unknown[] {
  return Array.isArray(value) ? value : [];
}

// --- compare and the fork tree ------------------------------------------------------------------

/** One side of a comparison: its turns after the common part and what they cost. */
export interface CompareSide {
  session_id: string;
  name: string | null;
  turns_after: number;
  tool_calls: Record<string, number>;
  total_tokens: number;
  /** The turns' durations after the common part, summed (as an experiment's totals). */
  duration_seconds: number;
  first_user_text: string | null;
  last_agent_text: string | null;
}

/** One turn after the common part: its question, its answer and what it cost. */
export interface CompareTurn {
  invocation_id: string | null;
  task_id: string | null;
  question: string | null;
  answer: string | null;
  tool_calls: Record<string, number>;
  total_tokens: number;
  duration_seconds: number;
}

/** Two sessions after their common turns (GET /api/sessions/{id}/compare/{other}). */
export interface Comparison {
  common_turns: number;
  left: CompareSide;
  right: CompareSide;
  /** The turns after the common part lined up by position (null where a side has no turn there), so a
   * regenerated turn sits next to the turn it replaces. */
  aligned: { left: CompareTurn | null; right: CompareTurn | null }[];
}

/** A fork's lineage record in the tree: what it copied, and when. */
export interface LineageRecord extends ForkInfo {
  created_at: string;
}

/** A session of the fork tree (GET /api/sessions/{id}/tree), its forks below it. */
export interface TreeNode {
  session_id: string;
  name: string | null;
  /** ok, or deleted / missing for a session that is gone (its forks are still shown). */
  status: "ok" | "deleted" | "missing";
  forks: TreeNode[];
  /** Where and how this session was forked from its parent; null for the root. */
  fork: LineageRecord | null;
  agent_id: string | null;
  /** Live events and turns, counted when the tree is read (null for a session that is gone). */
  events: number | null;
  turns: number | null;
  /** The position (from 1) of the fork's boundary among its parent's turns now, and that turn's user
   * text: null for a whole-chat fork, or when the parent no longer shows that turn. */
  fork_turn: number | null;
  fork_question: string | null;
}

/** Two sessions side by side after their common turns (each must be visible to the caller). */
export async function compareSessions(
  sessionId: string,
  otherSessionId: string,
  options: ClientOptions = {},
): Promise<BaseResponse<Comparison>> {
  const path = otherSessionId ? sessionPath(sessionId, `compare/${encodeURIComponent(otherSessionId)}`) : "";
  return call<Comparison>(options, "GET", path, undefined, {}, [sessionId, otherSessionId]);
}

/** The fork tree a session belongs to, from its root. */
export async function getForkTree(sessionId: string, options: ClientOptions = {}): Promise<BaseResponse<TreeNode>> {
  return call<TreeNode>(options, "GET", sessionPath(sessionId, "tree"), undefined, {}, [sessionId]);
}

// --- what the agents' tools do -------------------------------------------------------------------------

/** What a replay's agents may do with their tools: "replay" (nothing that acts runs) or "live" (every tool). */
export interface ToolPolicy {
  mode: "replay" | "live";
  /** With "replay": a call the source never made answers so ("recorded", default) or, if it only reads, runs "live". */
  reads?: "live" | "recorded";
}

/** One thing an agent can do: a tool (`*`: every tool of a server no one could list), where, and why its class. */
export interface ArmTool {
  name: string;
  why: string;
  server: string | null;
}

/** An agent's tools by class: asks (needs an approval), reads (read-only), acts (everything else). */
export interface ArmTools {
  agent_ref: string;
  /** kagent's agent table holds its configuration. */
  known: boolean;
  /** Every MCP server of it is kagent-fork's replay endpoint. */
  twin: boolean;
  asks: ArmTool[];
  reads: ArmTool[];
  acts: ArmTool[];
  note: string | null;
}

/** What a what-if or an experiment would do (`dryRun: true`): nothing is written. */
export interface ReplayDryRun {
  dry_run: true;
  branches: number;
  turns: number;
  /** Every branch's turns and the judge's calls. */
  estimated_context_tokens: number;
  /** The judge's calls' part of it (0 without a judge). */
  estimated_judge_tokens: number;
  /** Those input tokens priced (at least what it costs); null when a model's price is not known. */
  estimated_usd: number | null;
  /** estimated_usd as every door prints money ("$0.00012"), or "unknown". */
  estimated_usd_text: string;
  /** The agents (and judge) whose model's price is not known. */
  unpriced: string[];
  /** The policy it would run with; null when it would be refused. */
  tools: Required<ToolPolicy> | null;
  arms: ArmTools[];
  /** The refusal it would get (the cost gate's, max_usd's, the tools'); null when it would start. */
  refused: string | null;
}

/** The options a what-if and an experiment share about tools. */
export interface ToolOptions {
  /**
   * What the agents' tools do: "replay" (the default: nothing that acts runs; a 422 names an agent that could
   * act and is not a replay twin), "live" (every tool runs for real), or `{ mode, reads }`.
   */
  tools?: "replay" | "live" | ToolPolicy;
  /** With "replay": "recorded" (default: a call the source never made answers so) or "live" (a read runs live). */
  reads?: "live" | "recorded";
  /** Refuse (422) a start whose estimated price in US dollars, the judge's calls included, is over this. */
  maxUsd?: number;
}

function toolFields(body: Record<string, unknown>, options: ToolOptions): void {
  if (options.tools !== undefined) body.tools = options.tools;
  if (options.reads !== undefined) body.reads = options.reads;
  if (options.maxUsd !== undefined) body.max_usd = options.maxUsd;
}

// --- what-if jobs ------------------------------------------------------------------------------

/** What the agent wrote into the what-if's fork since the job began. */
export interface WhatifResult {
  last_agent_text: string | null;
  tool_calls: Record<string, number>;
  total_tokens: number;
}

/** A what-if job (GET /api/whatif/{id}): a fork that an agent answers in over A2A. */
export interface WhatifJob {
  id: string;
  /** judging: started with a judge, the job ended and the judge's calls run (then the job's own status). */
  status: "running" | "judging" | "completed" | "failed" | "cancelled";
  /** The fork the agent answers in. */
  session_id: string;
  parent_session_id: string;
  /** The turn re-asked; null for a turn known by its task alone (an agent that writes no invocation id). */
  rewind_before_invocation_id: string | null;
  /** The turn re-asked, when it has no invocation id. */
  rewind_before_task_id: string | null;
  agent_ref: string;
  /** The agent's A2A task, once it answered. */
  task_id: string | null;
  error: string | null;
  created_at: string;
  finished_at: string | null;
  /** null while running. */
  result: WhatifResult | null;
  /** Turns whose task ended, of the `turns_total` the job re-asks. */
  turns_done: number;
  turns_total: number;
  /** The source turn where the agent asked for a person (the job ended there). */
  stopped_at: string | null;
  experiment_id: string | null;
  /** What the job really asked first: the source turn's question, or the edited one. */
  question: string | null;
  /** What its agent's tools do (null: a job from before tool policies, which ran every tool live). */
  tool_policy: Required<ToolPolicy> | null;
  /** What its agent could do, its tools by class, as the start found them. */
  tools: ArmTools | null;
  /** On a replay twin, its tool calls over every turn by where they were answered from (null: no twin). */
  replayed?: ReplayedCalls | null;
  /**
   * Started with a judge: its latest judgment (one pair: the source's continuation against its branch), as an
   * experiment's; null without a judge, and in `listWhatifs` (read the job).
   */
  judgment?: Judgment | null;
  /** The same judgment as the API contract names it (wins, ties, losses, the line to act on); null as `judgment`. */
  verdict?: Verdict | null;
}

/** A what-if as it starts: the job (running) and its fork, as `forkSession` answers it. */
export interface WhatifStarted {
  job: WhatifJob;
  session: ForkedSession;
}

export interface WhatifOptions extends ClientOptions, ToolOptions {
  /** namespace/name of the kagent agent to answer (default: the source's own agent). */
  agentRef?: string;
  /** The fork's name. */
  name?: string;
  /** How many source turns to re-ask from the boundary on, or "all" (default 1). */
  turns?: number | "all";
  /** Ask the first re-asked turn with this text instead (its other parts are kept). */
  messageText?: string;
  /** Refuse (422) when the turn's context is estimated over this many tokens (default: the service's). */
  maxContextTokens?: number;
  /** A retry with the same key and request answers the first job instead of starting a second one. */
  idempotencyKey?: string;
  /** Name the turn by its task instead (pass null as the invocation): an agent that writes no invocation id. */
  rewindBeforeTaskId?: string;
  /**
   * A kagent agent (namespace/name) that judges the what-if blind against the source's own continuation once it
   * ends (both orders asked; the job reads "judging" meanwhile), and what it should weigh.
   */
  judge?: { agent: string; criteria?: string };
}

/**
 * "What would another agent have answered here?": fork before `rewindBeforeInvocationId` and re-ask that
 * turn (and with `turns`, the ones after it) over A2A. `data.job` is running; follow it with `getWhatif`.
 * What the agent's tools do is `options.tools` (by default nothing that acts runs; `dryRunWhatif` shows them).
 */
export async function startWhatif(
  sessionId: string,
  rewindBeforeInvocationId: string | null,
  options: WhatifOptions = {},
): Promise<BaseResponse<WhatifStarted>> {
  const body: Record<string, unknown> = {};
  if (rewindBeforeInvocationId !== null) body.rewind_before_invocation_id = rewindBeforeInvocationId;
  if (options.rewindBeforeTaskId !== undefined) body.rewind_before_task_id = options.rewindBeforeTaskId;
  if (options.agentRef !== undefined) body.agent_ref = options.agentRef;
  if (options.name !== undefined) body.name = options.name;
  if (options.turns !== undefined) body.turns = options.turns;
  if (options.messageText !== undefined) body.message = { text: options.messageText };
  if (options.maxContextTokens !== undefined) body.max_context_tokens = options.maxContextTokens;
  toolFields(body, options);
  if (options.judge !== undefined) body.judge = options.judge;
  const extra: Record<string, string> = options.idempotencyKey ? { "idempotency-key": options.idempotencyKey } : {};
  return call<WhatifStarted>(options, "POST", sessionPath(sessionId, "whatif"), body, extra, [
    sessionId,
    rewindBeforeInvocationId ?? options.rewindBeforeTaskId ?? "",
  ]);
}

/** What `startWhatif` would do, nothing written: the agent's tools by class and the refusal it would get. */
export async function dryRunWhatif(
  sessionId: string,
  rewindBeforeInvocationId: string | null,
  options: WhatifOptions = {},
): Promise<BaseResponse<ReplayDryRun>> {
  const body: Record<string, unknown> = { dry_run: true };
  if (rewindBeforeInvocationId !== null) body.rewind_before_invocation_id = rewindBeforeInvocationId;
  if (options.rewindBeforeTaskId !== undefined) body.rewind_before_task_id = options.rewindBeforeTaskId;
  if (options.agentRef !== undefined) body.agent_ref = options.agentRef;
  if (options.turns !== undefined) body.turns = options.turns;
  if (options.maxContextTokens !== undefined) body.max_context_tokens = options.maxContextTokens;
  toolFields(body, options);
  if (options.judge !== undefined) body.judge = options.judge;
  return call<ReplayDryRun>(options, "POST", sessionPath(sessionId, "whatif"), body, {}, [
    sessionId,
    rewindBeforeInvocationId ?? options.rewindBeforeTaskId ?? "",
  ]);
}

/** A what-if job (its creator only). */
export async function getWhatif(jobId: string, options: ClientOptions = {}): Promise<BaseResponse<WhatifJob>> {
  const path = jobId ? `/whatif/${encodeURIComponent(jobId)}` : "";
  return call<WhatifJob>(options, "GET", path, undefined, {}, [jobId]);
}

/**
 * Cancel a running what-if, or its judging (refused once both ended); the agent (the judge) is asked to cancel
 * its A2A tasks.
 */
export async function cancelWhatif(jobId: string, options: ClientOptions = {}): Promise<BaseResponse<WhatifJob>> {
  const path = jobId ? `/whatif/${encodeURIComponent(jobId)}/cancel` : "";
  return call<WhatifJob>(options, "POST", path, {}, {}, [jobId]);
}

/** The what-if jobs the caller started from a session, newest first. */
export async function listWhatifs(sessionId: string, options: ClientOptions = {}): Promise<BaseResponse<WhatifJob[]>> {
  return call<WhatifJob[]>(options, "GET", sessionPath(sessionId, "whatifs"), undefined, {}, [sessionId]);
}

// --- experiments ---------------------------------------------------------------------------------

/** A replay twin's tool calls by where kagent-fork's replay endpoint answered them from (docs/replay-twins.md):
 * the source's recording, the real server (a read, live as the caller), nowhere because the source never made
 * the call (missed, under reads "recorded"), or nowhere because it acts (refused: the arm's intent). */
export interface ReplayedCalls {
  recorded: number;
  live: number;
  missed: number;
  refused: number;
  refused_calls: { tool: string; arguments: unknown }[];
}

/** One turn of an experiment's column (kagent-fork's TurnFigures). */
export interface ExperimentTurn {
  question: string | null;
  /** The message's parts exactly as sent over A2A (null for the source's own turn). */
  sent: unknown[] | null;
  answer: string | null;
  tool_calls: Record<string, number>;
  rejected_tool_calls: number;
  model_calls: number;
  total_tokens: number;
  duration_seconds: number;
  /** completed, input-required, failed, ...; working while it runs, pending before it is sent. */
  state: string | null;
  /** The turn's prompt tokens; null: not counted (a turn figured by an earlier version). */
  input_tokens: number | null;
  /** The turn's output tokens (candidates and thoughts). */
  output_tokens: number | null;
  /** Each model call's [input, output] tokens, in event order: what the price is computed from. */
  model_usage: [number, number][] | null;
  /** On a replay twin, where the turn's tool calls were answered from; null for the source and other agents. */
  tool_policy?: ReplayedCalls | null;
}

/** A column of the grid: the source, or one branch (an agent and a repeat). */
export interface ExperimentColumn {
  agent_ref: string | null;
  repeat: number;
  agent_card: { name: string; version: string; skills_sha256: string } | null;
  session_id: string;
  job_id: string | null;
  status: "running" | "completed" | "failed" | "cancelled";
  error: string | null;
  stopped_at: string | null;
  turns: ExperimentTurn[];
  /** The discard in force hid this branch's fork (`discardBranches`); false for the source. */
  discarded: boolean;
  /** The branch the discard in force kept. */
  kept: boolean;
  /** Its session's row is gone (kagent's session retention purged it); its figures are those kept. */
  purged: boolean;
  totals: {
    turns: number;
    tool_calls: number;
    rejected_tool_calls: number;
    model_calls: number;
    total_tokens: number;
    /** The turns' durations, summed (compare's sides are summed the same way). */
    duration_seconds: number;
    input_tokens: number | null;
    output_tokens: number | null;
    /** US dollars at genai-prices' price for `model`; null: unknown (no model, or no known price), never a guess. */
    cost_usd: number | null;
    /** The model priced, as the agent's configuration in kagent's agent table names it. */
    model: string | null;
    /** cost_usd as every door prints money: two significant figures ("$0.000070"), or "unknown". */
    cost_text: string;
    /** On a replay twin, the column's tool calls by where their answers came from (null: no twin). */
    tool_policy?: ReplayedCalls | null;
  };
}

/** One agent's record against the source or another agent, as the judge (or people's votes) counted it. */
export interface JudgeRecord {
  agent_ref: string;
  /** "source", or another agent. */
  against: string;
  wins: number;
  ties: number;
  losses: number;
  /** Pairs with an invalid answer or a call without one: counted neither way. */
  not_judged: number;
  /** Of not_judged: answers without the JSON. */
  invalid: number;
  /** Of not_judged: calls without an answer, or continuations without one. */
  failed: number;
  /** The judge's pairs whose two orders agreed, of those both answered; null for people's votes. */
  consistency: { agreed: number; asked: number } | null;
  /** A tie counts half. */
  win_rate: number | null;
  /** The 95 % Wilson score interval of the win rate over the judged pairs (never a point). */
  ci_low: number | null;
  ci_high: number | null;
  /** better: the interval above 0.5; worse: below; else inconclusive; null: nothing judged. */
  outcome: "better" | "worse" | "inconclusive" | null;
  /** The outcome is inconclusive. */
  within_chance: boolean;
  /** When inconclusive: about how many judged pairs in all would settle it at this rate. */
  settle_with: number | null;
  /** The same, counted from the pairs judged so far. */
  more_repeats: number | null;
  /** One line a person can act on. */
  line: string;
}

/** One pair of continuations the judge compared, asked twice with A and B swapped. */
export interface JudgePair {
  /** null: the source's own continuation. */
  left_job_id: string | null;
  left: string;
  right_job_id: string;
  right: string;
  outcome: "left" | "right" | "tie" | "invalid" | "failed" | "pending";
  consistent: boolean | null;
  said: {
    a_is: "left" | "right";
    winner: "A" | "B" | "tie" | "invalid" | null;
    reason: string | null;
    answer: string | null;
    error: string | null;
  }[];
}

/** An experiment's latest judgment: the judge, its pairs and the verdict. */
export interface Judgment {
  id: string;
  judge_agent_ref: string;
  judge_card: { name: string; version: string; skills_sha256: string } | null;
  criteria: string | null;
  status: "waiting" | "running" | "completed" | "failed" | "cancelled";
  error: string | null;
  created_at: string;
  finished_at: string | null;
  calls: number;
  calls_answered: number;
  pairs: JudgePair[];
  against_source: JudgeRecord[];
  between_agents: JudgeRecord[];
  lines: string[];
  /** The best agent against the source in one line (the failure, when the judgment failed). */
  headline: string;
  /** The model the judge's configuration names; null: not known. */
  judge_model: string | null;
}

/** One agent's verdict against the source or another agent, as the API contract names it. */
export interface AgentVerdict {
  agent_ref: string;
  against: string;
  wins: number;
  ties: number;
  losses: number;
  /** Pairs counted neither way: an answer without the JSON. */
  invalid: number;
  /** Pairs counted neither way: a call without an answer, or a continuation without one. */
  failed: number;
  /** The judge's pairs whose two orders agreed, of those both answered; null for people's votes. */
  consistency: { agreed: number; asked: number } | null;
  win_rate: number | null;
  /** [low, high]: the 95 % Wilson score interval of win_rate (never a point). */
  ci95: [number, number] | null;
  /** better: the interval above 0.5; worse: below; else inconclusive; null: nothing judged. */
  outcome: "better" | "worse" | "inconclusive" | null;
  /** When inconclusive: about how many more judged repeats would settle it at the rate seen. */
  more_repeats: number | null;
  /** The mean over the agent's branches; `usd` null when unknown. */
  cost: { turns: number; tool_calls: number; total_tokens: number; duration_seconds: number; usd: number | null };
  summary: string;
}

/** The latest judgment in the contract's shape. */
export interface Verdict {
  judge: { agent: string; model: string | null; criteria: string | null };
  /** The best agent against the source in one line. */
  headline: string;
  criteria: string | null;
  status: "waiting" | "running" | "completed" | "failed" | "cancelled";
  by_agent: AgentVerdict[];
  pairs: {
    /** A branch's job id; null: the source. */
    a: string | null;
    b: string;
    order_1: string | null;
    order_2: string | null;
    verdict: "a" | "b" | "tie" | "invalid" | "failed" | "pending";
    reasons: string[];
  }[];
  /** People's blind votes (anyone who can read the source votes, each voter's kept), counted apart. */
  votes: {
    votes: number;
    voters: number;
    /** Of the votes on a pair the judge decided, those naming what it named; null when none. */
    agreement: { agreed: number; compared: number } | null;
    by_agent: AgentVerdict[];
  } | null;
}

/** An experiment: the source's own turns beside a column per branch (GET /api/experiments/{id}). */
export interface Experiment {
  id: string;
  /** judging: the branches ended and the judge's calls run. */
  status: "running" | "judging" | "completed" | "failed" | "cancelled";
  source_session_id: string;
  /** The first turn replayed; null for a turn known by its task alone (an agent that writes no invocation id). */
  rewind_before_invocation_id: string | null;
  /** The first turn replayed, when it has no invocation id. */
  rewind_before_task_id: string | null;
  turns_requested: number | string;
  message: { text: string } | null;
  created_at: string;
  finished_at: string | null;
  source: ExperimentColumn;
  branches: ExperimentColumn[];
  on_approval: "stop" | "reject";
  repeats: number;
  by_agent: { agent_ref: string; totals: Record<string, { mean: number; min: number; max: number }> }[] | null;
  /** What the agents' tools do (null: an experiment from before tool policies, every tool ran live). */
  tool_policy: Required<ToolPolicy> | null;
  /** Each agent's tools by class, as the start found them. */
  arms: ArmTools[] | null;
  /** The latest discard of its branches, in force until `undone_at`; null if they were never discarded. */
  discard: ExperimentDiscard | null;
  /** The latest judgment (null: never judged). */
  judgment: Judgment | null;
  earlier_judgments: {
    id: string;
    judge_agent_ref: string;
    criteria: string | null;
    status: string;
    created_at: string;
    finished_at: string | null;
  }[];
  /** People's blind votes, counted apart from the judge's (null: none). */
  votes: {
    votes: number;
    voters: number;
    agreement: { agreed: number; compared: number } | null;
    against_source: JudgeRecord[];
    between_agents: JudgeRecord[];
    lines: string[];
  } | null;
  /** The latest judgment as the API contract names it (null: never judged). */
  verdict: Verdict | null;
}

/** A discard of an experiment's branches: the forks it hid from kagent's chat list, and what its undo brought back. */
export interface ExperimentDiscard {
  id: string;
  /** The kept branch's fork; null when every branch was discarded. */
  kept_session_id: string | null;
  /** The forks it hid (those still visible when it ran). */
  discarded_session_ids: string[];
  created_at: string;
  undone_at: string | null;
  /** The forks its undo brought back (null until undone). */
  restored_session_ids: string[] | null;
}

export interface ExperimentOptions extends ClientOptions, ToolOptions {
  /** namespace/name of 1 to 8 agents (default: the session's own agent). */
  agents?: string[];
  /** How many turns to replay from the boundary on, or "all" (default 1). */
  turns?: number | "all";
  /** Ask the first replayed turn with this text instead. */
  messageText?: string;
  /** Branches per agent, 1 to 5. */
  repeats?: number;
  /** When an agent asks to approve a tool: stop the branch (default) or reject as kagent's UI does. */
  onApproval?: "stop" | "reject";
  name?: string;
  maxContextTokens?: number;
  idempotencyKey?: string;
  /** Name the first replayed turn by its task instead (pass null as the invocation). */
  rewindBeforeTaskId?: string;
  /** A kagent agent (namespace/name) that judges the branches blind once they end, and what it should weigh. */
  judge?: { agent: string; criteria?: string };
  /** Add the source's own agent as an arm: its verdict against the source is the noise floor. */
  control?: boolean;
}

/**
 * Replay the conversation from the turn `rewindBeforeInvocationId` on several agents at once. `data` is
 * the experiment as it starts (status "running"); follow it with `getExperiment`. What the agents' tools do
 * is `options.tools` (by default nothing that acts runs; `dryRunExperiment` shows them first).
 */
export async function startExperiment(
  sessionId: string,
  rewindBeforeInvocationId: string | null,
  options: ExperimentOptions = {},
): Promise<BaseResponse<Experiment>> {
  const body: Record<string, unknown> = {};
  if (rewindBeforeInvocationId !== null) body.rewind_before_invocation_id = rewindBeforeInvocationId;
  if (options.rewindBeforeTaskId !== undefined) body.rewind_before_task_id = options.rewindBeforeTaskId;
  if (options.agents !== undefined) body.agents = options.agents;
  if (options.turns !== undefined) body.turns = options.turns;
  if (options.messageText !== undefined) body.message = { text: options.messageText };
  if (options.repeats !== undefined) body.repeats = options.repeats;
  if (options.control !== undefined) body.control = options.control;
  if (options.onApproval !== undefined) body.on_approval = options.onApproval;
  if (options.name !== undefined) body.name = options.name;
  if (options.maxContextTokens !== undefined) body.max_context_tokens = options.maxContextTokens;
  toolFields(body, options);
  if (options.judge !== undefined) body.judge = options.judge;
  const extra: Record<string, string> = options.idempotencyKey ? { "idempotency-key": options.idempotencyKey } : {};
  const answer = await call<{ experiment: Experiment }>(
    options,
    "POST",
    sessionPath(sessionId, "experiments"),
    body,
    extra,
    [sessionId, rewindBeforeInvocationId ?? options.rewindBeforeTaskId ?? ""],
  );
  if (answer.data === undefined) return answer.error !== undefined ? failure(answer.error) : { message: answer.message };
  return { message: answer.message, data: answer.data.experiment };
}

/** What `startExperiment` would do, nothing written: each agent's tools by class, the refusal it would get. */
export async function dryRunExperiment(
  sessionId: string,
  rewindBeforeInvocationId: string | null,
  options: ExperimentOptions = {},
): Promise<BaseResponse<ReplayDryRun>> {
  const body: Record<string, unknown> = { dry_run: true };
  if (rewindBeforeInvocationId !== null) body.rewind_before_invocation_id = rewindBeforeInvocationId;
  if (options.rewindBeforeTaskId !== undefined) body.rewind_before_task_id = options.rewindBeforeTaskId;
  if (options.agents !== undefined) body.agents = options.agents;
  if (options.turns !== undefined) body.turns = options.turns;
  if (options.repeats !== undefined) body.repeats = options.repeats;
  if (options.control !== undefined) body.control = options.control;
  if (options.maxContextTokens !== undefined) body.max_context_tokens = options.maxContextTokens;
  toolFields(body, options);
  return call<ReplayDryRun>(options, "POST", sessionPath(sessionId, "experiments"), body, {}, [
    sessionId,
    rewindBeforeInvocationId ?? options.rewindBeforeTaskId ?? "",
  ]);
}

/** An experiment in its source's list (`getExperiment` for its grid). */
export interface ExperimentListed {
  id: string;
  status: "running" | "judging" | "completed" | "failed" | "cancelled";
  rewind_before_invocation_id: string | null;
  rewind_before_task_id: string | null;
  turns_requested: number | string;
  turns: number;
  repeats: number;
  on_approval: "stop" | "reject";
  created_at: string;
  finished_at: string | null;
  tool_policy: Required<ToolPolicy> | null;
  /** Its agents, in the order named. */
  agents: string[];
  /** The latest judgment's judge; null: never judged. */
  judge: string | null;
  /** The latest judgment's headline; null: never judged. */
  outcome: string | null;
}

export interface ExperimentReadOptions extends ClientOptions {
  /** `json` (default): an `Experiment`; `markdown`: the grid as a Markdown table, in `data` as text. */
  format?: "json" | "markdown";
}

/** An experiment as a grid: the source's turns and each branch's, with totals (or as a Markdown table). */
export function getExperiment(
  experimentId: string,
  options: ExperimentReadOptions & { format: "markdown" },
): Promise<BaseResponse<string>>;
export function getExperiment(
  experimentId: string,
  options?: ExperimentReadOptions & { format?: "json" },
): Promise<BaseResponse<Experiment>>;
export function getExperiment(
  experimentId: string,
  options?: ExperimentReadOptions,
): Promise<BaseResponse<Experiment> | BaseResponse<string>>;
export async function getExperiment(
  experimentId: string,
  options: ExperimentReadOptions = {},
): Promise<BaseResponse<Experiment> | BaseResponse<string>> {
  const path = experimentId ? `/experiments/${encodeURIComponent(experimentId)}` : "";
  if (options.format === "markdown") return callText(options, path && `${path}?format=markdown`, [experimentId]);
  const query = options.format !== undefined ? `?format=${options.format}` : "";
  return call<Experiment>(options, "GET", path && path + query, undefined, {}, [experimentId]);
}

/** Cancel every running branch of an experiment (refused once it ended); `data` is the grid then. */
export async function cancelExperiment(
  experimentId: string,
  options: ClientOptions = {},
): Promise<BaseResponse<Experiment>> {
  const path = experimentId ? `/experiments/${encodeURIComponent(experimentId)}/cancel` : "";
  return call<Experiment>(options, "POST", path, {}, {}, [experimentId]);
}

export interface DiscardOptions extends ClientOptions {
  /** The branch to keep (the winner): its fork's `session_id` or its `job_id`; absent: discard every branch. */
  keep?: string;
}

/**
 * Clear an ended experiment's branches out of kagent's chat list: every branch's fork is hidden as kagent hides a
 * deleted session, except the one `keep` names (nothing is erased; `undoDiscard` brings them back). Refused while
 * the experiment runs; the same call again changes nothing. `data` is the grid, whose `discard` says what was hidden.
 */
export async function discardBranches(
  experimentId: string,
  options: DiscardOptions = {},
): Promise<BaseResponse<Experiment>> {
  const path = experimentId ? `/experiments/${encodeURIComponent(experimentId)}/discard` : "";
  const body: Record<string, unknown> = {};
  if (options.keep !== undefined) body.keep = options.keep;
  return call<Experiment>(options, "POST", path, body, {}, [experimentId]);
}

/** Bring back exactly the branch forks a discard hid; the same call again changes nothing. `data` is the grid. */
export async function undoDiscard(
  experimentId: string,
  options: ClientOptions = {},
): Promise<BaseResponse<Experiment>> {
  const path = experimentId ? `/experiments/${encodeURIComponent(experimentId)}/discard/undo` : "";
  return call<Experiment>(options, "POST", path, {}, {}, [experimentId]);
}

export interface JudgeOptions extends ClientOptions {
  /** What the judge should weigh, beyond the default criteria. */
  criteria?: string;
  /** Refuse when the judge's calls send more (default WHATIF_MAX_CONTEXT_TOKENS). */
  maxContextTokens?: number;
}

/**
 * Judge an experiment that ended (again: every judgment is kept) by the kagent agent `agent` (namespace/name),
 * blind, each pair asked in both orders. `data` is the experiment, status "judging"; follow it with
 * `getExperiment` until its `judgment` ended.
 */
export async function judgeExperiment(
  experimentId: string,
  agent: string,
  options: JudgeOptions = {},
): Promise<BaseResponse<Experiment>> {
  const body: Record<string, unknown> = { agent };
  if (options.criteria !== undefined) body.criteria = options.criteria;
  if (options.maxContextTokens !== undefined) body.max_context_tokens = options.maxContextTokens;
  const path = experimentId ? `/experiments/${encodeURIComponent(experimentId)}/judge` : "";
  return call<Experiment>(options, "POST", path, body, {}, [experimentId, agent]);
}

/**
 * A person's blind vote on a pair of an ended experiment (`a` null: the source's own continuation), counted apart
 * from the judge's; `data` is the experiment.
 */
export async function voteExperiment(
  experimentId: string,
  pair: { a: string | null; b: string },
  winner: "a" | "b" | "tie",
  options: ClientOptions = {},
): Promise<BaseResponse<Experiment>> {
  const path = experimentId ? `/experiments/${encodeURIComponent(experimentId)}/votes` : "";
  return call<Experiment>(options, "POST", path, { pair, winner }, {}, [experimentId, pair.b]);
}

/** The experiments the caller started from a session, newest first. */
export async function listExperiments(
  sessionId: string,
  options: ClientOptions = {},
): Promise<BaseResponse<ExperimentListed[]>> {
  return call<ExperimentListed[]>(options, "GET", sessionPath(sessionId, "experiments"), undefined, {}, [sessionId]);
}

// --- internals ---------------------------------------------------------------------------------

function env(name: string): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.[name];
}

function sessionPath(sessionId: string, suffix: string): string {
  return sessionId ? `/sessions/${encodeURIComponent(sessionId)}/${suffix}` : "";
}

function failure<T>(text: string): BaseResponse<T> {
  return { message: text, error: text };
}

function flatten(answer: BaseResponse<{ session: Session; rewind: RewindInfo }>): BaseResponse<RewoundSession> {
  if (answer.data === undefined) return answer.error !== undefined ? failure(answer.error) : { message: answer.message };
  return { message: answer.message, data: { ...answer.data.session, rewind: answer.data.rewind } };
}

// --- suites (docs/suites.md): saved cases, turns of real conversations to continue from -----------------------

export interface SuiteCase {
  case_id: string;
  session_id: string;
  rewind_before_invocation_id: string | null;
  rewind_before_task_id: string | null;
  turns: number | "all";
  message: { text: string } | null;
  /** The turn's own question, and the conversation's agent, as the case was saved. */
  user_text: string | null;
  agent_ref: string | null;
}

export interface Suite {
  id: string;
  name: string;
  created_at: string;
  cases: SuiteCase[];
}

export interface SuiteListed {
  id: string;
  name: string;
  created_at: string;
  /** How many cases it holds. */
  cases: number;
}

/** A case: a session and the turn to continue from (by its invocation id, or its task for agents that write none). */
export interface CaseInput {
  sessionId: string;
  rewindBeforeInvocationId?: string;
  rewindBeforeTaskId?: string;
  /** How many turns a run replays from there, or "all" (default 1). */
  turns?: number | "all";
  /** Ask the case's first turn with this text instead. */
  message?: string;
}

/** The caller's own conversations with `agent` (namespace/name), newest first, one case each at `turn`. */
export interface SuiteSelect {
  agent: string;
  since?: string;
  until?: string;
  /** 1-200, default 20. */
  limit?: number;
  /** "first" (default), "last", or a user turn's number from 1. */
  turn?: "first" | "last" | number;
}

export interface CreateSuiteOptions extends ClientOptions {
  cases?: CaseInput[];
  select?: SuiteSelect;
}

function caseBody(c: CaseInput): Record<string, unknown> {
  const body: Record<string, unknown> = { session_id: c.sessionId };
  if (c.rewindBeforeInvocationId !== undefined) body.rewind_before_invocation_id = c.rewindBeforeInvocationId;
  if (c.rewindBeforeTaskId !== undefined) body.rewind_before_task_id = c.rewindBeforeTaskId;
  if (c.turns !== undefined) body.turns = c.turns;
  if (c.message !== undefined) body.message = { text: c.message };
  return body;
}

/**
 * Make a suite of `cases`, then of the conversations `select` picks; every case is checked as the caller reads its
 * session, and nothing is saved unless every case is found.
 */
export async function createSuite(name: string, options: CreateSuiteOptions = {}): Promise<BaseResponse<Suite>> {
  const body: Record<string, unknown> = { name };
  if (options.cases !== undefined) body.cases = options.cases.map(caseBody);
  if (options.select !== undefined) body.select = { ...options.select };
  return call<Suite>(options, "POST", name ? "/suites" : "", body, {}, [name]);
}

/** The caller's suites, newest first. */
export async function listSuites(options: ClientOptions = {}): Promise<BaseResponse<SuiteListed[]>> {
  return call<SuiteListed[]>(options, "GET", "/suites", undefined, {}, []);
}

/** A suite and its cases, in order (only its creator sees it). */
export async function getSuite(suiteId: string, options: ClientOptions = {}): Promise<BaseResponse<Suite>> {
  return call<Suite>(options, "GET", suiteId ? `/suites/${encodeURIComponent(suiteId)}` : "", undefined, {}, [suiteId]);
}

/** Save as a case: add one case to a suite; `data` is the suite with it. */
export async function saveCase(suiteId: string, c: CaseInput, options: ClientOptions = {}): Promise<BaseResponse<Suite>> {
  const path = suiteId ? `/suites/${encodeURIComponent(suiteId)}/cases` : "";
  return call<Suite>(options, "POST", path, caseBody(c), {}, [suiteId, c.sessionId]);
}

/** Remove a case from a suite (the conversation itself is not touched); `data` is the suite without it. */
export async function removeCase(suiteId: string, caseId: string, options: ClientOptions = {}): Promise<BaseResponse<Suite>> {
  const path = suiteId && caseId ? `/suites/${encodeURIComponent(suiteId)}/cases/${encodeURIComponent(caseId)}` : "";
  return call<Suite>(options, "DELETE", path, undefined, {}, [suiteId, caseId]);
}

/** A suite as the YAML file people keep beside their agent's manifests; `data` is its text. */
export async function exportSuite(suiteId: string, options: ClientOptions = {}): Promise<BaseResponse<string>> {
  const path = suiteId ? `/suites/${encodeURIComponent(suiteId)}/export` : "";
  return callText(options, path, [suiteId], "application/yaml", "a YAML document");
}

/** Make a suite from a file, YAML (as exportSuite writes it) or JSON; its cases are checked as createSuite's. */
export async function importSuite(
  file: string,
  options: ClientOptions & { format?: "yaml" | "json" } = {},
): Promise<BaseResponse<Suite>> {
  const contentType = options.format === "json" ? "application/json" : "application/yaml";
  return call<Suite>(options, "POST", file ? "/suites/import" : "", { raw: file, contentType }, {}, [file]);
}

// --- suite runs (docs/suites.md, "Runs"): every case continued on each agent, one verdict per agent across them ---

/** Medians per case of what an agent's continuations cost. */
export interface SuiteRunCost {
  /** null: a model is unpriced. */
  usd: number | null;
  total_tokens: number;
  tool_calls: number;
  turns: number;
  duration_seconds: number;
}

/** One agent's verdict against the source across the run's conversations. */
export interface SuiteRunAgent {
  agent_ref: string;
  /** The source's own agent run again: its verdict is the noise floor. */
  control: boolean;
  /** Cases with a judged pair. */
  cases: number;
  /** The sessions those cases are points of: the n of the interval (a chat's cases are drawn together). */
  conversations: number;
  /** Pairs, over every case and repeat. */
  wins: number;
  ties: number;
  losses: number;
  invalid: number;
  failed: number;
  /** A tie counts half; null: nothing judged. */
  win_rate: number | null;
  /** A bootstrap over conversations, never narrower than Wilson's interval with n = conversations. */
  ci95: [number, number] | null;
  outcome: "better" | "worse" | "inconclusive" | null;
  cost: { per_case: SuiteRunCost; total_usd: number | null };
  /** One line a person can act on. */
  summary: string;
}

export interface SuiteRunCase {
  case_id: string;
  session_id: string;
  /** Its experiments, one per agent (and the control's), once started; getSuiteRunCase reads them. */
  experiment_ids: string[];
  status: "waiting" | "running" | "done" | "failed" | "skipped";
  error: string | null;
  /** The agent that did best against the source on this conversation. */
  best: string | null;
  by_agent: { agent_ref: string; wins: number; ties: number; losses: number }[];
}

export type SuiteRunStatus = "running" | "judging" | "completed" | "stopped" | "cancelled" | "failed";

/** A run as it stands: progress, money, the verdict across the cases judged so far, each case. */
export interface SuiteRun {
  id: string;
  suite_id: string;
  status: SuiteRunStatus;
  /** "budget", "cancelled", or why it failed. */
  reason: string | null;
  created_at: string;
  finished_at: string | null;
  agents: string[];
  judge: string;
  repeats: number;
  control: boolean;
  max_usd: number | null;
  estimated_usd: number | null;
  estimated_usd_text: string;
  /** What the ended cases' branches cost (null: a model is unpriced). */
  spent_usd: number | null;
  spent_usd_text: string;
  progress: { cases: number; branches_done: number; branches_total: number; judged: number };
  verdict: {
    judge: { agent: string; model: string | null; criteria: string | null };
    headline: string;
    by_agent: SuiteRunAgent[];
    control: SuiteRunAgent | null;
  };
  cases: SuiteRunCase[];
}

/** A run in its suite's list (`getSuiteRun` for the rest). */
export interface SuiteRunListed {
  id: string;
  status: SuiteRunStatus;
  reason: string | null;
  created_at: string;
  finished_at: string | null;
  agents: string[];
  judge: string;
}

/** What a run would do, nothing written: its cases (and those it would skip), branches, estimate and refusal. */
export interface SuiteRunPlan {
  dry_run: true;
  cases: number;
  skipped: { case_id: string; error: string }[];
  branches: number;
  /** Every case's estimate, the judge's calls included (at least that); null when a model is unpriced. */
  estimated_usd: number | null;
  estimated_usd_text: string;
  unpriced: string[];
  tools: unknown;
  refused: string | null;
}

export interface SuiteRunOptions extends ClientOptions, ToolOptions {
  /** Branches per agent and case, 1 to 5. */
  repeats?: number;
  /** Turns each case replays; absent: each case's own. */
  turns?: number | "all";
  /** Add each source's own agent as an arm: its verdict is the noise floor. */
  control?: boolean;
  /** What the judge should weigh, beyond the default criteria. */
  criteria?: string;
  idempotencyKey?: string;
}

function suiteRunBody(agents: string[], judge: string, options: SuiteRunOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { agents, judge: options.criteria !== undefined ? { agent: judge, criteria: options.criteria } : { agent: judge } };
  if (options.repeats !== undefined) body.repeats = options.repeats;
  if (options.turns !== undefined) body.turns = options.turns;
  if (options.control !== undefined) body.control = options.control;
  toolFields(body, options);
  return body;
}

function runPath(suiteId: string, runId?: string, tail = ""): string {
  if (!suiteId || runId === "") return "";
  const runs = `/suites/${encodeURIComponent(suiteId)}/runs`;
  return runId === undefined ? runs : `${runs}/${encodeURIComponent(runId)}${tail}`;
}

/**
 * Run a suite: every case x agent x repeat an experiment branch, judged by `judge` (namespace/name) against the
 * source's own continuation. `data` is the run as it starts; follow it with `getSuiteRun`. `maxUsd` refuses a run
 * over it and stops starting cases once spent reaches it; `dryRunSuiteRun` shows the plan first.
 */
export async function startSuiteRun(
  suiteId: string,
  agents: string[],
  judge: string,
  options: SuiteRunOptions = {},
): Promise<BaseResponse<SuiteRun>> {
  const extra: Record<string, string> = options.idempotencyKey ? { "idempotency-key": options.idempotencyKey } : {};
  return call<SuiteRun>(options, "POST", runPath(suiteId), suiteRunBody(agents, judge, options), extra, [suiteId, judge]);
}

/** What `startSuiteRun` would do, nothing written: the cases, branches, estimate (judge included) and refusal. */
export async function dryRunSuiteRun(
  suiteId: string,
  agents: string[],
  judge: string,
  options: SuiteRunOptions = {},
): Promise<BaseResponse<SuiteRunPlan>> {
  const body = { ...suiteRunBody(agents, judge, options), dry_run: true };
  return call<SuiteRunPlan>(options, "POST", runPath(suiteId), body, {}, [suiteId, judge]);
}

/** A suite's runs, newest first. */
export async function listSuiteRuns(suiteId: string, options: ClientOptions = {}): Promise<BaseResponse<SuiteRunListed[]>> {
  return call<SuiteRunListed[]>(options, "GET", runPath(suiteId), undefined, {}, [suiteId]);
}

export interface SuiteRunReadOptions extends ClientOptions {
  /** `json` (default): a `SuiteRun`; `markdown`: the verdict and cases as Markdown, in `data` as text. */
  format?: "json" | "markdown";
}

/** A run as it stands (or its verdict as Markdown, as the CLI prints it). */
export function getSuiteRun(
  suiteId: string,
  runId: string,
  options: SuiteRunReadOptions & { format: "markdown" },
): Promise<BaseResponse<string>>;
export function getSuiteRun(
  suiteId: string,
  runId: string,
  options?: SuiteRunReadOptions & { format?: "json" },
): Promise<BaseResponse<SuiteRun>>;
export function getSuiteRun(
  suiteId: string,
  runId: string,
  options?: SuiteRunReadOptions,
): Promise<BaseResponse<SuiteRun> | BaseResponse<string>>;
export async function getSuiteRun(
  suiteId: string,
  runId: string,
  options: SuiteRunReadOptions = {},
): Promise<BaseResponse<SuiteRun> | BaseResponse<string>> {
  const path = runPath(suiteId, runId);
  if (options.format === "markdown") return callText(options, path && `${path}?format=markdown`, [suiteId, runId]);
  const query = options.format !== undefined ? `?format=${options.format}` : "";
  return call<SuiteRun>(options, "GET", path && path + query, undefined, {}, [suiteId, runId]);
}

/** A case's experiments in a run, as their grids show them (the run's own user's rows, read through the run). */
export async function getSuiteRunCase(
  suiteId: string,
  runId: string,
  caseId: string,
  options: ClientOptions = {},
): Promise<BaseResponse<{ case_id: string; session_id: string; experiments: Experiment[] }>> {
  const path = caseId ? runPath(suiteId, runId, `/cases/${encodeURIComponent(caseId)}`) : "";
  return call(options, "GET", path, undefined, {}, [suiteId, runId, caseId]);
}

/** The run's plot as SVG text: money per case against the win rate with its interval, one point per agent. */
export async function suiteRunPlot(suiteId: string, runId: string, options: ClientOptions = {}): Promise<BaseResponse<string>> {
  return callText(options, runPath(suiteId, runId, "/plot.svg"), [suiteId, runId], "image/svg+xml", "an SVG image");
}

/** End a run: no case starts after it, the running cases' experiments are cancelled (refused once it ended). */
export async function cancelSuiteRun(suiteId: string, runId: string, options: ClientOptions = {}): Promise<BaseResponse<SuiteRun>> {
  return call<SuiteRun>(options, "POST", runPath(suiteId, runId, "/cancel"), {}, {}, [suiteId, runId]);
}

/**
 * Show one branch of a run (a session of its experiments' grids) in the caller's chats: forked whole into them from
 * the run's own user, whose branches kagent's chat list never shows. `data` is the new session.
 */
export async function keepSuiteRunBranch(
  suiteId: string,
  runId: string,
  sessionId: string,
  options: ClientOptions = {},
): Promise<BaseResponse<ForkedSession>> {
  const path = runPath(suiteId, runId, "/keep");
  return call<ForkedSession>(options, "POST", path, { session_id: sessionId }, {}, [suiteId, runId, sessionId]);
}

function baseUrl(options: ClientOptions): string | undefined {
  const base = (options.baseUrl ?? env("KAGENT_FORK_URL"))?.trim().replace(/\/+$/, "");
  if (!base) return undefined;
  return base.endsWith("/api") ? base : `${base}/api`;
}

function requestHeaders(options: ClientOptions, extra: Record<string, string>, json: boolean): Record<string, string> {
  const headers: Record<string, string> = { accept: "application/json" };
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    const clean = name.toLowerCase();
    if (value && !HOP_BY_HOP.has(clean)) headers[clean] = value;
  }
  if (options.authorization) headers.authorization = options.authorization;
  if (options.shareToken) headers["x-share-token"] = options.shareToken;
  if (options.userId) headers["x-user-id"] = options.userId;
  if (json) headers["content-type"] = "application/json";
  return { ...headers, ...extra };
}

function signalFor(options: ClientOptions): AbortSignal {
  const timeout = AbortSignal.timeout(options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  if (!options.signal) return timeout;
  const any = (AbortSignal as { any?: (signals: AbortSignal[]) => AbortSignal }).any;
  return any ? any([timeout, options.signal]) : options.signal;
}

type Method = "GET" | "POST" | "DELETE";

async function call<T>(
  options: ClientOptions,
  method: Method,
  path: string,
  body: Record<string, unknown> | RawBody | undefined,
  extra: Record<string, string>,
  required: string[],
): Promise<BaseResponse<T>> {
  const got = await send(options, method, path, body, extra, required, false);
  if (typeof got === "string") return failure(got);
  const envelope = parse(got.text);
  if (envelope === undefined || !("data" in envelope)) {
    return failure(`kagent-fork answered ${got.status} without kagent's JSON envelope (${method} ${got.url})`);
  }
  const message = typeof envelope.message === "string" ? envelope.message : "OK";
  return { message, data: envelope.data as T };
}

/** A GET answered as a document (`format=markdown`, a suite's YAML): `data` is its text; a refusal is kagent's
 * envelope. */
async function callText(
  options: ClientOptions,
  path: string,
  required: string[],
  media = "text/markdown",
  words = "a Markdown document",
): Promise<BaseResponse<string>> {
  const got = await send(options, "GET", path, undefined, {}, required, media);
  if (typeof got === "string") return failure(got);
  if (!(got.contentType ?? "").toLowerCase().startsWith(media)) {
    return failure(`kagent-fork answered ${got.status} without ${words} (GET ${got.url})`);
  }
  return { message: "OK", data: got.text };
}

/** One request: its successful answer's text, or the error text to fail with. */
/** A body sent as it is (a suite's YAML file), with its own type, instead of JSON. */
interface RawBody {
  raw: string;
  contentType: string;
}

async function send(
  options: ClientOptions,
  method: Method,
  path: string,
  body: Record<string, unknown> | RawBody | undefined,
  extra: Record<string, string>,
  required: string[],
  document: string | false,
): Promise<{ status: number; url: string; text: string; contentType: string | null } | string> {
  if (required.some((value) => typeof value !== "string" || value.length === 0) || !path) {
    return "a session id (and, to rewind or undo, an invocation or rewind id) is required";
  }
  const base = baseUrl(options);
  if (base === undefined) return "kagent-fork's URL is not set: pass baseUrl or set KAGENT_FORK_URL";
  const url = base + path;
  const doFetch: FetchLike = options.fetch ?? (fetch as unknown as FetchLike);
  const raw = body !== undefined && typeof body.raw === "string" ? (body as RawBody) : undefined;
  const headers = requestHeaders(options, extra, body !== undefined && raw === undefined);
  if (raw) headers["content-type"] = raw.contentType;
  // A refusal is JSON whatever was asked for.
  if (document) headers.accept = `${document}, application/json`;
  let response: ResponseLike;
  try {
    response = await doFetch(url, {
      method,
      headers,
      ...(raw ? { body: raw.raw } : body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: signalFor(options),
      cache: "no-store",
    });
  } catch (error) {
    return transportError(error, url, options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  }
  let text: string;
  try {
    text = await response.text();
  } catch (error) {
    return transportError(error, url, options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  }
  if (!response.ok) {
    const envelope = parse(text);
    const said = envelope?.error ?? envelope?.message;
    return typeof said === "string" && said
      ? said
      : `kagent-fork answered ${response.status} ${response.statusText}`.trim() + ` (${method} ${url})`;
  }
  return { status: response.status, url, text, contentType: response.headers.get("content-type") };
}

function parse(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return value !== null && typeof value === "object" && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

function transportError(error: unknown, url: string, timeoutMs: number): string {
  const name = error instanceof Error ? error.name : "";
  if (name === "TimeoutError") return `Request timed out after ${timeoutMs} ms - kagent-fork did not answer. ${url}`;
  if (name === "AbortError") return `Request aborted. ${url}`;
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause.message : "";
  const detail = cause || (error instanceof Error ? error.message : String(error));
  return `Network error - could not reach kagent-fork (${detail}). ${url}`;
}
