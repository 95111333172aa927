-- Named queries of kagent-fork's store, service/kagent/store/suite_runs.py (conventions: fragments.sql).

-- name: insert_run
INSERT INTO {schema}.suite_run (id, suite_id, user_id, run_user, request, estimated_usd, runner)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)
RETURNING created_at;

-- name: insert_run_cases
-- A run's cases, in the suite's order, each with the experiment's request it will start.
INSERT INTO {schema}.suite_run_case (run_id, case_id, ordinal, session_id, spec, branches, status, error)
SELECT $1, c.case_id, c.n, c.session_id, c.spec::jsonb, c.branches, c.status, c.error
FROM unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[])
     WITH ORDINALITY AS c(case_id, session_id, spec, branches, status, error, n);

-- name: run
-- One run of suite $2, when it is the user's ($3): only its creator sees a run.
SELECT id, suite_id, user_id, run_user, request, estimated_usd, status, reason, runner, heartbeat_at, verdict,
       created_at, finished_at
FROM {schema}.suite_run
WHERE id = $1 AND suite_id = $2 AND user_id = $3;

-- name: run_by_id
SELECT id, suite_id, user_id, run_user, request, estimated_usd, status, reason, runner, heartbeat_at, verdict,
       created_at, finished_at
FROM {schema}.suite_run
WHERE id = $1;

-- name: runs_of_suite
-- A suite's runs, newest first, with their progress (the listing's figures).
SELECT r.id, r.suite_id, r.user_id, r.run_user, r.request, r.estimated_usd, r.status, r.reason, r.runner,
       r.heartbeat_at, NULL::jsonb AS verdict, r.created_at, r.finished_at
FROM {schema}.suite_run r
WHERE r.suite_id = $1 AND r.user_id = $2
ORDER BY r.created_at DESC, r.id
LIMIT $3;

-- name: run_cases
-- A run's cases, in order.
SELECT case_id, ordinal, session_id, spec, branches, experiment_ids, status, error, result, spent_usd
FROM {schema}.suite_run_case
WHERE run_id = $1
ORDER BY ordinal;

-- name: run_beat
-- The driving replica's heartbeat; no row when another replica took the run over (or it ended).
UPDATE {schema}.suite_run SET heartbeat_at = NOW()
WHERE id = $1 AND runner = $2 AND status IN ('running', 'judging')
RETURNING status;

-- name: run_claim_stale
-- Open runs whose replica stopped beating for $2 seconds, taken over by runner $1.
UPDATE {schema}.suite_run SET runner = $1, heartbeat_at = NOW()
WHERE id IN (
    SELECT id FROM {schema}.suite_run
    WHERE status IN ('running', 'judging') AND heartbeat_at < NOW() - make_interval(secs => $2)
    FOR UPDATE SKIP LOCKED
)
RETURNING id;

-- name: run_case_started
-- A case's experiments, once their starts answered (again, on a takeover: the same experiments).
UPDATE {schema}.suite_run_case SET experiment_ids = $3::text[], status = 'running'
WHERE run_id = $1 AND case_id = $2;

-- name: run_case_ended
UPDATE {schema}.suite_run_case SET status = $3, error = $4, result = $5::jsonb, spent_usd = $6
WHERE run_id = $1 AND case_id = $2;

-- name: run_status
-- A run moved on (judging) or ended, by its driving replica or a cancel; an ended run stays as it ended.
UPDATE {schema}.suite_run
SET status = $2, reason = COALESCE($3, reason), verdict = COALESCE($4::jsonb, verdict),
    finished_at = CASE WHEN $2 IN ('running', 'judging') THEN NULL ELSE NOW() END
WHERE id = $1 AND status IN ('running', 'judging')
RETURNING status;

-- name: run_verdict
-- The verdict of an ended run computed again (a case's judgment finished after a cancel, say).
UPDATE {schema}.suite_run SET verdict = $2::jsonb WHERE id = $1;
