//! Every JSON answer an end-to-end test receives from a real `hangar serve` is checked against
//! its endpoint's schema in the OpenAPI document that server serves (`GET /v1/openapi.json`,
//! made from hangar-api's types): a field the server answers otherwise than the document says
//! fails the test that received it, with the path, the status and what does not match.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers"
)]

use serde_json::Value;

/// The served document (every server of a test run is the same binary: fetched once).
static DOC: std::sync::OnceLock<Value> = std::sync::OnceLock::new();

async fn document(base: &str) -> &'static Value {
    if let Some(d) = DOC.get() {
        return d;
    }
    let doc: Value = reqwest::get(format!("{base}/v1/openapi.json"))
        .await
        .expect("the server serves /v1/openapi.json")
        .json()
        .await
        .expect("/v1/openapi.json is JSON");
    DOC.get_or_init(|| doc)
}

/// The document's path template that `path` (no query) is, the most literal one first.
fn template<'d>(doc: &'d Value, method: &str, path: &str) -> Option<&'d Value> {
    let segs: Vec<&str> = path.split('/').collect();
    let paths = doc["paths"].as_object()?;
    paths
        .iter()
        .filter_map(|(tpl, ops)| {
            let t: Vec<&str> = tpl.split('/').collect();
            if t.len() != segs.len() {
                return None;
            }
            let mut literal = 0;
            for (a, b) in t.iter().zip(&segs) {
                if a.starts_with('{') && a.ends_with('}') && !b.is_empty() {
                    continue;
                }
                if a != b {
                    return None;
                }
                literal += 1;
            }
            Some((literal, ops.get(method.to_lowercase())?))
        })
        .max_by_key(|(literal, _)| *literal)
        .map(|(_, op)| op)
}

/// What is wrong with `body` as the answer (`status`) to `method path`, by the document `doc`;
/// none when it holds. An answer that is not JSON (a stream) is not checked here.
pub fn mismatch(
    doc: &Value,
    method: &str,
    path: &str,
    status: u16,
    body: &Value,
) -> Option<String> {
    let path = path.split('?').next().unwrap_or(path);
    let Some(op) = template(doc, method, path) else {
        return Some(format!(
            "{method} {path} is not in the served OpenAPI document"
        ));
    };
    let responses = &op["responses"];
    let response = responses
        .get(status.to_string())
        .or_else(|| responses.get("default"));
    let Some(response) = response else {
        return Some(format!(
            "{method} {path} answered {status}, which the document does not list"
        ));
    };
    // No JSON body documented (a stream): nothing to check here.
    let schema = response.pointer("/content/application~1json/schema")?;
    // The schema with the document's components beside it, so its `#/components/...` resolve.
    let mut root = serde_json::json!({"allOf": [schema], "components": doc["components"]});
    root["$schema"] = "https://json-schema.org/draft/2020-12/schema".into();
    let validator = jsonschema::draft202012::new(&root).expect("the document's schemas compile");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("at {}: {e}", e.instance_path()))
        .collect();
    (!errors.is_empty()).then(|| {
        format!(
            "{method} {path} answered {status} otherwise than the served OpenAPI document says:\n  {}\nthe answer: {body}",
            errors.join("\n  ")
        )
    })
}

/// Checks a real answer, failing the test when it does not hold to the served document.
pub async fn check(base: &str, method: &str, path: &str, status: u16, body: &Value) {
    let doc = document(base).await;
    if let Some(why) = mismatch(doc, method, path, status, body) {
        panic!("{why}");
    }
}
