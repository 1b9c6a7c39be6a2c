-- Per-run leases, for replicas sharing one database (PostgreSQL): the replica that holds a live
-- run's lease watches it and renews the lease while it does; once the lease has run out (the
-- replica died), another takes the run over. A single process on SQLite never writes them.
ALTER TABLE runs ADD COLUMN lease_holder TEXT;
ALTER TABLE runs ADD COLUMN lease_until INTEGER;
