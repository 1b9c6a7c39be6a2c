//! Environments (H1): `hangar env apply | list | show` and their API.
//!
//! The store keeps an environment's spec as the validated JSON ([`EnvSpec`]); a spec that no
//! longer validates (written by an older hangar) is shown with the reason rather than hidden.

use hangar_sandbox::EnvSpec;
use hangar_store::{Environment, Policy, StoreError};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::ControlError;
use crate::sandboxes::Sandboxes;

/// An environment as the API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct EnvView {
    pub name: String,
    /// The validated spec, as a person would write it (see [`EnvSpec::to_yaml_value`]).
    pub spec: Value,
    /// Why the stored spec does not validate any more, if it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    pub created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<i64>,
}

/// The stored spec, validated; the row's name wins over a name inside the spec.
pub(crate) fn spec_of(env: &Environment) -> Result<EnvSpec, ControlError> {
    let mut v = env.spec.clone();
    if let Some(m) = v.as_object_mut() {
        m.insert("name".into(), env.name.clone().into());
    }
    EnvSpec::from_value(&v).map_err(|e| {
        ControlError::Invalid(format!(
            "environment {}: {e} (fix it with `hangar env apply`)",
            env.name
        ))
    })
}

fn view(env: &Environment) -> EnvView {
    let (spec, invalid) = match spec_of(env) {
        Ok(s) => (s.to_yaml_value(), None),
        Err(e) => (env.spec.clone(), Some(e.to_string())),
    };
    EnvView {
        name: env.name.clone(),
        spec,
        invalid,
        created_at: env.created_at,
        updated_at: env.updated_at,
    }
}

/// An environment's `governance.rules` (`{add: [rule tables], disable: [ids]}`) as the rules file
/// the driver reads with `--rules` (hangar-rules' TOML: `disable = [...]`, `[[rule]]`), checked
/// by hangar-rules itself; `None` when the environment changes nothing.
pub(crate) fn rules_file(env: &EnvSpec) -> Result<Option<String>, ControlError> {
    let Some(r) = &env.governance.rules else {
        return Ok(None);
    };
    let mut file = serde_json::Map::new();
    if let Some(d) = r.get("disable") {
        file.insert("disable".into(), d.clone());
    }
    if let Some(a) = r.get("add") {
        file.insert("rule".into(), a.clone());
    }
    let text = toml::to_string(&Value::Object(file)).map_err(|e| {
        ControlError::Invalid(format!(
            "governance.rules: cannot be written as a rules file: {e}"
        ))
    })?;
    hangar_rules::Rules::configure(&text)
        .map_err(|e| ControlError::Invalid(format!("governance.rules: {e}")))?;
    Ok(Some(text))
}

/// What a turn's manifest records of its deny-risky rules: the default set changed by a rules
/// file ([`rules_file`]; `None`: the default set as it is), with the digest of the rules in force.
pub(crate) fn rules_record(
    rules_file: Option<&str>,
) -> Result<hangar_events::RulesRecord, ControlError> {
    use sha2::Digest;
    let rules = hangar_rules::Rules::configure(rules_file.unwrap_or(""))
        .map_err(|e| ControlError::Invalid(format!("governance.rules: {e}")))?;
    let json = serde_json::to_vec(rules.rules())
        .map_err(|e| ControlError::Internal(format!("the rules in force: {e}")))?;
    let summary = rules.summary();
    Ok(hangar_events::RulesRecord {
        disabled: summary.disabled,
        added: summary.added,
        digest: hex::encode(sha2::Sha256::digest(&json)),
    })
}

/// How much a policy governs, for an environment's floor: `auto` asks nobody, `ask` has a person
/// answer every call the rules allow, `governed` has Tower answer it (the team's policy, final
/// and audited there; a person still signs through Tower's `wait`), so a person at the
/// session's keyboard cannot stand in for it.
fn strength(p: Policy) -> u8 {
    match p {
        Policy::Auto => 0,
        Policy::Ask => 1,
        Policy::Governed => 2,
    }
}

/// The policy a session in a sandbox of `env` runs under: the one asked for, else the
/// environment's `governance.policy`, else `ask`. The environment's policy is a floor: a session
/// asking for a weaker one is refused, naming the floor, rather than raised to it (a session
/// raised from `auto` would wait on approvals its caller never expected to answer; a refusal
/// says so at once, and what was asked is what runs).
pub(crate) fn session_policy(
    asked: Option<Policy>,
    env: Option<&EnvSpec>,
) -> Result<Policy, ControlError> {
    let floor = match env.and_then(|e| e.governance.policy.as_deref()) {
        None => None,
        Some(p) => Some(p.parse::<Policy>().map_err(|_| {
            ControlError::Invalid(format!(
                "environment {}: governance.policy {p:?} is not ask, auto or governed (fix it with `hangar env apply`)",
                env.map(|e| e.name.as_str()).unwrap_or_default()
            ))
        })?),
    };
    match (asked, floor) {
        (Some(a), Some(f)) if strength(a) < strength(f) => Err(ControlError::Invalid(format!(
            "policy {a} is refused: environment {}'s governance.policy is {f}, the floor for its sessions (auto < ask < governed); ask for {f} or stronger, or leave the policy out to get {f}",
            env.map(|e| e.name.as_str()).unwrap_or_default()
        ))),
        (Some(a), _) => Ok(a),
        (None, Some(f)) => Ok(f),
        (None, None) => Ok(Policy::Ask),
    }
}

impl Sandboxes {
    /// Validates `spec` and stores it under its name, replacing an earlier one (sandboxes
    /// already made keep the spec they were made with). Returns the view and whether it is new.
    pub async fn apply_environment(
        &self,
        spec: &Value,
        person: &str,
    ) -> Result<(EnvView, bool), ControlError> {
        let env = EnvSpec::from_value(spec).map_err(|e| ControlError::Invalid(e.to_string()))?;
        rules_file(&env)?;
        let stored = env.to_yaml_value();
        let created = self.store.put_environment(&env.name, &stored).await?;
        self.store
            .audit()
            .append(
                person,
                if created {
                    "environment.created"
                } else {
                    "environment.replaced"
                },
                &json!({"environment": env.name, "spec": stored}),
            )
            .await?;
        let row = self.store.environment(&env.name).await?;
        Ok((view(&row), created))
    }

    /// One environment.
    pub async fn environment(&self, name: &str) -> Result<EnvView, ControlError> {
        match self.store.environment(name).await {
            Ok(e) => Ok(view(&e)),
            Err(StoreError::NotFound { .. }) => Err(ControlError::NotFound(format!(
                "no environment {name:?} (`hangar env list` shows them; `hangar env apply FILE` makes one)"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Every environment, by name.
    pub async fn environments(&self) -> Result<Vec<EnvView>, ControlError> {
        Ok(self.store.environments().await?.iter().map(view).collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn env(policy: Option<&str>) -> EnvSpec {
        let g = policy.map_or(String::new(), |p| format!("governance: {{policy: {p}}}\n"));
        EnvSpec::from_yaml(&format!("name: team\nprovider: local\n{g}")).unwrap()
    }

    #[test]
    fn an_environments_policy_is_the_floor_of_its_sessions() {
        use Policy::{Ask, Auto, Governed};
        let order = [Auto, Ask, Governed];
        for (i, floor) in order.iter().enumerate() {
            let e = env(Some(floor.as_str()));
            // Nothing asked: the floor itself.
            assert_eq!(session_policy(None, Some(&e)).unwrap(), *floor);
            for (j, asked) in order.iter().enumerate() {
                let got = session_policy(Some(*asked), Some(&e));
                if j < i {
                    let why = got.unwrap_err().to_string();
                    assert!(
                        why.contains(&format!("governance.policy is {floor}"))
                            && why.contains(&format!("policy {asked} is refused")),
                        "{why}"
                    );
                } else {
                    assert_eq!(got.unwrap(), *asked, "{asked} over {floor}");
                }
            }
        }
        // No floor: what was asked, else ask.
        assert_eq!(session_policy(None, Some(&env(None))).unwrap(), Ask);
        assert_eq!(session_policy(None, None).unwrap(), Ask);
        assert_eq!(session_policy(Some(Auto), None).unwrap(), Auto);
    }
}
