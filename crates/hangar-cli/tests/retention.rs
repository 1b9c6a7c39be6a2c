//! Retention (issue 23, item 6): `hangar prune --older-than AGE` removes what runs that ended
//! longer ago left (kept log and trees, events) and keeps their record and the audit log whole;
//! a live run is never pruned, whatever its age; `--dry-run` removes nothing; a pruned run's
//! log says it was pruned.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env};

struct Env {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: FakeAnthropic,
}

impl Env {
    fn hangar(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_hangar"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HANGAR_HOME", self.db_dir())
            .env("HANGAR_URL", "http://127.0.0.1:9")
            .env("HANGAR_DRIVER_BIN", common::driver_bin())
            .env("HANGAR_CLAUDE_BIN", claude_bin().unwrap())
            .envs(claude_env(
                &self.fake.base_url(),
                &self.home.path().join("claude-config"),
            ))
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.hangar(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn db_dir(&self) -> std::path::PathBuf {
        self.home.path().join("hangar")
    }

    /// One turn with `hangar run`; its run id.
    fn turn(&self) -> String {
        let dir = self.work.path().to_str().unwrap().to_owned();
        let out = self.ok(&[
            "run",
            "--dir",
            &dir,
            "--no-sandbox",
            "--policy",
            "auto",
            "hi",
        ]);
        out.lines()
            .find_map(|l| l.strip_prefix("run: "))
            .unwrap()
            .to_owned()
    }

    fn sql(&self, sql: &str) -> String {
        let out = Command::new("sqlite3")
            .arg(self.db_dir().join("hangar.db"))
            .arg(sql)
            .output()
            .unwrap();
        assert!(out.status.success(), "{sql}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn kept(home: &Path, run: &str) -> bool {
    home.join("kept").join(run).exists()
}

#[test]
fn prune_removes_what_old_runs_left_and_keeps_their_record_and_live_runs() {
    let env = Env {
        home: tempfile::tempdir().unwrap(),
        work: tempfile::tempdir().unwrap(),
        fake: FakeAnthropic::start(Script::new([Step::text("one"), Step::text("two")])).unwrap(),
    };
    let old = env.turn();
    let live = env.turn();
    let day = 86_400_000i64;
    assert!(kept(&env.db_dir(), &old) && kept(&env.db_dir(), &live));
    env.sql(&format!(
        "UPDATE runs SET ended_at = ended_at - 40 * {day} WHERE id = '{old}'"
    ));
    // Old, but live: never pruned.
    env.sql(&format!(
        "UPDATE runs SET state = 'live', ended_at = NULL, created_at = created_at - 40 * {day} WHERE id = '{live}'"
    ));
    let events_of = |run: &str| -> i64 {
        env.sql(&format!(
            "SELECT COUNT(*) FROM events WHERE run_id = '{run}'"
        ))
        .parse()
        .unwrap()
    };
    assert!(events_of(&old) > 0);
    // The old run's control folder, as an agent that could write it would leave it: a link to
    // another run's kept files. Pruning removes the link, never what it points at.
    let ctl = env.db_dir().join("runs").join(format!("{old}.ctl"));
    if ctl.exists() {
        std::fs::remove_dir_all(&ctl).unwrap();
    }
    std::os::unix::fs::symlink(env.db_dir().join("kept").join(&live), &ctl).unwrap();

    let dry = env.ok(&["prune", "--older-than", "30d", "--dry-run"]);
    assert!(dry.starts_with("would prune 1 run"), "{dry}");
    assert!(kept(&env.db_dir(), &old), "a dry run removed files");

    let said = env.ok(&["prune", "--older-than", "30d"]);
    assert!(said.starts_with("pruned 1 run"), "{said}");
    assert!(
        !kept(&env.db_dir(), &old),
        "the old run's files are still there"
    );
    assert_eq!(events_of(&old), 0);
    assert!(kept(&env.db_dir(), &live), "a live run's files went");
    assert!(
        std::fs::symlink_metadata(&ctl).is_err(),
        "the planted link is still there"
    );
    assert!(events_of(&live) > 0, "a live run's events went");
    // Its record stays, marked; the audit log stays whole and says what was done.
    assert_eq!(
        env.sql(&format!(
            "SELECT pruned_at IS NOT NULL FROM runs WHERE id = '{old}'"
        )),
        "1"
    );
    assert!(env.ok(&["audit", "verify"]).contains("audit log intact"));
    assert!(env.ok(&["audit", "--json"]).contains("retention.pruned"));
    let log = env.hangar(&["log", &old]);
    assert!(!log.status.success());
    assert!(text(&log).contains("pruned by retention"), "{}", text(&log));
    // Nothing more to prune.
    assert!(
        env.ok(&["prune", "--older-than", "30d"])
            .starts_with("pruned 0 runs")
    );
}
