-- hangar store, schema 5 (PostgreSQL): a one-shot turn's trees (S29). The same as ../sqlite/0005_git_trees.sql.

-- A turn that ran without the driver (one-shot, S29/S30) records the work tree's tree at its
-- start and end here, JSON: {"start": {"tree", "ms"} | {"skipped"}, "end": ..., "trusted": false}.
-- Turns run by the driver record their trees as events instead; this stays NULL for them.
ALTER TABLE turns ADD COLUMN git_trees JSONB;
