-- Named queries of kagent-fork's store, service/kagent/store/suites.py (conventions: fragments.sql).

-- name: insert_suite
INSERT INTO {schema}.suite (id, user_id, name) VALUES ($1, $2, $3) RETURNING created_at;

-- name: suite
-- One suite, when it is the user's ($2): only its creator sees a suite.
SELECT id, user_id, name, created_at FROM {schema}.suite WHERE id = $1 AND user_id = $2;

-- name: suite_lock
-- The suite, locked while cases are added to it or removed (their ordinals follow one another).
SELECT id, user_id, name, created_at FROM {schema}.suite WHERE id = $1 AND user_id = $2 FOR UPDATE;

-- name: suites_of_user
-- The user's suites, newest first, each with its number of cases.
SELECT s.id, s.user_id, s.name, s.created_at,
       (SELECT count(*) FROM {schema}.suite_case c WHERE c.suite_id = s.id) AS cases
FROM {schema}.suite s
WHERE s.user_id = $1
ORDER BY s.created_at DESC, s.id
LIMIT $2;

-- name: insert_cases
-- Cases appended to suite $1, in the order given, after its last one.
INSERT INTO {schema}.suite_case (suite_id, id, ordinal, session_id, rewind_before_invocation_id,
                                 rewind_before_task_id, turns, message, user_text, agent_id)
SELECT $1, c.id, COALESCE((SELECT max(ordinal) FROM {schema}.suite_case WHERE suite_id = $1), 0) + c.n,
       c.session_id, c.invocation_id, c.task_id, c.turns, c.message, c.user_text, c.agent_id
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
     WITH ORDINALITY AS c(id, session_id, invocation_id, task_id, turns, message, user_text, agent_id, n);

-- name: suite_cases
-- A suite's cases, in order.
SELECT id, ordinal, session_id, rewind_before_invocation_id, rewind_before_task_id, turns, message, user_text,
       agent_id, created_at
FROM {schema}.suite_case
WHERE suite_id = $1
ORDER BY ordinal;

-- name: delete_case
DELETE FROM {schema}.suite_case WHERE suite_id = $1 AND id = $2;

-- name: select_sessions
-- The user's live conversations with one agent (kagent's id), newest first, last active in [$3, $4) when
-- given, at most $5: the sessions a suite's `select` picks from.
SELECT id, user_id, name, agent_id, source, created_at, updated_at
FROM session
WHERE user_id = $1 AND agent_id = $2 AND deleted_at IS NULL
  AND ($3::timestamptz IS NULL OR updated_at >= $3)
  AND ($4::timestamptz IS NULL OR updated_at < $4)
ORDER BY updated_at DESC, id
LIMIT $5;
