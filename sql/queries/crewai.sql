-- Named queries of kagent-fork's store, service/kagent/store/crewai.py (conventions: fragments.sql).
-- kagent 0.10.x keeps a CrewAI agent's long-term memory (crewai_agent_memory, one row per user and thread)
-- and flow state (crewai_flow_state, one row per user, thread and flow method), upserted by kagent-crewai
-- through the controller as the chat goes (thread_id = the session id); docs/frameworks.md.

-- name: crewai_last_change
-- When the live CrewAI rows of thread $1 written under the users $2 last changed (a row without times counts
-- as changed now: 'infinity'); NULL when there is none.
SELECT max(changed) AS changed FROM (
    SELECT coalesce(updated_at, created_at, 'infinity') AS changed FROM crewai_agent_memory
    WHERE thread_id = $1 AND user_id = ANY($2::text[]) AND deleted_at IS NULL
    UNION ALL
    SELECT coalesce(updated_at, created_at, 'infinity') FROM crewai_flow_state
    WHERE thread_id = $1 AND user_id = ANY($2::text[]) AND deleted_at IS NULL
) AS rows;

-- name: copy_crewai
-- A fork's copies of the live CrewAI rows of thread $1 (users $2) on the fork's thread $3: same user, data byte
-- for byte, times kept (a later cut of the fork compares them with its tasks' times, which the copy keeps).
WITH memory AS (
    INSERT INTO crewai_agent_memory (user_id, thread_id, created_at, updated_at, memory_data)
    SELECT user_id, $3, created_at, updated_at, memory_data FROM crewai_agent_memory
    WHERE thread_id = $1 AND user_id = ANY($2::text[]) AND deleted_at IS NULL
    RETURNING 1
), flows AS (
    INSERT INTO crewai_flow_state (user_id, thread_id, method_name, created_at, updated_at, state_data)
    SELECT user_id, $3, method_name, created_at, updated_at, state_data FROM crewai_flow_state
    WHERE thread_id = $1 AND user_id = ANY($2::text[]) AND deleted_at IS NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM memory) AS memory, (SELECT count(*) FROM flows) AS flows;
