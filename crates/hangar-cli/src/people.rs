//! `hangar person add|list|rm` and `hangar token create|list|revoke`.
//!
//! People and `token create` work on the store directly, on the server's machine (whoever can
//! open the store and its master key is the operator, trusted like an admin; the audit names
//! them as the local user). `token list` and `token revoke` go through the API: to the server
//! at HANGAR_URL with HANGAR_TOKEN (your own tokens, anyone's for an admin), else in this
//! process with the local user's token.

use std::path::Path;
use std::process::ExitCode;

use hangar_api as api;
use hangar_store::{NewToken, Role, Store};
use serde_json::json;

use crate::exit::CliError;
use crate::local::local_person;
use crate::serve::{Plane, runtime};
use crate::sessions::{time, with_api};
use crate::{api::seg, progress};

fn fail(e: hangar_store::StoreError) -> CliError {
    match e {
        hangar_store::StoreError::Invalid(m) => CliError::Usage(m),
        e => CliError::Failed(e.to_string()),
    }
}

/// Runs `f` on this machine's store.
pub(crate) fn on_store<F, Fut>(home: &Path, f: F) -> Result<ExitCode, CliError>
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = Result<ExitCode, CliError>>,
{
    let settings = Plane::from_env(home);
    runtime()?.block_on(async {
        let store = settings.open(home).await?;
        f(store).await
    })
}

/// `hangar person add [--admin | --viewer] EMAIL`.
pub fn person_add(
    home: &Path,
    email: &str,
    admin: bool,
    viewer: bool,
) -> Result<ExitCode, CliError> {
    let role = match (admin, viewer) {
        (true, _) => Role::Admin,
        (false, true) => Role::Viewer,
        (false, false) => Role::Member,
    };
    on_store(home, |store| async move {
        let p = store
            .add_person(email, role, &local_person())
            .await
            .map_err(fail)?;
        progress::say(&format!("person {} added ({})", p.email, p.role.as_str()));
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar person list [--json]`.
pub fn person_list(home: &Path, json_out: bool) -> Result<ExitCode, CliError> {
    on_store(home, |store| async move {
        for p in store.people().await.map_err(fail)? {
            if json_out {
                progress::say(
                    &json!({"id": p.id, "email": p.email, "role": p.role.as_str(), "created_at": p.created_at})
                        .to_string(),
                );
            } else {
                progress::say(&format!(
                    "{}  {}  {}",
                    p.email,
                    p.role.as_str(),
                    time(p.created_at)
                ));
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar person rm EMAIL`: their tokens are revoked (a running server refuses them within a
/// second); their secrets are deleted.
pub fn person_rm(home: &Path, email: &str) -> Result<ExitCode, CliError> {
    on_store(home, |store| async move {
        if !store
            .remove_person(email, &local_person())
            .await
            .map_err(fail)?
        {
            return Err(CliError::Failed(format!("{email} is not a person here")));
        }
        progress::say(&format!(
            "person {email} removed; their tokens are revoked and their secrets deleted"
        ));
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar token create --person EMAIL [--name N] [--expires D]`: prints `id: ID` first and the
/// token alone on the last line (only its hash is stored). An unknown EMAIL is added as a member
/// first (the machine's operator is trusted), saying so on stderr.
pub fn token_create(
    home: &Path,
    person: &str,
    name: Option<&str>,
    expires: Option<&str>,
) -> Result<ExitCode, CliError> {
    if !person.contains('@') {
        return Err(CliError::Usage(format!(
            "{person:?} is not an email address"
        )));
    }
    let lifetime_ms = match expires {
        Some(e) => api::lifetime_ms(e).map_err(CliError::Usage)?,
        None => hangar_store::DEFAULT_LIFETIME_MS,
    };
    on_store(home, |store| async move {
        let operator = local_person();
        match store.person(person).await.map_err(fail)? {
            None => {
                store
                    .add_person(person, Role::Member, &operator)
                    .await
                    .map_err(fail)?;
                progress::note(&format!(
                    "{person} was not a person here: added as a member (`hangar person add --admin {person}` makes an admin)"
                ));
            }
            Some(p) if p.removed_at.is_some() => {
                return Err(CliError::Failed(format!(
                    "{person} was removed; add them again first (`hangar person add {person}`)"
                )));
            }
            Some(_) => {}
        }
        let t = store
            .create_token(NewToken {
                person,
                name: name.unwrap_or_default(),
                lifetime_ms,
                actor: &operator,
            })
            .await
            .map_err(fail)?;
        progress::say(&format!("id: {}", t.id));
        progress::say(&format!("expires: {}", time(t.expires_at)));
        progress::say(&t.token);
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar token list [--json]`: your tokens (anyone's for an admin); never a token or a hash.
pub fn token_list(home: &Path, json_out: bool) -> Result<ExitCode, CliError> {
    with_api(home, true, |api| async move {
        let page: api::Tokens = api.get_as("/v1/tokens").await.map_err(|e| e.into_cli())?;
        for t in page.tokens {
            if json_out {
                let line = serde_json::to_string(&t)
                    .map_err(|e| CliError::Failed(format!("cannot show token {}: {e}", t.id)))?;
                progress::say(&line);
                continue;
            }
            let state = match (t.revoked_at, t.expires_at) {
                (Some(at), _) => format!("revoked {}", time(at)),
                (None, Some(at)) => format!("expires {}", time(at)),
                (None, None) => "no expiry".to_owned(),
            };
            let used = t.last_used_at.map_or_else(
                || "never used".to_owned(),
                |at| format!("used {}", time(at)),
            );
            let name = if t.name.is_empty() { "-" } else { &t.name };
            progress::say(&format!(
                "{}  {}  {}  {}  {}",
                t.id, t.person, name, state, used
            ));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar token revoke ID`: your own (anyone's for an admin); refused at once everywhere.
pub fn token_revoke(home: &Path, id: &str) -> Result<ExitCode, CliError> {
    with_api(home, true, |api| async move {
        let r: api::TokenRevoked = api
            .delete_as(&format!("/v1/tokens/{}", seg(id)))
            .await
            .map_err(crate::sessions::not_found("token", id))?;
        progress::say(&format!("token {} revoked", r.revoked));
        Ok(ExitCode::SUCCESS)
    })
}
