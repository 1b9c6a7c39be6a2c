-- People and roles: a token speaks for a person of this table, and only while they are in it
-- (removed_at unset). Existing tokens' holders become members (the local user, `…@localhost`,
-- an admin: it already holds the store's key), so no token of an upgraded server stops working.
CREATE TABLE people (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL CHECK (role IN ('admin', 'member')),
    created_at BIGINT NOT NULL,
    removed_at BIGINT
);
INSERT INTO people (id, email, role, created_at)
SELECT 'person-' || substr(md5(random()::text || person), 1, 24), person,
       CASE WHEN person LIKE '%@localhost' THEN 'admin' ELSE 'member' END, MIN(created_at)
FROM api_tokens GROUP BY person;

-- Tokens with a life: a name, an expiry and when they were last used (written at most once a
-- minute). Tokens made before expiry existed get 90 days from the upgrade.
ALTER TABLE api_tokens ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT;
ALTER TABLE api_tokens ADD COLUMN last_used_at BIGINT;
UPDATE api_tokens SET expires_at = (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT + 7776000000;
