-- Named queries of kagent-fork's store, service/kagent/store/experiments.py (conventions: fragments.sql).

-- name: insert_experiment
-- A new experiment, running, written in its first branch's fork transaction.
INSERT INTO {schema}.experiment (id, user_id, source_session_id, source_user_id, source_agent_ref,
                                 rewind_before_invocation_id, turns_requested, turns, message, on_approval, repeats,
                                 rewind_before_task_id, tool_policy, arms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12, $13::jsonb, $14::jsonb)
RETURNING created_at;

-- name: get_experiment
-- An experiment, as its creator sees it.
SELECT {experiment_columns} FROM {schema}.experiment WHERE id = $1 AND user_id = $2;

-- name: get_experiment_to_vote
-- An experiment whoever created it: a vote is allowed to anyone who can read its source (checked by the caller).
SELECT {experiment_columns} FROM {schema}.experiment WHERE id = $1;

-- name: list_experiments
-- The experiments one user started from one source session, newest first.
SELECT {experiment_columns} FROM {schema}.experiment
WHERE source_session_id = $1 AND source_user_id = $2 AND user_id = $3
ORDER BY created_at DESC, id;

-- name: experiment_jobs
-- An experiment's branches (what-if jobs), in the order they were made.
SELECT {job_columns} FROM {schema}.whatif_job WHERE experiment_id = $1 ORDER BY created_at, id;

-- name: experiment_source_turns
-- The baseline column, kept once computed (the source's turns over the experiment's span).
UPDATE {schema}.experiment SET source_turns = $2::jsonb WHERE id = $1 AND source_turns IS NULL;

-- name: experiment_settle
-- The experiment ends once none of its branches runs: $2 ('cancelled'), or failed when every branch
-- failed, else completed. Once (no row: it ended before, or a branch still runs).
UPDATE {schema}.experiment AS e
SET status = coalesce($2::text, CASE WHEN (SELECT bool_and(status = 'failed') FROM {schema}.whatif_job
                                           WHERE experiment_id = $1) THEN 'failed' ELSE 'completed' END),
    finished_at = NOW()
WHERE e.id = $1 AND e.finished_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM {schema}.whatif_job WHERE experiment_id = $1 AND status = 'running')
RETURNING e.status, e.finished_at;

-- name: lock_experiment
-- An experiment, as its creator sees it, its row locked: discards and undos of one experiment run one at a
-- time, and never while a branch's end settles it.
SELECT {experiment_columns} FROM {schema}.experiment WHERE id = $1 AND user_id = $2 FOR UPDATE;

-- name: latest_discard
-- The experiment's latest discard (in force, or undone), if any.
SELECT id, experiment_id, user_id, kept_session_id, session_ids, deleted_at, created_at, undone_at, restored_ids
FROM {schema}.discard
WHERE experiment_id = $1
ORDER BY created_at DESC, id
LIMIT 1;

-- name: hide_sessions
-- Discard: hide the owner's visible sessions among $1 with one stamp $3, as kagent deletes a session (only
-- session.deleted_at; their events and tasks stay as they are). The ones it hid.
UPDATE session SET deleted_at = $3
WHERE id = ANY($1::text[]) AND user_id = $2 AND deleted_at IS NULL
RETURNING id;

-- name: discard_stamp
-- A discard's stamp: the clock (not the transaction's start), so that it is its own.
SELECT clock_timestamp();

-- name: insert_discard
-- The record of a discard.
INSERT INTO {schema}.discard (id, experiment_id, user_id, kept_session_id, session_ids, deleted_at, created_at)
VALUES ($1, $2, $3, $4, $5::text[], $6, $6)
RETURNING created_at;

-- name: restore_sessions
-- Undo: bring back the sessions a discard hid that still carry its stamp (not one deleted again since).
UPDATE session SET deleted_at = NULL
WHERE id = ANY($1::text[]) AND user_id = $2 AND deleted_at = $3
RETURNING id;

-- name: mark_discard_undone
-- Undo: the discard is undone, with what it brought back.
UPDATE {schema}.discard SET undone_at = NOW(), restored_ids = $2::text[] WHERE id = $1 AND undone_at IS NULL
RETURNING undone_at;
