//! Sandbox providers on machines hangar does not run on: Kubernetes (a pod per sandbox, through
//! the API server with `kube`) and E2B (a microVM per sandbox, through its HTTP API). Both run
//! the agent and hangar's programs as one uid (no uid split), and say so in their
//! [`Capabilities`](hangar_sandbox::Capabilities), so governance refuses what needs the split.
//!
//! They are kept out of hangar-sandbox so that what links it (the fuzz targets, the local and
//! docker providers' users) does not build a Kubernetes client and TLS.
//!
//! No Kubernetes API server or E2B account is reachable from hangar's machines: both providers
//! are tested against `hangar-fakecloud`, fakes of the few endpoints they call on 127.0.0.1 whose
//! pods and sandboxes are containers of the local dockerd (its crate docs say what that does and
//! does not verify).

use std::path::PathBuf;

pub(crate) use hangar_sandbox::failed;
use hangar_sandbox::{
    CreateRequest, ExecRequest, Output, Sandbox, SandboxError, Who, copy, layout,
};

pub mod e2b;
pub mod kubernetes;

pub use e2b::E2bProvider;
pub use kubernetes::KubernetesProvider;

/// The tmux server's socket inside a pod or an E2B sandbox (root's; both providers use it).
pub use hangar_sandbox::layout::TMUX_SOCKET;

/// A provider whose commands all go through its own API as one argv (a pod's exec, envd's
/// process call): exec, tmux and the check for a tmux session are built on that alike
/// ([`exec_in`], [`start_tmux_in`], [`tmux_alive_in`]).
pub(crate) trait RunsArgv: Sync {
    /// Runs `argv` to its end in `sb`, with `stdin`.
    fn run_argv(
        &self,
        sb: &Sandbox,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
    ) -> impl std::future::Future<Output = Result<Output, SandboxError>> + Send;
}

/// `req`'s argv as a remote exec API runs it for `who` ([`shell_wrap`]: hangar's minimal
/// environment, the checked working folder).
pub(crate) fn wrapped_argv(who: Who, req: &ExecRequest) -> Result<Vec<String>, SandboxError> {
    let cwd = layout::checked_cwd(req)?;
    let env = layout::base_env(who, None, req);
    Ok(shell_wrap(&env, &cwd, &req.argv))
}

/// [`hangar_sandbox::Provider::exec`] for a [`RunsArgv`] provider.
pub(crate) async fn exec_in<P: RunsArgv>(
    p: &P,
    sb: &Sandbox,
    who: Who,
    req: &ExecRequest,
) -> Result<Output, SandboxError> {
    p.run_argv(sb, wrapped_argv(who, req)?, req.stdin.clone())
        .await
}

/// [`hangar_sandbox::Provider::start_tmux`] for a [`RunsArgv`] provider: tmux runs inside, as
/// the container's own user (the agent's: these sandboxes have no uid split).
pub(crate) async fn start_tmux_in<P: RunsArgv>(
    p: &P,
    sb: &Sandbox,
    session: &str,
    who: Who,
    req: &ExecRequest,
) -> Result<(), SandboxError> {
    layout::check_session(session)?;
    let cwd = layout::checked_cwd(req)?;
    let env = layout::base_env(who, None, req)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let argv =
        layout::tmux_new_session_argv(TMUX_SOCKET, session, &cwd, env, Vec::new(), &req.argv);
    let out = p.run_argv(sb, shell_wrap(&[], "/", &argv), None).await?;
    layout::tmux_started(sb, session, &out)
}

/// [`hangar_sandbox::Provider::tmux_alive`] for a [`RunsArgv`] provider.
pub(crate) async fn tmux_alive_in<P: RunsArgv>(
    p: &P,
    sb: &Sandbox,
    session: &str,
) -> Result<bool, SandboxError> {
    let argv = layout::tmux_has_session_argv(TMUX_SOCKET, session)?;
    let out = p.run_argv(sb, shell_wrap(&[], "/", &argv), None).await?;
    Ok(out.success())
}

/// `argv` run as `env -i VARS sh -c 'cd DIR && exec "$@"'`: remote exec APIs start commands in
/// the container's own environment and folder, so hangar's minimal environment (PATH and LANG
/// unless `env` has them) and the working folder are set here.
pub(crate) fn shell_wrap(env: &[(String, String)], cwd: &str, argv: &[String]) -> Vec<String> {
    let mut out = vec!["env".to_owned(), "-i".to_owned()];
    for (k, v) in [("PATH", layout::PATH), ("LANG", "C.UTF-8")] {
        if !env.iter().any(|(ek, _)| ek == k) {
            out.push(format!("{k}={v}"));
        }
    }
    out.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    out.extend(
        [
            "sh",
            "-c",
            "cd -- \"$0\" || exit 126; unset OLDPWD; exec \"$@\"",
            cwd,
        ]
        .map(str::to_owned),
    );
    out.extend(argv.iter().cloned());
    out
}

/// The folder on the host every sandbox has (`<home>/sandboxes/<id>`, 0700) with its `ctl/`.
pub(crate) fn make_host_dir(req: &CreateRequest) -> Result<PathBuf, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let parent = req.home.join("sandboxes");
    std::fs::create_dir_all(&parent).map_err(|e| failed(parent.display(), e))?;
    let host_dir = layout::host_dir(&req.home, &req.id);
    std::fs::create_dir(&host_dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            SandboxError::Failed(format!(
                "sandbox {} exists already ({})",
                req.id,
                host_dir.display()
            ))
        } else {
            failed(host_dir.display(), e)
        }
    })?;
    let ctl = host_dir.join("ctl");
    let made = std::fs::set_permissions(&host_dir, std::fs::Permissions::from_mode(0o700))
        .and_then(|()| std::fs::create_dir(&ctl))
        .and_then(|()| std::fs::set_permissions(&ctl, std::fs::Permissions::from_mode(0o700)));
    if let Err(e) = made {
        let _ = copy::remove_tree(&host_dir);
        return Err(failed(host_dir.display(), e));
    }
    Ok(host_dir)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_wrapper_sets_the_environment_and_folder() {
        let argv = shell_wrap(
            &[("HOME".into(), "/home/agent".into())],
            "/workspace",
            &["echo".into(), "a b".into()],
        );
        assert_eq!(argv[..2], ["env", "-i"]);
        assert!(argv.contains(&"HOME=/home/agent".to_owned()));
        assert!(argv.iter().any(|a| a.starts_with("PATH=")));
        assert_eq!(argv[argv.len() - 3..], ["/workspace", "echo", "a b"]);
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..argv.len() - 3])
            .args(["/tmp", "sh", "-c", "pwd; echo $HOME"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "/tmp\n/home/agent\n");
    }
}
