-- The arms' tools (issue 34): the policy a what-if or an experiment runs with, {mode: "replay"|"live", reads:
-- "live"|"recorded"}, and what each arm could do, its tools by class ({agent_ref, known, twin, asks, reads, acts,
-- note}), both as the start decided them before anything ran. NULL on rows written before: those ran every tool
-- live, as the service did then.
ALTER TABLE {schema}.whatif_job
    ADD COLUMN IF NOT EXISTS tool_policy JSONB,
    ADD COLUMN IF NOT EXISTS arm_tools   JSONB;
ALTER TABLE {schema}.experiment
    ADD COLUMN IF NOT EXISTS tool_policy JSONB,
    ADD COLUMN IF NOT EXISTS arms        JSONB;
