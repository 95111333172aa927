-- Suite runs (docs/suites.md, "Runs"): every case of a suite continued on each agent as an experiment, judged
-- against the source's own continuation, one verdict per agent across the cases.
--
-- A run writes its branches (and its judge's sessions) under a user of its own (`run_user`), so that kagent's
-- chat list, which is per user, gains nothing while it runs; its creator reads them through kagent-fork and
-- keeps one by forking it into their own chats. The run is driven by one replica at a time (`runner`,
-- `heartbeat_at`), taken over as a job is when that replica stops beating.
CREATE TABLE IF NOT EXISTS {schema}.suite_run (
    id           TEXT        PRIMARY KEY,
    suite_id     TEXT        NOT NULL REFERENCES {schema}.suite (id) ON DELETE CASCADE,
    user_id      TEXT        NOT NULL,   -- who started it: only they see it
    run_user     TEXT        NOT NULL,   -- whose rows its branches are (hidden from the creator's chat list)
    request      JSONB       NOT NULL,   -- agents, repeats, turns, tools, reads, judge, control, max_usd
    estimated_usd DOUBLE PRECISION,      -- the whole run's estimate at its start, judge included (null: unpriced)
    status       TEXT        NOT NULL DEFAULT 'running'
                 CHECK (status IN ('running', 'judging', 'completed', 'stopped', 'cancelled', 'failed')),
    reason       TEXT,                   -- why it stopped or failed (budget, ...)
    runner       TEXT        NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    verdict      JSONB,                  -- the verdict across cases, once it ended
    created_at   TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    finished_at  TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS suite_run_suite_idx ON {schema}.suite_run (suite_id, created_at DESC);
CREATE INDEX IF NOT EXISTS suite_run_open_idx ON {schema}.suite_run (status) WHERE status IN ('running', 'judging');

-- One case of a run: the case as it was when the run started (a case removed from the suite later stays in the
-- run), the experiments that continue it, one per agent (an experiment holds at most 8 branches, and a run's
-- verdict needs each agent against the source only, not each two agents); empty until started, each under an
-- Idempotency-Key naming the run, the case and the agent, so a replica taking the run over never starts one twice;
-- and its result once judged.
CREATE TABLE IF NOT EXISTS {schema}.suite_run_case (
    run_id        TEXT        NOT NULL REFERENCES {schema}.suite_run (id) ON DELETE CASCADE,
    case_id       TEXT        NOT NULL,
    ordinal       INTEGER     NOT NULL,
    session_id    TEXT        NOT NULL,
    spec          JSONB       NOT NULL,  -- the experiments' requests for this case, one per agent
    branches      INTEGER     NOT NULL DEFAULT 0,  -- how many branches its experiments have (their dry runs' count)
    experiment_ids TEXT[]     NOT NULL DEFAULT '{}',
    status        TEXT        NOT NULL DEFAULT 'waiting'
                  CHECK (status IN ('waiting', 'running', 'done', 'failed', 'skipped')),
    error         TEXT,                  -- why it failed or was skipped (its session purged, a refusal, ...)
    result        JSONB,                 -- per agent: the judged record and its cost, once it ended
    spent_usd     DOUBLE PRECISION,      -- what its branches cost (null: a model is unpriced)
    PRIMARY KEY (run_id, case_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS suite_run_case_order_idx ON {schema}.suite_run_case (run_id, ordinal);
