//! `hangar-fake-model --script FILE [--api anthropic|openai] [--port N] [--log FILE]`: a scripted
//! fake model server for manual runs and scripts — the Anthropic Messages API (default, for Claude
//! Code) or the OpenAI Responses API (`--api openai`, for Codex). Prints
//! `listening: <base url>` once (`http://127.0.0.1:PORT` for anthropic, `http://127.0.0.1:PORT/v1`
//! for openai: the value for `ANTHROPIC_BASE_URL` / a Codex provider's `base_url`), then serves
//! until its stdin closes (or it is killed). `--log FILE` appends one JSON line per request.
#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool reports on stdout/stderr"
)]

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use hangar_testkit::{FakeAnthropic, FakeOpenAi, Script, ServerOptions};

const USAGE: &str = "usage: hangar-fake-model --script FILE [--api anthropic|openai] [--port N] \
    [--log FILE]\n\
    Serves a scripted fake model API on 127.0.0.1 until stdin closes: Anthropic Messages \
    (default, for Claude Code) or OpenAI Responses (--api openai, for Codex).\n\
    Scenario format: see the hangar-testkit crate docs.";

#[derive(Clone, Copy)]
enum Api {
    Anthropic,
    OpenAi,
}

struct Args {
    script: PathBuf,
    api: Api,
    options: ServerOptions,
}

/// Either fake, behind the few calls the tool makes.
enum Server {
    Anthropic(FakeAnthropic),
    OpenAi(FakeOpenAi),
}

impl Server {
    fn start(api: Api, script: Script, options: &ServerOptions) -> Result<Self, String> {
        match api {
            Api::Anthropic => FakeAnthropic::start_with(script, options).map(Self::Anthropic),
            Api::OpenAi => FakeOpenAi::start_with(script, options).map(Self::OpenAi),
        }
        .map_err(|e| e.to_string())
    }

    fn base_url(&self) -> String {
        match self {
            Self::Anthropic(server) => server.base_url(),
            Self::OpenAi(server) => server.base_url(),
        }
    }

    /// Shuts down and returns (all requests, model requests, aborted streams, steps left,
    /// unexpected lines).
    fn finish(&mut self) -> (usize, usize, usize, usize, Vec<String>) {
        match self {
            Self::Anthropic(server) => {
                server.shutdown();
                (
                    server.all_requests().len(),
                    server.requests().len(),
                    server.aborted_streams(),
                    server.remaining_steps(),
                    server.unexpected(),
                )
            }
            Self::OpenAi(server) => {
                server.shutdown();
                (
                    server.all_requests().len(),
                    server.requests().len(),
                    server.aborted_streams(),
                    server.remaining_steps(),
                    server.unexpected(),
                )
            }
        }
    }
}

fn parse_args() -> Result<Args, String> {
    let mut script = None;
    let mut api = Api::Anthropic;
    let mut options = ServerOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--script" => script = Some(PathBuf::from(value("--script")?)),
            "--port" => {
                let text = value("--port")?;
                options.port = text.parse().map_err(|_| format!("bad port {text:?}"))?;
            }
            "--log" => options.log = Some(PathBuf::from(value("--log")?)),
            "--api" => {
                api = match value("--api")?.as_str() {
                    "anthropic" => Api::Anthropic,
                    "openai" => Api::OpenAi,
                    other => {
                        return Err(format!("--api is anthropic or openai, not {other:?}"));
                    }
                };
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let script = script.ok_or_else(|| "--script is required".to_owned())?;
    Ok(Args {
        script,
        api,
        options,
    })
}

fn run(args: &Args) -> Result<(), String> {
    let script = Script::load(&args.script).map_err(|e| e.to_string())?;
    let mut server = Server::start(args.api, script, &args.options)?;
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "listening: {}", server.base_url()).map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())?;
    drop(stdout);
    // Serve until stdin reaches EOF (the parent closed it or exited).
    let mut sink = [0u8; 4096];
    let mut stdin = io::stdin().lock();
    loop {
        match stdin.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let (all, main, aborted, left, unexpected) = server.finish();
    eprintln!(
        "hangar-fake-model: {all} requests ({main} model), {aborted} aborted streams, {left} steps left, {} unexpected",
        unexpected.len()
    );
    for line in unexpected {
        eprintln!("hangar-fake-model: unexpected: {line}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if message.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("hangar-fake-model: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hangar-fake-model: {message}");
            ExitCode::FAILURE
        }
    }
}
