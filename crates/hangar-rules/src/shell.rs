//! Reading a command line as a shell reads it: the command is parsed into brush-parser's AST
//! and walked; every simple command found anywhere in the tree (pipelines, lists, subshells,
//! `$(...)`, backticks, process substitutions, here-documents fed to a shell, function bodies)
//! becomes an [`Invocation`], after wrappers that run their arguments (`env`, `sudo`, `xargs`,
//! `timeout`, `sh -c`, `find -exec`, `eval`, ...) are followed. What cannot be read statically
//! (a parse error, a command name computed at run time) becomes a [`Failure`]: the rules fail
//! closed on it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use brush_parser::ast::{
    self, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, ExtendedTestExpr,
    IoFileRedirectTarget, IoRedirect, Pipeline, SimpleCommand,
};
use brush_parser::word::{self, TildeExpr, WordPiece, WordPieceWithSource};
use brush_parser::{ParserOptions, Token};

use crate::git;
use crate::paths::{self, ANY, Cwd, DIGITS, canonical, normalize, resolve};

mod brace;
mod code;
mod follow;
mod opts;
mod words;
mod writes;

use words::{
    ParamShape, ansi_c, is_pattern, list_literal_output, literal_echo, literal_lines, names_a_dot,
    own_jobs, parameter_shape, shown, unescape_backquoted,
};

/// In a word's shape: the pid of a job the shell started (`$!`), a number like [`DIGITS`].
pub const JOB: char = '\u{2}';
/// What `$HANGAR_HOME` stands for in a shape: a folder of its own that the rules call
/// `$HANGAR_HOME` (its value is hangar's, not the agent's).
pub const HANGAR_HOME_SHAPE: &str = "/\u{3}HANGAR_HOME";
/// Variables naming folders that hold hangar's or the harnesses' secrets: in a shape each is
/// a folder of its own (`/\u{3}NAME`), which the rules' patterns name `$NAME`.
pub const SECRET_ROOTS: &[&str] = &[
    hangar_protocol::env::HANGAR_HOME,
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR",
];

/// The shape a secret root variable stands for.
pub fn root_shape(name: &str) -> String {
    format!("/\u{3}{name}")
}

/// How deep `sh -c`, `eval` and substitutions may nest before the walk gives up (fail closed).
const MAX_DEPTH: usize = 12;
/// The longest command line read; longer ones are denied as unreadable.
pub const MAX_COMMAND_BYTES: usize = 256 * 1024;
/// The most nesting ([`nesting_bound`], summed over the scripts being read inside one another)
/// that is read; more is denied as unreadable. brush-parser and the walk recurse once per
/// level, and a few kilobytes of `{ { { …` overflowed the stack and killed the driver or the
/// hook (found by `scripts/fuzz rules`).
pub const MAX_NESTING: usize = 8192;
/// Up to this much nesting a command is read on a thread with [`SHALLOW_STACK`] bytes of stack;
/// more is read again on a thread of its own with [`DEEP_STACK`] bytes of stack.
const SHALLOW_NESTING: usize = 64;
/// The stack of the thread a command is first read on: room for [`SHALLOW_NESTING`] levels in
/// a debug build.
const SHALLOW_STACK: usize = 32 << 20;
/// The stack of that thread: room for [`MAX_NESTING`] levels (about 6 KiB each in a release
/// build, several times more in a debug one). Only what is used is ever touched.
const DEEP_STACK: usize = 1 << 30;
/// How many command names the walk may copy into `fed_by`/`feeds` lists for one command line;
/// more is denied as unreadable. Without it `ls | ls | …` took time and memory quadratic in
/// its length: 20 kB took 10 s (found by `scripts/fuzz rules`).
const MAX_LINKS: usize = 1_000_000;
/// How many links planted on the line (`ln`) one path may go through; more is a loop, and the
/// path is only known at run time.
const MAX_PLANTED_HOPS: usize = 32;
/// How many levels of the shapes brush-parser reads again at every level ([`backtracking`])
/// may nest; more is denied as unreadable. Unclosed `(` (arithmetic `((` or a subshell?) and
/// `case` items without `;;` (read as an item with `;;`, then again as the last one) double
/// the work at each level: 97 bytes of `(((…` took longer than the fuzzer's 14 s, 18 nested
/// `case x in x) … esac` 3 s (found by `scripts/fuzz rules`).
pub const MAX_BACKTRACKING: usize = 10;
/// How long one command may take to read before it is denied as unreadable, whatever it is
/// (a backstop for shapes [`MAX_BACKTRACKING`] does not know): the driver's turn and the hook
/// wait for the verdict. 256 KiB of ordinary commands take about 0.7 s in a release build on
/// two cores (several times that in a debug build, hence the longer debug figure).
pub const READ_DEADLINE: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(60)
} else {
    Duration::from_secs(5)
};
/// How many reads past their deadline may still run (a thread cannot be stopped: it ends when
/// the parse does); while that many do, every command is denied without being read, so the
/// CPU they take stays bounded.
pub const MAX_STILL_READING: usize = 2;
/// The reads past their deadline that are still running.
static STILL_READING: AtomicUsize = AtomicUsize::new(0);

/// An upper bound of how deeply `text` can nest once parsed: every `(`, `{`, `[`, `!` and
/// backquote, and every compound-command keyword, wherever it stands (quoted or not: counting
/// too many only denies sooner). Backslash-newlines are dropped first, as the shell does.
pub fn nesting_bound(text: &str) -> usize {
    let joined;
    let text = if text.contains("\\\n") {
        joined = text.replace("\\\n", "");
        joined.as_str()
    } else {
        text
    };
    let marks = text
        .bytes()
        .filter(|c| matches!(c, b'(' | b'{' | b'[' | b'!' | b'`'))
        .count();
    let keywords = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            matches!(
                *w,
                "if" | "elif"
                    | "while"
                    | "until"
                    | "for"
                    | "select"
                    | "case"
                    | "function"
                    | "coproc"
            )
        })
        .count();
    marks + keywords
}

/// How many levels of the shapes that brush-parser reads again at each level nest in `tokens`
/// (an estimate for [`MAX_BACKTRACKING`], not a parse): `(` never closed (each is tried as
/// arithmetic `((` and as a subshell, twice over at every level), plus the deepest chain of
/// `case` commands whose last item has no `;;` (or is not closed at all), each nested in an
/// item of the one before.
pub fn backtracking(tokens: &[Token]) -> usize {
    let mut unclosed_parens = 0usize;
    // For each open `case`: the deepest chain of such cases closed inside it so far.
    let mut cases: Vec<usize> = Vec::new();
    let mut deepest = 0usize;
    let mut prev: Option<&Token> = None;
    let mut before_newlines: Option<&Token> = None;
    for t in tokens {
        match t {
            Token::Operator(op, _) if op == "(" => unclosed_parens += 1,
            Token::Operator(op, _) if op == ")" => {
                unclosed_parens = unclosed_parens.saturating_sub(1)
            }
            Token::Word(w, _) if w == "case" && command_position(prev) => cases.push(0),
            Token::Word(w, _) if w == "esac" && !cases.is_empty() && command_position(prev) => {
                let inside = cases.pop().unwrap_or(0);
                let ended = matches!(
                    before_newlines,
                    Some(Token::Operator(op, _)) if matches!(op.as_str(), ";;" | ";&" | ";;&")
                );
                let chain = inside + usize::from(!ended);
                match cases.last_mut() {
                    Some(outer) => *outer = (*outer).max(chain),
                    None => deepest = deepest.max(chain),
                }
            }
            _ => {}
        }
        prev = Some(t);
        if !matches!(t, Token::Operator(op, _) if op == "\n") {
            before_newlines = Some(t);
        }
    }
    // Cases never closed: each is read again as well.
    let mut chain = 0;
    while let Some(inside) = cases.pop() {
        chain = inside.max(chain) + 1;
    }
    unclosed_parens + deepest.max(chain)
}

/// Whether a here-document operator (`<<` or `<<-`, not the here-string `<<<`) in `text` is
/// followed by nothing but blanks up to a newline or the end (a syntax error to the shell).
/// brush-parser's tokenizer, given that inside `$(…)` with an even number of blanks before the
/// end (`$(cat <<  `), loops allocating without end: 122 bytes took 24 GB in a minute (found by
/// `scripts/fuzz rules`). Quoting is not looked at: a quoted `<<` at the end of a line is
/// counted too, which only denies more.
pub fn here_document_without_tag(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text.get(i..).and_then(|rest| rest.find("<<")) {
        let mut j = i + at + 2;
        if b.get(j) == Some(&b'<') {
            // A here-string: `<<<` and whatever `<` follow it.
            while b.get(j) == Some(&b'<') {
                j += 1;
            }
            i = j;
            continue;
        }
        if b.get(j) == Some(&b'-') {
            j += 1;
        }
        while matches!(b.get(j), Some(b' ' | b'\t')) {
            j += 1;
        }
        if matches!(b.get(j), None | Some(b'\n')) {
            return true;
        }
        i = j;
    }
    false
}

/// Whether `text` leaves a `(` open (more `(` than `)`, quoted or not) and has a here-document
/// operator (`<<`, not `<<<`) with no line after it, so its body can only end with the input.
/// brush-parser's tokenizer, reading such a here-document inside an unclosed `$(…)`, loops
/// allocating without end when blanks and a tag follow in some counts (`$(<<  a `: found by
/// `scripts/fuzz rules`); the shell could not run it either (`$(` is never closed).
pub fn here_document_in_unclosed_substitution(text: &str) -> bool {
    let opens = text.bytes().filter(|&c| c == b'(').count();
    let closes = text.bytes().filter(|&c| c == b')').count();
    if opens <= closes {
        return false;
    }
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text.get(i..).and_then(|rest| rest.find("<<")) {
        let mut j = i + at + 2;
        if b.get(j) == Some(&b'<') {
            while b.get(j) == Some(&b'<') {
                j += 1;
            }
            i = j;
            continue;
        }
        if !b[j..].contains(&b'\n') {
            return true;
        }
        i = j;
    }
    false
}

/// Parses a script with brush-parser, after turning away what it cannot be trusted with
/// ([`here_document_without_tag`], [`here_document_in_unclosed_substitution`],
/// [`fd_number_too_large`], more than [`MAX_BACKTRACKING`]):
/// the program, or why it cannot be read.
fn parse(text: &str) -> Result<ast::Program, String> {
    if here_document_without_tag(text) {
        return Err("a here-document operator (`<<`) has no tag after it".to_owned());
    }
    if here_document_in_unclosed_substitution(text) {
        return Err(
            "a here-document (`<<`) has no line after it inside a `$(` that is never closed"
                .to_owned(),
        );
    }
    let tokens = brush_parser::uncached_tokenize_str(text, &options().tokenizer_options())
        .map_err(|e| format!("the shell cannot parse it: {e}"))?;
    if let Some(n) = fd_number_too_large(&tokens) {
        return Err(format!(
            "the file descriptor number {n} before a redirection is too large for the shell"
        ));
    }
    let levels = backtracking(&tokens);
    if levels > MAX_BACKTRACKING {
        return Err(format!(
            "it nests {levels} unclosed `(` or `case` items without `;;`, more than \
             {MAX_BACKTRACKING}: reading it would take too long"
        ));
    }
    brush_parser::parse_tokens(&tokens, &options())
        .map_err(|e| format!("the shell cannot parse it: {e}"))
}

/// brush-parser `unwrap`s a file descriptor number before a redirection into an `i32` (a
/// panic, found by `scripts/fuzz rules`): the first such number in `tokens` that does not fit.
fn fd_number_too_large(tokens: &[Token]) -> Option<&str> {
    tokens.windows(2).find_map(|pair| match pair {
        [Token::Word(n, _), Token::Operator(op, _)]
            if n.bytes().all(|c| c.is_ascii_digit())
                && op.starts_with(['<', '>'])
                && n.parse::<i32>().is_err() =>
        {
            Some(n.as_str())
        }
        _ => None,
    })
}

/// A word's pieces (`word::parse`), except where brush-parser would `unwrap` a directory stack
/// index after `~` (`~N`, `~+N`, `~-N`) that does not fit a `usize` (a panic).
fn parse_word(raw: &str) -> Result<Vec<WordPieceWithSource>, String> {
    let b = raw.as_bytes();
    for (i, _) in raw.match_indices('~') {
        let mut start = i + 1;
        if matches!(b.get(start), Some(b'+' | b'-')) {
            start += 1;
        }
        let digits = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 && raw[start..start + digits].parse::<usize>().is_err() {
            return Err(format!(
                "`{}` is too large a directory stack index",
                &raw[i..start + digits]
            ));
        }
    }
    word::parse(raw, &options()).map_err(|e| e.to_string())
}

/// Whether a word after `prev` stands where a command's name (or `esac`) does: after any
/// operator but a redirection, and after the keywords that a command follows. A guess, erring
/// towards counting more.
fn command_position(prev: Option<&Token>) -> bool {
    match prev {
        None => true,
        Some(Token::Operator(op, _)) => {
            !(op.starts_with('<') || op.starts_with('>') || op.starts_with("&>"))
        }
        Some(Token::Word(w, _)) => matches!(
            w.as_str(),
            "then" | "do" | "else" | "elif" | "if" | "while" | "until" | "!" | "{" | "time"
        ),
    }
}

/// One argument of a command as the shell would pass it, when that is known statically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// The word's value after quote removal (and `~`/`$HOME` expansion).
    Lit(String),
    /// The word depends on something only known at run time (a variable, a substitution):
    /// its shape, the known text with [`ANY`], [`DIGITS`] or [`JOB`] where the rest goes
    /// (`/proc/$PPID/environ` is `/proc/\u{1}/environ`).
    Computed(String),
}

impl Arg {
    /// The literal value, if known.
    pub fn lit(&self) -> Option<&str> {
        match self {
            Arg::Lit(s) => Some(s),
            Arg::Computed(_) => None,
        }
    }

    /// The shape of a computed value.
    pub fn computed(&self) -> Option<&str> {
        match self {
            Arg::Lit(_) => None,
            Arg::Computed(s) => Some(s),
        }
    }

    /// The value with marks where it is only known at run time.
    pub fn shape(&self) -> &str {
        match self {
            Arg::Lit(s) | Arg::Computed(s) => s,
        }
    }
}

/// A path a command may touch: resolved when known.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathOperand {
    /// Absolute and lexically normalised (a number only known at run time, such as `$$`, is
    /// a [`DIGITS`] mark: it stays in its folder).
    Known(PathBuf),
    /// Relative to an unknown directory, or computed at run time: its shape, absolute and
    /// normalised when the part that decides its folder is known ([`paths::glob_shape`]).
    Unknown(String),
}

/// One simple command that the shell would run.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// The command's name after quote removal, without its directory (`/bin/rm` -> `rm`).
    pub name: String,
    /// Its arguments.
    pub args: Vec<Arg>,
    /// Paths among its operands (for most commands the arguments that are not options).
    pub operands: Vec<PathOperand>,
    /// The literal arguments that are not options, as paths, except those written as `.` or
    /// `..` (or ending in `/.`, `/..`), which `rm` and `rmdir` refuse to remove: what a
    /// delete would remove as a whole.
    pub wholes: Vec<PathOperand>,
    /// Files its redirections name.
    pub redirects: Vec<PathOperand>,
    /// Names of the commands whose output flows into this one (earlier pipeline stages,
    /// process and command substitutions among its words, here-strings).
    pub fed_by: Vec<String>,
    /// Names of the commands this one's output flows into (later pipeline stages).
    pub feeds: Vec<String>,
    /// Set when this command calls the shell function it is defined in.
    pub recursive: bool,
    /// Files it writes, creates, moves, or changes the mode or owner of (redirections
    /// included; see `writes.rs`).
    pub writes: Vec<PathOperand>,
    /// What the reading found about it beyond its words ([`facts`]).
    pub facts: Vec<&'static str>,
}

/// Facts the reading attaches to an [`Invocation`] (rules name them in `facts`).
pub mod facts {
    /// Interpreter code (`python3 -c`, `awk`, `sed`, `vim -c`, …) that cannot be read and runs a
    /// shell, builds the code or command it runs, or deletes a path only known at run time.
    pub const INLINE_CODE: &str = "inline-code";
    /// A git setting or environment variable that makes git run a program.
    pub const GIT_RUNS_CODE: &str = "git-runs-code";
    /// Runs, sources or interprets a file a downloader wrote earlier on the line.
    pub const DOWNLOAD_RUN: &str = "download-run";
    /// `kill` aimed only at the shell's own jobs (`%1`, `$!`).
    pub const OWN_JOBS: &str = "own-jobs";
}

/// What makes a command line unreadable; the rules deny it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The shell grammar does not accept it.
    Unparsable(String),
    /// Something that decides what runs is only known at run time.
    Computed(String),
}

/// Every simple command of `command`, read with `workspace` as the starting directory and
/// `home` as `~`, within [`READ_DEADLINE`] (past it, the command is denied as unreadable).
pub fn read(
    command: &str,
    workspace: &Path,
    home: Option<&Path>,
) -> (Vec<Invocation>, Vec<Failure>) {
    read_within(command, workspace, home, READ_DEADLINE)
}

/// The reads that went past their deadline and are still running (see [`MAX_STILL_READING`]).
pub fn still_reading() -> usize {
    STILL_READING.load(Ordering::SeqCst)
}

fn unreadable(why: String) -> (Vec<Invocation>, Vec<Failure>) {
    (Vec::new(), vec![Failure::Unparsable(why)])
}

/// [`read`] with a deadline of the caller's: the command is read on a thread of its own, and
/// if that takes longer than `deadline` the command is denied as unreadable while the thread
/// runs on to its end.
pub fn read_within(
    command: &str,
    workspace: &Path,
    home: Option<&Path>,
    deadline: Duration,
) -> (Vec<Invocation>, Vec<Failure>) {
    const RUNNING: u8 = 0;
    const DONE: u8 = 1;
    const ABANDONED: u8 = 2;
    let late = still_reading();
    if late >= MAX_STILL_READING {
        return unreadable(format!(
            "{late} earlier commands are still being read after {deadline:?}; none is read \
             until they end"
        ));
    }
    let state = std::sync::Arc::new(AtomicU8::new(RUNNING));
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let job = {
        let (command, workspace) = (command.to_owned(), workspace.to_owned());
        let home = home.map(Path::to_path_buf);
        let state = std::sync::Arc::clone(&state);
        move || {
            let done = read_here(&command, &workspace, home.as_deref());
            if state
                .compare_exchange(RUNNING, DONE, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // Given up on by its caller, which counted it: it is over now.
                STILL_READING.fetch_sub(1, Ordering::SeqCst);
            }
            let _ = tx.send(done);
        }
    };
    let spawned = std::thread::Builder::new()
        .name("hangar-rules-read".into())
        .stack_size(SHALLOW_STACK)
        .spawn(job);
    let handle = match spawned {
        Ok(h) => h,
        Err(e) => return unreadable(format!("no thread to read the command on ({e})")),
    };
    // A thread that answered is joined (it is ending), so nothing of it outlives the call.
    match rx.recv_timeout(deadline) {
        Ok(done) => {
            let _ = handle.join();
            done
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            // A panic is a bug: it goes on as if the command had been read on this thread (and
            // the fuzzer sees it).
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreadable("reading the command failed".to_owned()),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            STILL_READING.fetch_add(1, Ordering::SeqCst);
            if state
                .compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // It finished just now.
                STILL_READING.fetch_sub(1, Ordering::SeqCst);
                if let Ok(done) = rx.recv() {
                    let _ = handle.join();
                    return done;
                }
            }
            unreadable(format!(
                "reading it took longer than {deadline:?}, more than any command should"
            ))
        }
    }
}

fn read_here(
    command: &str,
    workspace: &Path,
    home: Option<&Path>,
) -> (Vec<Invocation>, Vec<Failure>) {
    let walker = |limit: usize| Walker {
        home: home.map(Path::to_path_buf),
        cwd: Cwd::Known(workspace.to_path_buf()),
        out: Vec::new(),
        failures: Vec::new(),
        depth: 0,
        functions: Vec::new(),
        nesting: 0,
        nesting_limit: limit,
        needs_deep: false,
        links: 0,
        planted: Vec::new(),
        downloads: Vec::new(),
        download_unknown: false,
        psubs: Vec::new(),
        code_stdin: false,
    };
    let mut w = walker(SHALLOW_NESTING);
    if command.len() > MAX_COMMAND_BYTES {
        w.failures.push(Failure::Unparsable(format!(
            "the command is longer than {MAX_COMMAND_BYTES} bytes"
        )));
        return (w.out, w.failures);
    }
    w.script(command);
    if !w.needs_deep {
        return (w.out, w.failures);
    }
    // Too deep for the caller's stack: read it again on a thread with room for MAX_NESTING.
    let mut deep = walker(MAX_NESTING);
    let read = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("hangar-rules-deep".into())
            .stack_size(DEEP_STACK)
            .spawn_scoped(s, move || {
                deep.script(command);
                (deep.out, deep.failures)
            })
            .map(|h| h.join())
    });
    match read {
        Ok(Ok(done)) => done,
        Ok(Err(_)) => (
            Vec::new(),
            vec![Failure::Unparsable("reading the command failed".to_owned())],
        ),
        Err(e) => (
            Vec::new(),
            vec![Failure::Unparsable(format!(
                "the command nests too deeply to read here ({e})"
            ))],
        ),
    }
}

fn options() -> ParserOptions {
    ParserOptions::default()
}

struct Walker {
    home: Option<PathBuf>,
    cwd: Cwd,
    out: Vec<Invocation>,
    failures: Vec<Failure>,
    depth: usize,
    /// Names of the shell functions whose bodies are being walked.
    functions: Vec<String>,
    /// The [`nesting_bound`]s of the scripts being read, one inside the other.
    nesting: usize,
    /// How much of it this walk may read ([`SHALLOW_NESTING`] or [`MAX_NESTING`]).
    nesting_limit: usize,
    /// Set when a shallow walk met more nesting than it may read: read again, deep.
    needs_deep: bool,
    /// Command names copied into `fed_by`/`feeds` lists so far (see [`MAX_LINKS`]).
    links: usize,
    /// Links `ln` made earlier on the line, with where they point (`None`: only known at run
    /// time), latest last: later paths through them are read as the shell would reach them
    /// (`ln -s / x && rm -rf x/etc`). Unlike the directory, a subshell's links stay.
    planted: Vec<(PathBuf, Option<PathBuf>)>,
    /// Files a downloader (`curl -o`, `wget`, `curl … > f`) wrote earlier on the line, and
    /// those copied from them: running one is running code from the network.
    downloads: Vec<PathBuf>,
    /// Set when a downloader wrote a file whose name is only known at run time.
    download_unknown: bool,
    /// What each process substitution writes, when it is a literal `echo`/`printf` (found by
    /// the number in its shape, see [`Walker::psub_shape`]).
    psubs: Vec<Option<String>>,
    /// Set while walking commands that interpreter code runs: their stdin is the code's to
    /// write, so a shell reading its script from it reads what the run decides.
    code_stdin: bool,
}

/// A word after expansion: its value when known, and the commands of its substitutions.
struct Expanded {
    arg: Arg,
    /// The word as written (for a here-string that a shell reads).
    raw: String,
    /// Unquoted glob characters in the word.
    glob: bool,
    /// Names of commands run by substitutions in the word.
    fed_by: Vec<String>,
}

/// A word's value being built from its pieces.
#[derive(Default)]
struct WordValue {
    /// The value, when every piece is known.
    value: String,
    /// The shape: the value with marks for the pieces only known at run time.
    shape: String,
    /// Some piece is only known at run time.
    computed: bool,
    /// Unquoted glob characters.
    glob: bool,
    /// Names of commands run by substitutions.
    fed_by: Vec<String>,
}

impl WordValue {
    fn text(&mut self, t: &str) {
        self.value.push_str(t);
        self.shape.push_str(t);
    }

    fn mark(&mut self, m: char) {
        self.computed = true;
        self.shape.push(m);
    }
}

impl Walker {
    /// Parses and walks a script (the whole command, a `sh -c` string, a substitution's body).
    fn script(&mut self, text: &str) {
        if self.depth >= MAX_DEPTH {
            self.failures.push(Failure::Computed(format!(
                "commands nest deeper than {MAX_DEPTH} levels"
            )));
            return;
        }
        if self.needs_deep {
            return;
        }
        let nesting = nesting_bound(text);
        if self.nesting + nesting > self.nesting_limit {
            if self.nesting_limit < MAX_NESTING {
                self.needs_deep = true;
            } else {
                self.failures.push(Failure::Unparsable(format!(
                    "it has more than {MAX_NESTING} brackets, `!` and compound-command keywords \
                     (counted in every script it runs), too many to read"
                )));
            }
            return;
        }
        self.nesting += nesting;
        match parse(text) {
            Ok(program) => {
                self.depth += 1;
                for list in &program.complete_commands {
                    self.compound_list(list);
                }
                self.depth -= 1;
            }
            Err(why) => self.failures.push(Failure::Unparsable(why)),
        }
        self.nesting -= nesting;
    }

    /// Counts `n` command names about to be copied; false (and a failure, once) past
    /// [`MAX_LINKS`].
    fn link(&mut self, n: usize) -> bool {
        if self.links > MAX_LINKS {
            return false;
        }
        self.links = self.links.saturating_add(n);
        if self.links > MAX_LINKS {
            self.failures.push(Failure::Unparsable(format!(
                "its pipelines connect more than {MAX_LINKS} pairs of commands, too many to read"
            )));
            return false;
        }
        true
    }

    /// Walks a script in a subshell: `cd` inside does not change the caller's directory.
    /// Returns the names of the commands it ran.
    fn subshell_script(&mut self, text: &str) -> Vec<String> {
        let saved = self.cwd.clone();
        let first = self.out.len();
        self.script(text);
        self.cwd = saved;
        if !self.link(self.out.len() - first) {
            return Vec::new();
        }
        self.out[first..].iter().map(|i| i.name.clone()).collect()
    }

    fn compound_list(&mut self, list: &CompoundList) {
        for item in &list.0 {
            let and_or = &item.0;
            self.pipeline(&and_or.first);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p),
                }
            }
        }
    }

    fn pipeline(&mut self, p: &Pipeline) {
        let mut fed_by: Vec<String> = Vec::new();
        // The literal text an `echo`/`printf` stage writes, for a shell reading it next.
        let mut literal_output: Option<String> = None;
        let mut stages = Vec::new();
        for (k, cmd) in p.seq.iter().enumerate() {
            let first = self.out.len();
            if !self.link(fed_by.len()) {
                return;
            }
            let stdin = Stdin {
                fed_by: fed_by.clone(),
                literal: literal_output.take(),
            };
            self.command(cmd, &stdin);
            stages.push(first..self.out.len());
            // Only a next stage reads what this one wrote (skipping this for the last stage
            // keeps nested compound commands, each a pipeline of one, linear).
            if k + 1 < p.seq.len() {
                literal_output = literal_echo(cmd);
                if !self.link(self.out.len() - first) {
                    return;
                }
                fed_by.extend(self.out[first..].iter().map(|i| i.name.clone()));
            }
        }
        if stages.len() < 2 {
            return;
        }
        for (k, stage) in stages.iter().enumerate() {
            let later_count: usize = stages[k + 1..].iter().map(|r| r.len()).sum();
            if !self.link(later_count.saturating_mul(stage.len() + 1)) {
                return;
            }
            let later: Vec<String> = stages[k + 1..]
                .iter()
                .flat_map(|r| self.out[r.clone()].iter().map(|i| i.name.clone()))
                .collect();
            for i in stage.clone() {
                self.out[i].feeds.extend(later.iter().cloned());
            }
        }
    }

    fn command(&mut self, cmd: &Command, stdin: &Stdin) {
        match cmd {
            Command::Simple(sc) => self.simple(sc, stdin),
            Command::Compound(cc, redirects) => {
                self.compound_redirects(redirects.as_ref());
                self.compound(cc, stdin);
            }
            Command::Function(f) => {
                let name = f.fname.value.clone();
                self.functions.push(name);
                self.compound(&f.body.0, &Stdin::default());
                self.compound_redirects(f.body.1.as_ref());
                self.functions.pop();
            }
            Command::ExtendedTest(t, redirects) => {
                self.test_expr(&t.expr);
                self.compound_redirects(redirects.as_ref());
            }
        }
    }

    /// A compound command's redirections (`{ …; } > f`, `while …; done < f`): recorded like a
    /// command's.
    fn compound_redirects(&mut self, redirects: Option<&ast::RedirectList>) {
        let Some(r) = redirects else { return };
        let mut paths = Vec::new();
        let mut writes = Vec::new();
        for io in &r.0 {
            let r = self.redirect(io);
            if let Some(p) = r.path {
                if r.write {
                    writes.push(p.clone());
                }
                paths.push(p);
            }
        }
        self.bare(paths, writes, &[]);
    }

    fn test_expr(&mut self, e: &ExtendedTestExpr) {
        match e {
            ExtendedTestExpr::And(a, b) | ExtendedTestExpr::Or(a, b) => {
                self.test_expr(a);
                self.test_expr(b);
            }
            ExtendedTestExpr::Not(a) | ExtendedTestExpr::Parenthesized(a) => self.test_expr(a),
            ExtendedTestExpr::UnaryTest(_, w) => {
                let _ = self.expand(&w.value);
            }
            ExtendedTestExpr::BinaryTest(_, a, b) => {
                let _ = self.expand(&a.value);
                let _ = self.expand(&b.value);
            }
        }
    }

    fn compound(&mut self, cc: &CompoundCommand, stdin: &Stdin) {
        match cc {
            CompoundCommand::Arithmetic(a) => self.arithmetic(&a.expr.value),
            CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value);
                }
                self.compound_list(&f.body.list);
            }
            CompoundCommand::BraceGroup(b) => {
                let _ = stdin;
                self.compound_list(&b.list);
            }
            CompoundCommand::Subshell(s) => {
                let saved = self.cwd.clone();
                self.compound_list(&s.list);
                self.cwd = saved;
            }
            CompoundCommand::ForClause(f) => {
                // The words the loop goes over are paths its body may touch
                // (`for f in /proc/*/environ; do cat $f; done`).
                let mut operands = Vec::new();
                for w in f.values.iter().flatten() {
                    for e in self.expand_words(&w.value) {
                        operands.push(self.path_of(&e.arg));
                    }
                }
                if !operands.is_empty() {
                    self.out.push(Invocation {
                        name: "for".into(),
                        args: Vec::new(),
                        operands,
                        wholes: Vec::new(),
                        redirects: Vec::new(),
                        fed_by: Vec::new(),
                        feeds: Vec::new(),
                        recursive: false,
                        writes: Vec::new(),
                        facts: Vec::new(),
                    });
                }
                self.compound_list(&f.body.list);
            }
            CompoundCommand::CaseClause(c) => {
                let _ = self.expand(&c.value.value);
                for item in &c.cases {
                    for p in &item.patterns {
                        let _ = self.expand(&p.value);
                    }
                    if let Some(list) = &item.cmd {
                        self.compound_list(list);
                    }
                }
            }
            CompoundCommand::IfClause(i) => {
                self.compound_list(&i.condition);
                self.compound_list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.compound_list(c);
                    }
                    self.compound_list(&e.body);
                }
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                self.compound_list(&w.0);
                self.compound_list(&w.1.list);
            }
            CompoundCommand::Coprocess(c) => self.command(&c.body, &Stdin::default()),
        }
    }

    /// Arithmetic may hide a command substitution (`$(( $(cmd) ))`): its text is read as a word.
    fn arithmetic(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') {
            let _ = self.expand(&format!("\"{text}\""));
        }
    }

    /// Expands one word statically.
    fn expand(&mut self, raw: &str) -> Expanded {
        let pieces = match parse_word(raw) {
            Ok(p) => p,
            Err(e) => {
                self.failures.push(Failure::Unparsable(format!(
                    "the shell cannot read the word {raw:?}: {e}"
                )));
                return Expanded {
                    arg: Arg::Computed(ANY.to_string()),
                    raw: raw.to_owned(),
                    glob: false,
                    fed_by: Vec::new(),
                };
            }
        };
        let mut w = WordValue::default();
        self.pieces(&pieces, false, &mut w);
        Expanded {
            arg: if w.computed {
                Arg::Computed(w.shape)
            } else {
                Arg::Lit(w.value)
            },
            raw: raw.to_owned(),
            glob: w.glob,
            fed_by: w.fed_by,
        }
    }

    fn pieces(&mut self, pieces: &[WordPieceWithSource], quoted: bool, w: &mut WordValue) {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) => {
                    if !quoted && is_pattern(t) {
                        w.glob = true;
                    }
                    w.text(t);
                }
                WordPiece::SingleQuotedText(t) => w.text(t),
                WordPiece::AnsiCQuotedText(t) => match ansi_c(t) {
                    Some(s) => w.text(&s),
                    None => w.mark(ANY),
                },
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, true, w);
                }
                WordPiece::TildeExpansion(t) => match (t, &self.home) {
                    (TildeExpr::Home, Some(h)) => w.text(&h.to_string_lossy()),
                    _ => w.mark(ANY),
                },
                WordPiece::ParameterExpansion(expr) => {
                    let text = format!("{expr:?}");
                    if text.contains("$(") || text.contains('`') {
                        self.failures.push(Failure::Computed(
                            "a command substitution hides inside a parameter expansion".into(),
                        ));
                    }
                    match parameter_shape(expr) {
                        ParamShape::Home => match &self.home {
                            Some(h) => w.text(&h.to_string_lossy()),
                            None => w.mark(ANY),
                        },
                        ParamShape::Root(name) => {
                            w.computed = true;
                            w.shape.push_str(&root_shape(name));
                        }
                        ParamShape::Mark(m) => w.mark(m),
                    }
                }
                WordPiece::CommandSubstitution(body)
                | WordPiece::BackquotedCommandSubstitution(body) => {
                    w.mark(ANY);
                    let body = if matches!(p.piece, WordPiece::BackquotedCommandSubstitution(_)) {
                        unescape_backquoted(body)
                    } else {
                        body.clone()
                    };
                    let names = self.subshell_script(&body);
                    w.fed_by.extend(names);
                }
                WordPiece::EscapeSequence(e) => {
                    let rest = e.strip_prefix('\\').unwrap_or(e);
                    if rest != "\n" {
                        w.text(rest);
                    }
                }
                WordPiece::ArithmeticExpression(a) => {
                    w.mark(ANY);
                    self.arithmetic(&a.value);
                }
            }
        }
    }

    /// A redirection: the file it names (if any), whether it is written, and the commands
    /// feeding it.
    fn redirect(&mut self, io: &IoRedirect) -> Redirect {
        use ast::IoFileRedirectKind as K;
        let mut r = Redirect::default();
        match io {
            IoRedirect::File(_, kind, target) => match target {
                IoFileRedirectTarget::Filename(w) => {
                    let e = self.expand_one(&w.value);
                    r.fed_by.extend(e.fed_by);
                    r.path = Some(self.path_of(&e.arg));
                    r.write = !matches!(kind, K::Read | K::DuplicateInput);
                }
                IoFileRedirectTarget::Duplicate(w) => {
                    let e = self.expand_one(&w.value);
                    r.fed_by.extend(e.fed_by);
                    if e.arg
                        .lit()
                        .is_none_or(|v| !v.chars().all(|c| c.is_ascii_digit() || c == '-'))
                    {
                        r.path = Some(self.path_of(&e.arg));
                        r.write = matches!(kind, K::DuplicateOutput);
                    }
                }
                IoFileRedirectTarget::Fd(_) => {}
                IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                    let names = self.subshell_list(&sub.list);
                    if matches!(kind, K::Read) {
                        r.fed_by.extend(names);
                        // `bash < <(echo 'cmd')`: what the shell reads is the echo's text.
                        match list_literal_output(&sub.list) {
                            Some(text) => r.stdin_script = Some(text),
                            None => r.stdin_computed = true,
                        }
                    }
                }
            },
            IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    let e = self.expand(&format!("\"{}\"", doc.doc.value.replace('"', "\\\"")));
                    r.fed_by.extend(e.fed_by);
                }
                r.stdin_script = Some(doc.doc.value.clone());
            }
            IoRedirect::HereString(_, w) => {
                let e = self.expand(&w.value);
                r.fed_by.extend(e.fed_by);
                r.stdin_script = Some(match e.arg {
                    Arg::Lit(s) => s,
                    Arg::Computed(_) => e.raw,
                });
                r.stdin_computed = e.glob;
            }
            IoRedirect::OutputAndError(w, _) => {
                let e = self.expand_one(&w.value);
                r.fed_by.extend(e.fed_by);
                r.path = Some(self.path_of(&e.arg));
                r.write = true;
            }
        }
        r
    }

    fn subshell_list(&mut self, list: &CompoundList) -> Vec<String> {
        let saved = self.cwd.clone();
        let first = self.out.len();
        self.compound_list(list);
        self.cwd = saved;
        if !self.link(self.out.len() - first) {
            return Vec::new();
        }
        self.out[first..].iter().map(|i| i.name.clone()).collect()
    }

    /// A path operand as the command would reach it (see [`PathOperand`]).
    fn path_of(&self, arg: &Arg) -> PathOperand {
        match arg {
            Arg::Lit(s) => match self.resolve_here(s) {
                Some(p) => PathOperand::Known(p),
                None => self.unknown_here(s),
            },
            Arg::Computed(shape) => self.path_of_shape(shape),
        }
    }

    /// A relative path under a directory known in part (`cd /proc/$X && cat environ`): its
    /// shape under it; else as written.
    fn unknown_here(&self, text: &str) -> PathOperand {
        match &self.cwd {
            Cwd::Shape(dir) if !text.starts_with('/') && !text.starts_with('~') => {
                PathOperand::Unknown(
                    normalize(&Path::new(dir).join(text))
                        .to_string_lossy()
                        .into_owned(),
                )
            }
            _ => PathOperand::Unknown(text.to_owned()),
        }
    }

    /// A shape's path: known when only numbers are missing from it (they stay in their
    /// folder), else its shape resolved as far as its start is known.
    fn path_of_shape(&self, shape: &str) -> PathOperand {
        let shape = shape.replace(JOB, &DIGITS.to_string());
        let first = shape.split('/').next().unwrap_or("");
        let starts_known = shape.starts_with('/') || !first.contains(ANY);
        if !starts_known {
            return PathOperand::Unknown(shape);
        }
        if let Cwd::Shape(_) = self.cwd
            && !shape.starts_with('/')
        {
            return self.unknown_here(&shape);
        }
        match resolve(&shape, &self.cwd, self.home.as_deref()) {
            Some(p) if !shape.contains(ANY) => match self.through_planted(p) {
                Some(p) => PathOperand::Known(p),
                None => PathOperand::Unknown(shape),
            },
            Some(p) => match self.through_planted(p) {
                Some(p) => PathOperand::Unknown(p.to_string_lossy().into_owned()),
                None => PathOperand::Unknown(shape),
            },
            None => PathOperand::Unknown(shape),
        }
    }

    /// A word as the shell splits it into arguments: brace expansion first (`{rm,-rf,/}` is
    /// three words), then each expanded.
    fn expand_words(&mut self, raw: &str) -> Vec<Expanded> {
        match brace::expand(raw) {
            Ok(None) => vec![self.expand(raw)],
            Ok(Some(words)) => words.iter().map(|w| self.expand(w)).collect(),
            Err(why) => {
                self.failures.push(Failure::Unparsable(why));
                vec![self.expand(raw)]
            }
        }
    }

    /// A word that names one file (a redirection's): brace expansion to more than one word is
    /// an error to the shell ("ambiguous redirect"); it is denied as unreadable.
    fn expand_one(&mut self, raw: &str) -> Expanded {
        let mut words = self.expand_words(raw);
        if words.len() > 1 {
            self.failures.push(Failure::Unparsable(format!(
                "the redirection target {raw:?} expands to {} words",
                words.len()
            )));
        }
        words.swap_remove(0)
    }

    fn simple(&mut self, sc: &SimpleCommand, stdin: &Stdin) {
        if !self.link(stdin.fed_by.len()) {
            return;
        }
        let mut st = SimpleState {
            words: Vec::new(),
            redirects: Vec::new(),
            writes: Vec::new(),
            env: Vec::new(),
            fed_by: stdin.fed_by.clone(),
            stdin_script: stdin.literal.clone(),
            stdin_piped: !stdin.fed_by.is_empty() && stdin.literal.is_none(),
        };
        for item in sc.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, true, &mut st);
        }
        if let Some(w) = &sc.word_or_name {
            let e = self.expand_words(&w.value);
            st.words.extend(e);
        }
        for item in sc.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, false, &mut st);
        }
        let SimpleState {
            words,
            redirects,
            writes,
            env,
            mut fed_by,
            stdin_script,
            stdin_piped,
        } = st;
        let Some(first) = words.first() else {
            // Only assignments and redirections: `> ~/.bashrc` still writes, and
            // `GIT_SSH_COMMAND=… ; git fetch` still sets what git runs.
            self.bare(redirects, writes, &env);
            return;
        };
        if first.glob {
            self.failures.push(Failure::Computed(format!(
                "the command name {} is a pattern expanded at run time",
                shown(&first.arg)
            )));
            return;
        }
        for w in &words {
            if !self.link(w.fed_by.len()) {
                return;
            }
            fed_by.extend(w.fed_by.iter().cloned());
        }
        let argv: Vec<Arg> = words.into_iter().map(|w| w.arg).collect();
        let call = Call {
            argv,
            redirects,
            writes,
            env,
            fed_by,
            stdin_script,
            stdin_piped,
            extra: None,
        };
        self.invoke(call);
    }

    /// Records what a command without a name does: its redirections (`> f`, `{ …; } > f`) and
    /// the git settings its assignments make.
    fn bare(
        &mut self,
        redirects: Vec<PathOperand>,
        writes: Vec<PathOperand>,
        env: &[(String, Arg)],
    ) {
        let mut facts = Vec::new();
        if env.iter().any(|(n, v)| git::env_runs_code(n, v.lit())) {
            facts.push(facts::GIT_RUNS_CODE);
        }
        if redirects.is_empty() && writes.is_empty() && facts.is_empty() {
            return;
        }
        self.out.push(Invocation {
            name: String::new(),
            args: Vec::new(),
            operands: Vec::new(),
            wholes: Vec::new(),
            redirects,
            fed_by: Vec::new(),
            feeds: Vec::new(),
            recursive: false,
            writes,
            facts,
        });
    }

    fn item(&mut self, item: &CommandPrefixOrSuffixItem, in_prefix: bool, st: &mut SimpleState) {
        match item {
            CommandPrefixOrSuffixItem::IoRedirect(io) => {
                let r = self.redirect(io);
                st.fed_by.extend(r.fed_by);
                if let Some(p) = r.path {
                    if r.write {
                        st.writes.push(p.clone());
                    }
                    st.redirects.push(p);
                }
                if let Some(s) = r.stdin_script {
                    st.stdin_script = Some(s);
                    st.stdin_piped = r.stdin_computed;
                } else if r.stdin_computed {
                    st.stdin_script = None;
                    st.stdin_piped = true;
                }
            }
            CommandPrefixOrSuffixItem::Word(w) => {
                let e = self.expand_words(&w.value);
                st.words.extend(e);
            }
            CommandPrefixOrSuffixItem::AssignmentWord(a, w) => {
                let e = self.expand(&w.value);
                // `X=$(cmd) prog`: cmd runs (walked above) but its output is not prog's input;
                // after the name (`export X=...`) it is an argument.
                if in_prefix {
                    if let (ast::AssignmentName::VariableName(n), ast::AssignmentValue::Scalar(v)) =
                        (&a.name, &a.value)
                    {
                        let value = self.expand(&v.value).arg;
                        st.env.push((n.clone(), value));
                    }
                } else {
                    st.words.push(e);
                }
            }
            CommandPrefixOrSuffixItem::ProcessSubstitution(kind, sub) => {
                let names = self.subshell_list(&sub.list);
                if !self.link(names.len()) {
                    return;
                }
                if matches!(kind, ast::ProcessSubstitutionKind::Read) {
                    st.fed_by.extend(names.iter().cloned());
                }
                let shape = self.psub_shape(list_literal_output(&sub.list));
                st.words.push(Expanded {
                    arg: Arg::Computed(shape),
                    raw: "<(...)".into(),
                    glob: false,
                    fed_by: names,
                });
            }
        }
    }

    /// The shape of a process substitution's file (`/dev/fd/N` at run time): unknown, with a
    /// number that finds what it writes when that is literal ([`Walker::psub_literal`]).
    fn psub_shape(&mut self, literal: Option<String>) -> String {
        self.psubs.push(literal);
        format!("{ANY}<({})", self.psubs.len() - 1)
    }

    /// What the process substitution `arg` stands for writes, when it is a literal `echo`.
    pub(super) fn psub_literal(&self, arg: &Arg) -> Option<Option<&str>> {
        let n: usize = arg
            .computed()?
            .strip_prefix(ANY)?
            .strip_prefix("<(")?
            .strip_suffix(')')?
            .parse()
            .ok()?;
        self.psubs.get(n).map(Option::as_deref)
    }

    /// Records one command and follows it when it runs another.
    fn invoke(&mut self, call: Call) {
        let Some(first) = call.argv.first() else {
            return;
        };
        let Some(path) = first.lit() else {
            self.failures.push(Failure::Computed(format!(
                "the command name {} is computed at run time",
                shown(first)
            )));
            return;
        };
        if path.is_empty() {
            return;
        }
        let path = path.to_owned();
        let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
        let args: Vec<Arg> = call.argv[1..].to_vec();
        let mut all_args = args.clone();
        if let Some(extra) = &call.extra {
            all_args.extend(extra.iter().cloned());
        }
        let mut operands = self.operands(&name, &all_args);
        // `ps e`, `ps auxe`: the environment of every process it shows.
        if name == "ps"
            && all_args.first().and_then(Arg::lit).is_some_and(|s| {
                !s.starts_with('-') && s.contains('e') && s.chars().all(|c| c.is_ascii_alphabetic())
            })
        {
            operands.push(PathOperand::Known(PathBuf::from("/proc/*/environ")));
        }
        if follow::reads_recursively(&name, &all_args) {
            // A folder read with all it holds: what is below it is read too.
            let below: Vec<PathOperand> = operands
                .iter()
                .filter_map(|o| match o {
                    PathOperand::Known(p) => {
                        Some(PathOperand::Known(p.join(paths::BELOW.to_string())))
                    }
                    PathOperand::Unknown(_) => None,
                })
                .collect();
            operands.extend(below);
        }
        let wholes = all_args
            .iter()
            .filter_map(Arg::lit)
            .filter(|s| !s.starts_with('-') && !names_a_dot(s))
            .map(|s| self.path_of(&Arg::Lit(s.to_owned())))
            .collect();
        let mut redirects = call.redirects.clone();
        if name == "dd" {
            // What dd reads is not destroyed, but path rules (credentials, /proc) still see it.
            for a in &all_args {
                if let Some(v) = a.lit().and_then(|s| s.strip_prefix("if=")) {
                    redirects.push(self.path_of(&Arg::Lit(v.to_owned())));
                }
            }
        }
        let mut writes = call.writes.clone();
        writes.extend(self.write_targets(&name, &all_args));
        let mut found = Vec::new();
        if git::runs_code(&name, &all_args, &call.env) {
            found.push(facts::GIT_RUNS_CODE);
        }
        if name == "kill" && own_jobs(&all_args) {
            found.push(facts::OWN_JOBS);
        }
        if self.runs_download(&path, &name, &all_args, &call) {
            found.push(facts::DOWNLOAD_RUN);
        }
        // The same path named twice is checked once.
        let mut seen = std::collections::HashSet::new();
        operands.retain(|o| seen.insert(o.clone()));
        let recursive = self.functions.contains(&name);
        let at = self.out.len();
        self.out.push(Invocation {
            name: name.clone(),
            args: all_args.clone(),
            operands,
            wholes,
            redirects,
            fed_by: call.fed_by.clone(),
            feeds: Vec::new(),
            recursive,
            writes,
            facts: found,
        });
        self.note_downloads(at, &call);
        if name == "cd" || name == "pushd" {
            self.change_dir(&args);
            return;
        }
        if name == "ln" {
            self.plant(&args);
        }
        self.follow(&name, &args, &call, at);
    }

    /// A path as written here: against the current directory and `~`, then through the links
    /// planted earlier on the line; `None` when it is only known at run time.
    fn resolve_here(&self, text: &str) -> Option<PathBuf> {
        self.through_planted(resolve(text, &self.cwd, self.home.as_deref())?)
    }

    /// `p` with the links planted earlier on the line followed (a bounded number of times: a
    /// loop of links is only known at run time).
    fn through_planted(&self, mut p: PathBuf) -> Option<PathBuf> {
        for _ in 0..MAX_PLANTED_HOPS {
            let Some((link, target)) = self.planted.iter().rev().find(|(l, _)| p.starts_with(l))
            else {
                return Some(p);
            };
            let rest = p.strip_prefix(link).ok()?.to_path_buf();
            p = normalize(&target.as_ref()?.join(rest));
        }
        None
    }

    /// Records the links `ln` makes ([`Walker::links`]): where each link will be and what it
    /// points to. A link whose place is only known at run time may be anywhere: every later
    /// path becomes unknown.
    fn plant(&mut self, args: &[Arg]) {
        let (symbolic, made) = self.links(args);
        for (target, link) in made {
            let Some(link) = link else {
                self.planted.push((PathBuf::from("/"), None));
                continue;
            };
            let to = target.lit().and_then(|t| {
                if symbolic {
                    let parent = link.parent().unwrap_or(Path::new("/")).to_path_buf();
                    resolve(t, &Cwd::Known(parent), self.home.as_deref())
                        .and_then(|p| self.through_planted(p))
                } else {
                    self.resolve_here(t)
                }
            });
            self.planted.push((link, to));
        }
    }

    /// The links `ln` makes (`ln [-s] TARGET [LINK]`, `ln TARGET... DIR`, `ln -t DIR
    /// TARGET...`): whether they are symbolic, and each target with where its link will be
    /// (`None` when only known at run time).
    fn links(&self, args: &[Arg]) -> (bool, Vec<(Arg, Option<PathBuf>)>) {
        let mut symbolic = false;
        let mut no_dir = false;
        let mut dir: Option<Arg> = None;
        let mut operands: Vec<Arg> = Vec::new();
        let mut options_done = false;
        let mut i = 0;
        while i < args.len() {
            match &args[i] {
                Arg::Lit(s) if !options_done && s == "--" => options_done = true,
                Arg::Lit(s) if !options_done && s.starts_with("--") => {
                    let (k, v) = match s.split_once('=') {
                        Some((k, v)) => (k, Some(v)),
                        None => (s.as_str(), None),
                    };
                    match k {
                        "--symbolic" => symbolic = true,
                        "--no-target-directory" => no_dir = true,
                        "--target-directory" | "--suffix" => {
                            let value = match v {
                                Some(v) => Some(Arg::Lit(v.to_owned())),
                                None => {
                                    i += 1;
                                    args.get(i).cloned()
                                }
                            };
                            if k == "--target-directory" {
                                dir = Some(value.unwrap_or(Arg::Computed(s.clone())));
                            }
                        }
                        _ => {}
                    }
                }
                Arg::Lit(s) if !options_done && s.len() > 1 && s.starts_with('-') => {
                    for (at, c) in s.char_indices().skip(1) {
                        match c {
                            's' => symbolic = true,
                            'T' => no_dir = true,
                            't' | 'S' => {
                                let rest = &s[at + c.len_utf8()..];
                                let value = if rest.is_empty() {
                                    i += 1;
                                    args.get(i).cloned()
                                } else {
                                    Some(Arg::Lit(rest.to_owned()))
                                };
                                if c == 't' {
                                    dir = Some(value.unwrap_or(Arg::Computed(s.clone())));
                                }
                                break;
                            }
                            _ => {}
                        }
                    }
                }
                a => operands.push(a.clone()),
            }
            i += 1;
        }
        // (what the link points to, where the link is: None when only known at run time)
        let mut made: Vec<(Arg, Option<PathBuf>)> = Vec::new();
        let into = |d: Option<PathBuf>, target: &Arg| -> Option<PathBuf> {
            let name = Path::new(target.lit()?).file_name()?.to_owned();
            Some(d?.join(name))
        };
        if let Some(d) = &dir {
            let d = d.lit().and_then(|s| self.resolve_here(s));
            for t in &operands {
                made.push((t.clone(), into(d.clone(), t)));
            }
        } else if let [target] = operands.as_slice() {
            let here = match &self.cwd {
                Cwd::Known(c) => self.through_planted(c.clone()),
                Cwd::Shape(_) | Cwd::Unknown => None,
            };
            made.push((target.clone(), into(here, target)));
        } else if let [targets @ .., last] = operands.as_slice() {
            let place = last.lit().and_then(|s| self.resolve_here(s));
            let is_dir = targets.len() > 1
                || (!no_dir && place.as_ref().is_some_and(|p| canonical(p).is_dir()));
            for t in targets {
                let link = if is_dir {
                    into(place.clone(), t)
                } else {
                    place.clone()
                };
                made.push((t.clone(), link));
            }
        }
        (symbolic, made)
    }

    fn change_dir(&mut self, args: &[Arg]) {
        let target = args
            .iter()
            .find(|a| a.lit().is_none_or(|s| !s.starts_with('-') || s == "-"));
        self.cwd = match target {
            None => match &self.home {
                Some(h) => Cwd::Known(h.clone()),
                None => Cwd::Unknown,
            },
            Some(Arg::Lit(s)) if s == "-" => Cwd::Unknown,
            // `cd /proc/$PID`: what follows is under a folder known in part.
            Some(a) => match self.path_of(a) {
                PathOperand::Known(p) => Cwd::Known(p),
                PathOperand::Unknown(shape) if shape.starts_with('/') => Cwd::Shape(shape),
                PathOperand::Unknown(_) => Cwd::Unknown,
            },
        };
    }

    /// The paths among a command's arguments.
    fn operands(&self, name: &str, args: &[Arg]) -> Vec<PathOperand> {
        let mut out = Vec::new();
        match name {
            "dd" => {
                for a in args {
                    match a {
                        Arg::Lit(s) => {
                            if let Some(v) = s.strip_prefix("of=") {
                                out.push(self.path_of(&Arg::Lit(v.to_owned())));
                            }
                        }
                        Arg::Computed(raw) => out.push(PathOperand::Unknown(raw.clone())),
                    }
                }
            }
            "find" => {
                for r in follow::find_roots(args) {
                    out.push(self.path_of(&r));
                }
            }
            _ => {
                let mut options_done = false;
                for a in args {
                    match a {
                        Arg::Lit(s) if s == "--" && !options_done => options_done = true,
                        Arg::Lit(s) if s.starts_with('-') && !options_done => {
                            if let Some((_, v)) = s.split_once('=') {
                                out.push(self.path_of(&Arg::Lit(v.to_owned())));
                            }
                        }
                        Arg::Lit(s) => {
                            out.push(self.path_of(a));
                            if let Some((k, v)) = s.split_once('=')
                                && !k.contains('/')
                            {
                                out.push(self.path_of(&Arg::Lit(v.to_owned())));
                            }
                        }
                        Arg::Computed(_) => out.push(self.path_of(a)),
                    }
                }
            }
        }
        out
    }
}

/// A simple command's words and redirections as they are read.
struct SimpleState {
    words: Vec<Expanded>,
    redirects: Vec<PathOperand>,
    /// The redirections that write.
    writes: Vec<PathOperand>,
    /// Assignments before the command's name (its environment).
    env: Vec<(String, Arg)>,
    fed_by: Vec<String>,
    stdin_script: Option<String>,
    stdin_piped: bool,
}

/// What a command reads on stdin.
#[derive(Clone, Debug, Default)]
struct Stdin {
    fed_by: Vec<String>,
    /// Literal text (an `echo 'cmd' |` stage).
    literal: Option<String>,
}

#[derive(Debug, Default)]
struct Redirect {
    path: Option<PathOperand>,
    /// The file is written (`>`, `>>`, `&>`, `>|`, `<>`, `>&file`).
    write: bool,
    fed_by: Vec<String>,
    stdin_script: Option<String>,
    stdin_computed: bool,
}

/// A command about to be recorded and followed.
#[derive(Clone, Debug)]
struct Call {
    argv: Vec<Arg>,
    redirects: Vec<PathOperand>,
    /// The redirections that write.
    writes: Vec<PathOperand>,
    /// Assignments for this command (before its name, or given to `env`).
    env: Vec<(String, Arg)>,
    fed_by: Vec<String>,
    stdin_script: Option<String>,
    /// stdin is another command's output (not a literal).
    stdin_piped: bool,
    /// Arguments xargs appends.
    extra: Option<Vec<Arg>>,
}

/// The shells and interpreters of shell syntax whose `-c` runs a string.
pub fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "yash" | "posh" | "rbash"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(cmd: &str) -> Vec<String> {
        let (inv, f) = read(cmd, Path::new("/w"), Some(Path::new("/home/a")));
        assert!(f.is_empty(), "{cmd}: {f:?}");
        inv.into_iter().map(|i| i.name).collect()
    }

    #[test]
    fn finds_every_simple_command() {
        assert_eq!(names("a | b && c; (d) & { e; }"), ["a", "b", "c", "d", "e"]);
        assert_eq!(names("x $(y `z`)"), ["z", "y", "x"]);
        assert_eq!(names("diff <(p) <(q)"), ["p", "q", "diff"]);
        assert_eq!(
            names("env A=1 nice -n 5 timeout 3 /bin/rm x"),
            ["env", "nice", "timeout", "rm"]
        );
        assert_eq!(names("bash -lc 'sudo id'"), ["bash", "sudo", "id"]);
        assert_eq!(names("\\rm x; r''m y; $'\\x72m' z"), ["rm", "rm", "rm"]);
        assert_eq!(names("find . -exec shred {} +"), ["find", "shred"]);
        assert_eq!(names("f() { g; }"), ["g"]);
        assert_eq!(names("echo 'a b' | sh"), ["echo", "sh", "a"]);
        assert_eq!(names("sh <<'X'\ncd /\nq z\nX\n"), ["sh", "cd", "q"]);
    }

    #[test]
    fn computed_names_fail() {
        for cmd in [
            "$X a",
            "\"$(echo rm)\" -rf /",
            "eval $Y",
            "/bin/r? x",
            "sh -c \"$S\"",
        ] {
            let (_, f) = read(cmd, Path::new("/w"), None);
            assert!(
                matches!(f.first(), Some(Failure::Computed(_))),
                "{cmd}: {f:?}"
            );
        }
        let (_, f) = read("echo 'unterminated", Path::new("/w"), None);
        assert!(matches!(f.first(), Some(Failure::Unparsable(_))), "{f:?}");
    }

    #[test]
    fn tracks_the_directory() {
        let (inv, _) = read("cd / && rm -rf *", Path::new("/w"), None);
        assert_eq!(inv[1].operands, [PathOperand::Known("/*".into())]);
        let (inv, _) = read("(cd /tmp); rm x", Path::new("/w"), None);
        assert_eq!(inv[1].operands, [PathOperand::Known("/w/x".into())]);
        let (inv, _) = read("cd .. && rm -rf w", Path::new("/w"), None);
        assert_eq!(inv[1].wholes, [PathOperand::Known("/w".into())]);
        let (inv, _) = read("rm -rf . ./ .. x/..", Path::new("/w"), None);
        assert!(inv[0].wholes.is_empty(), "{:?}", inv[0].wholes);
    }

    /// The operands of the last command of `cmd`, read in `/w`.
    fn last_operands(cmd: &str) -> Vec<PathOperand> {
        let (inv, f) = read(cmd, Path::new("/w"), Some(Path::new("/home/a")));
        assert!(f.is_empty(), "{cmd}: {f:?}");
        inv.last().unwrap().operands.clone()
    }

    #[test]
    fn follows_links_planted_earlier_on_the_line() {
        let known = |p: &str| vec![PathOperand::Known(p.into())];
        assert_eq!(last_operands("ln -s / x && rm -rf x/etc"), known("/etc"));
        assert_eq!(last_operands("ln -sfn /etc x; rm -rf x/"), known("/etc"));
        assert_eq!(
            last_operands("ln --symbolic .. up; rm -r up/o"),
            known("/o")
        );
        // A relative target is relative to the link's folder, a hard link's to the directory.
        assert_eq!(
            last_operands("ln -s ../.. a/b/up; rm a/b/up/e"),
            known("/w/e")
        );
        assert_eq!(last_operands("ln ../f h; shred h"), known("/f"));
        // Chains, a folder given with -t or last, a link made inside a subshell, then a cd.
        assert_eq!(
            last_operands("ln -s / x && ln -s x y && rm -rf y/etc"),
            known("/etc")
        );
        assert_eq!(
            last_operands("ln -s -t d /etc && rm d/etc/h"),
            known("/etc/h")
        );
        assert_eq!(last_operands("ln -s /a /b d && rm d/b/c"), known("/b/c"));
        assert_eq!(last_operands("(ln -s / x); rm x/etc"), known("/etc"));
        assert_eq!(last_operands("ln -s / x && cd x && rm etc"), known("/etc"));
        // Inside the workspace stays inside; what is only known at run time stays unknown.
        assert_eq!(
            last_operands("ln -s src/m.rs m.rs; rm m.rs"),
            known("/w/src/m.rs")
        );
        assert_eq!(
            last_operands("ln -s \"$T\" x; rm x/etc"),
            [PathOperand::Unknown("x/etc".into())]
        );
        assert_eq!(
            last_operands("ln -s / \"$L\"; rm y"),
            [PathOperand::Unknown("y".into())]
        );
        assert_eq!(
            last_operands("ln -s x x; rm x/y"),
            [PathOperand::Unknown("x/y".into())]
        );
    }
}
