-- The one event reader (event_messages) reads the OpenAI Agents SDK's events too (kagent-openai's
-- `conversation_items` rows), and says who wrote each message (author), since one such event can hold
-- the user's input and the agent's items alike. docs/frameworks.md, "Reading a conversation".

-- is_turn_input: whether an event opens an OpenAI Agents SDK turn: a `conversation_items` event whose
-- first item is the user's input (the runtime saves the turn's input as one event before any model step).
CREATE OR REPLACE FUNCTION {schema}.is_turn_input(doc JSONB)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_typeof(doc) = 'object' AND doc ->> 'type' = 'conversation_items'
                    AND jsonb_typeof(doc -> 'items') = 'array' AND doc -> 'items' -> 0 ->> 'role' = 'user', false)
$$;

-- event_messages: the messages one event holds, in order, one row per text, function call or function
-- response (PARALLEL SAFE: it catches nothing, so a function call's arguments stay the JSON text the model
-- wrote, which the transcript decodes). An ADK event (Python snake_case, Go camelCase): its content parts, authored by the event's
-- author; thought parts are left out. An OpenAI Agents SDK `conversation_items` event: its items, a
-- message's text parts (a string content is one text), `function_call` (its arguments as written) and
-- `function_call_output` (named after the call of the same call_id in the event, if there);
-- authored `user` for the user's items, `assistant` for the rest; system and developer messages,
-- reasoning and other items are left out. Never raises: anything else gives no rows.
DROP FUNCTION IF EXISTS {schema}.event_messages(JSONB);
CREATE FUNCTION {schema}.event_messages(doc JSONB)
RETURNS TABLE (ord BIGINT, kind TEXT, text TEXT, tool_name TEXT, tool_call_id TEXT, args JSONB, response JSONB,
               author TEXT)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p.ord,
           CASE WHEN fc IS NOT NULL THEN 'tool_call' WHEN fr IS NOT NULL THEN 'tool_result' ELSE 'text' END,
           CASE WHEN fc IS NULL AND fr IS NULL THEN p.part ->> 'text' END,
           coalesce(fc, fr) ->> 'name',
           coalesce(fc, fr) ->> 'id',
           fc -> 'args',
           fr -> 'response',
           doc ->> 'author'
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
    UNION ALL
    SELECT row_number() OVER (ORDER BY m.item_ord, m.part_ord), m.kind, m.text, m.tool_name, m.tool_call_id, m.args,
           m.response, m.author
    FROM (
        -- a message's text: its content as a string, or each text part of its content
        SELECT i.ord AS item_ord, c.ord AS part_ord, 'text' AS kind,
               coalesce(cp.part ->> 'text', cp.part ->> 'refusal') AS text, NULL::text AS tool_name,
               NULL::text AS tool_call_id, NULL::jsonb AS args, NULL::jsonb AS response,
               CASE WHEN i.item ->> 'role' = 'user' THEN 'user' ELSE 'assistant' END AS author
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(doc -> 'items') = 'array' THEN doc -> 'items'
                                       ELSE '[]'::jsonb END) WITH ORDINALITY AS i(item, ord)
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(i.item -> 'content') = 'string' THEN jsonb_build_array(i.item -> 'content')
                 WHEN jsonb_typeof(i.item -> 'content') = 'array' THEN i.item -> 'content'
                 ELSE '[]'::jsonb END) WITH ORDINALITY AS c(part, ord)
        CROSS JOIN LATERAL (
            SELECT CASE WHEN jsonb_typeof(c.part) = 'string' THEN jsonb_build_object('text', c.part)
                        ELSE c.part END AS part
        ) AS cp
        WHERE jsonb_typeof(i.item) = 'object' AND i.item ->> 'role' IN ('user', 'assistant')
          AND coalesce(i.item ->> 'type', 'message') = 'message'
          AND jsonb_typeof(cp.part) = 'object'
          AND (jsonb_typeof(cp.part -> 'text') = 'string' OR jsonb_typeof(cp.part -> 'refusal') = 'string')
        UNION ALL
        -- a function call and a function call's output
        SELECT i.ord, 0,
               CASE WHEN i.item ->> 'type' = 'function_call' THEN 'tool_call' ELSE 'tool_result' END,
               NULL,
               CASE WHEN i.item ->> 'type' = 'function_call' THEN i.item ->> 'name'
                    ELSE (SELECT o ->> 'name' FROM jsonb_array_elements(doc -> 'items') AS o
                          WHERE jsonb_typeof(o) = 'object' AND o ->> 'type' = 'function_call'
                            AND o ->> 'call_id' = i.item ->> 'call_id'
                          LIMIT 1) END,
               i.item ->> 'call_id',
               CASE WHEN i.item ->> 'type' = 'function_call' THEN i.item -> 'arguments' END,
               CASE WHEN i.item ->> 'type' = 'function_call_output' THEN i.item -> 'output' END,
               'assistant'
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(doc -> 'items') = 'array' THEN doc -> 'items'
                                       ELSE '[]'::jsonb END) WITH ORDINALITY AS i(item, ord)
        WHERE jsonb_typeof(i.item) = 'object' AND i.item ->> 'type' IN ('function_call', 'function_call_output')
    ) AS m
    WHERE jsonb_typeof(doc) = 'object' AND doc ->> 'type' = 'conversation_items'
$$;
