//! A turn's manifest (H4) and its `harness_digest`.
//!
//! Every turn records what ran: the harness and its version, the argv, the **names** (never the
//! values) of the environment variables passed, the policy asked for and the policy in effect,
//! the hooks with their digests, the driver's digest, the deny-risky rules in force (which
//! default rules the environment turned off, which it added, and a digest of the whole set),
//! and `harness_digest`: SHA-256 over the canonical encoding below of all of it, so two turns
//! that ran the same thing have the same digest and any difference changes it.
//!
//! # Canonical encoding (`hangar.manifest.v1`, and `v2` with the rules)
//!
//! A *string* is its length in bytes as a big-endian `u64`, then its UTF-8 bytes. A *list* is
//! its number of items as a big-endian `u64`, then the items. The encoding is, in this order:
//!
//! 1. the domain tag `hangar.manifest.v1` and one NUL byte;
//! 2. `harness` (string);
//! 3. `harness_version` (string);
//! 4. `argv` (list of strings, **in order**: the order of arguments is meaningful);
//! 5. `env_names` (list of strings, **sorted** by their bytes, duplicates removed: the set of
//!    names passed, whatever order they were listed in);
//! 6. `policy_requested` (string);
//! 7. `policy_effective` (string);
//! 8. `hooks` (list, **sorted** by `(name, digest)` bytes, duplicates removed; each item is
//!    `name` (string) then `digest` (string));
//! 9. `driver_digest` (string);
//! 10. `harness_check` (string), **only when it is not empty**: how the harness's version was let
//!     run (`passed:built-in`, `passed:recorded`, `unknown-version`, `unverified`; see
//!     `hangar_control::conformance`). Manifests from before this field encode, and so digest,
//!     exactly as they did.
//!
//! A manifest with `rules` (every turn started since they were recorded) is encoded as
//! `hangar.manifest.v2`: the domain tag `hangar.manifest.v2` and one NUL byte, items 2-9 as
//! above, then
//!
//! 10. `harness_check` (string), **always**, empty when there was none;
//! 11. `rules.disabled` (list of strings, **sorted**, duplicates removed: the ids of the
//!     default rules turned off);
//! 12. `rules.added` (list of strings, **sorted**, duplicates removed: the ids of the rules
//!     added);
//! 13. `rules.digest` (string: SHA-256 of the rules in force, see [`RulesRecord::digest`]).
//!
//! A manifest without `rules` (recorded before they were) is encoded as `v1`, exactly as it
//! was, so its recorded `harness_digest` still checks; the different domain tags keep a `v1`
//! and a `v2` encoding from ever being the same bytes.
//!
//! `harness_digest` is the SHA-256 of those bytes as 64 lowercase hex digits; the manifest's own
//! `harness_digest` field is not part of the encoding. Length prefixes make the encoding
//! unambiguous (`["ab","c"]` and `["a","bc"]` differ), as in `hangar-protocol`'s command seal.
//! Digests of files ([`file_digest`]: hooks, the driver) are SHA-256 as lowercase hex.
//!
//! Non-goals: collecting the values (the driver knows its argv and hooks; this only encodes and
//! digests them), signing the manifest, storing it.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::CoreError;

/// The domain tag that starts the canonical encoding of a manifest without rules.
pub const MANIFEST_DOMAIN: &str = "hangar.manifest.v1";
/// The domain tag that starts the canonical encoding of a manifest with rules.
pub const MANIFEST_DOMAIN_V2: &str = "hangar.manifest.v2";

/// The deny-risky rules a turn ran under (`deny-risky.md`: the manifest records which default
/// rules were off).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesRecord {
    /// Ids of the default rules the environment turned off.
    pub disabled: Vec<String>,
    /// Ids of the rules the environment added.
    pub added: Vec<String>,
    /// SHA-256 (lowercase hex) of the rules in force: of their JSON array as hangar-rules
    /// writes them (`serde_json` of `Rules::rules()`, in order), so a changed default set or a
    /// changed added rule shows even when the ids are the same.
    pub digest: String,
}

/// A hook the harness ran with: what it is (its event and script, e.g.
/// `Stop: /tmp/hangar-<run>-verify/stop-hook.sh`) and the SHA-256 of its script.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Hook {
    pub name: String,
    pub digest: String,
}

/// What one turn ran. See the module docs for the canonical encoding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// `claude` | `codex`.
    pub harness: String,
    /// The harness CLI's version, e.g. `2.1.328`.
    pub harness_version: String,
    /// The harness's argv, program first.
    pub argv: Vec<String>,
    /// The names of the environment variables passed to the harness; never their values.
    pub env_names: Vec<String>,
    /// The policy the person asked for (`ask` | `auto`).
    pub policy_requested: String,
    /// The policy in effect (e.g. what the harness was started with).
    pub policy_effective: String,
    /// The hooks, with their digests.
    pub hooks: Vec<Hook>,
    /// SHA-256 of the driver binary.
    pub driver_digest: String,
    /// How the harness's version was let run (the conformance check); empty in manifests from
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub harness_check: String,
    /// The deny-risky rules in force; absent in manifests recorded before rules were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<RulesRecord>,
    /// [`harness_digest`] of the fields above, once [`Manifest::sealed`].
    #[serde(default)]
    pub harness_digest: String,
}

impl Manifest {
    /// The manifest with its `harness_digest` filled in.
    pub fn sealed(mut self) -> Manifest {
        self.harness_digest = harness_digest(&self);
        self
    }

    /// Whether `harness_digest` is the digest of the other fields.
    pub fn digest_matches(&self) -> bool {
        self.harness_digest == harness_digest(self)
    }
}

/// The canonical encoding (module docs).
pub fn canonical_bytes(m: &Manifest) -> Vec<u8> {
    let mut b = Vec::with_capacity(512);
    let domain = if m.rules.is_some() {
        MANIFEST_DOMAIN_V2
    } else {
        MANIFEST_DOMAIN
    };
    b.extend_from_slice(domain.as_bytes());
    b.push(0);
    string(&mut b, &m.harness);
    string(&mut b, &m.harness_version);
    count(&mut b, m.argv.len());
    for a in &m.argv {
        string(&mut b, a);
    }
    set(&mut b, &m.env_names);
    string(&mut b, &m.policy_requested);
    string(&mut b, &m.policy_effective);
    let mut hooks: Vec<&Hook> = m.hooks.iter().collect();
    hooks.sort_unstable();
    hooks.dedup();
    count(&mut b, hooks.len());
    for h in hooks {
        string(&mut b, &h.name);
        string(&mut b, &h.digest);
    }
    string(&mut b, &m.driver_digest);
    if let Some(r) = &m.rules {
        // v2: the check always (empty when there was none), then the rules.
        string(&mut b, &m.harness_check);
        set(&mut b, &r.disabled);
        set(&mut b, &r.added);
        string(&mut b, &r.digest);
    } else if !m.harness_check.is_empty() {
        string(&mut b, &m.harness_check);
    }
    b
}

/// A list of strings as a set: sorted by bytes, duplicates removed.
fn set(b: &mut Vec<u8>, items: &[String]) {
    let mut v: Vec<&str> = items.iter().map(String::as_str).collect();
    v.sort_unstable();
    v.dedup();
    count(b, v.len());
    for s in v {
        string(b, s);
    }
}

fn count(b: &mut Vec<u8>, n: usize) {
    b.extend_from_slice(&(n as u64).to_be_bytes());
}

fn string(b: &mut Vec<u8>, s: &str) {
    count(b, s.len());
    b.extend_from_slice(s.as_bytes());
}

/// SHA-256 of the manifest's canonical encoding, 64 lowercase hex digits.
pub fn harness_digest(m: &Manifest) -> String {
    hex::encode(Sha256::digest(canonical_bytes(m)))
}

/// SHA-256 of a file's contents, 64 lowercase hex digits, read in 64 KiB pieces.
pub fn file_digest(path: &Path) -> Result<String, CoreError> {
    let mut f = File::open(path).map_err(|e| CoreError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CoreError::io(path, e)),
        }
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
