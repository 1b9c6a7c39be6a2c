//! The web page end to end: a real headless Chromium (Debian's, through chromedriver) against a
//! real `hangar serve` running real Claude Code turns with the scripted model. A person signs in
//! with a token (nothing shows without one), watches a tool call arrive live, approves it from the
//! page and the file appears; steers and the model gets the steer; sends the next prompt and
//! interrupts it (status 130); ticks two steps of the timeline and sees the diff between them;
//! forks a step into a new session and sees its first turn; sends a steer over the size limit and
//! sees the driver refuse it and why, with nothing changed; and when the server dies mid-turn
//! the page resumes from the last event it had, with no gap and no repeat. Screenshots of each main view go to
//! `target/screenshots/web/` (or `$HANGAR_SCREENSHOTS_DIR`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hangar_testkit::browser::{Browser, http_json};
use hangar_testkit::{
    FakeAnthropic, FakeOpenAi, Script, Step, claude_bin, claude_env, codex_bin, codex_env,
    codex_offline_config, workspace_root,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);

fn driver_bin() -> PathBuf {
    std::env::var_os("HANGAR_DRIVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver"))
}

fn shot(b: &Browser, name: &str) {
    let dir = std::env::var_os("HANGAR_SCREENSHOTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/screenshots/web"));
    b.screenshot(&dir.join(format!("{name}.png"))).unwrap();
}

/// A `hangar serve` of its own (home, work folder, scripted model, token), restartable on the
/// same address.
struct Server {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: FakeAnthropic,
    /// Codex's scripted model, when the server runs Codex too.
    codex: Option<FakeOpenAi>,
    child: Option<Child>,
    url: String,
    token: String,
}

impl Server {
    fn new(script: Script) -> Server {
        Server::build(script, None)
    }

    /// A server whose Codex turns talk to `codex`'s scripted model.
    fn with_codex(codex: Script) -> Server {
        Server::build(Script::new([]), Some(FakeOpenAi::start(codex).unwrap()))
    }

    fn build(script: Script, codex: Option<FakeOpenAi>) -> Server {
        let mut s = Server {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
            fake: FakeAnthropic::start(script).unwrap(),
            codex,
            child: None,
            url: String::new(),
            token: String::new(),
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
        s.start("127.0.0.1:0");
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
        if self.codex.is_some() {
            let codex_home = self.home.path().join("codex-home");
            std::fs::create_dir_all(&codex_home).unwrap();
            c.env("HANGAR_CODEX_BIN", codex_bin().unwrap())
                .envs(codex_env(&codex_home));
        }
        c
    }

    fn start(&mut self, listen: &str) {
        let mut child = self
            .hangar()
            .args(["serve", "--listen", listen, "--unsandboxed-folders"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        self.url = line
            .trim()
            .strip_prefix("listening: ")
            .unwrap_or_else(|| panic!("{line:?}"))
            .to_owned();
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        let mut c = self.child.take().unwrap();
        unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
        let _ = c.wait();
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        http_json(
            method,
            &format!("{}{path}", self.url),
            Some(&self.token),
            body.as_ref(),
        )
        .unwrap()
    }

    fn start_session(&self, policy: &str, prompt: &str) -> (String, String) {
        let (status, started) = self.call(
            "POST",
            "/v1/sessions",
            // A plain folder (this server allows it): the page shows what the API has.
            Some(
                json!({"no_sandbox": true, "dir": self.work.path(), "policy": policy, "prompt": prompt}),
            ),
        );
        assert_eq!(status, 201, "{started}");
        (
            started["turn"]["id"].as_str().unwrap().to_owned(),
            started["run"]["id"].as_str().unwrap().to_owned(),
        )
    }

    fn turn(&self, id: &str) -> Value {
        self.call("GET", &format!("/v1/turns/{id}"), None).1
    }

    fn turn_ended(&self, id: &str) -> Value {
        until("the turn to end", || {
            let t = self.turn(id);
            (t["state"] == "ended").then_some(t)
        })
    }

    /// Every stored event of the run, paged through the API.
    fn events(&self, run: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let (_, page) = self.call(
                "GET",
                &format!("/v1/runs/{run}/events?after={after}&limit=200"),
                None,
            );
            let events = page["events"].as_array().unwrap().clone();
            let Some(last) = events.last() else { break };
            after = last["id"].as_i64().unwrap();
            all.extend(events);
        }
        all
    }

    /// Opens the page and signs in with the token; waits for the sessions to load.
    fn sign_in(&self, b: &Browser) {
        b.goto(&format!("{}/", self.url)).unwrap();
        b.type_into("#token", &self.token).unwrap();
        b.click("#signin button[type=submit]").unwrap();
        b.wait_js(
            "the sessions",
            "const l = document.querySelector('#sessions'); return l && !l.innerText.includes('Loading');",
            json!([]),
            WAIT,
        )
        .unwrap();
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

fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// Waits for the page's element `css` whose text contains `needle`, and returns that text.
fn wait_text(b: &Browser, css: &str, needle: &str) -> String {
    let found = b.wait_js(
        &format!("{css} to say {needle:?}"),
        "for (const e of document.querySelectorAll(arguments[0])) { if (e.innerText.includes(arguments[1])) return e.innerText; } return null;",
        json!([css, needle]),
        WAIT,
    );
    match found {
        Ok(v) => v.as_str().unwrap().to_owned(),
        // What the page showed instead says most about why.
        Err(e) => {
            let shown = b
                .js(
                    "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.innerText).join('\\n---\\n');",
                    json!([css]),
                )
                .unwrap_or_default();
            panic!("{e}; {css} showed:\n{}", shown.as_str().unwrap_or_default());
        }
    }
}

/// The ids of the events the live view shows (a tool's result shows inside its call, so the
/// ids are sorted: each must be there exactly once).
fn shown_ids(b: &Browser) -> Vec<i64> {
    let mut ids = b.js(
        "return Array.from(document.querySelectorAll('#feed [data-event-id]')).map(e => Number(e.dataset.eventId));",
        json!([]),
    )
    .unwrap()
    .as_array()
    .unwrap()
    .iter()
    .map(|v| v.as_i64().unwrap())
    .collect::<Vec<_>>();
    ids.sort_unstable();
    ids
}

#[test]
fn sign_in_then_watch_a_tool_call_live_and_approve_it_from_the_page() {
    let s = Server::new(Script::new([
        bash("echo hi > made.txt"),
        bash("rm made.txt"),
        Step::text("made it"),
        Step::text("went on in the fork").expect_user_text("continue in the fork"),
        Step::text("the second fork answers").expect_user_text("first prompt from the card"),
    ]));
    let (turn, run) = s.start_session("ask", "make a file please");
    let b = Browser::start(1280, 900).unwrap();

    // Without a token: the sign-in form and nothing else, and the API refuses.
    b.goto(&format!("{}/", s.url)).unwrap();
    b.wait_for("#signin", WAIT).unwrap();
    let body = b.text("body").unwrap();
    assert!(
        !body.contains("make a file") && !body.contains(&turn),
        "{body}"
    );
    let (status, _) = http_json("GET", &format!("{}/v1/board", s.url), None, None).unwrap();
    assert_eq!(status, 401);
    shot(&b, "01-sign-in");
    b.type_into("#token", "hgr_not_a_token").unwrap();
    b.click("#signin button[type=submit]").unwrap();
    wait_text(&b, "#signin-error", "refused");
    assert!(b.find("#sessions").unwrap().is_none());

    // With it: the sessions, with their person, sandbox and turns.
    b.type_into("#token", &s.token).unwrap();
    b.click("#signin button[type=submit]").unwrap();
    let card = wait_text(&b, "#sessions .session", "make a file please");
    assert!(card.contains("ada@example.com"), "{card}");
    assert!(
        card.contains(&s.work.path().display().to_string()),
        "{card}"
    );
    assert_eq!(b.text("#who").unwrap(), "ada@example.com");
    shot(&b, "02-sessions");

    // The turn, live: the tool call arrives with its input while the turn waits for a person.
    b.click(&format!("#sessions tr[data-turn-id='{turn}'] a"))
        .unwrap();
    wait_text(&b, "#feed [data-kind=tool_call]", "echo hi > made.txt");
    wait_text(&b, "#approvals .approval", "Bash");
    // The tool's card says it waits for a person, not that it runs.
    wait_text(
        &b,
        "#feed [data-kind=tool_call] .result",
        "waiting for approval",
    );
    assert_eq!(s.turn(&turn)["state"], "running");
    // Waiting for a person, in its own words (issue 21), and counted in the tab's title.
    assert_eq!(s.turn(&turn)["phase"], "waiting");
    assert_eq!(s.turn(&turn)["waiting"], 1);
    wait_text(&b, "#turn-state", "waiting for you");
    b.wait_js(
        "the title to count the request",
        "return document.title === '(1) hangar' && document.querySelector('link[rel=icon]').dataset.count === '1' ? true : null;",
        json!([]),
        WAIT,
    )
    .unwrap();
    assert!(!s.work.path().join("made.txt").exists());
    assert!(b.text("#stream-state").unwrap().contains("live"));
    shot(&b, "03-turn-waiting-for-approval");
    b.resize(390, 844).unwrap();
    shot(&b, "03-phone-waiting-for-approval");
    b.resize(1280, 900).unwrap();

    // Approved from the page with an edited input: the driver's answer shows, and the tool
    // runs with the person's input.
    b.click("#approvals .approval details.edit summary")
        .unwrap();
    b.type_into(
        "#approvals .approval .edit-input",
        r#"{"command": "echo edited > made.txt", "description": "run it"}"#,
    )
    .unwrap();
    b.click("#approvals .approval .approve").unwrap();
    wait_text(
        &b,
        "#approvals .approval .answer[data-outcome=done]",
        "approve: done",
    );
    until("the file", || {
        std::fs::read_to_string(s.work.path().join("made.txt"))
            .ok()
            .filter(|t| t == "edited\n")
    });

    // The next call is denied from the page with a reason, which the model gets.
    wait_text(&b, "#approvals .approval:not(.answered)", "rm made.txt");
    b.type_into(
        "#approvals .approval:not(.answered) .reason",
        "keep the file",
    )
    .unwrap();
    b.click("#approvals .approval:not(.answered) .deny")
        .unwrap();
    wait_text(
        &b,
        "#approvals .approval .answer[data-outcome=done]",
        "deny: done",
    );
    wait_text(&b, "#feed [data-kind=turn_end]", "status 0");
    // Who answered, when, and the input they changed (issue 21: people's words are kept),
    // in the live view and in the audit record.
    let allowed = wait_text(
        &b,
        "#feed [data-kind=approval_answered]",
        "allowed by ada@example.com",
    );
    assert!(
        allowed.to_lowercase().contains("with the input changed to")
            && allowed.contains("echo edited > made.txt"),
        "{allowed}"
    );
    assert!(
        b.find("#feed [data-kind=approval_answered] time")
            .unwrap()
            .is_some(),
        "the answer says when"
    );
    let denied = wait_text(&b, "#feed [data-kind=approval_answered]", "denied by");
    assert!(denied.contains("keep the file"), "{denied}");
    let (_, audit) = s.call("GET", "/v1/audit?limit=200", None);
    let answers: Vec<&Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "approval.answered")
        .collect();
    assert!(
        answers
            .iter()
            .any(|r| r.to_string().contains("updated_input")
                && r.to_string().contains("echo edited > made.txt")),
        "{answers:?}"
    );
    wait_text(&b, "#feed [data-kind=assistant_text]", "made it");
    // Its last call was denied and it did nothing after: blocked, in words, not a green
    // "ended 0" (issue 21), with who denied what and why.
    wait_text(&b, "#turn-state", "blocked");
    wait_text(&b, "#phase-detail", "denied Bash: keep the file");
    let t = s.turn_ended(&turn);
    assert_eq!(t["status"], 0);
    assert_eq!(t["phase"], "blocked", "{t}");
    assert!(
        t["phase_detail"]
            .as_str()
            .is_some_and(|d| d.contains("@") && d.ends_with("denied Bash: keep the file")),
        "{t}"
    );
    assert!(
        s.work.path().join("made.txt").exists(),
        "the denied rm did not run"
    );
    let reqs = s.fake.requests();
    let denied = reqs[2].tool_results();
    assert!(
        denied
            .iter()
            .any(|(_, text, _)| text.contains("keep the file")),
        "the model gets the reason: {denied:?}"
    );
    wait_text(
        &b,
        "#feed [data-kind=approval_answered]",
        "denied by ada@example.com",
    );
    // The deny's reason, in the person's words, in the live view.
    wait_text(
        &b,
        "#feed [data-kind=approval_answered] .note",
        "keep the file",
    );
    shot(&b, "04-turn-done");

    // Every stored event is on the page, once.
    let stored: Vec<i64> = s
        .events(&run)
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    b.wait_js(
        "every event",
        "return document.querySelectorAll('#feed [data-event-id]').length >= arguments[0];",
        json!([stored.len()]),
        WAIT,
    )
    .unwrap();
    assert_eq!(shown_ids(&b), stored);

    // The timeline: one step per tree event, with the tree ids the driver wrote.
    // The timeline: the turn's start, its tool call, its end; each step with the tree id the
    // driver wrote for it (the tree lines, where the driver writes them).
    let trees: Vec<String> = s
        .events(&run)
        .iter()
        .filter(|e| e["kind"] == "tree")
        .map(|e| e["payload"]["tree"].as_str().unwrap().to_owned())
        .collect();
    b.click("a.tab[data-tab=timeline]").unwrap();
    wait_text(&b, "#timeline .step", "Bash: echo hi > made.txt");
    wait_text(&b, "#timeline .step", "Bash: rm made.txt");
    let steps = b
        .js(
            "return Array.from(document.querySelectorAll('#timeline .step')).map(e => [e.querySelector('strong').innerText, e.dataset.tree || null]);",
            json!([]),
        )
        .unwrap();
    let steps = steps.as_array().unwrap();
    assert_eq!(steps.len(), 4, "{steps:?}");
    // The driver hashes the tree at the start, after the edit that ran, and at the end; the
    // denied `rm` changed nothing, so it has none.
    assert_eq!(trees.len(), 3, "{trees:?}");
    assert!(
        steps[1][1].is_string() && steps[2][1].is_null(),
        "{steps:?}"
    );
    assert_eq!(steps[0][0], "turn start");
    assert_eq!(steps[3][0], "turn end");
    let shown_trees: Vec<String> = steps
        .iter()
        .filter_map(|s| s[1].as_str().map(str::to_owned))
        .collect();
    assert_eq!(shown_trees, trees);
    assert!(b.url().unwrap().ends_with("/timeline"));
    let numbers = b
        .js(
            "return Array.from(document.querySelectorAll('#timeline .step[data-step]')).map(e => e.dataset.step);",
            json!([]),
        )
        .unwrap();
    assert_eq!(numbers, json!(["0", "1", "2"]), "the API's step numbers");
    // A plain folder's trees are not trusted: each says why in a line, with a link to what
    // the uid split is (issue 21).
    let why = b
        .js(
            "const u = document.querySelector('#timeline .untrusted'); return u && [u.querySelector('.badge').title, u.querySelector('a').getAttribute('href')];",
            json!([]),
        )
        .unwrap();
    assert!(
        why[0].as_str().is_some_and(|t| t.contains("uid split")) && why[1] == "/ui/help#trust",
        "{why}"
    );
    shot(&b, "05-timeline");

    // Two steps ticked: the files that changed between them with their lines, and git's patch
    // (as text: the `<b>` the agent wrote stays text).
    b.click("#timeline .step[data-step='0'] .pick-step")
        .unwrap();
    b.click("#timeline .step[data-step='2'] .pick-step")
        .unwrap();
    let summary = wait_text(&b, "#diff-summary", "step 0 → step 2");
    assert!(summary.contains("1 file changed, +1 −0"), "{summary}");
    let (_, api_diff) = s.call("GET", &format!("/v1/runs/{run}/diff?from=0&to=2"), None);
    assert_eq!(
        api_diff["files"],
        json!([{"path": "made.txt", "added": 1, "deleted": 0}])
    );
    let row = b.text("#diff tr[data-path='made.txt']").unwrap();
    assert!(row.contains("+1") && row.contains("−0"), "{row}");
    let patch = b.text("#diff-patch").unwrap();
    assert!(
        patch.contains("+edited") && patch.contains("made.txt"),
        "{patch}"
    );
    assert_eq!(
        patch.trim_end(),
        api_diff["patch"].as_str().unwrap().trim_end()
    );
    // A third tick replaces the oldest: now steps 1 and 2 (nothing changed between them).
    b.click("#timeline .step[data-step='1'] .pick-step")
        .unwrap();
    wait_text(&b, "#diff-summary", "step 1 → step 2: 0 files changed");
    b.click("#timeline .step[data-step='0'] .pick-step")
        .unwrap();
    wait_text(&b, "#diff-summary", "step 0 → step 1: 1 file changed");
    shot(&b, "05b-diff");

    // Fork from step 1 (after the edit that ran) with a first message: the page shows the new
    // session and links to its first turn, whose model request holds the conversation up to
    // that step and not the denied `rm` after it.
    b.click("#timeline .step[data-step='1'] .fork-step")
        .unwrap();
    b.type_into(
        "#timeline .step[data-step='1'] .fork-prompt",
        "continue in the fork",
    )
    .unwrap();
    b.click("#timeline .step[data-step='1'] .fork-go").unwrap();
    let forked = wait_text(
        &b,
        "#timeline .fork-answer[data-outcome=done]",
        "forked: session",
    );
    assert!(forked.contains("untrusted"), "the warning shows: {forked}");
    shot(&b, "05c-forked");
    let (_, forks) = s.call("GET", &format!("/v1/runs/{run}/forks"), None);
    let fork = &forks["forks"][0];
    assert_eq!(fork["step"], 1);
    let dir = PathBuf::from(fork["dir"].as_str().unwrap());
    assert!(
        forked.contains(fork["session"].as_str().unwrap()),
        "{forked}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("made.txt")).unwrap(),
        "edited\n"
    );
    let out = s.hangar().arg("tree").arg(&dir).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), trees[1]);
    b.click("#timeline .fork-answer a.fork-link").unwrap();
    wait_text(&b, "#turn-head .prompt-text", "continue in the fork");
    wait_text(
        &b,
        "#feed [data-kind=assistant_text]",
        "went on in the fork",
    );
    wait_text(&b, "#feed [data-kind=turn_end]", "status 0");
    wait_text(&b, "#turn-state", "succeeded");
    wait_text(&b, "#turn-head .forked-from", "Forked from step 1");
    let sent = s.fake.requests().pop().unwrap();
    let calls: Vec<String> = sent.tool_calls().into_iter().map(|c| c.2).collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    // The model's own call (the person's edited input is what ran), and not the `rm`.
    assert!(calls[0].contains("echo hi > made.txt"), "{calls:?}");
    assert!(
        !sent.all_text().contains("keep the file"),
        "the denial came after step 1"
    );
    shot(&b, "05d-fork-first-turn");
    // The fork on the sessions page says where it came from.
    b.goto(&format!(
        "{}/ui/sessions?session={}",
        s.url,
        fork["session"].as_str().unwrap()
    ))
    .unwrap();
    let card = wait_text(&b, "#sessions .session", "Forked from step 1");
    assert!(card.contains("cut exactly there"), "{card}");
    shot(&b, "05e-fork-session");
    // The timeline with its controls fits a phone.
    b.resize(390, 844).unwrap();
    b.goto(&format!("{}/ui/turns/{turn}/timeline", s.url))
        .unwrap();
    wait_text(&b, "#timeline .step", "turn end");
    b.click("#timeline .step[data-step='0'] .pick-step")
        .unwrap();
    b.click("#timeline .step[data-step='1'] .pick-step")
        .unwrap();
    wait_text(&b, "#diff-summary", "step 0 → step 1");
    b.click("#timeline .step[data-step='2'] .fork-step")
        .unwrap();
    assert_eq!(
        b.js(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1;",
            json!([])
        )
        .unwrap(),
        json!(true),
        "the timeline overflows a phone"
    );
    shot(&b, "05f-phone-timeline");
    b.resize(1280, 900).unwrap();

    // A fork without a first message: the page links to the new session, whose card takes
    // its first prompt.
    b.click("#timeline .step[data-step='2'] .fork-go").unwrap();
    wait_text(
        &b,
        "#timeline .fork-answer[data-outcome=done]",
        "open the session",
    );
    b.click("#timeline .step[data-step='2'] .fork-answer a.fork-link")
        .unwrap();
    wait_text(&b, "#sessions .session", "Forked from step 2");
    b.type_into(
        "#sessions .first-prompt-form textarea",
        "first prompt from the card",
    )
    .unwrap();
    b.click("#sessions .first-prompt-form button").unwrap();
    wait_text(
        &b,
        "#feed [data-kind=assistant_text]",
        "the second fork answers",
    );
    b.goto(&format!("{}/ui/turns/{turn}/timeline", s.url))
        .unwrap();
    wait_text(&b, "#timeline .step", "turn end");

    // The manifest.
    b.click("a.tab[data-tab=manifest]").unwrap();
    let digest = t["manifest"]["harness_digest"].as_str().unwrap().to_owned();
    assert_eq!(digest.len(), 64);
    wait_text(&b, "#manifest", &digest);
    let m = b.text("#manifest").unwrap();
    assert!(m.contains("policy asked") && m.contains("ask"), "{m}");
    shot(&b, "06-manifest");

    // The audit records of the turn, and the chain check.
    b.click("a.tab[data-tab=audit]").unwrap();
    wait_text(
        &b,
        "#audit tr[data-action='approval.answered']",
        "ada@example.com",
    );
    wait_text(&b, "#audit tr[data-action='command.sent']", "approve");
    b.click("#audit button").unwrap();
    wait_text(&b, "#audit-verify[data-outcome=done]", "the chain holds");
    shot(&b, "07-audit");

    // A reload keeps the person signed in and lands on the same view.
    b.goto(&format!("{}/ui/turns/{turn}/audit", s.url)).unwrap();
    b.wait_for("#audit tr[data-action]", WAIT).unwrap();

    // On a phone-sized screen: the same views, nothing wider than the screen.
    b.resize(390, 844).unwrap();
    b.goto(&format!("{}/ui/turns/{turn}", s.url)).unwrap();
    wait_text(&b, "#feed [data-kind=turn_end]", "status 0");
    let fits = "return document.documentElement.scrollWidth <= window.innerWidth + 1;";
    assert_eq!(
        b.js(fits, json!([])).unwrap(),
        json!(true),
        "turn view overflows"
    );
    shot(&b, "08-phone-turn");
    b.goto(&format!("{}/ui/sessions", s.url)).unwrap();
    b.wait_for("#sessions .session", WAIT).unwrap();
    assert_eq!(
        b.js(fits, json!([])).unwrap(),
        json!(true),
        "sessions overflow"
    );
    shot(&b, "09-phone-sessions");

    // Signing out forgets the token.
    b.click("#signout").unwrap();
    b.wait_for("#signin", WAIT).unwrap();
    b.goto(&format!("{}/ui/sessions", s.url)).unwrap();
    b.wait_for("#signin", WAIT).unwrap();
}

#[test]
fn steer_send_the_next_prompt_and_interrupt_from_the_page() {
    // The first turn's tool call waits for a file the test writes once the steer is answered,
    // so the steer lands while the turn runs however loaded the machine is (a steer after the
    // turn ended would start the next turn instead).
    let s = Server::new(Script::new([
        bash("until [ -e release ]; do sleep 0.1; done"),
        Step::text("after the steer"),
        Step::slow_text(200, Duration::from_millis(300)),
    ]));
    let (turn, _run) = s.start_session("auto", "talk to me");
    let b = Browser::start(1280, 900).unwrap();
    s.sign_in(&b);
    b.goto(&format!("{}/ui/turns/{turn}", s.url)).unwrap();
    wait_text(&b, "#stream-state", "live");
    wait_text(&b, "#feed [data-kind=tool_call]", "until [ -e release ]");

    // A steer while the turn runs: the driver says done, and the model gets it next.
    b.type_into("#message", "STEER: from the page").unwrap();
    b.click("#send").unwrap();
    wait_text(&b, "#action-answer[data-outcome=done]", "done");
    std::fs::write(s.work.path().join("release"), "").unwrap();
    wait_text(&b, "#feed [data-kind=assistant_text]", "after the steer");
    wait_text(&b, "#feed [data-kind=turn_end]", "status 0");
    let reqs = s.fake.requests();
    assert!(
        reqs[1].all_text().contains("STEER: from the page"),
        "the steer did not reach the model next"
    );
    // The live view keeps the person's words and who sent them, not only "steer #2: done".
    let steered = wait_text(
        &b,
        "#feed [data-kind=command_acked]",
        "STEER: from the page",
    );
    assert!(steered.contains("from ada@example.com"), "{steered}");
    shot(&b, "10-steered");

    // The turn has ended: the box sends the next prompt, which starts the next turn.
    wait_text(&b, "#send", "next prompt");
    b.type_into("#message", "now a long one").unwrap();
    b.click("#send").unwrap();
    wait_text(&b, "#action-answer[data-outcome=next_turn]", "next turn");
    b.click("#action-answer a").unwrap();
    wait_text(&b, "#turn-head h1", "Turn #2");
    wait_text(&b, "#stream-state", "live");
    s.fake.wait_for_requests(3, WAIT).unwrap();
    let next = b.url().unwrap().rsplit('/').next().unwrap().to_owned();
    assert_ne!(next, turn);
    assert_eq!(s.turn(&next)["state"], "running");

    // The long answer appears as the model writes it (issue 21), not all at the end: its
    // first pieces are on the page while the turn runs, and more come after.
    let early = wait_text(&b, "#feed [data-kind=text_delta]", "chunk2");
    assert!(early.to_lowercase().contains("writing"), "{early}");
    assert!(!early.contains("chunk150"), "{early}");
    shot(&b, "10b-text-mid-stream");
    wait_text(&b, "#feed [data-kind=text_delta]", "chunk6");
    assert_eq!(s.turn(&next)["state"], "running");
    assert!(
        b.find("#feed [data-kind=assistant_text]")
            .unwrap()
            .is_none(),
        "the whole message came before the turn ended"
    );

    // Interrupt: the driver says done and the turn ends with 130.
    b.click("#interrupt").unwrap();
    wait_text(&b, "#action-answer[data-outcome=done]", "done");
    wait_text(&b, "#feed [data-kind=turn_end]", "status 130");
    wait_text(&b, "#turn-state", "interrupted");
    assert_eq!(s.turn_ended(&next)["status"], 130);
    // What the interrupt stopped and who sent it, in the feed and (from the API) in the head.
    let report = "interrupted by ada@example.com: stopped the answer to prompt #1";
    wait_text(&b, "#feed [data-kind=interrupted]", report);
    wait_text(&b, "#phase-detail", report);
    assert_eq!(s.turn_ended(&next)["phase_detail"], report);
    shot(&b, "11-interrupted");

    // A steer into the ended turn is answered "the turn has ended" (the page says so).
    b.js(
        "document.querySelector('#interrupt').hidden = false;",
        json!([]),
    )
    .unwrap();
    b.click("#interrupt").unwrap();
    wait_text(&b, "#action-answer[data-outcome=ended]", "ended");
}

/// Codex's answer as it streams (its `item/agentMessage/delta`s, the driver's `item.delta`
/// lines) shows on the page while the model writes it, as Claude Code's does, and a reload
/// shows the same (issue 21).
#[test]
fn codex_text_shows_on_the_page_as_the_model_writes_it() {
    let s = Server::with_codex(Script::new([Step::slow_text(
        60,
        Duration::from_millis(150),
    )]));
    let codex = s.codex.as_ref().unwrap();
    let (status, started) = s.call(
        "POST",
        "/v1/sessions",
        Some(
            json!({"no_sandbox": true, "dir": s.work.path(), "harness": "codex",
            "policy": "auto", "prompt": "talk for a while",
            "options": {"codex_config": codex_offline_config(&codex.base_url())}}),
        ),
    );
    assert_eq!(status, 201, "{started}");
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let b = Browser::start(1280, 900).unwrap();
    s.sign_in(&b);
    b.goto(&format!("{}/ui/turns/{turn}", s.url)).unwrap();
    let early = wait_text(&b, "#feed [data-kind=text_delta]", "chunk3");
    assert!(early.to_lowercase().contains("writing"), "{early}");
    assert!(!early.contains("chunk59"), "{early}");
    assert_eq!(s.turn(&turn)["state"], "running");
    assert!(
        b.find("#feed [data-kind=assistant_text]")
            .unwrap()
            .is_none(),
        "the whole message came before the turn ended"
    );
    shot(&b, "10c-codex-text-mid-stream");
    // The whole message then takes the streamed row's place, and the turn succeeds.
    wait_text(&b, "#feed [data-kind=assistant_text]", "chunk59");
    wait_text(&b, "#feed [data-kind=turn_end]", "status 0");
    assert_eq!(s.turn_ended(&turn)["phase"], "succeeded");
    // A reload (or a late viewer) sees the text the pieces made, from the stored events.
    b.goto(&format!("{}/ui/turns/{turn}", s.url)).unwrap();
    let again = wait_text(&b, "#feed [data-kind=assistant_text]", "chunk59");
    assert!(again.contains("chunk0 chunk1"), "{again}");
}

#[test]
fn a_command_the_driver_refuses_shows_its_reason_on_the_page_and_changes_nothing() {
    // The turn's one tool call waits for a file the test writes once both steers are answered,
    // so the turn is surely running when they arrive however slow the machine is (a timed
    // answer ran out under CI's load and the steer started the next turn instead).
    let s = Server::new(Script::new([
        bash("until [ -e release ]; do sleep 0.1; done"),
        Step::text("after the steer"),
    ]));
    let release = s.work.path().join("release");
    let (turn, run) = s.start_session("auto", "talk to me");
    let b = Browser::start(1280, 900).unwrap();
    s.sign_in(&b);
    b.goto(&format!("{}/ui/turns/{turn}", s.url)).unwrap();
    wait_text(&b, "#stream-state", "live");
    wait_text(&b, "#feed [data-kind=tool_call]", "until [ -e release ]");

    // A steer over the command size limit (a pasted log, say): the control plane signs it and
    // sends it, and the driver refuses it without reading it. The page shows the driver's answer
    // and why, and the refusal in the feed.
    let big = format!(
        "BIG-STEER {}",
        "x".repeat(hangar_protocol::MAX_COMMAND_BYTES as usize)
    );
    b.js(
        "document.querySelector('#message').value = arguments[0];",
        json!([big]),
    )
    .unwrap();
    b.click("#send").unwrap();
    let said = b
        .wait_js(
            "the driver's answer",
            "const a = document.querySelector('#action-answer'); return a && a.dataset.outcome && a.dataset.outcome !== 'pending' ? a.dataset.outcome + ': ' + a.innerText : null;",
            json!([]),
            WAIT,
        )
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert!(said.starts_with("refused: "), "{said}");
    assert!(
        said.contains(&format!(
            "larger than {} bytes",
            hangar_protocol::MAX_COMMAND_BYTES
        )),
        "{said}"
    );
    // The driver did not read it, so it cannot name its kind: the feed says what it refused.
    wait_text(
        &b,
        "#feed [data-kind=command_refused]",
        "larger than 1048576 bytes (too_large)",
    );
    shot(&b, "12-refused");

    // Nothing changed: the turn goes on, a steer of ordinary size is done, and the model never
    // saw the refused one.
    assert_eq!(s.turn(&turn)["state"], "running");
    b.type_into("#message", "STEER: a small one").unwrap();
    b.click("#send").unwrap();
    wait_text(&b, "#action-answer[data-outcome=done]", "done");
    std::fs::write(&release, "").unwrap();
    wait_text(&b, "#feed [data-kind=assistant_text]", "after the steer");
    assert_eq!(s.turn_ended(&turn)["status"], 0);
    let reqs = s.fake.requests();
    // Claude Code hands a steer that came during a tool call to the model beside the tool's
    // result, so look through the whole request.
    assert!(
        reqs.last()
            .unwrap()
            .all_text()
            .contains("STEER: a small one"),
        "the steer did not reach the model"
    );
    assert!(
        !reqs.iter().any(|r| r.all_text().contains("BIG-STEER")),
        "the refused steer reached the model"
    );
    // The stored events say the same: one refusal, of the steer, as too large.
    let refused: Vec<Value> = s
        .events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "command_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
}

#[test]
fn a_dropped_connection_resumes_from_the_last_event_without_gap_or_repeat() {
    let mut s = Server::new(Script::new([
        bash("echo one"),
        bash("echo two").delay(Duration::from_secs(2)),
        bash("echo three").delay(Duration::from_secs(3)),
        bash("echo four").delay(Duration::from_secs(3)),
        Step::text("all done").delay(Duration::from_secs(2)),
    ]));
    let (turn, run) = s.start_session("auto", "count");
    let b = Browser::start(1280, 900).unwrap();
    s.sign_in(&b);
    b.goto(&format!("{}/ui/turns/{turn}", s.url)).unwrap();
    wait_text(&b, "#feed [data-kind=tool_call]", "echo one");
    let before = shown_ids(&b);

    // The server dies: the page says it is reconnecting; the turn goes on without it.
    let addr = s.url.trim_start_matches("http://").to_owned();
    s.kill9();
    wait_text(&b, "#stream-state[data-state=reconnecting]", "reconnecting");
    shot(&b, "12-reconnecting");
    s.fake
        .wait_for_requests(3, WAIT)
        .expect("the turn goes on while the server is down");
    s.start(&addr);
    wait_text(&b, "#stream-state[data-state=live]", "live");
    wait_text(&b, "#feed [data-kind=turn_end]", "status 0");
    s.turn_ended(&turn);

    let stored: Vec<i64> = s
        .events(&run)
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    b.wait_js(
        "every event",
        "return document.querySelectorAll('#feed [data-event-id]').length >= arguments[0];",
        json!([stored.len()]),
        WAIT,
    )
    .unwrap();
    let shown = shown_ids(&b);
    assert!(before.iter().all(|id| shown.contains(id)));
    assert_eq!(shown, stored, "no gap, no repeat");
    // The server resumed from the page's Last-Event-ID: it sent nothing the page already had.
    assert_eq!(
        b.js(
            "return document.querySelector('#stream-state').dataset.repeats;",
            json!([])
        )
        .unwrap(),
        json!("0")
    );
    for n in ["one", "two", "three", "four"] {
        wait_text(&b, "#feed [data-kind=tool_call]", &format!("echo {n}"));
    }
    shot(&b, "13-resumed");
}

#[test]
fn a_job_started_from_the_page_shows_its_check_rounds_and_hook() {
    let s = Server::new(Script::new([
        Step::text("I am done"),
        Step::tool(
            "Bash",
            json!({"command": "touch fixed.txt", "description": "fix it"}),
        ),
        Step::text("fixed now"),
    ]));
    let b = Browser::start(1280, 900).unwrap();
    s.sign_in(&b);

    // Started from the page's form, with a check that fails until fixed.txt exists.
    b.click("details.card > summary").unwrap();
    b.type_into(
        "#new-session input[name=dir]",
        &s.work.path().display().to_string(),
    )
    .unwrap();
    b.js(
        "document.querySelector('#new-session select[name=policy]').value = 'auto';",
        json!([]),
    )
    .unwrap();
    b.type_into("#new-session textarea[name=prompt]", "do the job")
        .unwrap();
    b.type_into(
        "#new-session input[name=verify]",
        "if [ -f fixed.txt ]; then echo all good; else echo CHECK-FAILED; exit 1; fi",
    )
    .unwrap();
    b.type_into("#new-session input[name=max_verify_rounds]", "3")
        .unwrap();
    shot(&b, "14-start-a-session");
    b.click("#new-session button[type=submit]").unwrap();
    wait_text(&b, "#turn-head h1", "Turn #1");

    // The check's rounds, as they happen: feedback, then passed after the fix.
    wait_text(&b, "#feed [data-kind=verify]", "feedback");
    wait_text(&b, "#feed [data-kind=verify]", "CHECK-FAILED");
    wait_text(&b, "#feed [data-kind=verify]", "passed");
    wait_text(&b, "#feed [data-kind=turn_end]", "check passed");
    assert!(s.work.path().join("fixed.txt").exists());
    assert!(s.fake.requests()[1].all_text().contains("CHECK-FAILED"));
    // The form's session ran in the in-place local sandbox on the folder, as an API session
    // with only a folder does (never as the server's user).
    let (_, sessions) = s.call("GET", "/v1/sessions", None);
    let sb = sessions["sessions"][0]["sandbox_id"].as_str().unwrap();
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None);
    assert_eq!(v["sandbox"]["environment"], "in-place", "{v}");
    shot(&b, "15-check-rounds");

    // The manifest names the Stop hook that runs the check, with its digest.
    b.click("a.tab[data-tab=manifest]").unwrap();
    let m = wait_text(&b, "#manifest", "Stop: ");
    assert!(m.contains("stop-hook.sh"), "{m}");
}

/// Issue 21: a session whose turn waits for a person sorts first on the board (though older),
/// says `waiting for you` with its count, and "needs me" shows only it; the tab's title counts
/// it; an ended turn says how it ended in words. Desktop and phone widths, screenshots kept.
#[test]
fn the_board_puts_what_waits_for_you_first_and_filters_it() {
    let s = Server::new(Script::new([
        bash("echo waiting > w.txt"),
        Step::text("all done here"),
    ]));
    // The older session waits on its approval; the newer one ends at once.
    let (waiting_turn, _) = s.start_session("ask", "a session that waits for you");
    until("the request to wait", || {
        (s.turn(&waiting_turn)["phase"] == "waiting").then_some(())
    });
    std::thread::sleep(Duration::from_millis(20));
    let (done_turn, _) = s.start_session("auto", "a session that is done");
    let done = s.turn_ended(&done_turn);
    assert_eq!(done["phase"], "succeeded", "{done}");
    let waiting_ses = s.turn(&waiting_turn)["session_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let (_, board) = s.call("GET", "/v1/board", None);
    let rows = board["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{board}");
    assert_eq!(
        rows[0]["id"],
        waiting_ses.as_str(),
        "waiting first: {board}"
    );
    assert_eq!(
        (&rows[0]["phase"], &rows[0]["waiting"]),
        (&json!("waiting"), &json!(1))
    );
    assert_eq!(
        (&rows[1]["phase"], &rows[1]["waiting"]),
        (&json!("succeeded"), &json!(0))
    );

    // Short ids: a unique prefix names the session in any path; one that starts both is a 400
    // that names neither; without a token nothing is looked up (no answer tells ids apart).
    let (status, one) = s.call("GET", &format!("/v1/sessions/{}", &waiting_ses[..12]), None);
    assert_eq!(
        (status, &one["session"]["id"]),
        (200, &json!(waiting_ses)),
        "{one}"
    );
    let (status, info) = s.call("GET", &format!("/v1/ids/{}", &waiting_ses[4..14]), None);
    assert_eq!(
        (status, &info["kind"], &info["id"]),
        (200, &json!("session"), &json!(waiting_ses))
    );
    assert!(
        waiting_ses.starts_with(info["short"].as_str().unwrap()),
        "{info}"
    );
    let (status, both) = s.call("GET", "/v1/sessions/ses-", None);
    assert_eq!(status, 400, "{both}");
    let said = both["error"]["message"].as_str().unwrap();
    assert!(
        said.contains("more than one session") && !said.contains(&waiting_ses),
        "{said}"
    );
    let (status, _) = http_json("GET", &format!("{}/v1/sessions/ses-", s.url), None, None).unwrap();
    assert_eq!(status, 401);

    let b = Browser::start(1280, 900).unwrap();
    b.goto(&format!("{}/", s.url)).unwrap();
    b.wait_for("#signin", WAIT).unwrap();
    b.type_into("#token", &s.token).unwrap();
    b.click("#signin button[type=submit]").unwrap();
    wait_text(&b, "#sessions .session", "a session that is done");
    wait_text(&b, "#waiting-count", "1 waiting for you");
    let order = b
        .js(
            "return [...document.querySelectorAll('#sessions .session')].map(e => e.dataset.sessionId);",
            json!([]),
        )
        .unwrap();
    assert_eq!(order[0], waiting_ses.as_str(), "{order}");
    let first = b.text("#sessions .session").unwrap();
    assert!(first.contains("waiting for you"), "{first}");
    b.wait_js(
        "the title to count the request",
        "return document.title === '(1) hangar' ? true : null;",
        json!([]),
        WAIT,
    )
    .unwrap();
    shot(&b, "21-board-waiting-first");

    // "needs me": only what waits.
    b.click("#needs-me").unwrap();
    b.wait_js(
        "only the waiting session",
        "const s = document.querySelectorAll('#sessions .session'); return s.length === 1 && s[0].dataset.sessionId === arguments[0] ? true : null;",
        json!([waiting_ses]),
        WAIT,
    )
    .unwrap();
    shot(&b, "21-board-needs-me");
    b.click("#needs-me").unwrap();
    wait_text(&b, "#sessions", "a session that is done");
    let done_badge = b
        .js(
            "return document.querySelector(`#sessions .session:nth-child(2) [data-phase]`).innerText;",
            json!([]),
        )
        .unwrap();
    assert_eq!(done_badge, "succeeded");

    // Search by words, and filter by state: only what matches.
    let listed = |b: &Browser| {
        b.js(
            "return [...document.querySelectorAll('#sessions .session')].map(e => e.dataset.sessionId);",
            json!([]),
        )
        .unwrap()
        .as_array()
        .unwrap()
        .len()
    };
    b.type_into("#board-search", "waits for").unwrap();
    b.wait_js(
        "the search to keep one session",
        "return document.querySelectorAll('#sessions .session').length === 1 && document.querySelector('#sessions .session').dataset.sessionId === arguments[0] ? true : null;",
        json!([waiting_ses]),
        WAIT,
    )
    .unwrap();
    b.js(
        "const s = document.querySelector('#board-search'); s.value = ''; s.dispatchEvent(new Event('input'));",
        json!([]),
    )
    .unwrap();
    assert_eq!(listed(&b), 2);
    b.js(
        "const s = document.querySelector('#filter-state'); s.value = 'succeeded'; s.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .unwrap();
    assert_eq!(listed(&b), 1);
    wait_text(&b, "#sessions .session", "a session that is done");
    b.js(
        "const s = document.querySelector('#filter-state'); s.value = ''; s.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .unwrap();
    assert_eq!(listed(&b), 2);

    // A phone: the same order and count, and nothing wider than the screen.
    b.resize(390, 844).unwrap();
    wait_text(&b, "#waiting-count", "1 waiting for you");
    let wide = b
        .js(
            "return [document.documentElement.scrollWidth, window.innerWidth];",
            json!([]),
        )
        .unwrap();
    assert!(
        wide[0].as_i64() <= wide[1].as_i64(),
        "scrolls sideways: {wide}"
    );
    shot(&b, "21-phone-board-waiting-first");

    // Where trust shows, it is explained: the help page says what the uid split is.
    b.resize(1280, 900).unwrap();
    b.goto(&format!("{}/ui/help#trust", s.url)).unwrap();
    wait_text(&b, "#trust", "uid split");

    // The whole audit log, not only a turn's, newest first, filtered by words (an admin's).
    b.click("#audit-link").unwrap();
    wait_text(&b, "#audit-list table.audit", "session.started");
    let seqs = b
        .js(
            "return [...document.querySelectorAll('#audit-list tbody tr')].map(r => Number(r.dataset.seq));",
            json!([]),
        )
        .unwrap();
    let seqs: Vec<i64> = seqs
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert!(
        seqs.len() > 2 && seqs.windows(2).all(|w| w[0] > w[1]),
        "{seqs:?}"
    );
    b.type_into("#audit-search", "session.started").unwrap();
    b.wait_js(
        "only session.started records",
        "const r = [...document.querySelectorAll('#audit-list tbody tr')]; return r.length === 2 && r.every(x => x.dataset.action === 'session.started') ? true : null;",
        json!([]),
        WAIT,
    )
    .unwrap();
    b.click("#audit-verify-button").unwrap();
    wait_text(&b, "#audit-verify", "the chain holds");
    shot(&b, "21-audit");
}
