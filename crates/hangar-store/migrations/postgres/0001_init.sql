-- hangar store, schema 1 (PostgreSQL). Timestamps are ms since the Unix epoch; JSON is jsonb.
-- The same schema as ../sqlite/0001_init.sql: change both together.

CREATE TABLE environments (
    name TEXT PRIMARY KEY,
    spec JSONB NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE sandboxes (
    id TEXT PRIMARY KEY,
    environment TEXT NOT NULL REFERENCES environments (name),
    kind TEXT NOT NULL,
    workdir TEXT NOT NULL,
    person TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
    harness TEXT NOT NULL CHECK (harness IN ('claude', 'codex')),
    policy TEXT NOT NULL CHECK (policy IN ('auto', 'ask', 'governed')),
    harness_session_id TEXT,
    -- How its turns run (model, codex config, verify, ...), JSON.
    options JSONB NOT NULL DEFAULT '{}',
    turn_count BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL
);
CREATE INDEX sessions_by_sandbox ON sessions (sandbox_id);

CREATE TABLE turns (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    idx BIGINT NOT NULL,
    run_id TEXT,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'ended', 'refused')),
    status BIGINT,
    reason TEXT,
    prompt TEXT NOT NULL,
    manifest JSONB,
    verify_state TEXT,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cached_tokens BIGINT NOT NULL DEFAULT 0,
    cost_usd DOUBLE PRECISION,
    created_at BIGINT NOT NULL,
    started_at BIGINT,
    ended_at BIGINT,
    UNIQUE (session_id, idx)
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    turn_id TEXT NOT NULL UNIQUE REFERENCES turns (id),
    ctl_path TEXT NOT NULL,
    run_key BYTEA,
    log_cursor BIGINT NOT NULL DEFAULT 0 CHECK (log_cursor >= 0),
    state TEXT NOT NULL CHECK (state IN ('live', 'ended')),
    driver_pid BIGINT,
    -- The run watcher's parser state (JSON), committed with the cursor it belongs to.
    watch_state JSONB,
    created_at BIGINT NOT NULL,
    ended_at BIGINT
);
CREATE INDEX runs_live ON runs (state);

CREATE TABLE commands (
    run_id TEXT NOT NULL REFERENCES runs (id),
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    body JSONB NOT NULL,
    sent_by TEXT NOT NULL,
    sent_at BIGINT NOT NULL,
    ack_status TEXT CHECK (ack_status IN ('done', 'refused', 'ended')),
    ack_reason TEXT,
    acked_at BIGINT,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE approvals (
    run_id TEXT NOT NULL REFERENCES runs (id),
    request_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    input JSONB NOT NULL,
    requested_at BIGINT NOT NULL,
    decision TEXT CHECK (decision IN ('allow', 'deny')),
    answered_by TEXT,
    answer_note TEXT,
    answered_at BIGINT,
    PRIMARY KEY (run_id, request_id)
);

CREATE TABLE events (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    run_id TEXT REFERENCES runs (id),
    kind TEXT NOT NULL,
    payload JSONB NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX events_by_session ON events (session_id, id);
CREATE INDEX events_by_run ON events (run_id, id);

CREATE TABLE audit_log (
    seq BIGINT PRIMARY KEY,
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);

-- The chain head: one row, locked by every append, so appends are serialized and a deleted
-- tail is detected.
CREATE TABLE audit_head (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash)
VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

CREATE TABLE credentials (
    name TEXT PRIMARY KEY,
    sealed BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The vault's key-check value: a constant sealed under the master key at first use.
CREATE TABLE vault_check (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    sealed BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    person TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX api_tokens_by_person ON api_tokens (person);

ALTER TABLE turns ADD CONSTRAINT turns_run_id_fkey FOREIGN KEY (run_id) REFERENCES runs (id);
