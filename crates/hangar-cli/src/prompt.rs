//! `hangar run`'s inline approval prompt: when stdin is a terminal, each permission request the
//! run log shows is asked about right there: `y` allows it, `n` denies it (then a reason, or
//! Enter for none), Enter alone leaves it for someone else. The request stays answerable from
//! anywhere (`hangar approve`, the web page, another person): the first answer stands, and a
//! request answered elsewhere while asked here is said and dropped.
//!
//! Lines are read on a thread of their own (a terminal read blocks) and handed to the follow
//! loop, which asks one request at a time, in the order they came.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::api::{Api, seg};
use crate::exit::CliError;
use crate::progress;

/// One request waiting.
struct Waiting {
    request_id: String,
    tool_name: String,
    /// What the tool would do, whole: the person answers what they see.
    input: String,
}

/// Where the prompt is.
enum Asking {
    /// Nothing asked.
    Idle,
    /// Allow, deny or leave this request?
    Decision(Waiting),
    /// Denying this request: its reason?
    Reason(Waiting),
}

pub struct Prompter {
    run: String,
    lines: mpsc::UnboundedReceiver<String>,
    queue: VecDeque<Waiting>,
    asking: Asking,
}

impl Prompter {
    /// A prompter reading stdin, when stdin is a terminal (and the output is for a person).
    pub fn for_terminal(run: &str, json_out: bool) -> Option<Prompter> {
        if json_out || !std::io::stdin().is_terminal() {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Some(Prompter {
            run: run.to_owned(),
            lines: rx,
            queue: VecDeque::new(),
            asking: Asking::Idle,
        })
    }

    /// Takes note of a run-log line: a request asked, or one answered (here or elsewhere).
    pub fn saw(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return;
        };
        let id = v["request_id"].as_str().unwrap_or_default().to_owned();
        match v["type"].as_str() {
            Some("hangar.approval") if !id.is_empty() => self.queue.push_back(Waiting {
                request_id: id,
                tool_name: v["tool_name"].as_str().unwrap_or("a tool").to_owned(),
                input: match v["input"].get("command").and_then(Value::as_str) {
                    Some(command) => command.to_owned(),
                    None => v["input"].to_string(),
                },
            }),
            Some("hangar.approval_answered") => {
                self.queue.retain(|w| w.request_id != id);
                let current = match &self.asking {
                    Asking::Decision(w) | Asking::Reason(w) => w.request_id == id,
                    Asking::Idle => false,
                };
                if current {
                    self.asking = Asking::Idle;
                    progress::say("(answered elsewhere)");
                }
            }
            _ => {}
        }
    }

    /// Asks the next request if none is being asked, and acts on what was typed.
    pub async fn step(&mut self, api: &Api) {
        if matches!(self.asking, Asking::Idle)
            && let Some(next) = self.queue.pop_front()
        {
            // What was typed before this question is not an answer to it (a `y` meant for a
            // request answered elsewhere meanwhile must not allow this one).
            while self.lines.try_recv().is_ok() {}
            ask(&format!(
                "{} ({}) wants to run, in full:\n{}\nallow it? y: allow, n: deny, Enter: leave it for someone else > ",
                next.tool_name,
                progress::short(&next.request_id, 12),
                next.input
            ));
            self.asking = Asking::Decision(next);
        }
        while let Ok(typed) = self.lines.try_recv() {
            let typed = typed.trim().to_owned();
            match std::mem::replace(&mut self.asking, Asking::Idle) {
                Asking::Idle => {}
                Asking::Decision(w) => match typed.to_ascii_lowercase().as_str() {
                    "y" | "yes" | "a" | "allow" => self.answer(api, &w, true, None).await,
                    "n" | "no" | "d" | "deny" => {
                        ask("reason (Enter for none) > ");
                        self.asking = Asking::Reason(w);
                    }
                    "" => progress::say(&format!(
                        "left for someone else: hangar approve {} {}",
                        self.run, w.request_id
                    )),
                    other => {
                        ask(&format!("{other:?}? y, n or Enter > "));
                        self.asking = Asking::Decision(w);
                    }
                },
                Asking::Reason(w) => {
                    let reason = (!typed.is_empty()).then_some(typed);
                    self.answer(api, &w, false, reason).await;
                }
            }
        }
    }

    async fn answer(&self, api: &Api, w: &Waiting, allow: bool, reason: Option<String>) {
        let body = hangar_api::Answer {
            decision: if allow {
                hangar_api::Decision::Allow
            } else {
                hangar_api::Decision::Deny
            },
            reason,
            input: None,
        };
        let path = format!(
            "/v1/runs/{}/approvals/{}",
            seg(&self.run),
            seg(&w.request_id)
        );
        if let Err(e) = api.post(&path, &body).await {
            let said = match e.into_cli() {
                CliError::Refused(r) => format!("not answered: {r}"),
                CliError::Ended(_) => "not answered: the turn had ended".into(),
                e => format!("not answered: {e}"),
            };
            progress::say(&said);
        }
    }
}

/// A question on the terminal, the cursor after it.
fn ask(question: &str) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{question}");
    let _ = out.flush();
}
