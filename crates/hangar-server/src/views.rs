//! The store's and the control plane's records as the API's types (`hangar_api`): every answer
//! is built from these, so a field the API names is a field of a type, checked by the compiler.
//! The closed sets of words (turn and run states, decisions, providers, ...) are hangar-protocol's
//! on both sides, so they pass through as they are.

use hangar_api as api;
use hangar_store::{Approval, AuditRecord, Event, Run, Session, Turn};
use serde_json::Value;

use crate::error::ApiError;

pub fn session(s: &Session) -> api::Session {
    // The session keeps the options it was started with, as the control plane wrote them.
    let options = serde_json::from_value::<api::TurnOptions>(s.options.clone()).unwrap_or_default();
    api::Session {
        id: s.id.clone(),
        sandbox_id: s.sandbox_id.clone(),
        harness: s.harness,
        policy: s.policy,
        harness_session_id: s.harness_session_id.clone(),
        options,
        turn_count: s.turn_count,
        created_at: s.created_at,
    }
}

pub fn usage(u: hangar_store::Usage) -> api::Usage {
    api::Usage {
        input_tokens: u.input,
        output_tokens: u.output,
        cached_input_tokens: u.cached,
    }
}

/// Pending permission requests per live run and per session
/// ([`hangar_store::Store::waiting_counts`]).
#[derive(Default)]
pub struct Waiting {
    by_run: std::collections::HashMap<String, i64>,
    by_session: std::collections::HashMap<String, i64>,
}

impl Waiting {
    /// None waiting (a turn just made).
    pub fn new() -> Waiting {
        Waiting::default()
    }

    /// Every live run's, read now.
    pub async fn read(store: &hangar_store::Store) -> Result<Waiting, ApiError> {
        let mut w = Waiting::new();
        for (session, run, n) in store.waiting_counts().await? {
            w.by_run.insert(run, n);
            *w.by_session.entry(session).or_default() += n;
        }
        Ok(w)
    }

    /// A session's.
    pub fn session(&self, id: &str) -> i64 {
        self.by_session.get(id).copied().unwrap_or(0)
    }
}

/// How a turn is doing or how it ended, and that in a line (issue 21: the words the CLI, the
/// board and the API share). An ended turn is `interrupted` (status 130), else `verify_failed`
/// (its check failed its last round), else `blocked` (it ended after a denied call it did nothing
/// more after), else `succeeded` (status 0) or `failed`.
pub fn phase(t: &Turn, waiting: i64) -> (api::TurnPhase, Option<String>) {
    use api::TurnPhase as P;
    match t.state {
        api::TurnState::Queued => (P::Queued, None),
        api::TurnState::Refused => (P::Refused, t.reason.clone()),
        api::TurnState::Running if waiting > 0 => (
            P::Waiting,
            Some(match waiting {
                1 => "a permission request waits for an answer".to_owned(),
                n => format!("{n} permission requests wait for an answer"),
            }),
        ),
        api::TurnState::Running => (P::Running, None),
        api::TurnState::Ended => match t.status {
            Some(130) => (
                P::Interrupted,
                Some(
                    t.interrupted
                        .clone()
                        .unwrap_or_else(|| "interrupted by a person".into()),
                ),
            ),
            _ if t.verify_state.as_deref() == Some("failed") => (
                P::VerifyFailed,
                Some("the job's check still failed after its last round".into()),
            ),
            _ if t.blocked.is_some() => (P::Blocked, t.blocked.clone()),
            // An interrupt whose queued message then ran to the end: what it stopped.
            Some(0) => (P::Succeeded, t.interrupted.clone()),
            status => (
                P::Failed,
                Some(match (status, t.reason.as_deref()) {
                    (Some(s), Some(r)) => format!("exit status {s} ({})", r.replace('_', " ")),
                    (Some(s), None) => format!("exit status {s}"),
                    (None, Some(r)) => r.replace('_', " "),
                    (None, None) => "ended without a status".into(),
                }),
            ),
        },
    }
}

pub fn turn_summary(t: &Turn, waiting: &Waiting) -> api::TurnSummary {
    let n = match (t.state, &t.run_id) {
        (api::TurnState::Running, Some(run)) => waiting.by_run.get(run).copied().unwrap_or(0),
        _ => 0,
    };
    let (phase, phase_detail) = phase(t, n);
    api::TurnSummary {
        id: t.id.clone(),
        session_id: t.session_id.clone(),
        index: t.index,
        run_id: t.run_id.clone(),
        state: t.state,
        phase,
        phase_detail,
        waiting: n,
        status: t.status,
        reason: t.reason.clone(),
        prompt: t.prompt.clone(),
        verify_state: t.verify_state.clone(),
        usage: usage(t.usage),
        cost_usd: t.cost_usd,
        created_at: t.created_at,
        started_at: t.started_at,
        ended_at: t.ended_at,
        git_trees: t.git_trees.clone(),
    }
}

pub fn turn(t: &Turn, waiting: &Waiting) -> api::Turn {
    api::Turn {
        summary: turn_summary(t, waiting),
        manifest: t.manifest.clone(),
    }
}

pub fn run(r: &Run) -> api::Run {
    api::Run {
        id: r.id.clone(),
        turn_id: r.turn_id.clone(),
        state: r.state,
        log_cursor: r.log_cursor,
        driver_pid: r.driver_pid,
        has_key: r.has_key,
        created_at: r.created_at,
        ended_at: r.ended_at,
        log: r.watch_state.as_ref().and_then(|s| s.get("log")).cloned(),
    }
}

pub fn approval(a: &Approval) -> api::Approval {
    api::Approval {
        run_id: a.run_id.clone(),
        request_id: a.request_id.clone(),
        tool_name: a.tool_name.clone(),
        input: a.input.clone(),
        requested_at: a.requested_at,
        decision: a.decision,
        answered_by: a.answered_by.clone(),
        answered_at: a.answered_at,
    }
}

pub fn event(e: &Event) -> api::Event {
    api::Event {
        id: e.id,
        session_id: e.session_id.clone(),
        run_id: e.run_id.clone(),
        kind: e.kind.clone(),
        payload: e.payload.clone(),
        created_at: e.created_at,
    }
}

pub fn audit_record(r: &AuditRecord) -> api::AuditRecord {
    api::AuditRecord {
        seq: r.seq,
        at: r.at,
        actor: r.actor.clone(),
        action: r.action.clone(),
        detail: r.detail.clone(),
        hash: r.hash.clone(),
    }
}

pub fn sandbox_brief(sb: &hangar_store::Sandbox) -> api::SandboxBrief {
    api::SandboxBrief {
        id: sb.id.clone(),
        environment: sb.environment.clone(),
        kind: sb.kind.clone(),
        workdir: sb.workdir.clone(),
        person: sb.person.clone(),
    }
}

/// One of the API's closed words from the control plane's text; a word the API does not know
/// is our fault (the control plane and the API disagree), answered 500 saying which.
fn word<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, ApiError> {
    serde_json::from_value(Value::String(text.to_owned())).map_err(|_| {
        ApiError::Internal(format!(
            "the control plane gave {what} {text:?}, which the API does not know: update hangar-api"
        ))
    })
}

pub fn step(s: hangar_control::Step) -> Result<api::Step, ApiError> {
    Ok(api::Step {
        step: s.step as u64,
        tree: s.tree,
        tool_use_id: s.tool_use_id,
        phase: s.phase.map(|p| word("a step's phase", &p)).transpose()?,
        trusted: s.trusted,
        skipped: s.skipped,
        event_id: s.event_id,
    })
}

pub fn diff(d: hangar_control::TreeDiff) -> Result<api::Diff, ApiError> {
    Ok(api::Diff {
        from: step(d.from)?,
        to: step(d.to)?,
        files: d
            .files
            .into_iter()
            .map(|f| api::FileChange {
                path: f.path,
                added: f.added,
                deleted: f.deleted,
            })
            .collect(),
        patch: d.patch,
    })
}

pub fn sandbox(s: hangar_control::SandboxView) -> Result<api::Sandbox, ApiError> {
    Ok(api::Sandbox {
        provider: word("a sandbox's provider", &s.provider)?,
        state: word("a sandbox's state", &s.state)?,
        id: s.id,
        environment: s.environment,
        person: s.person,
        workspace: s.workspace.map(|w| w.to_string_lossy().into_owned()),
        host_workspace: s.host_workspace,
        capabilities: s.capabilities.map(|c| api::Capabilities {
            provider: c.provider,
            uid_split: c.uid_split,
            uid_split_off: c.uid_split_off,
            sudo: c.sudo,
            network_modes: c.network_modes,
            resource_limits: c.resource_limits,
        }),
        egress_warning: s.egress_warning,
        created_at: s.created_at,
        removed_at: s.removed_at,
    })
}

pub fn environment(e: hangar_control::EnvView) -> api::Environment {
    api::Environment {
        name: e.name,
        spec: api::EnvironmentSpec(e.spec),
        invalid: e.invalid,
        created_at: e.created_at,
        updated_at: e.updated_at,
    }
}
