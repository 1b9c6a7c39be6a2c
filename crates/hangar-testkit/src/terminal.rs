//! A tmux server of the test's own: a terminal where a test runs `hangar sb attach` (or any
//! interactive command), types into it and reads its screen.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::TestkitError;

/// A detached tmux session `t` on a socket in a folder of the test's; the server is killed when
/// this is dropped.
#[derive(Debug)]
pub struct Terminal {
    socket: PathBuf,
}

fn io(context: &str) -> impl FnOnce(std::io::Error) -> TestkitError + '_ {
    move |source| TestkitError::Io {
        context: context.to_owned(),
        source,
    }
}

impl Terminal {
    /// Starts `argv` in a `cols` x `rows` terminal (socket `<dir>/terminal.sock`, no tmux
    /// configuration read).
    pub fn start(
        dir: &Path,
        argv: &[String],
        cols: u16,
        rows: u16,
    ) -> Result<Terminal, TestkitError> {
        let socket = dir.join("terminal.sock");
        let (x, y) = (cols.to_string(), rows.to_string());
        let st = Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                &x,
                "-y",
                &y,
            ])
            .args(argv)
            .status()
            .map_err(io("start tmux"))?;
        if !st.success() {
            return Err(io("start tmux")(std::io::Error::other(format!(
                "tmux new-session exited with {st}"
            ))));
        }
        Ok(Terminal { socket })
    }

    /// Runs a tmux command against this terminal's server (`send-keys`, `resize-window`, ...).
    pub fn tmux(&self, args: &[&str]) -> Result<(), TestkitError> {
        let st = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .status()
            .map_err(io("run tmux"))?;
        if st.success() {
            Ok(())
        } else {
            Err(io("run tmux")(std::io::Error::other(format!(
                "tmux {args:?} exited with {st}"
            ))))
        }
    }

    /// What the terminal shows now (empty if tmux cannot say).
    pub fn screen(&self) -> String {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

impl Terminal {
    /// [`Terminal::screen`] with its colours and styles, as SGR escape sequences.
    pub fn screen_styled(&self) -> String {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["capture-pane", "-p", "-e", "-t", "t"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .status();
    }
}
