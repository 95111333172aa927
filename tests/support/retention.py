"""kagent's session retention (Helm `database.postgres.sessionRetentionDays`), as kagent runs it.

kagent's controller calls PruneExpiredSessions, which runs DeleteExpiredSessionsBatch in batches of 1,000
(go/core/internal/database/queries/sessions.sql, added by kagent-dev/kagent#2409): a hard DELETE of every
session whose `updated_at` is older than the retention (soft-deleted ones too), with its shares, events, tasks,
LangGraph checkpoints and CrewAI rows. kagent-fork's own rows (its `kagent_fork` schema) are left as they are.

Two changes, neither to what is deleted: the idle sessions are only those of `user_id` (the test database is
shared by the tests of a run, whose sessions must not be purged under them), and kagent's `push_notification`
rows (a table kagent-fork never reads, absent from its test schema) are not deleted.
"""

from __future__ import annotations

import asyncpg

RETENTION_DAYS = 30

_PRUNE = """
WITH expired AS (
    SELECT id, user_id
    FROM session
    WHERE updated_at < NOW() - make_interval(days => $1::int) AND user_id = $3
    ORDER BY updated_at ASC
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
del_sessions AS (
    DELETE FROM session s
    USING expired e
    WHERE s.id = e.id AND s.user_id = e.user_id
    RETURNING s.id, s.user_id
),
del_shares AS (
    DELETE FROM session_share ss
    USING del_sessions d
    WHERE ss.session_id = d.id AND ss.user_id = d.user_id
),
del_events AS (
    DELETE FROM event ev
    USING del_sessions d
    WHERE ev.session_id = d.id AND ev.user_id = d.user_id
),
del_tasks AS (
    DELETE FROM task t
    USING del_sessions d
    WHERE t.session_id = d.id
      AND COALESCE(t.user_id, d.user_id) = d.user_id
),
del_cp_writes AS (
    DELETE FROM lg_checkpoint_write w
    USING del_sessions d
    WHERE w.user_id = d.user_id AND w.thread_id = d.id
),
del_cps AS (
    DELETE FROM lg_checkpoint c
    USING del_sessions d
    WHERE c.user_id = d.user_id AND c.thread_id = d.id
),
del_crewai_mem AS (
    DELETE FROM crewai_agent_memory m
    USING del_sessions d
    WHERE m.user_id = d.user_id AND m.thread_id = d.id
),
del_crewai_flow AS (
    DELETE FROM crewai_flow_state f
    USING del_sessions d
    WHERE f.user_id = d.user_id AND f.thread_id = d.id
)
SELECT COUNT(*)::bigint AS deleted FROM del_sessions
"""


async def purge_idle(pool: asyncpg.Pool, user_id: str, *session_ids: str) -> int:
    """Let `session_ids` of `user_id` go idle past the retention, then run kagent's retention as its controller
    does (batch after batch, each in its own transaction, until one deletes nothing): how many it deleted."""
    total = 0
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE session SET updated_at = NOW() - make_interval(days => $1::int + 1) "
            "WHERE id = ANY($2::text[]) AND user_id = $3",
            RETENTION_DAYS, list(session_ids), user_id,
        )  # fmt: skip
        while True:
            async with conn.transaction():
                deleted: int = await conn.fetchval(_PRUNE, RETENTION_DAYS, 1000, user_id)
            total += deleted
            if not deleted:
                return total
