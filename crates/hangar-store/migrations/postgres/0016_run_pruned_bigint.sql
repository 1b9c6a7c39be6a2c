-- `runs.pruned_at` is a time in milliseconds: as INTEGER (migration 12) it could not hold one,
-- and pruning a run on PostgreSQL failed ("integer out of range").
ALTER TABLE runs ALTER COLUMN pruned_at TYPE BIGINT;
