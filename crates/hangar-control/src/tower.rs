//! The Tower hook in a sandbox (T4-T9, T15-T17): where it and the run's Tower key and rules
//! live inside, whether a sandbox's turns must run with it, and what a sandbox must let through
//! to reach Tower. Settings and paths only: installing it is the runs' (`runs::sandbox_turn`).

use std::path::{Path, PathBuf};

use hangar_sandbox::layout::HANGAR_LIB;
use hangar_sandbox::{ProviderKind, Sandbox};
use hangar_store::Harness;

use crate::launch::{self, Tools};

/// Where the hook is installed inside (the driver's settings point Claude Code at it).
pub(crate) fn path_inside() -> PathBuf {
    Path::new(HANGAR_LIB).join("tower_hook")
}

/// The run's Tower credential inside: a file of the run, hangar's, readable by the agent (the
/// hook runs as the agent) but not changeable by it; removed when the run ends.
pub(crate) fn key_inside(run: &str) -> PathBuf {
    Path::new(HANGAR_LIB).join(format!("{run}.tower-key"))
}

/// The run's deny-risky rules file inside, where the hook (run as the agent) reads it:
/// hangar's, readable by the agent but not changeable by it; removed when the run ends.
pub(crate) fn rules_inside(run: &str) -> PathBuf {
    Path::new(HANGAR_LIB).join(format!("{run}.rules.toml"))
}

/// The run's copy of the control plane's `HANGAR_CA_FILE` inside, for an `https://` Tower: the
/// hook (run as the agent) and the driver's Tower client check Tower's certificate with it.
/// hangar's, readable by the agent but not changeable by it; removed when the run ends.
pub(crate) fn ca_inside(run: &str) -> PathBuf {
    Path::new(HANGAR_LIB).join(format!("{run}.tower-ca.pem"))
}

/// The control plane's `HANGAR_CA_FILE`, when Tower's `url` is `https://` (plain http goes to
/// loopback only, and has no certificate to check).
pub(crate) fn ca_file(tools: &Tools, url: &str) -> Option<PathBuf> {
    if !url.starts_with("https://") {
        return None;
    }
    launch::setting(tools, hangar_protocol::env::HANGAR_CA_FILE).map(PathBuf::from)
}

/// Whether turns in `sb` must run with the hook: `HANGAR_GOVERNANCE_HOOK=required` for all,
/// or the environment's `governance: {hook: required}` (an environment cannot loosen the
/// first).
pub(crate) fn required(tools: &Tools, sb: &Sandbox) -> bool {
    required_for(tools, &sb.env)
}

/// [`required`] for the sandboxes an environment makes.
pub(crate) fn required_for(tools: &Tools, env: &hangar_sandbox::EnvSpec) -> bool {
    launch::hook_required(tools) || env.governance.hook == Some(hangar_sandbox::HookMode::Required)
}

/// Why the sandboxes of `env` could not reach Tower: an egress allowlist that does not name
/// Tower's host (`HANGAR_GOVERNANCE_URL`), for the hook or the `governed` policy.
pub(crate) fn egress_refusal(tools: &Tools, env: &hangar_sandbox::EnvSpec) -> Option<String> {
    let hangar_sandbox::Egress::Allowlist(hosts) = &env.egress else {
        return None;
    };
    let url = crate::launch::setting(tools, hangar_protocol::env::HANGAR_GOVERNANCE_URL)?;
    let host = url_host(&url)?;
    if hosts.iter().any(|h| host_matches(h, &host)) {
        // E2B's firewall lets a listed name through only on port 80 (by the Host header)
        // and 443 (by TLS's SNI).
        let port = url_port(&url);
        if env.egress_enforcement == Some(hangar_sandbox::EgressEnforcement::E2bFirewall)
            && !matches!(port, Some(80 | 443))
        {
            let port = port.map_or_else(|| "?".to_owned(), |p| p.to_string());
            return Some(format!(
                "environment {} keeps its egress allowlist with E2B's firewall, which lets a listed name through only on port 80 or 443, and Tower's URL (HANGAR_GOVERNANCE_URL) uses port {port}, so every call to Tower would fail; serve Tower on port 443 (or 80)",
                env.name
            ));
        }
        return None;
    }
    Some(format!(
        "environment {} reaches only the hosts on its egress allowlist ({}), and Tower's host {host} (HANGAR_GOVERNANCE_URL) is not one of them, so every call to Tower would fail; add {host} to egress.allowlist",
        env.name,
        hosts.join(", ")
    ))
}

/// The host of an http(s) URL, lowercase, without port or brackets.
pub(crate) fn url_host(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        authority.split(':').next()?
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// The port of an http(s) URL (the scheme's when none is written).
pub(crate) fn url_port(url: &str) -> Option<u16> {
    let (rest, default) = if let Some(r) = url.strip_prefix("http://") {
        (r, 80)
    } else {
        (url.strip_prefix("https://")?, 443)
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let after_host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.1,
        None => authority.split_once(':').map_or("", |(_, p)| p),
    };
    let port = after_host.strip_prefix(':').unwrap_or(after_host);
    if port.is_empty() {
        Some(default)
    } else {
        port.parse().ok()
    }
}

/// Whether an allowlist entry (`github.com`, `*.pkg.example.com`) names `host`.
pub(crate) fn host_matches(entry: &str, host: &str) -> bool {
    let entry = entry.to_ascii_lowercase();
    match entry.strip_prefix('*') {
        Some(suffix) if suffix.starts_with('.') => {
            host.len() > suffix.len() && host.ends_with(suffix)
        }
        _ => entry == host,
    }
}

/// Why no sandbox of this kind can hold the hook, whatever else it says: kubernetes and
/// e2b run the agent as the only uid (T18).
pub(crate) fn provider_refusal(kind: ProviderKind) -> Option<String> {
    match kind {
        ProviderKind::Kubernetes | ProviderKind::E2b => Some(format!(
            "the Tower hook is required, but a {kind} sandbox runs the agent as the only uid, so the agent could remove the hook; the turn is refused"
        )),
        ProviderKind::Local | ProviderKind::Docker => None,
    }
}

/// Why the hook cannot be made to hold in `sb` for `harness`, if it cannot (T9, T18).
/// `HANGAR_UID_SPLIT` plays no part: only what the provider reports does.
pub(crate) fn refusal(sb: &Sandbox, harness: Harness) -> Option<String> {
    if harness == Harness::Codex {
        return Some(launch::hook_refusal(Harness::Codex).to_owned());
    }
    let caps = &sb.capabilities;
    if let Some(why) = provider_refusal(sb.env.provider) {
        return Some(why);
    }
    if !caps.uid_split {
        return Some(format!(
            "the Tower hook is required, but sandbox {} has no uid split ({}), so the agent could remove the hook; the turn is refused",
            sb.id,
            caps.uid_split_off.as_deref().unwrap_or("uid_split is off")
        ));
    }
    if caps.sudo || sb.env.sudo {
        return Some(format!(
            "the Tower hook is required, but sandbox {} gives the agent sudo (sudo: true), so the agent could remove the hook; the turn is refused",
            sb.id
        ));
    }
    None
}

/// The hook executable on this machine: `HANGAR_TOWER_HOOK_BIN`, else `hangar-tower-hook`
/// beside the driver.
pub(crate) fn binary(tools: &Tools) -> Result<PathBuf, String> {
    let named =
        launch::setting(tools, hangar_protocol::env::HANGAR_TOWER_HOOK_BIN).map(PathBuf::from);
    let path = named.unwrap_or_else(|| {
        tools
            .driver
            .parent()
            .unwrap_or(Path::new("."))
            .join("hangar-tower-hook")
    });
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "the Tower hook is required, but its executable {} is missing (the hangar package installs it beside hangar-driver; or set HANGAR_TOWER_HOOK_BIN to a static hangar-tower-hook); the turn is refused",
            path.display()
        ))
    }
}
