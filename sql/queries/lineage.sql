-- Named queries of kagent-fork's store, service/kagent/store/lineage.py (conventions: fragments.sql).

-- name: lineage_of
-- A session's own lineage record, if it is a fork.
SELECT session_id, user_id, parent_session_id, parent_user_id, root_session_id, root_user_id, depth,
       rewind_before_invocation_id, rewind_before_task_id, framework, boundary_found, events_copied,
       tasks_copied, messages_copied, task_layout, warnings::text AS warnings, summary::text AS summary, created_at
FROM {schema}.fork
WHERE session_id = $1 AND user_id = $2;

-- name: insert_lineage
-- The lineage record of a new fork.
INSERT INTO {schema}.fork (session_id, user_id, parent_session_id, parent_user_id, root_session_id,
                           root_user_id, depth, rewind_before_invocation_id, boundary_found,
                           events_copied, tasks_copied, messages_copied, task_layout, warnings,
                           summary, created_by, rewind_before_task_id, framework)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::jsonb, $15::jsonb, $16, $17, $18);

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

-- name: forks_of
-- The direct forks of a session, oldest first, with their session's name and state.
SELECT f.session_id, f.user_id, f.parent_session_id, f.parent_user_id, f.root_session_id, f.root_user_id,
       f.depth, f.rewind_before_invocation_id, f.rewind_before_task_id, f.framework, f.boundary_found, f.events_copied, f.tasks_copied,
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

-- name: fork_exists
-- Whether the service made this fork (its lineage record is written in the fork's own transaction).
SELECT EXISTS (SELECT 1 FROM {schema}.fork WHERE session_id = $1 AND user_id = $2);
