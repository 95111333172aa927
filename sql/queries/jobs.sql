-- Named queries of kagent-fork's store, service/kagent/store/jobs.py (conventions: fragments.sql).

-- name: insert_whatif_job
-- A new what-if job, running, written in its fork's transaction (with its turns: insert_whatif_turns).
INSERT INTO {schema}.whatif_job (id, user_id, parent_session_id, parent_user_id, session_id,
                                 rewind_before_invocation_id, agent_ref, dialect, message, status, runner,
                                 experiment_id, repeat, agent_card, on_approval, turns_total, rewind_before_task_id,
                                 tool_policy, arm_tools)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, 'running', $10, $11, $12, $13::jsonb, $14, $15, $16,
        $17::jsonb, $18::jsonb)
RETURNING created_at;

-- name: insert_whatif_turns
-- A job's turns: ordinals $2, the source turns $3 they re-ask (invocation id, or task id for a turn known by
-- its task alone), the messages $4 to send.
INSERT INTO {schema}.whatif_turn (job_id, ordinal, invocation_id, message)
SELECT $1, t.ordinal, t.invocation_id, t.message
FROM unnest($2::int[], $3::text[], $4::jsonb[]) AS t(ordinal, invocation_id, message);

-- name: get_whatif_job
-- A job, as its creator sees it.
SELECT {job_columns}
FROM {schema}.whatif_job
WHERE id = $1 AND user_id = $2;

-- name: list_whatif_jobs
-- The what-ifs one user started from one source session, newest first: an experiment's branches are listed
-- with their experiment (list_experiments), not as what-ifs.
SELECT {job_columns}
FROM {schema}.whatif_job
WHERE parent_session_id = $1 AND parent_user_id = $2 AND user_id = $3 AND experiment_id IS NULL
ORDER BY created_at DESC;

-- name: whatif_task
-- The agent's A2A task id of turn $3, once it answered; the runner's heartbeat with it. Whether the job
-- still runs (false: it was cancelled while the message was on its way).
WITH job AS (
    UPDATE {schema}.whatif_job SET task_id = $2, heartbeat_at = NOW() WHERE id = $1 AND status = 'running'
    RETURNING id
), turn AS (
    UPDATE {schema}.whatif_turn SET task_id = $2 WHERE job_id = (SELECT id FROM job) AND ordinal = $3
)
SELECT EXISTS (SELECT 1 FROM job);

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
-- runner $1: one UPDATE, so that two replicas never take the same job (SKIP LOCKED: a job another
-- replica is claiming at this moment is left to it). A runner never claims its own jobs: it runs them, or
-- is about to (an experiment's first branches wait while the later forks are written).
UPDATE {schema}.whatif_job SET runner = $1, heartbeat_at = NOW()
WHERE id IN (SELECT id FROM {schema}.whatif_job
             WHERE status = 'running' AND heartbeat_at < NOW() - make_interval(secs => $2) AND runner <> $1
             FOR UPDATE SKIP LOCKED)
  AND status = 'running'
RETURNING {job_columns};

-- name: whatif_turns
-- A job's turns, in order.
SELECT {turn_columns} FROM {schema}.whatif_turn WHERE job_id = $1 ORDER BY ordinal;

-- name: whatif_turns_of_jobs
-- The turns of several jobs (an experiment's branches), in order.
SELECT {turn_columns} FROM {schema}.whatif_turn WHERE job_id = ANY($1::text[]) ORDER BY job_id, ordinal;

-- name: whatif_turn_sending
-- Turn $2 is about to be sent by runner $3: stamped first, once (no row: it was stamped before, or the
-- job is no longer this runner's and running). A replica that takes the job over finds the stamp and
-- never sends the message again.
UPDATE {schema}.whatif_turn AS t SET sent_at = NOW()
FROM {schema}.whatif_job AS j
WHERE t.job_id = $1 AND t.ordinal = $2 AND t.sent_at IS NULL
  AND j.id = t.job_id AND j.status = 'running' AND j.runner = $3
RETURNING t.sent_at;

-- name: whatif_turn_found
-- The agent answered a tasks/get of turn $2's task (once): an agent that finds its tasks by id, so that its
-- "task not found" later means it lost the turn (replay/player.py), also to a replica that takes the job over.
UPDATE {schema}.whatif_turn SET agent_found_at = NOW()
WHERE job_id = $1 AND ordinal = $2 AND agent_found_at IS NULL;

-- name: whatif_turn_reply
-- A rejection $3 of the tool approval turn $2's agent asked for, stamped before it is sent (once).
UPDATE {schema}.whatif_turn AS t SET reply = $3::jsonb, reply_sent_at = NOW(),
       rejected_tool_calls = t.rejected_tool_calls + $4
FROM {schema}.whatif_job AS j
WHERE t.job_id = $1 AND t.ordinal = $2 AND j.id = t.job_id AND j.status = 'running' AND j.runner = $5
RETURNING t.reply_sent_at;

-- name: whatif_turn_close
-- Turn $2, sent but not ended when its job ended (a failure, a cancel, a crash taken over), closed with how
-- its task ended ($3) and its figures ($4); a turn whose end was written meanwhile is left as it is.
UPDATE {schema}.whatif_turn SET state = $3, figures = $4::jsonb, ended_at = NOW()
WHERE job_id = $1 AND ordinal = $2 AND sent_at IS NOT NULL AND ended_at IS NULL;

-- name: whatif_turn_end
-- Turn $2 ended in state $3 with figures $4; the job has done $2 + 1 turns (and stopped there if $5).
WITH turn AS (
    UPDATE {schema}.whatif_turn SET state = $3, figures = $4::jsonb, ended_at = NOW()
    WHERE job_id = $1 AND ordinal = $2
    RETURNING job_id
)
UPDATE {schema}.whatif_job SET turns_done = $2 + 1, heartbeat_at = NOW(), stopped_at = $5
WHERE id = (SELECT job_id FROM turn) AND status = 'running';
