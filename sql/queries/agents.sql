-- Named queries of kagent-fork's store, service/kagent/store/agents.py (conventions: fragments.sql).

-- name: get_agent_config
-- An agent's configuration as kagent's controller stored it (kagent's own GetAgent: a live row by id, where the
-- id is namespace/name spelled as a Python identifier). NULL config: an agent kagent keeps no config for (BYO).
SELECT id, type, config::text AS config FROM agent WHERE id = $1 AND deleted_at IS NULL LIMIT 1;

-- name: get_agent_configs
-- get_agent_config of several agents at once ($1: their ids), for pricing an experiment's columns.
SELECT id, type, config::text AS config FROM agent WHERE id = ANY($1::text[]) AND deleted_at IS NULL;

-- name: list_agents
-- kagent's live agents by id (its ListAgents, ordered by id here), at most $1: what the explorer page offers to pick.
SELECT id, type, config::text AS config FROM agent WHERE deleted_at IS NULL ORDER BY id LIMIT $1;
