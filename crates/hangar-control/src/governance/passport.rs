//! What a governed run shows Tower (T11-T15): `HANGAR_GOVERNANCE_HOOK_AUTH=key` (the default:
//! the coding agent's key, the vault credential `HANGAR_GOVERNANCE_HOOK_CREDENTIAL`) or
//! `passport` (`../shared/design/tower-contract.md`, "passports"):
//!
//! 1. the control plane mints the sandbox's token, a JWT signed (EdDSA) with its own signing key
//!    (kept in the vault as the credential [`SIGNING_KEY`], made on first use and audited; its
//!    public key is served at `<hangar>/.well-known/jwks.json`): `iss` hangar's URL
//!    (`HANGAR_URL`), `sub` `hangar:env:<env>`, `aud` Tower, `iat`, `exp` (5 minutes), `jti`,
//!    the sandbox's `person` and `email`, `sandbox`;
//! 2. it exchanges it at `TOWER/oauth/token` (RFC 8693, form-encoded, `audience` the agent
//!    `HANGAR_GOVERNANCE_HOOK_AGENT`, default `hangar`);
//! 3. it checks the passport before writing it: its signature against `TOWER/.well-known/jwks.json`,
//!    `iss` Tower, `agent`, `exp` in the future, and the sandbox's person (`sub` and `email`).
//!    No passport, no turn: the turn is refused with the reason, audited.
//!
//! The passport takes the key file's place (`<ctl>/tower.key`, hangar's user's, 0600, written by
//! an atomic rename); the driver and the hook send the file's content as the bearer token, so
//! they need no JWT code. A refresh loop per live governed run renews the passport once it has
//! under ten minutes left (and never sooner than a third of its lifetime, so a short-lived
//! passport is not renewed in a loop), and swaps the file in with `renameat2(RENAME_EXCHANGE)`,
//! which fails when the file is gone: the run's key file is removed when the run ends
//! ([`remove_key_file`]), so an ended run never gets a passport back.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hangar_sandbox::Provider as _;
use hangar_store::{Run, RunState, Sandbox, Secret, StoreError};
use serde_json::{Value, json};

use super::Governance;
use crate::error::ControlError;
use crate::governance::jwt::{self, EdKey};
use crate::launch::{Tools, setting};

/// The vault credential holding the control plane's passport signing key (an Ed25519 seed).
pub const SIGNING_KEY: &str = "hangar.passport-signing-key";
/// A passport with less than this left is renewed.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(600);
/// The sandbox token's lifetime (the contract allows at most 5 minutes).
const TOKEN_SECONDS: i64 = 300;
/// How often the refresh loop looks at its run.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long a failed renewal waits before the next try.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// One HTTP request to Tower, at most.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// The key file's name in the run's control folder.
pub const KEY_FILE: &str = "tower.key";

/// What the hook and the driver send Tower (`HANGAR_GOVERNANCE_HOOK_AUTH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookAuth {
    /// The coding agent's key, shared by every sandbox.
    Key,
    /// The sandbox's own passport.
    Passport,
}

/// `HANGAR_GOVERNANCE_HOOK_AUTH`: `key` (default) or `passport`.
pub fn hook_auth(tools: &Tools) -> Result<HookAuth, ControlError> {
    match setting(tools, hangar_protocol::env::HANGAR_GOVERNANCE_HOOK_AUTH).as_deref() {
        None | Some("key") => Ok(HookAuth::Key),
        Some("passport") => Ok(HookAuth::Passport),
        Some(other) => Err(ControlError::Invalid(format!(
            "HANGAR_GOVERNANCE_HOOK_AUTH={other:?} is neither key nor passport"
        ))),
    }
}

/// `HANGAR_GOVERNANCE_HOOK_AGENT`: the agent a passport must name (default `hangar`).
pub fn agent(tools: &Tools) -> String {
    setting(tools, hangar_protocol::env::HANGAR_GOVERNANCE_HOOK_AGENT)
        .unwrap_or_else(|| "hangar".into())
}

/// hangar's own URL, the sandbox token's issuer (Tower finds hangar's keys at
/// `<it>/.well-known/jwks.json`): `HANGAR_URL`, default `http://127.0.0.1:7700`.
pub fn issuer(tools: &Tools) -> String {
    setting(tools, hangar_protocol::env::HANGAR_URL)
        .unwrap_or_else(|| "http://127.0.0.1:7700".into())
        .trim_end_matches('/')
        .to_owned()
}

/// Who a passport is for: the sandbox's environment, id and person (an email, when it has one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub env: String,
    pub sandbox: String,
    pub person: Option<String>,
}

impl Holder {
    pub fn of(sandbox: &Sandbox) -> Holder {
        Holder {
            env: sandbox.environment.clone(),
            sandbox: sandbox.id.clone(),
            person: Some(sandbox.person.clone()).filter(|p| !p.trim().is_empty()),
        }
    }

    fn subject(&self) -> String {
        format!("hangar:env:{}", self.env)
    }
}

/// Where Tower is and which agent the passport is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TowerAt {
    /// `HANGAR_GOVERNANCE_URL`, no trailing slash.
    pub url: String,
    pub agent: String,
    /// hangar's URL (the sandbox token's `iss`).
    pub issuer: String,
}

impl TowerAt {
    pub fn from_tools(tools: &Tools) -> Result<TowerAt, ControlError> {
        let url = setting(tools, hangar_protocol::env::HANGAR_GOVERNANCE_URL).ok_or_else(|| {
            ControlError::Invalid(
                "policy governed with HANGAR_GOVERNANCE_HOOK_AUTH=passport needs HANGAR_GOVERNANCE_URL (Tower's address); set it, or use ask or auto".into(),
            )
        })?;
        Ok(TowerAt {
            url: url.trim_end_matches('/').to_owned(),
            agent: agent(tools),
            issuer: issuer(tools),
        })
    }
}

/// A passport that passed the checks, and what the refresh loop needs of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Passport {
    pub token: String,
    pub sub: String,
    pub jti: String,
    /// Seconds since the epoch, Tower's clock.
    pub iat: i64,
    pub exp: i64,
}

/// The control plane's signing key, once loaded (one lock, so two first uses make one key), and
/// the runs whose passports a refresh loop keeps, each with whether it has ended (a swap and the
/// end of a run take this lock, so no swap follows the end).
#[derive(Debug, Default)]
pub(crate) struct Keys {
    key: tokio::sync::Mutex<Option<EdKey>>,
    runs: tokio::sync::Mutex<std::collections::HashMap<String, bool>>,
}

pub(crate) fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn random_hex(n: usize) -> Result<String, ControlError> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| ControlError::Internal(format!("no randomness: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// An error with its causes (reqwest's own says only "error sending request"; the cause says a
/// certificate did not check, and so that `HANGAR_CA_FILE` is wanted).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        text.push_str(&format!(": {c}"));
        cur = c.source();
    }
    text
}

/// The client for Tower's token endpoint and keys: the system's roots plus the certificates of
/// `HANGAR_CA_FILE` (a private CA that signed an `https://` Tower's certificate), as the hook
/// and the driver's Tower client trust inside the sandbox.
async fn http(tools: &Tools) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder().timeout(HTTP_TIMEOUT).no_proxy();
    if let Some(file) = setting(tools, hangar_protocol::env::HANGAR_CA_FILE) {
        let pem = tokio::fs::read(&file).await.map_err(|e| {
            format!("HANGAR_CA_FILE {file} cannot be read ({e}), so Tower's certificate cannot be checked")
        })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("HANGAR_CA_FILE {file} is not PEM certificates: {e}"))?;
        if certs.is_empty() {
            return Err(format!("HANGAR_CA_FILE {file} has no certificate in it"));
        }
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    b.build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// The claims of the sandbox token hangar mints (tower-contract.md).
pub fn sandbox_claims(tower: &TowerAt, holder: &Holder, now: i64, jti: &str) -> Value {
    let mut c = json!({
        "iss": tower.issuer,
        "sub": holder.subject(),
        "aud": tower.url,
        "iat": now,
        "exp": now + TOKEN_SECONDS,
        "jti": jti,
        "sandbox": holder.sandbox,
    });
    if let Some(p) = &holder.person {
        c["person"] = json!(p);
        c["email"] = json!(p);
    }
    c
}

/// The checks on a passport's claims (its signature already verified): issuer, agent, expiry,
/// person. The reason says what is wrong.
pub fn check_claims(
    claims: &Value,
    tower: &TowerAt,
    holder: &Holder,
    now: i64,
) -> Result<Passport, String> {
    let text = |name: &str| claims.get(name).and_then(Value::as_str);
    let iss = text("iss").unwrap_or_default();
    if iss.trim_end_matches('/') != tower.url {
        return Err(format!(
            "the passport was issued by {iss:?}, not by Tower at {}",
            tower.url
        ));
    }
    match text("agent") {
        Some(a) if a == tower.agent => {}
        other => {
            return Err(format!(
                "the passport is for the agent {:?}, not {:?} (HANGAR_GOVERNANCE_HOOK_AGENT)",
                other.unwrap_or("(none)"),
                tower.agent
            ));
        }
    }
    let exp = claims
        .get("exp")
        .and_then(Value::as_i64)
        .ok_or("the passport has no expiry (exp)")?;
    if exp <= now {
        return Err(format!(
            "the passport expired {} s ago (exp {exp})",
            now - exp
        ));
    }
    let sub = text("sub").unwrap_or_default().to_owned();
    match &holder.person {
        Some(person) => {
            let email = text("email").unwrap_or_default();
            if sub != *person || email != person {
                return Err(format!(
                    "the passport is for {sub:?} ({email:?}), not the sandbox's person {person:?}"
                ));
            }
        }
        None => {
            if sub != holder.subject() {
                return Err(format!(
                    "the passport is for {sub:?}, not {:?} (the sandbox has no person)",
                    holder.subject()
                ));
            }
        }
    }
    Ok(Passport {
        token: String::new(),
        sub,
        jti: text("jti").unwrap_or_default().to_owned(),
        iat: claims.get("iat").and_then(Value::as_i64).unwrap_or(now),
        exp,
    })
}

/// When to renew a passport: once under [`REFRESH_MARGIN`] is left, and not before a third of
/// its lifetime has passed (seconds since the epoch).
pub fn renew_at(iat: i64, exp: i64) -> i64 {
    let lifetime = (exp - iat).max(0);
    let margin = i64::try_from(REFRESH_MARGIN.as_secs()).unwrap_or(600);
    (exp - margin).max(iat + lifetime / 3)
}

impl Governance {
    /// The control plane's passport signing key: from the vault, or made now (audited
    /// `governance.signing_key_made`).
    pub async fn signing_key(&self) -> Result<EdKey, ControlError> {
        let mut held = self.keys.key.lock().await;
        if let Some(k) = held.as_ref() {
            return Ok(k.clone());
        }
        let seed = match self.store.credential(SIGNING_KEY).await {
            Ok(s) => s,
            Err(StoreError::NotFound { .. }) => {
                let mut seed = vec![0u8; 32];
                getrandom::fill(&mut seed)
                    .map_err(|e| ControlError::Internal(format!("no randomness: {e}")))?;
                self.store
                    .set_credential(SIGNING_KEY, &Secret::new(seed))
                    .await?;
                let s = self.store.credential(SIGNING_KEY).await?;
                if let Ok(bytes) = <[u8; 32]>::try_from(s.expose()) {
                    self.store
                        .audit()
                        .append(
                            "hangar",
                            "governance.signing_key_made",
                            &json!({"credential": SIGNING_KEY, "kid": EdKey::from_seed(&bytes).kid(), "alg": "EdDSA"}),
                        )
                        .await?;
                }
                s
            }
            Err(e) => return Err(e.into()),
        };
        let bytes: [u8; 32] = seed.expose().try_into().map_err(|_| {
            ControlError::Internal(format!(
                "the vault credential {SIGNING_KEY} is not a 32-byte Ed25519 key"
            ))
        })?;
        let key = EdKey::from_seed(&bytes);
        *held = Some(key.clone());
        Ok(key)
    }

    /// The public keys Tower trusts hangar's sandbox tokens with (`/.well-known/jwks.json`).
    pub async fn jwks(&self) -> Result<Value, ControlError> {
        Ok(json!({"keys": [self.signing_key().await?.public_jwk()]}))
    }

    /// Mints the sandbox token, exchanges it at Tower and checks the passport. The reason, when
    /// there is none, says why for a person.
    pub async fn issue_passport(
        &self,
        tower: &TowerAt,
        holder: &Holder,
    ) -> Result<Passport, String> {
        let key = self.signing_key().await.map_err(|e| e.to_string())?;
        let now = now_secs();
        let jti = random_hex(16).map_err(|e| e.to_string())?;
        let token = key.sign_jwt(&sandbox_claims(tower, holder, now, &jti));
        let client = http(&self.tools).await?;
        let resp = client
            .post(format!("{}/oauth/token", tower.url))
            .form(&[
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ),
                ("subject_token", token.as_str()),
                ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
                ("audience", tower.agent.as_str()),
            ])
            .send()
            .await
            .map_err(|e| {
                format!(
                    "Tower's token endpoint {}/oauth/token cannot be reached: {}",
                    tower.url,
                    with_causes(&e)
                )
            })?;
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if status != 200 {
            let code = body.get("error").and_then(Value::as_str).unwrap_or("?");
            let what = body
                .get("error_description")
                .or_else(|| body.get("message"))
                .and_then(Value::as_str)
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            return Err(format!(
                "Tower refused the token exchange ({status} {code}{what})"
            ));
        }
        let passport = body
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or("Tower's token exchange answered without an access_token")?
            .to_owned();
        let jwks: Value = client
            .get(format!("{}/.well-known/jwks.json", tower.url))
            .send()
            .await
            .map_err(|e| {
                format!(
                    "Tower's keys ({}/.well-known/jwks.json) cannot be read: {e}",
                    tower.url
                )
            })?
            .json()
            .await
            .map_err(|e| {
                format!(
                    "Tower's keys ({}/.well-known/jwks.json) are not JSON: {e}",
                    tower.url
                )
            })?;
        let verified = jwt::verify(&passport, &jwks).map_err(|e| {
            format!("the passport's signature does not check against Tower's keys: {e}")
        })?;
        let claims = verified
            .claims()
            .map_err(|e| format!("the passport is unreadable: {e}"))?;
        let mut p = check_claims(&claims, tower, holder, now_secs())?;
        p.token = passport;
        Ok(p)
    }

    /// Policy governed: what the run shows Tower, written as its key file (`<ctl>/tower.key`):
    /// the coding agent's key or, with `HANGAR_GOVERNANCE_HOOK_AUTH=passport`, a passport.
    /// Tower's address and the file.
    pub(crate) async fn tower_credential(
        self: &Arc<Self>,
        ctl: &Path,
        sandbox: &Sandbox,
        run_id: &str,
        person: &str,
    ) -> Result<(String, PathBuf), ControlError> {
        match hook_auth(&self.tools)? {
            HookAuth::Key => self.tower_key(ctl).await,
            HookAuth::Passport => self.tower_passport(ctl, sandbox, run_id, person).await,
        }
    }

    /// Issues the run's passport; no passport, the reason (audited `governance.passport_refused`).
    async fn passport_for_run(
        &self,
        tower: &TowerAt,
        holder: &Holder,
        run_id: &str,
        person: &str,
    ) -> Result<Passport, ControlError> {
        match self.issue_passport(tower, holder).await {
            Ok(p) => {
                self.store
                    .audit()
                    .append(
                        person,
                        "governance.passport_issued",
                        &json!({"run": run_id, "sub": p.sub, "jti": p.jti, "exp": p.exp}),
                    )
                    .await?;
                Ok(p)
            }
            Err(why) => {
                let why = format!("no passport from Tower, so no turn: {why}");
                self.store
                    .audit()
                    .append(
                        person,
                        "governance.passport_refused",
                        &json!({"run": run_id, "sandbox": holder.sandbox, "why": why}),
                    )
                    .await?;
                Err(ControlError::Invalid(why))
            }
        }
    }

    /// Policy governed, `HANGAR_GOVERNANCE_HOOK_AUTH=passport`: a checked passport for the run,
    /// written as its key file, and a refresh loop that keeps it current while the run lives.
    pub(crate) async fn tower_passport(
        self: &Arc<Self>,
        ctl: &Path,
        sandbox: &Sandbox,
        run_id: &str,
        person: &str,
    ) -> Result<(String, PathBuf), ControlError> {
        let tower = TowerAt::from_tools(&self.tools)?;
        let holder = Holder::of(sandbox);
        let p = self
            .passport_for_run(&tower, &holder, run_id, person)
            .await?;
        let file = ctl.join(KEY_FILE);
        let (f, bytes) = (file.clone(), p.token.clone().into_bytes());
        tokio::task::spawn_blocking(move || write_key_file(&f, &bytes))
            .await
            .map_err(|e| ControlError::Internal(format!("a blocking task failed: {e}")))?
            .map_err(|e| ControlError::Internal(format!("cannot write {}: {e}", file.display())))?;
        let url = tower.url.clone();
        self.keep_passport(Keep {
            run_id: run_id.to_owned(),
            file: KeyFile::Local(file.clone()),
            tower,
            holder,
            iat: p.iat,
            exp: p.exp,
        })
        .await;
        Ok((url, file))
    }

    /// The Tower hook's key file in a sandbox (`inside`): Tower's address, what to write, and,
    /// for a passport, the refresh loop to start once it is written.
    pub(crate) async fn hook_credential(
        &self,
        row: &Sandbox,
        run_id: &str,
        person: &str,
        inside: &Path,
    ) -> Result<(String, Vec<u8>, Option<Keep>), ControlError> {
        match hook_auth(&self.tools)? {
            HookAuth::Key => {
                let (url, cred) = crate::launch::governance(&self.tools)?;
                let key = self.store.credential(&cred).await.map_err(|e| {
                    ControlError::Invalid(format!(
                        "the Tower hook: the credential {cred:?} (HANGAR_GOVERNANCE_HOOK_CREDENTIAL) cannot be read: {e}"
                    ))
                })?;
                Ok((url, key.expose().to_vec(), None))
            }
            HookAuth::Passport => {
                let tower = TowerAt::from_tools(&self.tools)?;
                let holder = Holder::of(row);
                let p = self
                    .passport_for_run(&tower, &holder, run_id, person)
                    .await?;
                let keep = Keep {
                    run_id: run_id.to_owned(),
                    file: KeyFile::InSandbox(inside.to_owned()),
                    tower: tower.clone(),
                    holder,
                    iat: p.iat,
                    exp: p.exp,
                };
                Ok((tower.url, p.token.into_bytes(), Some(keep)))
            }
        }
    }

    /// Starts the refresh loop of a run's passport.
    pub(crate) async fn keep_passport(self: &Arc<Self>, k: Keep) {
        self.keys.runs.lock().await.insert(k.run_id.clone(), false);
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let run_id = k.run_id.clone();
            refresh_loop(&me, k).await;
            me.keys.runs.lock().await.remove(&run_id);
        });
    }

    /// The run has ended: its key file on this machine goes, and its refresh loop (if any) writes
    /// no passport again (T14, T15). A key file inside a sandbox goes with the sandbox's
    /// `sandbox_run_ended`, after this.
    pub(crate) async fn key_files_gone(&self, run: &Run) {
        let mut runs = self.keys.runs.lock().await;
        if let Some(ended) = runs.get_mut(&run.id) {
            *ended = true;
        }
        remove_key_file(Path::new(&run.ctl_path));
        drop(runs);
    }

    /// After a restart: resumes the refresh loop of a live run whose passport is there (the
    /// control folder's key file, or the Tower hook's in its sandbox).
    pub(crate) async fn resume_passport(self: &Arc<Self>, run: &Run) {
        if !matches!(hook_auth(&self.tools), Ok(HookAuth::Passport)) {
            return;
        }
        let Ok(tower) = TowerAt::from_tools(&self.tools) else {
            return;
        };
        let local = PathBuf::from(&run.ctl_path).join(KEY_FILE);
        let (file, token) = match tokio::fs::read_to_string(&local).await {
            Ok(t) => (KeyFile::Local(local), t),
            Err(_) => {
                let Some(sb) = self.sandboxes.sandbox_of_run(&run.id).await else {
                    return;
                };
                let inside = crate::tower::key_inside(&run.id);
                let read = crate::sandboxes::with_provider!(self.sandboxes, sb.env.provider, |p| p
                    .read_file(&sb, &inside)
                    .await
                    .map_err(ControlError::from));
                match read {
                    Ok(b) => (
                        KeyFile::InSandbox(inside),
                        String::from_utf8_lossy(&b).into_owned(),
                    ),
                    Err(_) => return,
                }
            }
        };
        let holder = async {
            let turn = self.store.turn(&run.turn_id).await.ok()?;
            let session = self.store.session(&turn.session_id).await.ok()?;
            let sandbox = self.store.sandbox(&session.sandbox_id).await.ok()?;
            Some(Holder::of(&sandbox))
        }
        .await;
        let Some(holder) = holder else { return };
        // What the file holds says when to renew it; a file that is not a passport is renewed now.
        let claims = token
            .trim()
            .split('.')
            .nth(1)
            .and_then(|c| {
                base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, c).ok()
            })
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .unwrap_or(Value::Null);
        let now = now_secs();
        self.keep_passport(Keep {
            run_id: run.id.clone(),
            file,
            tower,
            holder,
            iat: claims.get("iat").and_then(Value::as_i64).unwrap_or(now),
            exp: claims.get("exp").and_then(Value::as_i64).unwrap_or(now),
        })
        .await;
    }

    /// Whether a run is still live with its key (the refresh loop's condition).
    async fn run_is_live(&self, run_id: &str) -> bool {
        matches!(self.store.run(run_id).await, Ok(r) if r.state == RunState::Live && r.has_key)
    }

    /// Swaps the new passport in while the run lives and its key file is there; false when it is
    /// not (the loop stops).
    async fn swap_passport(&self, run_id: &str, file: &KeyFile, token: &str) -> bool {
        let runs = self.keys.runs.lock().await;
        if runs.get(run_id) != Some(&false) || !self.run_is_live(run_id).await {
            return false;
        }
        let bytes = token.as_bytes().to_vec();
        let swapped = match file {
            KeyFile::Local(f) => {
                let f = f.clone();
                matches!(
                    tokio::task::spawn_blocking(move || swap_key_file(&f, &bytes)).await,
                    Ok(Ok(()))
                )
            }
            KeyFile::InSandbox(inside) => self.swap_inside(run_id, inside, &bytes).await,
        };
        drop(runs);
        swapped
    }

    /// The hook's key file inside the run's sandbox: the new passport is copied in beside it and
    /// renamed over it only if it is still there.
    async fn swap_inside(&self, run_id: &str, inside: &Path, bytes: &[u8]) -> bool {
        use hangar_sandbox::{ExecRequest, Who};
        let Some(sb) = self.sandboxes.sandbox_of_run(run_id).await else {
            return false;
        };
        let Ok(host_tmp) = hangar_protocol::atomic::write_temp(
            &sb.host_dir.join(format!("{run_id}.tower-key")),
            bytes,
            0o600,
        ) else {
            return false;
        };
        let name = inside
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp_inside = inside.with_file_name(format!(".{name}.new"));
        let copied = crate::sandboxes::with_provider!(self.sandboxes, sb.env.provider, |p| p
            .copy_in(&sb, &host_tmp, &tmp_inside, Who::Hangar, 0o444)
            .await
            .map_err(ControlError::from));
        let _ = std::fs::remove_file(&host_tmp);
        if copied.is_err() {
            return false;
        }
        let req = ExecRequest::new([
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            r#"if [ -e "$1" ]; then mv -f "$2" "$1"; else rm -f "$2"; exit 3; fi"#.to_owned(),
            "sh".to_owned(),
            inside.display().to_string(),
            tmp_inside.display().to_string(),
        ]);
        let done = crate::sandboxes::with_provider!(self.sandboxes, sb.env.provider, |p| p
            .exec(&sb, Who::Hangar, &req)
            .await
            .map_err(ControlError::from));
        matches!(done, Ok(o) if o.success())
    }
}

/// Where a run's passport lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyFile {
    /// On this machine (the run's control folder).
    Local(PathBuf),
    /// Inside the run's sandbox (the Tower hook's key file), written through its provider.
    InSandbox(PathBuf),
}

/// A refresh loop to start: the run, its key file, Tower, the holder, the passport's times.
#[derive(Clone, Debug)]
pub(crate) struct Keep {
    run_id: String,
    file: KeyFile,
    tower: TowerAt,
    holder: Holder,
    iat: i64,
    exp: i64,
}

async fn refresh_loop(plane: &Arc<Governance>, k: Keep) {
    let mut due = renew_at(k.iat, k.exp);
    let mut failing = false;
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        if !plane.run_is_live(&k.run_id).await {
            return;
        }
        if now_secs() < due {
            continue;
        }
        match plane.issue_passport(&k.tower, &k.holder).await {
            Ok(p) => {
                failing = false;
                // Only while the run lives and its key file is there: an ended run never gets one.
                if !plane.swap_passport(&k.run_id, &k.file, &p.token).await {
                    return;
                }
                let _ = plane
                    .store
                    .audit()
                    .append(
                        "hangar",
                        "governance.passport_renewed",
                        &json!({"run": k.run_id, "sub": p.sub, "jti": p.jti, "exp": p.exp}),
                    )
                    .await;
                due = renew_at(p.iat, p.exp);
            }
            Err(why) => {
                if !failing {
                    let _ = plane
                        .store
                        .audit()
                        .append(
                            "hangar",
                            "governance.passport_refresh_failed",
                            &json!({"run": k.run_id, "why": why}),
                        )
                        .await;
                }
                tracing::warn!(run = %k.run_id, error = %why, "cannot renew the run's passport");
                failing = true;
                due = now_secs() + i64::try_from(RETRY_AFTER.as_secs()).unwrap_or(5);
            }
        }
    }
}

/// Writes a run's key file (0600) through a rename, so a reader never sees half of it.
pub(crate) fn write_key_file(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    hangar_protocol::atomic::write_atomic(file, bytes, 0o600)
}

/// Replaces a run's key file atomically, only if it is still there: `renameat2` with
/// `RENAME_EXCHANGE` swaps the new file with the old one (and fails when there is no old one,
/// so an ended run's file is never put back); then the old content is removed.
pub(crate) fn swap_key_file(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = hangar_protocol::atomic::write_temp(file, bytes, 0o600)?;
    let swapped = rustix::fs::renameat_with(
        rustix::fs::CWD,
        &tmp,
        rustix::fs::CWD,
        file,
        rustix::fs::RenameFlags::EXCHANGE,
    );
    // After the exchange `tmp` holds the old passport; after a failure, the unused new one.
    let _ = std::fs::remove_file(&tmp);
    swapped.map_err(std::io::Error::from)
}

/// Removes a run's key file (the key or the passport) when the run ends (T15).
pub(crate) fn remove_key_file(ctl: &Path) {
    let _ = std::fs::remove_file(ctl.join(KEY_FILE));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn tower() -> TowerAt {
        TowerAt {
            url: "http://tower.test".into(),
            agent: "hangar".into(),
            issuer: "http://hangar.test".into(),
        }
    }

    fn ada() -> Holder {
        Holder {
            env: "dev".into(),
            sandbox: "sb-1".into(),
            person: Some("ada@example.com".into()),
        }
    }

    #[test]
    fn the_sandbox_token_has_the_contracts_claims() {
        let c = sandbox_claims(&tower(), &ada(), 1000, "j1");
        assert_eq!(
            c,
            json!({"iss": "http://hangar.test", "sub": "hangar:env:dev", "aud": "http://tower.test",
                   "iat": 1000, "exp": 1300, "jti": "j1", "sandbox": "sb-1",
                   "person": "ada@example.com", "email": "ada@example.com"})
        );
        let mut nobody = ada();
        nobody.person = None;
        let c = sandbox_claims(&tower(), &nobody, 1000, "j1");
        assert!(c.get("person").is_none() && c.get("email").is_none());
    }

    #[test]
    fn each_check_refuses_with_its_reason() {
        let good = json!({"iss": "http://tower.test/", "sub": "ada@example.com", "email": "ada@example.com",
                          "agent": "hangar", "iat": 900, "exp": 1900, "jti": "p1"});
        let p = check_claims(&good, &tower(), &ada(), 1000).unwrap();
        assert_eq!((p.exp, p.iat, p.jti.as_str()), (1900, 900, "p1"));
        let cases = [
            ("iss", json!("http://evil.test"), "issued by"),
            ("agent", json!("intruder"), "agent \"intruder\""),
            ("exp", json!(999), "expired"),
            (
                "sub",
                json!("mallory@example.com"),
                "not the sandbox's person",
            ),
            (
                "email",
                json!("mallory@example.com"),
                "not the sandbox's person",
            ),
        ];
        for (k, v, want) in cases {
            let mut c = good.clone();
            c[k] = v;
            let e = check_claims(&c, &tower(), &ada(), 1000).unwrap_err();
            assert!(e.contains(want), "{k}: {e}");
        }
        let mut c = good.clone();
        c.as_object_mut().unwrap().remove("agent");
        assert!(check_claims(&c, &tower(), &ada(), 1000).is_err());
        // A sandbox with no person gets the environment's passport.
        let mut nobody = ada();
        nobody.person = None;
        assert!(check_claims(&good, &tower(), &nobody, 1000).is_err());
        let mut c = good.clone();
        c["sub"] = json!("hangar:env:dev");
        assert!(check_claims(&c, &tower(), &nobody, 1000).is_ok());
    }

    #[test]
    fn renewal_is_due_with_under_ten_minutes_left() {
        // 15 minutes: renewed with 10 left.
        assert_eq!(renew_at(0, 900), 300);
        // An hour: with 10 left.
        assert_eq!(renew_at(0, 3600), 3000);
        // 9 seconds: after a third of it, not in a loop.
        assert_eq!(renew_at(100, 109), 103);
    }

    #[test]
    fn the_key_file_is_swapped_only_while_it_is_there() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(KEY_FILE);
        assert!(swap_key_file(&f, b"one").is_err(), "no file: no swap");
        assert!(!f.exists());
        write_key_file(&f, b"one").unwrap();
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        swap_key_file(&f, b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        remove_key_file(dir.path());
        assert!(swap_key_file(&f, b"three").is_err());
        assert!(!f.exists());
        // Nothing left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
