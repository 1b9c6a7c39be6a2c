//! The OpenAPI document of the API, generated from the endpoint table below. A test checks that
//! the table lists exactly the routes the router serves (`routes::routes`) and that
//! `docs/openapi.json` in the repository is what this module generates (regenerate it with
//! `HANGAR_WRITE_OPENAPI=1 cargo test -p hangar-server openapi`).

use serde_json::{Map, Value, json};

/// One documented endpoint.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    /// JSON Schema of the request body, if it takes one.
    pub request: Option<fn() -> Value>,
    /// JSON Schema of the success response (`text/event-stream` when `stream`).
    pub response: fn() -> Value,
    pub stream: bool,
    /// Success status.
    pub status: u16,
}

fn obj(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required})
}
fn any_obj() -> Value {
    json!({"type": "object"})
}
fn string() -> Value {
    json!({"type": "string"})
}
/// A field a request may also give as `null` (the same as leaving it out).
pub(crate) fn opt_string() -> Value {
    json!({"type": ["string", "null"]})
}
fn session() -> Value {
    json!({"$ref": "#/components/schemas/Session"})
}
fn turn() -> Value {
    json!({"$ref": "#/components/schemas/Turn"})
}
fn run() -> Value {
    json!({"$ref": "#/components/schemas/Run"})
}
fn health() -> Value {
    obj(
        json!({"ok": {"type": "boolean"}, "version": string()}),
        &["ok", "version"],
    )
}
fn jwks() -> Value {
    obj(
        json!({"keys": {"type": "array", "items": obj(json!({"kty": string(), "crv": string(), "x": string(), "kid": string(), "alg": string(), "use": string()}), &["kty", "kid"])}}),
        &["keys"],
    )
}
/// Routes served without a token.
const PUBLIC: &[&str] = &["/v1/health", "/.well-known/jwks.json", "/v1/openapi.json"];
fn start_session_req() -> Value {
    obj(
        json!({"dir": opt_string(), "sandbox": opt_string(), "env": opt_string(), "no_sandbox": {"type": "boolean"}, "harness": {"enum": ["claude", "codex"]}, "policy": {"enum": ["ask", "auto", "governed", null]},
               "prompt": {"type": "string", "minLength": 1}, "options": {"$ref": "#/components/schemas/TurnOptions"}}),
        &["prompt"],
    )
}
fn started() -> Value {
    obj(
        json!({"session": session(), "turn": turn(), "run": run()}),
        &["session", "turn", "run"],
    )
}
fn sessions() -> Value {
    obj(
        json!({"sessions": {"type": "array", "items": session()}}),
        &["sessions"],
    )
}
fn session_with_turns() -> Value {
    obj(
        json!({"session": session(), "turns": {"type": "array", "items": turn()}}),
        &["session", "turns"],
    )
}
fn text_req() -> Value {
    obj(
        json!({"text": {"type": "string", "minLength": 1}}),
        &["text"],
    )
}
fn reply() -> Value {
    obj(
        json!({"outcome": {"enum": ["done", "next_turn"]}, "run": string(), "turn": string()}),
        &["outcome"],
    )
}
fn step() -> Value {
    obj(
        json!({"step": {"type": "integer"}, "tree": string(), "tool_use_id": string(),
               "phase": {"enum": ["start", "end"]}, "trusted": {"type": "boolean"},
               "skipped": {}, "event_id": {"type": "integer"}}),
        &["step", "tree", "trusted", "event_id"],
    )
}
fn steps() -> Value {
    obj(
        json!({"run": string(), "steps": {"type": "array", "items": step()}}),
        &["run", "steps"],
    )
}
fn diff() -> Value {
    let file = obj(
        json!({"path": string(), "added": {"type": ["integer", "null"]}, "deleted": {"type": ["integer", "null"]}}),
        &["path", "added", "deleted"],
    );
    obj(
        json!({"from": step(), "to": step(), "files": {"type": "array", "items": file}, "patch": string()}),
        &["from", "to", "files", "patch"],
    )
}
fn transcript() -> Value {
    obj(
        json!({"session": string(), "entries": {"type": "array", "items": any_obj()}}),
        &["session", "entries"],
    )
}
fn approvals() -> Value {
    obj(
        json!({"approvals": {"type": "array", "items": {"$ref": "#/components/schemas/Approval"}}}),
        &["approvals"],
    )
}
fn answer_req() -> Value {
    obj(
        json!({"decision": {"enum": ["allow", "deny"]}, "reason": opt_string(), "input": {"type": ["object", "null"]}}),
        &["decision"],
    )
}
fn events() -> Value {
    obj(
        json!({"events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}}, "next_after": {"type": ["integer", "null"]}}),
        &["events"],
    )
}
fn stream() -> Value {
    obj(
        json!({"id": {"type": "string", "description": "the event id (resume with Last-Event-ID)"}, "event": {"type": "string", "description": "its kind"}, "data": {"type": "string", "description": "its JSON payload"}}),
        &["data"],
    )
}
fn log() -> Value {
    obj(
        json!({"lines": {"type": "array", "items": string()}, "next_offset": {"type": "integer"}, "ended": {"type": "boolean"}, "verified": {"type": "boolean", "description": "the run's log is one the agent could not have written (sealed, and the agent could not learn the run key); when false the assistant's text is not known to be the model's"}, "why": {"type": "string", "description": "why the log is not verified"}}),
        &["lines", "next_offset"],
    )
}
fn names() -> Value {
    obj(
        json!({"credentials": {"type": "array", "items": string()}}),
        &["credentials"],
    )
}
fn value_req() -> Value {
    obj(json!({"value": string()}), &["value"])
}
fn audit() -> Value {
    obj(
        json!({"records": {"type": "array", "items": any_obj()}}),
        &["records"],
    )
}
fn me() -> Value {
    obj(json!({"person": string()}), &["person"])
}
fn board() -> Value {
    let usage = obj(
        json!({"input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}, "cached_input_tokens": {"type": "integer"}}),
        &[],
    );
    let sandbox = obj(
        json!({"id": string(), "environment": string(), "kind": string(), "workdir": string(), "person": string()}),
        &["id", "person"],
    );
    let row = json!({"allOf": [session(), obj(
        json!({"person": {"type": ["string", "null"]}, "sandbox": {"anyOf": [sandbox, {"type": "null"}]},
               "state": {"type": ["string", "null"]}, "usage": usage, "cost_usd": {"type": ["number", "null"]},
               "turns": {"type": "array", "items": turn()},
               "fork": {"type": ["object", "null"], "description": "the fork's record (as in POST /v1/runs/{id}/fork) when the session was made as one"}}),
        &["turns", "usage"],
    )]});
    obj(
        json!({"sessions": {"type": "array", "items": row}}),
        &["sessions"],
    )
}
fn turn_audit() -> Value {
    obj(
        json!({"turn": string(), "records": {"type": "array", "items": any_obj()}}),
        &["turn", "records"],
    )
}
fn verify() -> Value {
    obj(
        json!({"ok": {"type": "boolean"}, "records": {"type": "integer"}, "error": string()}),
        &["ok"],
    )
}

/// The documented endpoints.
pub fn endpoints() -> Vec<Endpoint> {
    let e = |method, path, summary, request, response, status| Endpoint {
        method,
        path,
        summary,
        request,
        response,
        stream: false,
        status,
    };
    let mut list = vec![
        e(
            "GET",
            "/v1/health",
            "Whether the server is up (no token needed)",
            None,
            health,
            200,
        ),
        e(
            "GET",
            "/.well-known/jwks.json",
            "The public keys of hangar's passport signing key, for Tower (no token needed)",
            None,
            jwks,
            200,
        ),
        e(
            "GET",
            "/v1/openapi.json",
            "This document (no token needed)",
            None,
            any_obj,
            200,
        ),
        e("GET", "/v1/sessions", "All sessions", None, sessions, 200),
        e(
            "POST",
            "/v1/sessions",
            "Start a session, with its first turn: in a sandbox, else one of an environment made with a copy of `dir`, else the in-place local sandbox on `dir` (a plain folder, `no_sandbox`, only where the server allows it; hangar's home, a folder above it or inside it is refused); an environment's `governance.policy` is the floor of its sessions' policy",
            Some(start_session_req as fn() -> Value),
            started,
            201,
        ),
        e(
            "GET",
            "/v1/sessions/{id}",
            "A session and its turns",
            None,
            session_with_turns,
            200,
        ),
        e(
            "POST",
            "/v1/sessions/{id}/messages",
            "A message: steers the running turn, or starts the next one",
            Some(text_req),
            reply,
            200,
        ),
        e(
            "GET",
            "/v1/sessions/{id}/transcript",
            "The session's conversation",
            None,
            transcript,
            200,
        ),
        e(
            "GET",
            "/v1/sessions/{id}/events",
            "The session's events after a cursor (`after`, `limit`)",
            None,
            events,
            200,
        ),
        e(
            "GET",
            "/v1/turns/{id}",
            "A turn, with its manifest",
            None,
            turn,
            200,
        ),
        e("GET", "/v1/runs/{id}", "A run", None, run, 200),
        e(
            "POST",
            "/v1/runs/{id}/steer",
            "A steer into the run (`next_turn=false`: 409 if the turn has ended)",
            Some(text_req),
            reply,
            200,
        ),
        e(
            "POST",
            "/v1/runs/{id}/interrupt",
            "Interrupt the run's turn",
            None,
            reply,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/approvals",
            "Permission requests waiting for an answer",
            None,
            approvals,
            200,
        ),
        e(
            "POST",
            "/v1/runs/{id}/approvals/{request_id}",
            "Answer a permission request",
            Some(answer_req),
            reply,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/events",
            "The run's events after a cursor (`after`, `limit`)",
            None,
            events,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/log",
            "Complete run-log lines from a byte offset (`offset`, `max`)",
            None,
            log,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/steps",
            "The run's steps: each tree the driver recorded, numbered from 0",
            None,
            steps,
            200,
        ),
        e(
            "GET",
            "/v1/runs/{id}/diff",
            "What changed from step `from` to step `to` (files with lines added and deleted, and git's patch)",
            None,
            diff,
            200,
        ),
        e(
            "POST",
            "/v1/runs/{id}/fork",
            "Fork the run at a step: a new sandbox with exactly that step's tree (rebuilt, hashed again, refused on a mismatch) and a new session whose conversation is the source's up to that step (or as near as the harness allows: `fork.conversation`)",
            Some(crate::fork::doc_fork_req),
            crate::fork::doc_forked,
            201,
        ),
        e(
            "GET",
            "/v1/runs/{id}/forks",
            "The forks made from the run's steps",
            None,
            crate::fork::doc_forks,
            200,
        ),
        e(
            "GET",
            "/v1/credentials",
            "Credential names (never values)",
            None,
            names,
            200,
        ),
        e(
            "POST",
            "/v1/credentials/{name}",
            "Set a credential (sealed in the vault); names starting with `hangar.` are refused (403): they are set on the server's machine with `hangar credential set`",
            Some(value_req),
            any_obj,
            200,
        ),
        e(
            "DELETE",
            "/v1/credentials/{name}",
            "Remove a credential; names starting with `hangar.` are refused (403)",
            None,
            any_obj,
            200,
        ),
        e(
            "GET",
            "/v1/audit",
            "Audit records after a sequence number (`after`, `limit`)",
            None,
            audit,
            200,
        ),
        e(
            "GET",
            "/v1/audit/verify",
            "Check the audit log's hash chain",
            None,
            verify,
            200,
        ),
        e(
            "GET",
            "/v1/me",
            "The person the token belongs to",
            None,
            me,
            200,
        ),
        e(
            "GET",
            "/v1/board",
            "Sessions, newest first, each with its sandbox, person, turns (no manifests), state, tokens, cost and fork record (`session`, `limit`)",
            None,
            board,
            200,
        ),
        e(
            "GET",
            "/v1/turns/{id}/audit",
            "The audit records about one turn (its run's commands, answers, key)",
            None,
            turn_audit,
            200,
        ),
    ];
    for path in [
        "/v1/sessions/{id}/events/stream",
        "/v1/runs/{id}/events/stream",
    ] {
        list.push(Endpoint {
            method: "GET",
            path,
            summary: "Live events (SSE), resuming from Last-Event-ID",
            request: None,
            response: stream,
            stream: true,
            status: 200,
        });
    }
    list.extend(crate::sandboxes::endpoints());
    list
}

fn components() -> Value {
    json!({
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "a token from `hangar token create --person EMAIL`"}},
        "schemas": {
            "Error": obj(json!({"error": obj(json!({"code": string(), "message": string()}), &["code", "message"])}), &["error"]),
            "TurnOptions": obj(json!({"model": opt_string(), "codex_config": {"type": "array", "items": string()}, "verify": opt_string(),
                                      "max_verify_rounds": {"type": ["integer", "null"], "minimum": 0, "maximum": u32::MAX}, "model_timeout": {"type": ["integer", "null"], "minimum": 0, "maximum": u32::MAX},
                                      "unverified_harness": {"type": "boolean", "description": "run a harness version whose conformance suite has not passed (the manifest records it)"}}), &[]),
            "Session": obj(json!({"id": string(), "sandbox_id": string(), "harness": string(), "policy": string(),
                                  "harness_session_id": {"type": ["string", "null"]}, "options": any_obj(), "turn_count": {"type": "integer"}, "created_at": {"type": "integer"}}),
                           &["id", "harness", "policy"]),
            "Turn": obj(json!({"id": string(), "session_id": string(), "index": {"type": "integer"}, "run_id": {"type": ["string", "null"]},
                               "state": {"enum": ["queued", "running", "ended", "refused"]}, "status": {"type": ["integer", "null"]},
                               "prompt": string(), "manifest": {"type": ["object", "null"]}, "verify_state": {"type": ["string", "null"]},
                               "usage": any_obj(), "cost_usd": {"type": ["number", "null"]},
                               "git_trees": {"type": ["object", "null"], "description": "a one-shot turn's start and end trees (S29): {start, end, trusted: false}; null for turns the driver ran (their trees are `tree` events)"}}),
                        &["id", "session_id", "state"]),
            "Run": obj(json!({"id": string(), "turn_id": string(), "state": {"enum": ["live", "ended"]}, "log_cursor": {"type": "integer"},
                              "driver_pid": {"type": ["integer", "null"]}, "has_key": {"type": "boolean"},
                              "log": {"type": ["object", "null"], "description": "how the run's log is read: `sealed` (only what the driver's seals cover is taken), `trusted` (the agent could not have written it; when false the assistant's text is marked unverified), `why` (when not trusted); null until the watcher has started on it"}}),
                       &["id", "turn_id", "state"]),
            "Approval": obj(json!({"run_id": string(), "request_id": string(), "tool_name": string(), "input": any_obj(),
                                   "decision": {"type": ["string", "null"]}, "answered_by": {"type": ["string", "null"]}}),
                            &["run_id", "request_id", "tool_name", "input"]),
            "Event": obj(json!({"id": {"type": "integer"}, "session_id": string(), "run_id": {"type": ["string", "null"]}, "kind": string(), "payload": any_obj()}),
                         &["id", "kind", "payload"]),
        }
    })
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
        (p, "name") if p.starts_with("/v1/environments/") => {
            json!({"type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{0,62}$"})
        }
        _ => string(),
    }
}

/// The OpenAPI 3.1 document.
pub fn openapi() -> Value {
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
                e.status.to_string(): {"description": "success", "content": {media: {"schema": (e.response)()}}},
                "default": {"description": "an error a person can act on", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
            },
        });
        // A second success: an environment applied again is replaced (200), not created (201).
        if (e.method, e.path) == ("POST", "/v1/environments") {
            op["responses"]["200"] =
                json!({"description": "replaced", "content": {media: {"schema": (e.response)()}}});
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
            op["requestBody"] =
                json!({"required": required, "content": {"application/json": {"schema": req()}}});
        }
        let entry = paths.entry(e.path.to_owned()).or_insert_with(|| json!({}));
        entry[e.method.to_lowercase()] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "hangar", "version": env!("CARGO_PKG_VERSION"), "description": "hangar serve's HTTP API. Every route but /v1/health, /v1/openapi.json and /.well-known/jwks.json needs `Authorization: Bearer <token>`. Errors are `{\"error\":{\"code\",\"message\"}}`."},
        "paths": Value::Object(paths),
        "components": components(),
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
