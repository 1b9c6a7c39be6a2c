//! Commands that send to a run through the API: `steer`, `interrupt`, `approve`, `deny`. Each
//! exits 0 only when the driver's signed ack says `done` (the server waits for it); `refused: …`
//! exits 1; a turn that has ended exits 3, with the message handed back.
//!
//! With no server at `HANGAR_URL`, the command serves the API in-process for its own duration
//! over `$HANGAR_HOME`'s store and vault (the run's key is only there), so it works whether or
//! not a server runs.

use std::path::Path;
use std::process::ExitCode;

use hangar_api::RequestBody;
use hangar_mailbox::ctl::{self, ControlDir};
use serde_json::Value;

use crate::api::{Api, ApiError, seg};
use crate::exit::CliError;
use crate::local::{self, Conn};
use crate::{logs, progress, serve};

/// What to do when the turn has ended: the words after "the turn has ended".
fn ended_words(text: Option<&str>, session: Option<&str>) -> String {
    match text {
        Some(text) => format!(
            "; this message was not delivered (start the next turn with it: hangar send {} TEXT): {text}",
            session.unwrap_or("SESSION")
        ),
        None => String::new(),
    }
}

/// The session a run belongs to, if the API says.
async fn session_of(api: &Api, run: &str) -> Option<String> {
    let r: hangar_api::Run = api.get_as(&format!("/v1/runs/{}", seg(run))).await.ok()?;
    let t: hangar_api::Turn = api
        .get_as(&format!("/v1/turns/{}", seg(&r.turn_id)))
        .await
        .ok()?;
    Some(t.summary.session_id)
}

/// Sends to `/v1/runs/{run}/{what}` and turns the answer into an exit code.
fn send(
    home: &Path,
    run: &str,
    what: &str,
    body: impl RequestBody,
    text: Option<&str>,
) -> Result<ExitCode, CliError> {
    if !ctl::valid_run_id(run) {
        return Err(CliError::Usage(format!("{run:?} is not a run id")));
    }
    let rt = serve::runtime()?;
    let result = rt.block_on(async {
        let Some(conn) = local::connect(home).await? else {
            return Err(CliError::Failed(format!(
                "no run {run}: {}",
                local::nothing_here(home)
            )));
        };
        let r = send_on(&conn, home, run, what, &body, text).await;
        conn.close().await;
        r
    });
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

async fn send_on(
    conn: &Conn,
    home: &Path,
    run: &str,
    what: &str,
    body: &impl RequestBody,
    text: Option<&str>,
) -> Result<ExitCode, CliError> {
    // Served in-process, nothing watches the run log: a turn that ended while no server ran is
    // still "live" in the store. The log says it has ended; believe it (a steer must not start
    // the next turn here).
    if conn.local.is_some() && logs::log_has_ended(&ControlDir::for_run(home, run).run_log()) {
        let session = session_of(&conn.api, run).await;
        return Err(CliError::Ended(ended_words(text, session.as_deref())));
    }
    let path = format!("/v1/runs/{}/{what}", seg(run));
    match conn
        .api
        .post_as::<hangar_api::CommandReply>(&path, body)
        .await
    {
        Ok(v) => match v.outcome {
            hangar_api::Outcome::NextTurn => {
                // The turn ended between the check and the steer: the control plane started the
                // session's next turn with the message.
                progress::say(&format!(
                    "the turn had ended; your message started the next turn {} (run {})",
                    v.turn.as_deref().unwrap_or("?"),
                    v.run
                ));
                Ok(ExitCode::SUCCESS)
            }
            hangar_api::Outcome::Done => {
                progress::say("done");
                Ok(ExitCode::SUCCESS)
            }
        },
        Err(ApiError::Status { status: 404, .. }) => Err(CliError::Failed(format!(
            "no run {run} at {} (is HANGAR_URL or HANGAR_HOME right?)",
            if conn.local.is_some() {
                home.display().to_string()
            } else {
                conn.api.base().to_owned()
            }
        ))),
        Err(e) => Err(match e.into_cli() {
            CliError::Ended(_) => {
                let session = session_of(&conn.api, run).await;
                CliError::Ended(ended_words(text, session.as_deref()))
            }
            other => other,
        }),
    }
}

pub fn steer(home: &Path, run: &str, text: &str) -> Result<ExitCode, CliError> {
    // `next_turn=false`: an ended turn is reported, not continued (`hangar send` continues).
    send(
        home,
        run,
        "steer?next_turn=false",
        hangar_api::Text {
            text: text.to_owned(),
        },
        Some(text),
    )
}

pub fn interrupt(home: &Path, run: &str) -> Result<ExitCode, CliError> {
    send(home, run, "interrupt", hangar_api::Empty {}, None)
}

pub fn approve(
    home: &Path,
    run: &str,
    request_id: &str,
    input: Option<&str>,
) -> Result<ExitCode, CliError> {
    let input = match input.map(serde_json::from_str::<Value>) {
        None => None,
        Some(Ok(v @ Value::Object(_))) => Some(v),
        Some(_) => return Err(CliError::Usage("--input must be a JSON object".into())),
    };
    let body = hangar_api::Answer {
        decision: hangar_api::Decision::Allow,
        reason: None,
        input,
    };
    send(
        home,
        run,
        &format!("approvals/{}", seg(request_id)),
        body,
        None,
    )
}

pub fn deny(
    home: &Path,
    run: &str,
    request_id: &str,
    reason: Option<&str>,
) -> Result<ExitCode, CliError> {
    let body = hangar_api::Answer {
        decision: hangar_api::Decision::Deny,
        reason: reason.map(str::to_owned),
        input: None,
    };
    send(
        home,
        run,
        &format!("approvals/{}", seg(request_id)),
        body,
        None,
    )
}
