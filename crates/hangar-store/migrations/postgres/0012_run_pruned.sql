-- When retention pruned the run (its log, trees, kept files and events), or NULL. A pruned
-- run's row, its turn, commands, approvals and audit records stay: who did what is kept.
ALTER TABLE runs ADD COLUMN pruned_at INTEGER;
