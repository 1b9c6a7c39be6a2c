//! One-shot turns (S29, S30): the harness runs once in its plain mode, with no driver.
//!
//! With `HANGAR_LIVE_TURNS=false` (the control plane's environment or [`Tools::env`]), or when
//! no driver can run (the driver executable is not there), a turn is one run of
//! `claude -p PROMPT --output-format stream-json --verbose` or `codex exec --json PROMPT`
//! (Codex always with `--disable plugins` and the session's own model provider settings), as
//! the sandbox's user: the agent's uid inside a provider's sandbox, hangar's own user in a
//! plain folder. Its stdout is the run log (both plain modes write the lines the driver's run
//! logs carry, S10), so the run watcher makes the same events of it; the control plane writes
//! the turn's end (`hangar.turn_end`) after the harness exits.
//!
//! Trees: the work tree is hashed (hangar-treehash, into `<ctl>/tree/` with the repository's
//! objects as alternates, then exported as `<ctl>/trees.pack`, which the control plane keeps)
//! before the harness starts and after it exits, and both are recorded on the turn record
//! (`git_trees`), always `trusted: false`: the control plane hashes what the agent could change
//! while it was hashed, with nobody between them. A start hash over the slow limit (2 s,
//! `HANGAR_TREE_SLOW_MS`) is recorded `skipped: "slow"` and the end is not hashed.
//!
//! Non-goals: steering (nothing reads the mailbox: a command to a one-shot turn is refused at
//! once, saying so, while this process runs it), approvals (policy `ask` runs with the harness's own defaults, which refuse what needs
//! a person; `governed` and the Tower hook are refused), trees after tool calls, and forks
//! into a one-shot turn (`--fork`).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hangar_protocol::env::{HARNESS_ENV_FIXED, harness_env_names};
use hangar_protocol::runlog::HangarLine;
use hangar_sandbox::{ExecRequest, Provider, Who};
use hangar_store::{Harness, Policy, Session};
use serde_json::{Value, json};

use crate::error::ControlError;
use crate::launch::{Tools, TurnOptions};
use crate::runs::{Runs, oneshot_secrets};
use crate::sandboxes::with_provider;

/// The variable that makes every turn one-shot when it is `false` (S30).
pub use hangar_protocol::env::HANGAR_LIVE_TURNS;

/// A start hash slower than this is the turn's only one (as the driver's `SLOW`).
const SLOW: Duration = Duration::from_secs(2);

/// Why the turn is one-shot, or `None` for a live turn with the driver.
pub(crate) fn reason(tools: &Tools) -> Option<String> {
    let var = crate::launch::setting(tools, HANGAR_LIVE_TURNS);
    if let Some(v) = var
        && matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "false" | "0" | "no" | "off"
        )
    {
        return Some(format!("{HANGAR_LIVE_TURNS}={v}"));
    }
    if !is_executable(&tools.driver) {
        return Some(format!(
            "no driver can run: {} is not an executable file (set HANGAR_DRIVER_BIN)",
            tools.driver.display()
        ));
    }
    None
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why a one-shot turn cannot run with this policy or governance, if it cannot.
pub(crate) fn refusal(policy: Policy, hooked: bool) -> Option<String> {
    if policy == Policy::Governed || hooked {
        return Some(
            "a one-shot turn (no driver) cannot ask Tower: policy governed and the Tower hook need the driver; set HANGAR_LIVE_TURNS=true (and a driver) or use policy ask or auto".into(),
        );
    }
    None
}

/// The harness's argv (program first) in its plain mode.
pub(crate) fn argv(
    tools: &Tools,
    harness: Harness,
    policy: Policy,
    options: &TurnOptions,
    resume: Option<&str>,
    prompt: &str,
) -> Vec<String> {
    match harness {
        Harness::Claude => {
            let mut a: Vec<String> = vec![
                tools.claude.display().to_string(),
                "-p".into(),
                prompt.into(),
                "--output-format".into(),
                "stream-json".into(),
                "--verbose".into(),
                // As the driver's turns: none of the user's, the repository's or the local
                // settings (hooks that answer `allow`, `env.ANTHROPIC_BASE_URL`, an
                // `apiKeyHelper`) and no MCP server but hangar's (none here).
                "--setting-sources".into(),
                String::new(),
                "--strict-mcp-config".into(),
            ];
            if policy == Policy::Auto {
                a.push("--dangerously-skip-permissions".into());
            }
            if let Some(m) = &options.model {
                a.extend(["--model".into(), m.clone()]);
            }
            if let Some(r) = resume {
                a.extend(["--resume".into(), r.into()]);
            }
            a
        }
        Harness::Codex => {
            let mut a: Vec<String> = vec![
                tools.codex.display().to_string(),
                "exec".into(),
                "--json".into(),
                // With plugins, Codex looks up outside hosts at start.
                "--disable".into(),
                "plugins".into(),
                "--skip-git-repo-check".into(),
                "--sandbox".into(),
                "danger-full-access".into(),
            ];
            for kv in &options.codex_config {
                a.extend(["-c".into(), kv.clone()]);
            }
            if let Some(m) = &options.model {
                a.extend(["--model".into(), m.clone()]);
            }
            if let Some(r) = resume {
                a.extend(["resume".into(), r.into()]);
            }
            a.push(prompt.into());
            a
        }
    }
}

/// The harness's environment: the allow-list from the control plane's environment and
/// [`Tools::env`] (never a `HANGAR_*` variable), the fixed quiet-mode variables, and
/// `IS_SANDBOX` under auto. `host` false leaves out what only makes sense on the host (`PATH`,
/// `HOME`, `USER`, `LOGNAME`, `TMPDIR`): a sandbox has its own.
fn harness_env(tools: &Tools, policy: Policy, host: bool) -> Vec<(String, String)> {
    const HOST_ONLY: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "TMPDIR"];
    let mut env: Vec<(String, String)> = Vec::new();
    for name in harness_env_names() {
        if (!host && HOST_ONLY.contains(&name)) || !crate::launch::keep_var(tools, name) {
            continue;
        }
        let v = tools
            .env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(name).ok());
        if let Some(v) = v {
            env.push(((*name).to_owned(), v));
        }
    }
    for (k, v) in HARNESS_ENV_FIXED {
        env.push(((*k).to_owned(), (*v).to_owned()));
    }
    if policy == Policy::Auto {
        env.push(("IS_SANDBOX".into(), "1".into()));
    }
    env
}

/// One hash of the work tree: `{"tree", "ms"}`, `{"tree", "ms", "skipped": "slow"}`, or
/// `{"error"}`.
fn hash_once(h: &mut Option<hangar_treehash::TreeHasher>, limit: Duration) -> (Value, bool) {
    let Some(hasher) = h.as_mut() else {
        return (json!({"error": "the work tree could not be hashed"}), false);
    };
    let t = Instant::now();
    match hasher.hash() {
        Ok(id) => {
            let ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
            if t.elapsed() > limit {
                (
                    json!({"tree": id.to_hex(), "ms": ms, "skipped": "slow"}),
                    false,
                )
            } else {
                (json!({"tree": id.to_hex(), "ms": ms}), true)
            }
        }
        Err(e) => (json!({"error": e.to_string()}), false),
    }
}

fn slow_limit(tools: &Tools) -> Duration {
    let name = hangar_protocol::env::HANGAR_TREE_SLOW_MS;
    crate::launch::setting(tools, name)
        .and_then(|v| v.parse().ok())
        .map_or(SLOW, Duration::from_millis)
}

/// The hasher of a one-shot turn: the work tree `workdir`, its objects in `<ctl>/tree/`.
fn hasher(workdir: &Path, ctl: &Path) -> Option<hangar_treehash::TreeHasher> {
    let layout = hangar_treehash::RepoLayout::discover(workdir);
    let alternates: Vec<PathBuf> = layout.objects_dir().into_iter().collect();
    let store_dir = hangar_mailbox::ctl::ControlDir::at(ctl.to_owned()).tree_store();
    let store = hangar_treehash::Store::open(&store_dir, &alternates).ok()?;
    let opts = hangar_treehash::Options {
        watch: false,
        ..hangar_treehash::Options::default()
    };
    hangar_treehash::TreeHasher::with_options(workdir, store, opts).ok()
}

/// The turn's objects as `<ctl>/trees.pack` (and `.idx`); the object store is removed.
fn finish(h: Option<hangar_treehash::TreeHasher>, ctl: &Path) {
    if let Some(h) = h {
        let store = h.into_store();
        let dir = hangar_mailbox::ctl::ControlDir::at(ctl.to_owned());
        if let Err(e) = store.export_pack(&dir.trees_pack()) {
            tracing::warn!(ctl = %ctl.display(), error = %e, "cannot write the one-shot turn's pack");
        }
        let _ = store.destroy();
    }
}

/// Appends hangar lines to the run log.
fn append(log: &Path, lines: &[HangarLine]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut text = String::new();
    for l in lines {
        text.push_str(&l.to_json());
        text.push('\n');
    }
    f.write_all(text.as_bytes())
}

/// Everything a one-shot turn needs once it is started.
pub(crate) struct OneShot {
    pub run_id: String,
    pub turn_id: String,
    /// The run's control folder on the host.
    pub ctl: PathBuf,
    /// The work tree on the host (hashed there).
    pub workdir: PathBuf,
    /// The harness's argv, program first.
    pub argv: Vec<String>,
    pub policy: Policy,
    /// Why it is one-shot.
    pub why: String,
    pub session_id: String,
    /// The turn's credentials (`turn_secrets::for_turn`), placed when it starts
    /// (`oneshot_secrets.rs`).
    pub secrets: Option<Value>,
    /// What the harness must not see when it runs here as hangar's user
    /// (`launch::hidden_from_agent`).
    pub hide: Vec<PathBuf>,
}

impl Runs {
    /// Starts a one-shot turn in the background (see the module's page). The driver's pid of the
    /// run is the control plane's own: the turn lives as long as this process does.
    pub(crate) async fn start_one_shot(
        self: &Arc<Self>,
        o: OneShot,
        session: &Session,
        sb: Option<hangar_sandbox::Sandbox>,
    ) -> Result<(), ControlError> {
        let ctl = hangar_mailbox::ctl::ControlDir::at(o.ctl.clone());
        // Nobody takes the run key from the control folder: it goes now.
        let _ = tokio::fs::remove_file(ctl.key()).await;
        let log = ctl.run_log();
        let warning = HangarLine::Warning {
            message: format!(
                "a one-shot turn ({}): the {} runs once in its plain mode with no driver, so it cannot be steered or interrupted and asks nobody before a tool runs; only its start and end trees are recorded (on the turn, untrusted)",
                o.why,
                session.harness.as_str()
            ),
        };
        let l = log.clone();
        tokio::task::spawn_blocking(move || append(&l, &[warning]))
            .await
            .map_err(|e| ControlError::Internal(e.to_string()))?
            .map_err(|e| ControlError::Launch(format!("cannot write the run log: {e}")))?;
        if let Ok(mut set) = self.one_shots.lock() {
            set.insert(o.run_id.clone());
        }
        let me = Arc::clone(self);
        let limit = slow_limit(&self.tools);
        let env_host = harness_env(&self.tools, o.policy, true);
        let env_inside = harness_env(&self.tools, o.policy, false);
        let codex = session.harness == Harness::Codex;
        tokio::spawn(async move {
            let (workdir, c) = (o.workdir.clone(), o.ctl.clone());
            let started = tokio::task::spawn_blocking(move || {
                let mut h = hasher(&workdir, &c);
                let (start, go_on) = hash_once(&mut h, limit);
                (h, start, go_on)
            })
            .await;
            let (h, start, go_on) = match started {
                Ok(x) => x,
                Err(e) => (None, json!({"error": e.to_string()}), false),
            };
            let placed = match (&o.secrets, &sb) {
                (None, _) => Ok(Default::default()),
                (Some(v), None) => oneshot_secrets::here(v, &o.run_id, &o.session_id, codex),
                (Some(v), Some(sb)) => {
                    me.place_one_shot_secrets(sb, v, &o.run_id, &o.session_id, codex)
                        .await
                }
            };
            let (status, message) = match placed {
                Err(m) => (1, Some(m)),
                Ok(placed) => {
                    let ran = match &sb {
                        None => run_here(&o, &with(env_host, &placed.env), &log).await,
                        Some(sb) => {
                            me.run_in_sandbox(sb, &o, with(env_inside, &placed.env), &log)
                                .await
                        }
                    };
                    me.remove_one_shot_secrets(sb.as_ref(), &placed).await;
                    ran
                }
            };
            let c = o.ctl.clone();
            let ended = tokio::task::spawn_blocking(move || {
                let mut h = h;
                let end = if go_on {
                    hash_once(&mut h, Duration::MAX).0
                } else {
                    json!({"skipped": "slow"})
                };
                finish(h, &c);
                end
            })
            .await
            .unwrap_or_else(|e| json!({"error": e.to_string()}));
            let trees = json!({
                "start": start,
                "end": ended,
                "trusted": false,
                "one_shot": true,
                "why": o.why,
            });
            if let Err(e) = me.store.set_turn_git_trees(&o.turn_id, &trees).await {
                tracing::warn!(run = %o.run_id, error = %e, "cannot record the one-shot turn's trees");
            }
            let mut lines = Vec::new();
            if let Some(m) = message {
                lines.push(HangarLine::Error { message: m });
            }
            lines.push(HangarLine::TurnEnd {
                status: if status == 0 { 0 } else { 1 },
                reason: "harness_exited".into(),
                handed_back: Vec::new(),
                verify: None,
                verify_rounds: None,
            });
            if let Ok(mut set) = me.one_shots.lock() {
                set.remove(&o.run_id);
            }
            let l = log.clone();
            match tokio::task::spawn_blocking(move || append(&l, &lines)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(run = %o.run_id, error = %e, "cannot end the one-shot turn's run log")
                }
                Err(e) => {
                    tracing::warn!(run = %o.run_id, error = %e, "cannot end the one-shot turn's run log")
                }
            }
        });
        Ok(())
    }

    /// Runs the harness as the sandbox's agent; its stdout becomes the run log when it exits.
    async fn run_in_sandbox(
        &self,
        sb: &hangar_sandbox::Sandbox,
        o: &OneShot,
        env: Vec<(String, String)>,
        log: &Path,
    ) -> (i32, Option<String>) {
        let mut argv = o.argv.clone();
        if sb.env.provider == hangar_sandbox::ProviderKind::Docker
            && let Some(p) = argv.first_mut()
            && let Ok(real) = Path::new(p.as_str()).canonicalize()
        {
            // The container sees the pinned CLI's real files (bound at the same path).
            *p = real.display().to_string();
        }
        let req = ExecRequest {
            argv,
            env,
            cwd: Some(sb.workspace.clone()),
            stdin: Some(Vec::new()),
        };
        let out = with_provider!(self.sandboxes, sb.env.provider, |p| p
            .exec(sb, Who::Agent, &req)
            .await
            .map_err(ControlError::from));
        match out {
            Ok(out) => {
                let (l, bytes) = (log.to_owned(), out.stdout);
                let wrote = tokio::task::spawn_blocking(move || {
                    std::fs::OpenOptions::new()
                        .append(true)
                        .open(&l)
                        .and_then(|mut f| f.write_all(&bytes))
                })
                .await;
                let _ = tokio::fs::write(o.ctl.join("harness.stderr"), &out.stderr).await;
                match wrote {
                    Ok(Ok(())) => (out.status, exit_message(out.status)),
                    Ok(Err(e)) => (1, Some(format!("cannot write the run log: {e}"))),
                    Err(e) => (1, Some(e.to_string())),
                }
            }
            Err(e) => (
                1,
                Some(format!("cannot run the harness in the sandbox: {e}")),
            ),
        }
    }
}

/// `env` with `over`'s variables set (replacing any of the same name).
fn with(mut env: Vec<(String, String)>, over: &[(String, String)]) -> Vec<(String, String)> {
    env.retain(|(k, _)| !over.iter().any(|(o, _)| o == k));
    env.extend(over.iter().cloned());
    env
}

fn exit_message(status: i32) -> Option<String> {
    (status != 0).then(|| format!("the harness exited with status {status}"))
}

/// Runs the harness here (a plain folder), as hangar's user, its stdout appended to the run log
/// as it comes, its stderr in `<ctl>/harness.stderr`.
async fn run_here(o: &OneShot, env: &[(String, String)], log: &Path) -> (i32, Option<String>) {
    let (argv, env, log, ctl, cwd, hide) = (
        o.argv.clone(),
        env.to_vec(),
        log.to_owned(),
        o.ctl.clone(),
        o.workdir.clone(),
        o.hide.clone(),
    );
    let r = tokio::task::spawn_blocking(move || -> std::io::Result<i32> {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let out = std::fs::OpenOptions::new().append(true).open(&log)?;
        let err = std::fs::File::create(ctl.join("harness.stderr"))?;
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("no harness"))?;
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        // As hangar's own user, out of sight of hangar's home (as the driver's `--hide`); fails
        // closed without bubblewrap. This thread waits for the harness, so bwrap's
        // `--die-with-parent` holds until it exits.
        let (program, args) = hangar_protocol::hide::wrap(&hide, &OsString::from(program), &args)
            .map_err(std::io::Error::other)?;
        let status = std::process::Command::new(program)
            .args(args)
            .current_dir(&cwd)
            .env_clear()
            .envs(env)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .status()?;
        Ok(status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
    })
    .await;
    match r {
        Ok(Ok(code)) => (code, exit_message(code)),
        Ok(Err(e)) => (1, Some(format!("cannot run the harness: {e}"))),
        Err(e) => (1, Some(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tools(env: &[(&str, &str)]) -> Tools {
        Tools {
            home: "/h".into(),
            driver: std::env::current_exe().unwrap(),
            claude: "/c/claude".into(),
            codex: "/x/codex".into(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn live_turns_false_or_no_driver_makes_a_turn_one_shot() {
        assert_eq!(reason(&tools(&[(HANGAR_LIVE_TURNS, "true")])), None);
        assert_eq!(
            reason(&tools(&[(HANGAR_LIVE_TURNS, "false")])).as_deref(),
            Some("HANGAR_LIVE_TURNS=false")
        );
        let mut t = tools(&[(HANGAR_LIVE_TURNS, "true")]);
        t.driver = "/nonexistent/hangar-driver".into();
        assert!(reason(&t).unwrap().contains("no driver can run"));
    }

    #[test]
    fn the_plain_modes_argv() {
        let t = tools(&[]);
        let opts = TurnOptions {
            codex_config: vec!["model_provider=\"mine\"".into()],
            ..TurnOptions::default()
        };
        assert_eq!(
            argv(&t, Harness::Claude, Policy::Auto, &opts, None, "do it"),
            [
                "/c/claude",
                "-p",
                "do it",
                "--output-format",
                "stream-json",
                "--verbose",
                "--setting-sources",
                "",
                "--strict-mcp-config",
                "--dangerously-skip-permissions"
            ]
        );
        let codex = argv(&t, Harness::Codex, Policy::Ask, &opts, Some("th-1"), "go");
        assert_eq!(
            &codex[..5],
            ["/x/codex", "exec", "--json", "--disable", "plugins"]
        );
        assert!(
            codex
                .windows(2)
                .any(|w| w == ["-c", "model_provider=\"mine\""])
        );
        assert_eq!(&codex[codex.len() - 3..], ["resume", "th-1", "go"]);
    }

    #[test]
    fn no_hangar_variable_reaches_the_harness() {
        let t = tools(&[
            ("HANGAR_TREE_SLOW_MS", "5"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:1"),
            ("HOME", "/root"),
        ]);
        let inside = harness_env(&t, Policy::Auto, false);
        assert!(inside.iter().all(|(k, _)| !k.starts_with("HANGAR_")));
        assert!(inside.iter().all(|(k, _)| k != "HOME" && k != "PATH"));
        assert!(inside.contains(&("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:1".into())));
        assert!(inside.contains(&("IS_SANDBOX".into(), "1".into())));
        let host = harness_env(&t, Policy::Ask, true);
        assert!(host.contains(&("HOME".into(), "/root".into())));
    }
}
