-- The turn map (docs/turn-map.md): per session, what the service would otherwise compute again from
-- every event and task of it, kept in the service's own schema. Nothing is added to kagent's tables.
-- A map is only ever read after its guard (service/kagent/turn_map.py) found it matching kagent's rows;
-- one that does not match is rebuilt. Rows of one session are written under an advisory lock.

-- One row per mapped session: what the map claims, which the guard compares with kagent's rows.
CREATE TABLE IF NOT EXISTS {schema}.turn_map (
    session_id         TEXT NOT NULL,
    user_id            TEXT NOT NULL,
    version            INTEGER NOT NULL,
    session_updated_at TIMESTAMPTZ,          -- session.updated_at when mapped: kagent's writes move it
    events_deleted     BIGINT NOT NULL,      -- event rows of the session id soft-deleted (any user)
    tasks_deleted      BIGINT NOT NULL,      -- task rows of the session id soft-deleted (any user)
    watermark_at       TIMESTAMPTZ,          -- the last live event mapped (created_at, id); NULL: none
    watermark_id       TEXT,
    events             BIGINT NOT NULL,      -- live events mapped
    runs               INTEGER NOT NULL,     -- rows in turn_map_run (numbered 1 to runs)
    built_at           TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (session_id, user_id)
);

-- Runs: consecutive live events (created_at, id order) with one invocation key (NULL: none), with the
-- figures a dry run answers, summed over the run and over every run up to it (cum_*).
CREATE TABLE IF NOT EXISTS {schema}.turn_map_run (
    session_id     TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    invocation_id  TEXT,
    first_at       TIMESTAMPTZ NOT NULL,
    first_id       TEXT NOT NULL,
    last_at        TIMESTAMPTZ NOT NULL,
    last_id        TEXT NOT NULL,
    events         INTEGER NOT NULL,
    bytes          BIGINT NOT NULL,
    text_chars     BIGINT NOT NULL,
    has_messages   BOOLEAN NOT NULL,
    user_text      TEXT,                     -- the first user event's text in the run (200 characters)
    -- what a branch summary (events_tally) adds up: tokens, tool calls by name, the first user text
    -- message (200 characters) and the last agent one (480)
    tokens         NUMERIC NOT NULL,
    tool_calls     JSONB NOT NULL,
    first_user_message TEXT,
    last_agent_message TEXT,
    cum_events     BIGINT NOT NULL,
    cum_bytes      BIGINT NOT NULL,
    cum_text_chars BIGINT NOT NULL,
    PRIMARY KEY (session_id, user_id, seq)
);
CREATE INDEX IF NOT EXISTS turn_map_run_invocation ON {schema}.turn_map_run (session_id, user_id, invocation_id, seq);

-- Tasks: every live task of the session (kagent's owner rule) as last read, with the invocations it
-- carries (the service's reader, tasks.invocation_ids), the user text of each and its state.
CREATE TABLE IF NOT EXISTS {schema}.turn_map_task (
    session_id     TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    task_id        TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ,
    state          TEXT,
    invocation_ids TEXT[] NOT NULL,
    user_texts     TEXT[] NOT NULL,          -- parallel to invocation_ids (NULL: none)
    -- by invocation, what of that turn survives on the messages kagent's chat renders from this task
    -- (dialects.chat_marks): [message ids, call ids, response ids, text count]
    marks          JSONB NOT NULL DEFAULT '{}',
    -- a per_task fork's figures for this task as a whole (NULL: the copier refuses it): history messages,
    -- bytes written with a new task and session id and an empty user id, places that hold the user id,
    -- and whether it is terminal (else its copy is closed as canceled, with a warning)
    messages       INTEGER,
    bytes          BIGINT,
    user_places    INTEGER,
    terminal       BOOLEAN,
    -- whether PostgreSQL's text copy of it (copy_tasks_before: its id and the session id replaced) writes
    -- exactly what the Python rewrite writes for a fork by its owner (fork.ServerCopyCheck's rule)
    server_copy    BOOLEAN,
    PRIMARY KEY (session_id, user_id, task_id)
);
CREATE INDEX IF NOT EXISTS turn_map_task_invocations ON {schema}.turn_map_task USING gin (invocation_ids);

-- Turns: one row per invocation the events or the tasks know, as the turn listing and a boundary
-- search read it. started_at is NULL for an invocation that is not a turn (no message, no task).
CREATE TABLE IF NOT EXISTS {schema}.turn_map_turn (
    session_id      TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    invocation_id   TEXT NOT NULL,
    event_first_at  TIMESTAMPTZ,             -- its first live event (the boundary event), NULL: none
    event_first_id  TEXT,
    events          INTEGER NOT NULL,
    has_messages    BOOLEAN NOT NULL,
    event_user_text TEXT,
    task_id         TEXT,                    -- the first live task carrying it (created_at, id order)
    task_created_at TIMESTAMPTZ,
    task_state      TEXT,
    task_user_text  TEXT,                    -- the first user text its tasks give
    started_at      TIMESTAMPTZ,
    PRIMARY KEY (session_id, user_id, invocation_id)
);
CREATE INDEX IF NOT EXISTS turn_map_turn_order ON {schema}.turn_map_turn (session_id, user_id, started_at, invocation_id)
    WHERE started_at IS NOT NULL;
