-- Sign-in flows in progress (issue 20), kept here so the issuer's callback or a device poll may
-- land on any replica, or after a restart. `id` is the SHA-256 of the flow id the client holds
-- (the database alone cannot finish a flow); the flow's secrets (PKCE verifier, nonce, device
-- code) are sealed with the vault key, bound to the row. A flow is taken once: finishing it
-- deletes it, and a second finish finds nothing.
CREATE TABLE oidc_flows (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('web', 'device')),
    sealed BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX oidc_flows_by_expiry ON oidc_flows (expires_at);

-- People may be viewers (read the team's work, act on nothing), and emails are stored
-- lower-cased (ASCII letters only, as SQLite's lower() and hangar itself do: translate, not
-- the locale's lower()), so `Alice@Example.com` from an issuer is alice. Two people who differ
-- only by case are refused before this runs (migrate.rs).
ALTER TABLE people DROP CONSTRAINT people_role_check;
ALTER TABLE people ADD CONSTRAINT people_role_check
    CHECK (role IN ('admin', 'member', 'viewer'));
UPDATE people SET email = translate(email, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
UPDATE api_tokens SET person = translate(person, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
UPDATE sandboxes SET person = translate(person, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
UPDATE forks SET person = translate(person, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
UPDATE harness_checks SET person = translate(person, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
-- A person's secret is sealed bound to its owner as written then: that spelling is kept to
-- open it (a new value is sealed with the lower-cased owner and clears it).
ALTER TABLE owned_secrets ADD COLUMN sealed_owner TEXT;
UPDATE owned_secrets
SET sealed_owner = owner,
    owner = translate(owner, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
WHERE owner_kind = 'person'
  AND owner <> translate(owner, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
