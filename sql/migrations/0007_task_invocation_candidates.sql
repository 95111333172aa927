-- task_invocation_candidates: what the task index (sql/invocation_index.sql, version 2) stores, cheaper
-- for kagent's task writes than task_invocation_ids (0006), which stays for indexes built before.
--
-- The strings under an `adk_invocation_id` or a `kagent_invocation_id` key of the metadata of the task,
-- of its history messages, of its status message and of its artifacts (lax: an object where an array
-- should be is read as one element): every id tasks.invocation_ids reads (which takes adk_ first,
-- kagent_ only when adk_ is absent or null, and only from arrays), and maybe more. The index only
-- narrows the rows; the service reads each candidate's ids itself (turns._complete, the callers of
-- store.tasks_mentioning), so more is harmless and less would be wrong. {''} for a row PostgreSQL
-- cannot read as JSON, so that a search (which always looks for '' too) finds it. It never raises:
-- kagent's INSERT of any row must not fail because of the index. PARALLEL UNSAFE: the exception block
-- is a subtransaction (0003).
--
-- TEXT[] (a GIN index of arrays answers && exactly) rather than the JSONB array the paths return: a GIN
-- index of jsonb rechecks ?| on every row it finds, i.e. parses each candidate again (12 ms for a listing
-- page's 100 tasks against 4 ms); the conversion costs about 6 us a task.
--
-- Measured in a SELECT over the benchmark's 12.8 KB tasks (psql), per task: the jsonb parse in its exception
-- block 41 us, this function 52 us, task_invocation_ids 74 us (its walk is a query of five parts; each
-- jsonb_path_query_array here is one lookup in the parsed document). Searching every node instead
-- (`$.**.adk_invocation_id`) took 16 us more.
CREATE OR REPLACE FUNCTION {schema}.task_invocation_candidates(data TEXT) RETURNS TEXT[]
LANGUAGE plpgsql IMMUTABLE PARALLEL UNSAFE AS $$
DECLARE
    doc JSONB;
BEGIN
    doc := data::jsonb;
    RETURN ARRAY(SELECT jsonb_array_elements_text(
        jsonb_path_query_array(doc, 'lax $.metadata.adk_invocation_id ? (@.type() == "string")')
        || jsonb_path_query_array(doc, 'lax $.metadata.kagent_invocation_id ? (@.type() == "string")')
        || jsonb_path_query_array(doc, 'lax $.history.metadata.adk_invocation_id ? (@.type() == "string")')
        || jsonb_path_query_array(doc, 'lax $.history.metadata.kagent_invocation_id ? (@.type() == "string")')
        || jsonb_path_query_array(doc, 'lax $.status.message.metadata.adk_invocation_id ? (@.type() == "string")')
        || jsonb_path_query_array(doc, 'lax $.status.message.metadata.kagent_invocation_id ? (@.type() == "string")')
        || jsonb_path_query_array(doc, 'lax $.artifacts.metadata.adk_invocation_id ? (@.type() == "string")')
        || jsonb_path_query_array(doc, 'lax $.artifacts.metadata.kagent_invocation_id ? (@.type() == "string")')));
EXCEPTION WHEN others THEN
    RETURN ARRAY['']::TEXT[];
END;
$$;
