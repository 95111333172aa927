-- Named queries of kagent-fork's store, service/kagent/store/langgraph.py (conventions: fragments.sql).
-- kagent 0.10.x keeps a LangGraph agent's state in lg_checkpoint / lg_checkpoint_write (thread_id = the
-- session id), written by kagent-langgraph through the controller; docs/frameworks.md.

-- name: lg_checkpoints
-- The live checkpoints of thread $1 written under the users $2, oldest first: their keys, parents and metadata
-- (base64 JSON, naming the turn's task), not their blobs (each holds the whole conversation so far).
SELECT user_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, metadata
FROM lg_checkpoint
WHERE thread_id = $1 AND user_id = ANY($2::text[]) AND deleted_at IS NULL
ORDER BY created_at, checkpoint_id;

-- name: copy_lg_checkpoints
-- A fork's copies of the checkpoints of thread $1 keyed by $3, $4, $5 (user, ns, id) on the fork's thread $2,
-- each with its new metadata ($6, same order): id, parent, blob and created_at kept.
INSERT INTO lg_checkpoint (user_id, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, created_at,
                           updated_at, metadata, checkpoint, checkpoint_type, version)
SELECT c.user_id, $2, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.created_at, NOW(), k.metadata,
       c.checkpoint, c.checkpoint_type, c.version
FROM lg_checkpoint c
JOIN unnest($3::text[], $4::text[], $5::text[], $6::text[]) AS k(user_id, ns, id, metadata)
  ON c.user_id = k.user_id AND c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id
WHERE c.thread_id = $1 AND c.deleted_at IS NULL;

-- name: copy_lg_writes
-- A fork's copies of the pending writes of the copied checkpoints (keys $3, $4, $5: user, ns, id) of thread
-- $1, on the fork's thread $2, byte for byte.
INSERT INTO lg_checkpoint_write (user_id, thread_id, checkpoint_ns, checkpoint_id, write_idx, value, value_type,
                                 channel, task_id, created_at, updated_at)
SELECT w.user_id, $2, w.checkpoint_ns, w.checkpoint_id, w.write_idx, w.value, w.value_type, w.channel, w.task_id,
       w.created_at, NOW()
FROM lg_checkpoint_write w
JOIN unnest($3::text[], $4::text[], $5::text[]) AS k(user_id, ns, id)
  ON w.user_id = k.user_id AND w.checkpoint_ns = k.ns AND w.checkpoint_id = k.id
WHERE w.thread_id = $1 AND w.deleted_at IS NULL;

-- name: hide_lg_checkpoints
-- Rewind: soft-delete (as kagent's DELETE of a thread does) the checkpoints of thread $1 keyed by $3, $4, $5
-- (user, ns, id) with the rewind's stamp $2, and their writes.
WITH hidden AS (
    UPDATE lg_checkpoint SET deleted_at = $2
    WHERE thread_id = $1 AND deleted_at IS NULL
      AND (user_id, checkpoint_ns, checkpoint_id) IN (SELECT * FROM unnest($3::text[], $4::text[], $5::text[]))
    RETURNING user_id, checkpoint_ns, checkpoint_id
), writes AS (
    UPDATE lg_checkpoint_write w SET deleted_at = $2
    FROM hidden h
    WHERE w.thread_id = $1 AND w.deleted_at IS NULL
      AND w.user_id = h.user_id AND w.checkpoint_ns = h.checkpoint_ns AND w.checkpoint_id = h.checkpoint_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM hidden) AS checkpoints, (SELECT count(*) FROM writes) AS writes;

-- name: restore_lg_checkpoints
-- Undo: bring back the checkpoints and writes of thread $1 that one rewind hid (its stamp $2).
WITH restored AS (
    UPDATE lg_checkpoint SET deleted_at = NULL WHERE thread_id = $1 AND deleted_at = $2 RETURNING 1
), writes AS (
    UPDATE lg_checkpoint_write SET deleted_at = NULL WHERE thread_id = $1 AND deleted_at = $2 RETURNING 1
)
SELECT (SELECT count(*) FROM restored) AS checkpoints, (SELECT count(*) FROM writes) AS writes;

-- name: task_ids_before
-- The ids of the live tasks of session $1 owned by $2 created before $3 (all: NULL), in the order a fork
-- copies them (created_at, which the copy keeps).
SELECT id, created_at
FROM task
WHERE session_id = $1 AND deleted_at IS NULL AND created_at IS NOT NULL
  AND ($3::timestamptz IS NULL OR created_at < $3)
  AND {task_owned_by_$2}
ORDER BY created_at, id;

-- name: task_ids_hidden
-- The tasks of session $1 one rewind hid (its stamp $2).
SELECT id FROM task WHERE session_id = $1 AND deleted_at = $2;
