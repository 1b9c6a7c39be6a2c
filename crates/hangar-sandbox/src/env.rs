//! Environments (H1): what a sandbox is made from, as a YAML file or the API's JSON.
//!
//! Parsing is by hand over a generic value so that every error names the key and says what is
//! allowed: unknown keys, wrong types and impossible combinations (an image for the local
//! provider, a host network with no egress, a uid split where the provider has one uid per pod).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::SandboxError;

/// Where sandboxes of an environment run: hangar's shared word, defined once in the protocol
/// crate (the API and the store speak it too).
pub use hangar_protocol::Provider as ProviderKind;

/// Whether the provider can run the agent as a uid of its own beside hangar's.
pub fn can_split_uids(p: ProviderKind) -> bool {
    matches!(p, ProviderKind::Local | ProviderKind::Docker)
}

/// What the sandbox may reach on the network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "mode", content = "hosts")]
pub enum Egress {
    /// Nothing (a network namespace of its own with only loopback).
    None,
    /// Only these hosts.
    Allowlist(Vec<String>),
    /// Anything the host can reach.
    Open,
}

/// Who keeps an egress allowlist where hangar's own proxy cannot (`egress.enforcement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EgressEnforcement {
    /// E2B's own egress firewall (provider e2b only), which keeps less than hangar's proxy
    /// does on local and docker: see [`E2B_FIREWALL_CAVEAT`].
    E2bFirewall,
}

impl EgressEnforcement {
    pub fn as_str(self) -> &'static str {
        match self {
            EgressEnforcement::E2bFirewall => "e2b-firewall",
        }
    }
}

/// What E2B's egress firewall does not keep that hangar's proxy does (said by `sb create`, kept
/// in the audit record, and why an allowlist on e2b needs `enforcement: e2b-firewall`).
pub const E2B_FIREWALL_CAVEAT: &str = "the allowlist is E2B's own firewall, not hangar's proxy: DNS to 8.8.8.8 stays open (a channel out by DNS tunnelling), names are matched only by the Host header on port 80 and TLS's SNI on 443 (other ports reach listed addresses only), and traffic E2B's firewall does not see as denied (such as IPv6, should E2B's deny list not cover it) is not hangar's to stop";

/// Resource limits (where the provider enforces them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// CPUs (fractions allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// Memory in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u32>,
}

impl Resources {
    pub fn is_empty(&self) -> bool {
        self.cpu.is_none() && self.memory.is_none() && self.pids.is_none()
    }
}

/// Whether the Tower hook must be installed for turns in this environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookMode {
    /// Every turn runs with the hook, or is refused.
    Required,
    /// Turns run with the hook when the policy is `governed`.
    Optional,
    /// No hook.
    Off,
}

/// The environment's `governance:` section (the governance issue gives it meaning).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Governance {
    /// The policy turns get when they ask for none (`ask`, `auto`, `governed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookMode>,
    /// Deny-risky rules: `{add: [...], disable: [ids]}` as hangar-rules reads them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Value>,
    /// Reviewed Claude Code settings (MCP servers, model, `permissions.deny`/`ask`, …) that
    /// hangar installs for the environment's Claude Code turns: only the keys
    /// `hangar_protocol::claude_settings` allows, none of which can skip the rules, the person
    /// or Tower. Their SHA-256 is in each turn's manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_settings: Option<Value>,
    /// People (emails) who may answer the approvals of this environment's runs, beside the
    /// run's owner and the admins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
}

/// A validated environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnvSpec {
    pub name: String,
    pub provider: ProviderKind,
    /// The image (docker, kubernetes; e2b: its template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub egress: Egress,
    /// Who keeps the allowlist when it is not hangar's proxy (`egress.enforcement`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_enforcement: Option<EgressEnforcement>,
    /// Share the host's network namespace (development, tests with a loopback model server).
    #[serde(default)]
    pub host_network: bool,
    pub uid_split: bool,
    pub sudo: bool,
    #[serde(default)]
    pub governance: Governance,
    #[serde(default)]
    pub resources: Resources,
    /// `workspace: in-place` (local only, without the uid split): the sandbox works on the
    /// repository folder itself instead of a copy. What `hangar run` uses without `--sb`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_place: bool,
}

const KEYS: &[&str] = &[
    "name",
    "provider",
    "image",
    "egress",
    "network",
    "uid_split",
    "sudo",
    "governance",
    "resources",
    "workspace",
];

fn bad(key: &str, msg: impl fmt::Display) -> SandboxError {
    SandboxError::Invalid(format!("{key}: {msg}"))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "true/false",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn string<'a>(key: &str, v: &'a Value) -> Result<&'a str, SandboxError> {
    v.as_str()
        .ok_or_else(|| bad(key, format!("must be text, not {}", type_name(v))))
}

fn boolean(key: &str, v: &Value) -> Result<bool, SandboxError> {
    v.as_bool()
        .ok_or_else(|| bad(key, format!("must be true or false, not {}", type_name(v))))
}

fn check_keys(
    section: &str,
    map: &Map<String, Value>,
    allowed: &[&str],
) -> Result<(), SandboxError> {
    for k in map.keys() {
        if !allowed.contains(&k.as_str()) {
            let key = if section.is_empty() {
                k.clone()
            } else {
                format!("{section}.{k}")
            };
            return Err(bad(
                &key,
                format!("unknown key; allowed: {}", allowed.join(", ")),
            ));
        }
    }
    Ok(())
}

/// A size such as `512m`, `2g`, `1.5G`, `1048576`: bytes.
fn parse_size(key: &str, v: &Value) -> Result<u64, SandboxError> {
    let err = || {
        bad(
            key,
            "must be a size in bytes or with a unit (k, m, g), e.g. 512m or 2g",
        )
    };
    if let Some(n) = v.as_u64() {
        return if n == 0 { Err(err()) } else { Ok(n) };
    }
    let s = v.as_str().ok_or_else(err)?.trim().to_ascii_lowercase();
    let s = s.strip_suffix('b').unwrap_or(&s);
    let (num, mul) = match s.chars().last() {
        Some('k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('m') => (&s[..s.len() - 1], 1 << 20),
        Some('g') => (&s[..s.len() - 1], 1 << 30),
        Some('t') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| err())?;
    let bytes = n * mul as f64;
    // Less than a byte would become a limit of 0, which Docker reads as no limit at all (found
    // by `scripts/fuzz env_yaml`).
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(err());
    }
    Ok(bytes as u64)
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

fn valid_host(s: &str) -> bool {
    let s = s.strip_prefix("*.").unwrap_or(s);
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Why `sudo: true` cannot go with an egress allowlist.
const SUDO_WITH_ALLOWLIST: &str = "true gives the agent root in the sandbox, and root can take the egress proxy's port (and read the sandbox's loopback traffic), so an egress allowlist could not be kept; use sudo: false with the allowlist, or sudo: true with egress none or open";

/// The value of `key`, if it is given and not null (null is the same as leaving a key out).
fn given<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

/// `name`: required, a lowercase name.
fn read_name(map: &Map<String, Value>) -> Result<&str, SandboxError> {
    let name = map
        .get("name")
        .ok_or_else(|| bad("name", "required (lowercase letters, digits, - _ .)"))
        .and_then(|v| string("name", v))?;
    if !valid_name(name) {
        return Err(bad(
            "name",
            format!(
                "{name:?} is not allowed: 1-63 lowercase letters, digits, - _ . starting with a letter or digit"
            ),
        ));
    }
    Ok(name)
}

/// `provider`: required, one of [`ProviderKind::ALL`].
fn read_provider(map: &Map<String, Value>) -> Result<ProviderKind, SandboxError> {
    let allowed_providers = ProviderKind::ALL
        .iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let provider = map
        .get("provider")
        .ok_or_else(|| bad("provider", format!("required; one of {allowed_providers}")))
        .and_then(|v| string("provider", v))?;
    provider.parse::<ProviderKind>().map_err(|_| {
        bad(
            "provider",
            format!("{provider:?} is not a provider; one of {allowed_providers}"),
        )
    })
}

/// `image`: required by the providers that run one, refused by the local one.
fn read_image(
    map: &Map<String, Value>,
    provider: ProviderKind,
) -> Result<Option<String>, SandboxError> {
    let image = match given(map, "image") {
        None => None,
        Some(v) => Some(string("image", v)?.to_owned()),
    };
    match (provider, &image) {
        (ProviderKind::Local, Some(_)) => Err(bad(
            "image",
            "the local provider runs this machine's system read-only and takes no image; remove image, or use provider docker or kubernetes",
        )),
        (ProviderKind::Docker | ProviderKind::Kubernetes, None) => Err(bad(
            "image",
            format!("required for provider {provider} (e.g. image: hangar-base:bookworm)"),
        )),
        (_, Some(i)) if i.trim().is_empty() => Err(bad("image", "is empty")),
        _ => Ok(image),
    }
}

/// `network: host`, or nothing.
fn read_network(map: &Map<String, Value>) -> Result<bool, SandboxError> {
    let Some(v) = given(map, "network") else {
        return Ok(false);
    };
    match string("network", v)? {
        "host" => Ok(true),
        other => Err(bad(
            "network",
            format!(
                "{other:?} is not allowed; the only value is host (share the host's network namespace)"
            ),
        )),
    }
}

/// `egress`: none, open, or `{allowlist: [hosts], enforcement}`; open by default on the
/// host's network, none otherwise.
fn read_egress(
    map: &Map<String, Value>,
    provider: ProviderKind,
    host_network: bool,
) -> Result<(Egress, Option<EgressEnforcement>), SandboxError> {
    match given(map, "egress") {
        None if host_network => Ok((Egress::Open, None)),
        None => Ok((Egress::None, None)),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok((Egress::None, None)),
            "open" => Ok((Egress::Open, None)),
            "allowlist" => Err(bad(
                "egress",
                "allowlist needs its hosts: egress: {allowlist: [github.com, registry.pkg.example.com]}",
            )),
            other => Err(bad(
                "egress",
                format!("{other:?} is not allowed; one of none, open, or {{allowlist: [hosts]}}"),
            )),
        },
        Some(Value::Object(m)) => {
            check_keys("egress", m, &["allowlist", "enforcement"])?;
            let enforcement = read_enforcement(m, provider)?;
            Ok((Egress::Allowlist(read_allowlist(m)?), enforcement))
        }
        Some(v) => Err(bad(
            "egress",
            format!(
                "must be none, open, or {{allowlist: [hosts]}}, not {}",
                type_name(v)
            ),
        )),
    }
}

/// `egress.enforcement`: only `e2b-firewall`, only for provider e2b.
fn read_enforcement(
    m: &Map<String, Value>,
    provider: ProviderKind,
) -> Result<Option<EgressEnforcement>, SandboxError> {
    let Some(v) = given(m, "enforcement") else {
        return Ok(None);
    };
    match string("egress.enforcement", v)? {
        "e2b-firewall" if provider == ProviderKind::E2b => Ok(Some(EgressEnforcement::E2bFirewall)),
        "e2b-firewall" => Err(bad(
            "egress.enforcement",
            format!(
                "e2b-firewall is only for provider e2b; hangar's own proxy keeps the allowlist for provider {provider}: remove enforcement"
            ),
        )),
        other => Err(bad(
            "egress.enforcement",
            format!(
                "{other:?} is not allowed; the only value is e2b-firewall (E2B's own firewall, provider e2b)"
            ),
        )),
    }
}

/// `egress.allowlist`: a non-empty list of host names, lowercased.
fn read_allowlist(m: &Map<String, Value>) -> Result<Vec<String>, SandboxError> {
    let hosts = m
        .get("allowlist")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("egress.allowlist", "must be a list of host names"))?;
    if hosts.is_empty() {
        return Err(bad(
            "egress.allowlist",
            "is empty; list the hosts, or use egress: none",
        ));
    }
    let mut out = Vec::new();
    for h in hosts {
        let h = string("egress.allowlist", h)?;
        if !valid_host(h) {
            return Err(bad(
                "egress.allowlist",
                format!("{h:?} is not a host name (e.g. github.com or *.pkg.example.com)"),
            ));
        }
        out.push(h.to_ascii_lowercase());
    }
    Ok(out)
}

/// The host's network goes only with open egress, and only where a provider can share it.
fn check_host_network(
    host_network: bool,
    egress: &Egress,
    provider: ProviderKind,
) -> Result<(), SandboxError> {
    if host_network && *egress != Egress::Open {
        return Err(bad(
            "network",
            "host shares the host's network, so egress can only be open; drop network: host, or set egress: open",
        ));
    }
    if host_network && !matches!(provider, ProviderKind::Local | ProviderKind::Docker) {
        return Err(bad(
            "network",
            format!("host is only possible with provider local or docker, not {provider}"),
        ));
    }
    Ok(())
}

/// `uid_split`: on by default where the provider can split uids, refused where it cannot.
fn read_uid_split(map: &Map<String, Value>, provider: ProviderKind) -> Result<bool, SandboxError> {
    let uid_split = match given(map, "uid_split") {
        None => can_split_uids(provider),
        Some(v) => boolean("uid_split", v)?,
    };
    if uid_split && !can_split_uids(provider) {
        return Err(bad(
            "uid_split",
            format!(
                "provider {provider} runs one uid per sandbox, so there is no uid split; set uid_split: false"
            ),
        ));
    }
    Ok(uid_split)
}

/// `sudo`: off by default; never on the local provider nor with an egress allowlist.
fn read_sudo(
    map: &Map<String, Value>,
    provider: ProviderKind,
    egress: &Egress,
) -> Result<bool, SandboxError> {
    let sudo = match given(map, "sudo") {
        None => false,
        Some(v) => boolean("sudo", v)?,
    };
    if sudo && provider == ProviderKind::Local {
        return Err(bad(
            "sudo",
            "the local provider cannot give the agent sudo; remove it, or use provider docker",
        ));
    }
    // Root in the sandbox holds the egress proxy's port whenever hangar's proxy is not
    // listening (a restart of hangar, before the sandbox's next command brings it back), so
    // every program there, the Tower hook and the driver's Tower client included, would
    // then talk to the agent's own "proxy"; and it sees the sandbox's loopback traffic.
    if sudo && matches!(egress, Egress::Allowlist(_)) {
        return Err(bad("sudo", SUDO_WITH_ALLOWLIST));
    }
    Ok(sudo)
}

/// `governance`: a mapping of policy, hook, rules and claude_settings, each optional.
fn read_governance(map: &Map<String, Value>) -> Result<Governance, SandboxError> {
    let g = match given(map, "governance") {
        None => return Ok(Governance::default()),
        Some(Value::Object(g)) => g,
        Some(v) => {
            return Err(bad(
                "governance",
                format!(
                    "must be a mapping (policy, hook, rules, claude_settings, approvers), not {}",
                    type_name(v)
                ),
            ));
        }
    };
    check_keys(
        "governance",
        g,
        &["policy", "hook", "rules", "claude_settings", "approvers"],
    )?;
    let policy = match given(g, "policy") {
        None => None,
        Some(v) => {
            let p = string("governance.policy", v)?;
            if !["ask", "auto", "governed"].contains(&p) {
                return Err(bad(
                    "governance.policy",
                    format!("{p:?} is not a policy; one of ask, auto, governed"),
                ));
            }
            Some(p.to_owned())
        }
    };
    let hook = match given(g, "hook") {
        None => None,
        Some(v) => Some(match string("governance.hook", v)? {
            "required" => HookMode::Required,
            "optional" => HookMode::Optional,
            "off" => HookMode::Off,
            other => {
                return Err(bad(
                    "governance.hook",
                    format!("{other:?} is not allowed; one of required, optional, off"),
                ));
            }
        }),
    };
    let rules = match given(g, "rules") {
        None => None,
        Some(v @ Value::Object(r)) => {
            check_keys("governance.rules", r, &["add", "disable"])?;
            Some(v.clone())
        }
        Some(v) => {
            return Err(bad(
                "governance.rules",
                format!(
                    "must be a mapping with add and disable, not {}",
                    type_name(v)
                ),
            ));
        }
    };
    let claude_settings = match given(g, "claude_settings") {
        None => None,
        Some(v) => {
            hangar_protocol::claude_settings::check(v.clone())
                .map_err(|why| bad("governance.claude_settings", why))?;
            Some(v.clone())
        }
    };
    Ok(Governance {
        policy,
        hook,
        rules,
        claude_settings,
        approvers: read_approvers(g)?,
    })
}

/// `governance.approvers`: a list of people's emails (who may answer this environment's
/// approvals besides the run's owner and the admins).
fn read_approvers(g: &Map<String, Value>) -> Result<Vec<String>, SandboxError> {
    const KEY: &str = "governance.approvers";
    let list = match given(g, "approvers") {
        None => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(bad(
                KEY,
                format!(
                    "must be a list of people's emails (e.g. [alice@example.com]), not {}",
                    type_name(v)
                ),
            ));
        }
    };
    let mut emails = Vec::with_capacity(list.len());
    for v in list {
        let e = string(KEY, v)?.trim();
        if !e.contains('@') || e.chars().any(char::is_whitespace) {
            return Err(bad(
                KEY,
                format!("{e:?} is not an email address (e.g. alice@example.com)"),
            ));
        }
        emails.push(e.to_owned());
    }
    Ok(emails)
}

/// `resources`: cpu, memory and pids limits, none of which the local provider can keep.
fn read_resources(
    map: &Map<String, Value>,
    provider: ProviderKind,
) -> Result<Resources, SandboxError> {
    let resources = match given(map, "resources") {
        None => Resources::default(),
        Some(Value::Object(r)) => read_limits(r)?,
        Some(v) => {
            return Err(bad(
                "resources",
                format!(
                    "must be a mapping (cpu, memory, pids), not {}",
                    type_name(v)
                ),
            ));
        }
    };
    // pids too: RLIMIT_NPROC would count the agent's uid across sandboxes, not exempt the
    // driver's harness, and count every process of hangar's user without the split.
    if provider == ProviderKind::Local && !resources.is_empty() {
        return Err(bad(
            "resources",
            "the local provider cannot limit cpu, memory or pids (bubblewrap has no cgroups); remove them, or use provider docker",
        ));
    }
    Ok(resources)
}

/// The keys of `resources`, each optional.
fn read_limits(r: &Map<String, Value>) -> Result<Resources, SandboxError> {
    check_keys("resources", r, &["cpu", "memory", "pids"])?;
    let cpu = match given(r, "cpu") {
        None => None,
        Some(v) => match v.as_f64() {
            Some(c) if c > 0.0 && c.is_finite() => Some(c),
            _ => {
                return Err(bad(
                    "resources.cpu",
                    "must be a number of CPUs above 0, e.g. 1.5",
                ));
            }
        },
    };
    let memory = match given(r, "memory") {
        None => None,
        Some(v) => Some(parse_size("resources.memory", v)?),
    };
    let pids = match given(r, "pids") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(p) if p > 0 && p <= u64::from(u32::MAX) => Some(p as u32),
            _ => return Err(bad("resources.pids", "must be a whole number above 0")),
        },
    };
    Ok(Resources { cpu, memory, pids })
}

/// `workspace`: copy (the default) or in-place (local only, without the uid split).
fn read_workspace(
    map: &Map<String, Value>,
    provider: ProviderKind,
    uid_split: bool,
) -> Result<bool, SandboxError> {
    let in_place = match given(map, "workspace") {
        None => false,
        Some(v) => match string("workspace", v)? {
            "copy" => false,
            "in-place" => true,
            other => {
                return Err(bad(
                    "workspace",
                    format!(
                        "{other:?} is not allowed; copy (the default: a copy of the repository) or in-place (the folder itself, local only)"
                    ),
                ));
            }
        },
    };
    if in_place && provider != ProviderKind::Local {
        return Err(bad(
            "workspace",
            format!(
                "in-place is for the local provider; a {provider} sandbox works on a copy of the repository"
            ),
        ));
    }
    if in_place && uid_split {
        return Err(bad(
            "workspace",
            "in-place works on your folder as it is, so the agent runs as hangar's user: set uid_split: false",
        ));
    }
    Ok(in_place)
}

impl EnvSpec {
    /// Why a spec stored with a sandbox made before a rule was added is refused now (what
    /// [`EnvSpec::from_value`] would say), for a turn to be refused in such a sandbox.
    pub fn refused_now(&self) -> Option<String> {
        (self.sudo && matches!(self.egress, Egress::Allowlist(_)))
            .then(|| format!("sudo: {SUDO_WITH_ALLOWLIST}"))
    }

    /// Parses and validates an environment file's YAML.
    pub fn from_yaml(text: &str) -> Result<EnvSpec, SandboxError> {
        let v: Value = serde_yaml::from_str(text)
            .map_err(|e| SandboxError::Invalid(format!("not valid YAML: {e}")))?;
        EnvSpec::from_value(&v)
    }

    /// Validates an environment given as a JSON value (the API; also what a YAML file becomes).
    /// Each key is read by a step of its own, in the order the errors are reported.
    pub fn from_value(v: &Value) -> Result<EnvSpec, SandboxError> {
        let map = v.as_object().ok_or_else(|| {
            SandboxError::Invalid(format!(
                "an environment is a mapping of keys ({}), not {}",
                KEYS.join(", "),
                type_name(v)
            ))
        })?;
        check_keys("", map, KEYS)?;
        let name = read_name(map)?;
        let provider = read_provider(map)?;
        let image = read_image(map, provider)?;
        let host_network = read_network(map)?;
        let (egress, egress_enforcement) = read_egress(map, provider, host_network)?;
        check_host_network(host_network, &egress, provider)?;
        let uid_split = read_uid_split(map, provider)?;
        let sudo = read_sudo(map, provider, &egress)?;
        let governance = read_governance(map)?;
        let resources = read_resources(map, provider)?;
        let in_place = read_workspace(map, provider, uid_split)?;
        Ok(EnvSpec {
            in_place,
            name: name.to_owned(),
            provider,
            image,
            egress,
            egress_enforcement,
            host_network,
            uid_split,
            sudo,
            governance,
            resources,
        })
    }

    /// The environment as the YAML a person would write (what `hangar env show` prints).
    pub fn to_yaml_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), self.name.clone().into());
        m.insert("provider".into(), self.provider.as_str().into());
        if let Some(i) = &self.image {
            m.insert("image".into(), i.clone().into());
        }
        m.insert(
            "egress".into(),
            match &self.egress {
                Egress::None => "none".into(),
                Egress::Open => "open".into(),
                Egress::Allowlist(h) => match self.egress_enforcement {
                    Some(e) => serde_json::json!({ "allowlist": h, "enforcement": e.as_str() }),
                    None => serde_json::json!({ "allowlist": h }),
                },
            },
        );
        if self.host_network {
            m.insert("network".into(), "host".into());
        }
        m.insert("uid_split".into(), self.uid_split.into());
        m.insert("sudo".into(), self.sudo.into());
        if self.governance != Governance::default() {
            m.insert(
                "governance".into(),
                serde_json::to_value(&self.governance).unwrap_or(Value::Null),
            );
        }
        if self.in_place {
            m.insert("workspace".into(), "in-place".into());
        }
        if !self.resources.is_empty() {
            m.insert(
                "resources".into(),
                serde_json::to_value(&self.resources).unwrap_or(Value::Null),
            );
        }
        Value::Object(m)
    }

    /// `to_yaml_value` as YAML text.
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(&self.to_yaml_value()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn err(yaml: &str) -> String {
        match EnvSpec::from_yaml(yaml) {
            Ok(s) => panic!("accepted {yaml:?} as {s:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults_for_a_minimal_local_environment() {
        let s = EnvSpec::from_yaml("name: dev\nprovider: local\n").unwrap();
        assert_eq!(s.provider, ProviderKind::Local);
        assert_eq!(s.egress, Egress::None);
        assert!(s.uid_split);
        assert!(!s.sudo);
        assert!(!s.host_network);
    }

    #[test]
    fn a_full_docker_environment_round_trips_through_its_yaml() {
        let y = "name: ci\nprovider: docker\nimage: hangar-base:bookworm\nnetwork: host\negress: open\nuid_split: true\nsudo: false\ngovernance: {policy: governed, hook: required, rules: {disable: [git-force-push]}}\nresources: {cpu: 1.5, memory: 2g, pids: 512}\n";
        let s = EnvSpec::from_yaml(y).unwrap();
        assert_eq!(s.resources.memory, Some(2 << 30));
        assert_eq!(s.governance.hook, Some(HookMode::Required));
        assert!(s.host_network);
        assert_eq!(EnvSpec::from_yaml(&s.to_yaml()).unwrap(), s);
    }

    #[test]
    fn approvers_are_a_list_of_emails_and_survive_the_round_trip() {
        let y = "name: team\nprovider: local\ngovernance:\n  approvers: [carol@example.com]\n";
        let s = EnvSpec::from_yaml(y).unwrap();
        assert_eq!(s.governance.approvers, ["carol@example.com"]);
        let again = EnvSpec::from_value(&s.to_yaml_value()).unwrap();
        assert_eq!(again, s);
        for (bad, says) in [
            ("carol", "must be a list"),
            ("[carol]", "not an email address"),
            ("[1]", "must be text"),
        ] {
            let e = err(&format!(
                "name: x\nprovider: local\ngovernance: {{approvers: {bad}}}\n"
            ));
            assert!(
                e.starts_with("governance.approvers:") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn claude_settings_are_reviewed_when_the_environment_is_applied() {
        let y = "name: mcp\nprovider: local\ngovernance:\n  claude_settings:\n    model: m\n    permissions: {deny: ['Bash(curl:*)']}\n    mcpServers: {docs: {command: docs-server}}\n";
        let s = EnvSpec::from_yaml(y).unwrap();
        let c = s.governance.claude_settings.as_ref().unwrap();
        assert_eq!(c["mcpServers"]["docs"]["command"], "docs-server");
        assert_eq!(EnvSpec::from_yaml(&s.to_yaml()).unwrap(), s);
        for (bad, says) in [
            ("{hooks: {SessionStart: []}}", "\"hooks\" is not one"),
            ("{env: {ANTHROPIC_BASE_URL: x}}", "\"env\""),
            ("{permissions: {allow: [Bash]}}", "permissions.allow"),
            (
                "{permissions: {defaultMode: bypassPermissions}}",
                "permissions.defaultMode",
            ),
            ("[model]", "not a JSON object"),
        ] {
            let e = err(&format!(
                "name: x\nprovider: local\ngovernance: {{claude_settings: {bad}}}\n"
            ));
            assert!(
                e.starts_with("governance.claude_settings:") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn unknown_keys_are_named_with_what_is_allowed() {
        let e = err("name: dev\nprovider: local\nimagee: x\n");
        assert!(
            e.contains("imagee") && e.contains("allowed") && e.contains("uid_split"),
            "{e}"
        );
        let e = err("name: dev\nprovider: docker\nimage: i\nresources: {disk: 3}\n");
        assert!(e.starts_with("resources.disk:"), "{e}");
        let e = err("name: dev\nprovider: local\ngovernance: {hooks: required}\n");
        assert!(e.starts_with("governance.hooks:"), "{e}");
    }

    #[test]
    fn impossible_combinations_are_refused_naming_the_key() {
        for (yaml, key) in [
            ("name: a\nprovider: local\nimage: x\n", "image:"),
            ("name: a\nprovider: docker\n", "image:"),
            (
                "name: a\nprovider: docker\nimage: i\nnetwork: host\negress: none\n",
                "network:",
            ),
            (
                "name: a\nprovider: kubernetes\nimage: i\nuid_split: true\n",
                "uid_split:",
            ),
            ("name: a\nprovider: e2b\nuid_split: true\n", "uid_split:"),
            ("name: a\nprovider: local\nsudo: true\n", "sudo:"),
            (
                "name: a\nprovider: docker\nimage: i\nsudo: true\negress: {allowlist: [github.com]}\n",
                "sudo:",
            ),
            (
                "name: a\nprovider: local\nworkspace: in-place\n",
                "workspace:",
            ),
            (
                "name: a\nprovider: docker\nimage: i\nuid_split: false\nworkspace: in-place\n",
                "workspace:",
            ),
            (
                "name: a\nprovider: local\nuid_split: false\nworkspace: here\n",
                "workspace:",
            ),
            (
                "name: a\nprovider: local\nresources: {memory: 1g}\n",
                "resources:",
            ),
            (
                "name: a\nprovider: local\nresources: {pids: 100}\n",
                "resources:",
            ),
            (
                "name: a\nprovider: docker\nimage: i\negress: allowlist\n",
                "egress:",
            ),
            (
                "name: a\nprovider: kubernetes\nimage: i\nuid_split: false\nnetwork: host\negress: open\n",
                "network:",
            ),
            (
                "name: a\nprovider: e2b\negress: {allowlist: []}\n",
                "egress.allowlist:",
            ),
            (
                "name: a\nprovider: e2b\negress: {allowlist: ['http://x']}\n",
                "egress.allowlist:",
            ),
            (
                "name: a\nprovider: e2b\negress: {allowlist: [a.test], enforcement: proxy}\n",
                "egress.enforcement:",
            ),
            (
                "name: a\nprovider: docker\nimage: i\negress: {allowlist: [a.test], enforcement: e2b-firewall}\n",
                "egress.enforcement:",
            ),
            (
                "name: a\nprovider: e2b\negress: {allowlist: [a.test], enforcement: [e2b-firewall]}\n",
                "egress.enforcement:",
            ),
            ("name: A B\nprovider: local\n", "name:"),
            ("name: a\nprovider: lxc\n", "provider:"),
            (
                "name: a\nprovider: local\nuid_split: yes please\n",
                "uid_split:",
            ),
            (
                "name: a\nprovider: docker\nimage: i\nresources: {memory: lots}\n",
                "resources.memory:",
            ),
            (
                "name: a\nprovider: docker\nimage: i\nresources: {pids: -1}\n",
                "resources.pids:",
            ),
            (
                "name: a\nprovider: local\ngovernance: {policy: yolo}\n",
                "governance.policy:",
            ),
            ("provider: local\n", "name:"),
            ("- a\n- b\n", "an environment is a mapping"),
        ] {
            let e = err(yaml);
            assert!(e.starts_with(key), "{yaml:?}: {e}");
        }
    }

    #[test]
    fn a_stored_spec_with_sudo_and_an_allowlist_is_refused_now() {
        let mut e =
            EnvSpec::from_yaml("name: s\nprovider: docker\nimage: i\nsudo: true\negress: open\n")
                .unwrap();
        assert_eq!(e.refused_now(), None);
        e.egress = Egress::Allowlist(vec!["github.com".into()]);
        let why = e.refused_now().unwrap();
        let SandboxError::Invalid(at_create) = EnvSpec::from_yaml(
            "name: s\nprovider: docker\nimage: i\nsudo: true\negress: {allowlist: [github.com]}\n",
        )
        .unwrap_err() else {
            panic!("not Invalid")
        };
        assert_eq!(why, at_create);
    }

    #[test]
    fn an_e2b_allowlist_says_who_keeps_it_and_round_trips() {
        let s = EnvSpec::from_yaml(
            "name: e\nprovider: e2b\negress: {allowlist: [a.test], enforcement: e2b-firewall}\n",
        )
        .unwrap();
        assert_eq!(s.egress_enforcement, Some(EgressEnforcement::E2bFirewall));
        assert_eq!(EnvSpec::from_value(&s.to_yaml_value()).unwrap(), s);
        let plain =
            EnvSpec::from_yaml("name: e\nprovider: e2b\negress: {allowlist: [a.test]}\n").unwrap();
        assert_eq!(plain.egress_enforcement, None);
        assert!(!plain.to_yaml().contains("enforcement"));
    }

    #[test]
    fn sudo_goes_with_egress_none_or_open_but_not_an_allowlist() {
        for egress in ["none", "open"] {
            let e = EnvSpec::from_yaml(&format!(
                "name: s\nprovider: docker\nimage: i\nsudo: true\negress: {egress}\n"
            ))
            .unwrap();
            assert!(e.sudo);
        }
        let e =
            err("name: s\nprovider: docker\nimage: i\nsudo: true\negress: {allowlist: [a.test]}\n");
        assert!(
            e.contains("egress allowlist could not be kept") && e.contains("sudo: false"),
            "{e}"
        );
        // The same through the API's JSON.
        let v = serde_json::json!({"name": "s", "provider": "docker", "image": "i", "sudo": true, "egress": {"allowlist": ["a.test"]}});
        assert!(
            EnvSpec::from_value(&v)
                .unwrap_err()
                .to_string()
                .starts_with("sudo:")
        );
    }

    #[test]
    fn an_in_place_workspace_reads_and_prints_back() {
        let e = EnvSpec::from_yaml(
            "name: here\nprovider: local\nuid_split: false\nnetwork: host\nworkspace: in-place\n",
        )
        .unwrap();
        assert!(e.in_place);
        assert_eq!(e.to_yaml_value()["workspace"], "in-place");
        assert_eq!(EnvSpec::from_value(&e.to_yaml_value()).unwrap(), e);
        let copy = EnvSpec::from_yaml("name: c\nprovider: local\nworkspace: copy\n").unwrap();
        assert!(!copy.in_place);
        assert!(copy.to_yaml_value().get("workspace").is_none());
    }

    #[test]
    fn allowlists_are_read_for_every_provider() {
        for p in ["local", "docker\nimage: i"] {
            let s = EnvSpec::from_yaml(&format!(
                "name: l\nprovider: {p}\negress: {{allowlist: [a.test, '*.b.test', 192.0.2.1]}}\n"
            ))
            .unwrap();
            assert_eq!(
                s.egress,
                Egress::Allowlist(vec!["a.test".into(), "*.b.test".into(), "192.0.2.1".into()])
            );
            assert_eq!(EnvSpec::from_yaml(&s.to_yaml()).unwrap(), s);
        }
        // A host network cannot hold an allowlist.
        let e = err("name: a\nprovider: local\nnetwork: host\negress: {allowlist: [a.test]}\n");
        assert!(
            e.starts_with("network:") && e.contains("egress can only be open"),
            "{e}"
        );
        for bad in [
            "'*'",
            "'*.'",
            "'a.*.test'",
            "'http://a.test'",
            "'a.test:443'",
            "'a b'",
        ] {
            let e = err(&format!(
                "name: a\nprovider: local\negress: {{allowlist: [{bad}]}}\n"
            ));
            assert!(
                e.starts_with("egress.allowlist:") && e.contains("not a host name"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn kubernetes_and_e2b_default_to_no_split_and_allow_allowlists() {
        let s = EnvSpec::from_yaml(
            "name: k\nprovider: kubernetes\nimage: i\negress: {allowlist: [GitHub.com, '*.pkg.example.com']}\n",
        )
        .unwrap();
        assert!(!s.uid_split);
        assert_eq!(
            s.egress,
            Egress::Allowlist(vec!["github.com".into(), "*.pkg.example.com".into()])
        );
    }

    #[test]
    fn sizes_parse_with_units() {
        for (v, n) in [
            (Value::from("512m"), 512u64 << 20),
            (Value::from("1.5G"), 3 << 29),
            (Value::from("64kb"), 64 << 10),
            (Value::from(4096), 4096),
        ] {
            assert_eq!(parse_size("m", &v).unwrap(), n);
        }
        assert!(parse_size("m", &Value::from("0")).is_err());
        // Found by `scripts/fuzz env_yaml`: a size under one byte was taken as a limit of 0 (no
        // limit for Docker), and what `hangar env show` printed for it did not read back.
        for tiny in ["0.1b", "0.5", "0.0000001k", "1e-300g"] {
            assert!(parse_size("m", &Value::from(tiny)).is_err(), "{tiny}");
        }
        let e = err("name: a\nprovider: docker\nimage: i\nresources: {memory: '0.5'}\n");
        assert!(e.starts_with("resources.memory:"), "{e}");
        assert!(parse_size("m", &Value::from("12x")).is_err());
    }
}
