-- Suites (docs/suites.md): a named, saved set of cases, each a point of a real conversation to continue from (a
-- session, the turn to continue before, how many turns, an optional edited question). Only its creator sees a
-- suite. A case keeps the turn as it was named (its invocation id, or its task id for an agent that writes
-- none); the session is read again, as its caller may read it, when the case is run.
CREATE TABLE IF NOT EXISTS {schema}.suite (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW()
);
CREATE INDEX IF NOT EXISTS suite_user_idx ON {schema}.suite (user_id, created_at DESC);

CREATE TABLE IF NOT EXISTS {schema}.suite_case (
    suite_id TEXT NOT NULL REFERENCES {schema}.suite (id) ON DELETE CASCADE,
    id TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    rewind_before_invocation_id TEXT,
    rewind_before_task_id TEXT,
    turns TEXT NOT NULL,  -- "all" or a whole number, as asked
    message TEXT,  -- the edited first question, when one was given
    user_text TEXT,  -- the turn's own question as the case was saved (what a person reads in the list)
    agent_id TEXT,  -- the session's agent (kagent's id) as the case was saved
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (suite_id, id),
    CONSTRAINT suite_case_names_one_turn CHECK ((rewind_before_invocation_id IS NULL) <> (rewind_before_task_id IS NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS suite_case_order_idx ON {schema}.suite_case (suite_id, ordinal);
