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
