//! `GET /metrics`: the control plane's counters and timings (named in hangar-control's
//! `metrics.rs`) and the API's requests, in Prometheus' text format, rendered by
//! `metrics-exporter-prometheus`. Any signed-in person may read them (a scraper gets a token of
//! its own, e.g. a viewer's): they are counts and timings, never a run's content.
//!
//! The recorder is the process's one global, installed by `hangar serve` ([`install`]); a server
//! embedded in another command records nothing and answers 503 here.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use hangar_control::ControlPlane;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::auth::Authed;
use crate::error::ApiError;

/// Requests the API answered, by `status`.
pub const HTTP_REQUESTS: &str = "hangar_http_requests_total";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Histogram buckets, in seconds: from a millisecond (an answer's ack) to ten minutes (a slow
/// image's sandbox).
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 600.0,
];

/// Installs the Prometheus recorder as the process's global one (once; later calls do nothing).
pub fn install() -> Result<(), String> {
    if HANDLE.get().is_some() {
        return Ok(());
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| format!("metrics: {e}"))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| format!("metrics: {e}"))?;
    let _ = HANDLE.set(handle);
    Ok(())
}

pub(crate) fn router() -> Router<Arc<ControlPlane>> {
    Router::new().route("/metrics", get(render))
}

async fn render(_who: Authed) -> Result<axum::response::Response, ApiError> {
    let Some(handle) = HANDLE.get() else {
        return Err(ApiError::Unavailable(
            "this server records no metrics (hangar serve does)".into(),
        ));
    };
    handle.run_upkeep();
    Ok((
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        handle.render(),
    )
        .into_response())
}
