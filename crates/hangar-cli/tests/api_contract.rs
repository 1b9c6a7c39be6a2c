//! The API holds to the OpenAPI document it serves (`GET /v1/openapi.json`), checked by
//! schemathesis (a property-based OpenAPI tester from PyPI, installed by `scripts/install-tools`
//! into `.tools/py`; `HANGAR_SCHEMATHESIS_BIN` names another) against a real `hangar serve` on
//! 127.0.0.1 with every check it has: no server error, every status, content type, header and
//! body as documented, schema-invalid requests rejected, and the framework's own rejections
//! (a body that is not JSON, a bad query) answered with the documented JSON error.
//!
//! The server has one real session of its own first (a turn of the real Claude Code against
//! the scripted model), so the routes that read runs, steps and events have something to read;
//! the requests schemathesis makes up name ids that do not exist, folders that are not there and
//! environments that do not validate, so they start no agent.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::Server;
use hangar_testkit::{Script, Step, workspace_root};
use serde_json::{Value, json};

fn schemathesis() -> PathBuf {
    let bin = std::env::var_os("HANGAR_SCHEMATHESIS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/py/bin/st"));
    assert!(
        bin.is_file(),
        "{} is missing: run scripts/install-tools (installs schemathesis from PyPI into .tools/py) or set HANGAR_SCHEMATHESIS_BIN",
        bin.display()
    );
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_openapi_holds_against_the_real_server() {
    let s = Server::start(Script::new([Step::text("hello")]));
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "a repo\n").unwrap();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": repo.path(), "policy": "auto", "prompt": "hi"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");

    // The document is served without a token, and is the one in the repository.
    let doc: Value = reqwest::get(format!("{}/v1/openapi.json", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/v1/runs/{id}/diff"]["get"]["parameters"].is_array());

    // A person and a token of theirs for the removal and revocation requests to act on (each
    // works once, then answers 404 or 409): made-up ones would only ever be 404, and the ones
    // schemathesis reads from the lists include the test's own token and person.
    let made = s.ok(&["token", "create", "--person", "contract@example.com"]);
    let contract_token_id = made.lines().next().unwrap().strip_prefix("id: ").unwrap();
    let config = workspace_root().join("crates/hangar-cli/tests/api_contract.toml");
    let report = tempfile::tempdir().unwrap();
    let out = Command::new(schemathesis())
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{}/v1/openapi.json", s.url)])
        .args(["--header", &format!("Authorization: Bearer {}", s.token())])
        .args(["--checks", "all", "--workers", "1", "--max-examples", "25"])
        .args(["--phases", "examples,coverage,fuzzing"])
        // The live streams (events, an attach's output) end only when their run does, so a
        // request on a real one would wait for the timeout every time; their answers' shape is
        // checked by the tests that follow them (sse.rs, the attach tests).
        .args(["--exclude-path-regex", "/events/stream$|/output$"])
        .args(["--request-timeout", "15", "--no-color"])
        .env(
            "HANGAR_CONTRACT_RUN",
            started["run"]["id"].as_str().unwrap(),
        )
        .env(
            "HANGAR_CONTRACT_SESSION",
            started["session"]["id"].as_str().unwrap(),
        )
        .env("HANGAR_CONTRACT_PERSON", "contract@example.com")
        .env("HANGAR_CONTRACT_TOKEN", contract_token_id)
        .env(
            "HANGAR_CONTRACT_TURN",
            started["turn"]["id"].as_str().unwrap(),
        )
        .current_dir(report.path())
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(
        out.status.success(),
        "schemathesis found the API answering otherwise than its document says:\n{text}"
    );
    // "  1720 generated, 1720 passed, 52 skipped": it did test.
    let generated: u64 = text
        .lines()
        .find_map(|l| l.trim().split_once(" generated, "))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(0);
    assert!(generated >= 500, "schemathesis tested too little:\n{text}");
    // Its token still works: no request it made (people, tokens) revoked it, so every answer
    // above came from a signed-in caller, not a run of 401s.
    let (status, me) = s.call("GET", "/v1/me", None).await;
    assert_eq!(status, 200, "the test's own token stopped working: {me}");
}
