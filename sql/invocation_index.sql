-- The optional invocation index on kagent's tables (service/kagent/invocation_index.py; `kagent-fork index
-- install|status|uninstall`). Each index is built with CREATE INDEX CONCURRENTLY (kagent's writes go on
-- meanwhile), covers only live rows (every reader of the service and of kagent filters deleted_at IS
-- NULL, and a rewind's UPDATE then writes no entry), and is named after the service's schema. Its
-- comment names its version: an index whose comment differs is rebuilt by install.

-- name: event_invocation
-- A turn's events: the boundary event of a fork, rewind, dry run, transcript or what-if, and a
-- listing page's event counts, found by (session, owner, invocation id) instead of by reading every
-- event of the session. invocation_id_of is the expression the queries use (migration 0001).
CREATE INDEX CONCURRENTLY IF NOT EXISTS {schema}_event_invocation
ON event (session_id, user_id, {schema}.invocation_id_of(data))
WHERE deleted_at IS NULL;

-- name: event_time
-- A session's events in time order: a turn listing page reads the events of its turns only, and a
-- rewind or summary of the last turns reads only those.
CREATE INDEX CONCURRENTLY IF NOT EXISTS {schema}_event_time
ON event (session_id, user_id, created_at, id)
WHERE deleted_at IS NULL;

-- name: task_invocations
-- The tasks that may carry an invocation id (task_invocation_candidates, migration 0007), instead of
-- decompressing every task of the session. fastupdate off: with it, new entries wait in a pending list
-- that every search reads whole until a vacuum merges it (8,000 tasks written by forks made a listing
-- page's task lookup 27 ms instead of 4); a task has one or two ids, so entering them at once is cheap.
CREATE INDEX CONCURRENTLY IF NOT EXISTS {schema}_task_invocations
ON task USING gin ({schema}.task_invocation_candidates(data)) WITH (fastupdate = off)
WHERE deleted_at IS NULL;
