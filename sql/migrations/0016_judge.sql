-- A judge: an experiment's continuations compared two by two by a kagent agent, blind (each pair asked twice,
-- A and B swapped), and a person's blind votes beside it. A judgment is a job of the runner (its runner and
-- heartbeat, taken over as a branch is); its calls are its turns, each sent once.

CREATE TABLE IF NOT EXISTS {schema}.judgment (
    id              TEXT        PRIMARY KEY,
    experiment_id   TEXT        NOT NULL,
    user_id         TEXT        NOT NULL,   -- who asked for it (the experiment's creator)
    judge_agent_ref TEXT        NOT NULL,   -- namespace/name of the judging kagent agent
    judge_card      JSONB,                  -- its card as checked before anything was written
    criteria        TEXT,                   -- the caller's criteria, added to the default ones
    dialect         TEXT        NOT NULL,   -- the A2A dialect of the experiment's product line
    status          TEXT        NOT NULL DEFAULT 'waiting'
                    CHECK (status IN ('waiting', 'running', 'completed', 'failed', 'cancelled')),
    runner          TEXT        NOT NULL,
    heartbeat_at    TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    error           TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    finished_at     TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS judgment_experiment_idx ON {schema}.judgment (experiment_id, created_at);
CREATE INDEX IF NOT EXISTS judgment_open_idx ON {schema}.judgment (status) WHERE status IN ('waiting', 'running');
-- One judgment at a time per experiment: a second asked for while one waits or runs is refused (409).
CREATE UNIQUE INDEX IF NOT EXISTS judgment_one_open_idx ON {schema}.judgment (experiment_id)
    WHERE status IN ('waiting', 'running');

-- One question to the judge: the pair (left: a branch's job, or NULL for the source; right: a branch's job),
-- which side is A (swapped: the right one), the message (its messageId and contextId fixed before it is
-- sent, so that a replica taking over finds the judge's task by it and never sends it twice), and the answer.
CREATE TABLE IF NOT EXISTS {schema}.judge_call (
    judgment_id TEXT        NOT NULL,
    ordinal     INTEGER     NOT NULL,
    left_job    TEXT,
    right_job   TEXT        NOT NULL,
    swapped     BOOLEAN     NOT NULL,
    message     JSONB       NOT NULL,
    context_id  TEXT        NOT NULL,
    sent_at     TIMESTAMPTZ,
    task_id     TEXT,
    answer      TEXT,                   -- the judge's last text, whole
    winner      TEXT        CHECK (winner IN ('A', 'B', 'tie', 'invalid')),
    reason      TEXT,
    error       TEXT,                   -- why it has no answer (timed out, interrupted, cancelled, the agent)
    ended_at    TIMESTAMPTZ,
    PRIMARY KEY (judgment_id, ordinal)
);

-- A person's blind vote on one pair of an experiment (left, right as the judge's calls name them).
CREATE TABLE IF NOT EXISTS {schema}.judge_vote (
    experiment_id TEXT        NOT NULL,
    user_id       TEXT        NOT NULL,
    left_job      TEXT        NOT NULL,   -- '' for the source
    right_job     TEXT        NOT NULL,
    winner        TEXT        NOT NULL CHECK (winner IN ('left', 'right', 'tie')),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (experiment_id, user_id, left_job, right_job)
);
