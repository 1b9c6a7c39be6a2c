//! What each language's calls do, as data: the calls that run a shell or a program, delete,
//! write, evaluate code, or stand for a value the rules follow (the home, an environment
//! variable, a path join, a module).

use super::lex::Syntax;

/// What a call does; numbers are argument positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Effect {
    /// Runs the argument through a shell (a list: as an argv).
    Shell(u8),
    /// From this argument on: one string runs through a shell, a list or several arguments
    /// are an argv (Perl's and Ruby's `system`, `subprocess.run`).
    System(u8),
    /// Runs the program at the first position with the arguments after the second (which is
    /// its `argv[0]`): `os.execl(path, arg0, …)`.
    ExecL(u8, u8),
    /// Runs the program at the first position with the list at the second, less its first
    /// item: `os.execv(path, [arg0, …])`.
    ExecV(u8, u8),
    /// Runs the program at this position with the list after it: `spawn("rm", ["-rf", d])`.
    Spawn(u8),
    /// Runs the list at this position as an argv: `Bun.spawn(["rm", …])`.
    ArgvList(u8),
    /// Deletes the path at this position.
    Delete(u8),
    /// Deletes every path from this position on.
    DeleteFrom(u8),
    /// Writes (creates, changes) the path at this position.
    Write(u8),
    /// Writes every path from this position on.
    WriteFrom(u8),
    /// Opens the path at the first position with the mode at the second: a write when the
    /// mode writes (or is only known at run time).
    Open(u8, u8),
    /// Perl's `open`: a file, or a command with `|`.
    PerlOpen,
    /// Evaluates the argument as code of the same language.
    Eval(u8),
    /// Evaluates the last argument as code (`new Function("a", "body")`).
    EvalLast,
    /// Evaluates the argument as code when it is a string (`setTimeout("code", 1)`).
    EvalIfStr(u8),
    /// Cannot be read: loads native code, unpickles, …
    Opaque(&'static str),
    /// A module named by the argument (`require("fs")`, `__import__("os")`).
    Loader(u8),
    /// An attribute named by the second argument (`getattr(os, "system")`).
    Getattr,
    /// The home folder.
    Home,
    /// The value of the environment variable named by the argument.
    EnvGet(u8),
    /// The arguments joined as a path.
    Join,
    /// A path object of the argument.
    PathCtor(u8),
}

impl Effect {
    /// Whether the call acts (runs, deletes, writes, evaluates) rather than giving a value.
    pub(super) fn acts(self) -> bool {
        !matches!(
            self,
            Effect::Loader(_)
                | Effect::Getattr
                | Effect::Home
                | Effect::EnvGet(_)
                | Effect::Join
                | Effect::PathCtor(_)
        )
    }
}

use Effect::*;

/// One language's calls.
#[derive(Debug)]
pub(super) struct Table {
    pub(super) syntax: Syntax,
    /// The operators that concatenate strings.
    pub(super) concat: &'static [&'static str],
    /// Functions may be called without parentheses (`system "cmd"`).
    pub(super) paren_less: bool,
    /// Calls by their full dotted name (`os.system`, `child_process.exec`).
    pub(super) qualified: &'static [(&'static str, Effect)],
    /// Functions called without a receiver (`open`, `eval`, Perl's `unlink`).
    pub(super) builtins: &'static [(&'static str, Effect)],
    /// Methods known by their name whatever the receiver (`check_output`, `execSync`).
    pub(super) methods: &'static [(&'static str, Effect)],
    /// Methods of path objects (`Path("x").unlink()`); the receiver is the path.
    pub(super) path_methods: &'static [(&'static str, Effect)],
    /// Methods that delete or write whatever they are called on (`p.unlink()`).
    pub(super) unknown_methods: &'static [(&'static str, Effect)],
    /// Names (not calls) that stand for the home (`Dir.home`).
    pub(super) home_names: &'static [&'static str],
    /// The environment, as a mapping (`os.environ`, `process.env`, `ENV`, `$ENV`).
    pub(super) env_maps: &'static [&'static str],
    /// Modules whose functions the table names.
    pub(super) modules: &'static [&'static str],
}

impl Table {
    /// What the call `canon` does (`has_receiver`: it is called on something).
    pub(super) fn lookup(&self, canon: &str, has_receiver: bool) -> Option<Effect> {
        let find = |list: &[(&str, Effect)], name: &str| {
            list.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
        };
        if let Some(e) = find(self.qualified, canon) {
            return Some(e);
        }
        let last = canon.rsplit('.').next().unwrap_or(canon);
        if !canon.contains('.')
            && let Some(e) = find(self.builtins, canon)
        {
            return Some(e);
        }
        let _ = has_receiver;
        find(self.methods, last)
    }

    /// Whether `canon` is a module the table knows, something in one, or a call it knows.
    pub(super) fn is_module_or_call(&self, canon: &str) -> bool {
        self.modules.iter().any(|m| {
            canon == *m
                || canon
                    .strip_prefix(m)
                    .is_some_and(|rest| rest.starts_with('.'))
        }) || self.lookup(canon, true).is_some()
    }

    /// A module's name as the table spells it (`node:fs/promises` → `fs`).
    pub(super) fn module_name(&self, m: &str) -> String {
        let m = m.strip_prefix("node:").unwrap_or(m);
        let m = m.strip_suffix("/promises").unwrap_or(m);
        m.replace('/', ".")
    }

    /// A dotted name with the spellings that mean the same folded (`fs.promises.rm` is
    /// `fs.rm`, `CORE::system` is `system`).
    pub(super) fn normalize(&self, canon: &str) -> String {
        let c = canon
            .strip_prefix("CORE.GLOBAL.")
            .or_else(|| canon.strip_prefix("CORE."))
            .or_else(|| canon.strip_prefix("builtins."))
            .or_else(|| canon.strip_prefix("__builtins__."))
            .or_else(|| canon.strip_prefix("globalThis."))
            .or_else(|| canon.strip_prefix("global."))
            .or_else(|| canon.strip_prefix("Kernel."))
            .unwrap_or(canon);
        c.replace(".promises.", ".")
    }

    pub(super) fn path_method(&self, m: &str) -> Option<Effect> {
        self.path_methods
            .iter()
            .find(|(n, _)| *n == m)
            .map(|(_, e)| *e)
    }

    pub(super) fn unknown_receiver_method(&self, m: &str) -> Option<Effect> {
        self.unknown_methods
            .iter()
            .find(|(n, _)| *n == m)
            .map(|(_, e)| *e)
    }
}

pub(super) static PYTHON: Table = Table {
    syntax: Syntax::Python,
    concat: &["+"],
    paren_less: false,
    qualified: &[
        ("os.system", Shell(0)),
        ("os.popen", Shell(0)),
        ("os.startfile", Shell(0)),
        ("os.execl", ExecL(0, 1)),
        ("os.execle", ExecL(0, 1)),
        ("os.execlp", ExecL(0, 1)),
        ("os.execlpe", ExecL(0, 1)),
        ("os.execv", ExecV(0, 1)),
        ("os.execve", ExecV(0, 1)),
        ("os.execvp", ExecV(0, 1)),
        ("os.execvpe", ExecV(0, 1)),
        ("os.spawnl", ExecL(1, 2)),
        ("os.spawnle", ExecL(1, 2)),
        ("os.spawnlp", ExecL(1, 2)),
        ("os.spawnlpe", ExecL(1, 2)),
        ("os.spawnv", ExecV(1, 2)),
        ("os.spawnve", ExecV(1, 2)),
        ("os.spawnvp", ExecV(1, 2)),
        ("os.spawnvpe", ExecV(1, 2)),
        ("os.posix_spawn", ExecV(0, 1)),
        ("os.posix_spawnp", ExecV(0, 1)),
        ("subprocess.run", System(0)),
        ("subprocess.call", System(0)),
        ("subprocess.check_call", System(0)),
        ("subprocess.check_output", System(0)),
        ("subprocess.Popen", System(0)),
        ("subprocess.getoutput", Shell(0)),
        ("subprocess.getstatusoutput", Shell(0)),
        ("commands.getoutput", Shell(0)),
        ("commands.getstatusoutput", Shell(0)),
        ("platform.popen", Shell(0)),
        ("pty.spawn", System(0)),
        ("asyncio.create_subprocess_shell", Shell(0)),
        ("asyncio.create_subprocess_exec", System(0)),
        ("os.remove", Delete(0)),
        ("os.unlink", Delete(0)),
        ("os.rmdir", Delete(0)),
        ("os.removedirs", Delete(0)),
        ("shutil.rmtree", Delete(0)),
        ("shutil.move", WriteFrom(0)),
        ("shutil.copy", Write(1)),
        ("shutil.copy2", Write(1)),
        ("shutil.copyfile", Write(1)),
        ("shutil.copytree", Write(1)),
        ("shutil.copymode", Write(1)),
        ("shutil.copystat", Write(1)),
        ("shutil.chown", Write(0)),
        ("os.rename", WriteFrom(0)),
        ("os.renames", WriteFrom(0)),
        ("os.replace", WriteFrom(0)),
        ("os.symlink", Write(1)),
        ("os.link", Write(1)),
        ("os.chmod", Write(0)),
        ("os.lchmod", Write(0)),
        ("os.chown", Write(0)),
        ("os.lchown", Write(0)),
        ("os.chflags", Write(0)),
        ("os.truncate", Write(0)),
        ("os.mkdir", Write(0)),
        ("os.makedirs", Write(0)),
        ("os.mkfifo", Write(0)),
        ("os.mknod", Write(0)),
        ("os.utime", Write(0)),
        ("os.open", Open(0, 1)),
        ("io.open", Open(0, 1)),
        ("codecs.open", Open(0, 1)),
        ("os.path.expanduser", PathCtor(0)),
        ("os.path.join", Join),
        ("posixpath.join", Join),
        ("os.path.abspath", PathCtor(0)),
        ("os.path.realpath", PathCtor(0)),
        ("os.getenv", EnvGet(0)),
        ("os.environ.get", EnvGet(0)),
        ("os.environ.__getitem__", EnvGet(0)),
        ("pathlib.Path", PathCtor(0)),
        ("pathlib.PosixPath", PathCtor(0)),
        ("pathlib.PurePath", PathCtor(0)),
        ("pathlib.Path.home", Home),
        ("Path.home", Home),
        ("importlib.import_module", Loader(0)),
        ("importlib.__import__", Loader(0)),
        (
            "pickle.loads",
            Opaque("it unpickles data, which can run any code"),
        ),
        (
            "pickle.load",
            Opaque("it unpickles data, which can run any code"),
        ),
        ("marshal.loads", Opaque("it loads marshalled code")),
        ("runpy.run_path", Opaque("it runs a file as code")),
        (
            "runpy.run_module",
            Opaque("it runs a module named at run time"),
        ),
        (
            "code.interact",
            Opaque("it starts an interpreter reading code at run time"),
        ),
        (
            "sys.modules.__getitem__",
            Opaque("it looks up a module at run time"),
        ),
        (
            "webbrowser.open",
            Opaque("it starts a program the environment names"),
        ),
    ],
    builtins: &[
        ("open", Open(0, 1)),
        ("exec", Eval(0)),
        ("eval", Eval(0)),
        ("compile", Eval(0)),
        ("execfile", Opaque("it runs a file as code")),
        ("__import__", Loader(0)),
        ("getattr", Getattr),
        ("Path", PathCtor(0)),
        ("PosixPath", PathCtor(0)),
        ("PurePath", PathCtor(0)),
        ("globals", Opaque("it reaches functions through globals()")),
        ("vars", Opaque("it reaches functions through vars()")),
        ("locals", Opaque("it reaches functions through locals()")),
        (
            "breakpoint",
            Opaque("it starts a debugger that reads commands at run time"),
        ),
    ],
    methods: &[
        ("system", Shell(0)),
        ("popen", Shell(0)),
        ("Popen", System(0)),
        ("check_output", System(0)),
        ("check_call", System(0)),
        ("getoutput", Shell(0)),
        ("getstatusoutput", Shell(0)),
        ("execl", ExecL(0, 1)),
        ("execle", ExecL(0, 1)),
        ("execlp", ExecL(0, 1)),
        ("execlpe", ExecL(0, 1)),
        ("execv", ExecV(0, 1)),
        ("execve", ExecV(0, 1)),
        ("execvp", ExecV(0, 1)),
        ("execvpe", ExecV(0, 1)),
        ("spawnl", ExecL(1, 2)),
        ("spawnlp", ExecL(1, 2)),
        ("spawnv", ExecV(1, 2)),
        ("spawnvp", ExecV(1, 2)),
        ("posix_spawn", ExecV(0, 1)),
        ("posix_spawnp", ExecV(0, 1)),
        ("create_subprocess_shell", Shell(0)),
        ("create_subprocess_exec", System(0)),
        ("rmtree", Delete(0)),
        ("removedirs", Delete(0)),
        ("CDLL", Opaque("it loads native code")),
        ("LoadLibrary", Opaque("it loads native code")),
        ("cdll", Opaque("it loads native code")),
        ("dlopen", Opaque("it loads native code")),
        (
            "__getattribute__",
            Opaque("it looks up an attribute at run time"),
        ),
        ("__subclasses__", Opaque("it reaches classes at run time")),
        (
            "__globals__",
            Opaque("it reaches functions through __globals__"),
        ),
    ],
    path_methods: &[
        ("unlink", Delete(0)),
        ("rmdir", Delete(0)),
        ("write_text", Write(0)),
        ("write_bytes", Write(0)),
        ("touch", Write(0)),
        ("mkdir", Write(0)),
        ("chmod", Write(0)),
        ("lchmod", Write(0)),
        ("symlink_to", Write(0)),
        ("hardlink_to", Write(0)),
        ("rename", WriteFrom(0)),
        ("replace", WriteFrom(0)),
        ("open", Open(0, 1)),
    ],
    unknown_methods: &[
        ("unlink", Delete(0)),
        ("write_text", Write(0)),
        ("write_bytes", Write(0)),
        ("symlink_to", Write(0)),
        ("hardlink_to", Write(0)),
    ],
    home_names: &[],
    env_maps: &["os.environ"],
    modules: &[
        "os",
        "subprocess",
        "shutil",
        "pty",
        "pathlib",
        "commands",
        "platform",
        "asyncio",
        "importlib",
        "io",
        "codecs",
        "ctypes",
        "pickle",
        "marshal",
        "runpy",
        "posixpath",
        "builtins",
    ],
};

pub(super) static PERL: Table = Table {
    syntax: Syntax::Perl,
    concat: &["."],
    paren_less: true,
    qualified: &[
        ("File.Path.rmtree", Delete(0)),
        ("File.Path.remove_tree", DeleteFrom(0)),
        ("File.Path.make_path", WriteFrom(0)),
        ("File.Path.mkpath", WriteFrom(0)),
        ("File.Copy.copy", Write(1)),
        ("File.Copy.cp", Write(1)),
        ("File.Copy.move", WriteFrom(0)),
        ("File.Copy.mv", WriteFrom(0)),
        ("POSIX.system", Shell(0)),
        ("IPC.Open2.open2", System(2)),
        ("IPC.Open3.open3", System(3)),
        ("File.HomeDir.my_home", Home),
    ],
    builtins: &[
        ("system", System(0)),
        ("exec", System(0)),
        ("readpipe", Shell(0)),
        ("unlink", DeleteFrom(0)),
        ("rmdir", Delete(0)),
        ("rmtree", Delete(0)),
        ("remove_tree", DeleteFrom(0)),
        ("rename", WriteFrom(0)),
        ("symlink", Write(1)),
        ("link", Write(1)),
        ("chmod", WriteFrom(1)),
        ("chown", WriteFrom(2)),
        ("utime", WriteFrom(2)),
        ("truncate", Write(0)),
        ("mkdir", Write(0)),
        ("make_path", WriteFrom(0)),
        ("mkpath", WriteFrom(0)),
        ("copy", Write(1)),
        ("move", WriteFrom(0)),
        ("open", PerlOpen),
        ("sysopen", Open(1, 2)),
        ("eval", Eval(0)),
        ("open2", System(2)),
        ("open3", System(3)),
        ("syscall", Opaque("it makes a raw system call")),
        ("dump", Opaque("it dumps the interpreter")),
        ("require", Opaque("it loads code named at run time")),
        ("do", Opaque("it runs a file as code")),
    ],
    methods: &[],
    path_methods: &[],
    unknown_methods: &[],
    home_names: &[],
    env_maps: &["$ENV"],
    modules: &["File.Path", "File.Copy", "POSIX", "IPC.Open2", "IPC.Open3"],
};

pub(super) static RUBY: Table = Table {
    syntax: Syntax::Ruby,
    concat: &["+", "<<"],
    paren_less: true,
    qualified: &[
        ("IO.popen", System(0)),
        ("Process.spawn", System(0)),
        ("Process.exec", System(0)),
        ("PTY.spawn", System(0)),
        ("Open3.capture2", System(0)),
        ("Open3.capture2e", System(0)),
        ("Open3.capture3", System(0)),
        ("Open3.popen2", System(0)),
        ("Open3.popen2e", System(0)),
        ("Open3.popen3", System(0)),
        ("Open3.pipeline", System(0)),
        ("Open3.pipeline_r", System(0)),
        ("Open3.pipeline_w", System(0)),
        ("Open3.pipeline_rw", System(0)),
        ("File.delete", DeleteFrom(0)),
        ("File.unlink", DeleteFrom(0)),
        ("Dir.rmdir", Delete(0)),
        ("Dir.delete", Delete(0)),
        ("Dir.unlink", Delete(0)),
        ("FileUtils.rm", Delete(0)),
        ("FileUtils.rm_f", Delete(0)),
        ("FileUtils.rm_r", Delete(0)),
        ("FileUtils.rm_rf", Delete(0)),
        ("FileUtils.rmtree", Delete(0)),
        ("FileUtils.remove", Delete(0)),
        ("FileUtils.remove_dir", Delete(0)),
        ("FileUtils.remove_entry", Delete(0)),
        ("FileUtils.remove_entry_secure", Delete(0)),
        ("FileUtils.remove_file", Delete(0)),
        ("FileUtils.rmdir", Delete(0)),
        ("FileUtils.cp", Write(1)),
        ("FileUtils.copy", Write(1)),
        ("FileUtils.cp_r", Write(1)),
        ("FileUtils.copy_file", Write(1)),
        ("FileUtils.copy_entry", Write(1)),
        ("FileUtils.install", Write(1)),
        ("FileUtils.mv", WriteFrom(0)),
        ("FileUtils.move", WriteFrom(0)),
        ("FileUtils.ln", Write(1)),
        ("FileUtils.ln_s", Write(1)),
        ("FileUtils.ln_sf", Write(1)),
        ("FileUtils.link", Write(1)),
        ("FileUtils.symlink", Write(1)),
        ("FileUtils.touch", Write(0)),
        ("FileUtils.mkdir", Write(0)),
        ("FileUtils.mkdir_p", Write(0)),
        ("FileUtils.makedirs", Write(0)),
        ("FileUtils.chmod", Write(1)),
        ("FileUtils.chmod_R", Write(1)),
        ("FileUtils.chown", Write(2)),
        ("FileUtils.chown_R", Write(2)),
        ("File.write", Write(0)),
        ("File.binwrite", Write(0)),
        ("IO.write", Write(0)),
        ("IO.binwrite", Write(0)),
        ("File.open", Open(0, 1)),
        ("File.new", Open(0, 1)),
        ("IO.read", Open(0, 9)),
        ("IO.readlines", Open(0, 9)),
        ("IO.foreach", Open(0, 9)),
        ("File.rename", WriteFrom(0)),
        ("File.symlink", Write(1)),
        ("File.link", Write(1)),
        ("File.chmod", WriteFrom(1)),
        ("File.lchmod", WriteFrom(1)),
        ("File.chown", WriteFrom(2)),
        ("File.truncate", Write(0)),
        ("File.expand_path", PathCtor(0)),
        ("File.join", Join),
        ("Pathname.new", PathCtor(0)),
        ("Dir.home", Home),
        ("ENV.fetch", EnvGet(0)),
        ("Object.const_get", Loader(0)),
        ("Kernel.const_get", Loader(0)),
    ],
    builtins: &[
        ("system", System(0)),
        ("exec", System(0)),
        ("spawn", System(0)),
        ("open", Open(0, 1)),
        ("eval", Eval(0)),
        ("instance_eval", EvalIfStr(0)),
        ("class_eval", EvalIfStr(0)),
        ("module_eval", EvalIfStr(0)),
        ("binding", Opaque("it reaches the interpreter's bindings")),
        ("syscall", Opaque("it makes a raw system call")),
        ("load", Opaque("it runs a file as code")),
        ("Pathname", PathCtor(0)),
    ],
    methods: &[
        ("popen", System(0)),
        ("popen2", System(0)),
        ("popen3", System(0)),
        ("capture2", System(0)),
        ("capture2e", System(0)),
        ("capture3", System(0)),
        ("rm_rf", Delete(0)),
        ("rm_r", Delete(0)),
        ("rmtree", Delete(0)),
        ("remove_entry", Delete(0)),
        ("remove_entry_secure", Delete(0)),
        ("instance_eval", EvalIfStr(0)),
        ("class_eval", EvalIfStr(0)),
        ("module_eval", EvalIfStr(0)),
        ("const_get", Loader(0)),
        (
            "instance_variable_get",
            Opaque("it reaches objects at run time"),
        ),
        ("dlopen", Opaque("it loads native code")),
    ],
    path_methods: &[
        ("delete", Delete(0)),
        ("unlink", Delete(0)),
        ("rmtree", Delete(0)),
        ("rmdir", Delete(0)),
        ("write", Write(0)),
        ("binwrite", Write(0)),
        ("mkpath", Write(0)),
        ("mkdir", Write(0)),
        ("chmod", Write(0)),
        ("make_symlink", Write(0)),
        ("rename", WriteFrom(0)),
        ("open", Open(0, 1)),
    ],
    unknown_methods: &[],
    home_names: &["Dir.home"],
    env_maps: &["ENV"],
    modules: &[
        "FileUtils",
        "Open3",
        "IO",
        "File",
        "Dir",
        "Process",
        "PTY",
        "Pathname",
        "Kernel",
    ],
};

pub(super) static JS: Table = Table {
    syntax: Syntax::Js,
    concat: &["+"],
    paren_less: false,
    qualified: &[
        ("child_process.exec", Shell(0)),
        ("child_process.execSync", Shell(0)),
        ("child_process.execFile", Spawn(0)),
        ("child_process.execFileSync", Spawn(0)),
        ("child_process.spawn", Spawn(0)),
        ("child_process.spawnSync", Spawn(0)),
        (
            "child_process.fork",
            Opaque("it starts another node program"),
        ),
        ("fs.rm", Delete(0)),
        ("fs.rmSync", Delete(0)),
        ("fs.rmdir", Delete(0)),
        ("fs.rmdirSync", Delete(0)),
        ("fs.unlink", Delete(0)),
        ("fs.unlinkSync", Delete(0)),
        ("fs.writeFile", Write(0)),
        ("fs.writeFileSync", Write(0)),
        ("fs.appendFile", Write(0)),
        ("fs.appendFileSync", Write(0)),
        ("fs.createWriteStream", Write(0)),
        ("fs.truncate", Write(0)),
        ("fs.truncateSync", Write(0)),
        ("fs.mkdir", Write(0)),
        ("fs.mkdirSync", Write(0)),
        ("fs.chmod", Write(0)),
        ("fs.chmodSync", Write(0)),
        ("fs.chown", Write(0)),
        ("fs.chownSync", Write(0)),
        ("fs.utimes", Write(0)),
        ("fs.utimesSync", Write(0)),
        ("fs.copyFile", Write(1)),
        ("fs.copyFileSync", Write(1)),
        ("fs.cp", Write(1)),
        ("fs.cpSync", Write(1)),
        ("fs.symlink", Write(1)),
        ("fs.symlinkSync", Write(1)),
        ("fs.link", Write(1)),
        ("fs.linkSync", Write(1)),
        ("fs.rename", WriteFrom(0)),
        ("fs.renameSync", WriteFrom(0)),
        ("fs.open", Open(0, 1)),
        ("fs.openSync", Open(0, 1)),
        ("os.homedir", Home),
        ("path.join", Join),
        ("path.resolve", Join),
        ("path.posix.join", Join),
        ("vm.runInThisContext", Eval(0)),
        ("vm.runInNewContext", Eval(0)),
        ("vm.runInContext", Eval(0)),
        ("vm.compileFunction", Eval(0)),
        ("vm.Script", Eval(0)),
        ("process.binding", Opaque("it reaches node's internals")),
        (
            "process._linkedBinding",
            Opaque("it reaches node's internals"),
        ),
        ("process.dlopen", Opaque("it loads native code")),
        ("process.mainModule.require", Loader(0)),
        ("module.require", Loader(0)),
        ("Bun.spawn", ArgvList(0)),
        ("Bun.spawnSync", ArgvList(0)),
        ("Bun.write", Write(0)),
        (
            "Deno.run",
            Opaque("it runs a program it describes at run time"),
        ),
        ("Deno.Command", Spawn(0)),
        ("Deno.remove", Delete(0)),
        ("Deno.removeSync", Delete(0)),
        ("Deno.writeFile", Write(0)),
        ("Deno.writeFileSync", Write(0)),
        ("Deno.writeTextFile", Write(0)),
        ("Deno.writeTextFileSync", Write(0)),
        ("Deno.env.get", EnvGet(0)),
    ],
    builtins: &[
        ("require", Loader(0)),
        ("import", Loader(0)),
        ("eval", Eval(0)),
        ("Function", EvalLast),
        ("setTimeout", EvalIfStr(0)),
        ("setInterval", EvalIfStr(0)),
        ("setImmediate", EvalIfStr(0)),
        ("execSync", Shell(0)),
        ("execFileSync", Spawn(0)),
        ("spawnSync", Spawn(0)),
    ],
    methods: &[
        ("execSync", Shell(0)),
        ("execFileSync", Spawn(0)),
        ("spawnSync", Spawn(0)),
        ("execFile", Spawn(0)),
        ("rmSync", Delete(0)),
        ("rmdirSync", Delete(0)),
        ("unlinkSync", Delete(0)),
        ("writeFileSync", Write(0)),
        ("appendFileSync", Write(0)),
        ("copyFileSync", Write(1)),
        ("cpSync", Write(1)),
        ("renameSync", WriteFrom(0)),
        ("symlinkSync", Write(1)),
        ("chmodSync", Write(0)),
        ("truncateSync", Write(0)),
        ("runInThisContext", Eval(0)),
        ("runInNewContext", Eval(0)),
        ("_linkedBinding", Opaque("it reaches node's internals")),
        ("binding", Opaque("it reaches node's internals")),
    ],
    path_methods: &[],
    unknown_methods: &[],
    home_names: &[],
    env_maps: &["process.env", "Bun.env"],
    modules: &["child_process", "fs", "os", "path", "vm", "Bun", "Deno"],
};

pub(super) static PHP: Table = Table {
    syntax: Syntax::Php,
    concat: &["."],
    paren_less: false,
    qualified: &[],
    builtins: &[
        ("system", Shell(0)),
        ("exec", Shell(0)),
        ("shell_exec", Shell(0)),
        ("passthru", Shell(0)),
        ("popen", Shell(0)),
        ("proc_open", System(0)),
        ("pcntl_exec", Spawn(0)),
        ("unlink", Delete(0)),
        ("rmdir", Delete(0)),
        ("file_put_contents", Write(0)),
        ("fopen", Open(0, 1)),
        ("copy", Write(1)),
        ("rename", WriteFrom(0)),
        ("symlink", Write(1)),
        ("link", Write(1)),
        ("chmod", Write(0)),
        ("chown", Write(0)),
        ("chgrp", Write(0)),
        ("touch", Write(0)),
        ("mkdir", Write(0)),
        ("eval", Eval(0)),
        ("assert", EvalIfStr(0)),
        ("create_function", EvalLast),
        ("getenv", EnvGet(0)),
        (
            "call_user_func",
            Opaque("it calls a function named at run time"),
        ),
        (
            "call_user_func_array",
            Opaque("it calls a function named at run time"),
        ),
        ("dl", Opaque("it loads native code")),
        ("include", Opaque("it runs a file as code")),
        ("require", Opaque("it runs a file as code")),
    ],
    methods: &[],
    path_methods: &[],
    unknown_methods: &[],
    home_names: &[],
    env_maps: &["$_SERVER", "$_ENV"],
    modules: &[],
};

pub(super) static LUA: Table = Table {
    syntax: Syntax::Lua,
    concat: &[".."],
    paren_less: false,
    qualified: &[
        ("os.execute", Shell(0)),
        ("io.popen", Shell(0)),
        ("os.remove", Delete(0)),
        ("os.rename", WriteFrom(0)),
        ("io.open", Open(0, 1)),
        ("io.output", Write(0)),
        ("os.getenv", EnvGet(0)),
        ("package.loadlib", Opaque("it loads native code")),
    ],
    builtins: &[
        ("load", Eval(0)),
        ("loadstring", Eval(0)),
        ("dofile", Opaque("it runs a file as code")),
        ("loadfile", Opaque("it runs a file as code")),
    ],
    methods: &[],
    path_methods: &[],
    unknown_methods: &[],
    home_names: &[],
    env_maps: &[],
    modules: &["os", "io", "package"],
};
