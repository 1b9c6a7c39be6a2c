-- Terminals a replica relays (`hangar sb attach` on an e2b sandbox): who opened each (the API
-- token's id: the only one that may use it), which PTY process of envd it is, and which replica
-- relays it until when (a lease renewed while it lives). A client whose replica stopped reaches
-- another one, which joins the same process once the lease has run out (issue 24).
CREATE TABLE IF NOT EXISTS attaches (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    person TEXT NOT NULL,
    sandbox TEXT NOT NULL,
    run TEXT NOT NULL,
    pid BIGINT NOT NULL,
    replica TEXT NOT NULL,
    lease_until BIGINT NOT NULL,
    opened_at BIGINT NOT NULL,
    ended_at BIGINT
);
