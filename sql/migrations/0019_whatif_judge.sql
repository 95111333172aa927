-- A what-if takes a judge too (a what-if is an experiment of one agent that writes no experiment row): its
-- judgment is keyed on its job (`job_id`, the what-if's whatif_job.id) instead of an experiment. Exactly one of
-- the two is set; one judgment at a time waits or runs per what-if, as per experiment.
ALTER TABLE {schema}.judgment ALTER COLUMN experiment_id DROP NOT NULL;
ALTER TABLE {schema}.judgment ADD COLUMN IF NOT EXISTS job_id TEXT;
ALTER TABLE {schema}.judgment DROP CONSTRAINT IF EXISTS judgment_judges_one;
ALTER TABLE {schema}.judgment ADD CONSTRAINT judgment_judges_one CHECK ((experiment_id IS NULL) <> (job_id IS NULL));
CREATE INDEX IF NOT EXISTS judgment_job_idx ON {schema}.judgment (job_id, created_at) WHERE job_id IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS judgment_one_open_job_idx ON {schema}.judgment (job_id)
    WHERE job_id IS NOT NULL AND status IN ('waiting', 'running');
