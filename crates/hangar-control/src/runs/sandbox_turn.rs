//! A turn inside a sandbox (S1, S2, S17): the driver copied in for the turn, the run's control
//! folder where the sandbox sees it, and the run script started in a tmux session named after
//! the run, so `hangar sb attach` can watch it live.
//!
//! The control folder is made where every run's is (`<home>/runs/<run>.ctl`, so the mailbox,
//! the watcher and `hangar log` work as for any run), then moved under the sandbox's
//! `<host_dir>/ctl/`, which the sandbox sees at `ctl_inside`, and the old path becomes a link to
//! it. Under the uid split it belongs to hangar's user and the agent cannot enter it.
//!
//! In a local sandbox the run key does not go with it: it waits in the sandbox's folder on this
//! machine and the tmux window hands it to the driver in the driver's own `/dev/shm`
//! (`LocalProvider::start_tmux_handing`), so an agent without the uid split (the driver's own
//! user) never finds it. Before anything starts, the agent must be able to run the harness CLI
//! the driver will start, else the turn is refused saying which path and why.
//!
//! The tmux window runs the run script: the driver in the background, its stderr kept in the
//! control folder, and the run log followed on the terminal until the driver ends, which ends the
//! window and the session. Whether the session is still there is how the watcher tells that the
//! driver is alive (its pid is in the sandbox's namespace, not ours).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use hangar_protocol::env::harness_env_names;
use hangar_sandbox::{ExecRequest, Provider, Sandbox, Who};

use crate::error::ControlError;
use crate::launch::Tools;
use crate::runs::Runs;
use crate::sandboxes::with_provider;

/// The harness's variables a sandbox gets from the control plane's environment: the allow-list
/// without what names this machine's own paths and user (the sandbox has its own).
const HOST_ONLY: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    // A path on this machine: the sandbox gets its own copy, named by `--tower-ca-file`.
    hangar_protocol::env::HANGAR_CA_FILE,
];

/// The variables the run script starts with: never the control plane's credential variables
/// unless `HANGAR_SERVER_CREDENTIALS=allow` (the turn's own come in `--secrets-file`).
fn turn_env(tools: &Tools) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = harness_env_names()
        .filter(|n| !HOST_ONLY.contains(n))
        .filter(|n| crate::launch::keep_var(tools, n))
        .filter_map(|n| std::env::var(n).ok().map(|v| ((*n).to_owned(), v)))
        .collect();
    for (k, v) in &tools.env {
        if HOST_ONLY.contains(&k.as_str()) || !crate::launch::keep_var(tools, k) {
            continue;
        }
        env.retain(|(n, _)| n != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

/// Where a local sandbox's run key waits on this machine until the run's tmux window takes it
/// (`LocalProvider::start_tmux_handing`): in the sandbox's folder, which no sandbox sees.
fn handoff_key(sb: &Sandbox, run_id: &str) -> PathBuf {
    sb.host_dir.join(format!("{run_id}.key"))
}

/// Where the driver of a local sandbox finds the run key: its own `/dev/shm`.
const KEY_INSIDE: &str = "/dev/shm/hangar-run-key";

/// Single-quoted for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The run script: the driver with its argv, stderr kept, the run log on the terminal.
fn run_script(run_id: &str, ctl_inside: &Path, argv: &[String]) -> String {
    let ctl = sh_quote(&ctl_inside.display().to_string());
    let cmd: Vec<String> = argv.iter().map(|a| sh_quote(a)).collect();
    format!(
        "#!/bin/sh\n\
         # hangar's run script for run {run_id}: the driver, copied into the sandbox for this turn,\n\
         # with its stderr kept in the control folder; the run log is followed on this terminal\n\
         # (`hangar sb attach`) until the driver ends, which ends this tmux session.\n\
         ctl={ctl}\n\
         {} 2>>\"$ctl/driver.stderr\" </dev/null &\n\
         driver=$!\n\
         echo \"hangar: run {run_id}, driver pid $driver\"\n\
         tail -n +1 -F --pid=\"$driver\" \"$ctl/run.log\" 2>/dev/null\n\
         wait \"$driver\"\n\
         status=$?\n\
         echo \"hangar: the driver ended ($status)\"\n\
         exit $status\n",
        cmd.join(" ")
    )
}

impl Runs {
    /// Moves the run's control folder under the sandbox and links the old path to it; the folder
    /// as the sandbox sees it.
    pub(crate) async fn ctl_into_sandbox(
        &self,
        sb: &Sandbox,
        ctl: &Path,
    ) -> Result<PathBuf, ControlError> {
        let name = ctl
            .file_name()
            .ok_or_else(|| ControlError::Internal(format!("{}: no name", ctl.display())))?
            .to_owned();
        let dest = sb.ctl_host().join(&name);
        let inside = sb.inside_ctl(&dest).ok_or_else(|| {
            ControlError::Internal(format!("{} is not under the sandbox's ctl", dest.display()))
        })?;
        let (from, to) = (ctl.to_owned(), dest.clone());
        // A local sandbox's driver is handed the run key in its own namespace (see
        // `start_in_sandbox`): out of the control folder first, into the sandbox's folder on
        // this machine, which nothing inside sees.
        let key_out = (sb.env.provider == hangar_sandbox::ProviderKind::Local).then(|| {
            let run = name.to_string_lossy();
            (
                ctl.join("key"),
                handoff_key(sb, run.strip_suffix(".ctl").unwrap_or(&run)),
            )
        });
        if key_out.is_some() {
            self.sweep_handoff_keys(sb).await;
        }
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            if let Some((key, out)) = key_out {
                match std::fs::rename(key, out) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            std::fs::rename(&from, &to)?;
            std::os::unix::fs::symlink(&to, &from)
        })
        .await
        .map_err(|e| ControlError::Internal(e.to_string()))?
        .map_err(|e| {
            ControlError::Launch(format!(
                "cannot move the control folder {} into sandbox {} ({}): {e}",
                ctl.display(),
                sb.id,
                dest.display()
            ))
        })?;
        Ok(inside)
    }

    /// Copies the driver in, writes the run script and starts it in tmux session `run_id`.
    /// `args` is the driver's argv as the sandbox sees it.
    pub(crate) async fn start_in_sandbox(
        &self,
        sb: &Sandbox,
        run_id: &str,
        ctl_host: &Path,
        ctl_inside: &Path,
        args: &[OsString],
    ) -> Result<(), ControlError> {
        if !crate::sandboxes::is_remote(sb) {
            self.harness_runs_inside(sb, args).await?;
        }
        let driver = crate::sandboxes::driver_inside();
        with_provider!(self.sandboxes, sb.env.provider, |p| {
            p.copy_in(sb, &self.tools.driver, &driver, Who::Hangar, 0o755)
                .await
                .map_err(|e| ControlError::Launch(format!("cannot copy the driver in: {e}")))
        })?;
        if args.iter().any(|a| a == "--tower-url") {
            // The driver asks Tower through the hook executable beside it (the one HTTPS client;
            // hangar-driver's `tower.rs` says why).
            let bin = crate::tower::binary(&self.tools).map_err(ControlError::Invalid)?;
            let beside = crate::sandboxes::tower_client_inside();
            with_provider!(self.sandboxes, sb.env.provider, |p| {
                p.copy_in(sb, &bin, &beside, Who::Hangar, 0o755)
                    .await
                    .map_err(|e| {
                        ControlError::Launch(format!("cannot copy the Tower client in: {e}"))
                    })
            })?;
        }
        let local = sb.env.provider == hangar_sandbox::ProviderKind::Local;
        let mut argv: Vec<String> = std::iter::once(driver.display().to_string())
            .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect();
        if local {
            argv.extend(["--key-file".to_owned(), KEY_INSIDE.to_owned()]);
        }
        let script = run_script(run_id, ctl_inside, &argv);
        let path = ctl_host.join("run.sh");
        let text = script.into_bytes();
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o700)
                .open(&path)
                .and_then(|mut f| f.write_all(&text))
        })
        .await
        .map_err(|e| ControlError::Internal(e.to_string()))?
        .map_err(|e| ControlError::Launch(format!("cannot write the run script: {e}")))?;
        if crate::sandboxes::is_remote(sb) {
            // The pod does not see this machine's control folder (`remote.rs`).
            let script = ctl_host.join("run.sh");
            let dest = ctl_inside.join("run.sh");
            with_provider!(self.sandboxes, sb.env.provider, |p| {
                p.copy_in(sb, &script, &dest, Who::Hangar, 0o700)
                    .await
                    .map_err(|e| {
                        ControlError::Launch(format!("cannot copy the run script in: {e}"))
                    })
            })?;
        }
        let req = ExecRequest {
            argv: vec![
                "/bin/sh".into(),
                ctl_inside.join("run.sh").display().to_string(),
            ],
            env: turn_env(&self.tools),
            cwd: Some(sb.workspace.clone()),
            stdin: None,
        };
        let started = if local {
            self.sandboxes
                .providers
                .local
                .start_tmux_handing(
                    sb,
                    run_id,
                    Who::Hangar,
                    &req,
                    &handoff_key(sb, run_id),
                    Path::new(KEY_INSIDE),
                )
                .await
                .map_err(ControlError::from)
        } else {
            with_provider!(self.sandboxes, sb.env.provider, |p| {
                p.start_tmux(sb, run_id, Who::Hangar, &req)
                    .await
                    .map_err(ControlError::from)
            })
        };
        started
            .map_err(|e| ControlError::Launch(format!("cannot start the run's tmux session: {e}")))
    }

    /// Refuses the turn before it starts when the agent cannot run the harness CLI the driver
    /// would start (`--claude-bin`/`--codex-bin` in `args`), naming the path and saying why: a
    /// turn that starts anyway only ends with the harness missing and nothing reaching the model.
    async fn harness_runs_inside(
        &self,
        sb: &Sandbox,
        args: &[OsString],
    ) -> Result<(), ControlError> {
        let Some(bin) = args
            .windows(2)
            .find(|w| w[0] == "--claude-bin" || w[0] == "--codex-bin")
            .map(|w| w[1].to_string_lossy().into_owned())
        else {
            return Ok(());
        };
        // As the agent, who runs it; the nearest folder of its path the agent can see, if not.
        const SCRIPT: &str = r#"p=$1
if [ -f "$p" ] && [ -x "$p" ]; then exit 0; fi
if [ -e "$p" ]; then echo "it is there, but uid $(id -u) may not run it"; exit 1; fi
d=$(dirname -- "$p")
while [ "$d" != / ] && [ ! -d "$d" ]; do d=$(dirname -- "$d"); done
echo "uid $(id -u) does not find it there: $d is the last folder of its path it can see (the sandbox has its own, or one is closed to it)"
exit 1
"#;
        let req = ExecRequest {
            argv: vec![
                "sh".into(),
                "-c".into(),
                SCRIPT.into(),
                "sh".into(),
                bin.clone(),
            ],
            cwd: Some(PathBuf::from("/")),
            ..ExecRequest::default()
        };
        let out = with_provider!(self.sandboxes, sb.env.provider, |p| {
            p.exec(sb, Who::Agent, &req)
                .await
                .map_err(ControlError::from)
        })?;
        if out.success() {
            return Ok(());
        }
        let known = (sb.env.provider == hangar_sandbox::ProviderKind::Local)
            .then(|| self.sandboxes.providers.local.hidden(sb, Path::new(&bin)))
            .flatten();
        let why = known.unwrap_or_else(|| {
            let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if said.is_empty() {
                String::from_utf8_lossy(&out.stderr).trim().to_owned()
            } else {
                said
            }
        });
        Err(ControlError::Invalid(format!(
            "the harness CLI {bin} cannot be run by the agent in sandbox {}: {why}; the turn is refused",
            sb.id
        )))
    }

    /// Whether a sandboxed run's tmux session is still there (`None`: not a sandboxed run, or
    /// its sandbox cannot be asked).
    pub(crate) async fn sandbox_run_alive(&self, run_id: &str) -> Option<bool> {
        let row = self.store.sandbox_of_run(run_id).await.ok()?;
        let sb = crate::sandboxes::handle_of(&row).ok()??;
        if row.state != "live" {
            return Some(false);
        }
        with_provider!(self.sandboxes, sb.env.provider, |p| {
            p.tmux_alive(&sb, run_id).await.map_err(ControlError::from)
        })
        .ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn towers_host_is_read_from_its_url_and_matched_against_an_allowlist() {
        use crate::tower::{host_matches, url_host};
        for (url, host) in [
            ("http://127.0.0.1:7700", "127.0.0.1"),
            ("https://Tower.Example.com/api", "tower.example.com"),
            ("http://user@tower.internal:80/x?y", "tower.internal"),
            ("http://[::1]:9000", "::1"),
        ] {
            assert_eq!(url_host(url).as_deref(), Some(host), "{url}");
        }
        assert_eq!(url_host("ftp://x"), None);
        assert_eq!(url_host("http://"), None);
        assert!(host_matches("tower.example.com", "tower.example.com"));
        assert!(host_matches("*.example.com", "tower.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "evilexample.com"));
        assert!(!host_matches("example.com", "tower.example.com"));
    }

    #[test]
    fn e2bs_firewall_lets_tower_through_only_on_port_80_or_443() {
        use crate::tower::{egress_refusal, url_port};
        assert_eq!(url_port("https://tower.example.com/api"), Some(443));
        assert_eq!(url_port("http://tower.example.com"), Some(80));
        assert_eq!(url_port("http://u@tower.example.com:7700/x"), Some(7700));
        assert_eq!(url_port("http://[::1]:9000"), Some(9000));
        assert_eq!(url_port("http://[::1]"), Some(80));
        assert_eq!(url_port("ftp://x"), None);
        let env = |y: &str| hangar_sandbox::EnvSpec::from_yaml(y).unwrap();
        let e2b = env(
            "name: e\nprovider: e2b\negress: {allowlist: [tower.example.com], enforcement: e2b-firewall}\n",
        );
        let docker =
            env("name: d\nprovider: docker\nimage: i\negress: {allowlist: [tower.example.com]}\n");
        let tools = |url: &str| Tools {
            home: "/h".into(),
            driver: "/d".into(),
            claude: "/c".into(),
            codex: "/x".into(),
            env: vec![("HANGAR_GOVERNANCE_URL".into(), url.into())],
        };
        for ok in ["https://tower.example.com", "http://tower.example.com:80/"] {
            assert_eq!(egress_refusal(&tools(ok), &e2b), None, "{ok}");
        }
        let why = egress_refusal(&tools("https://tower.example.com:8443"), &e2b).unwrap();
        assert!(
            why.contains("port 8443") && why.contains("E2B's firewall"),
            "{why}"
        );
        // hangar's own proxy keeps any port.
        assert_eq!(
            egress_refusal(&tools("https://tower.example.com:8443"), &docker),
            None
        );
    }

    #[test]
    fn the_run_script_quotes_every_argument() {
        let s = run_script(
            "run-1",
            Path::new("/run/hangar/run-1.ctl"),
            &[
                "/var/lib/hangar/hangar-driver".into(),
                "it's".into(),
                "$HOME".into(),
            ],
        );
        assert!(
            s.contains(r"'/var/lib/hangar/hangar-driver' 'it'\''s' '$HOME' 2>>"),
            "{s}"
        );
        assert!(s.contains("ctl='/run/hangar/run-1.ctl'"));
    }

    #[test]
    fn host_paths_stay_out_of_the_sandbox() {
        let tools = Tools {
            home: "/h".into(),
            driver: "/d".into(),
            claude: "/c".into(),
            codex: "/x".into(),
            env: vec![
                ("HOME".into(), "/root".into()),
                ("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:1".into()),
                ("HANGAR_TREE_SLOW_MS".into(), "5".into()),
            ],
        };
        let env = turn_env(&tools);
        assert!(env.iter().all(|(k, _)| k != "HOME" && k != "PATH"));
        assert!(env.contains(&("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:1".into())));
        assert!(env.contains(&("HANGAR_TREE_SLOW_MS".into(), "5".into())));
    }
}

/// What installing the hook for a turn gave.
#[derive(Debug)]
pub(crate) struct HookInstalled {
    pub digest: String,
    pub url: String,
    pub key_inside: PathBuf,
    /// What was found in place of the hook hangar installed last time, if something else was.
    pub tampered: Option<String>,
}

/// SHA-256 of bytes, hex.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

impl Runs {
    /// Installs the Tower hook for a turn in `sb` (T16, T17): reads what is there first (a hook
    /// other than the one hangar installed last time is reported as tampered), writes hangar's
    /// hook again, checks its digest inside, and writes the run's key file. The last installed
    /// digest is kept in the sandbox's folder on this machine, out of the agent's reach.
    pub(crate) async fn install_hook(
        self: &std::sync::Arc<Self>,
        sb: &Sandbox,
        row: &hangar_store::Sandbox,
        run_id: &str,
        person: &str,
    ) -> Result<HookInstalled, ControlError> {
        let bin = crate::tower::binary(&self.tools).map_err(ControlError::Invalid)?;
        // What the hook shows Tower: the key, or the sandbox's passport (T11-T14).
        let key_inside = crate::tower::key_inside(run_id);
        let (url, bytes, keep) = self
            .governance
            .hook_credential(row, run_id, person, &key_inside)
            .await?;
        let inside = crate::tower::path_inside();
        let want = crate::launch::digest_of(&bin).map_err(|e| {
            ControlError::Internal(format!("the Tower hook {}: {e}", bin.display()))
        })?;
        let record = sb.host_dir.join("tower_hook.sha256");
        let last = tokio::fs::read_to_string(&record).await.ok();
        let found = with_provider!(self.sandboxes, sb.env.provider, |p| Ok::<_, ControlError>(
            p.read_file(sb, &inside).await.ok()
        ))?;
        let tampered = match (&last, &found) {
            (Some(last), Some(bytes)) => {
                let got = sha256_hex(bytes);
                (got != last.trim()).then(|| {
                    format!(
                        "the Tower hook in sandbox {} was changed since hangar installed it (SHA-256 {got}, installed {}); hangar installs it again",
                        sb.id,
                        last.trim()
                    )
                })
            }
            (Some(last), None) => Some(format!(
                "the Tower hook in sandbox {} was removed since hangar installed it (SHA-256 {}); hangar installs it again",
                sb.id,
                last.trim()
            )),
            _ => None,
        };
        with_provider!(self.sandboxes, sb.env.provider, |p| p
            .copy_in(sb, &bin, &inside, Who::Hangar, 0o755)
            .await
            .map_err(|e| ControlError::Launch(format!(
                "cannot install the Tower hook: {e}"
            ))))?;
        let now = with_provider!(self.sandboxes, sb.env.provider, |p| p
            .read_file(sb, &inside)
            .await
            .map_err(|e| ControlError::Launch(format!(
                "cannot read the Tower hook back: {e}"
            ))))?;
        let got = sha256_hex(&now);
        if got != want {
            return Err(ControlError::Refused(format!(
                "the Tower hook in sandbox {} is not the one hangar wrote (SHA-256 {got}, expected {want}); the turn is refused",
                sb.id
            )));
        }
        tokio::fs::write(&record, format!("{want}\n"))
            .await
            .map_err(|e| ControlError::Internal(format!("{}: {e}", record.display())))?;
        // The run's key file, written by hangar's user (T15).
        let tmp = sb.host_dir.join(format!(".{run_id}.tower-key"));
        let t = tmp.clone();
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&t)
                .and_then(|mut f| f.write_all(&bytes))
        })
        .await
        .map_err(|e| ControlError::Internal(e.to_string()))?
        .map_err(|e| ControlError::Internal(format!("{}: {e}", tmp.display())))?;
        let copied = with_provider!(self.sandboxes, sb.env.provider, |p| p
            .copy_in(sb, &tmp, &key_inside, Who::Hangar, 0o444)
            .await
            .map_err(|e| ControlError::Launch(format!("cannot write the run's Tower key: {e}"))));
        let _ = tokio::fs::remove_file(&tmp).await;
        copied?;
        if let Some(k) = keep {
            self.governance.keep_passport(k).await;
        }
        Ok(HookInstalled {
            digest: want,
            url,
            key_inside,
            tampered,
        })
    }

    /// Installs the run's rules file (`host`, on this machine) beside the Tower hook, where the
    /// hook, run as the agent, can read it ([`crate::tower::rules_inside`]); the path inside.
    pub(crate) async fn install_rules(
        &self,
        sb: &Sandbox,
        run_id: &str,
        host: &Path,
    ) -> Result<PathBuf, ControlError> {
        let inside = crate::tower::rules_inside(run_id);
        with_provider!(self.sandboxes, sb.env.provider, |p| p
            .copy_in(sb, host, &inside, Who::Hangar, 0o444)
            .await
            .map_err(|e| ControlError::Launch(format!(
                "cannot install the run's rules file beside the Tower hook: {e}"
            ))))?;
        Ok(inside)
    }

    /// For an `https://` Tower at `url`: copies the control plane's `HANGAR_CA_FILE` into the
    /// sandbox beside the hook ([`crate::tower::ca_inside`]), where the hook run as the agent
    /// and the driver's Tower client both read it, and names it to the driver
    /// (`--tower-ca-file`): the sandbox does not see this machine's path. Without
    /// `HANGAR_CA_FILE` nothing is copied and Tower's certificate must chain to the sandbox's own
    /// roots, else every call fails closed.
    pub(crate) async fn install_tower_ca(
        &self,
        sb: &Sandbox,
        run_id: &str,
        url: &str,
        args: &mut Vec<OsString>,
    ) -> Result<(), ControlError> {
        let Some(host) = crate::tower::ca_file(&self.tools, url) else {
            return Ok(());
        };
        // Read here first: an unreadable file refuses the turn, saying which, rather than
        // leaving every tool call of it to be refused by the hook.
        if let Err(e) = tokio::fs::read(&host).await {
            return Err(ControlError::Invalid(format!(
                "HANGAR_CA_FILE {} cannot be read ({e}), so Tower's certificate could not be checked in sandbox {}; the turn is refused. Give the PEM file of the CA that signed Tower's certificate",
                host.display(),
                sb.id
            )));
        }
        let inside = crate::tower::ca_inside(run_id);
        with_provider!(self.sandboxes, sb.env.provider, |p| p
            .copy_in(sb, &host, &inside, Who::Hangar, 0o444)
            .await
            .map_err(|e| ControlError::Launch(format!(
                "cannot copy Tower's CA certificates (HANGAR_CA_FILE) into sandbox {}: {e}",
                sb.id
            ))))?;
        args.extend(["--tower-ca-file".into(), inside.into_os_string()]);
        Ok(())
    }

    /// After a sandboxed run ends: its Tower key file and rules file go (T15), and the
    /// harness's conversation is kept (`fork/sandboxed.rs`).
    pub(crate) async fn sandbox_run_ended(&self, run_id: &str) {
        let Some(sb) = self.sandboxes.sandbox_of_run(run_id).await else {
            return;
        };
        // A key no window took (the session never started).
        let _ = tokio::fs::remove_file(handoff_key(&sb, run_id)).await;
        let key = crate::tower::key_inside(run_id);
        let rules = crate::tower::rules_inside(run_id);
        let ca = crate::tower::ca_inside(run_id);
        let req = ExecRequest::new([
            "rm",
            "-f",
            &key.display().to_string(),
            &rules.display().to_string(),
            &ca.display().to_string(),
        ]);
        let _ = with_provider!(self.sandboxes, sb.env.provider, |p| p
            .exec(&sb, Who::Hangar, &req)
            .await
            .map_err(ControlError::from));
        // The harness's conversation, for forks of the run once the sandbox is gone; bounded in
        // time, so that the turn always ends.
        let limit = std::time::Duration::from_secs(120);
        if tokio::time::timeout(limit, self.sandboxes.keep_conversation(run_id, &sb))
            .await
            .is_err()
        {
            tracing::warn!(run = %run_id, "the harness's conversation was not kept within 120 s");
        }
    }

    /// Removes run keys left in a local sandbox's folder by runs that ended (or are unknown)
    /// without their tmux window taking them: hangar stopped between handing the key over and
    /// starting the window. A live run's key stays (its window may be about to take it).
    pub(crate) async fn sweep_handoff_keys(&self, sb: &Sandbox) {
        let Ok(mut dir) = tokio::fs::read_dir(&sb.host_dir).await else {
            return;
        };
        while let Ok(Some(e)) = dir.next_entry().await {
            let name = e.file_name();
            let Some(run) = name.to_str().and_then(|n| n.strip_suffix(".key")) else {
                continue;
            };
            let live = match self.store.run(run).await {
                Ok(r) => r.state == hangar_store::RunState::Live,
                Err(hangar_store::StoreError::NotFound { .. }) => false,
                Err(_) => true,
            };
            if !live {
                let _ = tokio::fs::remove_file(e.path()).await;
            }
        }
    }
}

impl Runs {
    /// A warning on a sandboxed turn from the control plane itself, written into the run log
    /// before the driver starts (the driver appends after it), so the turn's events carry it.
    pub(crate) async fn warn_run(
        &self,
        real_ctl: &Path,
        message: &str,
    ) -> Result<(), ControlError> {
        let line = hangar_protocol::runlog::HangarLine::Warning {
            message: message.to_owned(),
        }
        .to_json()
            + "\n";
        // Sealed with the run's key, as the driver's own lines are (`logtrust.rs`).
        let name = real_ctl.file_name().unwrap_or_default().to_string_lossy();
        let run_id = name.strip_suffix(".ctl").unwrap_or(&name).to_owned();
        self.steps
            .append_own_line(&real_ctl.join("run.log"), &run_id, line)
            .await
            .map_err(|e| ControlError::Launch(format!("cannot write the run log: {e}")))
    }
}
