-- kagent's table layout after its core migrations (the tables kagent-fork reads and writes, plus the
-- ones it inspects). Used only to build the embedded demo database and the test databases: against a
-- real kagent database the service never runs DDL on these tables.
-- The ':version' of schema_migrations is filled in by the loader (7 = release 0.10.x, 13 = main).

CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT  NOT NULL PRIMARY KEY,
    dirty   BOOLEAN NOT NULL
);

CREATE TABLE IF NOT EXISTS agent (
    id            TEXT PRIMARY KEY,
    created_at    TIMESTAMPTZ,
    updated_at    TIMESTAMPTZ,
    deleted_at    TIMESTAMPTZ,
    type          TEXT NOT NULL,
    config        JSON,
    workload_type TEXT NOT NULL DEFAULT 'deployment'
);

CREATE TABLE IF NOT EXISTS session (
    id         TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    name       TEXT,
    created_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ,
    deleted_at TIMESTAMPTZ,
    agent_id   TEXT,
    source     TEXT,
    PRIMARY KEY (id, user_id)
);
CREATE INDEX IF NOT EXISTS idx_session_name ON session (name);
CREATE INDEX IF NOT EXISTS idx_session_agent_id ON session (agent_id);
CREATE INDEX IF NOT EXISTS idx_session_deleted_at ON session (deleted_at);
CREATE INDEX IF NOT EXISTS idx_session_source ON session (source);

CREATE TABLE IF NOT EXISTS event (
    id         TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    session_id TEXT,
    created_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ,
    deleted_at TIMESTAMPTZ,
    data       TEXT NOT NULL,
    PRIMARY KEY (id, user_id)
);
CREATE INDEX IF NOT EXISTS idx_event_session_id ON event (session_id);
CREATE INDEX IF NOT EXISTS idx_event_deleted_at ON event (deleted_at);

CREATE TABLE IF NOT EXISTS task (
    id               TEXT PRIMARY KEY,
    created_at       TIMESTAMPTZ,
    updated_at       TIMESTAMPTZ,
    deleted_at       TIMESTAMPTZ,
    data             TEXT NOT NULL,
    session_id       TEXT,
    protocol_version TEXT,
    user_id          TEXT
);
CREATE INDEX IF NOT EXISTS idx_task_session_id ON task (session_id);
CREATE INDEX IF NOT EXISTS idx_task_deleted_at ON task (deleted_at);

CREATE TABLE IF NOT EXISTS session_share (
    id         BIGSERIAL PRIMARY KEY,
    token      TEXT UNIQUE NOT NULL,
    session_id TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    read_only  BOOLEAN NOT NULL DEFAULT TRUE,
    created_at TIMESTAMP NOT NULL DEFAULT NOW()
);
CREATE INDEX IF NOT EXISTS idx_session_share_session_id ON session_share (session_id);

CREATE TABLE IF NOT EXISTS session_share_access (
    user_id     TEXT NOT NULL,
    share_id    BIGINT NOT NULL REFERENCES session_share (id) ON DELETE CASCADE,
    accessed_at TIMESTAMP NOT NULL DEFAULT NOW(),
    PRIMARY KEY (user_id, share_id)
);

CREATE TABLE IF NOT EXISTS lg_checkpoint (
    user_id              TEXT NOT NULL,
    thread_id            TEXT NOT NULL,
    checkpoint_ns        TEXT NOT NULL DEFAULT '',
    checkpoint_id        TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    created_at           TIMESTAMPTZ,
    updated_at           TIMESTAMPTZ,
    deleted_at           TIMESTAMPTZ,
    metadata             TEXT NOT NULL,
    checkpoint           TEXT NOT NULL,
    checkpoint_type      TEXT NOT NULL,
    version              BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (user_id, thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX IF NOT EXISTS idx_lg_checkpoint_parent_checkpoint_id ON lg_checkpoint (parent_checkpoint_id);
CREATE INDEX IF NOT EXISTS idx_lgcp_list ON lg_checkpoint (created_at);
CREATE INDEX IF NOT EXISTS idx_lg_checkpoint_deleted_at ON lg_checkpoint (deleted_at);

-- The pending writes of a LangGraph checkpoint (written with it by kagent-langgraph through the controller).
CREATE TABLE IF NOT EXISTS lg_checkpoint_write (
    user_id       TEXT NOT NULL,
    thread_id     TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    write_idx     BIGINT NOT NULL,
    value         TEXT NOT NULL,
    value_type    TEXT NOT NULL,
    channel       TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    created_at    TIMESTAMPTZ,
    updated_at    TIMESTAMPTZ,
    deleted_at    TIMESTAMPTZ,
    PRIMARY KEY (user_id, thread_id, checkpoint_ns, checkpoint_id, write_idx)
);
CREATE INDEX IF NOT EXISTS idx_lg_checkpoint_write_deleted_at ON lg_checkpoint_write (deleted_at);

CREATE TABLE IF NOT EXISTS crewai_agent_memory (
    user_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    created_at  TIMESTAMPTZ,
    updated_at  TIMESTAMPTZ,
    deleted_at  TIMESTAMPTZ,
    memory_data TEXT NOT NULL,
    PRIMARY KEY (user_id, thread_id)
);
CREATE INDEX IF NOT EXISTS idx_crewai_memory_list ON crewai_agent_memory (created_at);
CREATE INDEX IF NOT EXISTS idx_crewai_agent_memory_deleted_at ON crewai_agent_memory (deleted_at);

CREATE TABLE IF NOT EXISTS crewai_flow_state (
    user_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    method_name TEXT NOT NULL,
    created_at  TIMESTAMPTZ,
    updated_at  TIMESTAMPTZ,
    deleted_at  TIMESTAMPTZ,
    state_data  TEXT NOT NULL,
    PRIMARY KEY (user_id, thread_id, method_name)
);
CREATE INDEX IF NOT EXISTS idx_crewai_flow_state_list ON crewai_flow_state (created_at);
CREATE INDEX IF NOT EXISTS idx_crewai_flow_state_deleted_at ON crewai_flow_state (deleted_at);
