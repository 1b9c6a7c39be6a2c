//! Pulling a docker environment's image when this machine lacks it (issue 23): the Engine API's
//! `POST /images/create` (bollard's `create_image`), followed to its end, with progress lines and
//! the environment's registry login.
//!
//! The login is the environment's credential [`REGISTRY_AUTH`] in the vault (`hangar credential
//! set DOCKER_REGISTRY_AUTH --environment ENV`, JSON `{"username", "password"}` or
//! `{"identitytoken"}`), handed to dockerd for this pull only (its `X-Registry-Auth` header, with
//! `serveraddress` the image's registry host); it never reaches a sandbox.
//!
//! Progress: one line per layer's change of state (`Pulling fs layer`, `Downloading`, `Pull
//! complete`, …) and, while a layer downloads or extracts, at most one every
//! [`PROGRESS_EVERY`]; each line goes to the caller's callback and to `tracing` (info).
//!
//! A failed pull names the image, the registry and the registry's own words, and says what a
//! person can do: fix the name, keep a login for the environment, or put the image on the
//! machine themselves (`docker load`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::auth::DockerCredentials;
use bollard::errors::Error as DockerError;
use bollard::models::CreateImageInfo;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;
use serde::Deserialize;

use crate::{DockerProvider, EnvSpec, SandboxError};

/// The environment credential holding the registry login for its image.
pub const REGISTRY_AUTH: &str = "DOCKER_REGISTRY_AUTH";

/// At most one progress line per layer this often while it downloads or extracts.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// A registry login: a user and password, or an identity token (what `docker login` keeps).
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryAuth {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets themselves.
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("identitytoken", &self.identitytoken.as_ref().map(|_| "…"))
            .finish()
    }
}

impl RegistryAuth {
    /// A user and password.
    pub fn basic(username: &str, password: &str) -> RegistryAuth {
        RegistryAuth {
            username: Some(username.to_owned()),
            password: Some(password.to_owned()),
            identitytoken: None,
        }
    }

    /// The credential's value: `{"username": "...", "password": "..."}` or
    /// `{"identitytoken": "..."}`; the error says which shape is wanted (never the value).
    pub fn from_json(text: &str) -> Result<RegistryAuth, SandboxError> {
        let shape = r#"{"username": "...", "password": "..."} or {"identitytoken": "..."}"#;
        let auth: RegistryAuth = serde_json::from_str(text).map_err(|e| {
            // serde's message may quote the value; say only where it went wrong.
            let at = format!("line {} column {}", e.line(), e.column());
            SandboxError::Invalid(format!(
                "the credential {REGISTRY_AUTH} is not {shape} (at {at}); set it again"
            ))
        })?;
        let basic = auth.username.is_some() && auth.password.is_some();
        if !basic && auth.identitytoken.is_none() {
            return Err(SandboxError::Invalid(format!(
                "the credential {REGISTRY_AUTH} has neither a username with a password nor an identitytoken: use {shape}"
            )));
        }
        Ok(auth)
    }

    fn credentials(&self, image: &str) -> DockerCredentials {
        DockerCredentials {
            username: self.username.clone(),
            password: self.password.clone(),
            identitytoken: self.identitytoken.clone(),
            serveraddress: registry_of(image).map(str::to_owned),
            ..Default::default()
        }
    }
}

/// The registry host an image reference names (`host[:port]/…`, `localhost/…`); `None` for a
/// short name (docker's default registry).
pub fn registry_of(image: &str) -> Option<&str> {
    let (first, _) = image.split_once('/')?;
    (first.contains('.') || first.contains(':') || first == "localhost").then_some(first)
}

/// The reference as the Engine API takes it: the name, and the tag to pull (`latest` when it
/// names neither a tag nor a digest: without one dockerd would pull every tag).
fn pull_ref(image: &str) -> (String, Option<String>) {
    if image.contains('@') {
        return (image.to_owned(), None);
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some(_) => (image.to_owned(), None),
        None => (image.to_owned(), Some("latest".to_owned())),
    }
}

/// Turns the pull's stream into progress lines, each layer's at most every [`PROGRESS_EVERY`]
/// unless its state changed.
#[derive(Debug, Default)]
pub struct Progress {
    last: HashMap<String, (String, Instant)>,
}

impl Progress {
    /// The line for one message of the stream, or `None` when it is too soon for another.
    pub fn line(&mut self, info: &CreateImageInfo, now: Instant) -> Option<String> {
        let status = info.status.as_deref()?.trim();
        if status.is_empty() {
            return None;
        }
        let Some(id) = info.id.as_deref().filter(|i| !i.is_empty()) else {
            return Some(status.to_owned());
        };
        if let Some((was, at)) = self.last.get(id)
            && was == status
            && now.duration_since(*at) < PROGRESS_EVERY
        {
            return None;
        }
        self.last.insert(id.to_owned(), (status.to_owned(), now));
        let amount = info
            .progress_detail
            .as_ref()
            .and_then(|d| Some((d.current?, d.total?)))
            .filter(|(_, total)| *total > 0)
            .map(|(current, total)| format!(" {} / {}", size(current), size(total)))
            .unwrap_or_default();
        Some(format!("{id}: {status}{amount}"))
    }
}

fn size(bytes: i64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

/// What the registry (through dockerd) said.
fn registry_message(e: &DockerError) -> String {
    match e {
        DockerError::DockerResponseServerError { message, .. } => message.trim().to_owned(),
        DockerError::DockerStreamError { error } => error.trim().to_owned(),
        other => other.to_string(),
    }
}

/// Why the pull of `env`'s image failed, and what a person can do about it.
fn pull_failed(env: &EnvSpec, image: &str, with_auth: bool, said: &str) -> SandboxError {
    let registry = registry_of(image).unwrap_or("docker's default registry");
    let login = if with_auth {
        format!(" (with environment {}'s {REGISTRY_AUTH})", env.name)
    } else {
        String::new()
    };
    SandboxError::Unavailable(format!(
        "image {image} is not on this machine and pulling it from {registry}{login} failed: {said}. \
         Check the image's name and that the registry answers; if it needs a login, keep one for the environment \
         (`hangar credential set {REGISTRY_AUTH} --environment {}`, the value on stdin: \
         {{\"username\": \"...\", \"password\": \"...\"}} or {{\"identitytoken\": \"...\"}}); \
         or put the image on this machine yourself (docker load)",
        env.name
    ))
}

impl DockerProvider {
    /// Makes sure `env`'s image is on this machine: when it is not, pulls it (with `auth`, the
    /// environment's [`REGISTRY_AUTH`], when given), each progress line to `progress` and to
    /// `tracing`. True when it pulled.
    pub async fn ensure_image(
        &self,
        env: &EnvSpec,
        auth: Option<&RegistryAuth>,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, SandboxError> {
        let image = env
            .image
            .as_deref()
            .ok_or_else(|| SandboxError::Invalid("image: required for provider docker".into()))?;
        match self.client().inspect_image(image).await {
            Ok(_) => return Ok(false),
            Err(e) if crate::docker::not_found(&e) => {}
            Err(e) => return Err(crate::failed(format!("docker, image {image}"), e)),
        }
        self.pull(env, image, auth, progress).await?;
        Ok(true)
    }

    /// Pulls `image`, following the stream to its end.
    async fn pull(
        &self,
        env: &EnvSpec,
        image: &str,
        auth: Option<&RegistryAuth>,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), SandboxError> {
        let (from, tag) = pull_ref(image);
        let mut options = CreateImageOptionsBuilder::default().from_image(&from);
        if let Some(t) = &tag {
            options = options.tag(t);
        }
        let mut say = |line: &str| {
            tracing::info!(image, "pull: {line}");
            progress(line);
        };
        say(&format!("pulling {image}"));
        let mut stream = self.client().create_image(
            Some(options.build()),
            None,
            auth.map(|a| a.credentials(image)),
        );
        let mut lines = Progress::default();
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| {
                let said = registry_message(&e);
                tracing::info!(image, error = %said, "pull failed");
                pull_failed(env, image, auth.is_some(), &said)
            })?;
            if let Some(line) = lines.line(&info, Instant::now()) {
                say(&line);
            }
        }
        // The stream ended: the image must be here now.
        self.client().inspect_image(image).await.map_err(|e| {
            pull_failed(
                env,
                image,
                auth.is_some(),
                &format!("the pull ended, yet the image is not here ({e})"),
            )
        })?;
        say(&format!("pulled {image}"));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use bollard::models::ProgressDetail;

    #[test]
    fn a_reference_names_its_registry_and_its_tag() {
        assert_eq!(registry_of("127.0.0.1:5005/x/y:1"), Some("127.0.0.1:5005"));
        assert_eq!(
            registry_of("registry.example.com/y"),
            Some("registry.example.com")
        );
        assert_eq!(registry_of("localhost/y"), Some("localhost"));
        assert_eq!(registry_of("library/debian:12"), None);
        assert_eq!(registry_of("debian"), None);
        assert_eq!(pull_ref("debian"), ("debian".into(), Some("latest".into())));
        assert_eq!(
            pull_ref("h:5/debian"),
            ("h:5/debian".into(), Some("latest".into()))
        );
        assert_eq!(pull_ref("h:5/debian:12"), ("h:5/debian:12".into(), None));
        assert_eq!(
            pull_ref("debian@sha256:ab"),
            ("debian@sha256:ab".into(), None)
        );
    }

    #[test]
    fn the_credential_takes_a_login_or_a_token_and_never_shows_it() {
        let a = RegistryAuth::from_json(r#"{"username": "u", "password": "p4ss"}"#).unwrap();
        let c = a.credentials("127.0.0.1:5005/i:1");
        assert_eq!(c.username.as_deref(), Some("u"));
        assert_eq!(c.password.as_deref(), Some("p4ss"));
        assert_eq!(c.serveraddress.as_deref(), Some("127.0.0.1:5005"));
        assert!(!format!("{a:?}").contains("p4ss"));
        let t = RegistryAuth::from_json(r#"{"identitytoken": "t0k"}"#).unwrap();
        assert_eq!(t.credentials("i").identitytoken.as_deref(), Some("t0k"));
        assert_eq!(t.credentials("i").serveraddress, None);
        for bad in [
            r#"{"username": "u"}"#,
            r#"{"user": "u", "password": "s3cret"}"#,
            "s3cret",
            "{}",
        ] {
            let e = RegistryAuth::from_json(bad).unwrap_err().to_string();
            assert!(e.contains(REGISTRY_AUTH) && !e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn progress_says_each_change_and_at_most_one_line_per_layer_between() {
        let info = |id: &str, status: &str, current: i64| CreateImageInfo {
            id: Some(id.into()),
            status: Some(status.into()),
            progress_detail: Some(ProgressDetail {
                current: Some(current),
                total: Some(2_000_000),
            }),
            ..Default::default()
        };
        let mut p = Progress::default();
        let t0 = Instant::now();
        assert_eq!(
            p.line(&info("a1", "Downloading", 1000), t0).as_deref(),
            Some("a1: Downloading 1.0 kB / 2.0 MB")
        );
        assert_eq!(p.line(&info("a1", "Downloading", 2000), t0), None);
        assert!(p.line(&info("b2", "Downloading", 10), t0).is_some());
        let later = t0 + PROGRESS_EVERY;
        assert!(p.line(&info("a1", "Downloading", 3000), later).is_some());
        let done = CreateImageInfo {
            id: Some("a1".into()),
            status: Some("Pull complete".into()),
            progress_detail: Some(ProgressDetail::default()),
            ..Default::default()
        };
        assert_eq!(p.line(&done, later).as_deref(), Some("a1: Pull complete"));
        let plain = CreateImageInfo {
            status: Some("Digest: sha256:ab".into()),
            ..Default::default()
        };
        assert_eq!(p.line(&plain, t0).as_deref(), Some("Digest: sha256:ab"));
    }
}
