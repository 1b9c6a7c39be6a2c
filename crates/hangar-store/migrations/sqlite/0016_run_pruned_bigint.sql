-- Nothing on SQLite: its INTEGER holds 64 bits (PostgreSQL's `runs.pruned_at` becomes BIGINT).
SELECT 1;
