//! Passing a request on to the replica that holds what it is about (issue 24). Replicas that
//! share no disk each keep their own runs' control folders, so a command for a run another live
//! replica watches is answered by that replica: the handler says so (`ApiError::Elsewhere`,
//! whose response carries [`To`]), and this layer, which kept the request's small body, sends the
//! same request there with the caller's own token (the other replica checks it again: nothing is
//! vouched for here) and answers with what that replica answered. Only POSTs under `/v1/runs/`
//! and `/v1/sessions/` (the commands) and a relayed terminal's requests under `/v1/attaches/`
//! (its output stream passed on as it comes) are kept and passed on. A request that was passed on once
//! is not passed on again (`x-hangar-passed-on`): two replicas that each take the other for the
//! run's holder cannot bounce it. If the holder cannot be reached, the first answer stands (a
//! 503 that says so). Hand-written over reqwest: a proxy crate would proxy every request; this
//! re-sends a handful of small ones, to addresses only the replicas table gives.

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, Method, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Where the request should have gone: the replica's address (`HANGAR_ADVERTISE_URL`).
#[derive(Clone, Debug)]
pub(crate) struct To(pub(crate) String);

/// Marks a request passed on by a replica.
pub(crate) const PASSED_ON: &str = "x-hangar-passed-on";

/// The largest body kept to pass on: axum's own limit for a JSON body (commands are a few
/// hundred bytes), so no request the routes would take is refused here.
const MAX_BODY: usize = 2 << 20;

/// How long the holder may take to answer (a command waits for the driver's ack).
const TIMEOUT: Duration = Duration::from_secs(300);

/// How long a passed-on attach output stream may last (an attach's client reconnects after).
const STREAM_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

fn passes_on(method: &Method, uri: &Uri, headers: &HeaderMap) -> bool {
    if headers.contains_key(PASSED_ON) {
        return false;
    }
    let path = uri.path();
    // A relayed terminal's requests (its output stream too) go to the replica relaying it.
    if path.starts_with("/v1/attaches/") {
        return matches!(*method, Method::GET | Method::POST | Method::DELETE);
    }
    method == Method::POST && (path.starts_with("/v1/runs/") || path.starts_with("/v1/sessions/"))
}

/// The layer: every other request goes through untouched.
pub(crate) async fn layer(req: Request, next: Next) -> Response {
    if !passes_on(req.method(), req.uri(), req.headers()) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return ApiError::BadRequest(format!("the request body is over {MAX_BODY} bytes"))
            .into_response();
    };
    let (uri, headers) = (parts.uri.clone(), parts.headers.clone());
    let parts_method = parts.method.clone();
    let resp = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    let Some(To(url)) = resp.extensions().get::<To>().cloned() else {
        return resp;
    };
    match pass_on(&parts_method, &url, &uri, &headers, bytes).await {
        Ok(passed) => passed,
        Err(e) => {
            tracing::warn!(%url, path = %uri.path(), error = %e, "cannot pass the request on to the replica that holds the run");
            resp
        }
    }
}

/// The client that passes requests on: no redirects; trusts `HANGAR_CA_FILE` too.
fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let mut b = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                // A replica that died keeps its lease a few seconds: its address may not answer.
                .connect_timeout(Duration::from_secs(3))
                .timeout(TIMEOUT);
            if let Some(path) = hangar_protocol::env::var(hangar_protocol::env::HANGAR_CA_FILE) {
                let pem = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
                for c in reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| format!("{path}: {e}"))?
                {
                    b = b.add_root_certificate(c);
                }
            }
            b.build().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

async fn pass_on(
    method: &Method,
    url: &str,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, String> {
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let target = format!("{}{path}", url.trim_end_matches('/'));
    let mut req = client()?
        .request(method.clone(), &target)
        .header(PASSED_ON, "1");
    if *method == Method::GET {
        // An output stream: answered as it comes, for as long as it lasts.
        req = req.timeout(STREAM_TIMEOUT);
    } else {
        req = req.body(body);
    }
    for name in [header::AUTHORIZATION, header::CONTENT_TYPE, header::ACCEPT] {
        if let Some(v) = headers.get(&name) {
            req = req.header(name, v);
        }
    }
    let r = req.send().await.map_err(|e| format!("{target}: {e}"))?;
    let status = r.status();
    let mut kept = HeaderMap::new();
    for name in [header::CONTENT_TYPE, header::CACHE_CONTROL] {
        if let Some(v) = r.headers().get(&name) {
            kept.insert(name, v.clone());
        }
    }
    let mut resp = if *method == Method::GET {
        (status, Body::from_stream(r.bytes_stream())).into_response()
    } else {
        let bytes = r.bytes().await.map_err(|e| format!("{target}: {e}"))?;
        (status, bytes).into_response()
    };
    resp.headers_mut().extend(kept);
    Ok(resp)
}
