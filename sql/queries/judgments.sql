-- Named queries of kagent-fork's store, service/kagent/store/judgments.py (conventions: fragments.sql).

-- name: insert_judgment
-- A new judgment of an experiment ($2) or of a what-if's job ($10): 'waiting' (its branches still run) or
-- 'running' (it is run now).
INSERT INTO {schema}.judgment (id, experiment_id, user_id, judge_agent_ref, judge_card, criteria, dialect, status,
                               runner, job_id)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10)
RETURNING created_at;

-- name: experiment_judgments
-- Every judgment of an experiment, oldest first (the last one is shown).
SELECT {judgment_columns} FROM {schema}.judgment WHERE experiment_id = $1 ORDER BY created_at, id;

-- name: job_judgments
-- Every judgment of a what-if's job, oldest first (the last one is shown).
SELECT {judgment_columns} FROM {schema}.judgment WHERE job_id = $1 ORDER BY created_at, id;

-- name: judge_calls
-- A judgment's calls, in order.
SELECT {judge_call_columns} FROM {schema}.judge_call WHERE judgment_id = $1 ORDER BY ordinal;

-- name: insert_judge_calls
-- Calls of a judgment (the pairs whose branches completed), written once each by its runner (a call another
-- runner wrote first is left as it is; nothing when the judgment is not this runner's any more). A call with an
-- error is written ended, never to be sent (a continuation without an answer is not judged).
INSERT INTO {schema}.judge_call (judgment_id, ordinal, left_job, right_job, swapped, message, context_id, error,
                                 ended_at)
SELECT $1, c.ordinal, c.left_job, c.right_job, c.swapped, c.message, c.context_id, c.error,
       CASE WHEN c.error IS NOT NULL THEN NOW() END
FROM unnest($2::int[], $3::text[], $4::text[], $5::bool[], $6::jsonb[], $7::text[], $9::text[])
     AS c(ordinal, left_job, right_job, swapped, message, context_id, error)
WHERE EXISTS (SELECT 1 FROM {schema}.judgment WHERE id = $1 AND status = 'running' AND runner = $8)
ON CONFLICT (judgment_id, ordinal) DO NOTHING;

-- name: judgment_start_waiting
-- The waiting judgments of an experiment whose branches all ended, taken by runner $2 to run them.
UPDATE {schema}.judgment SET status = 'running', runner = $2, heartbeat_at = NOW()
WHERE experiment_id = $1 AND status = 'waiting'
RETURNING {judgment_columns};

-- name: judgment_start_waiting_job
-- The waiting judgment of a what-if whose job ended, taken by runner $2 to run it.
UPDATE {schema}.judgment SET status = 'running', runner = $2, heartbeat_at = NOW()
WHERE job_id = $1 AND status = 'waiting'
RETURNING {judgment_columns};

-- name: judgment_heartbeat
-- The runner still runs the judgment (no row: it ended, or another runner took it).
UPDATE {schema}.judgment SET heartbeat_at = NOW()
WHERE id = $1 AND status = 'running' AND runner = $2
RETURNING id;

-- name: judgment_finish
-- A judgment ends (one that already ended, e.g. cancelled meanwhile, is left as it is).
UPDATE {schema}.judgment SET status = $2, error = $3, finished_at = NOW()
WHERE id = $1 AND status IN ('waiting', 'running')
RETURNING finished_at;

-- name: judgment_claim_stale
-- Running judgments whose runner stopped beating for $2 seconds, and waiting ones whose experiment (or
-- what-if's job) ended that long ago (the replica that ended it stopped before it launched them), taken over by runner $1 (SKIP LOCKED:
-- one another replica is claiming is left to it).
UPDATE {schema}.judgment SET runner = $1, status = 'running', heartbeat_at = NOW()
WHERE id IN (SELECT j.id FROM {schema}.judgment AS j
             WHERE (j.status = 'running' AND j.heartbeat_at < NOW() - make_interval(secs => $2) AND j.runner <> $1)
                OR (j.status = 'waiting' AND EXISTS (
                        SELECT 1 FROM {schema}.experiment AS e
                        WHERE e.id = j.experiment_id AND e.status <> 'cancelled'
                          AND e.finished_at < NOW() - make_interval(secs => $2)))
                OR (j.status = 'waiting' AND EXISTS (
                        SELECT 1 FROM {schema}.whatif_job AS w
                        WHERE w.id = j.job_id AND w.status <> 'cancelled'
                          AND w.finished_at < NOW() - make_interval(secs => $2)))
             FOR UPDATE SKIP LOCKED)
  AND status IN ('running', 'waiting')
RETURNING {judgment_columns};

-- name: judge_call_sending
-- Call $2 is about to be sent by runner $3: stamped first, once (no row: stamped before, or the judgment is
-- not this runner's and running any more).
UPDATE {schema}.judge_call AS c SET sent_at = NOW()
FROM {schema}.judgment AS j
WHERE c.judgment_id = $1 AND c.ordinal = $2 AND c.sent_at IS NULL
  AND j.id = c.judgment_id AND j.status = 'running' AND j.runner = $3
RETURNING c.sent_at;

-- name: judge_call_task
-- The judge's task of call $2, once it answered; whether the judgment still runs.
WITH j AS (
    UPDATE {schema}.judgment SET heartbeat_at = NOW() WHERE id = $1 AND status = 'running' RETURNING id
), c AS (
    UPDATE {schema}.judge_call SET task_id = $3 WHERE judgment_id = (SELECT id FROM j) AND ordinal = $2
)
SELECT EXISTS (SELECT 1 FROM j);

-- name: judge_call_end
-- Call $2 ended: the judge's answer and what it says, or why there is none (once).
UPDATE {schema}.judge_call SET answer = $3, winner = $4, reason = $5, error = $6, ended_at = NOW()
WHERE judgment_id = $1 AND ordinal = $2 AND ended_at IS NULL;

-- name: judge_calls_close
-- The calls an ended judgment left open, closed with why: the tasks of those that were sent.
UPDATE {schema}.judge_call SET error = $2, ended_at = NOW()
WHERE judgment_id = $1 AND ended_at IS NULL
RETURNING task_id;

-- name: experiments_being_judged
-- Which of these experiments have a judgment that waits or runs.
SELECT DISTINCT experiment_id FROM {schema}.judgment
WHERE experiment_id = ANY($1::text[]) AND status IN ('waiting', 'running');

-- name: jobs_being_judged
-- Which of these what-if jobs have a judgment that waits or runs.
SELECT DISTINCT job_id FROM {schema}.judgment WHERE job_id = ANY($1::text[]) AND status IN ('waiting', 'running');

-- name: upsert_judge_vote
-- A person's vote on a pair (their later vote on the same pair replaces it).
INSERT INTO {schema}.judge_vote (experiment_id, user_id, left_job, right_job, winner)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (experiment_id, user_id, left_job, right_job) DO UPDATE SET winner = EXCLUDED.winner, created_at = NOW();

-- name: judge_votes
-- The votes on an experiment's pairs.
SELECT user_id, left_job, right_job, winner FROM {schema}.judge_vote WHERE experiment_id = $1 ORDER BY created_at;
