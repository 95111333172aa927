-- Named queries of kagent-fork's store, service/kagent/store/rewinds.py (conventions: fragments.sql).

-- name: hide_events_from
-- Rewind: soft-delete the live events at or after $3 with one stamp $4 (undo finds them by it).
UPDATE event SET deleted_at = $4
WHERE session_id = $1 AND user_id = $2 AND deleted_at IS NULL AND created_at IS NOT NULL AND created_at >= $3;

-- name: hide_tasks_from
-- Rewind: soft-delete the live tasks at or after $3 with one stamp $4.
UPDATE task SET deleted_at = $4
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL AND created_at >= $3
  AND {task_owned_by_$2};

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
                             created_at, rewind_before_task_id, rows_user_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $5, $12, $13)
RETURNING created_at;

-- name: get_rewind
-- A rewind of one session.
SELECT id, session_id, user_id, rewind_before_invocation_id, deleted_at, events_removed, tasks_removed,
       replaced_task_id, replacement_task_id, requested_by, summary::text AS summary, created_at, undone_at,
       rewind_before_task_id, rows_user_id
FROM {schema}.rewind
WHERE id = $1 AND session_id = $2 AND user_id = $3;

-- name: list_rewinds
-- The rewinds of one session, newest first.
SELECT id, session_id, user_id, rewind_before_invocation_id, deleted_at, events_removed, tasks_removed,
       replaced_task_id, replacement_task_id, requested_by, summary::text AS summary, created_at, undone_at,
       rewind_before_task_id, rows_user_id
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
