-- Named queries of kagent-fork. {schema} is the service's own schema (validated at start-up).
-- kagent's tables are read with named columns only (kagent may add more) and every read filters
-- deleted_at IS NULL, as kagent's backend does. {name} stands for the fragment of that name below.

-- fragment: kept_tasks_with_new_ids
-- The kept tasks of a fork (before $3, kagent's owner rule for $2), each with its new id (uuid4). It stands
-- before task_owned_by_$2: a fragment may use only those defined after it.
SELECT gen_random_uuid()::text AS new_id, id, created_at, data, protocol_version
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}

-- fragment: task_copy_of_t
-- The fork's copies of the kept tasks `t` (kept_tasks_with_new_ids): the fork's session ($5) and user ($4),
-- the source created_at, and data with the task's own id and the source session id ($1), each as a whole
-- JSON string, replaced by the new ones. Followed by the FROM that names `t`.
INSERT INTO task (id, created_at, updated_at, data, session_id, protocol_version, user_id)
SELECT t.new_id, t.created_at, NOW(),
       replace(replace(t.data, '"' || t.id || '"', '"' || t.new_id || '"'), '"' || $1 || '"', '"' || $5 || '"'),
       $5, t.protocol_version, $4

-- fragment: kept_events_copy
-- The fork's events copied (copy_events_before says how).
INSERT INTO event (id, user_id, session_id, created_at, updated_at, data)
SELECT gen_random_uuid()::text, $4, $5, created_at, NOW(), data
FROM event
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
LIMIT {fork_events_limit}

-- fragment: event_turns_of_doc
-- event_turns up to the LATERAL that parses each event row `e` into `doc` (event_turns_where follows it).
SELECT invocation_id, min(created_at) AS started_at, count(*) AS event_count, {first_user_text} AS user_text
FROM (
    SELECT coalesce(p.doc ->> 'invocation_id', p.doc ->> 'invocationId') AS invocation_id, e.created_at,
           {user_text_of_p} AS user_text,
           EXISTS (SELECT 1 FROM {schema}.event_messages(p.doc)) AS has_messages
    FROM event AS e
    CROSS JOIN LATERAL

-- fragment: event_spans_of_doc
-- event_spans up to the LATERAL that parses each event row `e` into `doc` (event_spans_where follows it): per
-- invocation, its first and last time, its events, whether one of them may hold a message, and its user's text
-- when plain. A message is an element of the event's content.parts (event_messages), so an event whose parts have
-- no first element holds none: a superset, read without event_messages (a third of the pass). A user event whose
-- parts are one plain text part (plain_user_parts) holds that text as its only message: when it is the only user
-- event with parts of its invocation (`user_events` 1, `plain_events` 1), the invocation is a turn and the text
-- its user text (the caller reads any other exactly, with event_heads). Only the user's events are looked into.
-- A hash aggregate, no sort.
SELECT invocation_id, min(created_at) AS started_at, max(created_at) AS ended_at, count(*) AS event_count,
       bool_or(may_hold) AS may_hold,
       count(*) FILTER (WHERE user_parts -> 0 IS NOT NULL) AS user_events,
       count(*) FILTER (WHERE user_parts IS NOT NULL AND {plain_user_parts}) AS plain_events,
       min(left(user_parts -> 0 ->> 'text', 200)) FILTER (WHERE user_parts IS NOT NULL AND {plain_user_parts})
         AS user_text
FROM (
    SELECT coalesce(p.doc ->> 'invocation_id', p.doc ->> 'invocationId') AS invocation_id, e.created_at,
           p.doc -> 'content' -> 'parts' -> 0 IS NOT NULL AS may_hold,
           CASE WHEN p.doc ->> 'author' = 'user' THEN p.doc -> 'content' -> 'parts' END AS user_parts
    FROM event AS e
    CROSS JOIN LATERAL

-- fragment: event_spans_where
-- event_spans after its LATERAL: of the session's live rows, part $4 of $3 (split by a hash of the row id, so
-- that parts read on several connections at once make every row's invocation once), grouped by invocation.
    AS p
    WHERE e.session_id = $1 AND e.user_id = $2 AND e.deleted_at IS NULL AND e.created_at IS NOT NULL
      AND mod(hashtext(e.id)::bigint + 2147483648, $3) = $4
      AND jsonb_typeof(p.doc) = 'object'
    OFFSET 0
) AS turns
WHERE invocation_id IS NOT NULL
GROUP BY invocation_id

-- fragment: event_heads_of_doc
-- event_heads up to the LATERAL that parses each event row `e` into `doc` (event_range_where follows it): what
-- event_turns makes of each invocation, its last time, and whether any of its events holds a message.
SELECT invocation_id, min(created_at) AS started_at, max(created_at) AS ended_at, count(*) AS event_count,
       bool_or(has_messages) AS has_messages, {first_user_text} AS user_text
FROM (
    SELECT coalesce(p.doc ->> 'invocation_id', p.doc ->> 'invocationId') AS invocation_id, e.created_at,
           EXISTS (SELECT 1 FROM {schema}.event_messages(p.doc)) AS has_messages,
           {user_text_of_p} AS user_text
    FROM event AS e
    CROSS JOIN LATERAL

-- fragment: event_range_where
-- event_heads after its LATERAL: the session's live rows from $3 to $4 (both included) of the invocations $5.
    AS p
    WHERE e.session_id = $1 AND e.user_id = $2 AND e.deleted_at IS NULL AND e.created_at IS NOT NULL
      AND e.created_at >= $3 AND e.created_at <= $4
      AND jsonb_typeof(p.doc) = 'object'
    OFFSET 0
) AS turns
WHERE invocation_id = ANY($5)
GROUP BY invocation_id

-- fragment: first_user_text
-- A turn's user text (an aggregate over its events' user_text, user_text_of_p): its first user event's.
(array_agg(left(user_text, 200) ORDER BY created_at) FILTER (WHERE user_text IS NOT NULL))[1]

-- fragment: user_text_of_p
-- The text of one parsed event `p` if the user wrote it: its text messages (event_messages), one per line.
CASE WHEN p.doc ->> 'author' = 'user'
     THEN (SELECT string_agg(m.text, E'\n' ORDER BY m.ord) FROM {schema}.event_messages(p.doc) AS m
           WHERE m.kind = 'text')
END

-- fragment: plain_user_parts
-- Whether a user event's content.parts (`user_parts`, NULL for another author's event) is one plain text part:
-- a JSON array of one object whose text is a string, that is no thought, and that names no function call or
-- response (any of their keys, whatever its value, makes it not plain). event_messages reads such an event as
-- exactly one text message, that text.
(jsonb_typeof(user_parts) = 'array' AND user_parts -> 1 IS NULL
 AND jsonb_typeof(user_parts -> 0 -> 'text') = 'string'
 AND user_parts -> 0 -> 'thought' IS DISTINCT FROM 'true'::jsonb
 AND NOT (user_parts -> 0 ?| array['function_call', 'functionCall', 'function_response', 'functionResponse']))

-- fragment: event_turns_where
-- event_turns after its LATERAL: the session's live rows, grouped by invocation. An invocation none of
-- whose events holds a message is bookkeeping, not a turn (kagent 0.10.x's "header_update" events,
-- written before every turn under that one invocation id).
    AS p
    WHERE e.session_id = $1 AND e.user_id = $2 AND e.deleted_at IS NULL AND e.created_at IS NOT NULL
      AND jsonb_typeof(p.doc) = 'object'
    OFFSET 0
) AS turns
WHERE invocation_id IS NOT NULL
GROUP BY invocation_id
HAVING bool_or(has_messages)
ORDER BY started_at

-- fragment: count_events_of_doc
-- count_events_before up to the LATERAL that parses each event row into `doc` (count_events_where follows).
SELECT count(*) AS events,
       coalesce(sum(octet_length(data)), 0) AS bytes,
       coalesce(sum((
           SELECT sum(length(m.text)) FROM {schema}.event_messages(doc.doc) AS m WHERE m.kind = 'text'
       )), 0) AS text_chars
FROM event
CROSS JOIN LATERAL

-- fragment: count_events_where
-- count_events_before after its LATERAL (OFFSET 0 there keeps each row parsed once, not once for every use).
AS doc
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)

-- fragment: task_owned_by_$2
-- kagent's owner rule for a task row (go/core/internal/database/queries/tasks.sql): task.user_id, or,
-- for rows written before that column existed, the one user whose session of that id existed when
-- the task was written. Anything ambiguous belongs to nobody.
(task.user_id = $2 OR (task.user_id IS NULL AND $2 = (
    SELECT min(s.user_id) FROM session s
    WHERE s.id = task.session_id AND s.created_at <= task.created_at
    HAVING count(DISTINCT s.user_id) = 1)))

-- fragment: job_columns
-- A job row as the store reads it.
id, user_id, parent_session_id, parent_user_id, session_id, rewind_before_invocation_id, agent_ref, dialect,
message::text AS message, status, task_id, error, result::text AS result, runner, created_at, finished_at,
experiment_id, repeat, agent_card::text AS agent_card, on_approval, stopped_at, turns_total, turns_done,
rewind_before_task_id, tool_policy::text AS tool_policy, arm_tools::text AS arm_tools

-- fragment: turn_columns
-- A job's turn as the store reads it.
job_id, ordinal, invocation_id, message::text AS message, sent_at, task_id, state, reply::text AS reply,
reply_sent_at, rejected_tool_calls, figures::text AS figures, ended_at, agent_found_at

-- fragment: experiment_columns
-- An experiment row as the store reads it.
id, user_id, source_session_id, source_user_id, source_agent_ref, rewind_before_invocation_id, turns_requested,
turns, message::text AS message, on_approval, repeats, source_turns::text AS source_turns, status, created_at,
finished_at, rewind_before_task_id, tool_policy::text AS tool_policy, arms::text AS arms

-- fragment: judgment_columns
-- A judgment row as the store reads it.
id, experiment_id, job_id, user_id, judge_agent_ref, judge_card::text AS judge_card, criteria, dialect, status,
runner, error, created_at, finished_at

-- fragment: judge_call_columns
-- A judge's call as the store reads it.
judgment_id, ordinal, left_job, right_job, swapped, message::text AS message, context_id, sent_at, task_id,
answer, winner, reason, error, ended_at
