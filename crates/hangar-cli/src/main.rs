//! `hangar`: the command line. Thin: a client of the control plane's HTTP API (`HANGAR_URL`,
//! `HANGAR_TOKEN`) for everything that involves a run; every rule lives in the control plane,
//! the server and `hangar-protocol`. This crate parses arguments, calls the API (or serves it
//! in-process when no server answers; see `local`), and presents the result.

mod api;
mod backup;
mod client_config;
mod config;
mod doctor;
mod envhelp;
mod exit;
mod find;
mod follow;
mod fork;
mod harness;
mod local;
mod logging;
mod login;
mod logs;
mod manual;
mod people;
mod progress;
mod prompt;
mod relay;
mod rules;
mod run;
mod sandboxes;
mod send;
mod serve;
mod sessions;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Run coding agents, steer them while they run, answer their permission requests.
#[derive(Debug, Parser)]
#[command(name = "hangar", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
    /// Log more: each -v one level (hangar serve logs info and up, other commands warnings;
    /// HANGAR_LOG or RUST_LOG, tracing's filter syntax, win over it).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// How log lines are written: text (coloured on a terminal, never with NO_COLOR) or json,
    /// one object per line (HANGAR_LOG_FORMAT).
    #[arg(long, global = true, value_name = "FORMAT")]
    log_format: Option<logging::Format>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run one turn of an agent in a folder, showing progress; exits with the turn's status.
    Run(run::RunArgs),
    /// Sessions: `start` one (its first turn starts at once).
    Session {
        #[command(subcommand)]
        action: SessionCmd,
    },
    /// A message for a session: steers its running turn, or starts its next turn.
    Send { session: String, text: String },
    /// List the sessions.
    Sessions {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Turns: `show TURN` prints the turn (state, status, usage, manifest) as JSON.
    Turn {
        #[command(subcommand)]
        action: TurnCmd,
    },
    /// Print the git tree id of a folder's work tree as hangar computes it (what `git add -A &&
    /// git write-tree` would give in the repo, without writing anything).
    Tree {
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// A run's steps (the work trees the driver recorded); with `--from N --to M`, what changed
    /// between two of them.
    Diff {
        run: String,
        #[arg(long, requires = "to")]
        from: Option<usize>,
        #[arg(long, requires = "from")]
        to: Option<usize>,
        /// Also print git's patch.
        #[arg(long)]
        patch: bool,
        /// JSON (one object per step, or the API's diff).
        #[arg(long)]
        json: bool,
    },
    /// A new sandbox with exactly a step's tree (rebuilt from hangar's store and checked) and a
    /// new session whose conversation is the run's up to that step; prints `fork: SESSION`,
    /// `sandbox: ID`, `dir:`, `tree:`, `conversation:` (and `turn:`, `run:` with `--prompt`).
    Fork(fork::ForkArgs),
    /// Events: `check RUN` rebuilds the run's events from its log and compares them with the
    /// stored ones.
    Events {
        /// check
        action: String,
        run: String,
    },
    /// A session's conversation, one line per entry.
    Transcript {
        session: String,
        /// One JSON object per entry.
        #[arg(long)]
        json: bool,
    },
    /// Send a message into a running turn (an ended turn is reported, not continued: use
    /// `hangar send SESSION TEXT` for the next turn).
    Steer { run: String, text: String },
    /// Interrupt a running turn.
    Interrupt { run: String },
    /// List the permission requests waiting for an answer.
    Approvals {
        /// The run; without it, the requests of every live run (`GET /v1/approvals`).
        run: Option<String>,
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
    #[command(after_help = config::help())]
    Serve {
        /// Every setting in one TOML file (HANGAR_CONFIG): the keys and the variables they
        /// stand for are listed below; a variable set in the environment, and a flag, win over
        /// the file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Where to listen (default 127.0.0.1:7700).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Let a session asking for no sandbox (`"no_sandbox": true`, `hangar run
        /// --no-sandbox`) run in a plain folder, the driver and the agent as this server's own
        /// user (HANGAR_UNSANDBOXED_FOLDERS=allow). Off by default: every session started with
        /// a folder runs in a sandbox. hangar's home, a folder above it and one inside it stay
        /// refused.
        #[arg(long)]
        unsandboxed_folders: bool,
        /// Serve HTTPS with this PEM certificate chain (with --tls-key). Without it hangar serve
        /// speaks plain HTTP, and warns when it listens on anything but loopback.
        #[arg(long, requires = "tls_key", value_name = "PEM")]
        tls_cert: Option<std::path::PathBuf>,
        /// The PEM private key of --tls-cert.
        #[arg(long, requires = "tls_cert", value_name = "PEM")]
        tls_key: Option<std::path::PathBuf>,
        /// Sign people in with this OpenID Connect issuer (HANGAR_OIDC_ISSUER): the web page
        /// with the authorization code flow + PKCE, `hangar login` with the device flow. The
        /// client secret, for a confidential client, comes from HANGAR_OIDC_CLIENT_SECRET only.
        #[arg(long, value_name = "URL")]
        oidc_issuer: Option<String>,
        /// hangar's client id at the issuer (HANGAR_OIDC_CLIENT_ID).
        #[arg(long, value_name = "ID")]
        oidc_client_id: Option<String>,
        /// Add a person the issuer vouches for (verified email) but hangar does not know as a
        /// member at their first sign-in (HANGAR_OIDC_CREATE_MEMBERS=members). Off by default:
        /// they are refused until an admin adds them.
        #[arg(long)]
        oidc_create_members: bool,
        /// Where people reach this server, behind a proxy (HANGAR_PUBLIC_URL), e.g.
        /// https://hangar.example.com: the issuer sends the browser back to its
        /// /ui/signin/callback. Without it, to the address the web page was loaded from.
        #[arg(long, value_name = "URL")]
        public_url: Option<String>,
    },
    /// Sign in to a server and keep its token (in $XDG_CONFIG_HOME/hangar/hosts.json, 0600):
    /// with the server's OpenID issuer (device flow: open the URL shown, enter the code), or
    /// with a token read from stdin (--token-stdin). Commands then use it for that server
    /// (HANGAR_URL) when HANGAR_TOKEN is not set.
    Login {
        /// The server, e.g. https://hangar.example.com
        url: String,
        /// Read the token from stdin instead of signing in with the issuer.
        #[arg(long)]
        token_stdin: bool,
    },
    /// API tokens: `create` (on the server's machine), `list`, `revoke ID`.
    Token {
        #[command(subcommand)]
        action: TokenCmd,
    },
    /// People and their roles, on the server's machine: `add [--admin] EMAIL`, `list`, `rm
    /// EMAIL` (their tokens stop working at once).
    Person {
        #[command(subcommand)]
        action: PersonCmd,
    },
    /// Credentials in the vault: `set NAME` (value from stdin), `list`, `rm NAME`. Names
    /// starting with `hangar.` are hangar's own, set only here (never through the API) and
    /// checked: `hangar.passport-signing-key` is the Ed25519 seed that signs sandbox tokens for
    /// Tower, 64 hex digits. `--person EMAIL` or `--environment NAME`: that person's or
    /// environment's credential, handed to their turns (e.g. `ANTHROPIC_API_KEY`,
    /// `CLAUDE_CODE_OAUTH_TOKEN`, `CODEX_AUTH_JSON`); neither: the server's own, never handed
    /// to a turn.
    Credential {
        /// set | list | rm
        action: String,
        name: Option<String>,
        /// A person's credential (their turns get it).
        #[arg(long, conflicts_with = "environment")]
        person: Option<String>,
        /// An environment's credential (the turns in its sandboxes get it).
        #[arg(long)]
        environment: Option<String>,
        /// `list`: one JSON object per credential (its name; never its value).
        #[arg(long)]
        json: bool,
    },
    /// The audit log: its records, oldest first; `verify` checks its hash chain.
    Audit {
        /// verify
        action: Option<String>,
        /// One JSON object per record.
        #[arg(long)]
        json: bool,
    },
    /// The deny-risky rules: `check` one tool call (prints `{"decision","rule","reason"}`;
    /// exit 0 allow, 3 deny).
    Rules {
        #[command(subcommand)]
        action: RulesCmd,
    },
    /// Environments (what sandboxes are made from): `apply FILE`, `list`, `show NAME`.
    Env {
        #[command(subcommand)]
        action: sandboxes::EnvCmd,
    },
    /// Sandboxes: `create --env E --repo PATH`, `list`, `exec SB -- CMD`, `attach SB`, `rm SB`.
    Sb {
        #[command(subcommand)]
        action: sandboxes::SbCmd,
    },
    /// Print a run's log as `hangar run` shows a turn (text, tool calls and results,
    /// approvals, the result); with --follow, keep printing until the turn ends (through a
    /// restart of the server); --json prints the log's raw lines.
    Log {
        run: String,
        #[arg(long, short)]
        follow: bool,
        /// The run log's lines as they are (stream-json and hangar's own), one per line.
        #[arg(long)]
        json: bool,
    },
    /// Harness CLI versions: `check` runs hangar's conformance suite (built in, with its
    /// scripted model) against the Claude Code and Codex on PATH or named and records the
    /// result, after which a version that passed runs turns; `list` shows every version known.
    Harness {
        #[command(subcommand)]
        action: HarnessCmd,
    },
    /// A consistent copy of the store taken while it is in use (SQLite; on PostgreSQL it names
    /// pg_dump), into a new FILE. The vault's master key and the run logs are not in it: it
    /// says how to keep them.
    Backup { file: PathBuf },
    /// Bring a backup back as this home's store (with no server running): the copy is checked
    /// (its audit log's chain, the master key) and the store it replaces is kept beside it.
    Restore { file: PathBuf },
    /// Retention, once: runs whose turn ended more than AGE ago lose their log, trees, kept
    /// files and events (their record, commands, approvals and the audit log stay; live runs
    /// are never touched). `hangar serve` does it daily with `retention_days`.
    Prune {
        /// How old: a number and d, h or m (90d).
        #[arg(long, value_name = "AGE")]
        older_than: String,
        /// Say what would go, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Check this machine: the driver and hook, bubblewrap and user namespaces, tmux, the
    /// harness CLIs (and the Node.js they need) and their check, dockerd, the store, free disk
    /// and the home folder's permissions; says what to do for each failure. Exit 1 when a turn
    /// cannot run here.
    Doctor {
        /// One JSON object per check: check, status (ok, warn, fail), found, fix.
        #[arg(long)]
        json: bool,
    },
    /// Print the completion script for a shell: `hangar completions bash >
    /// /etc/bash_completion.d/hangar`, or zsh, fish, elvish, powershell.
    Completions { shell: clap_complete::Shell },
    /// Write hangar's man pages (hangar.1 and one per command) into a folder.
    #[command(hide = true)]
    Man { dir: PathBuf },
}

#[derive(Debug, Subcommand)]
enum HarnessCmd {
    /// Run the conformance suite against Claude Code and Codex (on PATH, or --claude PATH,
    /// --codex PATH) and record each result in the store (with HANGAR_CONFIG, the server's).
    Check(harness::CheckArgs),
    /// The versions known here: the pinned ones, those checked, and those on PATH.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SessionCmd {
    /// Start a session in a folder; prints `session:`, `turn:` and `run:` lines.
    Start(run::TurnArgs),
}

#[derive(Debug, Subcommand)]
enum RulesCmd {
    /// Check one tool call: `--tool Bash --command CMD` or `--tool Write --path PATH`,
    /// `[--workspace DIR]`.
    Check(rules::CheckArgs),
}

#[derive(Debug, Subcommand)]
enum TurnCmd {
    /// The turn as JSON, with its manifest.
    Show { turn: String },
}

#[derive(Debug, Subcommand)]
enum TokenCmd {
    /// Make a token for a person (on the server's machine; an unknown EMAIL is added as a
    /// member); prints `id: ID` first and the token alone on the last line, once: only its hash
    /// is kept.
    Create {
        #[arg(long)]
        person: String,
        /// What to call it.
        #[arg(long)]
        name: Option<String>,
        /// How long it lives: `90d` (the default), `12h`, `30m`; at most 365d.
        #[arg(long)]
        expires: Option<String>,
    },
    /// Your tokens (anyone's for an admin): id, person, name, expiry, last use; never a token.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token (your own, or anyone's for an admin); it is refused at once.
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
enum PersonCmd {
    /// Add a person (a member; an admin with --admin; a viewer, who reads the team's work and
    /// acts on nothing, with --viewer).
    Add {
        #[arg(long, conflicts_with = "viewer")]
        admin: bool,
        #[arg(long)]
        viewer: bool,
        email: String,
    },
    /// The people who are in, with their roles.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Remove a person: every token of theirs is revoked.
    Rm { email: String },
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let serving = matches!(cli.command, Cmd::Serve { .. });
    let result = server_file(&cli.command).and_then(|file| {
        logging::init(serving, cli.verbose, cli.log_format)?;
        let home: PathBuf = hangar_protocol::env::hangar_home();
        dispatch(cli.command, home, file)
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            exit::report(&e);
            e.exit_code()
        }
    }
}

/// The command line's definition, each command's help ending with the variables it reads.
fn command() -> clap::Command {
    envhelp::with_environment(<Cli as clap::CommandFactory>::command())
}

/// A server's configuration file, laid under the environment before any setting is read:
/// `serve --config`, else `$HANGAR_CONFIG` for every command, so the commands an admin runs on
/// the server's machine (`token create`, `person add`, `credential set`) find its store.
fn server_file(cmd: &Cmd) -> Result<config::ServeFile, exit::CliError> {
    let flag = match cmd {
        Cmd::Serve { config, .. } => config.clone(),
        _ => None,
    };
    // The CLI's own file first, the server's over it, the environment over both.
    let mut vars = client_config::read()?;
    let file = match config::chosen(flag) {
        Some(path) => {
            let (file, server_vars) = config::load(&path)?;
            vars.extend(server_vars);
            file
        }
        None => config::ServeFile::default(),
    };
    if !vars.is_empty() {
        config::lay_under_environment(vars)?;
    }
    Ok(file)
}

fn dispatch(cmd: Cmd, home: PathBuf, file: config::ServeFile) -> Result<ExitCode, exit::CliError> {
    match cmd {
        Cmd::Run(a) => run::run(&home, a),
        Cmd::Session {
            action: SessionCmd::Start(a),
        } => sessions::start(&home, &a),
        Cmd::Send { session, text } => sessions::send(&home, &session, &text),
        Cmd::Sessions { json } => sessions::list(&home, json),
        Cmd::Turn {
            action: TurnCmd::Show { turn },
        } => sessions::turn_show(&home, &turn),
        Cmd::Diff {
            run,
            from,
            to,
            patch,
            json,
        } => sessions::diff(&home, &run, from, to, patch, json),
        Cmd::Fork(a) => fork::fork(&home, &a),
        Cmd::Transcript { session, json } => sessions::transcript(&home, &session, json),
        Cmd::Events { action, run } if action == "check" => serve::events_check(&home, &run),
        Cmd::Tree { dir } => match hangar_treehash::tree_id(&dir) {
            Ok(id) => {
                progress::say(&id);
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => Err(exit::CliError::Failed(format!("{}: {e}", dir.display()))),
        },
        Cmd::Events { action, .. } => Err(exit::CliError::Usage(format!(
            "unknown events action {action:?}: use `hangar events check RUN`"
        ))),
        Cmd::Steer { run, text } => send::steer(&home, &run, &text),
        Cmd::Interrupt { run } => send::interrupt(&home, &run),
        Cmd::Approvals {
            run: Some(run),
            json,
        } => logs::approvals(&home, &run, json),
        Cmd::Approvals { run: None, json } => logs::approvals_everywhere(&home, json),
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
        Cmd::Log { run, follow, json } => logs::log(&home, &run, follow, json),
        Cmd::Rules {
            action: RulesCmd::Check(a),
        } => rules::check(&a),
        Cmd::Env { action } => sandboxes::env(&home, action),
        Cmd::Sb { action } => sandboxes::sb(&home, action),
        Cmd::Serve {
            config: _,
            listen,
            unsandboxed_folders,
            tls_cert,
            tls_key,
            oidc_issuer,
            oidc_client_id,
            oidc_create_members,
            public_url,
        } => serve::oidc_config(oidc_issuer, oidc_client_id, oidc_create_members, public_url)
            .and_then(|oidc| {
                serve::serve(
                    &home,
                    listen.or(file.listen).unwrap_or(config::DEFAULT_LISTEN),
                    unsandboxed_folders,
                    tls_cert.zip(tls_key).or(file.tls).as_ref(),
                    oidc,
                )
            }),
        Cmd::Login { url, token_stdin } => login::login(&url, token_stdin),
        Cmd::Token {
            action:
                TokenCmd::Create {
                    person,
                    name,
                    expires,
                },
        } => people::token_create(&home, &person, name.as_deref(), expires.as_deref()),
        Cmd::Token {
            action: TokenCmd::List { json },
        } => people::token_list(&home, json),
        Cmd::Token {
            action: TokenCmd::Revoke { id },
        } => people::token_revoke(&home, &id),
        Cmd::Person { action } => match action {
            PersonCmd::Add {
                admin,
                viewer,
                email,
            } => people::person_add(&home, &email, admin, viewer),
            PersonCmd::List { json } => people::person_list(&home, json),
            PersonCmd::Rm { email } => people::person_rm(&home, &email),
        },
        Cmd::Credential {
            action,
            name,
            person,
            environment,
            json,
        } => {
            let owner = match (person, environment) {
                (Some(p), _) => hangar_store::SecretOwner::Person(p),
                (None, Some(e)) => hangar_store::SecretOwner::Environment(e),
                (None, None) => hangar_store::SecretOwner::Server,
            };
            serve::credential(&home, &action, name.as_deref(), &owner, json)
        }
        Cmd::Harness {
            action: HarnessCmd::Check(a),
        } => harness::check(&home, &a),
        Cmd::Harness {
            action: HarnessCmd::List { json },
        } => harness::list(&home, json),
        Cmd::Doctor { json } => doctor::doctor(&home, json),
        Cmd::Backup { file } => backup::backup(&home, &file),
        Cmd::Prune {
            older_than,
            dry_run,
        } => backup::prune(&home, &older_than, dry_run),
        Cmd::Restore { file } => backup::restore(&home, &file),
        Cmd::Completions { shell } => manual::completions(command(), shell),
        Cmd::Man { dir } => manual::man_pages(command(), &dir),
        Cmd::Audit { action: None, json } => sessions::audit(&home, json),
        Cmd::Audit {
            action: Some(action),
            ..
        } if action == "verify" => serve::audit_verify(&home),
        Cmd::Audit {
            action: Some(action),
            ..
        } => Err(exit::CliError::Usage(format!(
            "unknown audit action {action:?}: use `hangar audit` or `hangar audit verify`"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap's own checks of the definition (no flag named twice, a global `-v` no command
    /// shadows), which otherwise run only when a command is parsed.
    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
