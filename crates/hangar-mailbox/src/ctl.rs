//! The layout of a run's control folder and the client's private folder beside it.
//!
//! ```text
//! $HANGAR_HOME/runs/<run>.ctl/      mode 0700, hangar's user
//!     key            the run key (0400), written by the client, read once and deleted by the driver
//!     staging/       the client writes a command here first ...
//!     in/            ... then renames it in: the driver never sees half a file
//!     in.ended-<n>/  in/ renamed away when a turn ended (S18); a rename into in/ now fails
//!     acks/          the driver's signed answers, `<command file name>.ack`
//!     bell           a FIFO: the client writes a byte after each command it lands, the driver
//!                    listens (its doorbell, `bell.rs`)
//!     run.log        the run log (JSON lines: the harness's stream plus hangar.* lines)
//!     tree/          the driver's object store for the turn's trees (the repo's objects as
//!                    alternates); deleted when the turn ends, after ...
//!     trees.pack     ... the objects the turn made were written here as one git pack (with
//!     trees.idx      its index), for the control plane's store
//! $HANGAR_HOME/runs/<run>.client/   mode 0700, hangar's user; never copied into a sandbox
//!     key            the client's copy of the run key (0600; the control plane will keep it in its vault)
//!     seq            the last sequence number handed out (updated under a file lock)
//! ```

use std::path::{Path, PathBuf};

/// Paths inside one run's control folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlDir {
    root: PathBuf,
}

impl ControlDir {
    /// The control folder of `run` under `home`.
    pub fn for_run(home: &Path, run: &str) -> ControlDir {
        ControlDir {
            root: home.join("runs").join(format!("{run}.ctl")),
        }
    }

    /// A control folder at an explicit path (the driver is told where it is).
    pub fn at(root: PathBuf) -> ControlDir {
        ControlDir { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn key(&self) -> PathBuf {
        self.root.join("key")
    }
    pub fn inbox(&self) -> PathBuf {
        self.root.join("in")
    }
    pub fn staging(&self) -> PathBuf {
        self.root.join("staging")
    }
    pub fn acks(&self) -> PathBuf {
        self.root.join("acks")
    }
    /// The doorbell FIFO.
    pub fn bell(&self) -> PathBuf {
        self.root.join("bell")
    }
    /// The driver's object store for the turn's trees.
    pub fn tree_store(&self) -> PathBuf {
        self.root.join("tree")
    }
    /// The objects the turn made, as one git pack (its index beside it, `trees.idx`).
    pub fn trees_pack(&self) -> PathBuf {
        self.root.join("trees.pack")
    }
    pub fn run_log(&self) -> PathBuf {
        self.root.join("run.log")
    }
    /// Where `in/` goes when the `n`th turn end closes it.
    pub fn ended_inbox(&self, n: u32) -> PathBuf {
        self.root.join(format!("in.ended-{n}"))
    }
    /// The ack file for a command file name.
    pub fn ack_for(&self, command_name: &str) -> PathBuf {
        self.acks().join(format!("{command_name}.ack"))
    }
}

/// The client's private folder for `run`.
pub fn client_dir(home: &Path, run: &str) -> PathBuf {
    home.join("runs").join(format!("{run}.client"))
}

/// A run id is 1 to 64 characters of `[A-Za-z0-9_-]`, so it can never name a path outside `runs/`.
pub fn valid_run_id(run: &str) -> bool {
    !run.is_empty()
        && run.len() <= 64
        && run
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A command file name the driver will answer under its own name; anything else is answered
/// under a name derived from it, so an ack can never be written outside `acks/`.
pub fn safe_ack_name(name: &str) -> String {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        name.to_owned()
    } else {
        format!(
            "unsafe-{}",
            hex::encode(name.as_bytes())
                .chars()
                .take(64)
                .collect::<String>()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_cannot_escape() {
        assert!(valid_run_id("run-0a1b2c"));
        assert!(!valid_run_id("../etc"));
        assert!(!valid_run_id("a/b"));
        assert!(!valid_run_id(""));
        assert!(!valid_run_id(&"a".repeat(65)));
    }

    #[test]
    fn ack_names_stay_in_acks() {
        assert_eq!(safe_ack_name("000001-ab.cmd"), "000001-ab.cmd");
        assert!(safe_ack_name("../../x").starts_with("unsafe-"));
        assert!(safe_ack_name(".hidden").starts_with("unsafe-"));
    }
}
