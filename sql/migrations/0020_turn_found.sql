-- When the agent first answered a tasks/get of a turn's task. An agent that answered it and then says "task not
-- found" lost the turn (it restarted), and its branch fails at once; kagent's runtimes answer "not found" to every
-- tasks/get (they lose the caller), so without this mark "not found" beside kagent's task row says nothing. Kept
-- in the row for a replica that takes the job over (service/agents/replay/player.py).
ALTER TABLE {schema}.whatif_turn ADD COLUMN IF NOT EXISTS agent_found_at TIMESTAMPTZ;
