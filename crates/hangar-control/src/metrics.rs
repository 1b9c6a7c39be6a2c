//! What the control plane counts and times, through the `metrics` facade: every metric's name
//! is here, once, with what it means. `hangar serve` installs a Prometheus recorder and serves
//! the figures at `/metrics` (hangar-server's `metrics.rs`); where none is installed (tests,
//! an embedded server) each call is a no-op.

use std::time::Duration;

/// Runs this replica watches now (their lease held).
pub const LIVE_RUNS: &str = "hangar_live_runs";
/// Seconds from a run log's last write to its events being stored (the watcher's lag).
pub const INGEST_LAG: &str = "hangar_ingest_lag_seconds";
/// Seconds a permission request waited for a person's answer.
pub const APPROVAL_WAIT: &str = "hangar_approval_wait_seconds";
/// Seconds from a command's sending to the driver's ack (for an approval, the answer's latency
/// as the harness sees it), by `kind`.
pub const COMMAND_ACK: &str = "hangar_command_ack_seconds";
/// Commands sent to runs, by `kind` and `outcome` (`done`, `refused`, `ended`, `handed_back`,
/// `error`).
pub const COMMANDS: &str = "hangar_commands_total";
/// Runs this replica took over from a replica that stopped holding them.
pub const LEASE_TAKEOVERS: &str = "hangar_lease_takeovers_total";
/// 1 while this replica hears the events other replicas store (PostgreSQL's notices), else 0:
/// its live streams then read the store again each second instead.
pub const HEARS_REPLICAS: &str = "hangar_hears_replicas";
/// Sandboxes made, by `provider` and `outcome` (`ok`, `error`).
pub const SANDBOX_CREATES: &str = "hangar_sandbox_creates_total";
/// Seconds a provider took to make a sandbox, by `provider`.
pub const SANDBOX_CREATE_SECONDS: &str = "hangar_sandbox_create_seconds";

/// One more (or one fewer) run watched here.
pub(crate) fn live_runs(delta: f64) {
    metrics::gauge!(LIVE_RUNS).increment(delta);
}

pub(crate) fn ingest_lag(lag: Duration) {
    metrics::histogram!(INGEST_LAG).record(lag.as_secs_f64());
}

pub(crate) fn approval_wait(wait: Duration) {
    metrics::histogram!(APPROVAL_WAIT).record(wait.as_secs_f64());
}

pub(crate) fn command(kind: &'static str, outcome: &'static str, ack: Option<Duration>) {
    metrics::counter!(COMMANDS, "kind" => kind, "outcome" => outcome).increment(1);
    if let Some(d) = ack {
        metrics::histogram!(COMMAND_ACK, "kind" => kind).record(d.as_secs_f64());
    }
}

pub(crate) fn hears_replicas(yes: bool) {
    metrics::gauge!(HEARS_REPLICAS).set(if yes { 1.0 } else { 0.0 });
}

pub(crate) fn lease_takeover() {
    metrics::counter!(LEASE_TAKEOVERS).increment(1);
}

pub(crate) fn sandbox_create(provider: &'static str, ok: bool, took: Duration) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::counter!(SANDBOX_CREATES, "provider" => provider, "outcome" => outcome).increment(1);
    if ok {
        metrics::histogram!(SANDBOX_CREATE_SECONDS, "provider" => provider)
            .record(took.as_secs_f64());
    }
}
