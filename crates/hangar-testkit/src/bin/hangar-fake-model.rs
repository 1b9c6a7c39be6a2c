//! `hangar-fake-model --script FILE [--port N] [--log FILE]`: a scripted fake Anthropic Messages
//! server for manual runs and scripts. Prints `listening: http://127.0.0.1:PORT` once, then serves
//! until its stdin closes (or it is killed). `--log FILE` appends one JSON line per request.
#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool reports on stdout/stderr"
)]

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use hangar_testkit::{FakeAnthropic, Script, ServerOptions};

const USAGE: &str = "usage: hangar-fake-model --script FILE [--port N] [--log FILE]\n\
    Serves a scripted fake Anthropic Messages API on 127.0.0.1 until stdin closes.\n\
    Scenario format: see the hangar-testkit crate docs.";

struct Args {
    script: PathBuf,
    options: ServerOptions,
}

fn parse_args() -> Result<Args, String> {
    let mut script = None;
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
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let script = script.ok_or_else(|| "--script is required".to_owned())?;
    Ok(Args { script, options })
}

fn run(args: &Args) -> Result<(), String> {
    let script = Script::load(&args.script).map_err(|e| e.to_string())?;
    let mut server = FakeAnthropic::start_with(script, &args.options).map_err(|e| e.to_string())?;
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
    server.shutdown();
    let unexpected = server.unexpected();
    eprintln!(
        "hangar-fake-model: {} requests ({} model), {} aborted streams, {} steps left, {} unexpected",
        server.all_requests().len(),
        server.requests().len(),
        server.aborted_streams(),
        server.remaining_steps(),
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
