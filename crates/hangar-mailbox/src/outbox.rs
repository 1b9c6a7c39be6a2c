//! The outbox: the control plane (and the `hangar` CLI, the conformance rig, the tests) writes
//! commands and reads the driver's signed answers.
//!
//! Sending is two steps so the driver never reads half a file: the command is written (and
//! fsynced) in `staging/`, then renamed into `in/`. When the turn has ended the driver has
//! renamed `in/` away, so the rename fails with "no such file": that is reported as
//! [`Outcome::Ended`] at once, with the command handed back, never as an I/O error.

use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use hangar_protocol::atomic::{self, Durability};
use hangar_protocol::{Ack, AckStatus, Command, Kind, RunKey};

use crate::ctl::{self, ControlDir};
use crate::name::{self, CommandName};
use crate::wait::{AckWait, Poll};

/// What can go wrong on the client side.
#[derive(Debug, thiserror::Error)]
pub enum MailboxError {
    #[error("{0:?} is not a run id (1-64 characters of letters, digits, '-' and '_')")]
    BadRunId(String),
    #[error("no run {run} under {home} (is HANGAR_HOME right? `ls {home}/runs`)")]
    NoSuchRun { run: String, home: String },
    #[error("run {0} already exists")]
    RunExists(String),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error(
        "no answer from the driver within {0:?}; the driver may have stopped (see `hangar log RUN`)"
    )]
    Timeout(Duration),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> MailboxError {
    let what = what.into();
    move |source| MailboxError::Io { what, source }
}

/// The answer to one command.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The driver carried it out.
    Done,
    /// The driver refused it; nothing was executed.
    Refused(String),
    /// The turn has ended before the command was passed on; here it is back, so the next turn
    /// can start with it (S19).
    Ended { handed_back: Command },
}

/// A command that landed in `in/`.
#[derive(Clone, Debug)]
pub struct Sent {
    pub name: String,
    pub command: Command,
}

/// A run's mailbox, seen from the client.
#[derive(Clone, Debug)]
pub struct Mailbox {
    run: String,
    ctl: ControlDir,
    client: PathBuf,
    key: RunKey,
}

impl Mailbox {
    /// Creates a new run's control folder with a fresh key: `key` (0400) in the control folder for
    /// the driver, a copy (0600) in the client's folder for later commands.
    pub fn create(home: &Path, run: &str) -> Result<Mailbox, MailboxError> {
        Mailbox::create_with(home, run, KeyCopy::File)
    }

    /// Like [`Mailbox::create`], but the client keeps no copy of the key on disk: the caller
    /// keeps it (the control plane, encrypted in its vault) and reopens the mailbox with
    /// [`Mailbox::open_with_key`].
    pub fn create_keeping_key(home: &Path, run: &str) -> Result<Mailbox, MailboxError> {
        Mailbox::create_with(home, run, KeyCopy::Caller)
    }

    /// Opens a run's mailbox with a key the caller kept.
    pub fn open_with_key(home: &Path, run: &str, key: RunKey) -> Result<Mailbox, MailboxError> {
        if !ctl::valid_run_id(run) {
            return Err(MailboxError::BadRunId(run.to_owned()));
        }
        let client = ctl::client_dir(home, run);
        let ctl = ControlDir::for_run(home, run);
        if !client.join("seq").exists() || !ctl.root().exists() {
            return Err(MailboxError::NoSuchRun {
                run: run.to_owned(),
                home: home.display().to_string(),
            });
        }
        Ok(Mailbox {
            run: run.to_owned(),
            ctl,
            client,
            key,
        })
    }

    /// Lays out, on this machine, the client's side of a run whose control folder lives
    /// elsewhere and is mirrored here (a remote sandbox's run taken over by a replica that shares
    /// no disk with the one that started it, or whose home was lost): the control folder with
    /// its `staging/`, `in/`, `acks/` and doorbell, and the client's folder. No command can be
    /// sent yet ([`Mailbox::open_with_key`] says there is no such run) until
    /// [`Mailbox::adopted_ready`], once the mirror holds the driver's acks: the sequence then
    /// starts above every command they name. No key: the caller keeps it. Whatever is already
    /// there is kept.
    pub fn adopt(home: &Path, run: &str) -> Result<(), MailboxError> {
        if !ctl::valid_run_id(run) {
            return Err(MailboxError::BadRunId(run.to_owned()));
        }
        let ctl = ControlDir::for_run(home, run);
        let client = ctl::client_dir(home, run);
        let mut b = fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        for d in [ctl.staging(), ctl.inbox(), ctl.acks(), client.clone()] {
            b.create(&d)
                .map_err(io_err(format!("create {}", d.display())))?;
        }
        if !ctl.bell().exists() {
            crate::bell::make(&ctl.bell()).map_err(io_err("make the doorbell"))?;
        }
        Ok(())
    }

    /// Opens an adopted run ([`Mailbox::adopt`]) to commands once its mirror holds the driver's
    /// acks: a sequence file that holds no number yet, so the first command is numbered above
    /// every command the control folder shows. Nothing changes for a run that has its file.
    pub fn adopted_ready(home: &Path, run: &str) -> Result<(), MailboxError> {
        if !ctl::valid_run_id(run) {
            return Err(MailboxError::BadRunId(run.to_owned()));
        }
        let seq = ctl::client_dir(home, run).join("seq");
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&seq)
        {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                Err(io_err(format!("create {}", seq.display()))(e))
            }
            _ => Ok(()),
        }
    }

    fn create_with(home: &Path, run: &str, copy: KeyCopy) -> Result<Mailbox, MailboxError> {
        if !ctl::valid_run_id(run) {
            return Err(MailboxError::BadRunId(run.to_owned()));
        }
        let runs = home.join("runs");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&runs)
            .map_err(io_err(format!("create {}", runs.display())))?;
        let ctl = ControlDir::for_run(home, run);
        match fs::DirBuilder::new().mode(0o700).create(ctl.root()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(MailboxError::RunExists(run.to_owned()));
            }
            Err(e) => return Err(io_err(format!("create {}", ctl.root().display()))(e)),
        }
        for d in [ctl.staging(), ctl.inbox(), ctl.acks()] {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&d)
                .map_err(io_err(format!("create {}", d.display())))?;
        }
        crate::bell::make(&ctl.bell()).map_err(io_err("make the doorbell"))?;
        let client = ctl::client_dir(home, run);
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&client)
            .map_err(io_err(format!("create {}", client.display())))?;
        let key = RunKey::generate().map_err(io_err("make the run key"))?;
        let text = key.to_file_text();
        if copy == KeyCopy::File {
            atomic::write_new(&client.join("key"), text.as_bytes(), 0o600)
                .map_err(io_err("write the client's key"))?;
        }
        atomic::write_new(&client.join("seq"), b"0", 0o600)
            .map_err(io_err("write the sequence file"))?;
        atomic::write_via(
            &ctl.staging().join(".key"),
            &ctl.key(),
            text.as_bytes(),
            0o400,
        )
        .map_err(io_err("write the run key"))?;
        Ok(Mailbox {
            run: run.to_owned(),
            ctl,
            client,
            key,
        })
    }

    /// Opens an existing run's mailbox (a later `hangar steer`, `approve`, ...).
    pub fn open(home: &Path, run: &str) -> Result<Mailbox, MailboxError> {
        if !ctl::valid_run_id(run) {
            return Err(MailboxError::BadRunId(run.to_owned()));
        }
        let client = ctl::client_dir(home, run);
        let ctl = ControlDir::for_run(home, run);
        if !client.join("key").exists() || !ctl.root().exists() {
            return Err(MailboxError::NoSuchRun {
                run: run.to_owned(),
                home: home.display().to_string(),
            });
        }
        let key =
            RunKey::read_file(&client.join("key")).map_err(io_err("read the client's key"))?;
        Ok(Mailbox {
            run: run.to_owned(),
            ctl,
            client,
            key,
        })
    }

    pub fn run(&self) -> &str {
        &self.run
    }

    pub fn ctl(&self) -> &ControlDir {
        &self.ctl
    }

    pub fn key(&self) -> &RunKey {
        &self.key
    }

    /// The next sequence number, allocated under an exclusive lock on `seq`, so concurrent
    /// clients of one run never share one. The lock is held (by the returned file) until the
    /// command has landed in `in/`, so commands land in sequence order and the driver never sees
    /// a higher number before a lower one.
    ///
    /// The number is written in one `pwrite` of a fixed width at offset 0, never truncating
    /// first: a client killed in the middle (scripts/load kills a `hangar serve` replica with
    /// SIGKILL while it answers) leaves either the old number or the new one, never an empty
    /// file that would restart the run's sequence at 1 and have every later command refused as
    /// a replay. A file that still does not read as a number (damaged by hand) is rebuilt from
    /// the highest sequence number among the command files of the control folder. The file is
    /// not fsynced: after a machine crash the driver, and with it the run's sequence, is gone.
    fn next_seq(&self) -> Result<(u64, fs::File), MailboxError> {
        let path = self.client.join("seq");
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err("open the sequence file"))?;
        f.lock().map_err(io_err("lock the sequence file"))?;
        let mut s = String::new();
        f.read_to_string(&mut s)
            .map_err(io_err("read the sequence file"))?;
        let last = match s.trim().parse::<u64>() {
            Ok(n) => n,
            Err(_) => self.highest_landed_seq(),
        };
        let next = last + 1;
        f.write_all_at(format!("{next:020}").as_bytes(), 0)
            .map_err(io_err("write the sequence file"))?;
        Ok((next, f))
    }

    /// The highest sequence number among the command files in the control folder (`staging/`,
    /// `in/`, the ended inboxes, `acks/`): every command that ever landed has its file in one.
    fn highest_landed_seq(&self) -> u64 {
        let Ok(top) = fs::read_dir(self.ctl.root()) else {
            return 0;
        };
        top.filter_map(Result::ok)
            .filter(|dir| dir.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|dir| fs::read_dir(dir.path()).ok())
            .flat_map(|entries| entries.filter_map(Result::ok))
            .filter_map(|e| name::seq_of(&e.file_name().to_string_lossy()))
            .max()
            .unwrap_or(0)
    }

    /// Seals and delivers a command. `Err(Ok(command))`-like cases are folded into
    /// [`Delivery::TurnEnded`].
    pub fn send(&self, kind: Kind, body: Value) -> Result<Delivery, MailboxError> {
        self.send_recorded(kind, body, |_| Ok(()))
    }

    /// [`Mailbox::send`], calling `record` with the sealed command before it lands (its
    /// sequence number is known by then, and no other client can land one meanwhile): a
    /// sender that records what it sends can never have a command the driver carried out and
    /// it has no record of, even if it is killed right after. If `record` fails, nothing lands.
    pub fn send_recorded(
        &self,
        kind: Kind,
        body: Value,
        record: impl FnOnce(&Command) -> Result<(), String>,
    ) -> Result<Delivery, MailboxError> {
        let (seq, _lock) = self.next_seq()?;
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)
            .map_err(|e| io_err("OS random source")(io::Error::other(e.to_string())))?;
        let command = Command::seal(&self.key, &self.run, seq, nonce, kind, body);
        let name = CommandName::format(seq, &nonce[..4]);
        record(&command).map_err(|e| io_err("record the command")(io::Error::other(e)))?;
        self.deliver_bytes(&name, &command.to_bytes())
            .map(|landed| {
                if landed {
                    Delivery::Landed(Sent { name, command })
                } else {
                    Delivery::TurnEnded(command)
                }
            })
    }

    /// Stages `bytes` under `name` and renames them into `in/`. `Ok(false)` when `in/` is gone
    /// (the turn has ended). Public so tests can deliver hostile files the same way.
    pub fn deliver_bytes(&self, name: &str, bytes: &[u8]) -> Result<bool, MailboxError> {
        let staged = self.ctl.staging().join(name);
        atomic::write_new_with(&staged, bytes, 0o600, Durability::Visible)
            .map_err(io_err(format!("stage {}", staged.display())))?;
        match fs::rename(&staged, self.ctl.inbox().join(name)) {
            Ok(()) => {
                crate::bell::ring(&self.ctl.bell());
                Ok(true)
            }
            Err(e) => {
                let _ = fs::remove_file(&staged);
                if e.kind() == io::ErrorKind::NotFound {
                    Ok(false)
                } else {
                    Err(io_err("move the command into in/")(e))
                }
            }
        }
    }

    /// Waits for the driver's signed answer to `sent`, on [`AckWait`]'s schedule. Files that do
    /// not verify are ignored.
    pub fn wait(&self, sent: &Sent, timeout: Duration) -> Result<Outcome, MailboxError> {
        let mut wait = AckWait::new(timeout);
        loop {
            match wait.poll(self, sent)? {
                Poll::Answered(outcome) => return Ok(outcome),
                Poll::Again(pause) => std::thread::sleep(pause),
            }
        }
    }

    /// The driver's signed answer to `sent` if it is there yet (one small read; a file that does
    /// not verify counts as not there). [`AckWait`] polls it.
    pub fn poll_ack(&self, sent: &Sent) -> Option<Outcome> {
        let bytes = fs::read(self.ctl.ack_for(&sent.name)).ok()?;
        let c = &sent.command;
        let ack = Ack::parse_verified(&bytes, &self.key, &self.run, &sent.name, c.seq, &c.nonce)
            // A command the driver could not read (over the size limit, say) is refused under its
            // file name alone: the driver never learnt its sequence number or nonce. The ack is
            // still signed with the run's key, and only a refusal is taken that way.
            .or_else(|| {
                Ack::parse_verified(&bytes, &self.key, &self.run, &sent.name, 0, "")
                    .filter(|a| a.status == AckStatus::Refused)
            })?;
        Some(match ack.status {
            AckStatus::Done => Outcome::Done,
            AckStatus::Refused => Outcome::Refused(ack.reason),
            AckStatus::Ended => Outcome::Ended {
                handed_back: sent.command.clone(),
            },
        })
    }

    /// Sends and waits.
    pub fn request(
        &self,
        kind: Kind,
        body: Value,
        timeout: Duration,
    ) -> Result<Outcome, MailboxError> {
        match self.send(kind, body)? {
            Delivery::Landed(sent) => self.wait(&sent, timeout),
            Delivery::TurnEnded(command) => Ok(Outcome::Ended {
                handed_back: command,
            }),
        }
    }
}

/// Where the client's copy of a new run's key goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyCopy {
    /// `<run>.client/key`, 0600.
    File,
    /// Nowhere on disk: the caller keeps it.
    Caller,
}

/// Whether a command landed in `in/`.
#[derive(Clone, Debug)]
pub enum Delivery {
    Landed(Sent),
    /// `in/` was gone: the turn has ended. The command comes back to the caller.
    TurnEnded(Command),
}

#[cfg(test)]
mod tests {
    use super::*;
    use hangar_protocol::command::body;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Instant;

    #[test]
    fn create_lays_out_the_control_folder_with_private_modes() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create(home.path(), "run-1").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(m.ctl().root()), 0o700);
        assert_eq!(mode(&m.ctl().key()), 0o400);
        assert_eq!(
            mode(&ctl::client_dir(home.path(), "run-1").join("key")),
            0o600
        );
        assert_eq!(RunKey::read_file(&m.ctl().key()).unwrap(), *m.key());
        assert!(matches!(
            Mailbox::create(home.path(), "run-1"),
            Err(MailboxError::RunExists(_))
        ));
        assert!(matches!(
            Mailbox::create(home.path(), "../x"),
            Err(MailboxError::BadRunId(_))
        ));
        assert_eq!(Mailbox::open(home.path(), "run-1").unwrap().key(), m.key());
        assert!(matches!(
            Mailbox::open(home.path(), "run-2"),
            Err(MailboxError::NoSuchRun { .. })
        ));
    }

    #[test]
    fn a_kept_key_is_never_on_the_clients_disk() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create_keeping_key(home.path(), "r").unwrap();
        assert!(!ctl::client_dir(home.path(), "r").join("key").exists());
        assert!(matches!(
            Mailbox::open(home.path(), "r"),
            Err(MailboxError::NoSuchRun { .. })
        ));
        let again = Mailbox::open_with_key(home.path(), "r", m.key().clone()).unwrap();
        assert_eq!(again.key(), m.key());
        assert_eq!(
            RunKey::read_file(&m.ctl().key()).unwrap(),
            *m.key(),
            "the driver's copy is there"
        );
    }

    #[test]
    fn an_adopted_run_numbers_its_commands_above_what_its_mirror_shows() {
        let home = tempfile::tempdir().unwrap();
        let first = Mailbox::create(home.path(), "r1").unwrap();
        let key = first.key().clone();
        for _ in 0..3 {
            landed_seq(&first);
        }
        // Another machine: only the acks came over (the mirror's first pull), nothing else.
        let other = tempfile::tempdir().unwrap();
        let there = ControlDir::for_run(other.path(), "r1");
        std::fs::create_dir_all(there.acks()).unwrap();
        for e in std::fs::read_dir(first.ctl().inbox()).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            std::fs::write(there.acks().join(format!("{name}.ack")), "{}").unwrap();
        }
        assert!(matches!(
            Mailbox::open_with_key(other.path(), "r1", key.clone()),
            Err(MailboxError::NoSuchRun { .. })
        ));
        Mailbox::adopt(other.path(), "r1").unwrap();
        Mailbox::adopt(other.path(), "r1").unwrap();
        // Not before the mirror says it holds the acks.
        assert!(matches!(
            Mailbox::open_with_key(other.path(), "r1", key.clone()),
            Err(MailboxError::NoSuchRun { .. })
        ));
        Mailbox::adopted_ready(other.path(), "r1").unwrap();
        let m = Mailbox::open_with_key(other.path(), "r1", key).unwrap();
        assert!(m.ctl().bell().exists() && m.ctl().staging().is_dir());
        assert_eq!(landed_seq(&m), 4);
        assert_eq!(landed_seq(&m), 5);
    }

    #[test]
    fn sequence_numbers_increase_across_clients() {
        let home = tempfile::tempdir().unwrap();
        let a = Mailbox::create(home.path(), "r").unwrap();
        let b = Mailbox::open(home.path(), "r").unwrap();
        let mut seqs = vec![];
        for m in [&a, &b, &a, &b] {
            match m.send(Kind::Steer, body::text("x")).unwrap() {
                Delivery::Landed(s) => seqs.push(s.command.seq),
                Delivery::TurnEnded(_) => panic!("in/ is there"),
            }
        }
        assert_eq!(seqs, vec![1, 2, 3, 4]);
    }

    fn landed_seq(m: &Mailbox) -> u64 {
        match m.send(Kind::Steer, body::text("x")).unwrap() {
            Delivery::Landed(s) => s.command.seq,
            Delivery::TurnEnded(_) => panic!("in/ is there"),
        }
    }

    /// A sequence file that does not read as a number (emptied, garbage) restarts above every
    /// command the control folder holds (landed in `in/`, taken and acked, in an ended inbox),
    /// not at 1, where the driver would refuse every later command as a replay.
    #[test]
    fn a_damaged_sequence_file_restarts_above_every_landed_command() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create(home.path(), "r").unwrap();
        for _ in 0..3 {
            landed_seq(&m);
        }
        let seq_file = ctl::client_dir(home.path(), "r").join("seq");
        // The driver took 1 and 2 (acked), 3 is still in in/.
        for name in ["0000000001-aa.cmd", "0000000002-bb.cmd"] {
            fs::write(m.ctl().ack_for(name), b"{}").unwrap();
            let _ = fs::remove_file(m.ctl().inbox().join(name));
        }
        fs::write(&seq_file, b"").unwrap();
        assert_eq!(landed_seq(&m), 4, "above 3, which is in in/");
        // A turn end renamed in/ away with 4 and 5 in it; a new in/ is empty.
        landed_seq(&m);
        fs::rename(m.ctl().inbox(), m.ctl().ended_inbox(1)).unwrap();
        fs::create_dir(m.ctl().inbox()).unwrap();
        fs::write(&seq_file, b"garbage").unwrap();
        assert_eq!(landed_seq(&m), 6, "above 5, in the ended inbox");
        // Only acks are left.
        fs::remove_dir_all(m.ctl().ended_inbox(1)).unwrap();
        for e in fs::read_dir(m.ctl().inbox()).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
        fs::write(m.ctl().ack_for("0000000009-cc.cmd"), b"{}").unwrap();
        fs::write(&seq_file, b"\n").unwrap();
        assert_eq!(landed_seq(&m), 10, "above 9, acked");
        assert_eq!(landed_seq(&m), 11, "and the file is whole again");
    }

    const SEQ_CHILD: &str = "HANGAR_TEST_SEQ_CHILD_HOME";

    /// A sender killed with SIGKILL at any moment (a `hangar serve` replica killed while it
    /// answers an approval) never leaves a sequence file that sends the next command below one
    /// that landed. Before the number was written in one `pwrite`, a kill between the truncate
    /// and the write left the file empty, and the run's next command got 1 (scripts/load saw
    /// it: "replay: sequence number 1 is not above 2").
    #[test]
    fn a_sender_killed_at_any_moment_never_sends_the_sequence_backwards() {
        if let Some(home) = std::env::var_os(SEQ_CHILD) {
            let m = Mailbox::open(Path::new(&home), "r").unwrap();
            loop {
                landed_seq(&m);
                // Keep in/ small: the test reads the highest landed number from the names.
                for e in fs::read_dir(m.ctl().inbox()).unwrap().flatten() {
                    let _ = fs::rename(e.path(), m.ctl().acks().join(e.file_name()));
                }
            }
        }
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create(home.path(), "r").unwrap();
        let exe = std::env::current_exe().unwrap();
        let highest = |m: &Mailbox| {
            [m.ctl().inbox(), m.ctl().acks()]
                .iter()
                .flat_map(|d| fs::read_dir(d).unwrap().flatten())
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.split_once('-').and_then(|(d, _)| d.parse::<u64>().ok())
                })
                .max()
                .unwrap_or(0)
        };
        let mut rounds_with_landings = 0;
        for round in 0..150u64 {
            let before = highest(&m);
            let mut child = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "outbox::tests::a_sender_killed_at_any_moment_never_sends_the_sequence_backwards",
                    "--nocapture",
                ])
                .env(SEQ_CHILD, home.path())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            // Let it send for a while, at a different moment each round, then kill it.
            let until = highest(&m) + 3 + round % 7;
            let deadline = Instant::now() + Duration::from_secs(10);
            while highest(&m) < until && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200 + 37 * (round % 11)));
            }
            child.kill().unwrap();
            child.wait().unwrap();
            let landed = highest(&m);
            if landed > before {
                rounds_with_landings += 1;
            }
            let next = landed_seq(&m);
            assert!(
                next > landed,
                "round {round}: the next command got {next}, not above {landed} that landed"
            );
        }
        assert!(
            rounds_with_landings > 100,
            "the child sent in only {rounds_with_landings} of 150 rounds"
        );
    }

    /// The sender's record comes before the command lands, with its sequence number; a record
    /// that fails lands nothing (and burns no number the driver would see out of order).
    #[test]
    fn a_recorded_send_records_before_it_lands() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create(home.path(), "r").unwrap();
        let inbox = m.ctl().inbox();
        let mut seen = None;
        let d = m
            .send_recorded(Kind::Steer, body::text("x"), |c| {
                seen = Some((c.seq, fs::read_dir(&inbox).unwrap().count()));
                Ok(())
            })
            .unwrap();
        assert!(matches!(d, Delivery::Landed(_)));
        assert_eq!(seen, Some((1, 0)), "recorded as seq 1 with in/ still empty");
        let refused = m.send_recorded(Kind::Steer, body::text("y"), |_| {
            Err("the store is down".into())
        });
        assert!(refused.is_err());
        assert_eq!(
            fs::read_dir(&inbox).unwrap().count(),
            1,
            "nothing more landed"
        );
    }

    #[test]
    fn a_missing_inbox_means_the_turn_ended_and_hands_the_command_back() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create(home.path(), "r").unwrap();
        fs::rename(m.ctl().inbox(), m.ctl().ended_inbox(1)).unwrap();
        let out = m
            .request(Kind::Steer, body::text("late"), Duration::from_secs(1))
            .unwrap();
        match out {
            Outcome::Ended { handed_back } => assert_eq!(handed_back.text(), Some("late")),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            fs::read_dir(m.ctl().staging()).unwrap().count(),
            0,
            "staging is cleaned up"
        );
    }

    #[test]
    fn forged_acks_are_ignored_and_the_real_one_is_taken() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create(home.path(), "r").unwrap();
        let Delivery::Landed(sent) = m.send(Kind::Interrupt, body::empty()).unwrap() else {
            panic!()
        };
        let c = &sent.command;
        let forged = Ack::seal(
            &RunKey::from_bytes([0; 32]),
            "r",
            &sent.name,
            c.seq,
            &c.nonce,
            AckStatus::Done,
            "",
        );
        fs::write(m.ctl().ack_for(&sent.name), forged.to_bytes()).unwrap();
        assert!(matches!(
            m.wait(&sent, Duration::from_millis(50)),
            Err(MailboxError::Timeout(_))
        ));
        let real = Ack::seal(
            m.key(),
            "r",
            &sent.name,
            c.seq,
            &c.nonce,
            AckStatus::Refused,
            "no",
        );
        fs::write(m.ctl().ack_for(&sent.name), real.to_bytes()).unwrap();
        assert_eq!(
            m.wait(&sent, Duration::from_millis(50)).unwrap(),
            Outcome::Refused("no".into())
        );
    }

    #[test]
    fn a_refusal_of_an_unreadable_command_is_taken_by_its_name_but_nothing_else_is() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create(home.path(), "r").unwrap();
        let Delivery::Landed(sent) = m.send(Kind::Interrupt, body::empty()).unwrap() else {
            panic!()
        };
        // What the driver writes for a command it could not read: no sequence number, no nonce.
        let name_only = |status| Ack::seal(m.key(), "r", &sent.name, 0, "", status, "too large");
        fs::write(
            m.ctl().ack_for(&sent.name),
            name_only(AckStatus::Done).to_bytes(),
        )
        .unwrap();
        assert!(
            matches!(
                m.wait(&sent, Duration::from_millis(50)),
                Err(MailboxError::Timeout(_))
            ),
            "a name-only ack may only refuse"
        );
        let forged = Ack::seal(
            &RunKey::from_bytes([0; 32]),
            "r",
            &sent.name,
            0,
            "",
            AckStatus::Refused,
            "forged",
        );
        fs::write(m.ctl().ack_for(&sent.name), forged.to_bytes()).unwrap();
        assert!(matches!(
            m.wait(&sent, Duration::from_millis(50)),
            Err(MailboxError::Timeout(_))
        ));
        fs::write(
            m.ctl().ack_for(&sent.name),
            name_only(AckStatus::Refused).to_bytes(),
        )
        .unwrap();
        assert_eq!(
            m.wait(&sent, Duration::from_millis(50)).unwrap(),
            Outcome::Refused("too large".into())
        );
    }
}
