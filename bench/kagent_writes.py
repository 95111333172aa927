"""kagent's own writes, as its backend makes them: the benchmark's active-chat measure (bench.run) and the
tests write turns with them, the way kagent does while the service reads.

kagent's backend writes one event per statement (`InsertEvent`: the row, and the session's updated_at in
the same statement) and upserts a task many times a turn (`UpsertTask`: insert, or replace data when
the id exists and belongs to the same user, and touch the session). Each runs as its own transaction. The
statements below do what kagent's do (go/core/internal/database/queries/{events,tasks}.sql on main),
written here for the benchmark and the tests. (They also timed what the retired invocation index cost
kagent's writes: docs/invocation-index.md.)
"""

from __future__ import annotations

INSERT_EVENT = """
WITH written AS (
    INSERT INTO event (id, user_id, session_id, data, created_at, updated_at)
    VALUES ($1, $2, $3, $4, NOW(), NOW())
    RETURNING user_id, session_id
)
UPDATE session SET updated_at = NOW()
FROM written
WHERE session.id = written.session_id AND session.user_id = written.user_id AND session.deleted_at IS NULL
"""

UPSERT_TASK = """
WITH written AS (
    INSERT INTO task (id, data, session_id, protocol_version, user_id, created_at, updated_at)
    VALUES ($1, $2, $3, $4, $5, NOW(), NOW())
    ON CONFLICT (id) DO UPDATE SET
        data = EXCLUDED.data, session_id = EXCLUDED.session_id, protocol_version = EXCLUDED.protocol_version,
        user_id = EXCLUDED.user_id, updated_at = NOW()
    WHERE task.deleted_at IS NULL AND task.user_id = EXCLUDED.user_id
    RETURNING id, session_id, user_id
), touched AS (
    UPDATE session SET updated_at = NOW()
    FROM written
    WHERE session.id = written.session_id AND session.user_id = written.user_id AND session.deleted_at IS NULL
)
SELECT id FROM written
"""
