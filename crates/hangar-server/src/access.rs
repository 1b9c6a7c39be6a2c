//! The access log: one `hangar::access` line per request (method, path, status, milliseconds)
//! through tower-http's tracing layer, and the request counter `/metrics` shows. The path is
//! logged without its query string, and no header is: a token never reaches the log.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::TraceLayer;
use tracing::Span;

type MakeSpan = fn(&Request<Body>) -> Span;
type OnResponse = fn(&Response<Body>, Duration, &Span);

/// The layer, outermost: it sees every request, routed or not.
pub(crate) fn layer()
-> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, MakeSpan, (), OnResponse, (), (), ()> {
    TraceLayer::new_for_http()
        .make_span_with(span as MakeSpan)
        .on_request(())
        .on_response(answered as OnResponse)
        .on_body_chunk(())
        .on_eos(())
        .on_failure(())
}

fn span(req: &Request<Body>) -> Span {
    tracing::info_span!("request", method = %req.method(), path = %req.uri().path())
}

fn answered(res: &Response<Body>, latency: Duration, _span: &Span) {
    let status = res.status().as_u16();
    tracing::info!(target: "hangar::access", status, ms = latency.as_millis() as u64, "answered");
    metrics::counter!(crate::metrics::HTTP_REQUESTS, "status" => status.to_string()).increment(1);
}
