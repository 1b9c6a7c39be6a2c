//! What the control plane's callers see go wrong, in the control plane's own words: the server
//! alone turns these into HTTP statuses (`hangar-server/src/error.rs`), the CLI alone into exit
//! codes. Every message says what was wrong and, where there is one, what to do instead.

use hangar_mailbox::outbox::MailboxError;
use hangar_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Mailbox(#[from] MailboxError),
    /// What was asked cannot be done as asked: an argument is wrong, missing or contradicts
    /// another (the message says which, and what to give).
    #[error("{0}")]
    Invalid(String),
    /// Something named does not exist.
    #[error("{0}")]
    NotFound(String),
    /// It exists, but its state does not allow this now (removed, in use, gone).
    #[error("{0}")]
    WrongState(String),
    /// The control plane's own settings do not allow it (e.g. a session unsandboxed); the
    /// message says which setting.
    #[error("{0}")]
    NotAllowed(String),
    /// Refused, and why (e.g. a fork whose rebuilt tree is not the recorded one).
    #[error("{0}")]
    Refused(String),
    /// A turn was refused after its records were made (audited `turn.refused`): `why` is what
    /// refused it (its policy, the sandbox, the hook, the harness), kept as it was.
    #[error("{why}")]
    TurnRefused {
        turn: String,
        why: Box<ControlError>,
    },
    /// Something this machine lacks (a program, a daemon, an image); the message says what.
    #[error("{0}")]
    Unavailable(String),
    /// The run is another live replica's, which shares no disk with this one: a command for it
    /// is for that replica, reached at `url` (the server passes the request on).
    #[error("{message}")]
    Elsewhere { url: String, message: String },
    #[error("cannot start the driver: {0}")]
    Launch(String),
    #[error("{0}")]
    Internal(String),
}

impl ControlError {
    /// What refused it, under any [`ControlError::TurnRefused`] around it.
    pub fn cause(&self) -> &ControlError {
        match self {
            ControlError::TurnRefused { why, .. } => why.cause(),
            other => other,
        }
    }
}
