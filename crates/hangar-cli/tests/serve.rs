//! `hangar serve` end to end: tokens, the API, SSE resume, a clean stop on SIGTERM, a database
//! written by a newer hangar refused, and `kill -9`
//! of the server at points of a real Claude Code turn (an approval pending; a steer just answered
//! while the model streams): the restarted server re-attaches, the turn completes, and the stored
//! events equal a rebuild from the run log (no loss, no duplicates). Replicas on one PostgreSQL:
//! a stream on the other replica, and two replicas that share no disk (separate homes in
//! separate mount namespaces, a docker sandbox reached over the Engine API) passing commands on
//! and carrying a turn past a `kill -9`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

#[path = "common/answers.rs"]
mod answers;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env, workspace_root};
use serde_json::{Value, json};

fn driver_bin() -> PathBuf {
    std::env::var_os("HANGAR_DRIVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver"))
}

struct Server {
    /// `HANGAR_DATABASE_URL` (a schema of its own on the test PostgreSQL), or the default SQLite.
    database: Option<PgSchema>,
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: FakeAnthropic,
    child: Option<Child>,
    url: String,
    token: String,
    /// More variables for every `hangar` it runs.
    env: Vec<(String, String)>,
}

/// A schema of its own on the test PostgreSQL (`HANGAR_TEST_DATABASE_URL`), dropped at the end.
struct PgSchema {
    base: String,
    schema: String,
}

impl PgSchema {
    fn new() -> PgSchema {
        let base = std::env::var("HANGAR_TEST_DATABASE_URL").unwrap_or_else(|_| {
            panic!(
                "HANGAR_TEST_DATABASE_URL is not set: the PostgreSQL runs of `hangar serve` never \
                 skip. Start the test database with `url=$(scripts/start-postgres) && export \"$url\"`."
            )
        });
        let schema = format!("serve_{}", std::process::id()) + &format!("_{}", rand_suffix());
        psql(&base, &format!("CREATE SCHEMA {schema}"));
        PgSchema { base, schema }
    }

    fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!(
            "{}{sep}options=-c%20search_path%3D{}",
            self.base, self.schema
        )
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        psql(
            &self.base,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
        );
    }
}

fn rand_suffix() -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn psql(url: &str, sql: &str) {
    let out = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qc", sql])
        .output()
        .expect("psql (Debian's postgresql-client) runs");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `sql` on the SQLite file `db` with Debian's sqlite3.
fn sqlite3(db: &std::path::Path, sql: &str) {
    let out = Command::new("sqlite3").arg(db).arg(sql).output().unwrap();
    assert!(
        out.status.success(),
        "sqlite3 {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Server {
    fn new(script: Script) -> Server {
        Server::with_database(script, None)
    }

    fn with_database(script: Script, database: Option<PgSchema>) -> Server {
        Server::with_env(script, database, &[])
    }

    /// [`Server::with_database`], every `hangar` it runs with `env` too.
    fn with_env(script: Script, database: Option<PgSchema>, env: &[(&str, &str)]) -> Server {
        let home = tempfile::tempdir().unwrap();
        let mut s = Server {
            database,
            work: tempfile::tempdir().unwrap(),
            fake: FakeAnthropic::start(script).unwrap(),
            home,
            child: None,
            url: String::new(),
            token: String::new(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        // Ada runs plain folders (an admin's, issue 20) and reads the whole audit.
        let made = s
            .hangar()
            .args(["person", "add", "--admin", "ada@example.com"])
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let out = s
            .hangar()
            .args(["token", "create", "--person", "ada@example.com"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        s.token = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap()
            .trim()
            .to_owned();
        s.start();
        s
    }

    fn hangar(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        let config = self.home.path().join("claude-config");
        std::fs::create_dir_all(&config).unwrap();
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HANGAR_HOME", self.home.path().join("hangar"))
            .env("HANGAR_DRIVER_BIN", driver_bin())
            .env("HANGAR_CLAUDE_BIN", claude_bin().unwrap())
            .envs(claude_env(&self.fake.base_url(), &config));
        if let Some(db) = &self.database {
            c.env("HANGAR_DATABASE_URL", db.url());
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// `hangar serve` allowing plain folders: these tests are about the server over one.
    fn start(&mut self) {
        self.start_with(&[], Stdio::null());
    }

    /// [`Server::start`] with more arguments, its log going to `log`.
    fn start_with(&mut self, args: &[&str], log: Stdio) {
        let (child, url) = serve(self.hangar(), args, log);
        self.url = url;
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        let mut c = self.child.take().unwrap();
        unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
        let _ = c.wait();
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let client = reqwest::Client::new();
        let mut req = client
            .request(method.parse().unwrap(), format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        answers::check(&self.url, method, path, status, &body).await;
        (status, body)
    }

    async fn until<T>(&self, what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = f().await {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn turn_ended(&self, turn: &str) -> Value {
        self.until("the turn to end", async || {
            let (_, t) = self.call("GET", &format!("/v1/turns/{turn}"), None).await;
            (t["state"] == "ended").then_some(t)
        })
        .await
    }

    /// Every stored event of the run, paged through the API.
    async fn events(&self, run: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let (_, page) = self
                .call(
                    "GET",
                    &format!("/v1/runs/{run}/events?after={after}&limit=100"),
                    None,
                )
                .await;
            let events = page["events"].as_array().unwrap().clone();
            let Some(last) = events.last() else { break };
            after = last["id"].as_i64().unwrap();
            all.extend(events.into_iter().map(|e| e["payload"].clone()));
        }
        all
    }

    async fn assert_events_equal_rebuild(&self, run: &str) {
        let log = self
            .home
            .path()
            .join("hangar")
            .join("runs")
            .join(format!("{run}.ctl"))
            .join("run.log");
        // Read as the server read it: in the mode its watcher stored, with the seal key kept
        // beside the ended run's log.
        let (_, r) = self.call("GET", &format!("/v1/runs/{run}"), None).await;
        let mode: Option<hangar_events::LogMode> = serde_json::from_value(r["log"].clone()).ok();
        assert!(mode.is_some(), "the run's log mode: {r}");
        let kept = self
            .home
            .path()
            .join("hangar/kept")
            .join(run)
            .join("seal.key");
        let key = std::fs::read_to_string(&kept).unwrap();
        let reader = hangar_events::LogReader::new().sealed(
            hangar_events::watcher::SealKey::from_file_text(&key).unwrap(),
            run,
        );
        let rebuilt: Vec<Value> = hangar_events::rebuild_with(&log, &reader, mode)
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        let stored = self.events(run).await;
        assert!(!stored.is_empty());
        assert_eq!(
            stored, rebuilt,
            "stored events differ from a rebuild of the log"
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The run log rebuilt from offset 0 with the parser the server uses, as JSON.
fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_while_the_database_answers_and_503_once_it_does_not() {
    ready_follows_the_database(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_ready_while_the_database_answers_and_503_once_it_does_not() {
    ready_follows_the_database(Some(PgSchema::new())).await;
}

/// `GET /v1/ready` (no token) is 200 with the schema version while the database answers; once
/// its tables are gone (the schema dropped, the table renamed away) it is 503, and the answer
/// names no part of the database's address. `/v1/health` stays 200: the process is up.
async fn ready_follows_the_database(database: Option<PgSchema>) {
    let s = Server::with_database(Script::new([]), database);
    let client = reqwest::Client::new();
    let get = async |path: &str| {
        let r = client.get(format!("{}{path}", s.url)).send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        answers::check(&s.url, "GET", path, status, &body).await;
        (status, body)
    };
    let (status, body) = get("/v1/ready").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ready"], true);
    assert_eq!(body["schema"], hangar_store::KNOWN_SCHEMA_VERSION);
    let (secret, address) = match &s.database {
        Some(db) => {
            psql(&db.base, &format!("DROP SCHEMA {} CASCADE", db.schema));
            (db.schema.clone(), db.base.clone())
        }
        None => {
            let db = s.home.path().join("hangar/hangar.db");
            sqlite3(
                &db,
                "ALTER TABLE schema_version RENAME TO schema_version_gone",
            );
            (db.display().to_string(), db.display().to_string())
        }
    };
    let (status, body) = get("/v1/ready").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    let text = body.to_string();
    assert!(
        !text.contains(&secret) && !text.contains(&address),
        "{text}"
    );
    assert_eq!(get("/v1/health").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_requests_without_a_valid_token() {
    let s = Server::new(Script::new([]));
    let client = reqwest::Client::new();
    let r = client
        .get(format!("{}/v1/sessions", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthenticated");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("hangar token create")
    );
    let r = client
        .get(format!("{}/v1/sessions", s.url))
        .bearer_auth("hgr_forged")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let (status, body) = s.call("GET", "/v1/sessions", None).await;
    assert_eq!((status, body), (200, json!({"sessions": []})));
    let h = client
        .get(format!("{}/v1/health", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(h.status().as_u16(), 200);
}

/// `hangar serve` stops cleanly on SIGTERM: it finishes, says so in its log (tracing, on
/// stderr), exits 0 and releases its port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_server_cleanly() {
    let mut s = Server::new(Script::new([]));
    // Started again with its log kept.
    s.kill9();
    let log = s.home.path().join("serve.log");
    let mut child = s
        .hangar()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    s.url = line.trim().strip_prefix("listening: ").unwrap().to_owned();
    let (status, _) = s.call("GET", "/v1/sessions", None).await;
    assert_eq!(status, 200);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "hangar serve still runs 30 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "hangar serve exited with {exit} on SIGTERM");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("hangar serve is up"), "{text}");
    assert!(text.contains("hangar serve stopped"), "{text}");
    let refused = reqwest::Client::new()
        .get(format!("{}/v1/health", s.url))
        .send()
        .await;
    assert!(refused.is_err(), "the port still answers: {refused:?}");
}

/// `hangar serve` on a database a newer hangar wrote (a schema version past the newest
/// migration this build has) refuses to start: it exits 4 without listening, and says what it
/// found, what it knows and what to do; the database is left as it was.
#[test]
fn serve_refuses_a_database_written_by_a_newer_hangar() {
    refuses_a_newer_database(None);
}

#[test]
fn on_postgresql_serve_refuses_a_database_written_by_a_newer_hangar() {
    refuses_a_newer_database(Some(PgSchema::new()));
}

fn refuses_a_newer_database(database: Option<PgSchema>) {
    let mut s = Server::with_database(Script::new([]), database);
    s.kill9();
    let newer = hangar_store::KNOWN_SCHEMA_VERSION + 1;
    let insert = format!(
        "INSERT INTO schema_version (version, name, checksum, applied_at) \
         VALUES ({newer}, 'from_a_newer_hangar', 'x', 0)"
    );
    match &s.database {
        Some(db) => psql(&db.url(), &insert),
        None => sqlite3(&s.home.path().join("hangar/hangar.db"), &insert),
    }
    let mut child = s
        .hangar()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("hangar serve still runs on a newer database");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(status.code(), Some(4), "stdout {stdout}\nstderr {stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    let known = hangar_store::KNOWN_SCHEMA_VERSION;
    let shown = match &s.database {
        Some(db) => {
            // Named without its password.
            let userinfo = db
                .base
                .split_once("://")
                .unwrap()
                .1
                .split('@')
                .next()
                .unwrap();
            if let Some((_, password)) = userinfo.split_once(':') {
                assert!(!stderr.contains(&format!(":{password}@")), "{stderr}");
            }
            "postgres://".to_owned()
        }
        None => format!(
            "sqlite://{}",
            s.home.path().join("hangar/hangar.db").display()
        ),
    };
    for needle in [
        format!("the database {shown}"),
        "written by a newer hangar".to_owned(),
        format!("schema {newer}"),
        format!("knows schemas up to {known}"),
        "upgrade hangar".to_owned(),
        "HANGAR_DATABASE_URL".to_owned(),
    ] {
        assert!(stderr.contains(&needle), "{needle:?} not in: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_an_approval_pending_then_restart_and_answer() {
    kill_9_with_an_approval_pending(None).await;
}

/// The same on PostgreSQL: `hangar serve` with `HANGAR_DATABASE_URL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_kill_9_with_an_approval_pending_then_restart_and_answer() {
    kill_9_with_an_approval_pending(Some(PgSchema::new())).await;
}

async fn kill_9_with_an_approval_pending(database: Option<PgSchema>) {
    let pg = database.is_some();
    let mut s = Server::with_database(
        Script::new([bash("echo hi > made.txt"), Step::text("made it")]),
        database,
    );
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"no_sandbox": true, "dir": s.work.path(), "policy": "ask", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    s.until("an approval", async || {
        let (_, a) = s
            .call("GET", &format!("/v1/runs/{run}/approvals"), None)
            .await;
        a["approvals"].as_array().filter(|v| !v.is_empty()).cloned()
    })
    .await;
    s.kill9();
    s.start();
    let (_, a) = s
        .call("GET", &format!("/v1/runs/{run}/approvals"), None)
        .await;
    let pending = a["approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "still pending after kill -9: {a}");
    let request = pending[0]["request_id"].as_str().unwrap();
    // Across the runs too: `GET /v1/approvals`, and `hangar approvals` without a run.
    let (_, all) = s.call("GET", "/v1/approvals", None).await;
    assert_eq!(all["approvals"], a["approvals"], "{all}");
    assert_eq!(all["live_runs"], 1, "{all}");
    let out = s
        .hangar()
        .env("HANGAR_URL", &s.url)
        .env("HANGAR_TOKEN", &s.token)
        .arg("approvals")
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = listed.lines().collect();
    assert!(
        out.status.success()
            && rows.len() == 2
            && rows[0].starts_with("RUN ")
            && rows[1].starts_with(&format!("{} ", &run[..10]))
            && rows[1].contains(&format!(" {} ", &request[..8])),
        "{listed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Answered by the prefixes the table shows, after the restart (issue 21's short ids).
    let (status, r) = s
        .call(
            "POST",
            &format!("/v1/runs/{}/approvals/{}", &run[..10], &request[..8]),
            Some(json!({"decision": "allow"})),
        )
        .await;
    assert_eq!((status, r["outcome"].as_str()), (200, Some("done")), "{r}");
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0);
    assert!(s.work.path().join("made.txt").exists(), "the tool ran");
    s.assert_events_equal_rebuild(&run).await;
    let (_, v) = s.call("GET", "/v1/audit/verify", None).await;
    assert_eq!(v["ok"], true, "{v}");
    // The CLI's own check agrees, and catches an event the log does not hold.
    let out = s.hangar().args(["events", "check", &run]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("equal a rebuild from its log"));
    s.kill9();
    {
        let sqlite = s.home.path().join("hangar/hangar.db");
        assert_eq!(
            sqlite.exists(),
            !pg,
            "the server used the database it was given"
        );
        let url = match &s.database {
            Some(db) => db.url(),
            None => format!("sqlite://{}", sqlite.display()),
        };
        let store = hangar_store::Store::open(&url).await.unwrap();
        let session = started["session"]["id"].as_str().unwrap();
        let forged = hangar_store::NewEvent {
            kind: "assistant_text".into(),
            payload: json!({"kind": "assistant_text", "text": "not in the log", "offset": 0}),
        };
        store
            .append_event(session, Some(&run), &forged)
            .await
            .unwrap();
        store.close().await;
    }
    let out = s.hangar().args(["events", "check", &run]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("differ from the log"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_streaming_with_a_steer_in_flight() {
    let mut s = Server::new(Script::new([
        Step::slow_text(8, Duration::from_millis(300)),
        Step::text("after the steer"),
    ]));
    let (_, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"no_sandbox": true, "dir": s.work.path(), "policy": "auto", "prompt": "talk"})),
        )
        .await;
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    s.fake
        .wait_for_requests(1, Duration::from_secs(60))
        .unwrap();
    let (status, r) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/steer"),
            Some(json!({"text": "STEER: and then"})),
        )
        .await;
    assert_eq!((status, r["outcome"].as_str()), (200, Some("done")), "{r}");
    s.kill9();
    s.start();
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0);
    let reqs = s.fake.requests();
    assert_eq!(reqs[1].last_user_text().as_deref(), Some("STEER: and then"));
    s.assert_events_equal_rebuild(&run).await;
    let results = s
        .events(&run)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "result")
        .count();
    assert_eq!(results, 2, "both answers, each once");
    // The transcript names what was sent, with its text and sender (from the commands).
    let session = started["session"]["id"].as_str().unwrap();
    let (status, tr) = s
        .call("GET", &format!("/v1/sessions/{session}/transcript"), None)
        .await;
    assert_eq!(status, 200, "{tr}");
    let sent: Vec<(String, String, String)> = tr["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "sent")
        .map(|e| {
            let f = |k: &str| e[k].as_str().unwrap_or("-").to_owned();
            (f("command"), f("text"), f("by"))
        })
        .collect();
    let who = sent[0].2.clone();
    assert!(who.contains('@'), "{tr}");
    assert_eq!(
        sent,
        [
            ("prompt".into(), "talk".into(), who.clone()),
            ("steer".into(), "STEER: and then".into(), who)
        ],
        "{tr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_resumes_from_last_event_id_without_gaps_or_repeats() {
    let s = Server::new(Script::new([
        bash("echo a"),
        bash("echo b"),
        Step::text("done"),
    ]));
    let (_, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(
                json!({"no_sandbox": true, "dir": s.work.path(), "policy": "auto", "prompt": "go"}),
            ),
        )
        .await;
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    let all: Vec<i64> = {
        let (_, page) = s
            .call("GET", &format!("/v1/runs/{run}/events?limit=1000"), None)
            .await;
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_i64().unwrap())
            .collect()
    };
    assert!(all.len() > 6);
    // Read the stream from a cursor in the middle, then resume from the last id seen.
    let read = async |last: Option<i64>, n: usize| -> Vec<i64> {
        let client = reqwest::Client::new();
        let mut req = client
            .get(format!("{}/v1/runs/{run}/events/stream", s.url))
            .bearer_auth(&s.token);
        if let Some(l) = last {
            req = req.header("Last-Event-ID", l.to_string());
        }
        let mut resp = req.send().await.unwrap();
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut ids = Vec::new();
        let mut buf = String::new();
        while ids.len() < n {
            let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let frame: String = buf.drain(..end + 2).collect();
                if let Some(id) = frame.lines().find_map(|l| l.strip_prefix("id: ")) {
                    ids.push(id.trim().parse().unwrap());
                }
            }
        }
        ids.truncate(n);
        ids
    };
    let first = read(Some(all[1]), 3).await;
    assert_eq!(first, all[2..5]);
    let rest = read(Some(*first.last().unwrap()), all.len() - 5).await;
    assert_eq!(rest, all[5..], "resumed with no gap and no repeat");
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The run's steps are the driver's trees; the diff between two is git's, with the objects read
/// from the turn's pack and the repository (the agent's repository never gets them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_and_the_diff_between_two_of_them() {
    let s = Server::new(Script::new([
        bash("printf 'one\\ntwo\\n' > notes.txt && printf 'a\\nb2\\n' > a.txt && rm gone.txt"),
        Step::text("changed"),
    ]));
    let work = s.work.path();
    std::fs::write(work.join("a.txt"), "a\nb\n").unwrap();
    std::fs::write(work.join("gone.txt"), "bye\n").unwrap();
    git(work, &["init", "-q"]);
    git(work, &["add", "-A"]);
    git(work, &["commit", "-qm", "start"]);
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"no_sandbox": true, "dir": work, "policy": "auto", "prompt": "edit"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.turn_ended(&turn).await["status"], 0);

    let out = s.hangar().args(["diff", &run]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8(out.stdout).unwrap();
    let steps: Vec<&str> = listed.lines().collect();
    assert_eq!(steps.len(), 3, "start, after the call, end: {listed}");
    assert!(
        steps[0].starts_with("step 0\t") && steps[0].contains("\tstart"),
        "{listed}"
    );
    assert!(steps[1].contains("\tafter "), "{listed}");
    assert!(steps[2].contains("\tend\tuntrusted"), "{listed}");

    let out = s
        .hangar()
        .args(["diff", &run, "--from", "0", "--to", "2", "--patch"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8(out.stdout).unwrap();
    let mut files: Vec<&str> = shown.lines().take(3).collect();
    files.sort();
    assert_eq!(
        files,
        ["+0 -1\tgone.txt", "+1 -1\ta.txt", "+2 -0\tnotes.txt"],
        "{shown}"
    );
    assert!(
        shown.contains("3 files changed, 3 insertions(+), 2 deletions(-)"),
        "{shown}"
    );
    assert!(shown.contains("+b2"), "the patch: {shown}");
    // git's own view of the same change agrees.
    git(work, &["add", "-A"]);
    let numstat = git(work, &["diff", "--cached", "--numstat"]);
    assert_eq!(numstat.lines().count(), 3, "{numstat}");

    let (status, body) = s
        .call("GET", &format!("/v1/runs/{run}/diff?from=0&to=9"), None)
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("there is no step 9"),
        "{body}"
    );
}

/// The value of the first sample of `/metrics`' text whose line starts with `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// `GET /metrics` needs a token, and counts what the server did: the answer to a permission
/// request (sent, acked, how long the request waited), the run log's ingestion, the requests
/// by status. `--log-format json` writes one access line per request, naming the path and
/// never the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_the_work_and_the_access_log_names_each_request() {
    let mut s = Server::new(Script::new([
        bash("echo hi > made.txt"),
        Step::text("made it"),
    ]));
    s.kill9();
    let log_path = s.home.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    s.start_with(&["--log-format", "json"], Stdio::from(log));
    let client = reqwest::Client::new();
    let anonymous = client
        .get(format!("{}/metrics", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);

    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"no_sandbox": true, "dir": s.work.path(), "policy": "ask", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let request = s
        .until("an approval", async || {
            let (_, a) = s
                .call("GET", &format!("/v1/runs/{run}/approvals"), None)
                .await;
            a["approvals"][0]["request_id"].as_str().map(str::to_owned)
        })
        .await;
    let (status, r) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/approvals/{request}"),
            Some(json!({"decision": "allow"})),
        )
        .await;
    assert_eq!((status, r["outcome"].as_str()), (200, Some("done")), "{r}");
    s.turn_ended(&turn).await;

    let text = s
        .until("the approval's wait in /metrics", async || {
            let r = client
                .get(format!("{}/metrics", s.url))
                .bearer_auth(&s.token)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            let text = r.text().await.unwrap();
            sample(&text, "hangar_approval_wait_seconds_count")
                .is_some()
                .then_some(text)
        })
        .await;
    assert_eq!(
        sample(
            &text,
            r#"hangar_commands_total{kind="approve",outcome="done"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"hangar_command_ack_seconds_count{kind="approve"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "hangar_approval_wait_seconds_count"),
        Some(1.0)
    );
    assert!(
        sample(&text, "hangar_ingest_lag_seconds_count").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        sample(&text, r#"hangar_http_requests_total{status="401"}"#).is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        sample(&text, r#"hangar_http_requests_total{status="201"}"#).is_some_and(|n| n >= 1.0),
        "{text}"
    );

    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains(&s.token), "the token reached the log");
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let access = |method: &str, path: &str, status: u64| {
        lines.iter().any(|l| {
            l["target"] == "hangar::access"
                && l["status"] == status
                && l["span"]["method"] == method
                && l["span"]["path"] == path
        })
    };
    assert!(access("POST", "/v1/sessions", 201), "{log}");
    assert!(access("GET", "/metrics", 401), "{log}");
    assert!(
        access("POST", &format!("/v1/runs/{run}/approvals/{request}"), 200),
        "{log}"
    );
}

/// A `hangar serve` process killed when dropped.
struct Replica {
    child: Child,
    url: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A second replica of `s`: the same database, home and key.
fn replica_of(s: &Server) -> Replica {
    let (child, url) = serve(s.hangar(), &[], Stdio::null());
    Replica { child, url }
}

/// `hangar serve` on a free loopback port allowing plain folders, with `args`, its log going to
/// `log`: the process and the address it printed.
fn serve(mut hangar: Command, args: &[&str], log: Stdio) -> (Child, String) {
    let mut child = hangar
        .args(["serve", "--listen", "127.0.0.1:0", "--unsandboxed-folders"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening: ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();
    (child, url)
}

/// Two `hangar serve` replicas on one PostgreSQL (issue 24): a live stream opened on the
/// replica that does not watch the run follows it as the other stores its events, woken by the
/// database's notices. Once a replica hears the others (`hangar_hears_replicas 1`) its streams
/// read the store again only once a minute on their own, so without the notices the events
/// stored after the stream opened would arrive a minute late: here they arrive as they are
/// stored, each once, the last within seconds of the turn's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_a_stream_on_another_replica_follows_the_run_as_it_is_stored() {
    let s = Server::with_database(
        Script::new([
            Step::slow_text(8, Duration::from_millis(400)),
            Step::text("done"),
        ]),
        Some(PgSchema::new()),
    );
    let b = replica_of(&s);
    let client = reqwest::Client::new();
    s.until("replica B to hear the others", async || {
        let text = client
            .get(format!("{}/metrics", b.url))
            .bearer_auth(&s.token)
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        (sample(&text, "hangar_hears_replicas") == Some(1.0)).then_some(())
    })
    .await;
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"no_sandbox": true, "dir": s.work.path(), "policy": "auto", "prompt": "talk"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    // B's stream, read on a task of its own: each event's id and when it arrived.
    let opened = Instant::now();
    let mut resp = client
        .get(format!("{}/v1/runs/{run}/events/stream", b.url))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(i64, Instant)>::new()));
    let reader = {
        let seen = std::sync::Arc::clone(&seen);
        tokio::spawn(async move {
            let mut buf = String::new();
            while let Ok(Some(chunk)) = resp.chunk().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let frame: String = buf.drain(..end + 2).collect();
                    if let Some(id) = frame.lines().find_map(|l| l.strip_prefix("id: ")) {
                        seen.lock()
                            .unwrap()
                            .push((id.trim().parse().unwrap(), Instant::now()));
                    }
                }
            }
        })
    };
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
    let ended = Instant::now();
    let (_, page) = s
        .call("GET", &format!("/v1/runs/{run}/events?limit=1000"), None)
        .await;
    let all: Vec<i64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    let last = *all.last().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen.lock().unwrap().iter().any(|(id, _)| *id == last) {
        assert!(
            Instant::now() < deadline,
            "replica B's stream had not seen the run's last event 5 s after the turn ended: {:?} of {all:?}",
            seen.lock()
                .unwrap()
                .iter()
                .map(|(id, _)| *id)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    reader.abort();
    let seen = seen.lock().unwrap().clone();
    let ids: Vec<i64> = seen.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, all, "every event once, in order");
    let late = seen
        .iter()
        .filter(|(_, at)| at.duration_since(opened) > Duration::from_millis(500))
        .count();
    assert!(
        late > 0,
        "every event was already stored when the stream opened: nothing shows it live"
    );
    let after_end = seen
        .last()
        .map(|(_, at)| at.saturating_duration_since(ended))
        .unwrap_or_default();
    println!(
        "replica B's stream: {} events, {late} arriving after its first half second; the last {after_end:?} after the turn's end was seen on A",
        ids.len()
    );
}

/// `cmd` run in a mount namespace of its own in which `folder` is seen at `at` (the folder that
/// is there for everyone else is hidden under it): a replica whose home is its own, as on
/// another machine.
fn in_own_mount_namespace(
    cmd: &Command,
    folder: &std::path::Path,
    at: &std::path::Path,
) -> Command {
    let mut c = Command::new("unshare");
    c.env_clear()
        .envs(
            cmd.get_envs()
                .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
        )
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" "$2" && shift 2 && exec "$@""#)
        .arg("sh")
        .arg(folder)
        .arg(at)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    c
}

/// Issue 24's two replicas that share only PostgreSQL: replica B runs in a mount namespace of
/// its own with a home of its own (only the master key copied in), the sandbox is a docker
/// container reached through the Engine API that binds nothing of either home
/// (`HANGAR_DOCKER_MIRROR=stream`). A real Claude Code turn started through replica A waits for
/// its approval; A is killed (SIGKILL); B takes the run over, lays out its mirror from the
/// container, and the approval answered through B reaches the driver; the turn completes, every
/// event is stored once (`hangar events check` in B's namespace), and an SSE client of B saw
/// every event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_sharing_only_postgresql_carry_a_docker_turn_past_a_kill_9() {
    let Some(TwoReplicas {
        mut s,
        b,
        b_home,
        home_a,
        sb,
    }) = TwoReplicas::start().await
    else {
        return;
    };
    let client = reqwest::Client::new();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();

    // An SSE client of B, from the run's first event on.
    let mut resp = client
        .get(format!("{}/v1/runs/{run}/events/stream", b.url))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<i64>::new()));
    let reader = {
        let seen = std::sync::Arc::clone(&seen);
        tokio::spawn(async move {
            let mut buf = String::new();
            while let Ok(Some(chunk)) = resp.chunk().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let frame: String = buf.drain(..end + 2).collect();
                    if let Some(id) = frame.lines().find_map(|l| l.strip_prefix("id: ")) {
                        seen.lock().unwrap().push(id.trim().parse().unwrap());
                    }
                }
            }
        })
    };
    let approval = s
        .until("the approval", async || {
            let (_, t) = s.call("GET", &format!("/v1/turns/{turn}"), None).await;
            assert_ne!(
                t["state"], "ended",
                "the turn ended before its approval: {t}"
            );
            let (_, a) = s
                .call("GET", &format!("/v1/runs/{run}/approvals"), None)
                .await;
            a["approvals"].as_array().and_then(|v| v.first().cloned())
        })
        .await;
    let request = approval["request_id"].as_str().unwrap().to_owned();
    assert!(
        !b_home
            .path()
            .join("runs")
            .join(format!("{run}.ctl"))
            .exists(),
        "B's home holds the run's folder while A watches it"
    );

    // A dies; from here on every call goes to B.
    s.kill9();
    s.url = b.url.clone();
    // Until B holds the run and its mirror has the driver's acks, an answer through B is
    // refused saying so (503), never lost, never numbered as a command the driver already had.
    let mut refused = Vec::new();
    let answered = s
        .until(
            "B to take the run over and pass the answer on",
            async || {
                let (status, r) = s
                    .call(
                        "POST",
                        &format!("/v1/runs/{run}/approvals/{request}"),
                        Some(json!({"decision": "allow"})),
                    )
                    .await;
                if status != 200 {
                    refused.push((status, r));
                    return None;
                }
                Some(r)
            },
        )
        .await;
    assert_eq!(answered["outcome"], "done", "{answered}");
    assert!(
        refused.iter().all(|(status, r)| *status == 503
            && r["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("send the command again in a few seconds"))),
        "{refused:?}"
    );
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
    assert!(
        b_home
            .path()
            .join("runs")
            .join(format!("{run}.ctl/run.log"))
            .exists(),
        "B mirrored the run into its own home"
    );
    let (status, out) = s
        .call(
            "POST",
            &format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["cat", "made.txt"]})),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["stdout"], "hi\n", "{out}");

    let check = in_own_mount_namespace(&s.hangar(), b_home.path(), &home_a)
        .args(["events", "check", &run])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let all: Vec<i64> = {
        let (_, page) = s
            .call("GET", &format!("/v1/runs/{run}/events?limit=1000"), None)
            .await;
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_i64().unwrap())
            .collect()
    };
    let last = *all.last().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.lock().unwrap().contains(&last) {
        assert!(
            Instant::now() < deadline,
            "B's stream never saw event {last}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    reader.abort();
    assert_eq!(
        *seen.lock().unwrap(),
        all,
        "B's stream: every event once, in order"
    );
    let (status, _) = s.call("DELETE", &format!("/v1/sandboxes/{sb}"), None).await;
    assert!(status < 300, "removing the sandbox: {status}");
}

/// Replica A (`s`, its home on this machine's file system) and replica B in a mount namespace
/// of its own with a home of its own at A's home's path (only the master key copied in), sharing
/// only PostgreSQL; a docker sandbox reached through the Engine API that binds nothing of either
/// home (`HANGAR_DOCKER_MIRROR=stream`), of the image with the pinned Claude Code, whose turn
/// makes a file after a person's approval. `None` when docker is skipped.
struct TwoReplicas {
    s: Server,
    b: Replica,
    b_home: tempfile::TempDir,
    home_a: PathBuf,
    sb: String,
}

impl TwoReplicas {
    async fn start() -> Option<TwoReplicas> {
        if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
            eprintln!("HANGAR_TEST_DOCKER=0: skipped");
            return None;
        }
        let image = hangar_testkit::claude_image().unwrap();
        let s = Server::with_env(
            Script::new([
                bash("echo hi > made.txt && id -u > uid.txt"),
                Step::text("made it"),
                Step::text("again"),
            ]),
            Some(PgSchema::new()),
            &[
                ("HANGAR_DOCKER_MIRROR", "stream"),
                ("HANGAR_RUN_LEASE_MS", "1500"),
            ],
        );
        let home_a = s.home.path().join("hangar");
        let b_home = tempfile::tempdir().unwrap();
        std::fs::copy(home_a.join("master.key"), b_home.path().join("master.key")).unwrap();
        let (b_child, b_url) = serve(
            in_own_mount_namespace(&s.hangar(), b_home.path(), &home_a),
            &[],
            Stdio::null(),
        );
        let b = Replica {
            child: b_child,
            url: b_url,
        };
        let client = reqwest::Client::new();
        s.until("replica B to hear the others", async || {
            let text = client
                .get(format!("{}/metrics", b.url))
                .bearer_auth(&s.token)
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            (sample(&text, "hangar_hears_replicas") == Some(1.0)).then_some(())
        })
        .await;
        let env = s.home.path().join("streamed.yaml");
        std::fs::write(
            &env,
            format!("name: streamed\nprovider: docker\nimage: {image}\nnetwork: host\n"),
        )
        .unwrap();
        let out = s
            .hangar()
            .args(["env", "apply", env.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(s.work.path().join("README"), "the repo\n").unwrap();
        // A repository with a commit: its objects are in the sandbox (and, once it is removed,
        // in the bundle kept of it), not in the turn's pack.
        git(s.work.path(), &["init", "-q"]);
        git(s.work.path(), &["add", "README"]);
        git(s.work.path(), &["commit", "-qm", "the repo"]);
        let (status, made) = s
            .call(
                "POST",
                "/v1/sandboxes",
                Some(json!({"env": "streamed", "repo": s.work.path()})),
            )
            .await;
        assert_eq!(status, 201, "{made}");
        let sb = made["sandbox"]["id"].as_str().unwrap().to_owned();
        Some(TwoReplicas {
            s,
            b,
            b_home,
            home_a,
            sb,
        })
    }
}

/// A command through the replica that does not watch the run, and shares no disk with the one
/// that does, is passed on to that one (`forward.rs`): the approval answered through B reaches
/// the driver A mirrors, and the turn completes. A request already passed on once is not
/// passed on again (the 503 says why), so two replicas cannot bounce one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_through_the_other_replica_is_passed_on_to_the_one_that_watches_the_run() {
    let Some(TwoReplicas {
        mut s,
        b,
        b_home,
        home_a,
        sb,
    }) = TwoReplicas::start().await
    else {
        return;
    };
    // A sandbox made through B, whose home never saw A's: its agent is another user of the
    // host than A's sandbox's (the uid claimed in the database, not from a pool in each home).
    let a_url = s.url.clone();
    s.url = b.url.clone();
    let (status, made) = s
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"env": "streamed", "repo": s.work.path()})),
        )
        .await;
    s.url = a_url;
    assert_eq!(status, 201, "{made}");
    let sb_b = made["sandbox"]["id"].as_str().unwrap().to_owned();
    let owner = |id: &str| {
        let out = Command::new("docker")
            .args([
                "exec",
                &format!("hangar-{id}"),
                "stat",
                "-c",
                "%u",
                "/workspace",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let (uid_a, uid_b) = (owner(&sb), owner(&sb_b));
    assert!(
        !uid_a.is_empty() && uid_a != "0" && uid_a != uid_b,
        "the two sandboxes' agents: {uid_a} and {uid_b}"
    );
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let approval = s
        .until("the approval", async || {
            let (_, a) = s
                .call("GET", &format!("/v1/runs/{run}/approvals"), None)
                .await;
            a["approvals"].as_array().and_then(|v| v.first().cloned())
        })
        .await;
    let request = approval["request_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/runs/{run}/approvals/{request}");
    let bounced = reqwest::Client::new()
        .post(format!("{}{path}", b.url))
        .bearer_auth(&s.token)
        .header("x-hangar-passed-on", "1")
        .json(&json!({"decision": "allow"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bounced.status().as_u16(), 503);
    let said: Value = bounced.json().await.unwrap();
    assert!(
        said["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("shares no disk")),
        "{said}"
    );
    let a_url = std::mem::replace(&mut s.url, b.url.clone());
    let (status, r) = s
        .call("POST", &path, Some(json!({"decision": "allow"})))
        .await;
    assert_eq!((status, r["outcome"].as_str()), (200, Some("done")), "{r}");
    s.url = a_url.clone();
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
    assert!(
        !b_home
            .path()
            .join("runs")
            .join(format!("{run}.ctl"))
            .exists(),
        "B watched the run"
    );
    // A kept the ended run's files; B, whose home never held them, reads them from the
    // database: its log over the API, its steps' diff, and `hangar events check` in its
    // namespace.
    let kept_b = b_home.path().join("kept").join(&run);
    assert!(!kept_b.exists());
    s.url = b.url.clone();
    let (status, log) = s.call("GET", &format!("/v1/runs/{run}/log"), None).await;
    assert_eq!(status, 200, "{log}");
    assert!(log.to_string().contains("made it"), "{log}");
    assert!(
        kept_b.join("run.log").is_file(),
        "B did not bring the log back"
    );
    let (status, steps) = s.call("GET", &format!("/v1/runs/{run}/steps"), None).await;
    assert_eq!(status, 200, "{steps}");
    let last = steps["steps"]
        .as_array()
        .map_or(0, |v| v.len().saturating_sub(1));
    let (status, diff) = s
        .call(
            "GET",
            &format!("/v1/runs/{run}/diff?from=0&to={last}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{diff}");
    assert!(diff.to_string().contains("made.txt"), "{diff}");
    let check = in_own_mount_namespace(&s.hangar(), b_home.path(), &home_a)
        .args(["events", "check", &run])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    // The session's next turn through B, in the sandbox A made: B reaches it through the
    // Engine API, mirrors the run itself, and watches it (nothing of A's home needed).
    let session = started["session"]["id"].as_str().unwrap().to_owned();
    let (status, next) = s
        .call(
            "POST",
            &format!("/v1/sessions/{session}/messages"),
            Some(json!({"text": "and again"})),
        )
        .await;
    assert_eq!(
        (status, next["outcome"].as_str()),
        (200, Some("next_turn")),
        "{next}"
    );
    let turn2 = next["turn"].as_str().unwrap().to_owned();
    let run2 = next["run"].as_str().unwrap().to_owned();
    let t = s.turn_ended(&turn2).await;
    assert_eq!(t["status"], 0, "{t}");
    assert!(
        b_home
            .path()
            .join("runs")
            .join(format!("{run2}.ctl"))
            .exists(),
        "B did not mirror the run it started"
    );
    // The sandbox removed through A (which keeps its repository), and the repository it was
    // made from gone: B forks the run's last step from what A kept in the database, the
    // repository and the harness's conversation, though its home never held them.
    s.url = a_url;
    let (status, _) = s.call("DELETE", &format!("/v1/sandboxes/{sb}"), None).await;
    assert!(status < 300, "removing the sandbox: {status}");
    let away = s.home.path().join("repo-moved-away");
    std::fs::rename(s.work.path(), &away).unwrap();
    s.url = b.url.clone();
    let (status, forked) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/fork"),
            Some(json!({"step": last})),
        )
        .await;
    std::fs::rename(&away, s.work.path()).unwrap();
    assert_eq!(status, 201, "{forked}");
    let kept_b = b_home.path().join("kept");
    let ls = |d: PathBuf| -> Vec<_> {
        std::fs::read_dir(d)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default()
    };
    let repo_a = ls(home_a.join("kept").join("sandboxes").join(&sb));
    let repo_b = ls(kept_b.join("sandboxes").join(&sb));
    assert!(
        repo_a == ["repo.bundle"] && repo_b == repo_a,
        "B did not bring the repository back: {repo_b:?}, A has {repo_a:?}; {forked}"
    );
    assert_eq!(forked["fork"]["repository"], true, "{forked}");
    let conversations = kept_b.join("conversations").join(&session).join("home");
    assert!(
        std::fs::read_dir(conversations.join(".claude/projects"))
            .is_ok_and(|mut d| d.next().is_some()),
        "B did not bring the conversation back"
    );
    let fork_sb = forked["sandbox"]["id"].as_str().unwrap().to_owned();
    let (status, _) = s
        .call("DELETE", &format!("/v1/sandboxes/{fork_sb}"), None)
        .await;
    assert!(status < 300, "removing the fork's sandbox: {status}");
    let (status, _) = s
        .call("DELETE", &format!("/v1/sandboxes/{sb_b}"), None)
        .await;
    assert!(status < 300, "removing B's sandbox: {status}");
    // Retention through B, once B's copy is gone too: the session's conversation kept in the
    // database goes with it, though no file of this replica held it.
    std::fs::remove_dir_all(kept_b.join("conversations")).unwrap();
    let db = s.database.as_ref().unwrap().url();
    psql(
        &db,
        &format!("UPDATE runs SET ended_at = 1 WHERE id IN ('{run}', '{run2}')"),
    );
    let kept_rows = || {
        let out = Command::new("psql")
            .args([&db, "-tAc"])
            .arg(format!(
                "SELECT COUNT(*) FROM kept_files WHERE run_id = '{session}'"
            ))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_ne!(
        kept_rows(),
        "0",
        "the conversation was not kept in the database"
    );
    let pruned = in_own_mount_namespace(&s.hangar(), b_home.path(), &home_a)
        .args(["prune", "--older-than", "1m"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&pruned.stderr).into_owned()
        + &String::from_utf8_lossy(&pruned.stdout);
    assert!(
        pruned.status.success() && said.contains("1 session conversation,"),
        "{said}"
    );
    assert_eq!(kept_rows(), "0", "the conversation outlived its retention");
}
