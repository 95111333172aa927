-- Named queries of kagent-fork's store, service/kagent/store/agents.py (conventions: fragments.sql).

-- name: get_agent_config
-- An agent's configuration as kagent's controller stored it (kagent's own GetAgent: a live row by id, where the
-- id is namespace/name spelled as a Python identifier). NULL config: an agent kagent keeps no config for (BYO).
SELECT id, type, config::text AS config FROM agent WHERE id = $1 AND deleted_at IS NULL LIMIT 1;
