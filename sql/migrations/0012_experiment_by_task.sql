-- An experiment from a turn known by its task alone (an agent that writes no invocation id: every framework
-- but ADK): the experiment names the task, its rewind_before_invocation_id is null. Its branches' turns
-- (whatif_turn.invocation_id) are keyed by the turn key: the invocation id, or the task id when it has none.
ALTER TABLE {schema}.experiment ALTER COLUMN rewind_before_invocation_id DROP NOT NULL;
ALTER TABLE {schema}.experiment ADD COLUMN IF NOT EXISTS rewind_before_task_id TEXT;
