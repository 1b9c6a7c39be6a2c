//! Runs: how a turn becomes a running driver. A turn is first made and validated into a
//! [`plan::TurnPlan`] (its records, its mailbox with the prompts in it, and where it will run),
//! then placed through one [`place::Placement`], with a module per placement: a plain folder, a
//! sandbox this machine sees, a remote sandbox whose control folder is mirrored, or a one-shot
//! turn with no driver. Whatever refuses the turn after its records exist refuses it once, in
//! [`crate::ControlPlane::start_turn`], audited.

pub(crate) mod place;
pub(crate) mod plan;
