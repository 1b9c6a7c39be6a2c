//! `hangar doctor`: whether this machine can run hangar, each check with what to do when it
//! fails. What a turn needs (the driver, bubblewrap with user namespaces, tmux, a harness CLI
//! and the Node.js it requires, the store) fails the exit status; what only some turns need
//! (dockerd, the Tower hook, the second harness) warns.
//!
//! It makes nothing: no store that does not exist yet (an existing one is opened as any command
//! opens it, which brings an older schema up to date), and it starts nothing but probes
//! (`bwrap ... true`, `tmux -V`, `node --version`, dockerd's version).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::exit::CliError;
use crate::{find, progress};

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One check: its name, how it came out, what was found, and what to do.
struct Check {
    name: &'static str,
    status: Status,
    found: String,
    fix: Option<String>,
}

fn ok(name: &'static str, found: impl Into<String>) -> Check {
    Check {
        name,
        status: Status::Ok,
        found: found.into(),
        fix: None,
    }
}

fn bad(
    name: &'static str,
    status: Status,
    found: impl Into<String>,
    fix: impl Into<String>,
) -> Check {
    Check {
        name,
        status,
        found: found.into(),
        fix: Some(fix.into()),
    }
}

/// `hangar doctor [--json]`.
pub fn doctor(home: &Path, json: bool) -> Result<ExitCode, CliError> {
    let mut checks = vec![
        driver(),
        tower_hook(),
        bubblewrap(Path::new("/proc/sys")),
        tmux(),
    ];
    checks.extend(harnesses());
    let rt = crate::serve::runtime()?;
    checks.push(rt.block_on(dockerd()));
    checks.push(rt.block_on(database(home)));
    checks.push(disk(home));
    checks.push(home_permissions(home));
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    for c in &checks {
        if json {
            progress::say(
                &json!({"check": c.name, "status": c.status.word().to_lowercase(), "found": c.found, "fix": c.fix})
                    .to_string(),
            );
        } else {
            progress::say(&format!(
                "{:<5} {:<13} {}",
                c.status.word(),
                c.name,
                c.found
            ));
            if let Some(fix) = &c.fix {
                progress::say(&format!("{:<19}-> {fix}", ""));
            }
        }
    }
    if !json {
        let (f, w) = (
            checks.iter().filter(|c| c.status == Status::Fail).count(),
            checks.iter().filter(|c| c.status == Status::Warn).count(),
        );
        progress::say(&match (f, w) {
            (0, 0) => "hangar can run here.".to_owned(),
            (0, w) => format!(
                "hangar can run here ({w} warning{}).",
                if w == 1 { "" } else { "s" }
            ),
            (f, _) => format!(
                "{f} check{} failed: turns cannot run until {} fixed.",
                if f == 1 { "" } else { "s" },
                if f == 1 { "it is" } else { "they are" }
            ),
        });
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn driver() -> Check {
    match find::driver() {
        Ok(p) => ok("driver", p.display().to_string()),
        Err(e) => bad("driver", Status::Fail, "not found", e.to_string()),
    }
}

fn tower_hook() -> Check {
    let path = hangar_protocol::env::var_os(hangar_protocol::env::HANGAR_TOWER_HOOK_BIN)
        .map(PathBuf::from)
        .or_else(|| {
            find::driver()
                .ok()
                .map(|d| d.with_file_name("hangar-tower-hook"))
        });
    match path {
        Some(p) if p.is_file() => ok("tower hook", p.display().to_string()),
        _ => bad(
            "tower hook",
            Status::Warn,
            "not found beside the driver",
            "only turns governed by Tower need it: install the hangar package (it puts hangar-tower-hook in /usr/lib/hangar), or set HANGAR_TOWER_HOOK_BIN",
        ),
    }
}

/// On PATH, as an executable file.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| find::is_executable(p))
}

/// Runs `program args` with a deadline; its exit status and output (stdout, then stderr).
fn probe(program: &Path, args: &[&str]) -> Option<(bool, String)> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Some((false, "did not finish within 10 s".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), text.trim().to_owned()))
}

fn bubblewrap(sysctl: &Path) -> Check {
    let Some(bwrap) = on_path("bwrap") else {
        return bad(
            "bubblewrap",
            Status::Fail,
            "bwrap is not on PATH",
            "install it (Debian and Ubuntu: apt-get install bubblewrap): every local sandbox runs in it",
        );
    };
    let root = unsafe { libc::geteuid() } == 0;
    match probe(&bwrap, hangar_sandbox::local::BWRAP_PROBE) {
        Some((true, _)) => ok(
            "bubblewrap",
            format!(
                "{} makes sandboxes{}",
                bwrap.display(),
                if root {
                    " (as root)"
                } else {
                    " (user namespaces work)"
                }
            ),
        ),
        Some((false, said)) => bad(
            "bubblewrap",
            Status::Fail,
            format!("{} cannot make a sandbox: {said}", bwrap.display()),
            userns_hint(sysctl),
        ),
        None => bad(
            "bubblewrap",
            Status::Fail,
            format!("{} does not start", bwrap.display()),
            "reinstall bubblewrap",
        ),
    }
}

/// What to do when user namespaces are off, read from the kernel's settings under `sysctl`
/// (`/proc/sys`): Debian's switch, Ubuntu's AppArmor restriction, or a limit of zero.
fn userns_hint(sysctl: &Path) -> String {
    let read = |p: &str| {
        std::fs::read_to_string(sysctl.join(p))
            .ok()
            .map(|s| s.trim().to_owned())
    };
    if read("kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return "Ubuntu's AppArmor keeps unprivileged programs from making user namespaces: give bwrap a profile that allows them (/etc/apparmor.d/bwrap: `abi <abi/4.0>, include <tunables/global> profile bwrap /usr/bin/bwrap flags=(unconfined) { userns, }`, then `apparmor_parser -r /etc/apparmor.d/bwrap`), or lift the restriction with `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (and in /etc/sysctl.d/ to keep it)".into();
    }
    if read("kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return "Debian's kernel has unprivileged user namespaces off: `sysctl -w kernel.unprivileged_userns_clone=1`, and `echo kernel.unprivileged_userns_clone=1 > /etc/sysctl.d/90-hangar.conf` to keep it".into();
    }
    if read("user/max_user_namespaces").as_deref() == Some("0") {
        return "user namespaces are limited to zero: `sysctl -w user.max_user_namespaces=15000` (and in /etc/sysctl.d/ to keep it)".into();
    }
    "bubblewrap needs user namespaces (or root); if hangar runs in a container, give it --privileged or a seccomp profile that allows unshare and mount".into()
}

fn tmux() -> Check {
    let Some(tmux) = on_path("tmux") else {
        return bad(
            "tmux",
            Status::Fail,
            "tmux is not on PATH",
            "install it (apt-get install tmux): sandboxes keep their terminals in it",
        );
    };
    match probe(&tmux, &["-V"]) {
        Some((true, v)) => ok("tmux", format!("{v} ({})", tmux.display())),
        _ => bad(
            "tmux",
            Status::Fail,
            format!("{} does not run", tmux.display()),
            "reinstall tmux",
        ),
    }
}

/// The least Node.js version an npm package's `engines.node` asks for (`>=22.0.0`), as numbers.
fn node_wanted(package: &serde_json::Value) -> Option<Vec<u64>> {
    let spec = package.get("engines")?.get("node")?.as_str()?;
    let v = spec
        .trim()
        .trim_start_matches(">=")
        .trim_start_matches('^')
        .trim();
    let nums: Vec<u64> = v.split('.').map_while(|p| p.trim().parse().ok()).collect();
    (!nums.is_empty()).then_some(nums)
}

/// `v20.20.2` as numbers.
fn version_numbers(v: &str) -> Vec<u64> {
    v.trim()
        .trim_start_matches('v')
        .split('.')
        .map_while(|p| p.parse().ok())
        .collect()
}

/// The npm package a CLI comes from (its `package.json`), as `harness_version` finds it.
fn package_of(bin: &Path) -> Option<serde_json::Value> {
    let real = bin.canonicalize().ok()?;
    real.ancestors().skip(1).take(6).find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
        serde_json::from_str(&text).ok()
    })
}

/// Whether the CLI is a Node.js program (a `.js` file, or a script run by node) rather than a
/// native executable.
fn runs_on_node(bin: &Path) -> bool {
    let Ok(real) = bin.canonicalize() else {
        return false;
    };
    if real
        .extension()
        .is_some_and(|e| e == "js" || e == "mjs" || e == "cjs")
    {
        return true;
    }
    std::fs::read(&real).ok().is_some_and(|b| {
        b.starts_with(b"#!")
            && b.iter()
                .take(128)
                .copied()
                .collect::<Vec<u8>>()
                .windows(4)
                .any(|w| w == b"node")
    })
}

fn harnesses() -> Vec<Check> {
    let mut out = Vec::new();
    let mut any = false;
    for (harness, name, found) in [
        (hangar_store::Harness::Claude, "claude", find::claude()),
        (hangar_store::Harness::Codex, "codex", find::codex()),
    ] {
        let Ok(bin) = found else {
            out.push(bad(
                name,
                Status::Warn,
                "not found",
                format!("install it to run {name} turns (npm install -g {}), then `hangar harness check`", if name == "claude" { "@anthropic-ai/claude-code" } else { "@openai/codex" }),
            ));
            continue;
        };
        any = true;
        out.push(harness_check(harness, name, &bin));
    }
    if !any {
        for c in &mut out {
            c.status = Status::Fail;
        }
    }
    out
}

fn harness_check(harness: hangar_store::Harness, name: &'static str, bin: &Path) -> Check {
    let version = hangar_control::conformance::harness_version(bin);
    if runs_on_node(bin) {
        let wanted = package_of(bin).as_ref().and_then(node_wanted);
        let have = on_path("node").and_then(|n| probe(&n, &["--version"]));
        let want_text = wanted
            .as_ref()
            .map(|w| w.iter().map(u64::to_string).collect::<Vec<_>>().join("."));
        match (have, &wanted) {
            (None, _) | (Some((false, _)), _) => {
                return bad(
                    name,
                    Status::Fail,
                    format!(
                        "{name} {version} ({}) runs on Node.js, which is not on PATH",
                        bin.display()
                    ),
                    format!(
                        "install Node.js{} (Debian: apt-get install nodejs)",
                        want_text
                            .map(|w| format!(" {w} or newer"))
                            .unwrap_or_default()
                    ),
                );
            }
            (Some((true, v)), Some(w)) if version_numbers(&v) < *w => {
                return bad(
                    name,
                    Status::Fail,
                    format!(
                        "{name} {version} needs Node.js {} or newer; node is {v}",
                        want_text.unwrap_or_default()
                    ),
                    "install a newer Node.js (its own packages, or a version manager)",
                );
            }
            _ => {}
        }
    }
    let built_in = hangar_control::conformance::builtin().into_iter().any(|r| {
        r.harness == harness.as_str()
            && r.version == version
            && r.passed
            && r.suite == hangar_control::conformance::SUITE
    });
    if built_in {
        return ok(
            name,
            format!(
                "{name} {version} ({}): passed hangar's suite (built in)",
                bin.display()
            ),
        );
    }
    if version == "unknown" {
        return bad(
            name,
            Status::Warn,
            format!(
                "{} (version cannot be read: not an npm install)",
                bin.display()
            ),
            "its turns run with a warning; install it from npm to have its version checked",
        );
    }
    bad(
        name,
        Status::Warn,
        format!("{name} {version} ({})", bin.display()),
        format!(
            "unless `hangar harness list` says it was checked here, run `hangar harness check --{name} {}` (its turns are refused until it passes)",
            bin.display()
        ),
    )
}

async fn dockerd() -> Check {
    match tokio::time::timeout(
        Duration::from_secs(5),
        hangar_sandbox::docker::DockerProvider::connect(),
    )
    .await
    {
        Ok(Ok(_)) => ok("dockerd", "answers (docker environments can run)"),
        Ok(Err(e)) => bad(
            "dockerd",
            Status::Warn,
            e.to_string(),
            "only docker environments need it: apt-get install docker.io && systemctl start docker (or set DOCKER_HOST)",
        ),
        Err(_) => bad(
            "dockerd",
            Status::Warn,
            "no answer within 5 s",
            "check dockerd's log (journalctl -u docker)",
        ),
    }
}

async fn database(home: &Path) -> Check {
    let plane = crate::serve::Plane::from_env(home);
    let url = &plane.database;
    let shown = redact(url);
    if let Some(path) = url.strip_prefix("sqlite://")
        && !Path::new(path).exists()
    {
        return bad(
            "database",
            Status::Warn,
            format!("{shown}: no store yet"),
            "it is made at first use (hangar serve, hangar run)",
        );
    }
    let opened = tokio::time::timeout(Duration::from_secs(5), hangar_store::Store::open(url)).await;
    match opened {
        Ok(Ok(store)) => {
            let v = store.schema_version().await;
            store.close().await;
            match v {
                Ok(v) => ok("database", format!("{shown} (schema {v})")),
                Err(e) => bad(
                    "database",
                    Status::Fail,
                    format!("{shown}: {e}"),
                    "restore the store from a backup, or point HANGAR_DATABASE_URL at the right one",
                ),
            }
        }
        Ok(Err(e)) => bad(
            "database",
            Status::Fail,
            format!("{shown}: {e}"),
            "check HANGAR_DATABASE_URL (or database_url in the config file) and that the database server runs",
        ),
        Err(_) => bad(
            "database",
            Status::Fail,
            format!("{shown}: no answer within 5 s"),
            "check that the database server runs and is reachable",
        ),
    }
}

/// A database URL without its password.
fn redact(url: &str) -> String {
    // The last `@` ends the credentials (a password may hold one).
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The free space under `home` (or the folder it will be made in).
fn disk(home: &Path) -> Check {
    let Some(existing) = home.ancestors().find(|p| p.exists()) else {
        return bad(
            "disk",
            Status::Warn,
            "cannot tell",
            "check the disk holding HANGAR_HOME",
        );
    };
    let Ok(c) = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()) else {
        return bad(
            "disk",
            Status::Warn,
            "cannot tell",
            "check the disk holding HANGAR_HOME",
        );
    };
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid out-pointer for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &raw mut st) } != 0 {
        return bad(
            "disk",
            Status::Warn,
            "cannot tell",
            "check the disk holding HANGAR_HOME",
        );
    }
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    let gib = free as f64 / (1u64 << 30) as f64;
    let found = format!("{gib:.1} GiB free under {}", existing.display());
    match free {
        f if f < 1 << 30 => bad(
            "disk",
            Status::Fail,
            found,
            "free some space: run logs, trees and sandboxes' copies live there",
        ),
        f if f < 5 << 30 => bad(
            "disk",
            Status::Warn,
            found,
            "under 5 GiB: a few sandboxes' copies of large repositories fill it",
        ),
        _ => ok("disk", found),
    }
}

fn home_permissions(home: &Path) -> Check {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(home) else {
        return ok(
            "home",
            format!("{} (made at first use, mode 0700)", home.display()),
        );
    };
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        return bad(
            "home",
            Status::Fail,
            format!(
                "{} belongs to uid {}, not to this user ({me})",
                home.display(),
                m.uid()
            ),
            "run hangar as the user that owns it (the service's: sudo -u hangar ...), or set HANGAR_HOME to a folder of your own; changing its owner breaks the service that uses it",
        );
    }
    if m.mode() & 0o077 != 0 {
        return bad(
            "home",
            Status::Fail,
            format!(
                "{} has mode {:o}: other users can read the vault's key and the runs",
                home.display(),
                m.mode() & 0o777
            ),
            format!("chmod 700 {}", home.display()),
        );
    }
    let key = crate::serve::Plane::from_env(home).master_key;
    if let Ok(k) = std::fs::metadata(&key)
        && k.mode() & 0o077 != 0
    {
        return bad(
            "home",
            Status::Fail,
            format!("{} has mode {:o}", key.display(), k.mode() & 0o777),
            format!("chmod 600 {}", key.display()),
        );
    }
    ok("home", format!("{} (mode 0700, yours)", home.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysctl(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, v) in files {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        }
        d
    }

    #[test]
    fn the_hint_names_the_switch_that_is_off() {
        let ubuntu = sysctl(&[
            ("kernel/apparmor_restrict_unprivileged_userns", "1\n"),
            ("kernel/unprivileged_userns_clone", "1\n"),
        ]);
        assert!(userns_hint(ubuntu.path()).contains("AppArmor"));
        let debian = sysctl(&[("kernel/unprivileged_userns_clone", "0\n")]);
        assert!(userns_hint(debian.path()).contains("kernel.unprivileged_userns_clone=1"));
        let zero = sysctl(&[("user/max_user_namespaces", "0\n")]);
        assert!(userns_hint(zero.path()).contains("max_user_namespaces"));
        let none = sysctl(&[]);
        assert!(userns_hint(none.path()).contains("container"));
    }

    #[test]
    fn node_versions_compare_as_numbers() {
        let pkg = json!({"engines": {"node": ">=22.0.0"}});
        let want = node_wanted(&pkg).unwrap();
        assert!(version_numbers("v20.20.2") < want);
        assert!(version_numbers("v22.1.0") >= want);
        assert!(version_numbers("v100.0.0") >= want);
    }

    #[test]
    fn a_database_password_is_not_shown() {
        assert_eq!(
            redact("postgres://hangar:s3cret@db.example.com/hangar"),
            "postgres://hangar:***@db.example.com/hangar"
        );
        assert_eq!(
            redact("sqlite:///var/lib/hangar/hangar.db"),
            "sqlite:///var/lib/hangar/hangar.db"
        );
    }
}
