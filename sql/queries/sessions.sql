-- Named queries of kagent-fork's store, service/kagent/store/sessions.py (conventions: fragments.sql).

-- name: share_by_token
-- A share link, as kagent's share middleware resolves X-Share-Token.
SELECT session_id, user_id, read_only FROM session_share WHERE token = $1 LIMIT 1;

-- name: get_session
-- A live session of one owner.
SELECT id, user_id, name, agent_id, source, created_at, updated_at
FROM session
WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL;

-- name: owned_session
-- A session of one owner, hidden (deleted_at stamped) or not: an experiment's own branch fork, which a discard
-- hides from the chat list and the judge still reads.
SELECT id, user_id, name, agent_id, source, created_at, updated_at
FROM session
WHERE id = $1 AND user_id = $2;

-- name: lock_session
-- The live session row, locked: rewinds and undos of one session run one at a time.
SELECT id, user_id, name, agent_id, source, created_at, updated_at
FROM session
WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL
FOR UPDATE;

-- name: session_status
-- Whether a session exists, deleted or not (for lineage trees).
SELECT name, deleted_at IS NOT NULL AS deleted FROM session WHERE id = $1 AND user_id = $2;

-- name: existing_sessions
-- Which of the sessions (ids $1 of owners $2, pairwise) still have a row, deleted or not: kagent's session
-- retention (Helm database.postgres.sessionRetentionDays) deletes an idle session's row and its rows for good.
SELECT s.id, s.user_id
FROM session AS s
JOIN unnest($1::text[], $2::text[]) AS k (id, user_id) ON s.id = k.id AND s.user_id = k.user_id;

-- name: session_node
-- A session as a fork tree shows it: name, deleted or not, agent, and how many live events it holds now.
SELECT s.name, s.deleted_at IS NOT NULL AS deleted, s.agent_id,
       (SELECT count(*) FROM event AS e
        WHERE e.session_id = s.id AND e.user_id = s.user_id AND e.deleted_at IS NULL) AS events
FROM session AS s
WHERE s.id = $1 AND s.user_id = $2;

-- name: has_events
-- Whether the session has any live event.
SELECT EXISTS (
    SELECT 1 FROM event WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL
) AS has_events;

-- name: insert_session
-- The fork's session row; created_at = updated_at = the database's now.
INSERT INTO session (id, user_id, name, agent_id, source, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, NOW(), NOW())
RETURNING id, user_id, name, agent_id, source, created_at, updated_at;

-- name: touch_session
-- What kagent does on every event or task write: lift the session in the sidebar.
UPDATE session SET updated_at = NOW() WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL
RETURNING id, user_id, name, agent_id, source, created_at, updated_at;

-- name: explorer_sessions
-- The caller's live sessions, newest first (as kagent's sidebar orders them), of one agent when $2 is
-- given, at most $3.
SELECT id, user_id, name, agent_id, source, created_at, updated_at
FROM session
WHERE user_id = $1 AND deleted_at IS NULL AND ($2::text IS NULL OR agent_id = $2)
ORDER BY updated_at DESC, id
LIMIT $3;

-- name: framework_signals
-- What the session holds that names its agent's framework (service/kagent/frameworks.py), among the rows
-- of the users in $2 (the owner, and kagent's default user, under which kagent 0.10.x stores checkpoint
-- and crewai rows and some runtimes write their events and tasks): LangGraph checkpoints and CrewAI rows
-- of its thread, the shapes of some of its events, and one task's text. Any rows will do (one agent writes
-- a session, in one shape): unordered, they are the first the index gives, where the oldest would sort
-- every event of the session (kagent indexes event by session_id only: 60 ms at 100,000 events).
SELECT
    EXISTS (SELECT 1 FROM lg_checkpoint
            WHERE thread_id = $1 AND user_id = ANY($2::text[]) AND deleted_at IS NULL) AS langgraph,
    EXISTS (SELECT 1 FROM crewai_agent_memory
            WHERE thread_id = $1 AND user_id = ANY($2::text[]) AND deleted_at IS NULL)
    OR EXISTS (SELECT 1 FROM crewai_flow_state
               WHERE thread_id = $1 AND user_id = ANY($2::text[]) AND deleted_at IS NULL) AS crewai,
    (SELECT array_agg(kind ORDER BY created_at) FROM (
        SELECT created_at,
               CASE WHEN doc ->> 'type' = 'conversation_items' THEN 'openai-agents'
                    WHEN doc ? 'invocation_id' THEN 'adk'
                    WHEN doc ? 'invocationId' THEN 'adk-go' END AS kind
        FROM (SELECT created_at, {schema}.try_jsonb(data) AS doc FROM event
              WHERE session_id = $1 AND user_id = ANY($2::text[]) AND deleted_at IS NULL
                AND created_at IS NOT NULL
              LIMIT 8) AS sampled
        WHERE jsonb_typeof(doc) = 'object') AS kinds
     WHERE kind IS NOT NULL) AS event_kinds,
    (SELECT data FROM task
     WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
       AND (user_id = ANY($2::text[]) OR user_id IS NULL)
     LIMIT 1) AS first_task;

-- name: runtime_rows_owned
-- Whether the rows of session $1 under kagent's default user ($3) are owner $2's: the 0.10.4 runtimes
-- forward no user and write a chat's rows under that user with the chat's id, so they are taken as the
-- owner's only when provably so (docs/frameworks.md, "Whose rows a session's are"). Either kagent-fork made
-- the session ($2's fork: its id is new, so every row of it is the fork's), or, as kagent's own owner rule
-- for a task without user_id decides, the owner is the one user besides the default one whose session row
-- of that id existed when the chat's first row under the default user was written (its session row, tasks,
-- LangGraph checkpoints, CrewAI rows; deleted rows count): a row made after the chat began is another user's
-- claim on it, and two rows made before make it no one's. The cheap tests first (CASE keeps the order).
WITH own AS (SELECT (SELECT created_at FROM session WHERE id = $1 AND user_id = $2) AS created_at),
began AS (
    SELECT least(
        (SELECT min(created_at) FROM session WHERE id = $1 AND user_id = $3),
        (SELECT min(created_at) FROM task WHERE session_id = $1 AND user_id = $3),
        (SELECT min(created_at) FROM lg_checkpoint WHERE thread_id = $1 AND user_id = $3),
        (SELECT min(created_at) FROM crewai_agent_memory WHERE thread_id = $1 AND user_id = $3),
        (SELECT min(created_at) FROM crewai_flow_state WHERE thread_id = $1 AND user_id = $3)
    ) AS at
)
SELECT CASE
    WHEN $2 = $3 THEN false
    WHEN EXISTS (SELECT 1 FROM {schema}.fork AS f WHERE f.session_id = $1 AND f.user_id = $2) THEN true
    WHEN own.created_at IS NULL THEN false
    WHEN began.at IS NULL THEN true  -- nothing under the default user to give: the owner's rows alone
    WHEN own.created_at > began.at THEN false
    WHEN EXISTS (SELECT 1 FROM session AS o
                 WHERE o.id = $1 AND o.user_id <> $2 AND o.user_id <> $3 AND o.created_at <= began.at) THEN false
    ELSE true
END AS owned
FROM own, began;
