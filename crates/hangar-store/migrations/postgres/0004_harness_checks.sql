-- The conformance suite's result per harness CLI version (hangar-conformance --record): which
-- capabilities held, and whether the suite passed. The control plane refuses a version whose
-- suite has not passed unless the turn says otherwise (recorded in its manifest).
CREATE TABLE harness_checks (
    harness TEXT NOT NULL CHECK (harness IN ('claude', 'codex')),
    version TEXT NOT NULL,
    suite BIGINT NOT NULL,
    passed BIGINT NOT NULL CHECK (passed IN (0, 1)),
    capabilities JSONB NOT NULL,
    person TEXT NOT NULL,
    ran_at BIGINT NOT NULL,
    PRIMARY KEY (harness, version)
);
