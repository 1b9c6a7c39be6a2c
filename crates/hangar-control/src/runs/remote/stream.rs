//! The mirror over one long-lived exec per live run, where the provider keeps one open
//! (Kubernetes' websocket exec): `hangar-driver --mirror` in the sandbox (the driver's
//! `mirror.rs` has the wire) sends the folder's state when it changes and lands the commands
//! written to its stdin. An idle run costs no exec and no poll: the stream carries a heartbeat
//! every 10 s, the mirror's `in/` is watched through its doorbell (the FIFO the mailbox rings
//! after each command it lands), with a look at `in/` every few seconds as a backstop.
//!
//! The states are the pull script's output, checked the same way ([`super::parse_pull`]) and
//! written into the mirror by the same [`super::apply`]; pushes are answered in order, and a
//! state that shows `in/` closed is applied only once every push sent before it is answered (so
//! a command that landed before the turn closed `in/` is never also answered `ended` here).
//!
//! A stream that breaks is opened again (from the mirror's log length and acks, so nothing is
//! taken twice); one that cannot be opened, or gives no state, for [`super::GONE_AFTER`] ends
//! the turn as gone, as polls that fail do. A sandbox where the stream cannot start at all (the
//! provider keeps none, or three in a row end before their first state) is polled instead.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hangar_mailbox::ControlDir;
use hangar_sandbox::{ExecRequest, ExecStream, Provider, ProviderKind, Sandbox, SandboxError, Who};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::{
    AckCheck, ExecFailed, GONE_AFTER, MAX_ACK_BYTES, PULL_MAX, Pulled, Status, apply, ctl_inside,
    gone_reason, parse_pull, set, waiting,
};
use crate::runs::Runs;

/// A stream silent this long (its heartbeat is every 10 s) is taken as broken.
const SILENT_FOR: Duration = Duration::from_secs(25);
/// How often the mirror's `in/` is looked at besides its doorbell.
const LOOK_EVERY: Duration = Duration::from_secs(5);
/// Streams in a row that ended before their first state, after which the run is polled.
const FALLBACK_AFTER: u32 = 3;

/// How a stream sync ended.
pub(super) enum Ended {
    /// The status says how (stopped, gone).
    Done,
    /// No stream could be kept: poll instead.
    Poll,
}

/// Whether runs in `sb` are mirrored over a stream (Kubernetes, unless `HANGAR_K8S_MIRROR` is
/// `poll`; E2B, envd's process stream; a mirrored Docker sandbox always).
pub(super) fn streams(sb: &Sandbox) -> bool {
    match sb.env.provider {
        ProviderKind::Kubernetes => {
            hangar_protocol::env::var(hangar_protocol::env::HANGAR_K8S_MIRROR).as_deref()
                != Some("poll")
        }
        ProviderKind::E2b => true,
        ProviderKind::Docker => sb.mirrored(),
        ProviderKind::Local => false,
    }
}

/// One message of the stream.
#[derive(Debug, PartialEq)]
enum Message {
    State(Pulled),
    Pushed(String, u8),
    Beat,
}

/// The longest line the stream may send outside a state's bytes.
const LINE_MAX: u64 = 4096;

async fn line<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    (&mut *r)
        .take(LINE_MAX)
        .read_until(b'\n', &mut buf)
        .await
        .map_err(|e| format!("the mirror stream broke: {e}"))?;
    if buf.last() != Some(&b'\n') {
        return Err(if buf.is_empty() {
            "the mirror stream ended".into()
        } else {
            "the mirror stream sent a line too long or cut short".into()
        });
    }
    Ok(buf)
}

/// Reads one message: a state is gathered whole (its byte counts bounded as a pull's are) and
/// read by [`parse_pull`].
async fn message<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Result<Message, String> {
    let first = line(r).await?;
    let text = String::from_utf8_lossy(&first[..first.len() - 1]).into_owned();
    let mut words = text.split(' ');
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("B"), None, None, None) => return Ok(Message::Beat),
        (Some("R"), Some(name), Some(code), None) => {
            let code = code
                .parse()
                .map_err(|_| format!("bad line {text:?} from the mirror stream"))?;
            return Ok(Message::Pushed(name.to_owned(), code));
        }
        (Some("X" | "A0" | "A1"), None, None, None) => {}
        _ => return Err(format!("unexpected line {text:?} from the mirror stream")),
    }
    let mut raw = first;
    let mut last = text;
    while last != "E" && last != "X" {
        let l = line(r).await?;
        last = String::from_utf8_lossy(&l[..l.len() - 1]).into_owned();
        raw.extend_from_slice(&l);
        let mut w = last.split(' ');
        let n = match (w.next(), w.next()) {
            (Some("L"), Some(n)) => n.parse::<u64>().ok().filter(|n| *n <= PULL_MAX),
            (Some("K"), Some(n)) => n.parse::<u64>().ok().filter(|n| *n <= MAX_ACK_BYTES as u64),
            _ => Some(0),
        }
        .ok_or_else(|| format!("refused line {last:?} from the mirror stream"))?;
        if n > 0 {
            let start = raw.len();
            raw.resize(start + n as usize, 0);
            r.read_exact(&mut raw[start..])
                .await
                .map_err(|e| format!("the mirror stream broke: {e}"))?;
        }
    }
    parse_pull(&raw).map(Message::State)
}

/// The doorbell of the mirror's `in/`, heard here (no driver listens to a mirror's).
struct Bell(Option<tokio::net::unix::pipe::Receiver>);

impl Bell {
    fn open(host: &ControlDir) -> Bell {
        Bell(
            hangar_mailbox::bell::listen(&host.bell())
                .and_then(|fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok()),
        )
    }

    /// Returns when rung (its rings drained), or after [`LOOK_EVERY`].
    async fn rung(&self) {
        let Some(rx) = &self.0 else {
            tokio::time::sleep(Duration::from_millis(25)).await;
            return;
        };
        if tokio::time::timeout(LOOK_EVERY, rx.readable())
            .await
            .is_ok()
        {
            let mut buf = [0u8; 256];
            while matches!(rx.try_read(&mut buf), Ok(n) if n > 0) {}
        }
    }
}

/// A task aborted with its owner.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a sync keeps between its streams.
struct Mirror<'a> {
    plane: &'a Runs,
    sb: &'a Sandbox,
    run_id: &'a str,
    host: ControlDir,
    inside: PathBuf,
    check: &'a AckCheck,
    acks: HashSet<String>,
    pushed: HashSet<String>,
}

/// Mirrors the run over streams until it stops or is gone (or no stream can be kept).
pub(super) async fn sync(
    plane: &Arc<Runs>,
    sb: &Sandbox,
    run_id: &str,
    ctl_host: &Path,
    status: &Mutex<Status>,
    check: &AckCheck,
) -> Ended {
    let host = ControlDir::at(ctl_host.to_owned());
    let bell = Bell::open(&host);
    let mut m = Mirror {
        plane,
        sb,
        run_id,
        acks: waiting(&host.acks()).into_iter().collect(),
        inside: ctl_inside(sb, run_id),
        host,
        check,
        pushed: HashSet::new(),
    };
    let mut failing_since: Option<Instant> = None;
    let mut stillborn = 0;
    loop {
        let mut got_state = false;
        let e = match m.stream(&bell, status, &mut got_state).await {
            Ok(()) => return Ended::Done,
            Err(e) => e,
        };
        if got_state {
            stillborn = 0;
            failing_since = None;
        } else {
            stillborn += 1;
        }
        let since = *failing_since.get_or_insert_with(Instant::now);
        tracing::warn!(run = %run_id, error = %e.message, "the run's mirror stream ended; opening another");
        if e.gone || since.elapsed() >= GONE_AFTER {
            set(status, Status::Gone(gone_reason(sb, &e.message)));
            return Ended::Done;
        }
        if stillborn >= FALLBACK_AFTER {
            tracing::warn!(run = %run_id, "no mirror stream could be kept: the run's folder is polled");
            return Ended::Poll;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

impl Mirror<'_> {
    async fn open(&self) -> Result<ExecStream, ExecFailed> {
        let req = ExecRequest {
            argv: vec![
                crate::sandboxes::driver_inside().display().to_string(),
                "--mirror".into(),
                self.inside.display().to_string(),
                hangar_cloud::TMUX_SOCKET.into(),
                self.run_id.to_owned(),
            ],
            cwd: Some(PathBuf::from("/")),
            ..ExecRequest::default()
        };
        let opened = async {
            match self.sb.env.provider {
                ProviderKind::Kubernetes => Ok(self
                    .plane
                    .sandboxes
                    .providers
                    .kubernetes()
                    .await?
                    .exec_stream(self.sb, Who::Hangar, &req)
                    .await?),
                ProviderKind::E2b => Ok(self
                    .plane
                    .sandboxes
                    .providers
                    .e2b()
                    .await?
                    .exec_stream(self.sb, Who::Hangar, &req)
                    .await?),
                ProviderKind::Docker => Ok(self
                    .plane
                    .sandboxes
                    .providers
                    .docker(crate::sandboxes::harness_binds(&self.plane.sandboxes.tools))
                    .await?
                    .exec_stream(self.sb, Who::Hangar, &req)
                    .await?),
                k => Err(ExecFailed::from(SandboxError::Unsupported(format!(
                    "{k} sandboxes keep no mirror stream"
                )))),
            }
        };
        tokio::time::timeout(super::EXEC_TIMEOUT, opened)
            .await
            .map_err(|_| ExecFailed {
                gone: false,
                message: "the sandbox did not open the mirror stream".into(),
            })?
    }

    /// Opens a stream and mirrors over it: `Ok` once the status is final; the error when the
    /// stream broke (`got_state`: whether any state came over it).
    async fn stream(
        &mut self,
        bell: &Bell,
        status: &Mutex<Status>,
        got_state: &mut bool,
    ) -> Result<(), ExecFailed> {
        let broke = |message: String| ExecFailed {
            gone: false,
            message,
        };
        let mut s = self.open().await?;
        let off = tokio::fs::metadata(self.host.run_log())
            .await
            .map(|m| m.len())
            .unwrap_or(0);
        let mut hello = format!("S {off}");
        for a in &self.acks {
            hello.push(' ');
            hello.push_str(a);
        }
        hello.push('\n');
        s.stdin
            .write_all(hello.as_bytes())
            .await
            .map_err(|e| broke(format!("cannot write to the mirror stream: {e}")))?;
        // Read in a task of its own: a read cut off by the doorbell would lose bytes.
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let stdout = s.stdout;
        let _reader = AbortOnDrop(tokio::spawn(async move {
            let mut r = BufReader::new(stdout);
            loop {
                let m = tokio::time::timeout(SILENT_FOR, message(&mut r))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "the mirror stream was silent for {} s",
                            SILENT_FOR.as_secs()
                        ))
                    });
                let stop = m.is_err();
                if tx.send(m).await.is_err() || stop {
                    return;
                }
            }
        }));
        let mut in_flight: HashSet<String> = HashSet::new();
        let mut states: VecDeque<Pulled> = VecDeque::new();
        self.push(&mut s.stdin, &mut in_flight).await?;
        loop {
            tokio::select! {
                m = rx.recv() => {
                    let m = m
                        .unwrap_or_else(|| Err("the mirror stream's reader stopped".into()))
                        .map_err(broke)?;
                    match m {
                        Message::Beat => {}
                        Message::Pushed(name, code) => {
                            in_flight.remove(&name);
                            match code {
                                0 | 5 => { self.pushed.insert(name); }
                                3 => {}
                                c => return Err(broke(format!(
                                    "cannot push command {name} into sandbox {} (code {c})", self.sb.id
                                ))),
                            }
                        }
                        Message::State(p) => {
                            *got_state = true;
                            states.push_back(p);
                        }
                    }
                }
                () = bell.rung() => {
                    self.push(&mut s.stdin, &mut in_flight).await?;
                }
            }
            while states
                .front()
                .is_some_and(|p| p.closed.is_none() || in_flight.is_empty())
            {
                let Some(p) = states.pop_front() else { break };
                if self.apply(p, status).await? {
                    return Ok(());
                }
            }
        }
    }

    /// Sends the commands waiting in the mirror's `in/` not yet pushed nor in flight.
    async fn push(
        &mut self,
        stdin: &mut std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
        in_flight: &mut HashSet<String>,
    ) -> Result<(), ExecFailed> {
        for name in waiting(&self.host.inbox()) {
            if self.pushed.contains(&name) || in_flight.contains(&name) {
                continue;
            }
            let Ok(bytes) = tokio::fs::read(self.host.inbox().join(&name)).await else {
                continue;
            };
            let mut msg = format!("P {name} {}\n", bytes.len()).into_bytes();
            msg.extend_from_slice(&bytes);
            stdin.write_all(&msg).await.map_err(|e| ExecFailed {
                gone: false,
                message: format!("cannot write to the mirror stream: {e}"),
            })?;
            in_flight.insert(name);
        }
        stdin.flush().await.map_err(|e| ExecFailed {
            gone: false,
            message: format!("cannot write to the mirror stream: {e}"),
        })
    }

    /// Writes one state into the mirror; whether the status is now final.
    async fn apply(&mut self, p: Pulled, status: &Mutex<Status>) -> Result<bool, ExecFailed> {
        if p.no_ctl {
            set(
                status,
                Status::Gone(format!(
                    "the run's control folder {} is gone from sandbox {}",
                    self.inside.display(),
                    self.sb.id
                )),
            );
            return Ok(true);
        }
        let ended = !p.alive;
        apply(
            self.plane,
            self.sb,
            self.run_id,
            &self.host,
            &self.inside,
            self.check,
            &mut self.acks,
            &self.pushed,
            p,
        )
        .await?;
        if ended {
            // The driver's lock was gone before this state was read: it is the last.
            set(status, Status::Stopped);
        }
        Ok(ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(bytes: &[u8]) -> Vec<Result<Message, String>> {
        let mut r = BufReader::new(bytes);
        let mut out = Vec::new();
        loop {
            let m = message(&mut r).await;
            let stop = m.is_err();
            out.push(m);
            if stop {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn the_stream_is_read_message_by_message() {
        let ack = "0001-ab.cmd.ack";
        let wire = format!("B\nR 0001-ab.cmd 0\nA1\nL 3\nabcK 2 {ack}\n{{}}P\nC 4\nE\nX\n");
        let got = read_all(wire.as_bytes()).await;
        assert_eq!(got[0], Ok(Message::Beat));
        assert_eq!(got[1], Ok(Message::Pushed("0001-ab.cmd".into(), 0)));
        let Ok(Message::State(p)) = &got[2] else {
            panic!("{:?}", got[2])
        };
        assert!(p.alive && p.pack);
        assert_eq!(p.log, b"abc");
        assert_eq!(p.acks, vec![(ack.to_owned(), b"{}".to_vec())]);
        assert_eq!(p.closed.as_deref(), Some("4"));
        let Ok(Message::State(x)) = &got[3] else {
            panic!("{:?}", got[3])
        };
        assert!(x.no_ctl);
        assert_eq!(got[4], Err("the mirror stream ended".into()));
    }

    /// What the sandbox sends is bounded as a pull's output is: no log chunk past the pull's
    /// most, no ack past an ack's, no path for a name, no endless line.
    #[tokio::test]
    async fn a_stream_naming_a_path_or_sending_too_much_is_refused() {
        let too_long = format!("A1\nL {}\n", PULL_MAX + 1);
        let huge_ack = format!("A1\nK {} 0001-ab.cmd.ack\n", MAX_ACK_BYTES + 1);
        let endless = "A".repeat(10_000);
        for wire in [
            too_long.as_str(),
            huge_ack.as_str(),
            "A1\nK 2 ../../x.ack\n{}E\n",
            endless.as_str(),
            "Z\n",
        ] {
            let got = read_all(wire.as_bytes()).await;
            assert!(
                matches!(got.last(), Some(Err(_))) && got.len() == 1,
                "{wire:?}: {got:?}"
            );
        }
    }
}
