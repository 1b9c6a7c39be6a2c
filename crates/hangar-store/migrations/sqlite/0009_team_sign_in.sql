-- Sign-in flows in progress (issue 20), kept here so the issuer's callback or a device poll may
-- land on any replica, or after a restart. `id` is the SHA-256 of the flow id the client holds
-- (the database alone cannot finish a flow); the flow's secrets (PKCE verifier, nonce, device
-- code) are sealed with the vault key, bound to the row. A flow is taken once: finishing it
-- deletes it, and a second finish finds nothing.
CREATE TABLE oidc_flows (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('web', 'device')),
    sealed BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX oidc_flows_by_expiry ON oidc_flows (expires_at);

-- People may be viewers (read the team's work, act on nothing), and emails are stored
-- lower-cased (ASCII letters: what SQLite's lower() does, and what hangar does to every email
-- it is given), so `Alice@Example.com` from an issuer is alice. Two people who differ only by
-- case are refused before this runs (migrate.rs). SQLite cannot change a CHECK: the table is
-- rebuilt (nothing refers to it).
CREATE TABLE people_v9 (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    created_at INTEGER NOT NULL,
    removed_at INTEGER
);
INSERT INTO people_v9 (id, email, role, created_at, removed_at)
SELECT id, lower(email), role, created_at, removed_at FROM people;
DROP TABLE people;
ALTER TABLE people_v9 RENAME TO people;
UPDATE api_tokens SET person = lower(person);
UPDATE sandboxes SET person = lower(person);
UPDATE forks SET person = lower(person);
UPDATE harness_checks SET person = lower(person);
-- A person's secret is sealed bound to its owner as written then: that spelling is kept to
-- open it (a new value is sealed with the lower-cased owner and clears it).
ALTER TABLE owned_secrets ADD COLUMN sealed_owner TEXT;
UPDATE owned_secrets SET sealed_owner = owner, owner = lower(owner)
WHERE owner_kind = 'person' AND owner <> lower(owner);
