//! Credentials in the vault, set and removed through the API (`/v1/credentials/{name}`) or on
//! the server's machine (`hangar credential set | rm`): one place that checks and audits both.
//!
//! Names starting with `hangar.` are hangar's own (issue 18): any API token could replace
//! `hangar.passport-signing-key`, make the server sign sandbox tokens with a key the caller
//! chose, and have Tower accept a passport for another person. Through the API they are refused;
//! on the server's machine each is checked against what it must hold, and a name hangar does not
//! know is refused.
//!
//! Secrets have an owner (issue 20): the server, a person or an environment
//! ([`SecretOwner`]). Who may write which owner's is the API's to decide (`hangar-server`:
//! the server's and an environment's are for admins, a person's for that person and admins);
//! here every owner's `hangar.*` names are refused, a person's or an environment's even on the
//! server's machine, since only the server's own secrets are hangar's.

use hangar_store::{Secret, SecretOwner, Store};
use serde_json::json;

use crate::error::ControlError;
use crate::governance::jwt::EdKey;
use crate::governance::passport::SIGNING_KEY;

/// The prefix of hangar's own credentials.
pub const RESERVED_PREFIX: &str = "hangar.";

/// Where a credential change comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `/v1/credentials/{name}`, with any API token: never hangar's own.
    Api,
    /// `hangar credential` on the server's machine, by whoever can open the vault.
    ServerMachine,
}

impl Origin {
    /// How the audit record says it.
    fn word(self) -> &'static str {
        match self {
            Origin::Api => "api",
            Origin::ServerMachine => "server machine",
        }
    }
}

/// hangar's own credentials: name, what it is, what its value must be.
pub const HANGAR_CREDENTIALS: &[(&str, &str, &str)] = &[(
    SIGNING_KEY,
    "the control plane's Ed25519 key that signs each sandbox's token for Tower's passports (made on first use)",
    "a 32-byte Ed25519 seed as 64 hex digits (e.g. `openssl rand -hex 32`)",
)];

fn refused_through_api(name: &str) -> ControlError {
    ControlError::NotAllowed(format!(
        "credential {name:?} is hangar's own (names starting with {RESERVED_PREFIX:?} are): it cannot be set or removed through the API; set it on the server's machine with `hangar credential set {name}` (value on stdin)"
    ))
}

/// What is stored for `name` given `value` on the server's machine: hangar's own credentials
/// checked and put in the form hangar reads; any other name as given.
fn stored_value(name: &str, value: &[u8]) -> Result<Vec<u8>, ControlError> {
    if !name.starts_with(RESERVED_PREFIX) {
        return Ok(value.to_vec());
    }
    if name == SIGNING_KEY {
        let text = std::str::from_utf8(value).unwrap_or_default().trim();
        let seed: [u8; 32] = hex::decode(text)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                ControlError::Invalid(format!(
                    "{SIGNING_KEY} must be {}, not {} bytes of something else",
                    HANGAR_CREDENTIALS[0].2,
                    value.len()
                ))
            })?;
        // Every 32-byte seed is an Ed25519 key; making it is the check that passport.rs can.
        let _ = EdKey::from_seed(&seed);
        return Ok(seed.to_vec());
    }
    let known: Vec<String> = HANGAR_CREDENTIALS
        .iter()
        .map(|(n, what, _)| format!("{n}: {what}"))
        .collect();
    Err(ControlError::Invalid(format!(
        "{name:?} is not one of hangar's credentials, and names starting with {RESERVED_PREFIX:?} are reserved for them ({}); choose another name",
        known.join("; ")
    )))
}

/// Whether a change of `owner`'s `name` from `origin` touches hangar's own names: through the
/// API never, and only the server owns them.
fn reserved_refusal(owner: &SecretOwner, name: &str, origin: Origin) -> Option<ControlError> {
    if !name.starts_with(RESERVED_PREFIX) {
        return None;
    }
    if *owner != SecretOwner::Server {
        return Some(ControlError::NotAllowed(format!(
            "credential {name:?}: names starting with {RESERVED_PREFIX:?} are reserved for hangar's own credentials, which only the server holds; choose another name for a {}'s credential",
            owner.kind()
        )));
    }
    (origin == Origin::Api).then(|| refused_through_api(name))
}

/// The audit detail naming a secret and its owner.
fn detail(owner: &SecretOwner, name: &str, origin: Origin) -> serde_json::Value {
    let mut d = json!({"name": name, "via": origin.word()});
    if *owner != SecretOwner::Server {
        d["owner"] = json!({"kind": owner.kind(), "id": owner.id()});
    }
    d
}

/// Sets the server's credential `name` and audits it (`credential.set`, by `actor`); a
/// `hangar.*` name through the API is refused and audited (`credential.refused`).
pub async fn set(
    store: &Store,
    name: &str,
    value: &[u8],
    actor: &str,
    origin: Origin,
) -> Result<(), ControlError> {
    set_owned(store, &SecretOwner::Server, name, value, actor, origin).await
}

/// Sets `owner`'s secret `name` and audits it (`credential.set`, by `actor`, naming the owner);
/// a `hangar.*` name is refused and audited (`credential.refused`) unless it is the server's,
/// set on the server's machine.
pub async fn set_owned(
    store: &Store,
    owner: &SecretOwner,
    name: &str,
    value: &[u8],
    actor: &str,
    origin: Origin,
) -> Result<(), ControlError> {
    if name.is_empty() {
        return Err(ControlError::Invalid("a credential needs a name".into()));
    }
    if let Some(refusal) = reserved_refusal(owner, name, origin) {
        return Err(refuse(store, owner, name, actor, "set", refusal).await);
    }
    let stored = stored_value(name, value)?;
    store.set_secret(owner, name, &Secret::new(stored)).await?;
    store
        .audit()
        .append(actor, "credential.set", &detail(owner, name, origin))
        .await?;
    Ok(())
}

/// Removes the server's credential `name` and audits it (`credential.removed`); `false` when
/// there was none. A `hangar.*` name through the API is refused and audited.
pub async fn remove(
    store: &Store,
    name: &str,
    actor: &str,
    origin: Origin,
) -> Result<bool, ControlError> {
    remove_owned(store, &SecretOwner::Server, name, actor, origin).await
}

/// Removes `owner`'s secret `name` and audits it (`credential.removed`); `false` when there
/// was none.
pub async fn remove_owned(
    store: &Store,
    owner: &SecretOwner,
    name: &str,
    actor: &str,
    origin: Origin,
) -> Result<bool, ControlError> {
    if let Some(refusal) = reserved_refusal(owner, name, origin) {
        return Err(refuse(store, owner, name, actor, "remove", refusal).await);
    }
    if !store.remove_secret(owner, name).await? {
        return Ok(false);
    }
    store
        .audit()
        .append(actor, "credential.removed", &detail(owner, name, origin))
        .await?;
    Ok(true)
}

/// `refusal`, after auditing it as `credential.refused` (the audit's own failure if it
/// failed).
async fn refuse(
    store: &Store,
    owner: &SecretOwner,
    name: &str,
    actor: &str,
    what: &str,
    refusal: ControlError,
) -> ControlError {
    let mut d = json!({"name": name, "action": what, "why": "hangar's own credential, not through the API"});
    if *owner != SecretOwner::Server {
        d["owner"] = json!({"kind": owner.kind(), "id": owner.id()});
        d["why"] = json!("names starting with hangar. are reserved for the server's own");
    }
    match store.audit().append(actor, "credential.refused", &d).await {
        Ok(_) => refusal,
        Err(e) => e.into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn the_signing_key_must_be_a_32_byte_seed_in_hex() {
        let hex64 = "11".repeat(32);
        assert_eq!(
            stored_value(SIGNING_KEY, format!("{hex64}\n").as_bytes()).unwrap(),
            vec![0x11; 32]
        );
        for bad in [
            "".to_owned(),
            "11".repeat(31),
            "11".repeat(33),
            "zz".repeat(32),
            "-----BEGIN PRIVATE KEY-----".to_owned(),
        ] {
            let e = stored_value(SIGNING_KEY, bad.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains("64 hex digits"), "{bad}: {e}");
        }
        let e = stored_value("hangar.other", b"x").unwrap_err().to_string();
        assert!(e.contains("not one of hangar's credentials"), "{e}");
        assert!(e.contains(SIGNING_KEY), "{e}");
        assert_eq!(stored_value("tower", b"k\n").unwrap(), b"k\n".to_vec());
    }
}
