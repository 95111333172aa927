-- Named queries of kagent-fork's store, service/kagent/store/database.py (conventions: fragments.sql).

-- name: kagent_tables
-- Which of kagent's tables and columns exist (start-up check).
SELECT table_name, column_name
FROM information_schema.columns
WHERE table_schema = current_schema()
  AND table_name IN ('session', 'event', 'task', 'session_share', 'schema_migrations');

-- name: schema_migrations
-- kagent's migration state: one row, dirty = a half-applied migration.
SELECT version, dirty FROM schema_migrations LIMIT 1;

-- name: now
-- The transaction's timestamp, used for every row a fork or rewind stamps.
SELECT NOW();

-- name: export_snapshot
-- The fork transaction's snapshot, so that a second connection reads exactly what it sees.
SELECT pg_export_snapshot();

-- name: index_states
-- The service's indexes on kagent's tables, by name ($1): whether each is valid (an interrupted CREATE
-- INDEX CONCURRENTLY leaves one that is not), its comment (the version that built it), its size.
SELECT c.relname AS name, i.indisvalid AS valid, obj_description(c.oid, 'pg_class') AS comment,
       pg_relation_size(c.oid) AS bytes
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY($1::text[]);
