-- hangar store, schema 1 (SQLite). Timestamps are ms since the Unix epoch; JSON is TEXT.
-- The same schema as ../postgres/0001_init.sql: change both together.

CREATE TABLE environments (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE sandboxes (
    id TEXT PRIMARY KEY,
    environment TEXT NOT NULL REFERENCES environments (name),
    kind TEXT NOT NULL,
    workdir TEXT NOT NULL,
    person TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
    harness TEXT NOT NULL CHECK (harness IN ('claude', 'codex')),
    policy TEXT NOT NULL CHECK (policy IN ('auto', 'ask', 'governed')),
    harness_session_id TEXT,
    -- How its turns run (model, codex config, verify, ...), JSON.
    options TEXT NOT NULL DEFAULT '{}',
    turn_count INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);
CREATE INDEX sessions_by_sandbox ON sessions (sandbox_id);

CREATE TABLE turns (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    idx INTEGER NOT NULL,
    run_id TEXT REFERENCES runs (id),
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'ended', 'refused')),
    status INTEGER,
    reason TEXT,
    prompt TEXT NOT NULL,
    manifest TEXT,
    verify_state TEXT,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    ended_at INTEGER,
    UNIQUE (session_id, idx)
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    turn_id TEXT NOT NULL UNIQUE REFERENCES turns (id),
    ctl_path TEXT NOT NULL,
    run_key BLOB,
    log_cursor INTEGER NOT NULL DEFAULT 0 CHECK (log_cursor >= 0),
    state TEXT NOT NULL CHECK (state IN ('live', 'ended')),
    driver_pid INTEGER,
    -- The run watcher's parser state (JSON), committed with the cursor it belongs to.
    watch_state TEXT,
    created_at INTEGER NOT NULL,
    ended_at INTEGER
);
CREATE INDEX runs_live ON runs (state);

CREATE TABLE commands (
    run_id TEXT NOT NULL REFERENCES runs (id),
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    sent_by TEXT NOT NULL,
    sent_at INTEGER NOT NULL,
    ack_status TEXT CHECK (ack_status IN ('done', 'refused', 'ended')),
    ack_reason TEXT,
    acked_at INTEGER,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE approvals (
    run_id TEXT NOT NULL REFERENCES runs (id),
    request_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    input TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    decision TEXT CHECK (decision IN ('allow', 'deny')),
    answered_by TEXT,
    answer_note TEXT,
    answered_at INTEGER,
    PRIMARY KEY (run_id, request_id)
);

CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    run_id TEXT REFERENCES runs (id),
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX events_by_session ON events (session_id, id);
CREATE INDEX events_by_run ON events (run_id, id);

CREATE TABLE audit_log (
    seq INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);

-- The chain head: one row, locked by every append, so appends are serialized and a deleted
-- tail is detected.
CREATE TABLE audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash)
VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

CREATE TABLE credentials (
    name TEXT PRIMARY KEY,
    sealed BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- The vault's key-check value: a constant sealed under the master key at first use.
CREATE TABLE vault_check (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    sealed BLOB NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    person TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE INDEX api_tokens_by_person ON api_tokens (person);
