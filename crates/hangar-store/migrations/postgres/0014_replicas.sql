-- The `hangar serve` replicas sharing this database and the address each is reached at by the
-- others (`HANGAR_ADVERTISE_URL`): a command sent through a replica that does not hold the run's
-- lease is passed on to the one that does. A row is written at each start, never removed (a
-- replica's id is new at every start; a stopped one holds no lease, so its row is never used).
CREATE TABLE IF NOT EXISTS replicas (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    started_at BIGINT NOT NULL
);
