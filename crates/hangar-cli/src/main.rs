//! `hangar`: the command line. Thin: every rule lives in `hangar-protocol` (and, later, the
//! control plane's library); this crate parses arguments, calls it, and presents the result.

mod exit;
mod find;
mod logs;
mod progress;
mod run;
mod send;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Run coding agents, steer them while they run, answer their permission requests.
#[derive(Debug, Parser)]
#[command(name = "hangar", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run one turn of an agent in a folder, showing progress; exits with the turn's status.
    Run(run::RunArgs),
    /// Send a message into a running turn.
    Steer { run: String, text: String },
    /// Interrupt a running turn.
    Interrupt { run: String },
    /// List the permission requests waiting for an answer.
    Approvals {
        run: String,
        /// One JSON object per line (request_id, tool_name, input, tool_use_id).
        #[arg(long)]
        json: bool,
    },
    /// Allow a pending permission request.
    Approve {
        run: String,
        request_id: String,
        /// Run the tool with this input (a JSON object) instead of the one the agent asked for.
        #[arg(long, value_name = "JSON")]
        input: Option<String>,
    },
    /// Refuse a pending permission request; the agent sees the reason.
    Deny {
        run: String,
        request_id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// The control plane: store, vault, audit log, run watchers and the HTTP API.
    Serve {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:7700")]
        listen: std::net::SocketAddr,
    },
    /// API tokens.
    Token {
        #[command(subcommand)]
        action: TokenCmd,
    },
    /// Credentials in the vault: `set NAME` (value from stdin), `list`, `rm NAME`.
    Credential {
        /// set | list | rm
        action: String,
        name: Option<String>,
    },
    /// The audit log: `verify` checks its hash chain.
    Audit {
        /// verify
        action: String,
    },
    /// Print a run's log; with --follow, keep printing until the turn ends.
    Log {
        run: String,
        #[arg(long, short)]
        follow: bool,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCmd {
    /// Make a token for a person; it is printed once, and only its hash is kept.
    Create {
        #[arg(long)]
        person: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let home: PathBuf = hangar_protocol::env::hangar_home();
    let result = match cli.command {
        Cmd::Run(a) => run::run(&home, a),
        Cmd::Steer { run, text } => send::steer(&home, &run, &text),
        Cmd::Interrupt { run } => send::interrupt(&home, &run),
        Cmd::Approvals { run, json } => logs::approvals(&home, &run, json),
        Cmd::Approve {
            run,
            request_id,
            input,
        } => send::approve(&home, &run, &request_id, input.as_deref()),
        Cmd::Deny {
            run,
            request_id,
            reason,
        } => send::deny(&home, &run, &request_id, reason.as_deref()),
        Cmd::Log { run, follow } => logs::log(&home, &run, follow),
        Cmd::Serve { listen } => serve::serve(&home, listen),
        Cmd::Token {
            action: TokenCmd::Create { person },
        } => serve::token_create(&home, &person),
        Cmd::Credential { action, name } => serve::credential(&home, &action, name.as_deref()),
        Cmd::Audit { action } if action == "verify" => serve::audit_verify(&home),
        Cmd::Audit { action } => Err(exit::CliError::Usage(format!(
            "unknown audit action {action:?}: use `hangar audit verify`"
        ))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            exit::report(&e);
            e.exit_code()
        }
    }
}
