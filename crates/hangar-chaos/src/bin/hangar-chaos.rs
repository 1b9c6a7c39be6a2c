//! `hangar-chaos [N] [--seed S] [--postgres] [--harness claude|codex|both]`: N real turns
//! (default 50) of the real Claude Code and Codex CLIs (`both`, the default: sessions alternate
//! between them; Codex as the driver runs it, `app-server --disable plugins` with hangar-testkit's
//! model provider) under the real driver and a real `hangar serve` (SQLite, or PostgreSQL from
//! `HANGAR_TEST_DATABASE_URL` with `--postgres`), the model scripted by hangar-testkit's fakes,
//! while things are killed with SIGKILL at random points (one per turn, chosen by the seed):
//!
//! * `hangar serve` while the model streams, with an approval pending (answered after the
//!   restart), with a steer in flight (the HTTP request cut off by the kill), and as the turn
//!   ends (the driver's `hangar.turn_end` written, not yet stored); each time it is started again;
//! * the driver, then a message is sent: the turn must end reported as the driver's stop
//!   (status -1) and the message start the next turn;
//! * the harness (its process group), then a message is sent: the turn must end
//!   `harness_exited` (status 1) and the message, handed back by the driver, start the next turn;
//! * the harness while it holds a steer it accepted but never began (sent while an approval is
//!   pending): the steer, handed back, must start the next turn, and reach the model once.
//!
//! Then it checks every run: its stored events equal a rebuild of its log (no event lost or
//! stored twice), no permission request of a turn that ended normally is left pending, every
//! recorded command has its answer (acked, refused, or reported as not landed), every steer the
//! harness received is recorded, every message sent after a kill (or held by a killed harness)
//! started exactly one later turn and no model request has it twice, every turn ended with the
//! status its kill calls for, and each turn's token totals equal the sum of its log's usage. It
//! prints the counts per harness and exits 1 on any violation. The seed is printed first: `hangar-chaos N --seed S` replays the same choices.
#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool reports on stdout/stderr"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hangar_chaos::{
    Api, Env, PgSchema, Res, Rng, Serve, alive, check_events, err, exe, kill, kill_group, rebuild,
};
use hangar_store::Store;
use hangar_testkit::{
    FakeAnthropic, FakeOpenAi, RecordedRequest, Script, Step, claude_bin, claude_env, codex_bin,
    codex_env, codex_offline_args,
};
use serde_json::{Value, json};

const USAGE: &str = "usage: hangar-chaos [N] [--seed S] [--postgres] [--harness claude|codex|both]";

/// The harness CLI a session runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum H {
    Claude,
    Codex,
}

impl H {
    fn name(self) -> &'static str {
        match self {
            H::Claude => "claude",
            H::Codex => "codex",
        }
    }

    /// A run-log line that says the harness's work is done (a kill after it is too late).
    fn done_line(self) -> &'static str {
        match self {
            H::Claude => "\"type\":\"result\"",
            H::Codex => "\"type\":\"turn.completed\"",
        }
    }
}

/// Where a turn gets its kill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Point {
    None,
    Streaming,
    Approval,
    Steer,
    Ending,
    Driver,
    Harness,
    HarnessHeld,
}

const POINTS: [Point; 8] = [
    Point::None,
    Point::Streaming,
    Point::Approval,
    Point::Steer,
    Point::Ending,
    Point::Driver,
    Point::Harness,
    Point::HarnessHeld,
];

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::None => "no kill",
            Point::Streaming => "serve: streaming",
            Point::Approval => "serve: approval pending",
            Point::Steer => "serve: steer in flight",
            Point::Ending => "serve: turn ending",
            Point::Driver => "driver",
            Point::Harness => "harness",
            Point::HarnessHeld => "harness: steer held",
        }
    }
}

fn main() -> ExitCode {
    let mut n = 50usize;
    let mut seed = None;
    let mut postgres = false;
    let mut harnesses = vec![H::Claude, H::Codex];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--harness" => match args.next().as_deref() {
                Some("claude") => harnesses = vec![H::Claude],
                Some("codex") => harnesses = vec![H::Codex],
                Some("both") => harnesses = vec![H::Claude, H::Codex],
                _ => return usage(),
            },
            "--seed" => match args.next().and_then(|v| v.parse().ok()) {
                Some(s) => seed = Some(s),
                None => return usage(),
            },
            "--postgres" => postgres = true,
            other => match other.parse() {
                Ok(v) if v > 0 => n = v,
                _ => return usage(),
            },
        }
    }
    let seed = seed.unwrap_or_else(Rng::fresh_seed);
    println!("chaos: seed {seed} (replay: scripts/chaos {n} --seed {seed})");
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hangar-chaos: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(chaos(n, seed, postgres, &harnesses)) {
        Ok(0) => {
            println!("chaos: ok");
            ExitCode::SUCCESS
        }
        Ok(v) => {
            println!("chaos: FAILED ({v} violations; replay: scripts/chaos {n} --seed {seed})");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("hangar-chaos: {e} (replay: scripts/chaos {n} --seed {seed})");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

/// The fake models' answer to any request (Anthropic's for Claude Code, Responses for Codex): a
/// tool call for a turn's prompt (`Bash` / `exec_command`), a slow text after a tool result or
/// for a message (a steer, or a message a turn starts with). The prompt is looked at first: a
/// Codex thread resumed after a kill replays the killed call with an output before it.
fn respond(r: &RecordedRequest) -> Step {
    let text = r.newest_input_text();
    if let Some(tag) = text
        .split_whitespace()
        .skip_while(|w| *w != "CHAOS-TOOL")
        .nth(1)
    {
        let command = format!("echo {tag} >> chaos.txt");
        return if r.is_responses() {
            Step::exec(command)
        } else {
            Step::tool(
                "Bash",
                json!({"command": command, "description": "note the turn"}),
            )
        };
    }
    if r.last_user_has_tool_result() {
        return Step::text("the tool ran; here is a summary of what it did, streamed slowly")
            .chunks(14)
            .chunk_delay(Duration::from_millis(45));
    }
    Step::text("noted")
        .chunks(6)
        .chunk_delay(Duration::from_millis(40))
}

/// The whole run's state.
struct Chaos {
    env: Env,
    serve: Serve,
    api: Api,
    store: Store,
    fake: FakeAnthropic,
    fake_codex: FakeOpenAi,
    /// Codex's `-c` settings for its sessions (the fake provider).
    codex_config: Vec<String>,
    rng: Rng,
    restarts: usize,
    answered_after_restart: usize,
    /// Each session's harness.
    harness_of: BTreeMap<String, H>,
    /// Kills done, by harness and point (a kill that came too late, after the harness's work was
    /// done, is `late`).
    kills: BTreeMap<(H, Point), usize>,
    /// Turns by harness and the point chosen for them.
    chosen: BTreeMap<(H, Point), usize>,
    late: BTreeMap<H, usize>,
    /// What failed, with the harness of the session it concerns.
    violations: Vec<(H, String)>,
    /// Steers sent: (session, text, what the API said).
    steers: Vec<(String, String, String)>,
    /// Messages sent after a driver or harness kill, or held by a killed harness, each of which
    /// must start exactly one later turn: (session, text).
    must_reach: Vec<(String, String)>,
    /// Every run seen, and the status its turn must end with (None: any the log explains).
    runs: Vec<RunSeen>,
    /// The PostgreSQL schema of `--postgres`, dropped last (after the store's connections).
    _pg: Option<PgSchema>,
}

struct RunSeen {
    harness: H,
    session: String,
    run: String,
    turn: String,
    want: Want,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// Status 0.
    Ok,
    /// The driver was killed: -1, reported as the driver's stop.
    DriverStopped,
    /// The harness was killed: 1, `harness_exited`.
    HarnessExited,
    /// A turn the control plane started with handed-back messages: 0.
    HandedBack,
}

async fn chaos(n: usize, seed: u64, postgres: bool, harnesses: &[H]) -> Res<usize> {
    let mut c = Chaos::start(n, seed, postgres, harnesses).await?;
    // Turns go round a few sessions, one turn at a time (the fake model answers in order); with
    // both harnesses, sessions alternate between them.
    let sessions = n.div_ceil(5).max(1);
    let mut ids: Vec<Option<String>> = vec![None; sessions];
    let started = Instant::now();
    c.drive(n, harnesses, &mut ids, started).await?;
    let checked = match c.check_all(&ids).await {
        Ok(x) => x,
        Err(e) => {
            c.keep();
            return Err(e);
        }
    };
    if !c.violations.is_empty() {
        c.keep();
    }
    c.serve.stop();
    c.report(n, harnesses, &checked, started);
    Ok(c.violations.len())
}

impl Chaos {
    /// The fakes, the harness settings, the store and a `hangar serve` for `n` turns.
    async fn start(n: usize, seed: u64, postgres: bool, harnesses: &[H]) -> Res<Chaos> {
        let driver = exe("HANGAR_DRIVER_BIN", "hangar-driver")?;
        let claude = claude_bin().map_err(|e| e.to_string())?;
        let codex = codex_bin().map_err(|e| e.to_string())?;
        let fake = FakeAnthropic::start(Script::new([]).responder(respond))
            .map_err(err("the fake model"))?;
        let fake_codex = FakeOpenAi::start(Script::new([]).responder(respond))
            .map_err(err("the fake Responses model"))?;
        let pg = if postgres {
            let base = std::env::var("HANGAR_TEST_DATABASE_URL").map_err(|_| {
                "--postgres: HANGAR_TEST_DATABASE_URL is not set (url=$(scripts/start-postgres) && export \"$url\")".to_owned()
            })?;
            Some(PgSchema::new(&base, "chaos")?)
        } else {
            None
        };
        let env0 = Env::new(Vec::new())?;
        let config = env0.root.path().join("claude-config");
        std::fs::create_dir_all(&config).map_err(err("claude's config folder"))?;
        let codex_home = env0.root.path().join("codex-home");
        std::fs::create_dir_all(&codex_home).map_err(err("codex's home"))?;
        let mut vars = vec![
            ("HANGAR_DRIVER_BIN".to_owned(), driver.display().to_string()),
            ("HANGAR_CLAUDE_BIN".to_owned(), claude.display().to_string()),
            ("HANGAR_CODEX_BIN".to_owned(), codex.display().to_string()),
        ];
        vars.extend(claude_env(&fake.base_url(), &config));
        vars.extend(codex_env(&codex_home));
        // The driver adds `--disable plugins` itself; these are the fake provider's settings.
        let codex_config: Vec<String> = codex_offline_args(&fake_codex.base_url())
            .chunks(2)
            .filter(|p| p[0] == "-c")
            .map(|p| p[1].clone())
            .collect();
        if let Some(s) = &pg {
            vars.push(("HANGAR_DATABASE_URL".to_owned(), s.url()));
        }
        let env = Env { vars, ..env0 };
        let token = env.admin_token("chaos@example.com")?;
        let database = match &pg {
            Some(s) => s.url(),
            None => format!("sqlite://{}", env.home().join("hangar.db").display()),
        };
        let store = Store::open(&database)
            .await
            .map_err(err("open the store"))?;
        let serve = Serve::start(&env, &[], &env.root.path().join("serve.log"))?;
        let api = Api::new(&serve.url, &token)?;
        let names: Vec<String> = harnesses
            .iter()
            .map(|h| match h {
                H::Claude => format!("Claude Code {}", hangar_testkit::CLAUDE_CODE_VERSION),
                H::Codex => format!("Codex {}", hangar_testkit::CODEX_VERSION),
            })
            .collect();
        println!(
            "chaos: {n} turns of {} (policy ask) under {} on {}; hangar serve's log: {}",
            names.join(" and "),
            driver.display(),
            if pg.is_some() { "PostgreSQL" } else { "SQLite" },
            serve.log.display()
        );
        Ok(Chaos {
            env,
            serve,
            api,
            store,
            fake,
            fake_codex,
            codex_config,
            rng: Rng::new(seed),
            restarts: 0,
            answered_after_restart: 0,
            harness_of: BTreeMap::new(),
            kills: BTreeMap::new(),
            chosen: BTreeMap::new(),
            late: BTreeMap::new(),
            violations: Vec::new(),
            steers: Vec::new(),
            must_reach: Vec::new(),
            runs: Vec::new(),
            _pg: pg,
        })
    }

    /// `n` turns round the sessions of `ids`, each with the kill the seed chooses; stops at
    /// the first turn that cannot be followed.
    async fn drive(
        &mut self,
        n: usize,
        harnesses: &[H],
        ids: &mut [Option<String>],
        started: Instant,
    ) -> Res<()> {
        let sessions = ids.len();
        for t in 0..n {
            let s = t % sessions;
            let h = harnesses[s % harnesses.len()];
            let point = POINTS[self.rng.below(POINTS.len() as u64) as usize];
            *self.chosen.entry((h, point)).or_default() += 1;
            let dir = self.env.root.path().join(format!("work-{s}"));
            std::fs::create_dir_all(&dir).map_err(err("a work folder"))?;
            if verbose() {
                println!(
                    "chaos: turn {t} (session {s}, {}): {}",
                    h.name(),
                    point.name()
                );
            }
            let res = self.turn(t, &dir, &mut ids[s], h, point).await;
            if let Err(e) = res {
                println!(
                    "chaos: turn {t} ({} {}) failed: {e}",
                    h.name(),
                    point.name()
                );
                self.violations
                    .push((h, format!("turn {t} ({} {}): {e}", h.name(), point.name())));
                // The run can no longer be followed: stop here with what is known.
                break;
            }
            if (t + 1) % 10 == 0 {
                println!(
                    "chaos: {} turns done ({:.0} s)",
                    t + 1,
                    started.elapsed().as_secs_f64()
                );
            }
        }
        Ok(())
    }

    /// The counts per kill point and harness, and the violations.
    fn report(&self, n: usize, harnesses: &[H], checked: &Checked, started: Instant) {
        let c = self;
        let turns = c.runs.len();
        println!(
            "chaos: {n} turns driven, {turns} runs in all (turns started with handed-back messages included) in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        let mut head = format!("  {:<26}", "kill point");
        for h in harnesses {
            head += &format!("  {:>7}: turns kills", h.name());
        }
        println!("{head}");
        let count =
            |m: &BTreeMap<(H, Point), usize>, h: H, p: Point| m.get(&(h, p)).copied().unwrap_or(0);
        for p in POINTS {
            let mut row = format!("  {:<26}", p.name());
            for h in harnesses {
                row += &format!(
                    "  {:>7}  {:>5} {:>5}",
                    "",
                    count(&c.chosen, *h, p),
                    count(&c.kills, *h, p)
                );
            }
            println!("{row}");
        }
        for h in harnesses {
            let runs = c.runs.iter().filter(|r| r.harness == *h).count();
            let turns: usize = POINTS.iter().map(|p| count(&c.chosen, *h, *p)).sum();
            let kills: usize = POINTS.iter().map(|p| count(&c.kills, *h, *p)).sum();
            println!(
                "  {:<7} {turns} turns driven, {runs} runs, {kills} kills, {} too late (after its work was done; the turn must end normally), {} mismatches",
                h.name(),
                c.late.get(h).copied().unwrap_or(0),
                c.violations.iter().filter(|v| v.0 == *h).count()
            );
        }
        println!("  hangar serve restarts       {}", c.restarts);
        println!(
            "  events checked              {} (stored = rebuilt from the run logs)",
            checked.events
        );
        println!(
            "  approvals answered after a restart {}",
            checked.answered_after_restart
        );
        println!(
            "  commands checked            {} (acked {}, not landed {})",
            checked.commands, checked.acked, checked.not_landed
        );
        println!(
            "  steers: {} sent ({} cut off by a kill)",
            c.steers.len(),
            c.steers
                .iter()
                .filter(|s| s.2.starts_with("transport"))
                .count()
        );
        println!(
            "  messages handed to exactly one next turn {}/{}",
            checked.reached,
            c.must_reach.len()
        );
        println!(
            "  turns whose token totals equal their log's usage {}/{}",
            checked.usage_ok,
            c.runs.len()
        );
        println!(
            "  model requests               {} (Anthropic {}, Responses {})",
            c.fake.requests().len() + c.fake_codex.requests().len(),
            c.fake.requests().len(),
            c.fake_codex.requests().len()
        );
        println!("  mismatches                   {}", c.violations.len());
        for (h, v) in c.violations.iter().take(30) {
            println!("  VIOLATION ({}) {v}", h.name());
        }
    }
}

#[derive(Default)]
struct Checked {
    usage_ok: usize,
    events: usize,
    commands: usize,
    acked: usize,
    not_landed: usize,
    reached: usize,
    answered_after_restart: usize,
}

fn verbose() -> bool {
    std::env::var_os("HANGAR_CHAOS_VERBOSE").is_some_and(|v| v != "0")
}

impl Chaos {
    /// Keeps the run's folder (logs, run logs, database) for a look after a failure.
    fn keep(&mut self) {
        let root = self.env.root.path().to_owned();
        let dummy = tempfile::Builder::new()
            .prefix("hangar-chaos-kept-")
            .tempdir();
        if let Ok(d) = dummy {
            let old = std::mem::replace(&mut self.env.root, d);
            let _ = old.keep();
            println!("chaos: kept {} for a look", root.display());
        }
    }

    async fn restart(&mut self) -> Res<()> {
        self.serve.kill9();
        let log = self.serve.log.clone();
        self.serve = Serve::start(&self.env, &[], &log)?;
        self.api = self.api.at(&self.serve.url);
        self.restarts += 1;
        Ok(())
    }

    fn killed(&mut self, h: H, p: Point) {
        *self.kills.entry((h, p)).or_default() += 1;
    }

    /// Every model request so far, of both fakes.
    fn requests(&self) -> Vec<RecordedRequest> {
        let mut r = self.fake.requests();
        r.extend(self.fake_codex.requests());
        r
    }

    /// Waits for `f` to give a value, up to `secs`.
    async fn until<T>(
        &self,
        what: &str,
        secs: u64,
        mut f: impl AsyncFnMut() -> Res<Option<T>>,
    ) -> Res<T> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = f().await? {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(format!("timed out after {secs} s waiting for {what}"));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Every turn of a session, oldest first.
    async fn turns(&self, session: &str) -> Res<Vec<Value>> {
        Ok(
            self.api.get(&format!("/v1/sessions/{session}")).await?["turns"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        )
    }

    /// Waits until no turn of the session runs (turns started with handed-back messages
    /// included), and records the runs not seen yet.
    async fn settle(&mut self, session: &str) -> Res<()> {
        let turns = self
            .until("the session's turns to end", 120, async || {
                let turns = self.turns(session).await?;
                let busy = turns
                    .iter()
                    .any(|t| t["state"] != "ended" && t["state"] != "refused");
                Ok((!busy).then_some(turns))
            })
            .await?;
        for t in turns {
            let run = t["run_id"].as_str().unwrap_or_default().to_owned();
            if !run.is_empty() && !self.runs.iter().any(|r| r.run == run) {
                self.runs.push(RunSeen {
                    harness: self.harness_of.get(session).copied().unwrap_or(H::Claude),
                    session: session.to_owned(),
                    run,
                    turn: t["id"].as_str().unwrap_or_default().to_owned(),
                    want: Want::HandedBack,
                });
            }
        }
        Ok(())
    }

    /// The driver's and the harness's pids, from the run's `hangar.started` line.
    fn pids(&self, run: &str) -> Option<(u32, u32)> {
        let log = std::fs::read_to_string(self.env.ctl(run).join("run.log")).ok()?;
        let line = log.lines().find(|l| l.contains("\"hangar.started\""))?;
        let v: Value = serde_json::from_str(line).ok()?;
        Some((
            u32::try_from(v["driver_pid"].as_u64()?).ok()?,
            u32::try_from(v["harness_pid"].as_u64()?).ok()?,
        ))
    }

    fn log_has(&self, run: &str, needle: &str) -> bool {
        std::fs::read_to_string(self.env.ctl(run).join("run.log")).is_ok_and(|l| l.contains(needle))
    }

    /// One turn with its kill.
    async fn turn(
        &mut self,
        t: usize,
        dir: &Path,
        session: &mut Option<String>,
        h: H,
        point: Point,
    ) -> Res<()> {
        let prompt = format!("CHAOS-TOOL t{t} run the tool");
        let (sid, run, turn) = match session.as_deref() {
            None => {
                let started = self.first_turn(dir, h, &prompt).await?;
                *session = Some(started.0.clone());
                started
            }
            Some(sid) => self.next_turn(t, sid, &prompt).await?,
        };
        // The permission request for the tool call.
        let rid = self
            .until("the permission request", 90, async || {
                let a = self.api.get(&format!("/v1/runs/{run}/approvals")).await?;
                Ok(a["approvals"][0]["request_id"].as_str().map(str::to_owned))
            })
            .await?;
        if point == Point::HarnessHeld {
            self.kill_holding_harness(t, h, &sid, &run).await?;
            self.runs.push(RunSeen {
                harness: h,
                session: sid.clone(),
                run,
                turn,
                want: Want::HarnessExited,
            });
            return self.settle(&sid).await;
        }
        self.approve(h, point, &run, &rid).await?;
        // The tool runs and the model streams its summary (about 0.6 s).
        let want = match point {
            Point::None | Point::Approval | Point::HarnessHeld => Want::Ok,
            Point::Streaming => {
                tokio::time::sleep(self.rng.ms(0, 600)).await;
                self.restart().await?;
                self.killed(h, point);
                Want::Ok
            }
            Point::Steer => {
                self.steer_across_restart(t, h, point, &sid, &run).await?;
                Want::Ok
            }
            Point::Ending => {
                self.restart_as_it_ends(h, point, &run).await?;
                Want::Ok
            }
            Point::Driver | Point::Harness => {
                self.kill_and_message(t, h, point, &sid, &run).await?
            }
        };
        self.runs.push(RunSeen {
            harness: h,
            session: sid.clone(),
            run,
            turn,
            want,
        });
        self.settle(&sid).await
    }

    /// A new session with harness `h` in `dir`: its id, its first run and turn.
    async fn first_turn(
        &mut self,
        dir: &Path,
        h: H,
        prompt: &str,
    ) -> Res<(String, String, String)> {
        let mut body = json!({"dir": dir, "no_sandbox": true, "policy": "ask", "harness": h.name(), "prompt": prompt});
        if h == H::Codex {
            body["options"] = json!({"codex_config": self.codex_config});
        }
        let (s, v) = self.api.call("POST", "/v1/sessions", Some(&body)).await?;
        if s != 201 {
            return Err(format!("start a session: {s} {v}"));
        }
        let sid = v["session"]["id"].as_str().unwrap_or_default().to_owned();
        self.harness_of.insert(sid.clone(), h);
        Ok((
            sid,
            v["run"]["id"].as_str().unwrap_or_default().to_owned(),
            v["turn"]["id"].as_str().unwrap_or_default().to_owned(),
        ))
    }

    /// A message that starts session `sid`'s next turn, once its turns have ended: the
    /// session, the run and the turn.
    async fn next_turn(
        &mut self,
        t: usize,
        sid: &str,
        prompt: &str,
    ) -> Res<(String, String, String)> {
        let sid = sid.to_owned();
        self.settle(&sid).await?;
        let (s, v) = self
            .api
            .call(
                "POST",
                &format!("/v1/sessions/{sid}/messages"),
                Some(&json!({"text": prompt})),
            )
            .await?;
        if s != 200 || v["outcome"] != "next_turn" {
            return Err(format!("start turn {t}: {s} {v}"));
        }
        Ok((
            sid,
            v["run"].as_str().unwrap_or_default().to_owned(),
            v["turn"].as_str().unwrap_or_default().to_owned(),
        ))
    }

    /// `Point::HarnessHeld`: a steer while the approval is pending, which the harness takes
    /// and holds (Claude Code queues it, Codex keeps it for after the command); then the
    /// harness is killed.
    async fn kill_holding_harness(&mut self, t: usize, h: H, sid: &str, run: &str) -> Res<()> {
        let text = format!("CHAOS-HELD t{t} and mention the weather");
        let (s, v) = self
            .api
            .call(
                "POST",
                &format!("/v1/runs/{run}/steer"),
                Some(&json!({"text": text})),
            )
            .await?;
        self.steers
            .push((sid.to_owned(), text.clone(), format!("{s} {v}")));
        self.must_reach.push((sid.to_owned(), text));
        tokio::time::sleep(self.rng.ms(100, 500)).await;
        let Some((_, harness)) = self.pids(run) else {
            return Err(format!("run {run}: no hangar.started line"));
        };
        kill_group(harness, libc::SIGKILL);
        self.killed(h, Point::HarnessHeld);
        Ok(())
    }

    /// Allows the pending request `rid` (`Point::Approval`: after a restart, which must still
    /// list it).
    async fn approve(&mut self, h: H, point: Point, run: &str, rid: &str) -> Res<()> {
        let mut answered_after_restart = false;
        if point == Point::Approval {
            tokio::time::sleep(self.rng.ms(0, 200)).await;
            self.restart().await?;
            self.killed(h, point);
            let a = self.api.get(&format!("/v1/runs/{run}/approvals")).await?;
            if a["approvals"][0]["request_id"].as_str() != Some(rid) {
                self.violations.push((
                    h,
                    format!(
                        "run {run}: the pending approval {rid} is not listed after the restart: {a}"
                    ),
                ));
            }
            answered_after_restart = true;
        }
        let (s, v) = self
            .api
            .call(
                "POST",
                &format!("/v1/runs/{run}/approvals/{rid}"),
                Some(&json!({"decision": "allow"})),
            )
            .await?;
        if s != 200 || v["outcome"] != "done" {
            self.violations.push((
                h,
                format!(
                    "run {run}: answering {rid}{}: {s} {v}",
                    if answered_after_restart {
                        " after the restart"
                    } else {
                        ""
                    }
                ),
            ));
        } else if answered_after_restart {
            self.answered_after_restart += 1;
        }
        Ok(())
    }

    /// `Point::Steer`: a steer whose HTTP request the restart of `hangar serve` cuts off.
    async fn steer_across_restart(
        &mut self,
        t: usize,
        h: H,
        point: Point,
        sid: &str,
        run: &str,
    ) -> Res<()> {
        tokio::time::sleep(self.rng.ms(50, 400)).await;
        let text = format!("CHAOS-STEER t{t} also mention the weather");
        let api = self.api.clone();
        let path = format!("/v1/runs/{run}/steer");
        let body = json!({"text": text});
        let call = tokio::spawn(async move { api.call("POST", &path, Some(&body)).await });
        tokio::time::sleep(self.rng.ms(0, 40)).await;
        self.restart().await?;
        self.killed(h, point);
        let said = match call.await {
            Ok(Ok((s, v))) => format!("{s} {v}"),
            Ok(Err(e)) => format!("transport: {e}"),
            Err(e) => format!("transport: {e}"),
        };
        self.steers.push((sid.to_owned(), text, said));
        Ok(())
    }

    /// `Point::Ending`: `hangar serve` restarted once the driver wrote `hangar.turn_end`.
    async fn restart_as_it_ends(&mut self, h: H, point: Point, run: &str) -> Res<()> {
        let log = self.env.ctl(run).join("run.log");
        let deadline = Instant::now() + Duration::from_secs(90);
        while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("\"hangar.turn_end\"")) {
            if Instant::now() > deadline {
                return Err("timed out waiting for hangar.turn_end".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.restart().await?;
        self.killed(h, point);
        Ok(())
    }

    /// `Point::Driver` or `Point::Harness`: the driver or the harness killed, unless its work
    /// is done already, and a message sent right after, which must reach a later turn; how
    /// the turn must end.
    async fn kill_and_message(
        &mut self,
        t: usize,
        h: H,
        point: Point,
        sid: &str,
        run: &str,
    ) -> Res<Want> {
        tokio::time::sleep(self.rng.ms(0, 500)).await;
        let Some((driver, harness)) = self.pids(run) else {
            return Err(format!("run {run}: no hangar.started line"));
        };
        if self.log_has(run, h.done_line()) {
            // Too late: the harness's work is done; the turn ends normally.
            *self.late.entry(h).or_default() += 1;
            return Ok(Want::Ok);
        }
        if point == Point::Driver {
            kill(driver, libc::SIGKILL);
        } else {
            // The harness's process group (Codex: the npm wrapper and the binary).
            kill_group(harness, libc::SIGKILL);
        }
        self.killed(h, point);
        let want = if point == Point::Driver {
            Want::DriverStopped
        } else {
            Want::HarnessExited
        };
        // A message right after: it must reach a later turn.
        let text = format!(
            "CHAOS-AFTER-{} t{t} carry on",
            if point == Point::Driver {
                "DRIVER"
            } else {
                "HARNESS"
            }
        );
        let (s, v) = self
            .api
            .call(
                "POST",
                &format!("/v1/runs/{run}/steer"),
                Some(&json!({"text": text})),
            )
            .await?;
        self.steers
            .push((sid.to_owned(), text.clone(), format!("{s} {v}")));
        self.must_reach.push((sid.to_owned(), text));
        if point == Point::Driver {
            // The harness goes with its driver (its stdin closed); make sure.
            tokio::time::sleep(Duration::from_millis(500)).await;
            if alive(harness) {
                kill_group(harness, libc::SIGKILL);
            }
        }
        Ok(want)
    }

    /// The checks over every run.
    async fn check_all(&mut self, sessions: &[Option<String>]) -> Res<Checked> {
        let mut c = Checked {
            answered_after_restart: self.answered_after_restart,
            ..Checked::default()
        };
        for s in sessions.iter().flatten() {
            self.settle(s).await?;
        }
        let requests = self.requests();
        let mut v: Vec<(H, String)> = Vec::new();
        for r in &self.runs {
            self.check_run(r, &mut c, &mut v).await?;
        }
        self.check_steers(&requests, &mut v).await?;
        self.check_reached(&mut c, &mut v).await?;
        self.violations.extend(v);
        Ok(c)
    }

    /// One run: how its turn ended, its events, its token totals, its approvals and the
    /// answers of its commands.
    async fn check_run(&self, r: &RunSeen, c: &mut Checked, v: &mut Vec<(H, String)>) -> Res<()> {
        let h = r.harness;
        let t = self.api.get(&format!("/v1/turns/{}", r.turn)).await?;
        let (status, reason) = (
            t["status"].as_i64(),
            t["reason"].as_str().unwrap_or_default(),
        );
        let ok = match r.want {
            Want::Ok | Want::HandedBack => status == Some(0),
            Want::DriverStopped => status == Some(-1) && reason.contains("driver stopped"),
            Want::HarnessExited => status == Some(1) && reason.contains("harness_exited"),
        };
        if !ok {
            v.push((
                h,
                format!(
                    "run {} ({} {:?}): the turn ended with status {status:?} ({reason})",
                    r.run,
                    h.name(),
                    r.want
                ),
            ));
        }
        let log = self.env.ctl(&r.run).join("run.log");
        let (n, mismatch) = check_events(&self.api, &self.env.home(), &r.run, &log).await?;
        c.events += n;
        v.extend(mismatch.map(|m| (h, m)));
        // The turn's token totals are the sum of its log's usage (a restart included).
        let mut sum = [0u64; 3];
        for e in rebuild(&log).iter().filter(|e| e["kind"] == "usage") {
            for (i, k) in ["input_tokens", "output_tokens", "cached_input_tokens"]
                .iter()
                .enumerate()
            {
                sum[i] = sum[i].saturating_add(e[k].as_u64().unwrap_or(0));
            }
        }
        let u = &t["usage"];
        let stored = [
            u["input_tokens"].as_u64().unwrap_or(0),
            u["output_tokens"].as_u64().unwrap_or(0),
            u["cached_input_tokens"].as_u64().unwrap_or(0),
        ];
        if stored == sum {
            c.usage_ok += 1;
        } else {
            v.push((
                h,
                format!(
                    "run {} ({}): the turn's tokens (input, output, cached) are {stored:?}, its log's usage sums to {sum:?}",
                    r.run,
                    h.name()
                ),
            ));
        }
        if matches!(r.want, Want::Ok | Want::HandedBack) {
            let pending = self
                .api
                .get(&format!("/v1/runs/{}/approvals", r.run))
                .await?;
            if pending["approvals"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
            {
                v.push((
                    h,
                    format!(
                        "run {}: approvals left pending after the turn ended: {pending}",
                        r.run
                    ),
                ));
            }
        }
        let commands = self.store.commands(&r.run).await.map_err(err("commands"))?;
        for cmd in &commands {
            c.commands += 1;
            match (&cmd.ack, cmd.ack_reason.as_deref()) {
                (Some(hangar_store::AckStatus::Ended), Some(why)) if why.contains("not land") => {
                    c.not_landed += 1
                }
                (Some(_), _) => c.acked += 1,
                (None, _) => v.push((
                    h,
                    format!(
                        "run {}: command {} ({} {}) has no answer after the turn ended",
                        r.run, cmd.seq, cmd.kind, cmd.body
                    ),
                )),
            }
        }
        Ok(())
    }

    /// Every steer the harness received is recorded as a command of its session's runs, and
    /// no model request has one twice.
    async fn check_steers(
        &self,
        requests: &[RecordedRequest],
        v: &mut Vec<(H, String)>,
    ) -> Res<()> {
        let harness_of = |s: &str| self.harness_of.get(s).copied().unwrap_or(H::Claude);
        for (session, text, said) in &self.steers {
            let seen = requests
                .iter()
                .any(|q| q.all_text().contains(text.as_str()));
            let mut recorded = false;
            for r in self.runs.iter().filter(|r| &r.session == session) {
                let cmds = self.store.commands(&r.run).await.map_err(err("commands"))?;
                recorded |= cmds.iter().any(|c| {
                    c.body["text"]
                        .as_str()
                        .is_some_and(|x| x.contains(text.as_str()))
                });
                let t = self.api.get(&format!("/v1/turns/{}", r.turn)).await?;
                recorded |= t["prompt"]
                    .as_str()
                    .is_some_and(|p| p.contains(text.as_str()));
            }
            if seen && !recorded {
                v.push((harness_of(session), format!("session {session}: the harness got the steer {text:?} but the store has no record of it (the API said {said})")));
            }
            // No conversation has a message twice (a message handed back that the killed
            // harness had kept as well would be).
            if let Some(q) = requests
                .iter()
                .find(|q| q.all_text().matches(text.as_str()).count() > 1)
            {
                v.push((
                    harness_of(session),
                    format!(
                        "session {session}: a model request has {text:?} {} times",
                        q.all_text().matches(text.as_str()).count()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every message sent after a kill (or held by a killed harness) started exactly one
    /// later turn.
    async fn check_reached(&self, c: &mut Checked, v: &mut Vec<(H, String)>) -> Res<()> {
        let harness_of = |s: &str| self.harness_of.get(s).copied().unwrap_or(H::Claude);
        for (session, text) in &self.must_reach {
            let turns = self.turns(session).await?;
            let started = turns
                .iter()
                .filter(|t| {
                    t["prompt"]
                        .as_str()
                        .is_some_and(|p| p.contains(text.as_str()))
                })
                .count();
            if started == 1 {
                c.reached += 1;
            } else {
                v.push((
                    harness_of(session),
                    format!(
                        "session {session}: the message {text:?} sent after the kill (or held by the killed harness) started {started} turns, not 1"
                    ),
                ));
            }
        }
        Ok(())
    }
}
