-- Secrets with an owner (issue 20): a person's or an environment's, each sealed in the vault
-- bound to its owner and name. The server's own secrets stay in `credentials`.
CREATE TABLE owned_secrets (
    owner_kind TEXT NOT NULL CHECK (owner_kind IN ('person', 'environment')),
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    sealed BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (owner_kind, owner, name)
);
