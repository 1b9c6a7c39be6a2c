//! `hangar-fake-tower [--port N] [--answer allow|deny|wait] [--key KEY] [--trust-hangar URL]
//! [--passport-seconds N]`: the Tower double (a stand-in for Tower that follows
//! `tower-contract.md`; not Tower) for trying governance locally. With `--trust-hangar` it
//! exchanges the sandbox tokens of the hangar at URL (its keys read from
//! `URL/.well-known/jwks.json`) for passports (`HANGAR_GOVERNANCE_HOOK_AUTH=passport`). Prints `listening: http://127.0.0.1:PORT` (the value for `--tower-url` /
//! `HANGAR_GOVERNANCE_URL`) and the key it accepts, then serves until its stdin closes. Under
//! `--answer wait`, each call creates an approval; typing `allow ID` or `deny ID` on stdin signs
//! it (as does `POST /_test/approvals/ID/sign`).
#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool reports on stdout/stderr"
)]

use std::io::{BufRead, Write};
use std::process::ExitCode;

use hangar_testkit::{TOWER_KEY, TowerAnswer, TowerDouble};

const USAGE: &str = "usage: hangar-fake-tower [--port N] [--answer allow|deny|wait] [--key KEY] [--trust-hangar URL] [--passport-seconds N]\n\
    The Tower double (for tests and local tries, not Tower): serves tower-contract.md on \
    127.0.0.1 until stdin closes; `allow ID` / `deny ID` on stdin signs a waiting approval.";

fn main() -> ExitCode {
    let mut port = 0u16;
    let mut answer = TowerAnswer::Allow("allowed by the Tower double".into());
    let mut key = TOWER_KEY.to_owned();
    let mut trust = None;
    let mut passport_seconds = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next();
        match (a.as_str(), v.as_deref()) {
            ("--port", Some(p)) if p.parse::<u16>().is_ok() => port = p.parse().unwrap_or(0),
            ("--answer", Some("allow")) => {}
            ("--answer", Some("deny")) => {
                answer = TowerAnswer::Deny("denied by the Tower double".into())
            }
            ("--answer", Some("wait")) => {
                answer = TowerAnswer::Wait {
                    reason: "a person must sign (type `allow ID` or `deny ID`)".into(),
                    sign: None,
                }
            }
            ("--key", Some(k)) => key = k.to_owned(),
            ("--trust-hangar", Some(u)) => trust = Some(u.to_owned()),
            ("--passport-seconds", Some(n)) if n.parse::<u64>().is_ok() => {
                passport_seconds = n.parse().ok()
            }
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let tower = match TowerDouble::start_on(port) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("hangar-fake-tower: {e}");
            return ExitCode::from(1);
        }
    };
    tower.set_answer(answer);
    tower.set_keys(&[&key]);
    if let Some(n) = passport_seconds {
        tower.set_passport_seconds(n);
    }
    println!("listening: {}", tower.url());
    println!("key: {key}");
    if let Some(u) = trust {
        tower.trust_hangar(&u);
        println!(
            "passports: for the hangar at {u} (HANGAR_URL={u}, HANGAR_GOVERNANCE_HOOK_AUTH=passport)"
        );
    }
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some(d @ ("allow" | "deny")), Some(id)) => {
                let ok = tower.sign(id, d == "allow", "you");
                println!(
                    "{}",
                    if ok {
                        "signed"
                    } else {
                        "no pending approval with that id"
                    }
                );
            }
            (Some("approvals"), None) => println!("{}", tower.approvals().join(" ")),
            _ => eprintln!("type `allow ID`, `deny ID` or `approvals`"),
        }
        let _ = std::io::stdout().flush();
    }
    ExitCode::SUCCESS
}
