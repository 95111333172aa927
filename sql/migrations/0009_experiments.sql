-- Experiments: one continuation replayed on several agents. Each branch is a what-if job that re-asks
-- the source's later user messages turn by turn (whatif_turn); an experiment groups its branches.
-- A plain what-if is a job of one turn (turns_total = 1).

-- A job's turns: the message to send (its messageId fixed before it is sent, so that a replica taking
-- the job over finds the agent's task by it in kagent's task table and never sends it twice), when it
-- was sent, the agent's task, how it ended, and its figures (computed once, when it ended).
ALTER TABLE {schema}.whatif_job
    ADD COLUMN IF NOT EXISTS experiment_id TEXT,
    ADD COLUMN IF NOT EXISTS repeat        INTEGER NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS agent_card    JSONB,
    ADD COLUMN IF NOT EXISTS on_approval   TEXT NOT NULL DEFAULT 'stop' CHECK (on_approval IN ('stop', 'reject')),
    ADD COLUMN IF NOT EXISTS stopped_at    TEXT,                        -- the source turn a stop ended the branch at
    ADD COLUMN IF NOT EXISTS turns_total   INTEGER NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS turns_done    INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS whatif_job_experiment_idx ON {schema}.whatif_job (experiment_id) WHERE experiment_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS {schema}.whatif_turn (
    job_id              TEXT        NOT NULL,
    ordinal             INTEGER     NOT NULL,   -- 0 = the boundary turn
    invocation_id       TEXT        NOT NULL,   -- the source turn it re-asks
    message             JSONB       NOT NULL,   -- the A2A message (v1.0 JSON), exactly as it is sent
    sent_at             TIMESTAMPTZ,            -- set before it is sent: never sent twice
    task_id             TEXT,
    state               TEXT,                   -- how the agent's task ended (input-required, completed, ...)
    reply               JSONB,                  -- a rejection of a tool approval, before it is sent
    reply_sent_at       TIMESTAMPTZ,
    rejected_tool_calls INTEGER     NOT NULL DEFAULT 0,
    figures             JSONB,                  -- question, answer, tool calls, tokens, ... once it ended
    ended_at            TIMESTAMPTZ,
    PRIMARY KEY (job_id, ordinal)
);

CREATE TABLE IF NOT EXISTS {schema}.experiment (
    id                          TEXT        PRIMARY KEY,
    user_id                     TEXT        NOT NULL,   -- who started it: only they see it
    source_session_id           TEXT        NOT NULL,
    source_user_id              TEXT        NOT NULL,
    source_agent_ref            TEXT,
    rewind_before_invocation_id TEXT        NOT NULL,
    turns_requested             TEXT        NOT NULL,   -- "all" or a number, as asked
    turns                       INTEGER     NOT NULL,   -- how many source turns that is
    message                     JSONB,                  -- {text}: the first turn asked differently
    on_approval                 TEXT        NOT NULL CHECK (on_approval IN ('stop', 'reject')),
    repeats                     INTEGER     NOT NULL,
    source_turns                JSONB,                  -- the baseline column, once computed
    status                      TEXT        NOT NULL DEFAULT 'running'
                                CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    created_at                  TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    finished_at                 TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS experiment_source_idx
    ON {schema}.experiment (source_session_id, source_user_id, user_id, created_at DESC);

-- Jobs written before this migration: their one turn (sent when the job began: never sent again).
INSERT INTO {schema}.whatif_turn (job_id, ordinal, invocation_id, message, sent_at, task_id, state, ended_at)
SELECT id, 0, rewind_before_invocation_id, message, created_at, task_id,
       CASE WHEN status <> 'running' THEN status END, finished_at
FROM {schema}.whatif_job
ON CONFLICT DO NOTHING;
UPDATE {schema}.whatif_job SET turns_done = 1 WHERE status = 'completed' AND turns_done = 0;
