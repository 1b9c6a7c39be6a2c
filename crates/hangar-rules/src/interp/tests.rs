//! What each reader finds in code, one language at a time.

use super::*;
use crate::paths::ANY;

fn fx(lang: Lang, code: &str) -> Effects {
    read(lang, code)
}

fn shown(v: &[String]) -> Vec<String> {
    v.iter().map(|s| s.replace(ANY, "…")).collect()
}

#[test]
fn python_calls_through_their_names() {
    let e = fx(
        Lang::Python,
        "import subprocess as sp\nsp.call('ls -l', shell=True)",
    );
    assert_eq!(e.shell, ["ls -l"]);
    let e = fx(Lang::Python, "from os import system as s; s('id')");
    assert_eq!(e.shell, ["id"]);
    let e = fx(
        Lang::Python,
        "import subprocess; subprocess.run(['rm', '-rf', 'x'])",
    );
    assert_eq!(e.argv, [vec!["rm", "-rf", "x"]]);
    let e = fx(
        Lang::Python,
        "import os; os.execv('/bin/sh', ['sh', '-c', 'id'])",
    );
    assert_eq!(e.argv, [vec!["/bin/sh", "-c", "id"]]);
    let e = fx(Lang::Python, "import os; getattr(os, 'sys' + 'tem')('id')");
    assert_eq!(e.shell, ["id"]);
    let e = fx(Lang::Python, "__import__('os').system('id')");
    assert_eq!(e.shell, ["id"]);
    let e = fx(Lang::Python, "import pathlib; pathlib.Path('/x').unlink()");
    assert_eq!(e.deletes, ["/x"]);
    let e = fx(Lang::Python, "open('/etc/hosts', 'a').write('x')");
    assert_eq!(e.writes, ["/etc/hosts"]);
    let e = fx(Lang::Python, "print(open('/etc/hosts').read())");
    assert!(e.writes.is_empty());
    // Methods that share a name with the spawning ones are not them.
    let e = fx(
        Lang::Python,
        "import re; re.compile('a'); [1].remove(1); asyncio.run(m())",
    );
    assert!(
        e.shell.is_empty() && e.deletes.is_empty() && e.opaque.is_empty(),
        "{e:?}"
    );
}

#[test]
fn python_values_fold() {
    let e = fx(
        Lang::Python,
        "import os; open('/proc/' + str(os.getppid()) + '/environ')",
    );
    assert!(
        shown(&e.named).contains(&"/proc/…/environ".to_owned()),
        "{e:?}"
    );
    let e = fx(
        Lang::Python,
        "open(os.path.join(os.path.expanduser('~'), '.netrc'))",
    );
    assert!(e.named.contains(&"~/.netrc".to_owned()), "{e:?}");
    let e = fx(
        Lang::Python,
        "(Path.home() / '.ssh' / 'id_rsa').read_text()",
    );
    assert!(e.named.contains(&"~/.ssh/id_rsa".to_owned()), "{e:?}");
    let e = fx(
        Lang::Python,
        "open(f\"{os.environ['HOME']}/.aws/credentials\")",
    );
    assert!(e.named.contains(&"~/.aws/credentials".to_owned()), "{e:?}");
}

#[test]
fn python_code_it_cannot_read() {
    for code in [
        "import os; os.system(input())",
        "exec(base64.b64decode('eA=='))",
        "import os; getattr(os, name)('x')",
        "import os; list(map(os.system, cmds))",
        "importlib.import_module(m).run()",
        "globals()['x']()",
        "f'{__import__(\"os\").system(input())}'",
    ] {
        let e = fx(Lang::Python, code);
        assert!(!e.opaque.is_empty(), "{code}: {e:?}");
    }
    // Code inside a literal string is read: exec, f-string interpolations.
    let e = fx(Lang::Python, "exec(\"import os; os.system('id')\")");
    assert_eq!(e.shell, ["id"]);
    let e = fx(Lang::Python, "f\"{__import__('os').system('id')}\"");
    assert_eq!(e.shell, ["id"]);
}

#[test]
fn perl_ruby_node_php_lua() {
    let e = fx(
        Lang::Perl,
        "system 'rm', '-rf', 'x' or die; unlink '/a', '/b'; `id`",
    );
    assert_eq!(e.argv, [vec!["rm", "-rf", "x"]]);
    assert_eq!(e.deletes, ["/a", "/b"]);
    assert_eq!(e.shell, ["id"]);
    let e = fx(Lang::Perl, "open(F, '>>', \"$ENV{HOME}/.bashrc\")");
    assert_eq!(e.writes, ["~/.bashrc"]);
    let e = fx(Lang::Perl, "print if /x/; eval { 1 }");
    assert!(e.shell.is_empty() && e.opaque.is_empty(), "{e:?}");
    let e = fx(
        Lang::Ruby,
        "require 'fileutils'; FileUtils.rm_rf '/srv'; %x(id)",
    );
    assert_eq!(e.deletes, ["/srv"]);
    assert_eq!(e.shell, ["id"]);
    let e = fx(Lang::Ruby, "Kernel.send(:system, 'id')");
    assert_eq!(e.shell, ["id"]);
    let e = fx(
        Lang::Node,
        "const { execSync: run } = require('node:child_process'); run('id')",
    );
    assert_eq!(e.shell, ["id"]);
    let e = fx(
        Lang::Node,
        "import * as cp from 'child_process'; cp.spawn('rm', ['-rf', 'x'])",
    );
    assert_eq!(e.argv, [vec!["rm", "-rf", "x"]]);
    let e = fx(Lang::Node, "require('fs').promises.rm('/x')");
    assert_eq!(e.deletes, ["/x"]);
    let e = fx(Lang::Node, "console.log(require('./package.json').version)");
    assert!(e.shell.is_empty() && e.opaque.is_empty(), "{e:?}");
    let e = fx(Lang::Node, "require(process.argv[1])");
    assert!(!e.opaque.is_empty());
    let e = fx(Lang::Php, "system('id'); $f = 'x'; $f();");
    assert_eq!(e.shell, ["id"]);
    assert!(!e.opaque.is_empty());
    let e = fx(Lang::Lua, "os.execute 'id'; os.remove('/x')");
    assert_eq!(e.shell, ["id"]);
    assert_eq!(e.deletes, ["/x"]);
}

#[test]
fn awk_sed_vim_gdb_make() {
    let e = fx(
        Lang::Awk,
        r#"BEGIN { system("id"); "ls " d | getline; print "x" > "/etc/x" }"#,
    );
    assert_eq!(shown(&e.shell), ["id", "ls …"]);
    assert_eq!(e.writes, ["/etc/x"]);
    let e = fx(Lang::Awk, "{ print $1 } END { print NR > \"out\" }");
    assert!(e.shell.is_empty() && e.opaque.is_empty());
    let e = fx(Lang::Sed, "1e id\ns/a/b/w /tmp/w\n/x/r /etc/passwd");
    assert_eq!(e.shell, ["id"]);
    assert_eq!(e.writes, ["/tmp/w"]);
    assert!(e.named.contains(&"/etc/passwd".to_owned()));
    assert!(!fx(Lang::Sed, "s/a/b/e").opaque.is_empty());
    assert!(fx(Lang::Sed, "s/a/b/g;1,5p").opaque.is_empty());
    let e = fx(
        Lang::Vim,
        "silent !id | echo x\nr !ls\nw /etc/x\npy3 import os; os.system('who')",
    );
    assert_eq!(e.shell, ["id | echo x", "ls", "who"]);
    assert_eq!(e.writes, ["/etc/x"]);
    let e = fx(Lang::Vim, "exe \"!id\" | call system('ls')");
    assert_eq!(e.shell, ["id", "ls"]);
    assert!(!fx(Lang::Vim, "shell").opaque.is_empty());
    assert!(fx(Lang::Vim, "wq").writes_operands);
    let e = fx(
        Lang::Gdb,
        "shell id\n!ls\ncall system(\"who\")\npipe p x | sh -c y",
    );
    assert_eq!(e.shell, ["id", "ls", "who", "sh -c y"]);
    let mut e = fx(
        Lang::Make,
        "all:\n\t@rm -rf $(DIR)\nX != date\ny:=$(shell id)",
    );
    e.shell.sort();
    assert_eq!(e.shell, ["date", "id", "rm -rf ${HANGAR_MAKE_VALUE}"]);
}

#[test]
fn code_on_the_command_line() {
    let lits = |s: &[&str]| {
        s.iter()
            .map(|w| Arg::Lit((*w).to_owned()))
            .collect::<Vec<_>>()
    };
    let c = code_of(Lang::Python, "python3", &lits(&["-u", "-c", "x", "a"]));
    assert_eq!(c.inline, lits(&["x"]));
    let c = code_of(Lang::Python, "python3", &lits(&["-m", "pip"]));
    assert!(c.inline.is_empty() && !c.stdin && c.file.is_none());
    let c = code_of(Lang::Perl, "perl", &lits(&["-lane", "print", "f"]));
    assert_eq!(c.inline, lits(&["print"]));
    let c = code_of(Lang::Perl, "perl", &lits(&["-pi.bak", "-e", "s/a/b/", "f"]));
    assert_eq!(c.inline, lits(&["s/a/b/"]));
    let c = code_of(Lang::Node, "node", &lits(&["--eval=x"]));
    assert_eq!(c.inline, lits(&["x"]));
    let c = code_of(Lang::Node, "node", &lits(&["index.js"]));
    assert_eq!(c.file, Some(0));
    let c = code_of(Lang::Awk, "awk", &lits(&["-F,", "{print}", "f"]));
    assert_eq!(c.inline, lits(&["{print}"]));
    let c = code_of(Lang::Sed, "sed", &lits(&["-n", "-e", "p", "f"]));
    assert_eq!(c.inline, lits(&["p"]));
    let c = code_of(Lang::Sed, "sed", &lits(&["--sandbox", "1e id", "f"]));
    assert!(c.inline.is_empty());
    let c = code_of(Lang::Vim, "vim", &lits(&["-c", "q", "+!id", "f"]));
    assert_eq!(c.inline, lits(&["q", "!id"]));
    assert_eq!(c.operands, [3]);
    let c = code_of(
        Lang::Gdb,
        "gdb",
        &lits(&["-batch", "-ex", "bt", "--args", "p", "a"]),
    );
    assert_eq!(c.inline, lits(&["bt"]));
    assert_eq!(c.program, Some(4));
    let c = code_of(Lang::Make, "make", &lits(&["-f", "-"]));
    assert!(c.stdin);
}
