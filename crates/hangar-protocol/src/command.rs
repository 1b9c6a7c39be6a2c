//! The command envelope, message by message, and the driver's check of each command file.
//!
//! # Wire form
//! A command is one JSON object in one file (at most [`MAX_COMMAND_BYTES`](crate::MAX_COMMAND_BYTES)):
//!
//! ```json
//! {"v":1,"run":"r-20261130-ab12cd","seq":3,"nonce":"9f0c…(32 hex)","created_ms":1796083200000,
//!  "kind":"steer","body":{"text":"use the other file"},"mac":"…(64 hex)"}
//! ```
//!
//! | field | meaning |
//! |---|---|
//! | `v` | format version, [`FORMAT_VERSION`](crate::FORMAT_VERSION) |
//! | `run` | the run id; a command for another run is refused |
//! | `seq` | sequence number, strictly increasing per run (the client allocates it under a lock) |
//! | `nonce` | 16 random bytes as 32 hex digits; never reused within a run |
//! | `created_ms` | creation time, ms since the Unix epoch (informational; not a freshness check) |
//! | `kind` | one of the [`Kind`]s below |
//! | `body` | a JSON object whose shape depends on the kind |
//! | `mac` | HMAC-SHA256 (64 hex digits) of the canonical encoding, under the run key |
//!
//! Bodies:
//! * `prompt` `{"text": "…"}`: a user message (starts a turn when the harness is idle).
//! * `steer` `{"text": "…"}`: a user message sent while a turn runs (see the driver's protocol
//!   notes for what the harness does with it in each state).
//! * `interrupt` `{}`: stop the running turn.
//! * `approve` `{"request_id": "…", "updated_input": {…}?}`: allow a pending permission
//!   request, optionally with a changed tool input.
//! * `deny` `{"request_id": "…", "message": "…"?}`: refuse it; the agent sees the message.
//! * `end` `{}`: take no more commands and close the harness's input; the running turn finishes.
//!
//! # Canonical encoding (what the MAC covers)
//! ```text
//! "hangar.command.v1" 0x00
//! u32 v | str run | u64 seq | str nonce | i64 created_ms | str kind | str canonical_json(body)
//! ```
//! Integers are big-endian; `str` is a `u32` big-endian byte length followed by the UTF-8 bytes;
//! `canonical_json` is compact JSON with object keys sorted (see `seal.rs`).

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::key::RunKey;
use crate::seal::{Canon, canonical_json};
use crate::{FORMAT_VERSION, MAX_COMMAND_BYTES};

const DOMAIN: &str = "hangar.command.v1";

/// What a command asks the driver to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Prompt,
    Steer,
    Interrupt,
    Approve,
    Deny,
    End,
}

impl Kind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Prompt => "prompt",
            Kind::Steer => "steer",
            Kind::Interrupt => "interrupt",
            Kind::Approve => "approve",
            Kind::Deny => "deny",
            Kind::End => "end",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "prompt" => Kind::Prompt,
            "steer" => Kind::Steer,
            "interrupt" => Kind::Interrupt,
            "approve" => Kind::Approve,
            "deny" => Kind::Deny,
            "end" => Kind::End,
            _ => return None,
        })
    }

    /// Whether the command carries a message for the agent (what S19 hands back).
    pub fn is_message(self) -> bool {
        matches!(self, Kind::Prompt | Kind::Steer)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A command as written on the wire (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Command {
    pub v: u32,
    pub run: String,
    pub seq: u64,
    pub nonce: String,
    pub created_ms: i64,
    pub kind: String,
    pub body: Value,
    pub mac: String,
}

impl Command {
    /// Builds and seals a command.
    pub fn seal(
        key: &RunKey,
        run: &str,
        seq: u64,
        nonce: [u8; 16],
        kind: Kind,
        body: Value,
    ) -> Command {
        Command::seal_any_kind(key, run, seq, nonce, kind.as_str(), body)
    }

    /// Seals a command whose kind is any string: what a confused or hostile client could send
    /// (the driver refuses unknown kinds even when the MAC is right). Tests use it.
    pub fn seal_any_kind(
        key: &RunKey,
        run: &str,
        seq: u64,
        nonce: [u8; 16],
        kind: &str,
        body: Value,
    ) -> Command {
        let mut c = Command {
            v: FORMAT_VERSION,
            run: run.to_owned(),
            seq,
            nonce: hex::encode(nonce),
            created_ms: crate::now_ms(),
            kind: kind.to_owned(),
            body,
            mac: String::new(),
        };
        c.mac = c.canon().mac_hex(key);
        c
    }

    fn canon(&self) -> Canon {
        Canon::new(DOMAIN)
            .u32(self.v)
            .str(&self.run)
            .u64(self.seq)
            .str(&self.nonce)
            .i64(self.created_ms)
            .str(&self.kind)
            .bytes(&canonical_json(&self.body))
    }

    /// Whether the MAC matches the other fields under `key` (constant-time compare).
    pub fn mac_ok(&self, key: &RunKey) -> bool {
        self.canon().verify_hex(key, &self.mac)
    }

    /// Seals the command as its fields stand, whatever they are (a nonce that is not hex, any
    /// `created_ms`). For `fuzz/` only (built with `--cfg fuzzing`), to reach the checks after
    /// the MAC.
    #[cfg(fuzzing)]
    pub fn reseal(&mut self, key: &RunKey) {
        self.mac = self.canon().mac_hex(key);
    }

    /// The file bytes (one JSON line).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// The body's `text` (for `prompt` and `steer`).
    pub fn text(&self) -> Option<&str> {
        self.body.get("text").and_then(Value::as_str)
    }

    /// The body's `request_id` (for `approve` and `deny`).
    pub fn request_id(&self) -> Option<&str> {
        self.body.get("request_id").and_then(Value::as_str)
    }

    /// The body's `by`: the person who sent the command, sealed with it. The driver writes it
    /// into the run log's lines about the command, so the log alone says who answered what
    /// (the control plane records answers from the log, and a crash between the ack and that
    /// record loses nothing).
    pub fn sender(&self) -> Option<&str> {
        self.body.get("by").and_then(Value::as_str)
    }

    /// The person's own words with a `deny` (its `message`), if any.
    pub fn note(&self) -> Option<&str> {
        self.body.get("message").and_then(Value::as_str)
    }
}

/// Body constructors, so callers never spell the field names.
pub mod body {
    use super::*;

    pub fn text(text: &str) -> Value {
        json!({ "text": text })
    }

    pub fn empty() -> Value {
        Value::Object(Map::new())
    }

    pub fn approve(request_id: &str, updated_input: Option<Value>) -> Value {
        let mut m = Map::new();
        m.insert("request_id".into(), Value::String(request_id.into()));
        if let Some(u) = updated_input {
            m.insert("updated_input".into(), u);
        }
        Value::Object(m)
    }

    pub fn deny(request_id: &str, message: Option<&str>) -> Value {
        let mut m = Map::new();
        m.insert("request_id".into(), Value::String(request_id.into()));
        if let Some(msg) = message {
            m.insert("message".into(), Value::String(msg.into()));
        }
        Value::Object(m)
    }

    /// `body` naming the person who sends it (see [`Command::sender`]).
    pub fn by(mut body: Value, person: &str) -> Value {
        if let Value::Object(m) = &mut body {
            m.insert("by".into(), Value::String(person.into()));
        }
        body
    }
}

/// Why a command was refused. Its `Display` is the `reason` in the ack and the run log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("command is larger than {MAX_COMMAND_BYTES} bytes")]
    TooLarge,
    #[error("command could not be read: {0}")]
    Unreadable(String),
    #[error("command is not valid JSON: {0}")]
    NotJson(String),
    #[error("command has no mac")]
    NoMac,
    #[error("command's mac does not verify")]
    BadMac,
    #[error("command format version {0} is not {FORMAT_VERSION}")]
    BadVersion(u32),
    #[error("command is for run {got}, not this run")]
    WrongRun { got: String },
    #[error("replay: sequence number {seq} is not above {last}, the last one taken")]
    Replay { seq: u64, last: u64 },
    #[error("replay: nonce already used in this run")]
    NonceReuse,
    #[error("unknown command kind {0:?}")]
    UnknownKind(String),
    #[error("bad body for {kind}: {why}")]
    BadBody { kind: Kind, why: &'static str },
    #[error("no permission request {0:?} was issued in this run")]
    UnknownRequest(String),
    #[error("permission request {0:?} was already answered")]
    AlreadyAnswered(String),
    #[error("the turn has ended")]
    TurnEnded,
    #[error("{0}")]
    Unsupported(String),
}

impl Refusal {
    /// A short machine-readable code for the run log.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::TooLarge => "too_large",
            Refusal::Unreadable(_) => "unreadable",
            Refusal::NotJson(_) => "not_json",
            Refusal::NoMac => "no_mac",
            Refusal::BadMac => "bad_mac",
            Refusal::BadVersion(_) => "bad_version",
            Refusal::WrongRun { .. } => "wrong_run",
            Refusal::Replay { .. } => "replay",
            Refusal::NonceReuse => "nonce_reuse",
            Refusal::UnknownKind(_) => "unknown_kind",
            Refusal::BadBody { .. } => "bad_body",
            Refusal::UnknownRequest(_) => "unknown_request",
            Refusal::AlreadyAnswered(_) => "already_answered",
            Refusal::TurnEnded => "turn_ended",
            Refusal::Unsupported(_) => "unsupported",
        }
    }
}

/// A command that failed a check: the refusal, and the command when it could be parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejected {
    pub command: Option<Box<Command>>,
    pub refusal: Refusal,
}

fn reject(command: Option<Command>, refusal: Refusal) -> Rejected {
    Rejected {
        command: command.map(Box::new),
        refusal,
    }
}

/// A command that passed every check, with its parsed kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Verified {
    pub command: Command,
    pub kind: Kind,
}

/// The driver's checks, in order: size, JSON, MAC, version, run id, sequence, nonce, kind, body.
/// The sequence and nonce are only consumed by a command whose MAC verifies, so a forged file
/// cannot burn sequence numbers.
#[derive(Debug)]
pub struct Verifier {
    run: String,
    key: RunKey,
    last_seq: u64,
    nonces: HashSet<String>,
}

impl Verifier {
    pub fn new(run: &str, key: RunKey) -> Verifier {
        Verifier {
            run: run.to_owned(),
            key,
            last_seq: 0,
            nonces: HashSet::new(),
        }
    }

    /// The key, for sealing acks.
    pub fn key(&self) -> &RunKey {
        &self.key
    }

    /// The run id.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// Checks one command file's bytes.
    pub fn check(&mut self, bytes: &[u8]) -> Result<Verified, Rejected> {
        if bytes.len() as u64 > MAX_COMMAND_BYTES {
            return Err(reject(None, Refusal::TooLarge));
        }
        let raw: Value = serde_json::from_slice(bytes)
            .map_err(|e| reject(None, Refusal::NotJson(e.to_string())))?;
        if raw
            .get("mac")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(reject(None, Refusal::NoMac));
        }
        let cmd: Command = serde_json::from_value(raw)
            .map_err(|e| reject(None, Refusal::NotJson(e.to_string())))?;
        if !cmd.mac_ok(&self.key) {
            return Err(reject(Some(cmd), Refusal::BadMac));
        }
        let fail = |cmd: Command, r: Refusal| Err(reject(Some(cmd), r));
        if cmd.v != FORMAT_VERSION {
            let v = cmd.v;
            return fail(cmd, Refusal::BadVersion(v));
        }
        if cmd.run != self.run {
            let got = cmd.run.clone();
            return fail(cmd, Refusal::WrongRun { got });
        }
        if cmd.seq <= self.last_seq {
            let (seq, last) = (cmd.seq, self.last_seq);
            return fail(cmd, Refusal::Replay { seq, last });
        }
        if self.nonces.contains(&cmd.nonce) {
            return fail(cmd, Refusal::NonceReuse);
        }
        // From here on the command is authentic and fresh: it uses up its number either way.
        self.last_seq = cmd.seq;
        self.nonces.insert(cmd.nonce.clone());
        let Some(kind) = Kind::parse(&cmd.kind) else {
            let k = cmd.kind.clone();
            return fail(cmd, Refusal::UnknownKind(k));
        };
        if let Err(why) = check_body(kind, &cmd.body) {
            return fail(cmd, Refusal::BadBody { kind, why });
        }
        Ok(Verified { command: cmd, kind })
    }
}

fn check_body(kind: Kind, body: &Value) -> Result<(), &'static str> {
    let obj = body.as_object().ok_or("body is not an object")?;
    match obj.get("by") {
        None => {}
        Some(Value::String(s)) if !s.is_empty() => {}
        Some(_) => return Err("by must be a non-empty string"),
    }
    match kind {
        Kind::Prompt | Kind::Steer => match obj.get("text") {
            Some(Value::String(s)) if !s.is_empty() => Ok(()),
            _ => Err("text must be a non-empty string"),
        },
        Kind::Approve | Kind::Deny => {
            match obj.get("request_id") {
                Some(Value::String(s)) if !s.is_empty() => {}
                _ => return Err("request_id must be a non-empty string"),
            }
            match (kind, obj.get("updated_input"), obj.get("message")) {
                (Kind::Approve, Some(u), _) if !u.is_object() => {
                    Err("updated_input must be an object")
                }
                (Kind::Deny, _, Some(m)) if !m.is_string() => Err("message must be a string"),
                _ => Ok(()),
            }
        }
        Kind::Interrupt | Kind::End => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn key() -> RunKey {
        RunKey::from_bytes([3; 32])
    }

    fn cmd(seq: u64, nonce: u8, kind: Kind, b: Value) -> Command {
        Command::seal(&key(), "r1", seq, [nonce; 16], kind, b)
    }

    #[test]
    fn a_sealed_command_passes_and_round_trips() {
        let c = cmd(1, 1, Kind::Steer, body::text("hi"));
        let mut v = Verifier::new("r1", key());
        let ok = v.check(&c.to_bytes()).unwrap();
        assert_eq!(ok.kind, Kind::Steer);
        assert_eq!(ok.command, c);
    }

    #[test]
    fn mac_covers_body_in_canonical_form_regardless_of_key_order() {
        let c = cmd(
            1,
            1,
            Kind::Approve,
            body::approve("req", Some(json!({"b":1,"a":2}))),
        );
        // Re-write the file by hand with keys in another order and extra whitespace.
        let text = format!(
            r#"{{ "mac":"{}", "body": {{"updated_input": {{"a":2, "b":1}}, "request_id":"req"}}, "kind":"approve", "created_ms":{}, "nonce":"{}", "seq":1, "run":"r1", "v":1 }}"#,
            c.mac, c.created_ms, c.nonce
        );
        assert!(Verifier::new("r1", key()).check(text.as_bytes()).is_ok());
    }

    /// Found by `scripts/fuzz command`: a body number whose shortest form serde_json's default
    /// (approximate) float parser reads back one ulp off was re-printed differently by the
    /// driver, so an authentic approve failed its MAC. (Run alone, `cargo test -p
    /// hangar-protocol`, this fails without `float_roundtrip`; in a whole-workspace build another
    /// crate turns the feature on for everyone.)
    #[test]
    fn numbers_in_a_body_survive_the_file_round_trip() {
        let input: Value = serde_json::from_str(
            r#"{"a":123456789.123456789,"b":0.1,"c":-0.0,"d":5e-324,"e":2.5e300,"f":18446744073709551615}"#,
        )
        .unwrap();
        let c = cmd(1, 1, Kind::Approve, body::approve("req_9", Some(input)));
        let ok = Verifier::new("r1", key()).check(&c.to_bytes()).unwrap();
        assert_eq!(ok.command, c);
    }

    #[test]
    fn each_field_is_covered_by_the_mac() {
        let c = cmd(5, 1, Kind::Steer, body::text("hi"));
        type Tamper = Box<dyn Fn(&mut Command)>;
        let tamper: Vec<Tamper> = vec![
            Box::new(|c| c.v = 2),
            Box::new(|c| c.run = "r2".into()),
            Box::new(|c| c.seq = 6),
            Box::new(|c| c.nonce = hex::encode([9u8; 16])),
            Box::new(|c| c.created_ms += 1),
            Box::new(|c| c.kind = "prompt".into()),
            Box::new(|c| c.body = body::text("ho")),
        ];
        for t in tamper {
            let mut bad = c.clone();
            t(&mut bad);
            let err = Verifier::new("r1", key())
                .check(&bad.to_bytes())
                .unwrap_err();
            assert_eq!(err.refusal, Refusal::BadMac);
        }
    }

    #[test]
    fn refusals_in_order() {
        let mut v = Verifier::new("r1", key());
        assert_eq!(
            v.check(&vec![b' '; 1024 * 1024 + 1]).unwrap_err().refusal,
            Refusal::TooLarge
        );
        assert!(matches!(
            v.check(b"{\"v\":1,").unwrap_err().refusal,
            Refusal::NotJson(_)
        ));
        let mut unsigned = cmd(1, 1, Kind::Steer, body::text("x"));
        unsigned.mac.clear();
        assert_eq!(
            v.check(&unsigned.to_bytes()).unwrap_err().refusal,
            Refusal::NoMac
        );
        let forged = Command::seal(
            &RunKey::from_bytes([4; 32]),
            "r1",
            1,
            [1; 16],
            Kind::Steer,
            body::text("x"),
        );
        assert_eq!(
            v.check(&forged.to_bytes()).unwrap_err().refusal,
            Refusal::BadMac
        );
        let other_run = Command::seal(&key(), "r2", 1, [1; 16], Kind::Steer, body::text("x"));
        assert_eq!(
            v.check(&other_run.to_bytes()).unwrap_err().refusal,
            Refusal::WrongRun { got: "r2".into() }
        );
        // None of the above used up sequence 1.
        assert!(
            v.check(&cmd(1, 1, Kind::Steer, body::text("x")).to_bytes())
                .is_ok()
        );
        assert_eq!(
            v.check(&cmd(1, 2, Kind::Steer, body::text("x")).to_bytes())
                .unwrap_err()
                .refusal,
            Refusal::Replay { seq: 1, last: 1 }
        );
        assert_eq!(
            v.check(&cmd(2, 1, Kind::Steer, body::text("x")).to_bytes())
                .unwrap_err()
                .refusal,
            Refusal::NonceReuse
        );
        let mut unknown = cmd(3, 3, Kind::Steer, body::text("x"));
        unknown.kind = "shell".into();
        unknown.mac = unknown.canon().mac_hex(&key());
        assert_eq!(
            v.check(&unknown.to_bytes()).unwrap_err().refusal,
            Refusal::UnknownKind("shell".into())
        );
        assert!(matches!(
            v.check(&cmd(4, 4, Kind::Approve, json!({})).to_bytes())
                .unwrap_err()
                .refusal,
            Refusal::BadBody { .. }
        ));
        assert!(matches!(
            v.check(&cmd(5, 5, Kind::Steer, json!({"text": ""})).to_bytes())
                .unwrap_err()
                .refusal,
            Refusal::BadBody { .. }
        ));
        assert!(
            v.check(&cmd(6, 6, Kind::Interrupt, body::empty()).to_bytes())
                .is_ok()
        );
    }

    #[test]
    fn truncated_commands_are_refused() {
        let bytes = cmd(1, 1, Kind::Steer, body::text("hello")).to_bytes();
        for cut in [1, bytes.len() / 2, bytes.len() - 3] {
            let r = Verifier::new("r1", key())
                .check(&bytes[..cut])
                .unwrap_err()
                .refusal;
            assert!(matches!(r, Refusal::NotJson(_)), "cut at {cut}: {r:?}");
        }
    }
}
