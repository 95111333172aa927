-- Named queries of kagent-fork's store, service/kagent/store/replay.py (conventions: fragments.sql).

-- name: take_replay_lease
-- The lease of twin $1 for user $2 taken by turn $4 of job $3 (runner $5) for $6 seconds: free, expired, or
-- already this turn's (renewed). No row: another turn holds it.
INSERT INTO {schema}.replay_lease AS l (twin, user_id, job_id, ordinal, runner, expires_at)
VALUES ($1, $2, $3, $4, $5, NOW() + make_interval(secs => $6))
ON CONFLICT (twin, user_id) DO UPDATE
    SET job_id = EXCLUDED.job_id, ordinal = EXCLUDED.ordinal, runner = EXCLUDED.runner,
        expires_at = EXCLUDED.expires_at
    WHERE l.expires_at < NOW() OR (l.job_id = EXCLUDED.job_id AND l.ordinal = EXCLUDED.ordinal)
RETURNING job_id;

-- name: give_replay_lease
-- Turn $2 of job $1 gives back its leases (every twin), once it ended.
DELETE FROM {schema}.replay_lease WHERE job_id = $1 AND ordinal = $2;

-- name: replay_lease_holder
-- The turn that holds twin $1's lease for user $2 now (no row: none).
SELECT job_id, ordinal FROM {schema}.replay_lease
WHERE twin = $1 AND user_id = $2 AND expires_at >= NOW();

-- name: insert_replay_call
-- One call the endpoint answered, with its branch and turn.
INSERT INTO {schema}.replay_call (job_id, ordinal, twin, server, tool, arguments, tool_class, answered_from)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8);

-- name: replay_calls_of_jobs
-- The calls answered for jobs $1, in the order they came.
SELECT job_id, ordinal, tool, arguments::text AS arguments, tool_class, answered_from
FROM {schema}.replay_call
WHERE job_id = ANY($1::text[])
ORDER BY job_id, ordinal, id;
