-- What-if jobs: a fork into another agent, and that agent asked over A2A to answer the fork's turn.
-- One row per job. Its status changes are written in their own transactions; `runner` and
-- `heartbeat_at` say which replica runs it and that it still does, so that a job whose replica died
-- is finished by another one (or by the next start), and never run twice.
CREATE TABLE IF NOT EXISTS {schema}.whatif_job (
    id                          TEXT        PRIMARY KEY,
    user_id                     TEXT        NOT NULL,   -- who started it: only they see it
    parent_session_id           TEXT        NOT NULL,
    parent_user_id              TEXT        NOT NULL,
    session_id                  TEXT        NOT NULL,   -- the fork the agent answers in
    rewind_before_invocation_id TEXT        NOT NULL,
    agent_ref                   TEXT        NOT NULL,   -- namespace/name
    dialect                     TEXT        NOT NULL CHECK (dialect IN ('legacy', 'v1')),
    message                     JSONB       NOT NULL,   -- the A2A message sent (v1.0 JSON)
    status                      TEXT        NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    task_id                     TEXT,                   -- the agent's A2A task, once it answered
    error                       TEXT,
    result                      JSONB,
    runner                      TEXT        NOT NULL,
    heartbeat_at                TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    created_at                  TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    finished_at                 TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS whatif_job_parent_idx ON {schema}.whatif_job (parent_session_id, parent_user_id, created_at);
CREATE INDEX IF NOT EXISTS whatif_job_running_idx ON {schema}.whatif_job (heartbeat_at) WHERE status = 'running';
