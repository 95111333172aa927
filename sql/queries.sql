-- Named queries of kagent-fork. {schema} is the service's own schema (validated at start-up).
-- kagent's tables are read with named columns only (kagent may add more) and every read filters
-- deleted_at IS NULL, as kagent's backend does. {name} stands for the fragment of that name below.

-- fragment: task_owned_by_$2
-- kagent's owner rule for a task row (go/core/internal/database/queries/tasks.sql): task.user_id, or,
-- for rows written before that column existed, the one user whose session of that id existed when
-- the task was written. Anything ambiguous belongs to nobody.
(task.user_id = $2 OR (task.user_id IS NULL AND $2 = (
    SELECT min(s.user_id) FROM session s
    WHERE s.id = task.session_id AND s.created_at <= task.created_at
    HAVING count(DISTINCT s.user_id) = 1)))

-- fragment: turns_of_parsed
-- The turns of the rows of `parsed` (created_at, doc), as event_turns answers them.
turns AS (
    SELECT coalesce(doc ->> 'invocation_id', doc ->> 'invocationId') AS invocation_id,
           created_at,
           CASE WHEN doc ->> 'author' = 'user'
                THEN (SELECT string_agg(m.text, E'\n' ORDER BY m.ord) FROM {schema}.event_messages(doc) AS m
                      WHERE m.kind = 'text')
           END AS user_text,
           EXISTS (SELECT 1 FROM {schema}.event_messages(doc)) AS has_messages
    FROM parsed
    WHERE jsonb_typeof(doc) = 'object'
)
SELECT invocation_id, min(created_at) AS started_at, count(*) AS event_count,
       (array_agg(left(user_text, 200) ORDER BY created_at) FILTER (WHERE user_text IS NOT NULL))[1] AS user_text
FROM turns
WHERE invocation_id IS NOT NULL
GROUP BY invocation_id
-- An invocation none of whose events holds a message is bookkeeping, not a turn (kagent 0.10.x's
-- "header_update" events, written before every turn under that one invocation id).
HAVING bool_or(has_messages)
ORDER BY started_at

-- name: kagent_tables
-- Which of kagent's tables and columns exist (start-up check).
SELECT table_name, column_name
FROM information_schema.columns
WHERE table_schema = current_schema()
  AND table_name IN ('session', 'event', 'task', 'session_share', 'schema_migrations');

-- name: schema_migrations
-- kagent's migration state: one row, dirty = a half-applied migration.
SELECT version, dirty FROM schema_migrations LIMIT 1;

-- name: share_by_token
-- A share link, as kagent's share middleware resolves X-Share-Token.
SELECT session_id, user_id, read_only FROM session_share WHERE token = $1 LIMIT 1;

-- name: get_session
-- A live session of one owner.
SELECT id, user_id, name, agent_id, source, created_at, updated_at
FROM session
WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL;

-- name: lock_session
-- The live session row, locked: rewinds and undos of one session run one at a time.
SELECT id, user_id, name, agent_id, source, created_at, updated_at
FROM session
WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL
FOR UPDATE;

-- name: session_status
-- Whether a session exists, deleted or not (for lineage trees).
SELECT name, deleted_at IS NOT NULL AS deleted FROM session WHERE id = $1 AND user_id = $2;

-- name: external_state
-- Does the session's agent keep its state outside kagent's event table (LangGraph, CrewAI)?
SELECT EXISTS (SELECT 1 FROM lg_checkpoint WHERE thread_id = $1 AND user_id = $2 AND deleted_at IS NULL)
    OR EXISTS (SELECT 1 FROM crewai_agent_memory WHERE thread_id = $1 AND user_id = $2 AND deleted_at IS NULL)
    OR EXISTS (SELECT 1 FROM crewai_flow_state WHERE thread_id = $1 AND user_id = $2 AND deleted_at IS NULL)
    AS external;

-- name: has_events
-- Whether the session has any live event.
SELECT EXISTS (
    SELECT 1 FROM event WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL
) AS has_events;

-- name: boundary_event
-- The first live event of invocation $3. strpos() is a plain text pre-filter so that only the rows
-- that mention the id are parsed as JSON; $4 = false skips it for ids JSON could escape. With the
-- invocation index the rows of the invocation are looked up; the subquery (OFFSET 0) keeps PostgreSQL
-- from walking the index in time order (kagent_fork_event_time) until the first match instead, which
-- for a late turn reads the whole session.
SELECT min(created_at)
FROM (
    SELECT created_at
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND (NOT $4 OR strpos(data, $3) > 0)
      AND {schema}.invocation_id_of(data) = $3
    OFFSET 0
) AS turn;

-- name: tasks_mentioning
-- Live tasks of the session that mention $3 anywhere in their text, oldest first (candidates for
-- the boundary task; the caller confirms in the parsed JSON).
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND {task_owned_by_$2}
  AND (NOT $4 OR strpos(data, $3) > 0)
ORDER BY created_at;

-- name: recent_tasks_mentioning
-- Of the session's newest 8 live tasks, those that mention $3 (same pre-filter as
-- tasks_mentioning), oldest first, each with the created_at of the oldest of the newest: a large
-- fork's guess of its boundary task. The sort reads only created_at and the TOAST pointers; only the
-- newest rows are decompressed.
WITH recent AS MATERIALIZED (
    SELECT id, created_at, protocol_version, data
    FROM task
    WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND {task_owned_by_$2}
    ORDER BY created_at DESC
    LIMIT 8
)
SELECT id, created_at, protocol_version, data, (SELECT min(created_at) FROM recent) AS oldest
FROM recent
WHERE (NOT $4 OR strpos(data, $3) > 0)
ORDER BY created_at;

-- name: last_task_before
-- The newest live task created before $3 (NULL: of all), to see whether the last kept turn still runs.
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}
ORDER BY created_at DESC
LIMIT 1;

-- name: count_tasks
-- How many live tasks the session has (is the fork large enough for a second connection?).
SELECT count(*)
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND {task_owned_by_$2};

-- name: tasks_before
-- The live tasks created before $3 (NULL: all), oldest first, with kagent's owner rule for rows
-- written before task.user_id existed.
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}
ORDER BY created_at;

-- name: tasks_mentioning_before
-- The live tasks created before $3 (NULL: all) that mention $4 in their text, oldest first (a plain
-- strpos: the caller passes only text no JSON encoder escapes, and reads the JSON of what it finds).
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}
  AND strpos(data, $4) > 0
ORDER BY created_at;

-- name: count_events_before
-- How many live events, and how many bytes, lie before $3 (NULL: all); and the characters of their
-- text messages (event_messages) for a token estimate (dry runs only: this parses every event).
SELECT count(*) AS events,
       coalesce(sum(octet_length(data)), 0) AS bytes,
       coalesce(sum((
           SELECT sum(length(m.text)) FROM {schema}.event_messages(doc.doc) AS m WHERE m.kind = 'text'
       )), 0) AS text_chars
FROM event
-- OFFSET 0 keeps the subquery whole: each row is parsed once, not once for every use of doc.
CROSS JOIN LATERAL (SELECT {schema}.try_jsonb(data) AS doc OFFSET 0) AS doc
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3);

-- name: copy_events_before
-- The fork's events: one server-side copy, payloads never leave PostgreSQL. Each copy gets a new
-- row id (kagent's key is (id, user_id)), keeps data byte for byte and the source created_at (so
-- kagent's ORDER BY created_at shows the same order). {fork_events_limit} is MAX_FORK_EVENTS + 1 (or
-- ALL), a constant so that no generic plan is made for an unknown limit: the caller rolls back a copy
-- of more rows than the cap, having copied at most one row too many.
INSERT INTO event (id, user_id, session_id, created_at, updated_at, data)
SELECT gen_random_uuid()::text, $4, $5, created_at, NOW(), data
FROM event
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
LIMIT {fork_events_limit};

-- name: copy_tasks_before
-- The fork's kept tasks, copied inside PostgreSQL (per_task layout): each gets a new id (uuid4), the
-- fork's session and user, the source created_at, and data with the task's own id and the source
-- session id ($1), each as a whole JSON string, replaced by the new ones (the fork is $5). The caller
-- checks in the same snapshot that this is exactly what the Python rewrite would write
-- (fork.ServerCopyCheck, tasks.replacing_ids_rewrites) and rolls the copy back otherwise.
-- gen_random_uuid() in the subquery's select list is evaluated once per row (a volatile subquery is
-- never flattened), and each replace() works on one detoasted copy of the row's text.
INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id)
SELECT t.new_id, t.created_at, NOW(),
       replace(replace(t.data, '"' || t.id || '"', '"' || t.new_id || '"'), '"' || $1 || '"', '"' || $5 || '"'),
       $5, t.protocol_version, $4
FROM (
    SELECT gen_random_uuid()::text AS new_id, id, created_at, data, protocol_version
    FROM task
    WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND ($3::timestamptz IS NULL OR created_at < $3)
      AND {task_owned_by_$2}
) AS t;

-- name: first_user_event
-- The text of the session's first user event, for a default fork name.
SELECT {schema}.try_jsonb(data) -> 'content' -> 'parts' AS parts
FROM event
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND strpos(data, '"user"') > 0
  AND {schema}.try_jsonb(data) ->> 'author' = 'user'
ORDER BY created_at
LIMIT 1;

-- name: insert_session
-- The fork's session row; created_at = updated_at = the database's now.
INSERT INTO session (id, user_id, name, agent_id, source, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, NOW(), NOW())
RETURNING id, user_id, name, agent_id, source, created_at, updated_at;

-- name: lineage_of
-- A session's own lineage record, if it is a fork.
SELECT session_id, user_id, parent_session_id, parent_user_id, root_session_id, root_user_id, depth,
       rewind_before_invocation_id, boundary_found, events_copied, tasks_copied, messages_copied,
       task_layout, warnings::text AS warnings, summary::text AS summary, created_at
FROM {schema}.fork
WHERE session_id = $1 AND user_id = $2;

-- name: insert_lineage
-- The lineage record of a new fork.
INSERT INTO {schema}.fork (session_id, user_id, parent_session_id, parent_user_id, root_session_id,
                           root_user_id, depth, rewind_before_invocation_id, boundary_found,
                           events_copied, tasks_copied, messages_copied, task_layout, warnings,
                           summary, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::jsonb, $15::jsonb, $16);

-- name: idempotency_get
-- A stored fork answer for this caller's key, if still fresh.
SELECT request_hash, response::text AS response
FROM {schema}.idempotency
WHERE user_id = $1 AND key = $2 AND created_at > NOW() - make_interval(secs => $3);

-- name: idempotency_put
-- Remember a fork's answer (stale records for the key are replaced).
INSERT INTO {schema}.idempotency (user_id, key, request_hash, session_id, response)
VALUES ($1, $2, $3, $4, $5::jsonb)
ON CONFLICT (user_id, key) DO UPDATE SET
    request_hash = EXCLUDED.request_hash, session_id = EXCLUDED.session_id,
    response = EXCLUDED.response, created_at = NOW();

-- name: idempotency_purge
-- Forget answers older than the retention time.
DELETE FROM {schema}.idempotency WHERE created_at <= NOW() - make_interval(secs => $1);

-- name: advisory_lock
-- A session-level lock on one key (idempotent fork requests of one caller and key run one at a time).
SELECT pg_advisory_lock(hashtextextended($1, 0));

-- name: advisory_unlock
-- Release advisory_lock.
SELECT pg_advisory_unlock(hashtextextended($1, 0));

-- name: task_versions_before
-- The protocol versions (dialects) of the live tasks created before $3 (NULL: all), and how many of each.
SELECT protocol_version, count(*) AS tasks
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}
GROUP BY protocol_version;

-- name: now
-- The transaction's timestamp, used for every row a fork or rewind stamps.
SELECT NOW();

-- name: tasks_from
-- The live tasks created at or after $3, oldest first (the ones a rewind would hide).
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL AND created_at >= $3
  AND {task_owned_by_$2}
ORDER BY created_at;

-- name: hide_events_from
-- Rewind: soft-delete the live events at or after $3 with one stamp $4 (undo finds them by it).
UPDATE event SET deleted_at = $4
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL AND created_at >= $3;

-- name: hide_tasks_from
-- Rewind: soft-delete the live tasks at or after $3 with one stamp $4.
UPDATE task SET deleted_at = $4
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL AND created_at >= $3
  AND {task_owned_by_$2};

-- name: touch_session
-- What kagent does on every event or task write: lift the session in the sidebar.
UPDATE session SET updated_at = NOW() WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL
RETURNING id, user_id, name, agent_id, source, created_at, updated_at;

-- name: rewind_stamp
-- A rewind's one stamp, taken once the session row is locked: later than every earlier rewind of the
-- session. NOW() is the transaction's start, which two rewinds can share (one undo would then restore
-- both's rows) and which need not follow the order in which they took the lock (undos go by it).
SELECT greatest(clock_timestamp(), (
    SELECT max(created_at) + interval '1 microsecond' FROM {schema}.rewind WHERE session_id = $1 AND user_id = $2
));

-- name: insert_rewind
-- The record of a rewind; created_at is its stamp ($5), so that records sort in the order applied.
INSERT INTO {schema}.rewind (id, session_id, user_id, rewind_before_invocation_id, deleted_at, events_removed,
                             tasks_removed, replaced_task_id, replacement_task_id, requested_by, summary,
                             created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $5)
RETURNING created_at;

-- name: get_rewind
-- A rewind of one session.
SELECT id, session_id, user_id, rewind_before_invocation_id, deleted_at, events_removed, tasks_removed,
       replaced_task_id, replacement_task_id, requested_by, summary::text AS summary, created_at, undone_at
FROM {schema}.rewind
WHERE id = $1 AND session_id = $2 AND user_id = $3;

-- name: list_rewinds
-- The rewinds of one session, newest first.
SELECT id, session_id, user_id, rewind_before_invocation_id, deleted_at, events_removed, tasks_removed,
       replaced_task_id, replacement_task_id, requested_by, summary::text AS summary, created_at, undone_at
FROM {schema}.rewind
WHERE session_id = $1 AND user_id = $2
ORDER BY created_at DESC;

-- name: later_rewind_pending
-- Is there a later rewind of the session that is not undone? (undos go newest first)
SELECT EXISTS (
    SELECT 1 FROM {schema}.rewind
    WHERE session_id = $1 AND user_id = $2 AND created_at > $3 AND undone_at IS NULL AND id <> $4
) AS pending;

-- name: activity_since
-- Has the session new live events or tasks since the rewind's stamp $3 (other than the rewind's
-- own replacement task $4)?
SELECT EXISTS (
    SELECT 1 FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at > $3
) OR EXISTS (
    SELECT 1 FROM task
    WHERE session_id = $1 AND deleted_at IS NULL AND created_at > $3 AND id IS DISTINCT FROM $4
      AND (user_id = $2 OR user_id IS NULL)
) AS active;

-- name: restore_events
-- Undo: bring back the events one rewind hid (found by its stamp).
UPDATE event SET deleted_at = NULL WHERE session_id = $1 AND user_id = $2 AND deleted_at = $3;

-- name: restore_tasks
-- Undo: bring back the tasks one rewind hid.
UPDATE task SET deleted_at = NULL
WHERE session_id = $1 AND deleted_at = $3 AND (user_id = $2 OR user_id IS NULL);

-- name: hide_task
-- Undo: soft-delete the replacement task a rewind wrote.
UPDATE task SET deleted_at = NOW() WHERE id = $1 AND deleted_at IS NULL;

-- name: mark_undone
-- Undo: the rewind is undone.
UPDATE {schema}.rewind SET undone_at = NOW() WHERE id = $1 RETURNING undone_at;

-- name: event_turns
-- Every turn the events show, in order: invocation id, first event time, event count, and the text of
-- its first user event (its text messages, event_messages). Each row is parsed once (MATERIALIZED:
-- inlined, the parse would run once for every use of doc).
WITH parsed AS MATERIALIZED (
    SELECT created_at, {schema}.try_jsonb(data) AS doc
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
), {turns_of_parsed};

-- name: event_turns_of
-- event_turns of the invocations $3 only, looked up by the invocation index. Run with custom plans only
-- (Store.custom_plans): for a generic plan PostgreSQL takes a session for a handful of rows and reads
-- all of it (1.4 s at 100,000 events instead of 20 ms).
WITH parsed AS MATERIALIZED (
    SELECT created_at, {schema}.try_jsonb(data) AS doc
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND {schema}.invocation_id_of(data) = ANY($3::text[])
), {turns_of_parsed};

-- name: event_walk
-- The session's next $5 events after ($3, $4) in (created_at, id) order, with their invocation id: a
-- turn listing page reads the events of its own turns only (by the invocation index's (session, owner,
-- created_at) part). The first call passes ('-infinity', '').
SELECT id, created_at, {schema}.invocation_id_of(data) AS invocation_id
FROM event
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND created_at >= $3 AND (created_at, id) > ($3, $4)
ORDER BY created_at, id
LIMIT $5;

-- name: tasks_carrying_any
-- The live tasks that may carry any of the invocations $3 (the invocation index; '' adds the rows
-- PostgreSQL cannot read), oldest first: candidates, a superset, which the caller confirms with its
-- own reader (tasks_mentioning's when the index is valid; the tasks of a listing page's turns).
-- $4, $5: leave out the tasks created in [$4, $5) (NULL: leave none out; $5 NULL: no end), which a
-- listing page has read already.
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND {task_owned_by_$2}
  AND {schema}.task_invocation_candidates(data) && array_append($3::text[], '')
  AND NOT coalesce(created_at >= $4 AND ($5::timestamptz IS NULL OR created_at < $5), false)
ORDER BY created_at;

-- name: tasks_between
-- The live tasks created at or after $3 and before $4 (NULL: no end), oldest first.
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND created_at >= $3 AND ($4::timestamptz IS NULL OR created_at < $4)
  AND {task_owned_by_$2}
ORDER BY created_at;

-- name: events_tally
-- What the live events with $3 <= created_at < $4 (NULL: no end) hold, for a branch summary, a
-- comparison or a what-if's result: events, turns, tool calls by name, the first user text and the
-- last agent text (cut to $5 and $6 characters; event order, row id breaking created_at ties so that
-- the answer never depends on the plan), total tokens, first and last event times. Each row is
-- parsed once.
WITH parsed AS MATERIALIZED (
    SELECT id, created_at, {schema}.try_jsonb(data) AS doc
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND created_at >= $3 AND ($4::timestamptz IS NULL OR created_at < $4)
), messages AS MATERIALIZED (
    SELECT e.created_at, e.id, m.ord, e.doc ->> 'author' = 'user' AS from_user, m.kind, m.text, m.tool_name,
           coalesce(e.doc ->> 'invocation_id', e.doc ->> 'invocationId') AS invocation_id
    FROM parsed AS e
    CROSS JOIN LATERAL {schema}.event_messages(e.doc) AS m
)
SELECT (SELECT count(*) FROM parsed) AS events,
       -- turns as the listing counts them: invocations with at least one message
       (SELECT count(DISTINCT invocation_id) FROM messages) AS turns,
       (SELECT coalesce(sum({schema}.event_tokens(doc, 'total_token_count', 'totalTokenCount')), 0)
        FROM parsed) AS total_tokens,
       (SELECT min(created_at) FROM parsed) AS first_at,
       (SELECT max(created_at) FROM parsed) AS last_at,
       (SELECT coalesce(jsonb_object_agg(tool_name, calls), '{}'::jsonb)::text
        FROM (SELECT tool_name, count(*) AS calls FROM messages
              WHERE kind = 'tool_call' AND tool_name IS NOT NULL GROUP BY tool_name) AS t) AS tool_calls,
       (SELECT left(text, $5) FROM messages WHERE from_user AND kind = 'text'
        ORDER BY created_at, id, ord LIMIT 1) AS first_user_text,
       (SELECT left(text, $6) FROM messages WHERE NOT from_user AND kind = 'text'
        ORDER BY created_at DESC, id DESC, ord DESC LIMIT 1) AS last_agent_text;

-- name: transcript_events
-- The live events before $3 (NULL: all) as a transcript reads them, in kagent's order (created_at; the
-- row id breaks ties so that the order never depends on the plan), each with the key of the turn it
-- belongs to (its invocation id; an event without one is a turn of its own). Each row is parsed once; its messages (event_messages) come as one JSON array with
-- tool arguments and responses cut to $4 characters, and its usage as three numbers. doc_kind is NULL
-- for a row that is not JSON.
WITH parsed AS MATERIALIZED (
    SELECT id, created_at, {schema}.try_jsonb(data) AS doc
    FROM event
    WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND ($3::timestamptz IS NULL OR created_at < $3)
), keyed AS (
    SELECT id, created_at, doc, coalesce(doc ->> 'invocation_id', doc ->> 'invocationId') AS invocation_id
    FROM parsed
)
SELECT id, created_at, invocation_id, jsonb_typeof(doc) AS doc_kind, doc ->> 'author' AS author,
       coalesce(invocation_id, 'event:' || id) AS turn_key,
       {schema}.event_tokens(doc, 'prompt_token_count', 'promptTokenCount') AS prompt_tokens,
       {schema}.event_tokens(doc, 'candidates_token_count', 'candidatesTokenCount') AS completion_tokens,
       {schema}.event_tokens(doc, 'total_token_count', 'totalTokenCount') AS total_tokens,
       (SELECT coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                   'kind', m.kind, 'text', m.text, 'tool_name', m.tool_name, 'tool_call_id', m.tool_call_id,
                   'args', {schema}.cut_json(m.args, $4), 'response', {schema}.cut_json(m.response, $4)))
               ORDER BY m.ord), '[]'::jsonb)::text
        FROM {schema}.event_messages(doc) AS m) AS messages
FROM keyed
ORDER BY created_at, id;

-- name: forks_of
-- The direct forks of a session, oldest first, with their session's name and state.
SELECT f.session_id, f.user_id, f.parent_session_id, f.parent_user_id, f.root_session_id, f.root_user_id,
       f.depth, f.rewind_before_invocation_id, f.boundary_found, f.events_copied, f.tasks_copied,
       f.messages_copied, f.task_layout, f.warnings::text AS warnings, f.summary::text AS summary, f.created_at
FROM {schema}.fork f
WHERE f.parent_session_id = $1 AND f.parent_user_id = $2
ORDER BY f.created_at;

-- name: fork_rate_wait
-- FORK_RATE_PER_MINUTE: if user $1 made $2 or more forks in the last minute, the seconds until the
-- $2-th newest of them is a minute old (no row: the user may fork).
SELECT extract(epoch FROM created_at + interval '1 minute' - NOW()) AS wait
FROM {schema}.fork
WHERE user_id = $1 AND created_at > NOW() - interval '1 minute'
ORDER BY created_at DESC
OFFSET $2 - 1
LIMIT 1;

-- name: export_snapshot
-- The fork transaction's snapshot, so that a second connection reads exactly what it sees.
SELECT pg_export_snapshot();

-- name: first_task
-- The session's oldest live task (its first user message names an unnamed fork).
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND {task_owned_by_$2}
ORDER BY created_at
LIMIT 1;

-- name: insert_whatif_job
-- A new what-if job, running, written in its fork's transaction.
INSERT INTO {schema}.whatif_job (id, user_id, parent_session_id, parent_user_id, session_id,
                                 rewind_before_invocation_id, agent_ref, dialect, message, status, runner)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, 'running', $10)
RETURNING created_at;

-- name: get_whatif_job
-- A job, as its creator sees it.
SELECT id, user_id, parent_session_id, parent_user_id, session_id, rewind_before_invocation_id, agent_ref, dialect,
       message::text AS message, status, task_id, error, result::text AS result, runner, created_at, finished_at
FROM {schema}.whatif_job
WHERE id = $1 AND user_id = $2;

-- name: list_whatif_jobs
-- The jobs one user started from one source session, newest first.
SELECT id, user_id, parent_session_id, parent_user_id, session_id, rewind_before_invocation_id, agent_ref, dialect,
       message::text AS message, status, task_id, error, result::text AS result, runner, created_at, finished_at
FROM {schema}.whatif_job
WHERE parent_session_id = $1 AND parent_user_id = $2 AND user_id = $3
ORDER BY created_at DESC;

-- name: whatif_task
-- The agent's A2A task id, once it answered; the runner's heartbeat with it.
UPDATE {schema}.whatif_job SET task_id = $2, heartbeat_at = NOW() WHERE id = $1 AND status = 'running';

-- name: whatif_heartbeat
-- The runner still runs the job (an answer of no row: the job ended or another runner took it).
UPDATE {schema}.whatif_job SET heartbeat_at = NOW()
WHERE id = $1 AND status = 'running' AND runner = $2
RETURNING id;

-- name: whatif_finish
-- A running job ends (a job that already ended, e.g. cancelled meanwhile, is left as it is).
UPDATE {schema}.whatif_job SET status = $2, error = $3, result = $4::jsonb, finished_at = NOW()
WHERE id = $1 AND status = 'running'
RETURNING finished_at;

-- name: whatif_claim_stale
-- Running jobs whose runner stopped beating for $2 seconds (its replica died or stopped), taken over by
-- runner $1: one UPDATE, so that two replicas never take the same job.
UPDATE {schema}.whatif_job SET runner = $1, heartbeat_at = NOW()
WHERE status = 'running' AND heartbeat_at < NOW() - make_interval(secs => $2)
RETURNING id, user_id, parent_session_id, parent_user_id, session_id, rewind_before_invocation_id, agent_ref, dialect,
          message::text AS message, status, task_id, error, result::text AS result, runner, created_at, finished_at;

-- name: explorer_sessions
-- The caller's live sessions, newest first (as kagent's sidebar orders them), of one agent when $2 is
-- given, at most $3.
SELECT id, user_id, name, agent_id, source, created_at, updated_at
FROM session
WHERE user_id = $1 AND deleted_at IS NULL AND ($2::text IS NULL OR agent_id = $2)
ORDER BY updated_at DESC, id
LIMIT $3;

-- name: index_states
-- The service's indexes on kagent's tables, by name ($1): whether each is valid (an interrupted CREATE
-- INDEX CONCURRENTLY leaves one that is not), its comment (the version that built it), its size.
SELECT c.relname AS name, i.indisvalid AS valid, obj_description(c.oid, 'pg_class') AS comment,
       pg_relation_size(c.oid) AS bytes
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY($1::text[]);
