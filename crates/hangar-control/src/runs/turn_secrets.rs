//! A turn's credentials (issue 20): its person's secrets in the vault, then its environment's
//! for the names the person has none of, handed to the driver in a file of the run's control
//! folder (`--secrets-file`), which under the uid split only hangar's user reads. The driver
//! takes the file away, passes the variables to the harness and writes the file forms (Codex's
//! `auth.json`, Vertex's key) for the agent's uid alone.
//!
//! The server's own secrets never go to a turn, and neither do the credential variables of
//! the control plane's environment unless `HANGAR_SERVER_CREDENTIALS=allow` (the single-user
//! local mode): one key in every sandbox is a key every agent can read.

use std::path::{Path, PathBuf};

use hangar_protocol::env::{HARNESS_CREDENTIAL_ENV, HARNESS_CREDENTIAL_FILES};
use hangar_store::{SecretOwner, Store};
use serde_json::{Map, Value, json};

use crate::error::ControlError;
use crate::launch::Tools;

/// The file's name in the control folder.
pub(crate) const FILE: &str = "secrets.json";

/// What the driver gets: `{"env": {NAME: value}, "files": [{"var", "file", "content"}]}`, or
/// `None` when the person and the environment keep no credential a harness takes.
///
/// A Codex model provider's key variable (`--codex-config model_providers.X.env_key=NAME`,
/// `hangar_protocol::codex_keys`) is handed on from the person's or the environment's
/// credential of that name; in the CLI's own single-user server from its environment too (a
/// `hangar serve` with `HANGAR_SERVER_CREDENTIALS=allow` passes only credential variables). Without one the turn is refused here, saying
/// what to set, rather than failing inside Codex. Those keys are the session owner's (`owner`)
/// or the environment's, never the sender's when someone else sends into the session: the
/// session's provider settings are its owner's, and could point anywhere.
pub(crate) async fn for_turn(
    store: &Store,
    person: &str,
    owner: &str,
    environment: &str,
    codex_config: &[String],
    tools: &Tools,
) -> Result<Option<Value>, ControlError> {
    let provider_keys =
        hangar_protocol::codex_keys::provider_keys(codex_config).map_err(ControlError::Invalid)?;
    // The environment's registry login is dockerd's, for pulling its image: never a turn's.
    if let Some((provider, name)) = provider_keys
        .iter()
        .find(|(_, n)| n == hangar_sandbox::REGISTRY_AUTH)
    {
        return Err(ControlError::Invalid(format!(
            "Codex's model provider {provider:?} would read its key from {name}, the environment's registry login, which only dockerd gets (to pull the image) and no turn does; name another variable in model_providers.{provider}.env_key"
        )));
    }
    let mine = store
        .secrets_of(&SecretOwner::Person(person.to_owned()))
        .await?;
    let env = store
        .secrets_of(&SecretOwner::Environment(environment.to_owned()))
        .await?;
    let owners = if person == owner {
        Vec::new()
    } else {
        store
            .secrets_of(&SecretOwner::Person(owner.to_owned()))
            .await?
    };
    let is_key = |n: &str| provider_keys.iter().any(|(_, k)| k == n);
    let mut vars = Map::new();
    let mut files: Vec<Value> = Vec::new();
    // The person's first: a name they keep is theirs, the environment's only fills in. A
    // provider's key: the sender's only when the session is theirs, else its owner's.
    let sender_may_key = person == owner;
    let tagged = mine
        .iter()
        .map(|s| (s, sender_may_key))
        // Of the owner's, only the provider keys.
        .chain(owners.iter().filter(|(n, _)| is_key(n)).map(|s| (s, true)))
        .chain(env.iter().map(|s| (s, true)));
    for ((name, secret), may_key) in tagged {
        if is_key(name) && !may_key {
            continue;
        }
        let taken = vars.contains_key(name) || files.iter().any(|f| f["secret"] == json!(name));
        if taken {
            continue;
        }
        let text = || {
            std::str::from_utf8(secret.expose())
                .map(str::to_owned)
                .map_err(|_| {
                    ControlError::Invalid(format!(
                        "the credential {name:?} is not UTF-8 text, so it cannot be handed to a harness; set it again as text"
                    ))
                })
        };
        if HARNESS_CREDENTIAL_ENV.contains(&name.as_str())
            || provider_keys.iter().any(|(_, n)| n == name)
        {
            vars.insert(name.clone(), Value::String(text()?));
        } else if let Some((_, var, file)) = HARNESS_CREDENTIAL_FILES
            .iter()
            .find(|(n, _, _)| *n == name.as_str())
        {
            files.push(json!({"secret": name, "var": var, "file": file, "content": text()?}));
        }
    }
    for (provider, name) in &provider_keys {
        if vars.contains_key(name) {
            continue;
        }
        // From the control plane's own environment: a credential variable where the server
        // passes its credentials on; any name only for the CLI's own single-user server (which
        // says so in its tools), never a team server's database password or tokens.
        let own_server = tools.env.iter().any(|(k, v)| {
            k == hangar_protocol::env::HANGAR_SERVER_CREDENTIALS
                && v == hangar_protocol::env::SERVER_CREDENTIALS_ALLOW
        });
        let may_read = crate::launch::server_credentials_pass(tools)
            && (own_server || hangar_protocol::env::is_credential_var(name));
        match may_read
            .then(|| crate::launch::setting(tools, name))
            .flatten()
        {
            Some(v) => {
                vars.insert(name.clone(), Value::String(v));
            }
            None => {
                return Err(ControlError::Invalid(format!(
                    "Codex's model provider {provider:?} reads its key from {name} (--codex-config model_providers.{provider}.env_key), and no credential of that name is kept for {person} or environment {environment:?}: set it with `hangar credential set {name} --person {person}` (value on stdin), or for everyone in the environment with --environment {environment}"
                )));
            }
        }
    }
    if vars.is_empty() && files.is_empty() {
        return Ok(None);
    }
    Ok(Some(json!({"env": vars, "files": files})))
}

/// Writes `secrets` in the control folder `ctl_here`, mode 0600 (hangar's user); its path.
pub(crate) async fn write(ctl_here: &Path, secrets: &Value) -> Result<PathBuf, ControlError> {
    let path = ctl_here.join(FILE);
    let bytes = serde_json::to_vec(secrets).map_err(|e| ControlError::Internal(e.to_string()))?;
    let p = path.clone();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::remove_file(&p);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
            .and_then(|mut f| f.write_all(&bytes))
    })
    .await
    .map_err(|e| ControlError::Internal(e.to_string()))?
    .map_err(|e| ControlError::Launch(format!("cannot write the turn's credentials: {e}")))?;
    Ok(path)
}
