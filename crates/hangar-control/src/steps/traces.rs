//! Trace export (S28): each ended turn becomes an OpenTelemetry trace, sent over OTLP/HTTP
//! (protobuf) to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT` +
//! `/v1/traces` (from [`Tools::env`], else the control plane's environment). Nothing is sent
//! when neither is set.
//!
//! * A span per turn, `hangar.turn`, from the turn's start to its end, with the run, turn and
//!   session ids, the harness, the status, `hangar.git.tree.start` / `hangar.git.tree.end`
//!   (the `start` and `end` tree lines, or a one-shot turn's `git_trees`),
//!   `hangar.git.tree.trusted` (every tree of the turn trusted) and `hangar.git.tree.skipped`
//!   (`slow` once hashing stopped).
//! * A child span per tool call, `hangar.tool_call`, from the call to its result, with
//!   `hangar.tool.name`, `hangar.tool_use_id` and `hangar.git.tree`: the tree the driver wrote
//!   after that call, else the tree as it stood (the driver writes one only when it changed),
//!   with that tree's `.trusted`, and `.skipped` once hashing had stopped.
//!
//! Times are when the control plane stored each event (milliseconds), not when the harness
//! wrote it. The spans are built from the stored events after the turn ends and handed to the
//! OTLP exporter of `opentelemetry-otlp` directly (one export per turn), over the control
//! plane's own HTTP client. An export that fails is logged and dropped: traces never hold a
//! turn up.
//!
//! Non-goals: metrics and logs; spans for approvals and commands.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hangar_store::{EventScope, Run};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use serde_json::Value;

use crate::launch::Tools;
use crate::steps::Steps;

/// The OTLP exporter, when an endpoint is configured.
#[derive(Debug, Default)]
pub(crate) struct Traces {
    exporter: Option<tokio::sync::Mutex<opentelemetry_otlp::SpanExporter>>,
}

/// Where traces go: the traces endpoint as given, or the base endpoint with `/v1/traces`.
fn endpoint(tools: &Tools) -> Option<String> {
    let get = |name: &str| crate::launch::setting(tools, name).filter(|v| !v.trim().is_empty());
    get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
        get("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
    })
}

impl Traces {
    /// The exporter for the configured endpoint; none (and a warning) when it cannot be built.
    pub(crate) fn from_tools(tools: &Tools) -> Traces {
        let Some(url) = endpoint(tools) else {
            return Traces::default();
        };
        let built = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Client(reqwest::Client::new()))
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url.clone())
            .with_timeout(Duration::from_secs(10))
            .build();
        match built {
            Ok(mut e) => {
                e.set_resource(
                    &Resource::builder_empty()
                        .with_attribute(KeyValue::new("service.name", "hangar"))
                        .build(),
                );
                Traces {
                    exporter: Some(tokio::sync::Mutex::new(e)),
                }
            }
            Err(e) => {
                tracing::warn!(endpoint = %url, error = %e, "cannot export traces");
                Traces::default()
            }
        }
    }
}

/// The OTLP exporter's HTTP client: the control plane's reqwest.
#[derive(Debug)]
struct Client(reqwest::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Client {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let resp = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let mut out = http::Response::builder().status(resp.status());
        if let Some(h) = out.headers_mut() {
            *h = resp.headers().clone();
        }
        let body = resp.bytes().await?;
        Ok(out.body(body)?)
    }
}

fn time_of(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // A failed draw leaves zeros, which the exporter would send as an invalid id: retry once.
    if getrandom::fill(&mut b).is_err() {
        let _ = getrandom::fill(&mut b);
    }
    b
}

/// One tree as the spans carry it.
#[derive(Clone, Debug, Default)]
struct TreeSeen {
    tree: Option<String>,
    trusted: bool,
    skipped: Option<String>,
}

impl TreeSeen {
    fn of(p: &Value) -> TreeSeen {
        TreeSeen {
            tree: p.get("tree").and_then(Value::as_str).map(str::to_owned),
            trusted: p.get("trusted").and_then(Value::as_bool).unwrap_or(false),
            skipped: p.get("skipped").and_then(|s| match s {
                Value::String(s) => Some(s.clone()),
                Value::Null => None,
                other => Some(other.to_string()),
            }),
        }
    }
}

/// A tool call being followed.
#[derive(Debug)]
struct Call {
    id: String,
    name: String,
    start: i64,
    end: Option<i64>,
    tree: Option<TreeSeen>,
}

/// What a turn's events say: its tool calls and trees.
#[derive(Default)]
struct Seen {
    calls: Vec<Call>,
    tree_start: Option<String>,
    tree_end: Option<String>,
    all_trusted: bool,
    any_tree: bool,
    skipped: Option<String>,
}

impl Seen {
    /// Reads the stored events (`kind`, `payload`, `created_at`) in order.
    fn of(events: &[(String, Value, i64)]) -> Seen {
        let mut seen = Seen {
            all_trusted: true,
            ..Seen::default()
        };
        // The tree as it stands after each event (none until the start tree).
        let mut current: Option<TreeSeen> = None;
        for (kind, p, at) in events {
            let s = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
            match kind.as_str() {
                "tool_call" => seen.calls.push(Call {
                    id: s("tool_use_id").unwrap_or_default(),
                    name: s("name").unwrap_or_default(),
                    start: *at,
                    end: None,
                    tree: None,
                }),
                "tool_result" => {
                    if let Some(c) = seen.call(s("tool_use_id")) {
                        c.end.get_or_insert(*at);
                        c.tree = current.clone();
                    }
                }
                "tree" => {
                    let tree = TreeSeen::of(p);
                    seen.any_tree = true;
                    seen.all_trusted &= tree.trusted;
                    if tree.skipped.is_some() {
                        seen.skipped = tree.skipped.clone();
                    }
                    match s("phase").as_deref() {
                        Some("start") => seen.tree_start = tree.tree.clone(),
                        Some("end") => seen.tree_end = tree.tree.clone(),
                        _ => {}
                    }
                    if let Some(c) = seen.call(s("tool_use_id")) {
                        c.tree = Some(tree.clone());
                    }
                    current = Some(tree);
                }
                _ => {}
            }
        }
        seen
    }

    /// The newest call with this id.
    fn call(&mut self, id: Option<String>) -> Option<&mut Call> {
        let id = id?;
        self.calls.iter_mut().rev().find(|c| c.id == id)
    }

    /// A one-shot turn's trees, which are on its record (`git_trees`), not in events.
    fn add_record_trees(&mut self, g: &Value) {
        let t = |k: &str| {
            g.get(k)
                .and_then(|x| x.get("tree"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        self.tree_start = self.tree_start.take().or_else(|| t("start"));
        self.tree_end = self.tree_end.take().or_else(|| t("end"));
        self.any_tree = true;
        self.all_trusted = false;
        for k in ["start", "end"] {
            if let Some(s) = g
                .get(k)
                .and_then(|x| x.get("skipped"))
                .and_then(Value::as_str)
            {
                self.skipped = Some(s.to_owned());
            }
        }
    }

    fn turn_attributes(
        &self,
        run: &Run,
        turn: &hangar_store::Turn,
        session: &hangar_store::Session,
    ) -> Vec<KeyValue> {
        let mut attrs = vec![
            KeyValue::new("hangar.run.id", run.id.clone()),
            KeyValue::new("hangar.turn.id", turn.id.clone()),
            KeyValue::new("hangar.session.id", session.id.clone()),
            KeyValue::new("hangar.harness", session.harness.as_str().to_owned()),
            KeyValue::new("hangar.git.tree.trusted", self.any_tree && self.all_trusted),
        ];
        if let Some(st) = turn.status {
            attrs.push(KeyValue::new("hangar.turn.status", st));
        }
        if let Some(t) = &self.tree_start {
            attrs.push(KeyValue::new("hangar.git.tree.start", t.clone()));
        }
        if let Some(t) = &self.tree_end {
            attrs.push(KeyValue::new("hangar.git.tree.end", t.clone()));
        }
        if let Some(s) = &self.skipped {
            attrs.push(KeyValue::new("hangar.git.tree.skipped", s.clone()));
        }
        attrs
    }
}

impl Call {
    fn attributes(&self) -> Vec<KeyValue> {
        let mut attrs = vec![
            KeyValue::new("hangar.tool.name", self.name.clone()),
            KeyValue::new("hangar.tool_use_id", self.id.clone()),
        ];
        if let Some(t) = &self.tree {
            if let Some(tree) = &t.tree
                && t.skipped.is_none()
            {
                attrs.push(KeyValue::new("hangar.git.tree", tree.clone()));
            }
            attrs.push(KeyValue::new("hangar.git.tree.trusted", t.trusted));
            if let Some(s) = &t.skipped {
                attrs.push(KeyValue::new("hangar.git.tree.skipped", s.clone()));
            }
        }
        attrs
    }
}

/// Makes the spans of one trace.
struct Spans {
    trace_id: TraceId,
    scope: InstrumentationScope,
}

impl Spans {
    fn span(
        &self,
        (id, parent): (SpanId, SpanId),
        name: &'static str,
        (from, to): (i64, i64),
        attributes: Vec<KeyValue>,
    ) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                self.trace_id,
                id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: time_of(from),
            end_time: time_of(to.max(from)),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: self.scope.clone(),
        }
    }
}

/// The spans of one ended turn, built from its stored events (`kind`, `payload`,
/// `created_at`) and its record.
pub(crate) fn turn_spans(
    run: &Run,
    turn: &hangar_store::Turn,
    session: &hangar_store::Session,
    events: &[(String, Value, i64)],
) -> Vec<SpanData> {
    let make = Spans {
        trace_id: TraceId::from_bytes(random::<16>()),
        scope: InstrumentationScope::builder("hangar")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    };
    let turn_span = SpanId::from_bytes(random::<8>());
    let first = events.first().map_or(turn.created_at, |e| e.2);
    let last = events.last().map_or(first, |e| e.2);
    let start = turn.started_at.unwrap_or(first).min(first);
    let end = turn.ended_at.unwrap_or(last).max(last);
    let mut seen = Seen::of(events);
    if let Some(g) = &turn.git_trees {
        seen.add_record_trees(g);
    }
    let mut spans: Vec<SpanData> = seen
        .calls
        .iter()
        .map(|c| {
            make.span(
                (SpanId::from_bytes(random::<8>()), turn_span),
                "hangar.tool_call",
                (c.start, c.end.unwrap_or(end)),
                c.attributes(),
            )
        })
        .collect();
    spans.push(make.span(
        (turn_span, SpanId::INVALID),
        "hangar.turn",
        (start, end),
        seen.turn_attributes(run, turn, session),
    ));
    spans
}

impl Steps {
    /// Exports the ended run's turn as a trace, when traces are configured.
    pub(crate) async fn export_turn_trace(&self, run_id: &str) {
        let Some(exporter) = &self.traces.exporter else {
            return;
        };
        let spans = match self.spans_of(run_id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "cannot build the turn's trace");
                return;
            }
        };
        let result = exporter.lock().await.export(spans).await;
        if let Err(e) = result {
            tracing::warn!(run = %run_id, error = %e, "cannot export the turn's trace");
        }
    }

    async fn spans_of(&self, run_id: &str) -> Result<Vec<SpanData>, crate::ControlError> {
        let run = self.store.run(run_id).await?;
        let turn = self.store.turn(&run.turn_id).await?;
        let session = self.store.session(&turn.session_id).await?;
        let mut events = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .store
                .events_after(EventScope::Run(run_id), after, hangar_store::MAX_PAGE)
                .await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            events.extend(page.into_iter().map(|e| (e.kind, e.payload, e.created_at)));
        }
        Ok(turn_spans(&run, &turn, &session, &events))
    }
}
