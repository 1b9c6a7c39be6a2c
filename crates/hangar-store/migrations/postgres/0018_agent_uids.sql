-- Which sandbox holds which agent uid (a uid of its own per sandbox, so two sandboxes' agents
-- are never one user of the host: its process limits, its keyrings). Replicas that share no
-- home claim them here, where two can never claim the same one; a replica's home is a cache it
-- may lose, and with it a pool kept as files there (issue 24).
CREATE TABLE IF NOT EXISTS agent_uids (
    uid BIGINT PRIMARY KEY,
    sandbox TEXT NOT NULL,
    claimed_at BIGINT NOT NULL
);
