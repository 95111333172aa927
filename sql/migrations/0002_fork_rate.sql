-- FORK_RATE_PER_MINUTE counts the forks a user made in the last minute, from the lineage records
-- themselves (forks that were made, nothing else), in every replica alike: this index makes that a
-- short range scan.
CREATE INDEX IF NOT EXISTS fork_user_created_idx ON {schema}.fork (user_id, created_at);
