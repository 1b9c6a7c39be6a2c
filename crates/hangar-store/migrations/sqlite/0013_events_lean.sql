-- Events are written by the run watchers in bulk (issue 22). Each row's two foreign keys were
-- looked up one row at a time; the watcher takes the session from the run's row in the same
-- transaction, `append_event` checks both exist, and sessions and runs are never deleted: the
-- keys held nothing the code does not. SQLite drops a foreign key only by making the table
-- again: the rows keep their ids, and the id sequence goes on from where it was (an id is
-- never handed out twice, even one whose event was pruned).
CREATE TABLE events_new (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    run_id TEXT,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO events_new (id, session_id, run_id, kind, payload, created_at)
    SELECT id, session_id, run_id, kind, payload, created_at FROM events ORDER BY id;
DELETE FROM sqlite_sequence WHERE name = 'events_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'events_new', seq FROM sqlite_sequence WHERE name = 'events';
DROP TABLE events;
ALTER TABLE events_new RENAME TO events;
CREATE INDEX events_by_session ON events (session_id, id);
CREATE INDEX events_by_run ON events (run_id, id);
