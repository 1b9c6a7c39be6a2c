-- Sandboxes made by a provider (hangar-sandbox): the provider's handle (the sandbox as its
-- provider left it, JSON) and whether it still exists. Rows from before are plain folders
-- (kind 'local', no handle).
ALTER TABLE sandboxes ADD COLUMN handle JSONB;
ALTER TABLE sandboxes ADD COLUMN state TEXT NOT NULL DEFAULT 'live' CHECK (state IN ('live', 'removed'));
ALTER TABLE sandboxes ADD COLUMN removed_at BIGINT;
ALTER TABLE environments ADD COLUMN updated_at BIGINT;
