-- Named queries of kagent-fork's store, service/kagent/store/tasks.py (conventions: fragments.sql).

-- name: tasks_mentioning
-- Live tasks of the session that mention $3 anywhere in their text, oldest first (candidates for
-- the boundary task; the caller confirms in the parsed JSON).
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND {task_owned_by_$2}
  AND (NOT $4 OR strpos(data, $3) > 0)
ORDER BY created_at;

-- name: recent_tasks_mentioning
-- Of the session's newest 8 live tasks, those that mention $3 (same pre-filter as
-- tasks_mentioning), oldest first, each with the created_at of the oldest of the newest: a large
-- fork's guess of its boundary task. The sort reads only created_at and the TOAST pointers; only the
-- newest rows are decompressed.
WITH recent AS MATERIALIZED (
    SELECT id, created_at, protocol_version, data
    FROM task
    WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
      AND {task_owned_by_$2}
    ORDER BY created_at DESC
    LIMIT 8
)
SELECT id, created_at, protocol_version, data, (SELECT min(created_at) FROM recent) AS oldest
FROM recent
WHERE (NOT $4 OR strpos(data, $3) > 0)
ORDER BY created_at;

-- name: last_task_before
-- The newest live task created before $3 (NULL: of all), to see whether the last kept turn still runs.
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}
ORDER BY created_at DESC
LIMIT 1;

-- name: count_tasks
-- How many live tasks the session has (is the fork large enough for a second connection?).
SELECT count(*)
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND {task_owned_by_$2};

-- name: tasks_before
-- The live tasks created before $3 (NULL: all), oldest first, with kagent's owner rule for rows
-- written before task.user_id existed.
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}
ORDER BY created_at;

-- name: tasks_mentioning_before
-- The live tasks created before $3 (NULL: all) that mention $4 in their text, oldest first (a plain
-- strpos: the caller passes only text no JSON encoder escapes, and reads the JSON of what it finds).
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}
  AND strpos(data, $4) > 0
ORDER BY created_at;

-- name: task_versions_before
-- The protocol versions (dialects) of the live tasks created before $3 (NULL: all), and how many of each.
SELECT protocol_version, count(*) AS tasks
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}
GROUP BY protocol_version;

-- name: tasks_from
-- The live tasks created at or after $3, oldest first (the ones a rewind would hide).
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL AND created_at >= $3
  AND {task_owned_by_$2}
ORDER BY created_at;

-- name: first_task
-- The session's oldest live task (its first user message names an unnamed fork).
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND {task_owned_by_$2}
ORDER BY created_at
LIMIT 1;

-- name: task_by_id
-- One live task of session $2 by its id (kagent's own record of how an agent's turn went).
SELECT id, created_at, protocol_version, data
FROM task
WHERE id = $1 AND session_id = $2 AND deleted_at IS NULL;

-- name: task_holding_text
-- The session's first live task whose text holds $2 (a message id: only characters no JSON encoder
-- escapes), oldest first.
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL AND strpos(data, $2) > 0
ORDER BY created_at
LIMIT 1;

-- name: owned_task
-- One live task of session $1 by its id ($3), owned by $2: the task that names a turn
-- (rewind_before_task_id).
SELECT id, created_at, protocol_version, data
FROM task
WHERE id = $3 AND session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND {task_owned_by_$2};

-- name: runtime_tasks
-- The live tasks of session $1 that its owner $2 owns or that one of the users $3 wrote (a runtime that
-- forwards no user writes its tasks under kagent's default user), oldest first.
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ({task_owned_by_$2} OR task.user_id = ANY($3::text[]))
ORDER BY created_at;

-- name: runtime_tasks_by_id
-- Of the tasks runtime_tasks reads, those named in $4 (the turns of a span known by their tasks), oldest first.
SELECT id, created_at, protocol_version, data
FROM task
WHERE session_id = $1 AND id = ANY($4::text[]) AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ({task_owned_by_$2} OR task.user_id = ANY($3::text[]))
ORDER BY created_at;
