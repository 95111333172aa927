-- The replay endpoint (docs/replay-twins.md): who a twin's calls belong to, and every call it answered.

-- replay_lease: the one turn a replay twin serves at a time. kagent's controller forwards no request header of
-- its own choosing to an agent, so nothing in a tool call names the branch that caused it; instead a runner
-- takes the lease of every agent whose tools its branch's twin stands in for (`twin`, the endpoint path's
-- namespace/name) for the caller (`user_id`, whom the call names) before it sends a turn, renews it while the
-- turn runs and gives it back when it ends. A call is the turn's that holds the lease; a lease not renewed
-- by its expiry (a replica that stopped) is free again.
CREATE TABLE IF NOT EXISTS {schema}.replay_lease (
    twin TEXT NOT NULL,
    user_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    runner TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (twin, user_id)
);

-- replay_call: each tool call the endpoint answered, kept with its branch (job) and turn: the tool, its
-- arguments as the arm sent them, its class (asks, reads, acts) and where the answer came from: the source's
-- recording, the real server (live), or nowhere (refused: the arm's intent).
CREATE TABLE IF NOT EXISTS {schema}.replay_call (
    id BIGSERIAL PRIMARY KEY,
    job_id TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    twin TEXT NOT NULL,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments JSONB NOT NULL,
    tool_class TEXT NOT NULL CHECK (tool_class IN ('asks', 'reads', 'acts')),
    answered_from TEXT NOT NULL CHECK (answered_from IN ('recorded', 'live', 'refused')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW()
);
CREATE INDEX IF NOT EXISTS replay_call_job_idx ON {schema}.replay_call (job_id, ordinal, id);
