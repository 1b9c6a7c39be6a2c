//! Turns in sandboxes that see no folder of this machine: kubernetes, e2b, and docker with
//! `HANGAR_DOCKER_MIRROR=stream` (S1, S2).
//!
//! The driver runs inside the pod (or E2B sandbox) and reads and writes the run's control folder
//! there (`/run/hangar/<run>.ctl`); the control plane keeps its own mirror of that folder where
//! every run's is (`<home>/runs/<run>.ctl`), so the mailbox, the watcher, `hangar log` and the
//! kept pack work as for any run. A sync task per live run, started by the run's watcher (so it
//! runs where the watcher runs, and resumes with it after a restart), carries:
//!
//! - **in**: each command the mailbox renamed into the mirror's `in/` is pushed into the pod's
//!   `in/` (staged, then renamed, as the mailbox does; a marker in the pod's `pushed/` makes a
//!   push after a restart land at most once). A command stays in the mirror's `in/` until its
//!   ack comes back: the push itself waits up to half a second for the ack in the pod and
//!   brings it back (an approval's answer is acked within milliseconds, so it needs one round
//!   trip to the pod, not a push and then a pull); else a later pull does.
//! - **out**: the run log from the mirror's length on, the acks the mirror lacks, and, before the
//!   turn's last line is written on this side, the turn's pack (`trees.pack`, `trees.idx`).
//!   One long-lived exec carries both ways (`stream.rs`: a pod's websocket exec, envd's process
//!   stream in E2B, an attached exec in a streamed docker container; the driver's `--mirror`
//!   sends what changed, so an idle run costs no exec); where no stream can be kept (a pod
//!   behind a proxy that cuts them, `HANGAR_K8S_MIRROR=poll`) one exec per poll reads them all
//!   (`PULL`), every 150 ms.
//! - **the end of `in/`**: when the driver renames the pod's `in/` away, the mirror's is renamed
//!   too, and a command that had not reached the pod is answered `ended` with the run's key, its
//!   message recorded in `<ctl>/handed_back.late` for the next turn (the watcher adds them to
//!   the driver's own at the turn's end). The pod's `in/` is looked at after the log is read,
//!   so a pull that shows the turn's end also shows `in/` closed, and the mirror's is closed
//!   before the watcher can see the end.
//!
//! The driver is alive while its tmux session is; once it is gone, one more pull takes what it
//! wrote last, and the watcher is told the driver has stopped. When the pod is gone (the
//! provider says so, or it has not answered for [`GONE_AFTER`]), the watcher ends the turn
//! saying so: what waited in `in/` (pushed or not) is answered `ended` and its messages handed
//! back, as for a driver that stopped (`orphan.rs`). An E2B sandbox's timeout is extended while
//! the sync runs, so it does not expire under a turn.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hangar_mailbox::{CommandName, ControlDir, Inbox};
use hangar_protocol::{Ack, AckStatus, RunKey, Verifier};
use hangar_sandbox::{ExecRequest, Output, Provider, ProviderKind, Sandbox, SandboxError, Who};
use hangar_store::Run;

use crate::error::ControlError;
use crate::runs::Runs;
use crate::sandboxes::is_remote;
use stream::AbortOnDrop;

mod stream;

/// How long a pod may fail to answer before the turn ends as gone.
pub(crate) const GONE_AFTER: Duration = Duration::from_secs(30);

/// The mirror's file of messages answered `ended` here (one sequence number a line).
const LATE: &str = "handed_back.late";

/// At most this much of the run log per pull.
const PULL_MAX: u64 = 4 << 20;

/// Pushes one command (stdin) into the pod's `in/` as `$2`, then waits up to `$3` hundredths of
/// a second for the driver's ack and prints it (at most `$4` bytes) when it came: an approval's
/// answer or a steer is usually acked within milliseconds, and so comes back with the push
/// instead of with a later pull (each exec is a round trip to the pod). Exit 0: landed now; 5:
/// it had been pushed before (and now sits in `in/`); 3: `in/` is gone (the turn is ending); 4:
/// no control folder.
const PUSH: &str = r#"cd "$1" || exit 4
n=$2
r=0
if [ -e "pushed/$n" ]; then cat >/dev/null; r=5
else cat > "staging/.$n" && mv "staging/.$n" "staging/$n" && ln "staging/$n" "pushed/$n" || exit 1
fi
if [ -e "staging/$n" ]; then mv "staging/$n" "in/$n" 2>/dev/null || exit 3; fi
i=0
while [ ! -f "acks/$n.ack" ] && [ "$i" -lt "$3" ]; do sleep 0.01; i=$((i + 1)); done
if [ -f "acks/$n.ack" ] && [ ! -L "acks/$n.ack" ]; then head -c "$4" "acks/$n.ack"; fi
exit $r"#;

/// How long a push in the sync waits for its command's ack in the pod, in hundredths of a
/// second (the sync reads nothing else meanwhile).
const PUSH_WAITS_FOR_ACK: u32 = 50;

/// Reads what the driver wrote: whether its tmux session is there (first, so that when it is not,
/// everything after is final), the run log from `$2` (at most `$3` bytes), the acks not named
/// after `$5`, whether the turn's pack is there, and `in/`'s state (after the log). Each part
/// is a header line, and a size's worth of bytes where it has one.
const PULL: &str = r#"export LC_ALL=C; cd "$1" || { echo X; exit 0; }
off=$2; max=$3; s=$4; sock=$5; shift 5
if tmux -S "$sock" has-session -t "=$s" 2>/dev/null; then echo A1; else echo A0; fi
size=$(wc -c < run.log 2>/dev/null || echo 0)
n=$((size - off)); [ "$n" -lt 0 ] && n=0; [ "$n" -gt "$max" ] && n=$max
echo "L $n"
[ "$n" -gt 0 ] && tail -c +$((off + 1)) run.log | head -c "$n"
for f in acks/*.ack; do
  [ -f "$f" ] || continue
  b=${f#acks/}
  case "$b" in *[!0-9a-z.-]*) continue ;; esac
  case " $* " in *" $b "*) continue ;; esac
  c=$(head -c 65536 "$f"; echo x); c=${c%x}
  echo "K ${#c} $b"
  printf %s "$c"
done
[ -f trees.pack ] && [ -f trees.idx ] && echo P
if [ -d in ]; then echo I; else echo "C $(ls -d in.ended-* 2>/dev/null | sed 's/^in.ended-//' | sort -n | tail -n 1)"; fi
echo E"#;

/// The largest ack a pull takes (an ack is a few hundred bytes of JSON).
const MAX_ACK_BYTES: usize = 64 << 10;

/// `NNNN-hex.cmd.ack`, as the mailbox names a command's ack: nothing that could leave `acks/`.
fn is_ack_name(name: &str) -> bool {
    CommandName::parse_ack(name).is_some()
}

/// What one pull read.
#[derive(Debug, Default, PartialEq)]
struct Pulled {
    alive: bool,
    log: Vec<u8>,
    acks: Vec<(String, Vec<u8>)>,
    pack: bool,
    /// `None`: `in/` is there; `Some(n)`: renamed to `in.ended-<n>`.
    closed: Option<String>,
    /// The pod had no control folder for the run.
    no_ctl: bool,
}

fn parse_pull(out: &[u8]) -> Result<Pulled, String> {
    let mut p = Pulled::default();
    let mut rest = out;
    let line = |rest: &mut &[u8]| -> Option<String> {
        let i = rest.iter().position(|b| *b == b'\n')?;
        let l = String::from_utf8_lossy(&rest[..i]).into_owned();
        *rest = &rest[i + 1..];
        Some(l)
    };
    let take = |rest: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        if rest.len() < n {
            return None;
        }
        let (a, b) = rest.split_at(n);
        *rest = b;
        Some(a.to_vec())
    };
    loop {
        let Some(l) = line(&mut rest) else {
            return Err("the pull's output ended early".into());
        };
        let mut parts = l.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("X"), None, None) => {
                p.no_ctl = true;
                return Ok(p);
            }
            (Some("A1"), None, None) => p.alive = true,
            (Some("A0"), None, None) => p.alive = false,
            (Some("L"), Some(n), None) => {
                let n: usize = n.parse().map_err(|_| format!("bad line {l:?}"))?;
                p.log = take(&mut rest, n).ok_or("the run log was cut short")?;
            }
            (Some("K"), Some(n), Some(name)) => {
                let n: usize = n.parse().map_err(|_| format!("bad line {l:?}"))?;
                // The pod is the agent's (no uid split there): a name becomes a path in the
                // mirror only if it is an ack's name as the mailbox makes them.
                if !is_ack_name(name) || n > MAX_ACK_BYTES {
                    return Err(format!("refused ack line {l:?} in the pull's output"));
                }
                let bytes = take(&mut rest, n).ok_or("an ack was cut short")?;
                p.acks.push((name.to_owned(), bytes));
            }
            (Some("P"), None, None) => p.pack = true,
            (Some("I"), None, None) => p.closed = None,
            (Some("C"), n, None) => {
                let n = n.unwrap_or("");
                if n.len() > 20 || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("bad line {l:?} in the pull's output"));
                }
                p.closed = Some(n.to_owned());
            }
            (Some("E"), None, None) => return Ok(p),
            _ => return Err(format!("unexpected line {l:?} in the pull's output")),
        }
    }
}

/// Where the sync stands, for the watcher.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Status {
    /// The driver may still write.
    Running,
    /// The driver has stopped and everything it wrote is in the mirror.
    Stopped,
    /// The sandbox is gone (or has not answered for [`GONE_AFTER`]): why.
    Gone(String),
}

/// A run's sync task; it stops when this is dropped (with the watcher that started it).
pub(crate) struct Sync {
    status: Arc<Mutex<Status>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sync {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sync {
    pub(crate) fn status(&self) -> Status {
        self.status
            .lock()
            .map(|s| s.clone())
            .unwrap_or(Status::Running)
    }
}

/// An exec that failed: whether the provider said the sandbox is gone.
struct ExecFailed {
    gone: bool,
    message: String,
}

impl From<SandboxError> for ExecFailed {
    fn from(e: SandboxError) -> ExecFailed {
        ExecFailed {
            gone: matches!(e, SandboxError::Gone(_)),
            message: e.to_string(),
        }
    }
}

impl From<ControlError> for ExecFailed {
    fn from(e: ControlError) -> ExecFailed {
        ExecFailed {
            gone: false,
            message: e.to_string(),
        }
    }
}

/// Runs `req` as hangar's user in a remote sandbox.
/// The longest one exec in the pod may take: the pod is the agent's (a FIFO for `run.log`
/// would hold a pull forever), and a sandbox that does not answer must reach [`GONE_AFTER`].
const EXEC_TIMEOUT: Duration = Duration::from_secs(20);

/// The largest turn's pack taken from a pod (it is read whole into memory), and the most of
/// the driver's stderr kept.
const MAX_PACK_BYTES: u64 = 1 << 30;
const MAX_STDERR_BYTES: u64 = 1 << 20;

async fn exec(plane: &Runs, sb: &Sandbox, req: &ExecRequest) -> Result<Output, ExecFailed> {
    tokio::time::timeout(EXEC_TIMEOUT, exec_once(plane, sb, req))
        .await
        .map_err(|_| ExecFailed {
            gone: false,
            message: format!(
                "the sandbox did not answer a command in {} s",
                EXEC_TIMEOUT.as_secs()
            ),
        })?
}

async fn exec_once(plane: &Runs, sb: &Sandbox, req: &ExecRequest) -> Result<Output, ExecFailed> {
    match sb.env.provider {
        ProviderKind::Kubernetes => Ok(plane
            .sandboxes
            .providers
            .kubernetes()
            .await?
            .exec(sb, Who::Hangar, req)
            .await?),
        ProviderKind::E2b => Ok(plane
            .sandboxes
            .providers
            .e2b()
            .await?
            .exec(sb, Who::Hangar, req)
            .await?),
        ProviderKind::Docker if sb.mirrored() => Ok(plane
            .sandboxes
            .providers
            .docker(crate::sandboxes::harness_binds(&plane.sandboxes.tools))
            .await?
            .exec(sb, Who::Hangar, req)
            .await?),
        k => Err(ExecFailed {
            gone: false,
            message: format!("{k} sandboxes see the control folder: no sync"),
        }),
    }
}

/// A file of the pod's control folder, at most `max` bytes of it (more refuses: the agent can
/// make these files as large as it likes), read through one exec.
async fn read_file(
    plane: &Runs,
    sb: &Sandbox,
    path: &Path,
    max: u64,
) -> Result<Vec<u8>, ExecFailed> {
    let req = ExecRequest {
        argv: vec![
            "sh".into(),
            "-c".into(),
            r#"[ -f "$1" ] && [ ! -L "$1" ] || exit 3; exec head -c "$2" -- "$1""#.into(),
            "read".into(),
            path.display().to_string(),
            (max + 1).to_string(),
        ],
        cwd: Some(PathBuf::from("/")),
        ..ExecRequest::default()
    };
    let out = exec(plane, sb, &req).await?;
    let failed = |message: String| ExecFailed {
        gone: false,
        message,
    };
    if !out.success() {
        return Err(failed(format!(
            "cannot read {} in the sandbox: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    if out.stdout.len() as u64 > max {
        return Err(failed(format!(
            "{} in the sandbox is larger than {max} bytes: not taken",
            path.display()
        )));
    }
    Ok(out.stdout)
}

/// What a push did.
#[derive(Debug, PartialEq)]
enum Pushed {
    /// The command is in the pod's `in/` (now or before), with its ack when that came meanwhile.
    Landed(Option<Vec<u8>>),
    /// The pod's `in/` is closed.
    Closed,
}

/// Pushes one command file into the pod's `in/`, waiting up to `wait_ack` hundredths of a
/// second for its ack there.
async fn push(
    plane: &Runs,
    sb: &Sandbox,
    ctl_inside: &Path,
    name: &str,
    bytes: Vec<u8>,
    wait_ack: u32,
) -> Result<Pushed, ExecFailed> {
    let req = ExecRequest {
        argv: vec![
            "sh".into(),
            "-c".into(),
            PUSH.into(),
            "push".into(),
            ctl_inside.display().to_string(),
            name.into(),
            wait_ack.to_string(),
            (MAX_ACK_BYTES + 1).to_string(),
        ],
        stdin: Some(bytes),
        cwd: Some(PathBuf::from("/")),
        env: Vec::new(),
    };
    let out = exec(plane, sb, &req).await?;
    match out.status {
        // An ack larger than any the driver writes is left to the pull, which refuses it.
        0 | 5 => Ok(Pushed::Landed(
            Some(out.stdout).filter(|a| !a.is_empty() && a.len() <= MAX_ACK_BYTES),
        )),
        3 => Ok(Pushed::Closed),
        s => Err(ExecFailed {
            gone: false,
            message: format!(
                "cannot push command {name} into sandbox {} (exit {s}): {}",
                sb.id,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }),
    }
}

/// The control folder's name in the pod for a run.
pub(crate) fn ctl_inside(sb: &Sandbox, run_id: &str) -> PathBuf {
    sb.ctl_inside.join(format!("{run_id}.ctl"))
}

/// The command files waiting in `dir`, sorted (their names start with the sequence number).
fn waiting(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The messages answered `ended` on this side of the run's mirror (see the module's comment).
pub(crate) fn late_handed_back(ctl: &Path) -> Vec<u64> {
    std::fs::read_to_string(ctl.join(LATE))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

impl Runs {
    /// Lays out the run's control folder in the pod and starts the driver there: the folder,
    /// the driver (copied in for this turn, S2), the key (then removed from the mirror: the
    /// vault has it), the run script, what the mirror already holds (the run log's warnings,
    /// the rules file) and the prompts waiting in `in/`; then the run script in tmux session
    /// `run_id`.
    pub(crate) async fn start_remote(
        &self,
        sb: &Sandbox,
        run_id: &str,
        ctl_host: &Path,
        ctl_inside: &Path,
        args: &[std::ffi::OsString],
    ) -> Result<(), ControlError> {
        let launch = |what: &str, e: ExecFailed| {
            ControlError::Launch(format!("sandbox {}: {what}: {}", sb.id, e.message))
        };
        let ctl_s = ctl_inside.display().to_string();
        let mkdir = ExecRequest {
            argv: [
                "sh",
                "-c",
                "umask 077 && mkdir -p \"$1\" && cd \"$1\" && mkdir in acks staging pushed",
                "mkdir",
                &ctl_s,
            ]
            .map(str::to_owned)
            .to_vec(),
            cwd: Some(PathBuf::from("/")),
            ..ExecRequest::default()
        };
        let out = exec(self, sb, &mkdir)
            .await
            .map_err(|e| launch("cannot make the control folder", e))?;
        if !out.success() {
            return Err(ControlError::Launch(format!(
                "sandbox {}: cannot make the control folder {ctl_s}: {}",
                sb.id,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let host = ControlDir::at(ctl_host.to_owned());
        let mut files: Vec<(PathBuf, &str, u32)> = vec![(host.key(), "key", 0o400)];
        // (`tower.key`: policy governed in a docker sandbox with the uid split; refused where the
        // agent could read it, `turn_unsupported`.)
        for (name, mode) in [
            ("run.log", 0o600),
            ("rules.toml", 0o600),
            ("tower.key", 0o400),
        ] {
            if ctl_host.join(name).exists() {
                files.push((ctl_host.join(name), name, mode));
            }
        }
        for (src, name, mode) in files {
            self.copy_in_remote(sb, &src, &ctl_inside.join(name), mode)
                .await?;
        }
        // The vault keeps the run's key; the driver deletes its copy once read.
        let _ = tokio::fs::remove_file(host.key()).await;
        for name in waiting(&host.inbox()) {
            let bytes = tokio::fs::read(host.inbox().join(&name))
                .await
                .map_err(|e| ControlError::Internal(format!("{name}: {e}")))?;
            // The driver is not started yet: no ack to wait for.
            if push(self, sb, ctl_inside, &name, bytes, 0)
                .await
                .map_err(|e| launch("cannot hand the driver its prompt", e))?
                == Pushed::Closed
            {
                return Err(ControlError::Launch(format!(
                    "sandbox {}: the run's in/ is gone before the driver started",
                    sb.id
                )));
            }
        }
        self.start_in_sandbox(sb, run_id, ctl_host, ctl_inside, args)
            .await
    }

    async fn copy_in_remote(
        &self,
        sb: &Sandbox,
        src: &Path,
        dest: &Path,
        mode: u32,
    ) -> Result<(), ControlError> {
        crate::sandboxes::with_provider!(self.sandboxes, sb.env.provider, |p| p
            .copy_in(sb, src, dest, Who::Hangar, mode)
            .await
            .map_err(|e| ControlError::Launch(format!(
                "cannot copy {} into sandbox {}: {e}",
                dest.display(),
                sb.id
            ))))
    }
}

/// Lays out the mirror of a run whose control folder this replica lacks (it took the run over
/// from a replica that shares no disk with it, or lost its home): the folders, the doorbell and
/// the client's sequence (`Mailbox::adopt`); the sync then pulls the run log from its start and
/// the driver's acks, and the watcher resumes at the stored cursor.
async fn adopt(plane: &Runs, run_id: &str, ctl: &Path) {
    let home = plane.tools.home.clone();
    if ControlDir::for_run(&home, run_id).root() != ctl {
        tracing::warn!(run = %run_id, ctl = %ctl.display(), "the run's control folder is not under this replica's home, so it cannot be mirrored here; give every replica its home at the same path");
        return;
    }
    let id = run_id.to_owned();
    match tokio::task::spawn_blocking(move || hangar_mailbox::Mailbox::adopt(&home, &id)).await {
        Ok(Ok(())) => {
            tracing::info!(run = %run_id, "the run's control folder was not here: its mirror starts again from the sandbox");
        }
        Ok(Err(e)) => {
            tracing::warn!(run = %run_id, error = %e, "cannot lay out the run's mirror");
        }
        Err(e) => tracing::warn!(run = %run_id, error = %e, "cannot lay out the run's mirror"),
    }
}

/// Starts the sync of `run` if it runs in a remote sandbox.
pub(crate) async fn start(plane: &Arc<Runs>, run: &Run) -> Option<Sync> {
    let sb = plane.sandboxes.sandbox_of_run(&run.id).await?;
    if !is_remote(&sb) {
        return None;
    }
    let ctl = PathBuf::from(&run.ctl_path);
    if !ctl.exists() {
        adopt(plane, &run.id, &ctl).await;
    }
    let status = Arc::new(Mutex::new(Status::Running));
    let task = tokio::spawn(sync_loop(
        Arc::clone(plane),
        sb,
        run.id.clone(),
        PathBuf::from(&run.ctl_path),
        Arc::clone(&status),
    ));
    Some(Sync { status, task })
}

fn set(status: &Mutex<Status>, s: Status) {
    if let Ok(mut g) = status.lock() {
        *g = s;
    }
}

/// How often the pod is read while nothing was pushed.
const PULL_EVERY: Duration = Duration::from_millis(150);

async fn sync_loop(
    plane: Arc<Runs>,
    sb: Sandbox,
    run_id: String,
    ctl_host: PathBuf,
    status: Arc<Mutex<Status>>,
) {
    let host = ControlDir::at(ctl_host.clone());
    let inside = ctl_inside(&sb, &run_id);
    let mut pushed: HashSet<String> = HashSet::new();
    let mut acks: HashSet<String> = waiting(&host.acks()).into_iter().collect();
    let mut failing_since: Option<Instant> = None;
    let mut last_pull = Instant::now() - PULL_EVERY;
    let mut last_keep = Instant::now();
    let keep_every = keep_alive_every(&plane, &sb).await;
    let Some(check) = ack_check(&plane, &run_id, &status).await else {
        return;
    };
    if stream::streams(&sb) {
        // An E2B sandbox's timeout is extended while the stream carries the run too.
        let _keeping = keep_every.map(|every| {
            let (plane, sb) = (Arc::clone(&plane), sb.clone());
            AbortOnDrop(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    if let Err(e) = keep_alive(&plane, &sb).await {
                        tracing::warn!(sandbox = %sb.id, error = %e, "cannot extend the e2b sandbox's timeout");
                    }
                }
            }))
        });
        match stream::sync(&plane, &sb, &run_id, &ctl_host, &status, &check).await {
            stream::Ended::Done => return,
            stream::Ended::Poll => acks = waiting(&host.acks()).into_iter().collect(),
        }
    }
    loop {
        let step = async {
            let pushed_now = push_waiting(
                &plane,
                &sb,
                (&host, &inside),
                &check,
                &mut acks,
                &mut pushed,
            )
            .await?;
            if !pushed_now && last_pull.elapsed() < PULL_EVERY {
                return Ok(None);
            }
            last_pull = Instant::now();
            pull(&plane, &sb, (&host, &inside), &run_id, &acks)
                .await
                .map(Some)
        };
        match step.await {
            Ok(None) => {}
            Ok(Some(p)) => {
                if p.no_ctl {
                    set(
                        &status,
                        Status::Gone(format!(
                            "the run's control folder {} is gone from sandbox {}",
                            inside.display(),
                            sb.id
                        )),
                    );
                    return;
                }
                let ended = !p.alive;
                let cut_short = p.log.len() as u64 >= PULL_MAX;
                if let Err(e) = apply(
                    &plane, &sb, &run_id, &host, &inside, &check, &mut acks, &pushed, p,
                )
                .await
                {
                    // Counted as the sandbox not answering: a pull that can never be mirrored
                    // (a pack too large, a full disk) ends the turn after GONE_AFTER, not never.
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    tracing::warn!(run = %run_id, error = %e.message, "cannot mirror the run's control folder");
                    if e.gone || since.elapsed() >= GONE_AFTER {
                        set(&status, Status::Gone(gone_reason(&sb, &e.message)));
                        return;
                    }
                    tokio::time::sleep(PULL_EVERY).await;
                    continue;
                }
                failing_since = None;
                if ended && !cut_short {
                    // The pull read everything the driver wrote before it stopped.
                    set(&status, Status::Stopped);
                    return;
                }
                if cut_short {
                    last_pull = Instant::now() - PULL_EVERY;
                }
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                tracing::warn!(run = %run_id, error = %e.message, "cannot reach the run's sandbox");
                if e.gone || since.elapsed() >= GONE_AFTER {
                    set(&status, Status::Gone(gone_reason(&sb, &e.message)));
                    return;
                }
            }
        }
        if let Some(every) = keep_every
            && last_keep.elapsed() >= every
        {
            last_keep = Instant::now();
            if let Err(e) = keep_alive(&plane, &sb).await {
                tracing::warn!(run = %run_id, error = %e, "cannot extend the e2b sandbox's timeout");
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The run's key, to tell the driver's acks from any other; `None` (the status says why) when
/// it cannot be read for [`GONE_AFTER`].
async fn ack_check(plane: &Runs, run_id: &str, status: &Mutex<Status>) -> Option<AckCheck> {
    let mut failing_since: Option<Instant> = None;
    loop {
        match plane.run_key(run_id).await {
            Ok(key) => {
                return Some(AckCheck {
                    run: run_id.to_owned(),
                    key,
                    said: Mutex::default(),
                });
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                tracing::warn!(run = %run_id, error = %e, "cannot read the run's key");
                if since.elapsed() >= GONE_AFTER {
                    set(
                        status,
                        Status::Gone(format!("cannot read run {run_id}'s key: {e}")),
                    );
                    return None;
                }
                tokio::time::sleep(PULL_EVERY).await;
            }
        }
    }
}

/// In: pushes what the mailbox left in the mirror's `in/` into the sandbox; whether any landed.
async fn push_waiting(
    plane: &Runs,
    sb: &Sandbox,
    (host, inside): (&ControlDir, &Path),
    check: &AckCheck,
    acks: &mut HashSet<String>,
    pushed: &mut HashSet<String>,
) -> Result<bool, ExecFailed> {
    let mut pushed_now = false;
    let waiting_now: Vec<String> = waiting(&host.inbox())
        .into_iter()
        .filter(|n| !pushed.contains(n))
        .collect();
    for (i, name) in waiting_now.iter().enumerate() {
        let Ok(bytes) = tokio::fs::read(host.inbox().join(name)).await else {
            continue;
        };
        // Waiting for the ack holds the sync: only the last of several waits for it (the
        // others' acks come with the next pull).
        let wait = if i + 1 == waiting_now.len() {
            PUSH_WAITS_FOR_ACK
        } else {
            0
        };
        if let Pushed::Landed(ack) = push(plane, sb, inside, name, bytes, wait).await? {
            if let Some(ack) = ack {
                take_ack(host, check, acks, &format!("{name}.ack"), &ack)?;
            }
            pushed.insert(name.clone());
            pushed_now = true;
        }
    }
    Ok(pushed_now)
}

/// Out: one pull of what the driver wrote past the mirror's log, and the acks not yet here.
async fn pull(
    plane: &Runs,
    sb: &Sandbox,
    (host, inside): (&ControlDir, &Path),
    run_id: &str,
    acks: &HashSet<String>,
) -> Result<Pulled, ExecFailed> {
    let off = tokio::fs::metadata(host.run_log())
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    let mut argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        PULL.into(),
        "pull".into(),
        inside.display().to_string(),
        off.to_string(),
        PULL_MAX.to_string(),
        run_id.to_owned(),
        hangar_cloud::TMUX_SOCKET.into(),
    ];
    argv.extend(acks.iter().cloned());
    let req = ExecRequest {
        argv,
        cwd: Some(PathBuf::from("/")),
        ..ExecRequest::default()
    };
    let out = exec(plane, sb, &req).await?;
    parse_pull(&out.stdout).map_err(|message| ExecFailed {
        gone: false,
        message: format!(
            "{message} ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

fn gone_reason(sb: &Sandbox, message: &str) -> String {
    format!(
        "the {} sandbox {} is gone or does not answer ({message}); the driver's turn ended without its end",
        sb.env.provider, sb.id
    )
}

/// The run an ack read from the pod must answer, and the key it must be signed with.
struct AckCheck {
    run: String,
    key: RunKey,
    /// The names of acks found not to be the driver's, said once each.
    said: Mutex<HashSet<String>>,
}

/// Whether `bytes` is the driver's own ack `name` (`NNNN-hex.cmd.ack`): signed with the run's
/// key, for this run and this command (its sequence number, its nonce beginning with the name's
/// hex; or a refusal of a command the driver could not read, which has neither), as the
/// mailbox itself checks an ack on the local path.
fn genuine_ack(check: &AckCheck, name: &str, bytes: &[u8]) -> bool {
    let Some((cmd, parts)) = CommandName::parse_ack(name) else {
        return false;
    };
    let Ok(a) = serde_json::from_slice::<Ack>(bytes) else {
        return false;
    };
    let answers = (a.seq == parts.seq && parts.names_nonce(&a.nonce))
        || (a.seq == 0 && a.nonce.is_empty() && a.status == AckStatus::Refused);
    answers && Ack::parse_verified(bytes, &check.key, &check.run, cmd, a.seq, &a.nonce).is_some()
}

/// Writes an ack read from the pod into the mirror (where the mailbox waits for it); its command
/// no longer waits in the mirror's `in/`. An ack that is not the driver's (the agent, the
/// driver's own user in such a pod, can write `acks/` first) is left out and not marked read,
/// so the next pull reads that name again and the driver's own ack, when it replaces it, is
/// taken.
fn take_ack(
    host: &ControlDir,
    check: &AckCheck,
    acks: &mut HashSet<String>,
    name: &str,
    bytes: &[u8],
) -> Result<(), ExecFailed> {
    if !is_ack_name(name) {
        return Err(ExecFailed {
            gone: false,
            message: format!("refused ack name {name:?}"),
        });
    }
    if !genuine_ack(check, name, bytes) {
        if check
            .said
            .lock()
            .map(|mut s| s.insert(name.to_owned()))
            .unwrap_or(false)
        {
            tracing::warn!(run = %check.run, ack = %name, "an ack in the sandbox is not signed by the run's driver; ignored until the driver's own replaces it");
        }
        return Ok(());
    }
    let dest = host.acks().join(name);
    hangar_protocol::atomic::write_atomic(&dest, bytes, 0o600).map_err(|e| ExecFailed {
        gone: false,
        message: format!("{}: {e}", dest.display()),
    })?;
    acks.insert(name.to_owned());
    if let Some(cmd) = name.strip_suffix(".ack") {
        let _ = std::fs::remove_file(host.inbox().join(cmd));
        for d in ended_inboxes(host) {
            let _ = std::fs::remove_file(d.join(cmd));
        }
    }
    Ok(())
}

/// Writes one pull into the mirror, in the order the watcher needs: `in/` closed first (what
/// never reached the pod answered), then the acks, the pack when the log holds the turn's end,
/// the log last.
#[allow(clippy::too_many_arguments, reason = "one call site")]
async fn apply(
    plane: &Runs,
    sb: &Sandbox,
    run_id: &str,
    host: &ControlDir,
    inside: &Path,
    check: &AckCheck,
    acks: &mut HashSet<String>,
    pushed: &HashSet<String>,
    p: Pulled,
) -> Result<(), ExecFailed> {
    let internal = |message: String| ExecFailed {
        gone: false,
        message,
    };
    match &p.closed {
        Some(n) if host.inbox().is_dir() => {
            let key = plane.run_key(run_id).await?;
            let (h, run, pushed) = (host.clone(), run_id.to_owned(), pushed.clone());
            let n = if n.is_empty() {
                "remote".to_owned()
            } else {
                n.clone()
            };
            let late =
                tokio::task::spawn_blocking(move || close_mirror(&h, &n, &key, &run, &pushed))
                    .await
                    .map_err(|e| internal(e.to_string()))?
                    .map_err(|e| internal(format!("cannot close the mirror's in/: {e}")))?;
            if !late.is_empty() {
                tracing::info!(run = %run_id, messages = late.len(), "commands that came after in/ closed in the sandbox were answered ended");
            }
        }
        None if !host.inbox().is_dir() => {
            // The driver opened a fresh in/ (a late message continued the turn).
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new().mode(0o700).create(host.inbox());
        }
        _ => {}
    }
    for (name, bytes) in &p.acks {
        take_ack(host, check, acks, name, bytes)?;
    }
    // A mirror laid out here (`adopt`) takes commands once it holds the driver's acks: a run
    // made here has its sequence already, and this changes nothing.
    let _ = hangar_mailbox::Mailbox::adopted_ready(&plane.tools.home, run_id);
    // The turn's end may have come in the previous pull's chunk, or been cut between two.
    if p.pack && (!p.alive || ends_turn(&host.run_log(), &p.log)) {
        for name in ["trees.idx", "trees.pack"] {
            let bytes = read_file(plane, sb, &inside.join(name), MAX_PACK_BYTES).await?;
            let dest = host.root().join(name);
            hangar_protocol::atomic::write_atomic(&dest, &bytes, 0o600)
                .map_err(|e| internal(format!("{}: {e}", dest.display())))?;
        }
    }
    if !p.log.is_empty() {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(host.run_log())
            .and_then(|mut f| f.write_all(&p.log))
            .map_err(|e| internal(format!("{}: {e}", host.run_log().display())))?;
    }
    if !p.alive
        && let Ok(bytes) =
            read_file(plane, sb, &inside.join("driver.stderr"), MAX_STDERR_BYTES).await
    {
        let _ = std::fs::write(host.root().join("driver.stderr"), bytes);
    }
    Ok(())
}

/// Whether `chunk`, appended to the mirror's log, holds the driver's `hangar.turn_end` (the
/// mirror's last bytes are looked at too: a pull's chunk may cut the token in two).
fn ends_turn(mirror_log: &Path, chunk: &[u8]) -> bool {
    const TOKEN: &[u8] = b"\"hangar.turn_end\"";
    if contains(chunk, TOKEN) {
        return true;
    }
    let mut tail = Vec::new();
    if let Ok(mut f) = std::fs::File::open(mirror_log) {
        use std::io::{Read, Seek, SeekFrom};
        let keep = TOKEN.len() as u64;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if f.seek(SeekFrom::Start(len.saturating_sub(keep))).is_ok() {
            let _ = f.take(keep).read_to_end(&mut tail);
        }
    }
    tail.extend_from_slice(&chunk[..chunk.len().min(TOKEN.len())]);
    contains(&tail, TOKEN)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn ended_inboxes(host: &ControlDir) -> Vec<PathBuf> {
    std::fs::read_dir(host.root())
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("in.ended-"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Closes the mirror's `in/` as the driver closed the pod's (renamed to `in.ended-<n>`), and
/// answers `ended` what never reached the pod; the messages among them are added to the late
/// file.
fn close_mirror(
    host: &ControlDir,
    n: &str,
    key: &hangar_protocol::RunKey,
    run: &str,
    pushed: &HashSet<String>,
) -> Result<Vec<u64>, String> {
    let mut away = format!("in.ended-{n}");
    if host.root().join(&away).exists() {
        away = format!("in.ended-{n}-mirror");
    }
    let mut inbox = Inbox::open(host.clone(), Verifier::new(run, key.clone()))?;
    let messages = inbox.end_as(&(), &away, &|name| pushed.contains(name))?;
    if !messages.is_empty() {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(host.root().join(LATE))
            .map_err(|e| e.to_string())?;
        for seq in &messages {
            writeln!(f, "{seq}").map_err(|e| e.to_string())?;
        }
        f.sync_all().map_err(|e| e.to_string())?;
    }
    Ok(messages)
}

/// How often an e2b sandbox's timeout is extended while a turn runs (a third of it), or `None`.
async fn keep_alive_every(plane: &Runs, sb: &Sandbox) -> Option<Duration> {
    if sb.env.provider != ProviderKind::E2b {
        return None;
    }
    let p = plane.sandboxes.providers.e2b().await.ok()?;
    Some(p.timeout() / 3).filter(|d| !d.is_zero())
}

/// Extends an e2b sandbox's timeout; nothing for other providers.
async fn keep_alive(plane: &Runs, sb: &Sandbox) -> Result<(), String> {
    if sb.env.provider != ProviderKind::E2b {
        return Ok(());
    }
    let p = plane
        .sandboxes
        .providers
        .e2b()
        .await
        .map_err(|e| e.to_string())?;
    p.keep_alive(sb).await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    /// The push script as the pod runs it (`sh`): the command lands in `in/` once, and the ack
    /// the driver wrote meanwhile comes back on its stdout.
    #[test]
    fn a_push_lands_once_and_brings_back_its_ack() {
        let d = tempfile::tempdir().unwrap();
        for sub in ["in", "acks", "staging", "pushed"] {
            std::fs::create_dir(d.path().join(sub)).unwrap();
        }
        let push = |wait: &str| {
            use std::io::Write;
            let mut c = std::process::Command::new("sh")
                .args(["-c", PUSH, "push"])
                .arg(d.path())
                .args(["0001-ab.cmd", wait, "65537"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            c.stdin.take().unwrap().write_all(b"{cmd}").unwrap();
            c.wait_with_output().unwrap()
        };
        let out = push("0");
        assert_eq!(
            (out.status.code(), out.stdout.as_slice()),
            (Some(0), &b""[..])
        );
        assert_eq!(
            std::fs::read(d.path().join("in/0001-ab.cmd")).unwrap(),
            b"{cmd}"
        );
        // The driver acks it while a second push (after a restart) waits.
        let acks = d.path().join("acks");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            std::fs::write(acks.join("0001-ab.cmd.ack"), b"{ack}").unwrap();
        });
        let out = push("500");
        writer.join().unwrap();
        assert_eq!(
            (out.status.code(), out.stdout.as_slice()),
            (Some(5), &b"{ack}"[..])
        );
        std::fs::remove_dir(d.path().join("in")).unwrap_or_else(|_| {
            std::fs::remove_file(d.path().join("in/0001-ab.cmd")).unwrap();
            std::fs::remove_dir(d.path().join("in")).unwrap();
        });
        std::fs::remove_file(d.path().join("pushed/0001-ab.cmd")).unwrap();
        assert_eq!(push("0").status.code(), Some(3), "in/ closed");
    }

    /// An ack the agent planted in the pod's `acks/` is not taken, nor its name marked read:
    /// the driver's own ack, written over it later, is.
    #[test]
    fn a_planted_ack_is_ignored_and_the_drivers_own_is_taken_later() {
        let d = tempfile::tempdir().unwrap();
        let host = ControlDir::at(d.path().to_path_buf());
        std::fs::create_dir_all(host.acks()).unwrap();
        std::fs::create_dir_all(host.inbox()).unwrap();
        let key = RunKey::from_bytes([7; 32]);
        let check = AckCheck {
            run: "r-1".into(),
            key: RunKey::from_bytes([7; 32]),
            said: Mutex::default(),
        };
        let nonce = format!("ab12cd34{}", "0".repeat(24));
        let cmd = "0000000003-ab12cd34.cmd";
        let name = format!("{cmd}.ack");
        std::fs::write(host.inbox().join(cmd), b"{cmd}").unwrap();
        let mut acks = HashSet::new();
        let planted = [
            b"{\"status\":\"done\"}".to_vec(),
            // Signed with another key.
            Ack::seal(
                &RunKey::from_bytes([8; 32]),
                "r-1",
                cmd,
                3,
                &nonce,
                AckStatus::Done,
                "",
            )
            .to_bytes(),
            // The driver's ack of another command.
            Ack::seal(
                &key,
                "r-1",
                "0000000002-ab12cd34.cmd",
                3,
                &nonce,
                AckStatus::Done,
                "",
            )
            .to_bytes(),
            // Another run's.
            Ack::seal(&key, "r-2", cmd, 3, &nonce, AckStatus::Done, "").to_bytes(),
        ];
        for bytes in planted {
            assert!(take_ack(&host, &check, &mut acks, &name, &bytes).is_ok());
            assert!(acks.is_empty(), "{}", String::from_utf8_lossy(&bytes));
            assert!(!host.acks().join(&name).exists());
            assert!(host.inbox().join(cmd).exists());
        }
        let genuine = Ack::seal(&key, "r-1", cmd, 3, &nonce, AckStatus::Refused, "no").to_bytes();
        assert!(take_ack(&host, &check, &mut acks, &name, &genuine).is_ok());
        assert!(acks.contains(&name));
        assert_eq!(std::fs::read(host.acks().join(&name)).unwrap(), genuine);
        assert!(!host.inbox().join(cmd).exists());
        // A refusal of a command the driver could not read has no sequence number or nonce.
        let unread = Ack::seal(&key, "r-1", cmd, 0, "", AckStatus::Refused, "too big").to_bytes();
        assert!(genuine_ack(&check, &name, &unread));
        let unread_done = Ack::seal(&key, "r-1", cmd, 0, "", AckStatus::Done, "").to_bytes();
        assert!(!genuine_ack(&check, &name, &unread_done));
    }

    #[test]
    fn a_pull_is_read_part_by_part() {
        let out = b"A1\nL 5\nab\ncdK 3 0001-ab12.cmd.ack\n{x}P\nC 2\nE\n";
        let p = parse_pull(out).unwrap();
        assert!(p.alive && p.pack);
        assert_eq!(p.log, b"ab\ncd");
        assert_eq!(p.acks, vec![("0001-ab12.cmd.ack".into(), b"{x}".to_vec())]);
        assert_eq!(p.closed.as_deref(), Some("2"));
        assert!(parse_pull(b"A0\nL 9\nab").is_err(), "cut short");
        assert!(parse_pull(b"A0\nL 0\nI\n").is_err(), "no end");
        assert!(parse_pull(b"X\n").unwrap().no_ctl);
    }

    /// The pod is the agent's: what it prints never names a path outside the mirror's acks/.
    #[test]
    fn a_pull_naming_a_path_or_a_huge_ack_is_refused() {
        for name in [
            "../../../home/h/.ssh/authorized_keys",
            "/etc/passwd",
            "0001-ab/../../x.cmd.ack",
            "0001-ab12.cmd.ack/..",
            ".0001-ab12.cmd.ack",
            "0001-zz.cmd.ack",
            "x-ab12.cmd.ack",
            "0001-ab12.ack",
        ] {
            let out = format!("A1\nL 0\nK 2 {name}\n{{}}E\n");
            assert!(parse_pull(out.as_bytes()).is_err(), "{name}");
        }
        let huge = format!("A1\nL 0\nK {} 0001-ab12.cmd.ack\n", MAX_ACK_BYTES + 1);
        assert!(parse_pull(huge.as_bytes()).is_err());
        assert!(parse_pull(b"A0\nL 0\nC ../x\nE\n").is_err());
        assert!(parse_pull(b"A0\nL 0\nC 12\nE\n").is_ok());
    }

    /// A turn's end cut between two pulls still brings the pack over.
    #[test]
    fn a_turn_end_cut_between_two_pulls_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        std::fs::write(&log, b"{\"type\":\"hangar.tu").unwrap();
        assert!(ends_turn(&log, b"rn_end\",\"status\":0}\n"));
        assert!(!ends_turn(&log, b"rn_start\"}\n"));
        assert!(ends_turn(
            &dir.path().join("none"),
            b"x\"hangar.turn_end\"y"
        ));
        assert!(!ends_turn(&dir.path().join("none"), b""));
    }
}
