//! hangar's deny-risky rules: answer a tool call with no person in the loop, deny what is
//! risky and allow the rest.
//!
//! A shell command is parsed as a shell parses it (brush-parser's POSIX/bash grammar, see
//! [`shell`]); every simple command found anywhere in the tree is checked after wrappers that
//! run their arguments are followed. A command that cannot be parsed, or whose command name is
//! only known at run time, is denied: the rules fail closed. Edits and reads are checked by
//! their path. The rules themselves are data ([`DEFAULT_RULES`], a TOML file built in); an
//! environment may add rules or turn a default one off by its id ([`Rules::configure`]).
//!
//! No async runtime, no network: the static driver and the Tower hook both link this crate.

pub mod git;
pub mod interp;
pub mod paths;
pub mod shell;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::paths::{canonical, glob_shape, glob_text, normalize, scratch, within};
use crate::shell::{Arg, Failure, Invocation, PathOperand};

/// The default rule set, as data.
pub const DEFAULT_RULES: &str = include_str!("../rules/default.toml");

/// Rule ids are shown with this prefix.
pub const PREFIX: &str = "deny-risky/";
/// The pseudo-rule for a command that cannot be parsed (always on).
pub const UNPARSABLE: &str = "deny-risky/unparsable";
/// The pseudo-rule for a command whose name or script is computed at run time (always on).
pub const COMPUTED: &str = "deny-risky/computed";

/// Allow or deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
}

/// The rules' answer to one tool call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub decision: Decision,
    /// `deny-risky/<id>` of the rule that denied; `None` on allow.
    pub rule: Option<String>,
    /// One sentence the agent can act on (empty on allow).
    pub reason: String,
}

impl Verdict {
    /// Allowed.
    pub fn allow() -> Verdict {
        Verdict {
            decision: Decision::Allow,
            rule: None,
            reason: String::new(),
        }
    }

    fn deny(rule: &str, reason: String) -> Verdict {
        Verdict {
            decision: Decision::Deny,
            rule: Some(rule.to_owned()),
            reason,
        }
    }

    /// Whether the call is allowed.
    pub fn allowed(&self) -> bool {
        self.decision == Decision::Allow
    }
}

/// Where a call runs.
#[derive(Clone, Debug)]
pub struct Context {
    /// The workspace (the harness's working directory); relative paths start here.
    pub workspace: PathBuf,
    /// `~` and `$HOME` of the agent, when known.
    pub home: Option<PathBuf>,
    /// hangar's own paths in this run (control folder, key or passport file): `$PROTECTED`.
    pub protected: Vec<PathBuf>,
}

impl Context {
    /// A context for `workspace`, with the home from `$HOME`.
    pub fn new(workspace: impl Into<PathBuf>) -> Context {
        let workspace = normalize(&absolute(workspace.into()));
        Context {
            workspace,
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| normalize(&absolute(h.into()))),
            protected: Vec::new(),
        }
    }
}

fn absolute(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
    }
}

/// Which tool calls a rule looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Shell commands (Claude Code's Bash, Codex's commands).
    Bash,
    /// File edits (Write, Edit, MultiEdit, NotebookEdit, Codex file changes).
    Edit,
    /// File reads (Read, Grep, Glob, LS).
    Read,
}

/// Examples every rule carries; the tests run them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Examples {
    /// Commands the rule denies.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Close neighbours the whole set allows.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Edit paths the rule denies.
    #[serde(default)]
    pub deny_paths: Vec<String>,
    /// Edit paths the whole set allows.
    #[serde(default)]
    pub allow_paths: Vec<String>,
}

/// One rule, as written in the TOML file (see `rules/default.toml` for what each field means).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub id: String,
    pub reason: String,
    #[serde(default = "bash_only")]
    pub applies_to: Vec<Scope>,
    #[serde(default)]
    pub commands: Vec<String>,
    #[serde(default)]
    pub subcommands: Vec<String>,
    #[serde(default)]
    pub args_any: Vec<String>,
    #[serde(default)]
    pub short_flags: String,
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub outside_workspace: bool,
    #[serde(default)]
    pub workspace_itself: bool,
    #[serde(default)]
    pub fed_by: Vec<String>,
    #[serde(default)]
    pub feeds: Vec<String>,
    #[serde(default)]
    pub recursive_function: bool,
    #[serde(default)]
    pub writes_outside_workspace: bool,
    #[serde(default)]
    pub facts: Vec<String>,
    #[serde(default)]
    pub unless_facts: Vec<String>,
    #[serde(default)]
    pub examples: Examples,
}

fn bash_only() -> Vec<Scope> {
    vec![Scope::Bash]
}

/// A rules file: rules to add, default rules to turn off by id.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default, rename = "rule")]
    rules: Vec<Rule>,
    #[serde(default)]
    disable: Vec<String>,
}

/// A rule set: the default set, with an environment's additions and the ids it turned off.
#[derive(Clone, Debug)]
pub struct Rules {
    rules: Vec<Rule>,
    disabled: Vec<String>,
    added: Vec<String>,
}

/// What a run's manifest records about its rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Ids of the rules in force.
    pub active: Vec<String>,
    /// Default rules the environment turned off.
    pub disabled: Vec<String>,
    /// Rules the environment added.
    pub added: Vec<String>,
}

impl Rules {
    /// The built-in default set.
    pub fn default_set() -> Rules {
        // The built-in file is checked by the tests; a broken one would deny everything.
        match parse_file(DEFAULT_RULES) {
            Ok(f) => Rules {
                rules: f.rules,
                disabled: Vec::new(),
                added: Vec::new(),
            },
            Err(_) => Rules {
                rules: Vec::new(),
                disabled: vec!["<the built-in rules do not parse>".into()],
                added: Vec::new(),
            },
        }
    }

    /// The default set changed by an environment's rules file (TOML: `disable = ["id", ...]`
    /// and `[[rule]]` tables like the default file's). Unknown ids to disable, duplicate ids
    /// and rules without a condition are refused.
    pub fn configure(config: &str) -> Result<Rules, String> {
        let mut rules = Rules::default_set();
        if config.trim().is_empty() {
            return Ok(rules);
        }
        let f = parse_file(config)?;
        for id in &f.disable {
            let id = id.strip_prefix(PREFIX).unwrap_or(id);
            let before = rules.rules.len();
            rules.rules.retain(|r| r.id != id);
            if rules.rules.len() == before {
                return Err(format!(
                    "cannot turn off rule {id:?}: there is no such rule in the default set"
                ));
            }
            rules.disabled.push(id.to_owned());
        }
        for r in f.rules {
            if rules.rules.iter().any(|x| x.id == r.id) {
                return Err(format!("rule {:?} is defined twice", r.id));
            }
            rules.added.push(r.id.clone());
            rules.rules.push(r);
        }
        Ok(rules)
    }

    /// The rules in force.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// What the manifest records.
    pub fn summary(&self) -> Summary {
        Summary {
            active: self.rules.iter().map(|r| r.id.clone()).collect(),
            disabled: self.disabled.clone(),
            added: self.added.clone(),
        }
    }

    /// Checks one tool call as a harness asks it: Claude Code's tool name and input, or
    /// Codex's (`command` as an argv, file changes with their paths).
    pub fn check_tool(&self, tool: &str, input: &Value, ctx: &Context) -> Verdict {
        match tool {
            "Bash" | "exec_command" | "shell" | "local_shell" | "commandExecution" | "exec" => {
                match input.get("command") {
                    Some(Value::String(c)) => self.check_command(c, ctx),
                    Some(Value::Array(argv)) => {
                        let words: Option<Vec<&str>> = argv.iter().map(Value::as_str).collect();
                        match words {
                            Some(w) => self.check_command(&quote_argv(&w), ctx),
                            None => Verdict::deny(
                                UNPARSABLE,
                                "the command is not a list of strings".into(),
                            ),
                        }
                    }
                    _ => Verdict::deny(UNPARSABLE, "the call carries no command to check".into()),
                }
            }
            "Write" | "Edit" | "MultiEdit" | "NotebookEdit" | "apply_patch" | "fileChange" => {
                let paths = edit_paths(input);
                if paths.is_empty() {
                    return Verdict::deny(UNPARSABLE, "the edit names no file to check".into());
                }
                for p in paths {
                    let v = self.check_path(Scope::Edit, &p, ctx);
                    if !v.allowed() {
                        return v;
                    }
                }
                Verdict::allow()
            }
            "Read" | "Grep" | "Glob" | "LS" | "NotebookRead" => {
                for key in ["file_path", "path", "notebook_path"] {
                    if let Some(p) = input.get(key).and_then(Value::as_str) {
                        let v = self.check_path(Scope::Read, p, ctx);
                        if !v.allowed() {
                            return v;
                        }
                        // Grep reads every file below the folder it is given.
                        if tool == "Grep" {
                            let below = format!("{}/{}", p.trim_end_matches('/'), paths::BELOW);
                            let v = self.check_path(Scope::Read, &below, ctx);
                            if !v.allowed() {
                                return v;
                            }
                        }
                    }
                }
                Verdict::allow()
            }
            _ => Verdict::allow(),
        }
    }

    /// Checks a shell command line.
    pub fn check_command(&self, command: &str, ctx: &Context) -> Verdict {
        let (invocations, failures) = shell::read(command, &ctx.workspace, ctx.home.as_deref());
        let memo = Canon::default();
        let ws_canon = memo.of(&ctx.workspace);
        for inv in &invocations {
            for r in &self.rules {
                if r.applies_to.contains(&Scope::Bash)
                    && self.matches(r, inv, ctx, &ws_canon, &memo)
                {
                    return Verdict::deny(&format!("{PREFIX}{}", r.id), r.reason.clone());
                }
            }
        }
        match failures.into_iter().next() {
            Some(Failure::Unparsable(why)) => Verdict::deny(
                UNPARSABLE,
                format!("The command cannot be checked ({why}); write it as plain shell."),
            ),
            Some(Failure::Computed(why)) => Verdict::deny(
                COMPUTED,
                format!("The command cannot be checked: {why}; write the command out literally."),
            ),
            None => Verdict::allow(),
        }
    }

    /// Checks a path an edit (or read) tool touches.
    pub fn check_path(&self, scope: Scope, path: &str, ctx: &Context) -> Verdict {
        let operand = match paths::resolve(
            path,
            &paths::Cwd::Known(ctx.workspace.clone()),
            ctx.home.as_deref(),
        ) {
            Some(p) => PathOperand::Known(p),
            None => PathOperand::Unknown(path.to_owned()),
        };
        let memo = Canon::default();
        let ws_canon = memo.of(&ctx.workspace);
        for r in &self.rules {
            if !r.applies_to.contains(&scope) {
                continue;
            }
            if !r.paths.is_empty() && !self.path_matches(&r.paths, &operand, ctx, &memo) {
                continue;
            }
            if r.outside_workspace && !outside(&operand, ctx, &ws_canon, &memo) {
                continue;
            }
            if r.paths.is_empty() && !r.outside_workspace {
                continue;
            }
            return Verdict::deny(&format!("{PREFIX}{}", r.id), r.reason.clone());
        }
        Verdict::allow()
    }

    fn matches(
        &self,
        r: &Rule,
        inv: &Invocation,
        ctx: &Context,
        ws_canon: &Path,
        memo: &Canon,
    ) -> bool {
        if !r.commands.is_empty() && !r.commands.iter().any(|c| glob_text(c, &inv.name)) {
            return false;
        }
        if !r.subcommands.is_empty() && !r.subcommands.iter().any(|s| has_subcommand(&inv.args, s))
        {
            return false;
        }
        if (!r.args_any.is_empty() || !r.short_flags.is_empty())
            && !inv.args.iter().filter_map(Arg::lit).any(|a| {
                r.args_any.iter().any(|p| glob_text(p, a)) || short_cluster_has(a, &r.short_flags)
            })
        {
            return false;
        }
        if !r.paths.is_empty()
            && !inv
                .operands
                .iter()
                .chain(inv.redirects.iter())
                .chain(inv.writes.iter())
                .any(|o| self.path_matches(&r.paths, o, ctx, memo))
        {
            return false;
        }
        if r.outside_workspace && !inv.operands.iter().any(|o| outside(o, ctx, ws_canon, memo)) {
            return false;
        }
        if r.workspace_itself
            && !inv
                .wholes
                .iter()
                .any(|o| is_workspace(o, ctx, ws_canon, memo))
        {
            return false;
        }
        if !r.fed_by.is_empty()
            && !inv
                .fed_by
                .iter()
                .any(|n| r.fed_by.iter().any(|p| glob_text(p, n)))
        {
            return false;
        }
        if !r.feeds.is_empty()
            && !inv
                .feeds
                .iter()
                .any(|n| r.feeds.iter().any(|p| glob_text(p, n)))
        {
            return false;
        }
        if r.recursive_function && !inv.recursive {
            return false;
        }
        if r.writes_outside_workspace
            && !inv
                .writes
                .iter()
                .any(|o| outside(o, ctx, ws_canon, memo) && !is_scratch(o))
        {
            return false;
        }
        if !r.facts.is_empty() && !inv.facts.iter().any(|f| r.facts.iter().any(|x| x == f)) {
            return false;
        }
        if inv
            .facts
            .iter()
            .any(|f| r.unless_facts.iter().any(|x| x == f))
        {
            return false;
        }
        true
    }

    fn path_matches(
        &self,
        patterns: &[String],
        o: &PathOperand,
        ctx: &Context,
        memo: &Canon,
    ) -> bool {
        let p = match o {
            PathOperand::Known(p) => p,
            // A path with parts only known at run time: whether it may be one the pattern
            // names (`/proc/$PPID/environ`, `$HANGAR_HOME/master.key`).
            PathOperand::Unknown(shape) => {
                return shape.starts_with('/')
                    && shape.len() <= 4 * paths::PATH_MAX
                    && patterns.iter().any(|pat| {
                        memo.pattern(pat, ctx).iter().any(|e| {
                            if anywhere(e) {
                                false
                            } else if e.contains('/') {
                                glob_shape(e, shape)
                            } else {
                                let name = shape.rsplit('/').next().unwrap_or(shape);
                                glob_shape(e, name)
                            }
                        })
                    });
            }
        };
        // A path longer than the kernel takes (PATH_MAX) names no file: what is written there
        // is text (a program, a message), and matching it would take time for nothing.
        if p.as_os_str().len() > paths::PATH_MAX {
            return false;
        }
        let forms = [p.clone(), memo.of(p)];
        for pat in patterns {
            for expanded in memo.pattern(pat, ctx).iter() {
                for f in &forms {
                    // Glob characters stand for what they may expand to.
                    let text = f.to_string_lossy();
                    let shaped;
                    let text = if text.contains(['*', '?', '[']) {
                        shaped = paths::glob_to_shape(&text);
                        std::borrow::Cow::Borrowed(shaped.as_str())
                    } else {
                        text
                    };
                    // `glob_shape`: a number only known at run time (`/proc/$PPID/…`) may be
                    // any number.
                    let hit = if text.contains(paths::BELOW) && anywhere(expanded) {
                        false
                    } else if expanded.contains('/') {
                        glob_shape(expanded, &text)
                    } else {
                        let name = text.rsplit('/').next().unwrap_or(&text);
                        glob_shape(expanded, name)
                    };
                    if hit {
                        return true;
                    }
                }
            }
        }
        false
    }
}

/// Whether a pattern names a place anywhere (`**/.git/config`): every folder may hold one, so
/// a path only known at run time below a folder is not taken for it.
fn anywhere(pattern: &str) -> bool {
    pattern.starts_with("**")
}

/// Patterns with `~`, `$WORKSPACE` and `$PROTECTED` replaced (none when the context lacks it).
fn expand_pattern(pat: &str, ctx: &Context) -> Vec<String> {
    if let Some(rest) = pat.strip_prefix('~') {
        return ctx
            .home
            .iter()
            .map(|h| format!("{}{rest}", h.to_string_lossy().trim_end_matches('/')))
            .collect();
    }
    if let Some(rest) = pat.strip_prefix("$WORKSPACE") {
        return vec![format!(
            "{}{rest}",
            ctx.workspace.to_string_lossy().trim_end_matches('/')
        )];
    }
    for root in shell::SECRET_ROOTS {
        if let Some(rest) = pat.strip_prefix('$').and_then(|p| p.strip_prefix(root)) {
            return vec![format!("{}{rest}", shell::root_shape(root))];
        }
    }
    if let Some(rest) = pat.strip_prefix("$PROTECTED") {
        return ctx
            .protected
            .iter()
            .map(|p| {
                format!(
                    "{}{rest}",
                    normalize(p).to_string_lossy().trim_end_matches('/')
                )
            })
            .collect();
    }
    vec![pat.to_owned()]
}

/// Paths with symlinks followed ([`canonical`]), each found once per check: a command may name
/// the same path to many rules.
#[derive(Default)]
struct Canon {
    paths: std::cell::RefCell<std::collections::HashMap<PathBuf, PathBuf>>,
    patterns: std::cell::RefCell<std::collections::HashMap<String, std::rc::Rc<Vec<String>>>>,
}

impl Canon {
    fn of(&self, p: &Path) -> PathBuf {
        if let Some(c) = self.paths.borrow().get(p) {
            return c.clone();
        }
        let c = canonical(p);
        self.paths.borrow_mut().insert(p.to_path_buf(), c.clone());
        c
    }

    /// [`expand_pattern`], once per pattern.
    fn pattern(&self, pat: &str, ctx: &Context) -> std::rc::Rc<Vec<String>> {
        if let Some(e) = self.patterns.borrow().get(pat) {
            return std::rc::Rc::clone(e);
        }
        let e = std::rc::Rc::new(expand_pattern(pat, ctx));
        self.patterns
            .borrow_mut()
            .insert(pat.to_owned(), std::rc::Rc::clone(&e));
        e
    }
}

/// Whether a path operand lies outside the workspace (unknown ones count as outside).
fn outside(o: &PathOperand, ctx: &Context, ws_canon: &Path, memo: &Canon) -> bool {
    match o {
        PathOperand::Unknown(_) => true,
        PathOperand::Known(p) => {
            if matches!(
                p.to_str(),
                Some("/dev/null" | "/dev/stdout" | "/dev/stderr")
            ) {
                return false;
            }
            !within(p, &ctx.workspace) || !within(&memo.of(p), ws_canon)
        }
    }
}

/// Whether a written path is a scratch place (`/tmp/…`, `/dev/null`): see [`paths::scratch`].
fn is_scratch(o: &PathOperand) -> bool {
    match o {
        PathOperand::Unknown(_) => false,
        PathOperand::Known(p) => scratch(p),
    }
}

/// Whether a path operand is the workspace itself (as written or with symlinks followed).
fn is_workspace(o: &PathOperand, ctx: &Context, ws_canon: &Path, memo: &Canon) -> bool {
    match o {
        PathOperand::Unknown(_) => false,
        PathOperand::Known(p) => *p == normalize(&ctx.workspace) || memo.of(p) == ws_canon,
    }
}

/// Whether the first arguments that are not options spell `sub` (`"release create"`). The
/// values of `-C DIR` and `-c KEY=VALUE` (git's) are skipped with their option.
fn has_subcommand(args: &[Arg], sub: &str) -> bool {
    let mut words = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].lit() {
            Some("-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" | "--manifest-path") => {
                i += 2
            }
            Some(s) if s.starts_with('-') => i += 1,
            Some(s) => {
                words.push(s);
                i += 1;
            }
            None => return false,
        }
        if words.len() >= 3 {
            break;
        }
    }
    let want: Vec<&str> = sub.split_whitespace().collect();
    words.len() >= want.len() && words[..want.len()] == want[..]
}

/// Whether `arg` is a short-option cluster (`-rf`) holding one of `flags`.
fn short_cluster_has(arg: &str, flags: &str) -> bool {
    if flags.is_empty() {
        return false;
    }
    let Some(rest) = arg.strip_prefix('-') else {
        return false;
    };
    !rest.is_empty()
        && !rest.starts_with('-')
        && rest.chars().all(|c| c.is_ascii_alphanumeric())
        && rest.chars().any(|c| flags.contains(c))
}

/// The files an edit touches: Claude Code's `file_path`/`notebook_path`, Codex's changes.
fn edit_paths(input: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for key in ["file_path", "notebook_path", "path"] {
        if let Some(p) = input.get(key).and_then(Value::as_str) {
            out.push(p.to_owned());
        }
    }
    if let Some(changes) = input.get("changes") {
        match changes {
            Value::Object(m) => out.extend(m.keys().cloned()),
            Value::Array(a) => out.extend(
                a.iter()
                    .filter_map(|c| c.get("path").and_then(Value::as_str))
                    .map(str::to_owned),
            ),
            _ => {}
        }
    }
    out
}

/// An argv written as one shell command line (single-quoted where needed).
pub fn quote_argv(argv: &[&str]) -> String {
    argv.iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
            {
                (*w).to_owned()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn parse_file(text: &str) -> Result<RuleFile, String> {
    let f: RuleFile =
        toml::from_str(text).map_err(|e| format!("the rules file does not parse: {e}"))?;
    for r in &f.rules {
        if r.id.is_empty() || !r.id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(format!(
                "rule id {:?} must be letters, digits and dashes",
                r.id
            ));
        }
        if r.reason.trim().is_empty() {
            return Err(format!("rule {:?} has no reason", r.id));
        }
        let conditions = !r.commands.is_empty()
            || !r.subcommands.is_empty()
            || !r.args_any.is_empty()
            || !r.short_flags.is_empty()
            || !r.paths.is_empty()
            || r.outside_workspace
            || r.workspace_itself
            || !r.fed_by.is_empty()
            || !r.feeds.is_empty()
            || r.recursive_function
            || r.writes_outside_workspace
            || !r.facts.is_empty();
        if !conditions {
            return Err(format!(
                "rule {:?} has no condition: it would deny everything",
                r.id
            ));
        }
        if r.applies_to.is_empty() {
            return Err(format!("rule {:?} applies to no tool", r.id));
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context {
            workspace: "/w".into(),
            home: Some("/home/a".into()),
            protected: vec!["/run/hangar/ctl".into()],
        }
    }

    #[test]
    fn the_default_set_parses() {
        let f = parse_file(DEFAULT_RULES).unwrap();
        assert!(f.rules.len() > 20);
    }

    #[test]
    fn configure_adds_and_turns_off() {
        let r = Rules::configure(
            "disable = [\"deny-risky/signal-processes\"]\n[[rule]]\nid = \"no-make\"\nreason = \"no make here\"\ncommands = [\"make\"]\n",
        )
        .unwrap();
        assert!(r.check_command("kill 1", &ctx()).allowed());
        let v = r.check_command("make all", &ctx());
        assert_eq!(v.rule.as_deref(), Some("deny-risky/no-make"));
        assert_eq!(r.summary().disabled, ["signal-processes"]);
        assert!(Rules::configure("disable = [\"nope\"]").is_err());
        assert!(Rules::configure("[[rule]]\nid = \"x\"\nreason = \"y\"\n").is_err());
        assert!(
            Rules::configure("[[rule]]\nid = \"privilege\"\nreason = \"y\"\ncommands=[\"a\"]\n")
                .is_err()
        );
    }

    /// Two gaps found in session 2: a `cd` that makes a later relative path the workspace
    /// itself, and a symlink planted earlier on the same line.
    #[test]
    fn the_workspace_itself_and_planted_links() {
        let r = Rules::default_set();
        let rule = |c: &str| r.check_command(c, &ctx()).rule;
        let itself = Some("deny-risky/destroy-workspace".to_owned());
        let outside = Some("deny-risky/destroy-outside-workspace".to_owned());
        assert_eq!(rule("cd .. && rm -rf w"), itself);
        assert_eq!(rule("rm -rf /w"), itself);
        assert_eq!(rule("cd /tmp && rmdir /w/"), itself);
        assert_eq!(rule("cd .. && rm -rf w/target"), None);
        assert_eq!(rule("find . -name x -exec rm -rf {} +"), None);
        assert_eq!(rule("ln -s / x && rm -rf x/etc"), outside);
        assert_eq!(rule("ln -s /etc/passwd p && truncate -s 0 p"), outside);
        assert_eq!(rule("ln -s / x && sh -c 'rm -rf x/etc'"), outside);
        assert_eq!(rule("ln -s src/a a && rm -f a"), None);
    }

    #[test]
    fn protected_paths() {
        let r = Rules::default_set();
        let v = r.check_command("cat /run/hangar/ctl/key", &ctx());
        assert_eq!(v.rule.as_deref(), Some("deny-risky/hangar-internals"));
        let v = r.check_tool(
            "Read",
            &serde_json::json!({"file_path": "/home/a/.ssh/id_rsa"}),
            &ctx(),
        );
        assert_eq!(v.rule.as_deref(), Some("deny-risky/credentials"));
        let v = r.check_tool(
            "Write",
            &serde_json::json!({"file_path": "/w/src/x.rs"}),
            &ctx(),
        );
        assert!(v.allowed());
        let v = r.check_tool(
            "exec_command",
            &serde_json::json!({"command": ["bash", "-lc", "sudo id"]}),
            &ctx(),
        );
        assert_eq!(v.rule.as_deref(), Some("deny-risky/privilege"));
    }
}
