//! Which harness CLI versions may run turns: those whose conformance suite (hangar-conformance)
//! passed, either built in (the pinned versions, whose results are checked in below and re-checked
//! by the suite in CI) or recorded in the store by `hangar harness check` (or `hangar-conformance
//! run --record`) on this installation. Any other version is refused, unless the session asks to
//! run it unverified, which its turns' manifests record (`harness_check`).
//!
//! A CLI whose version cannot be read (not an npm install) runs with a warning: there is nothing
//! to look up. Say so to operators rather than pretend it was checked.
//!
//! Non-goals: running the suite (hangar-conformance does, with the scripted model).

use std::collections::BTreeMap;

use hangar_store::{Harness, HarnessCheck, Store};
use serde::{Deserialize, Serialize};

use crate::error::ControlError;
pub use crate::launch::harness_version;

/// The suite's version. A result recorded by an older suite is not a pass for this one (2: the
/// `repo_settings` capability, issue 18).
pub const SUITE: i64 = 2;

/// What the suite checks, in the order it prints them.
pub const CAPABILITIES: &[&str] = &[
    "approval_allow",
    "approval_deny",
    "steer",
    "interrupt",
    "resume",
    "verify",
    "hook_fail_closed",
    "repo_settings",
];

/// One version's result, as the suite reports it (and as the built-in table holds it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteResult {
    pub harness: String,
    pub version: String,
    pub suite: i64,
    pub passed: bool,
    /// Capability -> `holds`, `fails: WHY` or `n/a: WHY`.
    pub capabilities: BTreeMap<String, String>,
}

const PINNED: &str = include_str!("conformance/pinned.json");

/// The pinned versions' results, as the suite found them (checked in; the suite's test in CI
/// fails when a run differs).
pub fn builtin() -> Vec<SuiteResult> {
    serde_json::from_str(PINNED).unwrap_or_default()
}

/// How a turn's harness version was let through; goes into the manifest as `harness_check`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The suite passed for this version (`built-in` or `recorded`).
    Passed { source: &'static str },
    /// The CLI's version could not be read: nothing to check it against.
    UnknownVersion,
    /// Not passed, run anyway because the session asked for it.
    Unverified { why: String },
}

impl Verdict {
    /// The manifest's `harness_check` value.
    pub fn manifest_value(&self) -> String {
        match self {
            Verdict::Passed { source } => format!("passed:{source}"),
            Verdict::UnknownVersion => "unknown-version".into(),
            Verdict::Unverified { .. } => "unverified".into(),
        }
    }

    /// The warning the turn carries, if any.
    pub fn warning(&self, harness: Harness, version: &str) -> Option<String> {
        match self {
            Verdict::Passed { .. } => None,
            Verdict::UnknownVersion => Some(format!(
                "the {} CLI's version cannot be read (not an npm install?): its conformance to hangar's suite is unchecked",
                harness.as_str()
            )),
            Verdict::Unverified { why } => Some(format!(
                "{} {version} runs unverified, as the session asked: {why}",
                harness.as_str()
            )),
        }
    }
}

/// Whether the operator's list (`HANGAR_HARNESS_VERSIONS`: `claude 2.1.328, codex`) lets
/// `harness` at `version` run; why not.
pub fn on_the_list(list: &str, harness: Harness, version: &str) -> Result<(), String> {
    let allowed = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|e| {
            let mut words = e.split_whitespace();
            words.next() == Some(harness.as_str()) && words.next().is_none_or(|v| v == version)
        });
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "{} {version} is not among the harness versions this server allows ({}: {list}); an admin adds it there",
            harness.as_str(),
            hangar_protocol::env::HANGAR_HARNESS_VERSIONS
        ))
    }
}

/// Whether `harness` at `version` may run a turn. `allow_unverified`: the session's override of
/// the suite, never of the operator's list of versions.
pub async fn check(
    store: &Store,
    harness: Harness,
    version: &str,
    allow_unverified: bool,
) -> Result<Verdict, ControlError> {
    if let Some(list) = hangar_protocol::env::var(hangar_protocol::env::HANGAR_HARNESS_VERSIONS) {
        on_the_list(&list, harness, version).map_err(ControlError::Refused)?;
    }
    if version == "unknown" || version.is_empty() {
        return Ok(Verdict::UnknownVersion);
    }
    let built_in = builtin()
        .into_iter()
        .find(|r| r.harness == harness.as_str() && r.version == version);
    if built_in
        .as_ref()
        .is_some_and(|r| r.passed && r.suite == SUITE)
    {
        return Ok(Verdict::Passed { source: "built-in" });
    }
    let recorded = store.harness_check(harness, version).await?;
    if let Some(r) = &recorded
        && r.passed
        && r.suite == SUITE
    {
        return Ok(Verdict::Passed { source: "recorded" });
    }
    let why = why_not(recorded.as_ref(), built_in.as_ref());
    if allow_unverified {
        return Ok(Verdict::Unverified { why });
    }
    let flag = match harness {
        Harness::Claude => "--claude",
        Harness::Codex => "--codex",
    };
    Err(ControlError::Refused(format!(
        "{} {version} has not passed hangar's conformance suite ({why}): run `hangar harness check {flag} PATH` on the server's machine (it checks that CLI with the scripted model and records the result), or start the session with --unverified-harness (its turns' manifests record it)",
        harness.as_str()
    )))
}

fn why_not(recorded: Option<&HarnessCheck>, built_in: Option<&SuiteResult>) -> String {
    if let Some(r) = recorded {
        if r.suite != SUITE {
            return format!("it was checked by suite {}, this is suite {SUITE}", r.suite);
        }
        let failed: Vec<String> = r
            .capabilities
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(_, v)| v.as_str().is_some_and(|s| s.starts_with("fails")))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        return format!("its suite failed: {}", failed.join(", "));
    }
    if let Some(b) = built_in {
        let failed: Vec<&str> = b
            .capabilities
            .iter()
            .filter(|(_, v)| v.starts_with("fails"))
            .map(|(k, _)| k.as_str())
            .collect();
        return format!("its suite failed: {}", failed.join(", "));
    }
    "the suite was never run for it here".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operators_list_names_versions_or_whole_harnesses() {
        let list = "claude 2.1.328, codex";
        assert!(on_the_list(list, Harness::Claude, "2.1.328").is_ok());
        assert!(on_the_list(list, Harness::Codex, "0.999.0").is_ok());
        let no = on_the_list(list, Harness::Claude, "2.1.330").unwrap_err();
        assert!(no.contains("claude 2.1.330 is not among"), "{no}");
        assert!(on_the_list("claude 2.1.3280", Harness::Claude, "2.1.328").is_err());
        assert!(on_the_list("", Harness::Claude, "2.1.328").is_err());
    }

    #[test]
    fn the_builtin_table_reads_and_passes_every_capability_for_the_pinned_versions() {
        let all = builtin();
        assert!(
            all.iter()
                .any(|r| r.harness == "claude" && r.passed && r.suite == SUITE)
        );
        assert!(
            all.iter()
                .any(|r| r.harness == "codex" && r.passed && r.suite == SUITE)
        );
        for r in &all {
            let names: Vec<&str> = r.capabilities.keys().map(String::as_str).collect();
            let mut want = CAPABILITIES.to_vec();
            want.sort_unstable();
            assert_eq!(names, want, "{} {}", r.harness, r.version);
        }
    }
}
