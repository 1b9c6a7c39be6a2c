//! `hangar login URL [--token-stdin]`: gets a token for a server and keeps it, per server, in
//! `$XDG_CONFIG_HOME/hangar/hosts.json` (else `~/.config/hangar/hosts.json`; the file 0600, its
//! folder 0700). With `--token-stdin` the token is read from stdin (one made with `hangar token
//! create` or in the web page's person menu); without, the server signs the person in with its
//! OpenID issuer's device flow (RFC 8628): the CLI prints where to go and the code to enter, and
//! waits. The CLI then uses the kept token for that server whenever `HANGAR_TOKEN` is not set.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hangar_api as api;
use serde::{Deserialize, Serialize};

use crate::api::Api;
use crate::exit::CliError;
use crate::progress;

const HOSTS_FILE: &str = "hosts.json";

/// The kept tokens, by server URL (no trailing slash).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Hosts {
    #[serde(default)]
    servers: BTreeMap<String, Host>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Host {
    token: String,
    #[serde(default)]
    person: Option<String>,
}

/// `$XDG_CONFIG_HOME/hangar`, else `~/.config/hangar`.
fn config_dir() -> Option<PathBuf> {
    hangar_protocol::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| hangar_protocol::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))
        .map(|d| d.join("hangar"))
}

fn normal(url: &str) -> String {
    url.trim().trim_end_matches('/').to_owned()
}

fn read_hosts(path: &Path) -> Result<Hosts, CliError> {
    match std::fs::read_to_string(path) {
        Ok(s) => serde_json::from_str(&s).map_err(|e| {
            CliError::Failed(format!(
                "{} is not a hosts file hangar wrote ({e}); move it away and log in again",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Hosts::default()),
        Err(e) => Err(CliError::Failed(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// The token kept for `url`, if any.
pub fn stored_token(url: &str) -> Option<String> {
    let path = config_dir()?.join(HOSTS_FILE);
    let hosts = read_hosts(&path).ok()?;
    hosts.servers.get(&normal(url)).map(|h| h.token.clone())
}

/// Keeps `token` for `url`: written whole to a new 0600 file, then renamed over the old one, so
/// no reader sees half a file and the token is never readable by others, even for a moment.
fn store(url: &str, token: &str, person: Option<String>) -> Result<PathBuf, CliError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = config_dir().ok_or_else(|| {
        CliError::Failed(
            "neither XDG_CONFIG_HOME nor HOME is set: nowhere to keep the token".into(),
        )
    })?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join(HOSTS_FILE);
    let mut hosts = read_hosts(&path)?;
    hosts.servers.insert(
        normal(url),
        Host {
            token: token.to_owned(),
            person,
        },
    );
    let text = serde_json::to_string_pretty(&hosts)
        .map_err(|e| CliError::Failed(format!("the hosts file as JSON: {e}")))?;
    let tmp = dir.join(format!(".{HOSTS_FILE}.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::Failed(format!("cannot write {}: {e}", path.display()))
    })?;
    Ok(path)
}

/// `hangar login URL [--token-stdin]`.
pub fn login(url: &str, token_stdin: bool) -> Result<ExitCode, CliError> {
    let url = normal(url);
    crate::serve::runtime()?.block_on(async {
        let (token, person) = if token_stdin {
            let mut t = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut t)
                .map_err(|e| CliError::Failed(format!("reading the token from stdin: {e}")))?;
            let t = t.trim().to_owned();
            if t.is_empty() {
                return Err(CliError::Usage("no token on stdin".into()));
            }
            // Checked before it is kept: a mistyped token fails here, not at the next command.
            let me: api::Me = Api::new(&url, Some(t.clone()))?
                .get_as("/v1/me")
                .await
                .map_err(|e| CliError::Failed(format!("{url} does not take this token: {e}")))?;
            (t, me.person)
        } else {
            let signed = device(&url).await?;
            (signed.token, signed.person)
        };
        let path = store(&url, &token, Some(person.clone()))?;
        progress::say(&format!("signed in to {url} as {person}"));
        progress::note(&format!("the token is kept in {}", path.display()));
        Ok(ExitCode::SUCCESS)
    })
}

/// The device flow, through the server (which holds the device code and the client secret).
async fn device(url: &str) -> Result<api::SignedIn, CliError> {
    let api = Api::new(url, None)?;
    let config: api::AuthConfig = api
        .get_as("/v1/auth")
        .await
        .map_err(|e| CliError::Failed(format!("{url}: {e}")))?;
    let Some(issuer) = config.oidc else {
        return Err(CliError::Usage(format!(
            "{url} signs no one in with an OpenID issuer: get a token from its admin (`hangar token create --person EMAIL` on the server's machine) and run `hangar login {url} --token-stdin`"
        )));
    };
    let started: api::DeviceStarted = api
        .post_as("/v1/auth/device", &api::Empty {})
        .await
        .map_err(|e| CliError::Failed(e.to_string()))?;
    progress::say(&format!(
        "sign in at {} with {}",
        started.verification_uri, issuer.name
    ));
    progress::say(&format!("code: {}", started.user_code));
    if let Some(full) = &started.verification_uri_complete {
        progress::say(&format!("or open: {full}"));
    }
    progress::note("waiting for the sign-in to be approved...");
    loop {
        let polled: api::DevicePolled = api
            .post_as(
                "/v1/auth/device/poll",
                &api::DevicePoll {
                    flow: started.flow.clone(),
                },
            )
            .await
            .map_err(|e| CliError::Failed(e.to_string()))?;
        if let Some(s) = polled.signed_in {
            return Ok(s);
        }
    }
}
