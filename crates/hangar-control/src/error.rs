//! What the control plane's callers see go wrong.

use hangar_mailbox::outbox::MailboxError;
use hangar_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Mailbox(#[from] MailboxError),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// The control plane's own settings do not allow it (e.g. a session unsandboxed); the
    /// message says which setting.
    #[error("{0}")]
    Forbidden(String),
    /// Refused, and why (e.g. a fork whose rebuilt tree is not the recorded one).
    #[error("{0}")]
    Refused(String),
    /// Something this machine lacks (a program, a daemon, an image); the message says what.
    #[error("{0}")]
    Unavailable(String),
    #[error("cannot start the driver: {0}")]
    Launch(String),
    #[error("{0}")]
    Internal(String),
}
