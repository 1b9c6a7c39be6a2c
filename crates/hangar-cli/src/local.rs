//! The API served from inside the CLI when no server answers at `HANGAR_URL`, over the same
//! store and vault `hangar serve` uses (`$HANGAR_HOME`), and the local user's token.
//!
//! * [`Mode::Embedded`]: `hangar run` with no server — a whole server for the run's duration,
//!   on `HANGAR_URL`'s address when it is free (so `hangar steer` from another terminal reaches
//!   it), else on a free port; it re-attaches to every live run like `hangar serve` does.
//! * [`Mode::Takeover`]: `hangar run` whose server went away and stayed away — the same on a free
//!   port (never `HANGAR_URL`'s, which a restarting `hangar serve` wants back), only when this
//!   machine's store holds the run.
//! * [`Mode::OneShot`]: a single command (`steer`, `approve`, `turn show`, …) with no server — the
//!   API on a free port for that command, with no run watchers (it ends in a moment), only when
//!   a store exists (a command never makes one).
//! * [`Mode::Admin`]: the same for a command that sets things up (`env apply`, `sb create`): it
//!   makes the store in `$HANGAR_HOME` when there is none, as `hangar serve` would.
//!
//! Only [`Mode::Embedded`] binds a port (other terminals reach it there); the other modes call
//! the API's router in this process ([`Api::in_process`]).
//!
//! Turns run detached either way: when the CLI's server stops, they go on, and the next server
//! (`hangar serve`, or another `hangar run`) re-attaches to them from their saved cursors.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hangar_control::{ControlPlane, Tools};
use hangar_protocol::env::{HANGAR_SERVER_CREDENTIALS, SERVER_CREDENTIALS_ALLOW};
use hangar_store::{NewToken, Role, Store};

use crate::api::{Api, TOKEN_FILE};
use crate::exit::CliError;
use crate::find;
use crate::serve::{Plane, tools};

/// Which kind of in-process server.
#[derive(Clone, Debug)]
pub enum Mode {
    /// `unsandboxed`: the run asked for no sandbox (`hangar run --no-sandbox`), so this server,
    /// which only the person running it started, allows plain folders.
    Embedded {
        prefer: Option<SocketAddr>,
        unsandboxed: bool,
    },
    Takeover {
        run: String,
        unsandboxed: bool,
    },
    OneShot,
    Admin,
}

/// The API served inside this process.
#[derive(Debug)]
pub struct Local {
    /// Its address (bound), or words naming it (in process).
    pub url: String,
    pub token: String,
    serving: Serving,
}

#[derive(Debug)]
enum Serving {
    /// On a port, for other terminals too ([`Mode::Embedded`]).
    Bound {
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<std::io::Result<()>>,
    },
    /// Called in this process through the router, no port bound.
    InProcess(Arc<ControlPlane>),
}

/// Why no in-process server was started.
#[derive(Debug)]
pub enum NoLocal {
    /// `$HANGAR_HOME` holds no store (or not this run): there is nothing to serve.
    Nothing(String),
    Failed(CliError),
}

impl From<CliError> for NoLocal {
    fn from(e: CliError) -> NoLocal {
        NoLocal::Failed(e)
    }
}

/// The SQLite file behind a `sqlite://` URL.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite://")?;
    let path = rest.split('?').next().unwrap_or(rest);
    Some(PathBuf::from(path))
}

/// The local user, as the audit log names them: `$USER@localhost`; without `$USER` or
/// `$LOGNAME` (a service, `docker exec`, cron) the account's name from the password database,
/// so a session started there shows `root@localhost`, not a bare uid (issue 21).
pub fn local_person() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
        .or_else(|| account_name(uid))
        .unwrap_or_else(|| format!("uid{uid}"));
    format!("{}@localhost", user.trim())
}

/// The name of account `uid` in the password database (`getpwuid_r`), if it has one.
fn account_name(uid: libc::uid_t) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: an all-zero `passwd` is a valid value for getpwuid_r to fill.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives the use of `pw`'s strings.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so `pw_name` is a NUL-terminated string inside `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    let name = name.to_str().ok()?.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// A local token with less than this left is replaced by a new one: `hangar serve` checks daily
/// ([`renew_local_token_daily`]), so the CLI on the server's machine never meets an expired one.
const RENEW_WITHIN_MS: i64 = 30 * 24 * 3600 * 1000;

/// Keeps the local user's token fresh while `hangar serve` runs (a token lives 90 days; a server
/// may run longer).
pub async fn renew_local_token_daily(plane: Arc<ControlPlane>, home: PathBuf) {
    loop {
        tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
        if let Err(e) = ensure_local_token(plane.store(), &home).await {
            tracing::warn!(error = %e, "could not renew the local user's token");
        }
    }
}

/// The local user's token from `$HANGAR_HOME/token` if the store knows it and it has more than
/// 30 days left; else a new one,
/// written there (0600). Only a process that can open the store (and so read the master key
/// beside it) gets one.
pub async fn ensure_local_token(store: &Store, home: &Path) -> Result<String, CliError> {
    let path = home.join(TOKEN_FILE);
    if let Ok(t) = std::fs::read_to_string(&path) {
        let t = t.trim();
        if !t.is_empty()
            && let Ok(Some(_)) = store.authenticate(t).await
            && let Ok(Some(rec)) = store.token_by_hash(&hangar_store::hash_token(t)).await
            && rec
                .expires_at
                .is_none_or(|at| at - hangar_store::now_ms() > RENEW_WITHIN_MS)
        {
            return Ok(t.to_owned());
        }
    }
    let person = local_person();
    let fail = |e: hangar_store::StoreError| CliError::Failed(e.to_string());
    // The local user holds the store's master key: an admin of this server (made so again if
    // an admin removed them; the old tokens stay revoked).
    if store
        .person(&person)
        .await
        .map_err(fail)?
        .is_none_or(|p| p.removed_at.is_some())
    {
        store
            .add_person(&person, Role::Admin, &person)
            .await
            .map_err(fail)?;
    }
    let made = store
        .create_token(NewToken {
            person: &person,
            name: "local user",
            lifetime_ms: hangar_store::DEFAULT_LIFETIME_MS,
            actor: &person,
        })
        .await
        .map_err(fail)?;
    write_private(&path, &made.token)?;
    Ok(made.token)
}

/// Writes `text` to `path`, readable by its owner only, replacing it atomically.
fn write_private(path: &Path, text: &str) -> Result<(), CliError> {
    hangar_protocol::atomic::write_atomic(path, format!("{text}\n").as_bytes(), 0o600)
        .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))
}

/// The tools for a server that only answers commands: a missing driver matters only if a turn
/// must start, and then the control plane says so.
fn lenient_tools(home: &Path) -> Tools {
    Tools {
        home: home.to_owned(),
        driver: find::driver().unwrap_or_else(|_| PathBuf::from("hangar-driver")),
        claude: find::claude().unwrap_or_else(|_| PathBuf::from("claude")),
        codex: find::codex().unwrap_or_else(|_| PathBuf::from("codex")),
        env: Vec::new(),
    }
}

/// The API served in this process is the person's own, on their own machine, as themselves:
/// their credential variables (`ANTHROPIC_API_KEY`, ...) pass to their turns unless they say
/// otherwise (`HANGAR_SERVER_CREDENTIALS` set to anything else). A shared `hangar serve` keeps
/// them to itself by default.
fn own_credentials(mut tools: Tools) -> Tools {
    // Said in the tools themselves (not only inherited), so the control plane knows this is
    // the CLI's own single-user server (a provider's key of any name may come from its
    // environment, `turn_secrets.rs`).
    if hangar_protocol::env::var(HANGAR_SERVER_CREDENTIALS)
        .is_none_or(|v| v == SERVER_CREDENTIALS_ALLOW)
    {
        tools.env.push((
            HANGAR_SERVER_CREDENTIALS.to_owned(),
            SERVER_CREDENTIALS_ALLOW.to_owned(),
        ));
    }
    tools
}

impl Local {
    /// Starts the API in this process (on the current tokio runtime).
    pub async fn start(home: &Path, mode: Mode) -> Result<Local, NoLocal> {
        let settings = Plane::from_env(home);
        if !matches!(mode, Mode::Embedded { .. } | Mode::Admin)
            && let Some(db) = sqlite_file(&settings.database)
            && !db.exists()
        {
            return Err(NoLocal::Nothing(format!(
                "{} holds no hangar store",
                home.display()
            )));
        }
        let tools = match mode {
            Mode::Embedded {
                unsandboxed: true, ..
            } => crate::serve::allowing_unsandboxed(tools(home)?),
            Mode::Embedded { .. } => tools(home)?,
            Mode::Takeover {
                unsandboxed: true, ..
            } => crate::serve::allowing_unsandboxed(lenient_tools(home)),
            _ => lenient_tools(home),
        };
        let tools = own_credentials(tools);
        let store = settings.open(home).await?;
        if matches!(mode, Mode::Embedded { .. } | Mode::Takeover { .. }) {
            crate::backup::hold_in_use(home);
        }
        if let Mode::Takeover { run, .. } = &mode
            && store.run(run).await.is_err()
        {
            return Err(NoLocal::Nothing(format!(
                "the store in {} does not hold run {run}",
                home.display()
            )));
        }
        let token = ensure_local_token(&store, home).await?;
        let plane = ControlPlane::new(store, tools);
        if !matches!(mode, Mode::OneShot | Mode::Admin) {
            plane
                .reattach()
                .await
                .map_err(|e| CliError::Failed(e.to_string()))?;
        }
        let prefer = match mode {
            Mode::Embedded { prefer, .. } => prefer,
            // Nobody else needs to reach it: the router is called in this process.
            _ => {
                return Ok(Local {
                    url: format!("in-process API over {}", home.display()),
                    token,
                    serving: Serving::InProcess(plane),
                });
            }
        };
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let listener = match prefer {
            Some(addr) => match hangar_server::bind(addr).await {
                Ok(l) => l,
                Err(_) => hangar_server::bind(any).await.map_err(CliError::Failed)?,
            },
            None => hangar_server::bind(any).await.map_err(CliError::Failed)?,
        };
        let addr = listener
            .local_addr()
            .map_err(|e| CliError::Failed(format!("the local server's address: {e}")))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopping = Arc::clone(&plane);
        let task = tokio::spawn(hangar_server::serve(
            listener,
            Arc::clone(&plane),
            async move {
                let _ = stopped.await;
                // A relayed terminal (`sb attach` on e2b) ends with its process killed.
                stopping
                    .sandboxes()
                    .end_all_attaches("the command serving it ended")
                    .await;
            },
        ));
        Ok(Local {
            url: format!("http://{addr}"),
            token,
            serving: Serving::Bound { stop, task },
        })
    }

    /// A client of this server.
    pub fn api(&self) -> Result<Api, CliError> {
        match &self.serving {
            Serving::Bound { .. } => Api::new(&self.url, Some(self.token.clone())),
            Serving::InProcess(plane) => Ok(Api::in_process(
                hangar_server::router(Arc::clone(plane)),
                self.token.clone(),
                &self.url,
            )),
        }
    }

    /// Stops serving: requests in flight get a moment to finish (a client's open event stream
    /// does not hold it up).
    pub async fn stop(self) {
        match self.serving {
            Serving::Bound { stop, mut task } => {
                let _ = stop.send(());
                if tokio::time::timeout(Duration::from_secs(2), &mut task)
                    .await
                    .is_err()
                {
                    task.abort();
                }
            }
            // A relayed terminal (`sb attach` on e2b) ends with its process killed.
            Serving::InProcess(plane) => {
                plane
                    .sandboxes()
                    .end_all_attaches("the command serving it ended")
                    .await;
            }
        }
    }
}

/// A client for one command, and the in-process server behind it if there is one.
#[derive(Debug)]
pub struct Conn {
    pub api: Api,
    pub local: Option<Local>,
}

impl Conn {
    pub async fn close(self) {
        if let Some(l) = self.local {
            l.stop().await;
        }
    }
}

/// Reaches the API for one command: the server at `HANGAR_URL`, else (nothing listens there)
/// the API served in-process over `$HANGAR_HOME`'s store. `Ok(None)`: no server and no store.
pub async fn connect(home: &Path) -> Result<Option<Conn>, CliError> {
    connect_as(home, Mode::OneShot).await
}

/// [`connect`] for a command that sets things up: with no server, the in-process API makes
/// the store if there is none ([`Mode::Admin`]).
pub async fn connect_admin(home: &Path) -> Result<Conn, CliError> {
    connect_as(home, Mode::Admin)
        .await?
        .ok_or_else(|| CliError::Failed(nothing_here(home)))
}

async fn connect_as(home: &Path, mode: Mode) -> Result<Option<Conn>, CliError> {
    let api = Api::from_env(home)?;
    match api.health().await {
        Ok(()) => Ok(Some(Conn { api, local: None })),
        Err(crate::api::ApiError::NoServer(_)) => match Local::start(home, mode).await {
            Ok(l) => Ok(Some(Conn {
                api: l.api()?,
                local: Some(l),
            })),
            Err(NoLocal::Nothing(_)) => Ok(None),
            Err(NoLocal::Failed(e)) => Err(e),
        },
        Err(e) => Err(e.into_cli()),
    }
}

/// The words for "no server and nothing here".
pub fn nothing_here(home: &Path) -> String {
    format!(
        "no hangar server answers at {} and {} holds no store (is HANGAR_URL or HANGAR_HOME right?)",
        crate::api::url_from_env(),
        home.display()
    )
}
