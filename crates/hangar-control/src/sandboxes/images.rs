//! A docker environment's image (issue 23): pulled when this machine lacks it, before a sandbox
//! of the environment is made, and on request (`hangar env apply --pull`, `POST
//! /v1/environments/{name}/pull`), with the environment's registry login: its credential
//! [`REGISTRY_AUTH`] in the vault (`hangar credential set DOCKER_REGISTRY_AUTH --environment
//! ENV`), handed to dockerd for the pull only, never to a sandbox (no harness takes that name).
//!
//! The pull itself, its progress lines and its errors are hangar-sandbox's
//! (`DockerProvider::ensure_image`).

use hangar_sandbox::{EnvSpec, ProviderKind, REGISTRY_AUTH, RegistryAuth};
use hangar_store::SecretOwner;
use serde_json::json;

use crate::error::ControlError;
use crate::sandboxes::{Sandboxes, harness_binds};

impl Sandboxes {
    /// Environment `env`'s registry login, if it keeps one.
    pub(crate) async fn registry_auth(
        &self,
        env: &str,
    ) -> Result<Option<RegistryAuth>, ControlError> {
        let owner = SecretOwner::Environment(env.to_owned());
        // The names first: an environment without the credential needs nothing opened.
        if !self
            .store
            .secret_names(&owner)
            .await?
            .iter()
            .any(|n| n == REGISTRY_AUTH)
        {
            return Ok(None);
        }
        let secrets = self.store.secrets_of(&owner).await?;
        let Some((_, secret)) = secrets.iter().find(|(n, _)| n == REGISTRY_AUTH) else {
            return Ok(None);
        };
        let text = std::str::from_utf8(secret.expose()).map_err(|_| {
            ControlError::Invalid(format!(
                "environment {env}: the credential {REGISTRY_AUTH} is not UTF-8 text; set it again"
            ))
        })?;
        RegistryAuth::from_json(text)
            .map(Some)
            .map_err(|e| ControlError::Invalid(format!("environment {env}: {e}")))
    }

    /// Puts docker environment `spec`'s image on this machine when it is not there (with the
    /// environment's registry login), each progress line to `progress`; true when it pulled.
    pub(crate) async fn ensure_image(
        &self,
        spec: &EnvSpec,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ControlError> {
        let auth = self.registry_auth(&spec.name).await?;
        let docker = self.providers.docker(harness_binds(&self.tools)).await?;
        Ok(docker.ensure_image(spec, auth.as_ref(), progress).await?)
    }

    /// Environment `env`'s spec, if its image can be pulled here: a docker environment, and
    /// dockerd answers. What [`Sandboxes::pull_image`] takes; its errors come before any pull
    /// starts (a server answers them with their status).
    pub async fn image_to_pull(&self, env: &str) -> Result<EnvSpec, ControlError> {
        let row = self.store.environment(env).await.map_err(|e| match e {
            hangar_store::StoreError::NotFound { .. } => ControlError::NotFound(format!(
                "no environment {env:?} (`hangar env list` shows them; `hangar env apply FILE` makes one)"
            )),
            e => e.into(),
        })?;
        let spec = crate::sandboxes::envs::spec_of(&row)?;
        if spec.provider != ProviderKind::Docker {
            return Err(ControlError::Invalid(format!(
                "environment {env} is for provider {}: only a docker environment's image is pulled (kubernetes and e2b fetch their own; a local sandbox has none)",
                spec.provider
            )));
        }
        self.providers.docker(harness_binds(&self.tools)).await?;
        Ok(spec)
    }

    /// Pulls docker environment `spec`'s image now unless it is here (what `hangar env apply
    /// --pull` asks), each progress line to `progress`; audited as `environment.pulled`. True
    /// when it pulled.
    pub async fn pull_image(
        &self,
        spec: &EnvSpec,
        person: &str,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ControlError> {
        let pulled = self.ensure_image(spec, progress).await?;
        self.store
            .audit()
            .append(
                person,
                "environment.pulled",
                &json!({"environment": spec.name, "image": spec.image, "pulled": pulled}),
            )
            .await?;
        Ok(pulled)
    }
}
