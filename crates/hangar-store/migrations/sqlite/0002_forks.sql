-- hangar store, schema 2 (SQLite): forks (S31). The same as ../postgres/0002_forks.sql.

-- A session made from a step of a run: its sandbox holds that step's tree, and its first turn's
-- conversation is the source's up to that step (or as near as the harness allows: `record`
-- says which).
CREATE TABLE forks (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id),
    run_id TEXT NOT NULL REFERENCES runs (id),
    step INTEGER NOT NULL CHECK (step >= 0),
    tree TEXT NOT NULL,
    -- Where the conversation was cut, whether exactly, the checks made, JSON.
    record TEXT NOT NULL,
    person TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX forks_by_run ON forks (run_id);
