-- The service's own tables. kagent's tables are never altered; these live in their own schema.

-- invocation_id_of: the top-level invocation id of an ADK event (Python: invocation_id, Go:
-- invocationId), or NULL when the row is not a JSON object. PostgreSQL 15 has no safe cast, and one
-- row of bad JSON must not fail a whole fork, hence the exception block; callers pre-filter with
-- strpos() so that only candidate rows pay for the parse.
CREATE OR REPLACE FUNCTION {schema}.invocation_id_of(data TEXT) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    doc JSONB;
BEGIN
    doc := data::jsonb;
    IF jsonb_typeof(doc) <> 'object' THEN
        RETURN NULL;
    END IF;
    RETURN COALESCE(doc ->> 'invocation_id', doc ->> 'invocationId');
EXCEPTION WHEN others THEN
    RETURN NULL;
END;
$$;

-- try_jsonb: the row as JSONB, or NULL when it is not JSON.
CREATE OR REPLACE FUNCTION {schema}.try_jsonb(data TEXT) RETURNS JSONB
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN data::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END;
$$;

-- One row per fork: the lineage that makes forks of forks understandable.
CREATE TABLE IF NOT EXISTS {schema}.fork (
    session_id                 TEXT        NOT NULL,
    user_id                    TEXT        NOT NULL,
    parent_session_id          TEXT        NOT NULL,
    parent_user_id             TEXT        NOT NULL,
    root_session_id            TEXT        NOT NULL,
    root_user_id               TEXT        NOT NULL,
    depth                      INTEGER     NOT NULL CHECK (depth >= 1),
    rewind_before_invocation_id TEXT,
    boundary_found             BOOLEAN     NOT NULL,
    events_copied              INTEGER     NOT NULL,
    tasks_copied               INTEGER     NOT NULL,
    messages_copied            INTEGER     NOT NULL,
    task_layout                TEXT        NOT NULL,
    warnings                   JSONB       NOT NULL DEFAULT '[]',
    created_by                 TEXT        NOT NULL,
    created_at                 TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (session_id, user_id)
);
CREATE INDEX IF NOT EXISTS fork_parent_idx ON {schema}.fork (parent_session_id, parent_user_id);
CREATE INDEX IF NOT EXISTS fork_root_idx ON {schema}.fork (root_session_id, root_user_id);

-- A fork request's answer, kept so that a retry with the same Idempotency-Key gets it again.
CREATE TABLE IF NOT EXISTS {schema}.idempotency (
    user_id      TEXT        NOT NULL,
    key          TEXT        NOT NULL,
    request_hash TEXT        NOT NULL,
    session_id   TEXT        NOT NULL,
    response     JSONB       NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (user_id, key)
);
CREATE INDEX IF NOT EXISTS idempotency_created_at_idx ON {schema}.idempotency (created_at);

-- One row per rewind: what it hid (by its one deleted_at stamp), so that undo restores exactly that.
CREATE TABLE IF NOT EXISTS {schema}.rewind (
    id                          TEXT        PRIMARY KEY,
    session_id                  TEXT        NOT NULL,
    user_id                     TEXT        NOT NULL,
    rewind_before_invocation_id TEXT        NOT NULL,
    deleted_at                  TIMESTAMPTZ NOT NULL,
    events_removed              INTEGER     NOT NULL,
    tasks_removed               INTEGER     NOT NULL,
    replaced_task_id            TEXT,
    replacement_task_id         TEXT,
    requested_by                TEXT        NOT NULL,
    created_at                  TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    undone_at                   TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS rewind_session_idx ON {schema}.rewind (session_id, user_id);
