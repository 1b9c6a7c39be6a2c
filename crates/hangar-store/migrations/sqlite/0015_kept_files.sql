-- What an ended run leaves (its tree pack and index, its run log, the log's seal key), kept in
-- the database in chunks so that any replica reads it (issue 24): a replica's
-- `$HANGAR_HOME/kept/<run>/` is then a cache it can lose. Written on PostgreSQL only (on SQLite
-- there is one process and its home).
CREATE TABLE IF NOT EXISTS kept_files (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    seq INTEGER NOT NULL,
    bytes BLOB NOT NULL,
    PRIMARY KEY (run_id, name, seq)
);
