-- Named queries of kagent-fork's store, service/kagent/store/turn_map.py (conventions: fragments.sql).
-- The turn map (migration 0008, docs/turn-map.md): $1 is always the session id, $2 its owner.

-- name: map_state
-- What the session's map claims, or no row when it has none.
SELECT version, session_updated_at, events_deleted, tasks_deleted, watermark_at, watermark_id, events, runs
FROM {schema}.turn_map
WHERE session_id = $1 AND user_id = $2;

-- name: map_guard
-- The map's claims (no row: no map) beside what the guard compares them with, in one statement:
-- kagent's side (session.updated_at, which kagent's InsertEvent and UpsertTask move; how many rows of the
-- session id are soft-deleted, which they do not, each counted through idx_*_deleted_at) and the map's
-- last run (its number is the count of runs, its running sum the count of events). Counting every row
-- of the map costs 3-30 ms at 100,000 events: that is done when the map is written (map_counts), not on
-- every read.
SELECT m.version, m.session_updated_at AS claimed_updated_at, m.events_deleted AS claimed_events_deleted,
       m.tasks_deleted AS claimed_tasks_deleted, m.watermark_at, m.watermark_id, m.events AS claimed_events,
       m.runs AS claimed_runs,
       (SELECT updated_at FROM session WHERE id = $1 AND user_id = $2) AS session_updated_at,
       (SELECT count(*) FROM event WHERE session_id = $1 AND deleted_at IS NOT NULL) AS events_deleted,
       (SELECT count(*) FROM task WHERE session_id = $1 AND deleted_at IS NOT NULL) AS tasks_deleted,
       r.seq AS runs, r.cum_events AS events
FROM (SELECT 1) AS one
LEFT JOIN {schema}.turn_map AS m ON m.session_id = $1 AND m.user_id = $2
LEFT JOIN LATERAL (
    SELECT seq, cum_events FROM {schema}.turn_map_run WHERE session_id = $1 AND user_id = $2 ORDER BY seq DESC LIMIT 1
) AS r ON true;

-- name: save_map_state
-- The map's claims, once its rows are written.
INSERT INTO {schema}.turn_map (session_id, user_id, version, session_updated_at, events_deleted, tasks_deleted,
                               watermark_at, watermark_id, events, runs, built_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NOW())
ON CONFLICT (session_id, user_id) DO UPDATE SET
    version = EXCLUDED.version, session_updated_at = EXCLUDED.session_updated_at,
    events_deleted = EXCLUDED.events_deleted, tasks_deleted = EXCLUDED.tasks_deleted,
    watermark_at = EXCLUDED.watermark_at, watermark_id = EXCLUDED.watermark_id, events = EXCLUDED.events,
    runs = EXCLUDED.runs, built_at = EXCLUDED.built_at;

-- name: map_xact_lock
-- The lock ensure() holds while it writes a session's map (lineage's advisory_lock on the same name),
-- taken for the rest of a rewind's or an undo's transaction.
SELECT pg_advisory_xact_lock(hashtextextended($1, 0));

-- name: forget_map_state
-- The session's map is not to be trusted (an undo restored rows it no longer holds): the next ask rebuilds it.
DELETE FROM {schema}.turn_map WHERE session_id = $1 AND user_id = $2;

-- name: forget_map_runs
DELETE FROM {schema}.turn_map_run WHERE session_id = $1 AND user_id = $2;

-- name: forget_map_turns
DELETE FROM {schema}.turn_map_turn WHERE session_id = $1 AND user_id = $2;

-- name: forget_map_tasks
DELETE FROM {schema}.turn_map_task WHERE session_id = $1 AND user_id = $2;

-- name: map_runs_from
-- Map the live events from ($3, $4) on (NULL: all) into runs numbered from $5, their sums added to $6
-- (events), $7 (bytes) and $8 (text characters); how many runs. Each row is parsed once, by the same
-- functions as the turn listing (event_turns) and a dry run (count_events_before) read it.
WITH read AS MATERIALIZED (
    -- Only the small columns leave this step: the runs are made by sorting them (the parsed documents
    -- carried through the sort spilled 140 MB to disk at 100,000 events).
    SELECT e.id, e.created_at, octet_length(e.data) AS bytes,
           CASE WHEN jsonb_typeof(p.doc) = 'object'
                THEN coalesce(p.doc ->> 'invocation_id', p.doc ->> 'invocationId') END AS invocation_id,
           m.text_chars, m.has_messages,
           CASE WHEN p.doc ->> 'author' = 'user' THEN m.user_text END AS user_text,
           {schema}.event_tokens(p.doc, 'total_token_count', 'totalTokenCount') AS tokens, m.tool_names,
           CASE WHEN p.doc ->> 'author' = 'user' THEN m.texts[1] END AS first_user_message,
           CASE WHEN p.doc ->> 'author' <> 'user' THEN m.texts[cardinality(m.texts)] END AS last_agent_message
    FROM event AS e
    -- OFFSET 0 keeps the subquery whole: each row is parsed once, not once for every use of doc.
    CROSS JOIN LATERAL (SELECT {schema}.try_jsonb(e.data) AS doc OFFSET 0) AS p
    CROSS JOIN LATERAL (
        SELECT coalesce(sum(length(x.text)) FILTER (WHERE x.kind = 'text'), 0) AS text_chars,
               count(*) > 0 AS has_messages,
               string_agg(x.text, E'\n' ORDER BY x.ord) FILTER (WHERE x.kind = 'text') AS user_text,
               array_agg(x.text ORDER BY x.ord) FILTER (WHERE x.kind = 'text') AS texts,
               array_agg(x.tool_name) FILTER (WHERE x.kind = 'tool_call' AND x.tool_name IS NOT NULL) AS tool_names
        FROM {schema}.event_messages(p.doc) AS x
    ) AS m
    WHERE e.session_id = $1 AND e.user_id = $2 AND e.deleted_at IS NULL AND e.created_at IS NOT NULL
      AND ($3::timestamptz IS NULL OR (e.created_at >= $3 AND (e.created_at, e.id) >= ($3, $4)))
      -- an extension names the rows (live_events_after read them): looked up by kagent's key (id, user_id)
      AND ($9::text[] IS NULL OR e.id = ANY($9))
), marked AS (
    SELECT *, CASE WHEN lag(id) OVER w IS NOT NULL AND lag(invocation_id) OVER w IS NOT DISTINCT FROM invocation_id
                   THEN 0 ELSE 1 END AS opens
    FROM read
    WINDOW w AS (ORDER BY created_at, id)
), numbered AS (
    SELECT *, sum(opens) OVER (ORDER BY created_at, id) AS run FROM marked
), runs AS (
    SELECT run, min(invocation_id) AS invocation_id,
           min(created_at) AS first_at, (array_agg(id ORDER BY created_at, id))[1] AS first_id,
           max(created_at) AS last_at, (array_agg(id ORDER BY created_at DESC, id DESC))[1] AS last_id,
           count(*) AS events, sum(bytes) AS bytes, sum(text_chars) AS text_chars, bool_or(has_messages) AS has_messages,
           (array_agg(left(user_text, 200) ORDER BY created_at, id) FILTER (WHERE user_text IS NOT NULL))[1] AS user_text,
           sum(tokens) AS tokens,
           (array_agg(left(first_user_message, 200) ORDER BY created_at, id)
               FILTER (WHERE first_user_message IS NOT NULL))[1] AS first_user_message,
           (array_agg(left(last_agent_message, 480) ORDER BY created_at DESC, id DESC)
               FILTER (WHERE last_agent_message IS NOT NULL))[1] AS last_agent_message
    FROM numbered
    GROUP BY run
), tools AS (
    SELECT run, jsonb_object_agg(name, calls) AS tool_calls
    FROM (SELECT run, name, count(*) AS calls FROM numbered CROSS JOIN LATERAL unnest(tool_names) AS name
          GROUP BY run, name) AS named
    GROUP BY run
), written AS (
    INSERT INTO {schema}.turn_map_run (session_id, user_id, seq, invocation_id, first_at, first_id, last_at, last_id,
                                       events, bytes, text_chars, has_messages, user_text, tokens, tool_calls,
                                       first_user_message, last_agent_message, cum_events, cum_bytes,
                                       cum_text_chars)
    SELECT $1, $2, $5 + runs.run - 1, invocation_id, first_at, first_id, last_at, last_id, events, bytes, text_chars,
           has_messages, user_text, tokens, coalesce(tools.tool_calls, '{}'), first_user_message, last_agent_message,
           $6 + sum(events) OVER (ORDER BY runs.run), $7 + sum(bytes) OVER (ORDER BY runs.run),
           $8 + sum(text_chars) OVER (ORDER BY runs.run)
    FROM runs
    LEFT JOIN tools ON tools.run = runs.run
    RETURNING invocation_id
)
SELECT count(*) AS runs, coalesce(array_agg(DISTINCT invocation_id) FILTER (WHERE invocation_id IS NOT NULL),
                                  '{}') AS invocations
FROM written;

-- name: last_run
-- The session's last run: an extension maps its events again (new events may continue it).
SELECT seq, first_at, first_id, invocation_id, cum_events - events AS events_before, cum_bytes - bytes AS bytes_before,
       cum_text_chars - text_chars AS text_chars_before
FROM {schema}.turn_map_run
WHERE session_id = $1 AND user_id = $2
ORDER BY seq DESC
LIMIT 1;

-- name: drop_runs_from
-- Runs numbered $3 or later, dropped; the invocations they held.
WITH dropped AS (
    DELETE FROM {schema}.turn_map_run WHERE session_id = $1 AND user_id = $2 AND seq >= $3
    RETURNING invocation_id
)
SELECT coalesce(array_agg(DISTINCT invocation_id) FILTER (WHERE invocation_id IS NOT NULL), '{}') FROM dropped;

-- name: first_run_from
-- The first run that holds an event at or after $3 (a rewind hides from there), and whether it starts
-- before $3 (then the rewind cuts inside it). Runs follow each other (one's last event is never after the
-- next one's first), so only the last run starting before $3 can hold events on both sides: two index
-- probes (turn_map_run_first), not a scan of the runs.
SELECT seq, straddles FROM (
    (SELECT seq, true AS straddles, 0 AS rank FROM (
         SELECT seq, last_at FROM {schema}.turn_map_run
         WHERE session_id = $1 AND user_id = $2 AND first_at < $3
         ORDER BY first_at DESC, first_id DESC
         LIMIT 1
     ) AS before WHERE last_at >= $3)
    UNION ALL
    (SELECT seq, false, 1 FROM {schema}.turn_map_run
     WHERE session_id = $1 AND user_id = $2 AND first_at >= $3
     ORDER BY first_at, first_id
     LIMIT 1)
) AS found
ORDER BY rank
LIMIT 1;

-- name: live_events_after
-- The extension's count, without parsing: the session's live events, those after the watermark ($3, $4;
-- NULL: none mapped), and the ids of those from ($5, $6) on (the last run's first event: the runs made
-- again), so that map_runs_from reads them by key instead of reading the session's rows a second time.
-- Reads the session's rows once (kagent's event has no index on created_at).
SELECT count(*) AS live,
       count(*) FILTER (WHERE $3::timestamptz IS NULL OR (created_at, id) > ($3, $4)) AS after,
       coalesce(array_agg(id) FILTER (WHERE $5::timestamptz IS NULL OR (created_at, id) >= ($5, $6)), '{}') AS ids
FROM event
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL;

-- name: last_mapped_event
-- The watermark: the last run's last event.
SELECT last_at, last_id FROM {schema}.turn_map_run WHERE session_id = $1 AND user_id = $2 ORDER BY seq DESC LIMIT 1;

-- name: turns_from_runs
-- The event part of the turns of invocations $3 (NULL: all) made again from the runs: the first event,
-- the events, whether any holds a message, the first user text. Turns of $3 no runs hold any more
-- are cleared first (turns_clear_events).
INSERT INTO {schema}.turn_map_turn AS t (session_id, user_id, invocation_id, event_first_at, event_first_id, events,
                                         has_messages, event_user_text)
SELECT $1, $2, invocation_id, (array_agg(first_at ORDER BY seq))[1], (array_agg(first_id ORDER BY seq))[1],
       sum(events), bool_or(has_messages),
       (array_agg(user_text ORDER BY seq) FILTER (WHERE user_text IS NOT NULL))[1]
FROM {schema}.turn_map_run
WHERE session_id = $1 AND user_id = $2 AND invocation_id IS NOT NULL
  AND ($3::text[] IS NULL OR invocation_id = ANY($3))
GROUP BY invocation_id
ON CONFLICT (session_id, user_id, invocation_id) DO UPDATE SET
    event_first_at = EXCLUDED.event_first_at, event_first_id = EXCLUDED.event_first_id, events = EXCLUDED.events,
    has_messages = EXCLUDED.has_messages, event_user_text = EXCLUDED.event_user_text;

-- name: turns_clear_events
UPDATE {schema}.turn_map_turn
SET event_first_at = NULL, event_first_id = NULL, events = 0, has_messages = false, event_user_text = NULL
WHERE session_id = $1 AND user_id = $2 AND invocation_id = ANY($3);

-- name: turns_clear_tasks
UPDATE {schema}.turn_map_turn
SET task_id = NULL, task_created_at = NULL, task_state = NULL, task_user_text = NULL
WHERE session_id = $1 AND user_id = $2 AND invocation_id = ANY($3);

-- name: turns_from_tasks
-- The task part of the turns of invocations $3 (NULL: all) made again from the mapped tasks, as the
-- listing completes a turn (turns.with_tasks, tasks oldest first): the first task carrying it, its
-- state, and the first user text any of them gives.
INSERT INTO {schema}.turn_map_turn AS t (session_id, user_id, invocation_id, events, has_messages, task_id,
                                         task_created_at, task_state, task_user_text)
SELECT $1, $2, c.invocation_id, 0, false,
       (array_agg(c.task_id ORDER BY c.created_at, c.task_id))[1],
       (array_agg(c.created_at ORDER BY c.created_at, c.task_id))[1],
       (array_agg(c.state ORDER BY c.created_at, c.task_id))[1],
       (array_agg(c.user_text ORDER BY c.created_at, c.task_id) FILTER (WHERE c.user_text IS NOT NULL))[1]
FROM (
    SELECT u.invocation_id, m.task_id, m.created_at, m.state, u.user_text
    FROM {schema}.turn_map_task AS m
    CROSS JOIN LATERAL unnest(m.invocation_ids, m.user_texts) AS u(invocation_id, user_text)
    -- Each pair's invocation looked up in $3 hashed once (an uncorrelated IN): `invocation_ids && $3` made
    -- the planner scan every task of the session comparing each with all of $3 (150-250 ms at 10,000 tasks
    -- and the 1,000 turns a rewind touches).
    WHERE m.session_id = $1 AND m.user_id = $2
      AND ($3::text[] IS NULL OR u.invocation_id IN (SELECT unnest($3::text[])))
) AS c
GROUP BY c.invocation_id
ON CONFLICT (session_id, user_id, invocation_id) DO UPDATE SET
    task_id = EXCLUDED.task_id, task_created_at = EXCLUDED.task_created_at, task_state = EXCLUDED.task_state,
    task_user_text = EXCLUDED.task_user_text;

-- name: turns_drop_hidden
-- The turns a rewind hid whole, dropped at once before the few it cut are made again (making 1,000 hidden
-- turns again one by one only to find them empty cost 100 ms): those whose first event is at or after $3
-- (or that have none) and whose first task is at or after $4 (or that have none), as the map held them
-- before the cut. Read turn by turn, not joined with the invocations the rewind touched: any turn these
-- hold was touched. The invocations dropped.
WITH dropped AS (
    DELETE FROM {schema}.turn_map_turn
    WHERE session_id = $1 AND user_id = $2
      -- an index range (turn_map_turn_order): a turn hidden whole starts at or after the earlier cut; a
      -- turn without a start (no message, no task) is made again instead, as any other touched one
      AND started_at >= least($3::timestamptz, $4::timestamptz)
      AND (event_first_at IS NULL OR event_first_at >= $3)
      AND (task_created_at IS NULL OR task_created_at >= $4)
    RETURNING invocation_id
)
SELECT coalesce(array_agg(invocation_id), '{}') FROM dropped;

-- name: turns_settle
-- Turns of $3 (NULL: all) with neither events nor a task dropped; the listing's start of the others:
-- a turn with a message starts at its first event, one only tasks know at its first task.
WITH dropped AS (
    DELETE FROM {schema}.turn_map_turn
    WHERE session_id = $1 AND user_id = $2 AND ($3::text[] IS NULL OR invocation_id = ANY($3))
      AND events = 0 AND task_id IS NULL
)
UPDATE {schema}.turn_map_turn
SET started_at = CASE WHEN has_messages THEN event_first_at ELSE task_created_at END
WHERE session_id = $1 AND user_id = $2 AND ($3::text[] IS NULL OR invocation_id = ANY($3))
  AND NOT (events = 0 AND task_id IS NULL);

-- name: map_counts
-- The map's claims as its rows make them: runs are numbered from 1 without gaps, and the last one's
-- running sum counts the events.
SELECT coalesce(max(seq), 0) AS runs,
       coalesce((SELECT cum_events FROM {schema}.turn_map_run WHERE session_id = $1 AND user_id = $2
                 ORDER BY seq DESC LIMIT 1), 0) AS events
FROM {schema}.turn_map_run
WHERE session_id = $1 AND user_id = $2;

-- name: kagent_marks
-- What the guard reads of kagent's side, to be recorded with the map (see map_guard).
SELECT (SELECT updated_at FROM session WHERE id = $1 AND user_id = $2) AS session_updated_at,
       (SELECT count(*) FROM event WHERE session_id = $1 AND deleted_at IS NOT NULL) AS events_deleted,
       (SELECT count(*) FROM task WHERE session_id = $1 AND deleted_at IS NOT NULL) AS tasks_deleted;

-- name: live_task_stamps
-- Every live task of the session (kagent's owner rule): id, created_at, updated_at. No task text is read.
SELECT id, created_at, updated_at
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND {task_owned_by_$2};

-- name: changed_tasks
-- What an extension reads again of the tasks, in one pass over each side (no task text read, nothing
-- compared in Python): the live tasks of the session (kagent's owner rule) that are new or whose
-- updated_at moved since they were mapped (kagent's upserts), and the mapped ones no longer live (gone).
SELECT coalesce(t.id, m.task_id) AS id, t.id IS NULL AS gone
FROM (SELECT id, updated_at FROM task
      WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL AND {task_owned_by_$2}) AS t
FULL JOIN (SELECT task_id, updated_at FROM {schema}.turn_map_task WHERE session_id = $1 AND user_id = $2) AS m
    ON m.task_id = t.id
WHERE t.id IS NULL OR m.task_id IS NULL OR m.updated_at IS DISTINCT FROM t.updated_at;

-- name: tasks_by_id
-- The live tasks of the session with ids $3, oldest first.
SELECT id, created_at, updated_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL AND id = ANY($3)
  AND {task_owned_by_$2}
ORDER BY created_at, id;

-- name: forget_tasks
-- Mapped tasks $3 dropped; the invocations they carried.
WITH dropped AS (
    DELETE FROM {schema}.turn_map_task WHERE session_id = $1 AND user_id = $2 AND task_id = ANY($3)
    RETURNING invocation_ids
)
SELECT coalesce(array_agg(DISTINCT i), '{}') FROM dropped CROSS JOIN LATERAL unnest(invocation_ids) AS i;

-- name: forget_tasks_from
-- Mapped tasks created at or after $3 dropped (a rewind hid them); the invocations they carried.
WITH dropped AS (
    DELETE FROM {schema}.turn_map_task WHERE session_id = $1 AND user_id = $2 AND created_at >= $3
    RETURNING invocation_ids
)
SELECT coalesce(array_agg(DISTINCT i), '{}') FROM dropped CROSS JOIN LATERAL unnest(invocation_ids) AS i;

-- name: map_turn
-- One turn of the map, by invocation.
SELECT invocation_id, event_first_at, event_first_id, task_id, task_created_at, started_at, has_messages, events,
       event_user_text, task_user_text, task_state
FROM {schema}.turn_map_turn
WHERE session_id = $1 AND user_id = $2 AND invocation_id = $3;

-- name: map_turn_page
-- Up to $5 turns in the listing's order (start, then invocation id) after the turn ($3, $4) (NULL: from
-- the first).
SELECT invocation_id, event_first_at, event_first_id, task_id, task_created_at, started_at, has_messages, events,
       event_user_text, task_user_text, task_state
FROM {schema}.turn_map_turn
WHERE session_id = $1 AND user_id = $2 AND started_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR (started_at >= $3 AND (started_at, invocation_id) > ($3, $4)))
ORDER BY started_at, invocation_id
LIMIT $5;

-- name: map_event_turns_before
-- How many turns with a message (the turns the events show, event_turns) come before the turn ($3, $4)
-- in the listing's order: a turn's number, less one.
SELECT count(*)
FROM {schema}.turn_map_turn
WHERE session_id = $1 AND user_id = $2 AND has_messages AND started_at IS NOT NULL
  AND (started_at, invocation_id) < ($3, $4);

-- name: map_figures_before
-- A dry run's event figures: the sums of the runs that end before $3 (NULL: all), if no run holds
-- events on both sides of $3 (then straddles is true and the caller counts the events itself).
-- Only the last run starting before $3 can straddle it, and the one before that ends before $3
-- (first_run_from): both read from the two last runs starting before $3 (turn_map_run_first).
WITH last_two AS (
    SELECT seq, last_at, cum_events, cum_bytes, cum_text_chars FROM {schema}.turn_map_run
    WHERE session_id = $1 AND user_id = $2 AND ($3::timestamptz IS NULL OR first_at < $3)
    ORDER BY first_at DESC, first_id DESC
    LIMIT 2
)
SELECT (SELECT ARRAY[cum_events, cum_bytes, cum_text_chars] FROM last_two
        WHERE $3::timestamptz IS NULL OR last_at < $3
        ORDER BY seq DESC LIMIT 1) AS sums,
       EXISTS (SELECT 1 FROM (SELECT last_at FROM last_two ORDER BY seq DESC LIMIT 1) AS before
               WHERE last_at >= $3) AS straddles;

-- name: map_tally_from
-- events_tally of the live events from $3 on (to the end), added up from the runs that start there or
-- later; straddles: a run holds events on both sides of $3 (then the caller reads the events instead).
-- $4, $5: the user and agent text lengths the caller wants (the runs keep 200 and 480).
SELECT EXISTS (SELECT 1 FROM (SELECT last_at FROM {schema}.turn_map_run
                             WHERE session_id = $1 AND user_id = $2 AND first_at < $3
                             ORDER BY first_at DESC, first_id DESC LIMIT 1) AS before
               WHERE last_at >= $3) AS straddles,  -- only the last run before $3 can (first_run_from)
       coalesce(sum(events), 0) AS events,
       count(DISTINCT invocation_id) FILTER (WHERE has_messages) AS turns,
       coalesce(sum(tokens), 0) AS total_tokens,
       min(first_at) AS first_at, max(last_at) AS last_at,
       (SELECT coalesce(jsonb_object_agg(name, calls), '{}'::jsonb)::text
        FROM (SELECT t.key AS name, sum(t.value::bigint) AS calls
              FROM {schema}.turn_map_run AS r CROSS JOIN LATERAL jsonb_each_text(r.tool_calls) AS t
              WHERE r.session_id = $1 AND r.user_id = $2 AND r.first_at >= $3
              GROUP BY t.key) AS c) AS tool_calls,
       left((array_agg(first_user_message ORDER BY seq) FILTER (WHERE first_user_message IS NOT NULL))[1], $4)
           AS first_user_text,
       left((array_agg(last_agent_message ORDER BY seq DESC) FILTER (WHERE last_agent_message IS NOT NULL))[1], $5)
           AS last_agent_text
FROM {schema}.turn_map_run
WHERE session_id = $1 AND user_id = $2 AND first_at >= $3;

-- name: map_task_figures
-- A per_task fork's figures of the mapped tasks created before $3 (NULL: all), with the caller's user
-- id $4 written in each task's user places: tasks, history messages, bytes, and the tasks the copier
-- refuses (NULL figures) or closes (not terminal), oldest first; server_copy: every one of them is copied
-- exactly by PostgreSQL's text copy.
SELECT count(*) AS tasks, coalesce(sum(messages), 0) AS messages,
       coalesce(sum(bytes + user_places::bigint * $4), 0) AS bytes,
       count(*) FILTER (WHERE messages IS NULL) AS refused,
       coalesce(bool_and(server_copy), true) AS server_copy,
       coalesce(array_agg(task_id ORDER BY created_at, task_id) FILTER (WHERE NOT terminal), '{}') AS open_ids,
       coalesce(array_agg(state ORDER BY created_at, task_id) FILTER (WHERE NOT terminal), '{}')
           AS open_states
FROM {schema}.turn_map_task
WHERE session_id = $1 AND user_id = $2 AND ($3::timestamptz IS NULL OR created_at < $3);

-- name: map_tasks_from
-- The mapped tasks created at or after $3 (those a rewind from there hides), oldest first, with their
-- state and whether it is terminal (NULL: the task is not JSON).
SELECT task_id, state, terminal
FROM {schema}.turn_map_task
WHERE session_id = $1 AND user_id = $2 AND created_at >= $3
ORDER BY created_at, task_id;

-- name: map_turn_tasks
-- The mapped tasks carrying any of the invocations $3, oldest first, with their chat marks (a listing
-- page completes its turns with them, as turns.with_tasks does).
SELECT task_id, marks::text AS marks
FROM {schema}.turn_map_task
WHERE session_id = $1 AND user_id = $2 AND invocation_ids && $3::text[]
ORDER BY created_at, task_id;

-- name: map_opening
-- The run before the one that starts at the event ($3, $4): its last event's time and its invocation (a
-- turn begins at the header_update just before its first event, as boundary_event says).
SELECT p.last_at, p.invocation_id
FROM {schema}.turn_map_run AS r
JOIN {schema}.turn_map_run AS p ON p.session_id = r.session_id AND p.user_id = r.user_id AND p.seq = r.seq - 1
WHERE r.session_id = $1 AND r.user_id = $2 AND r.first_at = $3 AND r.first_id = $4;

-- name: map_statistics_stale
-- Whether the planner's statistics of the map's tables lag behind a map of $1 runs just written: never
-- gathered (reltuples < 0), or the runs are more than a fifth of what they describe. The map's reads pick
-- their index from them (a new session's map read with the statistics of an empty table scans every run
-- instead of probing turn_map_run_first: 10-30 ms a statement at 100,000 events), and autovacuum gathers
-- them only on its next round, after the operation that built the map has read it.
SELECT coalesce(bool_or(c.reltuples < 0 OR $1 > 0.2 * c.reltuples), false)
FROM pg_class AS c
WHERE c.oid = ANY(ARRAY['{schema}.turn_map_run'::regclass, '{schema}.turn_map_task'::regclass,
                        '{schema}.turn_map_turn'::regclass]);


-- name: map_fork_cut
-- Where a fork keeping the events before $3 (NULL: all) cuts the map: the last run starting before $3,
-- its running sum of events, and whether it also holds events at or after $3 (then the cut falls inside
-- it and the fork gets no copy of the map). Only that run can (first_run_from): one index probe.
SELECT seq, first_at, last_at, cum_events, $3::timestamptz IS NOT NULL AND last_at >= $3 AS straddles
FROM {schema}.turn_map_run
WHERE session_id = $1 AND user_id = $2 AND ($3::timestamptz IS NULL OR first_at < $3)
ORDER BY first_at DESC, first_id DESC
LIMIT 1;

-- name: copy_events_mapping
-- A fork's events copied as copy_events_before copies them ($1-$5 the same) and, in the same statement,
-- the source's runs 1 to $7 (the kept ones, $8 events in all; $6: the last one's first event's time) given
-- to the fork as they are (their running sums hold for a prefix), the last one named by the fork's ids of
-- its first and last event, read from the copy's RETURNING; the others keep the source's ids, which only
-- the map compares with itself (docs/turn-map.md, "A fork"). The runs are written only when the copy is
-- their cut (sound): the events the runs hold, each at an instant of its own (the fork's new ids order
-- none of them, so a rebuild of the fork would make these same runs).
WITH copied AS (
    {kept_events_copy}
    -- the ids of the last kept run's events only: the rows returned stay small (in work_mem at 100,000)
    RETURNING created_at, CASE WHEN created_at >= $6 THEN id END AS id
), ends AS MATERIALIZED (
    SELECT count(*) AS copied, count(*) = count(DISTINCT created_at) AND count(*) = $8 AS sound,
           (array_agg(id ORDER BY created_at, id) FILTER (WHERE created_at >= $6))[1] AS last_run_first_id,
           (array_agg(id ORDER BY created_at DESC, id DESC) FILTER (WHERE created_at >= $6))[1] AS last_id
    FROM copied
), runs AS (
    INSERT INTO {schema}.turn_map_run (session_id, user_id, seq, invocation_id, first_at, first_id, last_at, last_id,
                                       events, bytes, text_chars, has_messages, user_text, tokens, tool_calls,
                                       first_user_message, last_agent_message, cum_events, cum_bytes,
                                       cum_text_chars)
    SELECT $5, $4, r.seq, r.invocation_id, r.first_at, CASE WHEN r.seq = $7 THEN e.last_run_first_id ELSE r.first_id END,
           r.last_at, CASE WHEN r.seq = $7 THEN e.last_id ELSE r.last_id END, r.events, r.bytes, r.text_chars,
           r.has_messages, r.user_text, r.tokens, r.tool_calls, r.first_user_message, r.last_agent_message,
           r.cum_events, r.cum_bytes, r.cum_text_chars
    FROM {schema}.turn_map_run AS r
    CROSS JOIN ends AS e
    WHERE r.session_id = $1 AND r.user_id = $2 AND r.seq <= $7 AND e.sound
    RETURNING 1
)
SELECT e.copied, e.sound, e.last_run_first_id, e.last_id, (SELECT count(*) FROM runs) AS runs
FROM ends AS e;

-- name: copy_tasks_mapping
-- A fork's kept tasks copied as copy_tasks_before copies them ($1-$5 the same, the same SQL), once
-- copy_events_mapping gave the fork its runs, and in the same statement the rest of the source's map cut
-- for the fork. The copies are known by their created_at, which is the source task's: the map is written
-- only when no two kept tasks share an instant (sound), so each copy is the one source task of its instant
-- (and the fork's new ids order none of them). Written: each kept task's map row under its copy's id and
-- updated_at (NOW(), as the copy writes it); the turns kept whole (no run after the last kept one, $6, and
-- no task from $3 on, carries them), their first task named by its copy's id, and the first event of the
-- turn that starts at the last kept run's first event ($7) by the fork's id ($8); and the map's claims:
-- kagent's marks of the new session (as map_guard reads them), $9 runs, $10 events, the watermark ($11,
-- $12), version $13. remake: the turns with a kept part that rows past the cut carry too (kagent
-- 0.10.x's header_update), which the caller makes again from the fork's rows.
WITH copied AS (
    {task_copy_of_t}
    FROM ({kept_tasks_with_new_ids}) AS t
    RETURNING id, created_at
), sound AS MATERIALIZED (
    SELECT count(*) = count(DISTINCT created_at) AS ok FROM copied
), mapped AS (
    INSERT INTO {schema}.turn_map_task (session_id, user_id, task_id, created_at, updated_at, state, invocation_ids,
                                        user_texts, marks, messages, bytes, user_places, terminal, server_copy)
    SELECT $5, $4, c.id, m.created_at, NOW(), m.state, m.invocation_ids, m.user_texts, m.marks, m.messages,
           m.bytes, m.user_places, m.terminal, m.server_copy
    FROM copied AS c
    JOIN {schema}.turn_map_task AS m ON m.session_id = $1 AND m.user_id = $2 AND m.created_at = c.created_at
    WHERE (SELECT ok FROM sound)
    RETURNING 1
), past AS MATERIALIZED (
    SELECT invocation_id FROM {schema}.turn_map_run
    WHERE session_id = $1 AND user_id = $2 AND seq > $6 AND invocation_id IS NOT NULL
    UNION
    SELECT i FROM {schema}.turn_map_task AS m CROSS JOIN LATERAL unnest(m.invocation_ids) AS i
    WHERE m.session_id = $1 AND m.user_id = $2 AND $3::timestamptz IS NOT NULL AND m.created_at >= $3
      AND i IS NOT NULL
), turns AS (
    INSERT INTO {schema}.turn_map_turn (session_id, user_id, invocation_id, event_first_at, event_first_id, events,
                                        has_messages, event_user_text, task_id, task_created_at, task_state,
                                        task_user_text, started_at)
    SELECT $5, $4, t.invocation_id, t.event_first_at,
           CASE WHEN t.event_first_at = $7 THEN $8 ELSE t.event_first_id END, t.events, t.has_messages,
           t.event_user_text, c.id, t.task_created_at, t.task_state, t.task_user_text, t.started_at
    FROM {schema}.turn_map_turn AS t
    LEFT JOIN copied AS c ON c.created_at = t.task_created_at
    WHERE t.session_id = $1 AND t.user_id = $2 AND (SELECT ok FROM sound)
      AND t.invocation_id NOT IN (SELECT invocation_id FROM past)
    -- in its primary key's order: 10,000 turns went in in 130 ms instead of 470 ms
    ORDER BY t.invocation_id
    RETURNING 1
), claims AS (
    INSERT INTO {schema}.turn_map (session_id, user_id, version, session_updated_at, events_deleted, tasks_deleted,
                                   watermark_at, watermark_id, events, runs, built_at)
    SELECT $5, $4, $13, (SELECT updated_at FROM session WHERE id = $5 AND user_id = $4),
           (SELECT count(*) FROM event WHERE session_id = $5 AND deleted_at IS NOT NULL),
           (SELECT count(*) FROM task WHERE session_id = $5 AND deleted_at IS NOT NULL), $11, $12, $10, $9, NOW()
    WHERE (SELECT ok FROM sound)
    RETURNING 1
)
SELECT (SELECT count(*) FROM copied) AS copied, (SELECT count(*) FROM mapped) AS mapped,
       (SELECT ok FROM sound) AND (SELECT count(*) FROM claims) = 1 AS sound,
       (SELECT coalesce(array_agg(t.invocation_id), '{}') FROM {schema}.turn_map_turn AS t
        WHERE t.session_id = $1 AND t.user_id = $2 AND t.invocation_id IN (SELECT invocation_id FROM past)
          AND (t.event_first_at <= $7 OR t.task_created_at < $3 OR $3::timestamptz IS NULL)) AS remake;
