-- The functions of the optional invocation index (service/invocation_index.py). Only the functions:
-- the indexes on kagent's tables are created by `kagent-fork index install`, never by a migration.
--
-- An index stores what its function returned when the row was written, so a function an index uses
-- is never replaced with different results: a change is a new function and a reinstall.
--
-- task_invocation_ids: every invocation id a task carries, as tasks.invocation_ids reads it (the
-- `adk_invocation_id`, else `kagent_invocation_id`, string metadata of the task, of its history
-- messages, of its status message and of its artifacts), or {''} for a row PostgreSQL cannot read
-- as JSON (bad text, a character jsonb refuses, over jsonb's size): a search for an id also looks at
-- those rows, so that a row the service's own JSON reader could read is never missed. It never
-- raises: kagent's INSERT of any row must not fail because of the index.
-- Measured on the benchmark's 12.8 KB tasks: 105 us a task, of which the jsonb parse is about 37 us and
-- reading the stored row (decompression) 38 us. A version over the json type (which only scans the text)
-- took 650 us: each json operator scans its whole argument again.
CREATE OR REPLACE FUNCTION {schema}.task_invocation_ids(data TEXT) RETURNS TEXT[]
LANGUAGE plpgsql IMMUTABLE PARALLEL UNSAFE AS $$
DECLARE
    doc JSONB;
BEGIN
    doc := data::jsonb;
    IF jsonb_typeof(doc) IS DISTINCT FROM 'object' THEN
        RETURN '{}';
    END IF;
    RETURN ARRAY(
        SELECT DISTINCT value #>> '{}'
        FROM (
            SELECT CASE WHEN coalesce(meta -> 'adk_invocation_id', 'null') <> 'null'
                        THEN meta -> 'adk_invocation_id' ELSE meta -> 'kagent_invocation_id' END AS value
            FROM (
                SELECT doc -> 'metadata' AS meta
                UNION ALL SELECT doc -> 'status' -> 'message' -> 'metadata'
                UNION ALL SELECT node -> 'metadata'
                FROM jsonb_array_elements(CASE jsonb_typeof(doc -> 'history') WHEN 'array' THEN doc -> 'history'
                                          ELSE '[]' END) AS node
                UNION ALL SELECT node -> 'metadata'
                FROM jsonb_array_elements(CASE jsonb_typeof(doc -> 'artifacts') WHEN 'array' THEN doc -> 'artifacts'
                                          ELSE '[]' END) AS node
            ) AS nodes
            WHERE jsonb_typeof(meta) = 'object'
        ) AS found
        WHERE jsonb_typeof(value) = 'string'
    );
EXCEPTION WHEN others THEN
    RETURN ARRAY['']::TEXT[];
END;
$$;
