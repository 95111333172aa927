-- The one way the service reads an ADK event's content (turn listing, transcript, branch summary,
-- compare, a dry run's token estimate), and where a fork's or a rewind's branch summary is kept.

-- event_messages: the messages one ADK event holds, one row per content part that is a text, a
-- function call or a function response, in part order. Python ADK writes snake_case with every key
-- present (absent values as JSON null), Go ADK camelCase; both are read. Thought parts are the
-- model's own reasoning, not conversation, and are left out. Never raises: a document that is not an
-- object, or parts that are not an array, give no rows.
CREATE OR REPLACE FUNCTION {schema}.event_messages(doc JSONB)
RETURNS TABLE (ord BIGINT, kind TEXT, text TEXT, tool_name TEXT, tool_call_id TEXT, args JSONB, response JSONB)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p.ord,
           CASE WHEN fc IS NOT NULL THEN 'tool_call' WHEN fr IS NOT NULL THEN 'tool_result' ELSE 'text' END,
           CASE WHEN fc IS NULL AND fr IS NULL THEN p.part ->> 'text' END,
           coalesce(fc, fr) ->> 'name',
           coalesce(fc, fr) ->> 'id',
           fc -> 'args',
           fr -> 'response'
    FROM jsonb_array_elements(
             CASE WHEN jsonb_typeof(doc -> 'content' -> 'parts') = 'array' THEN doc -> 'content' -> 'parts'
                  ELSE '[]'::jsonb END) WITH ORDINALITY AS p(part, ord)
    CROSS JOIN LATERAL (
        SELECT CASE WHEN jsonb_typeof(p.part -> 'function_call') = 'object' THEN p.part -> 'function_call'
                    WHEN jsonb_typeof(p.part -> 'functionCall') = 'object' THEN p.part -> 'functionCall' END AS fc,
               CASE WHEN jsonb_typeof(p.part -> 'function_response') = 'object' THEN p.part -> 'function_response'
                    WHEN jsonb_typeof(p.part -> 'functionResponse') = 'object' THEN p.part -> 'functionResponse'
               END AS fr
    ) AS call
    WHERE jsonb_typeof(p.part) = 'object'
      AND (fc IS NOT NULL OR fr IS NOT NULL
           OR (jsonb_typeof(p.part -> 'text') = 'string' AND p.part -> 'thought' IS DISTINCT FROM 'true'::jsonb))
$$;

-- event_tokens: one token count of an event's usage metadata, by its Python ADK name (usage_metadata,
-- snake_case) or its Go ADK name (usageMetadata, camelCase); 0 when absent or not a number. Numeric,
-- so that no stored value can overflow it.
CREATE OR REPLACE FUNCTION {schema}.event_tokens(doc JSONB, snake TEXT, camel TEXT)
RETURNS NUMERIC
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(doc -> 'usage_metadata' -> snake) = 'number'
                THEN trunc((doc -> 'usage_metadata' ->> snake)::numeric)
                WHEN jsonb_typeof(doc -> 'usageMetadata' -> camel) = 'number'
                THEN trunc((doc -> 'usageMetadata' ->> camel)::numeric)
                ELSE 0 END
$$;

-- cut_json: a tool's arguments or response as shown in a transcript: itself, or, when its JSON text is
-- longer than $2 characters, a string holding the first $2 of them and saying how long it was.
CREATE OR REPLACE FUNCTION {schema}.cut_json(value JSONB, max_chars INTEGER)
RETURNS JSONB
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN length(value::text) > max_chars
                THEN to_jsonb(left(value::text, max_chars) || ' ... [cut: ' || length(value::text) || ' characters in all]')
                ELSE value END
$$;

-- A fork's and a rewind's branch summary (deterministic_v1): what the operation left behind, computed
-- in its own transaction; NULL when it left nothing behind (and for records made before this column).
ALTER TABLE {schema}.fork ADD COLUMN IF NOT EXISTS summary JSONB;
ALTER TABLE {schema}.rewind ADD COLUMN IF NOT EXISTS summary JSONB;
CREATE INDEX IF NOT EXISTS rewind_session_created_idx ON {schema}.rewind (session_id, user_id, created_at DESC);
