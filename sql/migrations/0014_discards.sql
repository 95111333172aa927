-- Discarding an experiment's branches: every branch's fork hidden but the one kept, as kagent hides a deleted
-- session (session.deleted_at stamped; nothing erased), and brought back by undo. One row per discard: the
-- forks it hid (only those it found visible: a session the user deleted in kagent is none of its business),
-- and the one stamp it set on them, so that undo brings back exactly those that still carry it.
CREATE TABLE IF NOT EXISTS {schema}.discard (
    id              TEXT        PRIMARY KEY,
    experiment_id   TEXT        NOT NULL,
    user_id         TEXT        NOT NULL,   -- who discarded: the experiment's creator, owner of its forks
    kept_session_id TEXT,                   -- the branch kept (null: every branch discarded)
    session_ids     TEXT[]      NOT NULL,   -- the branch forks it hid
    deleted_at      TIMESTAMPTZ NOT NULL,   -- the stamp it set on them
    created_at      TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    undone_at       TIMESTAMPTZ,
    restored_ids    TEXT[]                  -- the forks undo brought back (those that still carried the stamp)
);
-- At most one discard in force per experiment: a second one would hide what the first one kept.
CREATE UNIQUE INDEX IF NOT EXISTS discard_in_force_idx ON {schema}.discard (experiment_id) WHERE undone_at IS NULL;
CREATE INDEX IF NOT EXISTS discard_experiment_idx ON {schema}.discard (experiment_id, created_at DESC);
