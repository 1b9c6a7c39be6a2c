//! `hangar sb attach` on an e2b sandbox: the terminal `hangar serve` relays (it started envd's
//! PTY process and keeps envd's token; this client speaks only to the server): the output as
//! Server-Sent Events from `GET /v1/attaches/ID/output`, what is typed to `…/input`, resizes to
//! `…/resize`, a keepalive (an empty input) while nothing is typed, `DELETE /v1/attaches/ID`
//! when the attach ends without the process's end. The terminal side (raw mode, SIGWINCH, the
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
    fn call(
        &self,
        what: &str,
        sent: Result<AttachOne, crate::api::ApiError>,
    ) -> Result<(), SandboxError> {
        sent.map(|_| ()).map_err(|e| {
            SandboxError::Failed(format!(
                "e2b, sandbox {}: {what} (attach {}): {e}",
                self.sandbox, self.attach
            ))
        })
    }
}

impl PtyLink for RelayLink {
    async fn input(&self, bytes: &[u8]) -> Result<(), SandboxError> {
        use base64::Engine;
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        let path = format!("/v1/attaches/{}/input", seg(&self.attach));
        self.call(
            "typing",
            self.api
                .post_as(&path, &hangar_api::AttachInput { data })
                .await,
        )
    }

    async fn resize(&self, cols: u16, rows: u16) -> Result<(), SandboxError> {
        let path = format!("/v1/attaches/{}/resize", seg(&self.attach));
        self.call(
            "resizing",
            self.api
                .post_as(&path, &hangar_api::AttachResize { cols, rows })
                .await,
        )
    }

    async fn kill(&self) -> Result<(), SandboxError> {
        let path = format!("/v1/attaches/{}", seg(&self.attach));
        self.call("ending", self.api.delete_as(&path).await)
    }
}

/// The relayed output: Server-Sent Events read from the response as they come.
struct RelayEvents {
    resp: crate::api::Streamed,
    buf: Vec<u8>,
    sandbox: String,
    ended: bool,
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
            let chunk = match idle {
                Some(d) => tokio::time::timeout(d, self.resp.chunk())
                    .await
                    .map_err(|_| {
                        self.said(format!(
                            "hangar serve sent nothing for {} s (not even its keepalive)",
                            d.as_secs()
                        ))
                    })?,
                None => self.resp.chunk().await,
            };
            match chunk {
                Ok(Some(c)) => self.buf.extend_from_slice(&c),
                Ok(None) => {
                    self.ended = true;
                    return Ok(None);
                }
                Err(e) => return Err(self.said(format!("the relayed output broke: {e}"))),
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
