//! `hangar serve`, and the commands that work on the control plane's database directly
//! (`credential`, `audit verify`; people and `token create` in `people`): the settings they share, resolved once.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use hangar_control::{ControlPlane, Tools};
use hangar_protocol::env::{
    HANGAR_DATABASE_URL, HANGAR_MASTER_KEY_FILE, HANGAR_OIDC_CLIENT_ID, HANGAR_OIDC_CLIENT_SECRET,
    HANGAR_OIDC_CREATE_MEMBERS, HANGAR_OIDC_ISSUER, HANGAR_PUBLIC_URL, HANGAR_UNSANDBOXED_FOLDERS,
};
use hangar_server::oidc::OidcConfig;
use hangar_store::{Store, Vault};

use crate::exit::CliError;
use crate::{find, progress};

/// Where the control plane keeps its state.
#[derive(Debug)]
pub struct Plane {
    pub database: String,
    pub master_key: PathBuf,
}

impl Plane {
    pub fn from_env(home: &Path) -> Plane {
        let database = hangar_protocol::env::var(HANGAR_DATABASE_URL)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| format!("sqlite://{}", home.join("hangar.db").display()));
        let master_key = hangar_protocol::env::var_os(HANGAR_MASTER_KEY_FILE)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("master.key"));
        Plane {
            database,
            master_key,
        }
    }

    /// The store with its vault (the master key is made on first start).
    pub async fn open(&self, home: &Path) -> Result<Store, CliError> {
        // hangar's home holds the store, the vault's key and every run's log: its owner's only.
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(home)
                .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", home.display())))?;
        }
        let store = Store::open(&self.database)
            .await
            .map_err(|e| CliError::Failed(e.to_string()))?;
        let vault =
            Vault::open_or_create(&self.master_key).map_err(|e| CliError::Failed(e.to_string()))?;
        store
            .with_vault(vault)
            .await
            .map_err(|e| CliError::Failed(e.to_string()))
    }
}

pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))
}

/// The executables a turn needs; a missing harness is only an error when a turn needs it.
pub fn tools(home: &Path) -> Result<Tools, CliError> {
    Ok(Tools {
        home: home.to_owned(),
        driver: find::driver()?,
        claude: find::claude().unwrap_or_else(|_| PathBuf::from("claude")),
        codex: find::codex().unwrap_or_else(|_| PathBuf::from("codex")),
        env: Vec::new(),
    })
}

/// The tools of a server that runs sessions in plain folders when asked (`hangar serve
/// --unsandboxed-folders`, `hangar run --no-sandbox`'s own server).
pub fn allowing_unsandboxed(mut tools: Tools) -> Tools {
    tools.env.push((
        HANGAR_UNSANDBOXED_FOLDERS.to_owned(),
        hangar_control::UNSANDBOXED_FOLDERS_ALLOW.to_owned(),
    ));
    tools
}

/// The OpenID issuer `hangar serve` signs people in with: the flags, else the environment;
/// none when no issuer is named.
pub fn oidc_config(
    issuer: Option<String>,
    client_id: Option<String>,
    create_members: bool,
    public_url: Option<String>,
) -> Result<Option<OidcConfig>, CliError> {
    let env = |name| hangar_protocol::env::var(name).filter(|v: &String| !v.trim().is_empty());
    let Some(issuer) = issuer.or_else(|| env(HANGAR_OIDC_ISSUER)) else {
        return Ok(None);
    };
    let client_id = client_id.or_else(|| env(HANGAR_OIDC_CLIENT_ID)).ok_or_else(|| {
        CliError::Usage(format!(
            "--oidc-issuer {issuer} needs hangar's client id there: --oidc-client-id ID (or {HANGAR_OIDC_CLIENT_ID})"
        ))
    })?;
    let create_members = create_members
        || match env(HANGAR_OIDC_CREATE_MEMBERS).as_deref() {
            None => false,
            Some("members") => true,
            Some(other) => {
                return Err(CliError::Usage(format!(
                    "{HANGAR_OIDC_CREATE_MEMBERS}={other:?}: the one value is `members` (unset: unknown people are refused)"
                )));
            }
        };
    Ok(Some(OidcConfig {
        issuer,
        client_id,
        client_secret: env(HANGAR_OIDC_CLIENT_SECRET),
        create_members,
        public_url: public_url.or_else(|| env(HANGAR_PUBLIC_URL)),
    }))
}

/// `hangar serve [--listen ADDR] [--unsandboxed-folders] [--oidc-issuer URL ...]`.
pub fn serve(
    home: &Path,
    listen: SocketAddr,
    unsandboxed: bool,
    tls: Option<&(PathBuf, PathBuf)>,
    oidc: Option<OidcConfig>,
) -> Result<ExitCode, CliError> {
    hangar_server::metrics::install().map_err(CliError::Failed)?;
    let plane_settings = Plane::from_env(home);
    let mut tools = tools(home)?;
    if unsandboxed {
        tools = allowing_unsandboxed(tools);
    }
    runtime()?.block_on(async move {
        let store = plane_settings.open(home).await?;
        crate::backup::hold_in_use(home);
        // The local user's token, so the CLI on this machine reaches this server as they are.
        crate::local::ensure_local_token(&store, home).await?;
        let plane = ControlPlane::new(store, tools);
        tokio::spawn(crate::local::renew_local_token_daily(
            Arc::clone(&plane),
            home.to_owned(),
        ));
        let n = plane.reattach().await.map_err(|e| CliError::Failed(e.to_string()))?;
        if let Some(days) = retention_days()? {
            tokio::spawn(prune_daily(Arc::clone(&plane), home.to_owned(), days));
        }
        let tls = tls
            .map(|(cert, key)| hangar_server::tls::server_config(cert, key))
            .transpose()
            .map_err(CliError::Usage)?;
        let sign_in = match oidc {
            Some(c) => {
                let o = hangar_server::oidc::Oidc::discover(c)
                    .await
                    .map_err(|e| CliError::Failed(e.to_string()))?;
                progress::note(&format!("signing people in with {}", o.issuer()));
                hangar_server::SignIn(Some(Arc::new(o)))
            }
            None => hangar_server::SignIn(None),
        };
        let listener = hangar_server::bind(listen).await.map_err(CliError::Failed)?;
        let addr = listener.local_addr().map_err(|e| CliError::Failed(e.to_string()))?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(%addr, database = %plane_settings.database, reattached = n, scheme, "hangar serve is up");
        if tls.is_none() && !hangar_server::tls::loopback_only(addr) {
            progress::say(&format!(
                "WARNING: hangar serve speaks plain HTTP on {addr}, which is not loopback: every token and every answer crosses the network in clear. Give --tls-cert and --tls-key, or listen on 127.0.0.1."
            ));
        }
        progress::say(&format!("listening: {scheme}://{addr}"));
        if let Some(url) = advertised(scheme, addr) {
            if url.starts_with("http://") && !is_loopback_url(&url) {
                progress::say(&format!(
                    "WARNING: other replicas pass commands on to {url} in plain HTTP: the callers' tokens cross the network in clear. Serve HTTPS (--tls-cert, --tls-key) and advertise an https:// address."
                ));
            }
            plane
                .advertise(&url)
                .await
                .map_err(|e| CliError::Failed(e.to_string()))?;
        }
        let stopping = Arc::clone(&plane);
        let shutdown = async move {
            shutdown_signal().await;
            // Relayed terminals end first (their processes killed), so their output streams
            // do not hold the graceful shutdown open.
            stopping.sandboxes().end_all_attaches("hangar serve is stopping").await;
        };
        let served = match tls {
            Some(config) => {
                let listener = hangar_server::tls::TlsListener::new(listener, config)
                    .map_err(|e| CliError::Failed(e.to_string()))?;
                hangar_server::serve_with(listener, Arc::clone(&plane), sign_in, shutdown).await
            }
            None => hangar_server::serve_with(listener, Arc::clone(&plane), sign_in, shutdown).await,
        };
        served.map_err(|e| CliError::Failed(format!("the server stopped: {e}")))?;
        tracing::info!("hangar serve stopped; running turns go on and are re-attached at the next start");
        Ok(ExitCode::SUCCESS)
    })
}

/// Where the other replicas reach this one: `HANGAR_ADVERTISE_URL`, else the address it
/// listens on unless that is a wildcard.
fn advertised(scheme: &str, addr: SocketAddr) -> Option<String> {
    match hangar_protocol::env::var(hangar_protocol::env::HANGAR_ADVERTISE_URL) {
        Some(url) if !url.trim().is_empty() => Some(url.trim().to_owned()),
        _ => (!addr.ip().is_unspecified()).then(|| format!("{scheme}://{addr}")),
    }
}

/// Whether `url`'s host is this machine's loopback.
fn is_loopback_url(url: &str) -> bool {
    let host = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', '?'])
        .next()
        .unwrap_or_default();
    let host = host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// `hangar credential set NAME` (value from stdin), `list`, `rm NAME`, of `owner`.
pub fn credential(
    home: &Path,
    action: &str,
    name: Option<&str>,
    owner: &hangar_store::SecretOwner,
    json: bool,
) -> Result<ExitCode, CliError> {
    let settings = Plane::from_env(home);
    runtime()?.block_on(async {
        let store = settings.open(home).await?;
        let fail = |e: hangar_store::StoreError| CliError::Failed(e.to_string());
        let control = |e: hangar_control::ControlError| match e.cause() {
            hangar_control::ControlError::Invalid(m) => CliError::Usage(m.clone()),
            e => CliError::Failed(e.to_string()),
        };
        let here = hangar_control::credentials::Origin::ServerMachine;
        match (action, name) {
            ("set", Some(n)) => {
                let mut value = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut value)
                    .map_err(|e| CliError::Failed(format!("reading the value from stdin: {e}")))?;
                let value = value.trim_end_matches('\n');
                hangar_control::credentials::set_owned(
                    &store,
                    owner,
                    n,
                    value.as_bytes(),
                    "cli",
                    here,
                )
                .await
                .map_err(control)?;
                progress::say(&format!("credential {n} set"));
                if n.starts_with(hangar_control::credentials::RESERVED_PREFIX) {
                    progress::note(
                        "a running hangar serve keeps the key it holds until its next start",
                    );
                }
            }
            ("list", None) => {
                for n in store.secret_names(owner).await.map_err(fail)? {
                    if json {
                        progress::say(&serde_json::json!({"name": n}).to_string());
                    } else {
                        progress::say(&n);
                    }
                }
            }
            ("rm", Some(n)) => {
                if !hangar_control::credentials::remove_owned(&store, owner, n, "cli", here)
                    .await
                    .map_err(control)?
                {
                    return Err(CliError::Failed(format!("no credential {n:?}")));
                }
                progress::say(&format!("credential {n} removed"));
            }
            _ => {
                return Err(CliError::Usage(
                    "use: hangar credential set NAME | list | rm NAME".into(),
                ));
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar audit verify` (on the database directly, with or without a server).
pub fn audit_verify(home: &Path) -> Result<ExitCode, CliError> {
    let settings = Plane::from_env(home);
    runtime()?.block_on(async {
        let store = settings.open(home).await?;
        match store.audit().verify().await {
            Ok(n) => {
                progress::say(&format!("audit log intact: {n} records"));
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => Err(CliError::Failed(format!("audit log broken: {e}"))),
        }
    })
}

/// `hangar events check RUN`: rebuilds the run's events from its log (the source of truth) and
/// compares them with what the watcher stored.
pub fn events_check(home: &Path, run: &str) -> Result<ExitCode, CliError> {
    let settings = Plane::from_env(home);
    runtime()?.block_on(async {
        let store = settings.open(home).await?;
        let fail = |e: hangar_store::StoreError| CliError::Failed(e.to_string());
        let r = store.run(run).await.map_err(fail)?;
        // Read as the watcher read it: in its mode, with the run's seal key.
        let rebuilt: Vec<serde_json::Value> = hangar_control::logtrust::rebuild(&store, home, &r)
            .await
            .iter()
            .filter(|e| e.offset < u64::try_from(r.log_cursor).unwrap_or(0))
            .filter_map(|e| serde_json::to_value(e).ok())
            .collect();
        let mut stored = Vec::new();
        let mut after = 0;
        loop {
            let page = store
                .events_after(
                    hangar_store::EventScope::Run(run),
                    after,
                    hangar_store::MAX_PAGE,
                )
                .await
                .map_err(fail)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            stored.extend(page.into_iter().map(|e| e.payload));
        }
        if let Some(i) =
            (0..stored.len().max(rebuilt.len())).find(|&i| stored.get(i) != rebuilt.get(i))
        {
            return Err(CliError::Failed(format!(
                "run {run}: stored events differ from the log at event {i}: stored {} / log {}",
                stored.get(i).map_or("none".to_owned(), |v| v.to_string()),
                rebuilt.get(i).map_or("none".to_owned(), |v| v.to_string()),
            )));
        }
        progress::say(&format!(
            "run {run}: {} stored events equal a rebuild from its log (up to byte {})",
            stored.len(),
            r.log_cursor
        ));
        Ok(ExitCode::SUCCESS)
    })
}

/// `HANGAR_RETENTION_DAYS` (`retention_days`): a whole number of days, 1 or more.
fn retention_days() -> Result<Option<u64>, CliError> {
    let name = hangar_protocol::env::HANGAR_RETENTION_DAYS;
    match hangar_protocol::env::var(name) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(d) if d > 0 => Ok(Some(d)),
            _ => Err(CliError::Usage(format!(
                "{name}={v:?}: a whole number of days, 1 or more"
            ))),
        },
    }
}

/// Retention once a day, the first a minute after the start (`hangar prune`'s work).
async fn prune_daily(plane: Arc<ControlPlane>, home: PathBuf, days: u64) {
    let age = std::time::Duration::from_secs(days.saturating_mul(86_400));
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    loop {
        match hangar_control::retention::prune(plane.store(), &home, age, false, "retention").await
        {
            Ok(p) if p.runs > 0 || p.conversations > 0 => tracing::info!(
                runs = p.runs,
                events = p.events,
                conversations = p.conversations,
                bytes = p.bytes,
                "retention pruned what ended over {days} days ago"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention could not prune"),
        }
        tokio::time::sleep(std::time::Duration::from_secs(86_400)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::is_loopback_url;

    #[test]
    fn only_a_loopback_host_is_loopback() {
        for url in [
            "http://127.0.0.1:7700",
            "http://127.9.9.9/x",
            "http://[::1]:7700",
            "http://localhost:7700",
        ] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "http://10.0.0.7:7700",
            "http://127.0.0.1.example.com:7700",
            "http://[2001:db8::1]:7700",
            "http://example.com",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }
}
