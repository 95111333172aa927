-- Named queries of kagent-fork's store, service/kagent/store/jobs.py (conventions: fragments.sql).

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
