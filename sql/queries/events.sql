-- Named queries of kagent-fork's store, service/kagent/store/events.py (conventions: fragments.sql).

-- name: boundary_event
-- Where invocation $3 begins: its first live event, or the live event just before it when that one is
-- the "header_update" that opens the turn (kagent-adk 0.10.x writes one, with the request's headers in
-- its state_delta, before each turn: kept, a hidden turn's headers would stay in the session's state).
-- strpos() is a plain text pre-filter so that only the rows that mention the id are parsed as JSON; $4 =
-- false skips it for ids JSON could escape. With the invocation index the rows of the invocation are
-- looked up; the subquery (OFFSET 0) keeps PostgreSQL from walking the index in time order
-- (kagent_fork_event_time) until the first match instead, which for a late turn reads the whole session.
WITH turn AS (
    SELECT min(created_at) AS at
    FROM (
        SELECT created_at
        FROM event
        WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
          AND (NOT $4 OR strpos(data, $3) > 0)
          AND {schema}.invocation_id_of(data) = $3
        OFFSET 0
    ) AS first_event
)
SELECT CASE WHEN opening.invocation_id = 'header_update' THEN opening.created_at ELSE turn.at END
FROM turn
LEFT JOIN LATERAL (
    SELECT created_at, {schema}.invocation_id_of(data) AS invocation_id
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at < turn.at
    ORDER BY created_at DESC, id DESC
    LIMIT 1
) AS opening ON true;

-- name: count_events_before
-- How many live events, and how many bytes, lie before $3 (NULL: all); and the characters of their
-- text messages (event_messages) for a token estimate (dry runs only: this parses every event). Each
-- row is cast to JSONB as it is: a row that is not JSON fails the statement, and the caller asks
-- count_events_before_tolerant, the same with try_jsonb, whose exception block (a subtransaction per
-- row) cost 10 % of the pass (issue 37). Same answers.
{count_events_of_doc} (SELECT data::jsonb AS doc OFFSET 0) {count_events_where};

-- name: count_events_before_tolerant
-- count_events_before for a session holding a row that is not JSON (counted, its text counted as none).
{count_events_of_doc} (SELECT {schema}.try_jsonb(data) AS doc OFFSET 0) {count_events_where};

-- name: count_events_before_part
-- count_events_before of part $5 of $4 of the rows (split by a hash of the row id, so that parts read on
-- several connections at once count every row once, and add up to count_events_before).
{count_events_of_doc} (SELECT data::jsonb AS doc OFFSET 0) {count_events_where}
  AND mod(hashtext(id)::bigint + 2147483648, $4) = $5;

-- name: count_events_before_part_tolerant
-- count_events_before_part for a session holding a row that is not JSON.
{count_events_of_doc} (SELECT {schema}.try_jsonb(data) AS doc OFFSET 0) {count_events_where}
  AND mod(hashtext(id)::bigint + 2147483648, $4) = $5;

-- name: copy_events_before
-- The fork's events: one server-side copy, payloads never leave PostgreSQL. Each copy gets a new
-- row id (kagent's key is (id, user_id)), keeps data byte for byte and the source created_at (so
-- kagent's ORDER BY created_at shows the same order). {fork_events_limit} is MAX_FORK_EVENTS + 1 (or
-- ALL), a constant so that no generic plan is made for an unknown limit: the caller rolls back a copy
-- of more rows than the cap, having copied at most one row too many.
{kept_events_copy};

-- name: copy_tasks_before
-- The fork's kept tasks, copied inside PostgreSQL (per_task layout): each gets a new id (uuid4), the
-- fork's session and user, the source created_at, and data with the task's own id and the source
-- session id ($1), each as a whole JSON string, replaced by the new ones (the fork is $5). The caller
-- checks in the same snapshot that this is exactly what the Python rewrite would write
-- (fork.ServerCopyCheck, tasks.replacing_ids_rewrites) and rolls the copy back otherwise.
-- gen_random_uuid() in the subquery's select list is evaluated once per row (a volatile subquery is
-- never flattened), and each replace() works on one detoasted copy of the row's text.
{task_copy_of_t}
FROM ({kept_tasks_with_new_ids}) AS t;

-- name: first_user_event
-- The text of the session's first user event, for a default fork name.
SELECT {schema}.try_jsonb(data) -> 'content' -> 'parts' AS parts
FROM event
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND strpos(data, '"user"') > 0
  AND {schema}.try_jsonb(data) ->> 'author' = 'user'
ORDER BY created_at
LIMIT 1;

-- name: event_turns
-- Every turn the events show, in order: invocation id, first event time, event count, and the text of
-- its first user event (its text messages, event_messages). Each row is parsed once, in a LATERAL
-- subquery that OFFSET 0 keeps whole, and cast as it is: a row that is not JSON fails the statement and
-- the caller asks event_turns_tolerant (try_jsonb: a subtransaction per row, 10 % of the pass). The
-- per-event columns are made before the grouping's sort (the inner OFFSET 0): sorted with them, the
-- parsed documents spilled to disk, and the pass took 1.35-1.75x the bare parse and grouping (issue 37).
{event_turns_of_doc} (SELECT e.data::jsonb AS doc OFFSET 0) {event_turns_where};

-- name: event_turns_tolerant
-- event_turns for a session holding a row that is not JSON (skipped, as no turn's).
{event_turns_of_doc} (SELECT {schema}.try_jsonb(e.data) AS doc OFFSET 0) {event_turns_where};

-- name: event_spans
-- Each invocation's span (its first and last time, its events, whether one may hold a message) in one part of the
-- rows (Events.event_spans merges the parts): the first pass of a listing of a session without a map.
{event_spans_of_doc} (SELECT e.data::jsonb AS doc OFFSET 0) {event_spans_where};

-- name: event_spans_tolerant
-- event_spans for a session holding a row that is not JSON (skipped, as no turn's).
{event_spans_of_doc} (SELECT {schema}.try_jsonb(e.data) AS doc OFFSET 0) {event_spans_where};

-- name: event_heads
-- What event_turns makes of each of the invocations $5 (and whether it is a turn: any of its events holds a
-- message), read from their events between $3 and $4 (the first of their events and the last): only those
-- rows are parsed.
{event_heads_of_doc} (SELECT e.data::jsonb AS doc OFFSET 0) {event_range_where};

-- name: event_heads_tolerant
-- event_heads for a session holding a row that is not JSON.
{event_heads_of_doc} (SELECT {schema}.try_jsonb(e.data) AS doc OFFSET 0) {event_range_where};

-- name: events_tally
-- What the live events with $3 <= created_at < $4 (NULL: no end) hold, for a branch summary, a
-- comparison, a what-if's result or an experiment's turn: events, turns, model calls, tool calls by
-- name, the first user text and the
-- last agent text (cut to $5 and $6 characters; event order, row id breaking created_at ties so that
-- the answer never depends on the plan), total tokens, first and last event times, and each model call's
-- usage (an event with token counts: [input, output], input its prompt tokens, output its candidates' and
-- thoughts' tokens, as a price is asked for; event order). Each row is parsed once.
WITH parsed AS MATERIALIZED (
    SELECT id, created_at, {schema}.try_jsonb(data) AS doc
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND created_at >= $3 AND ($4::timestamptz IS NULL OR created_at < $4)
), messages AS MATERIALIZED (
    SELECT e.created_at, e.id, m.ord, m.author = 'user' AS from_user, m.kind, m.text, m.tool_name,
           coalesce(e.doc ->> 'invocation_id', e.doc ->> 'invocationId') AS invocation_id
    FROM parsed AS e
    CROSS JOIN LATERAL {schema}.event_messages(e.doc) AS m
)
SELECT (SELECT count(*) FROM parsed) AS events,
       -- turns as the listing counts them: invocations with at least one message, and the OpenAI Agents
       -- SDK's turns by their input events (is_turn_input)
       (SELECT count(DISTINCT invocation_id) FROM messages)
           + (SELECT count(*) FROM parsed WHERE {schema}.is_turn_input(doc)) AS turns,
       (SELECT coalesce(sum({schema}.event_tokens(doc, 'total_token_count', 'totalTokenCount')), 0)
        FROM parsed) AS total_tokens,
       -- the agent's model responses: its events whose content the model wrote (an OpenAI Agents SDK
       -- session: each of its conversation_items events but the turns' inputs, one a model step)
       (SELECT count(*) FROM parsed
        WHERE (doc -> 'content' ->> 'role' = 'model' AND doc ->> 'author' IS DISTINCT FROM 'user')
           OR (doc ->> 'type' = 'conversation_items' AND NOT {schema}.is_turn_input(doc))) AS model_calls,
       (SELECT min(created_at) FROM parsed) AS first_at,
       (SELECT max(created_at) FROM parsed) AS last_at,
       (SELECT coalesce(jsonb_object_agg(tool_name, calls), '{}'::jsonb)::text
        FROM (SELECT tool_name, count(*) AS calls FROM messages
              WHERE kind = 'tool_call' AND tool_name IS NOT NULL GROUP BY tool_name) AS t) AS tool_calls,
       (SELECT left(text, $5) FROM messages WHERE from_user AND kind = 'text'
        ORDER BY created_at, id, ord LIMIT 1) AS first_user_text,
       (SELECT left(text, $6) FROM messages WHERE NOT from_user AND kind = 'text'
        ORDER BY created_at DESC, id DESC, ord DESC LIMIT 1) AS last_agent_text,
       (SELECT coalesce(jsonb_agg(jsonb_build_array(input, output) ORDER BY created_at, id), '[]'::jsonb)::text
        FROM (SELECT created_at, id, {schema}.event_tokens(doc, 'prompt_token_count', 'promptTokenCount') AS input,
                     {schema}.event_tokens(doc, 'candidates_token_count', 'candidatesTokenCount')
                         + {schema}.event_tokens(doc, 'thoughts_token_count', 'thoughtsTokenCount') AS output
              FROM parsed) AS u
        WHERE input > 0 OR output > 0) AS model_usage;

-- name: events_tally_by_turn
-- events_tally of each turn (invocation id) whose events start at $3 or later, for lining two branches
-- up turn by turn: events, total tokens, first and last event times, tool calls by name, the first user
-- text and the last agent text (cut to $4 and $5 characters, the same order rules as events_tally).
-- Events without an invocation id belong to no turn here. Each row is parsed once, and each grouping is
-- made once (MATERIALIZED: inlined, a join re-ran a grouping for every turn, 7.8 s at 1,000 turns).
WITH parsed AS MATERIALIZED (
    SELECT id, created_at, {schema}.try_jsonb(data) AS doc
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND created_at >= $3
), keyed AS MATERIALIZED (
    SELECT id, created_at, doc, coalesce(doc ->> 'invocation_id', doc ->> 'invocationId') AS invocation_id
    FROM parsed
    WHERE jsonb_typeof(doc) = 'object'
), messages AS MATERIALIZED (
    SELECT e.invocation_id, e.created_at, e.id, m.ord, m.author = 'user' AS from_user, m.kind, m.text,
           m.tool_name
    FROM keyed AS e
    CROSS JOIN LATERAL {schema}.event_messages(e.doc) AS m
    WHERE e.invocation_id IS NOT NULL
), tools AS MATERIALIZED (
    SELECT invocation_id, jsonb_object_agg(tool_name, calls)::text AS tool_calls
    FROM (SELECT invocation_id, tool_name, count(*) AS calls FROM messages
          WHERE kind = 'tool_call' AND tool_name IS NOT NULL GROUP BY invocation_id, tool_name) AS t
    GROUP BY invocation_id
), texts AS MATERIALIZED (
    SELECT invocation_id,
           (array_agg(left(text, $4) ORDER BY created_at, id, ord)
                FILTER (WHERE from_user AND kind = 'text'))[1] AS first_user_text,
           (array_agg(left(text, $5) ORDER BY created_at DESC, id DESC, ord DESC)
                FILTER (WHERE NOT from_user AND kind = 'text'))[1] AS last_agent_text
    FROM messages
    GROUP BY invocation_id
), turns AS MATERIALIZED (
    SELECT invocation_id, count(*) AS events, min(created_at) AS first_at, max(created_at) AS last_at,
           coalesce(sum({schema}.event_tokens(doc, 'total_token_count', 'totalTokenCount')), 0) AS total_tokens
    FROM keyed
    WHERE invocation_id IS NOT NULL
    GROUP BY invocation_id
)
SELECT turns.invocation_id, turns.events, turns.total_tokens, turns.first_at, turns.last_at,
       coalesce(tools.tool_calls, '{}') AS tool_calls, texts.first_user_text, texts.last_agent_text
FROM turns
LEFT JOIN tools USING (invocation_id)
LEFT JOIN texts USING (invocation_id)
ORDER BY turns.first_at, turns.invocation_id;

-- name: transcript_events
-- The live events before $3 (NULL: all) and from $5 on (NULL: from the first) as a transcript reads them, in kagent's order (created_at; the
-- row id breaks ties so that the order never depends on the plan), each with the key of the turn it
-- belongs to: its invocation id (ADK), else its own; an OpenAI Agents SDK event says so (`items`) and
-- whether it opens a turn (is_turn_input), so that the reader runs a turn from one input to the next
-- (counted as the rows stream: a window here sorted the parsed documents, spilling them to disk). Each
-- row is parsed once; its messages (event_messages, each with its
-- author) come as one JSON array with tool arguments and responses cut to $4 characters, and its usage as
-- three numbers. doc_kind is NULL for a row that is not JSON.
WITH parsed AS MATERIALIZED (
    SELECT id, created_at, {schema}.try_jsonb(data) AS doc
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND ($3::timestamptz IS NULL OR created_at < $3) AND ($5::timestamptz IS NULL OR created_at >= $5)
), keyed AS (
    SELECT id, created_at, doc, coalesce(doc ->> 'invocation_id', doc ->> 'invocationId') AS invocation_id
    FROM parsed
)
SELECT id, created_at, invocation_id, jsonb_typeof(doc) AS doc_kind, doc ->> 'author' AS author,
       coalesce(invocation_id, 'event:' || id) AS turn_key,
       doc ->> 'type' = 'conversation_items' AS items, {schema}.is_turn_input(doc) AS opens_turn,
       {schema}.event_tokens(doc, 'prompt_token_count', 'promptTokenCount') AS prompt_tokens,
       {schema}.event_tokens(doc, 'candidates_token_count', 'candidatesTokenCount') AS completion_tokens,
       {schema}.event_tokens(doc, 'total_token_count', 'totalTokenCount') AS total_tokens,
       (SELECT coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                   'kind', m.kind, 'text', m.text, 'tool_name', m.tool_name, 'tool_call_id', m.tool_call_id,
                   'args', {schema}.cut_json(m.args, $4), 'response', {schema}.cut_json(m.response, $4),
                   'author', m.author))
               ORDER BY m.ord), '[]'::jsonb)::text
        FROM {schema}.event_messages(doc) AS m) AS messages
FROM keyed
ORDER BY created_at, id;

-- name: turn_input_event
-- Where the turn of task $3 begins in an OpenAI Agents SDK session (docs/frameworks.md, "Naming a turn"):
-- its input event, the k-th turn input (is_turn_input) of the live events for the k-th live task of the
-- session (both in (created_at, id) order), since kagent-openai writes one task and one input event a
-- turn, in either order. Also both counts and the last of each, so that the caller trusts the pairing
-- only when they agree (Events.turn_input). k is NULL when the task is not one of the session's live
-- tasks of owner $2.
WITH tasks AS MATERIALIZED (
    SELECT id, created_at, row_number() OVER (ORDER BY created_at, id) AS k
    FROM task
    WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL AND {task_owned_by_$2}
), inputs AS MATERIALIZED (
    SELECT id, created_at, row_number() OVER (ORDER BY created_at, id) AS k
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND strpos(data, 'conversation_items') > 0 AND {schema}.is_turn_input({schema}.try_jsonb(data))
)
SELECT (SELECT k FROM tasks WHERE id = $3) AS k,
       (SELECT count(*) FROM tasks) AS tasks,
       (SELECT count(*) FROM inputs) AS inputs,
       (SELECT max(created_at) FROM tasks) AS last_task_at,
       (SELECT max(created_at) FROM inputs) AS last_input_at,
       (SELECT created_at FROM inputs WHERE k = (SELECT k FROM tasks WHERE id = $3)) AS input_at;

-- name: text_chars_before_each
-- For each time of $3, the characters of the text messages (event_messages) of the live events before
-- it: the token estimate of a fork before each of several turns (an experiment's cost gate), with each
-- event parsed once.
WITH chars AS MATERIALIZED (
    SELECT created_at,
           coalesce((SELECT sum(length(m.text)) FROM {schema}.event_messages({schema}.try_jsonb(data)) AS m
                     WHERE m.kind = 'text'), 0) AS n
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND created_at < (SELECT max(b) FROM unnest($3::timestamptz[]) AS b)
)
SELECT b AS before, coalesce((SELECT sum(n) FROM chars WHERE created_at < b), 0) AS text_chars
FROM unnest($3::timestamptz[]) AS b
ORDER BY b;
