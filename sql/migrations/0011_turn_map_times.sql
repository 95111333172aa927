-- The turn map read by time (docs/turn-map.md): a rewind's cut, its summary and the hidden tasks' states,
-- and a boundary's opening run are index ranges and lookups instead of scans of every run and mapped task
-- of the session (each 4-13 ms at 100,000 events; together a third of what a rewind added to its UPDATEs).
-- Both tables are the service's own: nothing is added to kagent's writes.
CREATE INDEX IF NOT EXISTS turn_map_run_first ON {schema}.turn_map_run (session_id, user_id, first_at, first_id);
CREATE INDEX IF NOT EXISTS turn_map_task_created ON {schema}.turn_map_task (session_id, user_id, created_at);
-- The mapped tasks carrying a listing page's turns are found through this GIN index. With fastupdate on
-- (PostgreSQL's default), a map build's thousands of entries wait in the index's pending list, which every
-- search reads whole: 30 ms for a page's 100 turns at 10,000 mapped tasks, against 0.7 ms once they are in
-- the index proper. Off, each map write puts its entries in place (the map is written seldom, read often).
ALTER INDEX {schema}.turn_map_task_invocations SET (fastupdate = off);
SELECT gin_clean_pending_list('{schema}.turn_map_task_invocations'::regclass);
