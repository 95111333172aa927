-- Named queries of kagent-fork's store, service/kagent/store/database.py (conventions: fragments.sql).

-- name: kagent_tables
-- Which of the tables named ($1) exist, with their columns (start-up check): those kagent-fork works on, the
-- migration ledgers and the tables only kagent 1.x creates (service/kagent/migrate.py says which).
SELECT table_name, column_name
FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = ANY($1::text[]);

-- name: schema_migrations
-- kagent's migration state (golang-migrate's ledger, kagent before 1.0): one row, dirty = a half-applied migration.
SELECT version, dirty FROM schema_migrations LIMIT 1;

-- name: goose_version_schema_migrations
-- The newest migration a goose ledger named schema_migrations records as applied (kagent 1.x migrates with goose).
SELECT max(version_id) FROM schema_migrations WHERE is_applied;

-- name: goose_version_goose_db_version
-- The same from a goose ledger under goose's own default name.
SELECT max(version_id) FROM goose_db_version WHERE is_applied;

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
