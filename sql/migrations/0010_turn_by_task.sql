-- Turns named by their task (rewind_before_task_id), and the framework a fork was made on: agents that are
-- not ADK write no invocation id, so a rewind may name its turn by task alone.
ALTER TABLE {schema}.rewind ALTER COLUMN rewind_before_invocation_id DROP NOT NULL;
ALTER TABLE {schema}.rewind ADD COLUMN IF NOT EXISTS rewind_before_task_id TEXT;
-- The user whose rows a rewind hid, when a runtime wrote them under kagent's default user, not the owner.
ALTER TABLE {schema}.rewind ADD COLUMN IF NOT EXISTS rows_user_id TEXT;
ALTER TABLE {schema}.fork ADD COLUMN IF NOT EXISTS rewind_before_task_id TEXT;
ALTER TABLE {schema}.fork ADD COLUMN IF NOT EXISTS framework TEXT;
-- A what-if of a turn known by its task alone (no invocation id): the job names the task.
ALTER TABLE {schema}.whatif_job ALTER COLUMN rewind_before_invocation_id DROP NOT NULL;
ALTER TABLE {schema}.whatif_job ADD COLUMN IF NOT EXISTS rewind_before_task_id TEXT;
