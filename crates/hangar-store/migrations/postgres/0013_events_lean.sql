-- Events are written by the run watchers in bulk (issue 22). Each row's two foreign keys were
-- checked one row at a time (a lookup and a share lock of the session's and the run's rows
-- per event: half of an insert's cost on the ingest bench), and jsonb parsed every payload
-- into its binary form though no query looks inside one. The watcher takes the session from
-- the run's row in the same transaction, `append_event` checks both exist, and sessions and
-- runs are never deleted: the keys held nothing the code does not. json keeps the text as
-- written (and is read back as it was stored).
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_session_id_fkey;
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_run_id_fkey;
ALTER TABLE events ALTER COLUMN payload TYPE json USING payload::json;
