//! The OpenAPI document of the API, generated from the endpoint table below and the JSON
//! Schemas derived from `hangar-api`'s types (each request and response body is one of them; the
//! named ones are `components/schemas`). A test checks that the table lists exactly the routes
//! the router serves (`routes::routes`) and that `docs/openapi.json` in the repository is what
//! this module generates (regenerate it with
//! `HANGAR_WRITE_OPENAPI=1 cargo test -p hangar-server openapi`).

use hangar_api as api;
use hangar_api::schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

/// A body's schema, from the generator that collects the named ones.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T` (a `$ref` to `#/components/schemas/T` for a named type).
pub fn of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// One documented endpoint.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    /// JSON Schema of the request body, if it takes one.
    pub request: Option<SchemaFn>,
    /// JSON Schema of the success response (of one event when `stream`).
    pub response: SchemaFn,
    pub stream: bool,
    /// Success status.
    pub status: u16,
}

fn string() -> Value {
    json!({"type": "string"})
}

/// Routes served without a token.
const PUBLIC: &[&str] = &[
    "/v1/health",
    "/v1/ready",
    "/.well-known/jwks.json",
    "/v1/openapi.json",
    // Signing in is how a person gets a token.
    "/v1/auth",
    "/v1/auth/oidc/start",
    "/v1/auth/oidc/finish",
    "/v1/auth/device",
    "/v1/auth/device/poll",
];
/// One documented JSON endpoint.
pub(crate) fn e(
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    request: Option<SchemaFn>,
    response: SchemaFn,
    status: u16,
) -> Endpoint {
    Endpoint {
        method,
        path,
        summary,
        request,
        response,
        stream: false,
        status,
    }
}

/// Every documented endpoint: the route table `routes::routes` must serve exactly these.
pub fn endpoints() -> Vec<Endpoint> {
    let mut list = service_endpoints();
    list.extend(session_endpoints());
    list.extend(run_endpoints());
    list.extend(record_endpoints());
    list.extend(stream_endpoints());
    list.extend(crate::sandboxes::endpoints());
    list.extend(crate::people::endpoints());
    list.extend(crate::oidc::routes::endpoints());
    list
}

/// The server itself, served without a token.
fn service_endpoints() -> Vec<Endpoint> {
    vec![
        e(
            "GET",
            "/v1/health",
            "Whether the server is up (no token needed)",
            None,
            of::<api::Health>,
            200,
        ),
        e(
            "GET",
            "/v1/ready",
            "Whether the server can serve: its database answers (no token needed; 503 when not)",
            None,
            of::<api::Ready>,
            200,
        ),
        e(
            "GET",
            "/.well-known/jwks.json",
            "The public keys of hangar's passport signing key, for Tower (no token needed)",
            None,
            of::<api::Jwks>,
            200,
        ),
        e(
            "GET",
            "/v1/openapi.json",
            "This document (no token needed)",
            None,
            of::<Map<String, Value>>,
            200,
        ),
    ]
}

/// Sessions and their turns.
fn session_endpoints() -> Vec<Endpoint> {
    vec![
        e(
            "GET",
            "/v1/sessions",
            "All sessions",
            None,
            of::<api::Sessions>,
            200,
        ),
        e(
            "POST",
            "/v1/sessions",
            "Start a session, with its first turn: in a sandbox, else one of an environment made with a copy of `dir`, else the in-place local sandbox on `dir` (a plain folder, `no_sandbox`, only where the server allows it; hangar's home, a folder above it or inside it is refused); an environment's `governance.policy` is the floor of its sessions' policy",
            Some(of::<api::StartSession>),
            of::<api::Started>,
            201,
        ),
        e(
            "GET",
            "/v1/sessions/{id}",
            "A session and its turns",
            None,
            of::<api::SessionTurns>,
            200,
        ),
        e(
            "POST",
            "/v1/sessions/{id}/messages",
            "A message: steers the running turn, or starts the next one",
            Some(of::<api::Text>),
            of::<api::CommandReply>,
            200,
        ),
        e(
            "GET",
            "/v1/sessions/{id}/transcript",
            "The session's conversation",
            None,
            of::<api::Transcript>,
            200,
        ),
        e(
            "GET",
            "/v1/sessions/{id}/events",
            "The session's events after a cursor (`after`, `limit`)",
            None,
            of::<api::Events>,
            200,
        ),
        e(
            "GET",
            "/v1/turns/{id}",
            "A turn, with its manifest",
            None,
            of::<api::Turn>,
            200,
        ),
    ]
}

/// Runs: commands, approvals, events, steps and forks.
fn run_endpoints() -> Vec<Endpoint> {
    vec![
        e("GET", "/v1/runs/{id}", "A run", None, of::<api::Run>, 200),
        e(
            "POST",
            "/v1/runs/{id}/steer",
            "A steer into the run (`next_turn=false`: 409 if the turn has ended)",
            Some(of::<api::Text>),
            of::<api::CommandReply>,
            200,
        ),
        e(
            "POST",
            "/v1/runs/{id}/interrupt",
            "Interrupt the run's turn",
            None,
            of::<api::CommandReply>,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/approvals",
            "Permission requests waiting for an answer",
            None,
            of::<api::Approvals>,
            200,
        ),
        e(
            "GET",
            "/v1/approvals",
            "Permission requests waiting for an answer, across every live run, oldest first",
            None,
            of::<api::PendingApprovals>,
            200,
        ),
        e(
            "POST",
            "/v1/runs/{id}/approvals/{request_id}",
            "Answer a permission request",
            Some(of::<api::Answer>),
            of::<api::CommandReply>,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/events",
            "The run's events after a cursor (`after`, `limit`)",
            None,
            of::<api::Events>,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/log",
            "Complete run-log lines from a byte offset (`offset`, `max`)",
            None,
            of::<api::LogPage>,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/steps",
            "The run's steps: each tree the driver recorded, numbered from 0",
            None,
            of::<api::Steps>,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/diff",
            "What changed from step `from` to step `to` (files with lines added and deleted, and git's patch)",
            None,
            of::<api::Diff>,
            200,
        ),
        e(
            "POST",
            "/v1/runs/{id}/fork",
            "Fork the run at a step: a new sandbox with exactly that step's tree (rebuilt, hashed again, refused on a mismatch) and a new session whose conversation is the source's up to that step (or as near as the harness allows: `fork.conversation`)",
            Some(of::<api::ForkRequest>),
            of::<api::Forked>,
            201,
        ),
        e(
            "GET",
            "/v1/runs/{id}/forks",
            "The forks made from the run's steps",
            None,
            of::<api::Forks>,
            200,
        ),
    ]
}

/// Credentials, the audit log, who is asking, the board.
fn record_endpoints() -> Vec<Endpoint> {
    vec![
        e(
            "GET",
            "/v1/credentials",
            "Credential names (never values): the server's (admins), `?person=EMAIL`'s (that person or an admin) or `?environment=NAME`'s (admins); a refusal is 403, audited",
            None,
            of::<api::CredentialNames>,
            200,
        ),
        e(
            "POST",
            "/v1/credentials/{name}",
            "Set a credential (sealed in the vault): the server's (admins only), `?person=EMAIL`'s (that person or an admin; handed to their turns) or `?environment=NAME`'s (admins; handed to its sandboxes' turns); names starting with `hangar.` are refused (403): they are set on the server's machine with `hangar credential set`",
            Some(of::<api::CredentialValue>),
            of::<api::CredentialSet>,
            200,
        ),
        e(
            "DELETE",
            "/v1/credentials/{name}",
            "Remove a credential, of the same owners as setting one; names starting with `hangar.` are refused (403)",
            None,
            of::<api::CredentialRemoved>,
            200,
        ),
        e(
            "GET",
            "/v1/audit",
            "Audit records after a sequence number (`after`, `limit`)",
            None,
            of::<api::AuditRecords>,
            200,
        ),
        e(
            "GET",
            "/v1/audit/verify",
            "Check the audit log's hash chain",
            None,
            of::<api::AuditVerify>,
            200,
        ),
        e(
            "GET",
            "/v1/me",
            "The person the token belongs to",
            None,
            of::<api::Me>,
            200,
        ),
        e(
            "GET",
            "/v1/ids/{prefix}",
            "The run, session, turn or sandbox a prefix of its id names (with or without `run-`, `ses-`, `turn-`, `sb-`) among those the caller may read, and its shortest unique prefix. Every path under /v1/runs, /v1/sessions, /v1/turns and /v1/sandboxes takes such a prefix too, and a request id under /v1/runs/{id}/approvals/ a prefix within its run (400 when it starts more than one id).",
            None,
            of::<api::IdInfo>,
            200,
        ),
        e(
            "GET",
            "/v1/board",
            "Sessions with a permission request waiting first, then the newest, each with its sandbox, person, turns (no manifests), phase, waiting count, tokens, cost and fork record (`session`, `limit`)",
            None,
            of::<api::Board>,
            200,
        ),
        e(
            "GET",
            "/v1/turns/{id}/audit",
            "The audit records about one turn (its run's commands, answers, key)",
            None,
            of::<api::TurnAudit>,
            200,
        ),
    ]
}

/// The live event streams (SSE).
fn stream_endpoints() -> Vec<Endpoint> {
    let mut list = Vec::new();
    for path in [
        "/v1/sessions/{id}/events/stream",
        "/v1/runs/{id}/events/stream",
    ] {
        list.push(Endpoint {
            method: "GET",
            path,
            summary: "Live events (SSE), resuming from Last-Event-ID",
            request: None,
            response: of::<api::StreamEvent>,
            stream: true,
            status: 200,
        });
    }
    list
}

/// The query parameters a route reads: (name, required, schema, what it means). Kept beside the
/// route table so the document says what the handlers' query structs accept.
fn query(method: &str, path: &str) -> Vec<(&'static str, bool, Value, &'static str)> {
    // The bounds are the handlers' own: a value outside them is refused with 400.
    let int = |min: u64, max: u64| json!({"type": "integer", "minimum": min, "maximum": max});
    let page = || {
        vec![
            (
                "after",
                false,
                int(0, i64::MAX as u64),
                "only events with a larger id",
            ),
            ("limit", false, int(1, i64::MAX as u64), "at most this many"),
        ]
    };
    match (method, path) {
        ("GET", "/v1/runs/{id}/diff") => vec![
            ("from", true, int(0, u64::MAX), "the step to compare from"),
            ("to", true, int(0, u64::MAX), "the step to compare to"),
        ],
        ("POST", "/v1/runs/{id}/steer") => vec![(
            "next_turn",
            false,
            json!({"type": "boolean", "default": true}),
            "false: a steer to an ended turn is answered 409 instead of starting the next turn",
        )],
        ("GET", "/v1/sessions/{id}/events" | "/v1/runs/{id}/events" | "/v1/audit") => page(),
        ("GET", "/v1/sessions/{id}/events/stream" | "/v1/runs/{id}/events/stream") => {
            page().into_iter().take(1).collect()
        }
        ("GET", "/v1/runs/{id}/log") => vec![
            (
                "offset",
                false,
                int(0, u64::MAX),
                "the byte offset to read from",
            ),
            ("max", false, int(0, u64::MAX), "at most this many bytes"),
        ],
        ("DELETE", "/v1/sandboxes/{id}") => vec![
            (
                "keep_logs",
                false,
                json!({"type": "boolean", "default": false}),
                "keep the sandbox's run logs",
            ),
            (
                "force",
                false,
                json!({"type": "boolean", "default": false}),
                "remove it even while a turn runs",
            ),
        ],
        (_, "/v1/credentials" | "/v1/credentials/{name}") => vec![
            (
                "person",
                false,
                string(),
                "a person's credential (that person or an admin); neither this nor environment: the server's (admins)",
            ),
            (
                "environment",
                false,
                string(),
                "an environment's credential (admins)",
            ),
        ],
        ("GET", "/v1/board") => vec![
            ("session", false, string(), "only this session"),
            (
                "limit",
                false,
                int(1, u64::MAX),
                "at most this many sessions (1000 at most are sent)",
            ),
        ],
        _ => Vec::new(),
    }
}

/// A path parameter's schema: the names the handlers accept, where they check a form.
fn path_param(path: &str, name: &str) -> Value {
    match (path, name) {
        (p, "name") if p.starts_with("/v1/credentials/") => {
            json!({"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,128}$"})
        }
        ("/v1/people/{email}", "email") => {
            json!({"type": "string", "pattern": "^[^@\\s/\\u0000-\\u001f\\u007f-\\u009f]+@[^@\\s/\\u0000-\\u001f\\u007f-\\u009f]+$"})
        }
        (p, "name") if p.starts_with("/v1/environments/") => {
            json!({"type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{0,62}$"})
        }
        _ => string(),
    }
}

/// The OpenAPI 3.1 document.
pub fn openapi() -> Value {
    let mut g = hangar_api::generator();
    let error = of::<api::ErrorBody>(&mut g);
    let mut paths = Map::new();
    for e in endpoints() {
        let mut params: Vec<Value> = e
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": path_param(e.path, name)}))
            .collect();
        params.extend(query(e.method, e.path).into_iter().map(
            |(name, required, schema, description)| {
                json!({"name": name, "in": "query", "required": required, "schema": schema, "description": description})
            },
        ));
        let media = if e.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut op = json!({
            "summary": e.summary,
            "responses": {
                e.status.to_string(): {"description": "success", "content": {media: {"schema": (e.response)(&mut g)}}},
                "default": {"description": "an error a person can act on", "content": {"application/json": {"schema": error}}},
            },
        });
        // A second success: an environment applied again is replaced (200), not created (201).
        if (e.method, e.path) == ("POST", "/v1/environments") {
            op["responses"]["200"] = json!({"description": "replaced", "content": {media: {"schema": (e.response)(&mut g)}}});
        }
        if !PUBLIC.contains(&e.path) {
            op["security"] = json!([{"bearer": []}]);
        }
        if !params.is_empty() {
            op["parameters"] = Value::Array(params);
        }
        if let Some(req) = e.request {
            // An attach takes its body only for a relayed terminal's size and type.
            let required = (e.method, e.path) != ("POST", "/v1/sandboxes/{id}/attach");
            op["requestBody"] = json!({"required": required, "content": {"application/json": {"schema": req(&mut g)}}});
        }
        let entry = paths.entry(e.path.to_owned()).or_insert_with(|| json!({}));
        entry[e.method.to_lowercase()] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "hangar", "version": env!("CARGO_PKG_VERSION"), "description": "hangar serve's HTTP API. Every route but /v1/health, /v1/openapi.json and /.well-known/jwks.json needs `Authorization: Bearer <token>`. Errors are `{\"error\":{\"code\",\"message\"}}`."},
        "paths": Value::Object(paths),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "a token from `hangar token create --person EMAIL`"}},
            "schemas": g.take_definitions(true),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_document_lists_exactly_the_routes_served() {
        let served: BTreeSet<(String, String)> = crate::routes::routes()
            .into_iter()
            .map(|(m, p, _)| (m.to_owned(), p.to_owned()))
            .collect();
        let documented: BTreeSet<(String, String)> = endpoints()
            .into_iter()
            .map(|e| (e.method.to_owned(), e.path.to_owned()))
            .collect();
        assert_eq!(
            served, documented,
            "a route is served but not documented, or the other way round"
        );
    }

    /// `path` (from the repository's root) holds `generated`; written first when
    /// `HANGAR_WRITE_OPENAPI` is set.
    fn file_is(path: &str, generated: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path);
        if std::env::var_os("HANGAR_WRITE_OPENAPI").is_some() {
            std::fs::write(&path, generated).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} is out of date with the code (hangar-api's types): run `HANGAR_WRITE_OPENAPI=1 cargo test -p hangar-server openapi` and commit it",
            path.display()
        );
    }

    #[test]
    fn openapi_typedefs_of_the_web_page_are_current() {
        file_is(
            "crates/hangar-server/web/api.d.ts",
            &crate::typedefs::typescript(&openapi()),
        );
    }

    #[test]
    fn openapi_file_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
        let mut generated = serde_json::to_string_pretty(&openapi()).unwrap();
        generated.push('\n');
        if std::env::var_os("HANGAR_WRITE_OPENAPI").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/openapi.json is out of date with the code: run `HANGAR_WRITE_OPENAPI=1 cargo test -p hangar-server openapi` and commit it"
        );
    }
}
