//! hangar's control folder end to end: the mailbox between the control plane and the driver.
//!
//! * [`bell`]: the doorbell FIFO the client rings after landing a command.
//! * [`ctl`]: the layout of a run's control folder, `$HANGAR_HOME/runs/<run>.ctl/`.
//! * [`name`]: command file names (the one parser and formatter).
//! * [`outbox`]: the sending side: stage a sealed command, rename it into `in/`, and
//!   ([`wait`]) wait for the driver's signed ack on one schedule.
//! * [`inbox`]: the receiving side: take and verify commands, ack them, close `in/` at a turn's
//!   end and answer what waited there `ended` (the driver, and the control plane in its place);
//!   its folders are held by descriptor, never followed through a link ([`folder`]).
//!
//! The wire types (commands, acks, their seals) are hangar-protocol's; this crate does the file
//! handling both sides need to agree on byte for byte. Non-goals: no async runtime, no network
//! (the driver links it: std, libc and the protocol crate only).

pub mod bell;
pub mod ctl;
pub mod folder;
pub mod inbox;
pub mod name;
pub mod outbox;
pub mod wait;

pub use ctl::ControlDir;
pub use inbox::{Inbox, Incoming, Journal};
pub use name::CommandName;
pub use outbox::{Delivery, Mailbox, MailboxError, Outcome, Sent};
pub use wait::{AckWait, Poll};
