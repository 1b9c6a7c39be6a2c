//! `hangar sb attach` on an e2b sandbox: the terminal `hangar serve` relays (it started envd's
//! PTY process and keeps envd's token; this client speaks only to the server): the output as
//! Server-Sent Events from `GET /v1/attaches/ID/output`, what is typed to `…/input`, resizes to
//! `…/resize`, a keepalive (an empty input) while nothing is typed, `DELETE /v1/attaches/ID`
//! when the attach ends without the process's end. A relayed output that breaks (the replica
//! relaying it stopped) is asked for again, and typing retried, while another replica takes the
//! attach over (issue 24). The terminal side (raw mode, SIGWINCH, the
//! messages) is `hangar_cloud::e2b::terminal::join_terminal`, as for envd's own.

use std::time::Duration;

use hangar_api::AttachOne;
use hangar_cloud::e2b::terminal::{self, PtyEvent, PtyEvents, PtyLink};
use hangar_sandbox::SandboxError;

use crate::api::{Api, seg};

/// The relay's side of a terminal: input, resizes and the end, through the server.
#[derive(Clone, Debug)]
struct RelayLink {
    api: Api,
    attach: String,
    sandbox: String,
}

impl RelayLink {
    /// Sends a request of the attach's, again while it fails in a way that may pass (its
    /// replica stopped and another is taking the attach over), for up to [`RECONNECT_WITHIN`].
    /// `once`: what is typed is sent again only when it surely did not arrive (no server
    /// answered, or hangar's own 503), never twice into the terminal.
    async fn call<F, Fut>(&self, what: &str, once: bool, send: F) -> Result<(), SandboxError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<AttachOne, crate::api::ApiError>>,
    {
        let deadline = tokio::time::Instant::now() + RECONNECT_WITHIN;
        loop {
            match send().await {
                Ok(_) => return Ok(()),
                Err(e)
                    if tokio::time::Instant::now() < deadline
                        && if once {
                            matches!(
                                e,
                                crate::api::ApiError::NoServer(_)
                                    | crate::api::ApiError::Status { status: 503, .. }
                            )
                        } else {
                            e.transient()
                        } =>
                {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Err(e) => {
                    return Err(SandboxError::Failed(format!(
                        "e2b, sandbox {}: {what} (attach {}): {e}",
                        self.sandbox, self.attach
                    )));
                }
            }
        }
    }
}

impl PtyLink for RelayLink {
    async fn input(&self, bytes: &[u8]) -> Result<(), SandboxError> {
        use base64::Engine;
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        let path = format!("/v1/attaches/{}/input", seg(&self.attach));
        let body = hangar_api::AttachInput { data };
        // A keepalive (nothing typed) may go twice; keys may not.
        self.call("typing", !bytes.is_empty(), || {
            self.api.post_as(&path, &body)
        })
        .await
    }

    async fn resize(&self, cols: u16, rows: u16) -> Result<(), SandboxError> {
        let path = format!("/v1/attaches/{}/resize", seg(&self.attach));
        let body = hangar_api::AttachResize { cols, rows };
        self.call("resizing", false, || self.api.post_as(&path, &body))
            .await
    }

    async fn kill(&self) -> Result<(), SandboxError> {
        let path = format!("/v1/attaches/{}", seg(&self.attach));
        self.call("ending", false, || self.api.delete_as(&path))
            .await
    }
}

/// How long the relayed output may say nothing (the server's keepalive comes every 10 s)
/// before it is taken for gone.
const SILENT: Duration = Duration::from_secs(30);

/// How long a client whose relayed output broke keeps asking for it again (through whichever
/// replica answers: one takes the attach over once the lease of the one that stopped ran out).
const RECONNECT_WITHIN: Duration = Duration::from_secs(45);

/// The relayed output: Server-Sent Events read from the response as they come.
struct RelayEvents {
    resp: crate::api::Streamed,
    buf: Vec<u8>,
    sandbox: String,
    ended: bool,
    /// To ask for the output again when it broke, and to redraw the terminal then.
    link: RelayLink,
}

impl RelayEvents {
    /// Asks for the output again (the replica that relayed it may have stopped), for up to
    /// [`RECONNECT_WITHIN`]; then has the terminal redrawn at its size. `broke`: what happened.
    async fn reconnect(&mut self, broke: String) -> Result<(), SandboxError> {
        let path = format!("/v1/attaches/{}/output", seg(&self.link.attach));
        let deadline = tokio::time::Instant::now() + RECONNECT_WITHIN;
        loop {
            match self.link.api.stream(&path).await {
                Ok(resp) => {
                    self.resp = resp;
                    self.buf.clear();
                    if let Some((cols, rows)) = terminal::window_size() {
                        let _ = self.link.resize(cols, rows).await;
                    }
                    return Ok(());
                }
                Err(e) if e.transient() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => {
                    self.ended = true;
                    return Err(self.said(format!("{broke}; asking for it again: {e}")));
                }
            }
        }
    }
}

/// One whole event (`event:` and `data:` lines up to a blank line) taken from `buf`, if it
/// holds one: its kind and data (comments, the server's keepalives, give `None` kinds).
pub(crate) fn take_event(buf: &mut Vec<u8>) -> Option<(Option<String>, String)> {
    let end = buf.windows(2).position(|w| w == b"\n\n")?;
    let block: Vec<u8> = buf.drain(..end + 2).collect();
    let text = String::from_utf8_lossy(&block);
    let (mut kind, mut data) = (None, String::new());
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(v) = line.strip_prefix("event:") {
            kind = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    Some((kind, data))
}

impl RelayEvents {
    fn said(&self, what: impl std::fmt::Display) -> SandboxError {
        SandboxError::Failed(format!("e2b, sandbox {}: {what}", self.sandbox))
    }
}

impl PtyEvents for RelayEvents {
    async fn next_within(
        &mut self,
        idle: Option<Duration>,
    ) -> Result<Option<PtyEvent>, SandboxError> {
        loop {
            while let Some((kind, data)) = take_event(&mut self.buf) {
                match kind.as_deref() {
                    Some("data") => {
                        use base64::Engine;
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(data.trim())
                            .map_err(|e| self.said(format!("the relayed output: {e}")))?;
                        return Ok(Some(PtyEvent::Data(bytes)));
                    }
                    Some("end") => {
                        // The process ended: the stream closing after it is not a break.
                        self.ended = true;
                        let end = serde_json::from_str::<hangar_api::AttachEnd>(&data);
                        return Ok(Some(PtyEvent::End(end.map_or(1, |e| e.status))));
                    }
                    Some("ended") => {
                        self.ended = true;
                        let ended = serde_json::from_str::<hangar_api::AttachEnded>(&data);
                        return Err(self.said(
                            ended.map_or_else(|_| "the attach ended".to_owned(), |e| e.reason),
                        ));
                    }
                    // Keepalives (comments) and kinds this client does not know.
                    _ => {}
                }
            }
            if self.ended {
                return Ok(None);
            }
            // The server sends a keepalive every 10 s: a stream silent for 30 s went away with
            // its replica (a machine that vanished closes nothing), and is asked for again.
            let quiet = idle.map_or(SILENT, |d| d.min(SILENT));
            let chunk = match tokio::time::timeout(quiet, self.resp.chunk()).await {
                Ok(c) => c,
                Err(_) => {
                    self.reconnect(format!(
                        "hangar serve sent nothing for {} s (not even its keepalive)",
                        quiet.as_secs()
                    ))
                    .await?;
                    continue;
                }
            };
            // A stream that stops without the attach's end: its replica went away.
            match chunk {
                Ok(Some(c)) => self.buf.extend_from_slice(&c),
                Ok(None) => {
                    self.reconnect("the relayed output stopped".into()).await?;
                }
                Err(e) => {
                    self.reconnect(format!("the relayed output broke: {e}"))
                        .await?;
                }
            }
        }
    }
}

/// Joins this process's terminal to relayed attach `attach` of sandbox `sandbox` until it
/// ends; the process's exit status. A keepalive goes every `keepalive`.
pub async fn attach(
    api: Api,
    attach: &str,
    sandbox: &str,
    keepalive: Duration,
) -> Result<i32, SandboxError> {
    let link = RelayLink {
        api: api.clone(),
        attach: attach.to_owned(),
        sandbox: sandbox.to_owned(),
    };
    let resp = match api
        .stream(&format!("/v1/attaches/{}/output", seg(attach)))
        .await
    {
        Ok(r) => r,
        Err(e) => {
            let _ = link.kill().await;
            return Err(SandboxError::Failed(format!(
                "e2b, sandbox {sandbox}: the relayed output (attach {attach}): {e}"
            )));
        }
    };
    let mut out = RelayEvents {
        resp,
        buf: Vec::new(),
        sandbox: sandbox.to_owned(),
        ended: false,
        link: link.clone(),
    };
    let beat = {
        let link = link.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(keepalive).await;
                let _ = link.input(&[]).await;
            }
        })
    };
    let status = terminal::join_terminal(link, &mut out, sandbox, terminal::IDLE).await;
    beat.abort();
    status
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn events_are_taken_whole_and_keepalives_skipped() {
        let mut buf =
            b": keep-alive\n\nevent: data\ndata: aGk=\n\nevent: end\ndata: {\"st".to_vec();
        assert_eq!(take_event(&mut buf), Some((None, String::new())));
        assert_eq!(
            take_event(&mut buf),
            Some((Some("data".into()), "aGk=".into()))
        );
        assert_eq!(take_event(&mut buf), None);
        buf.extend_from_slice(b"atus\":0}\n\n");
        assert_eq!(
            take_event(&mut buf),
            Some((Some("end".into()), "{\"status\":0}".into()))
        );
    }
}
