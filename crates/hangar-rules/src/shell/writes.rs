//! What a command writes, whatever the command: the files `cp`, `mv`, `install`, `ln`, `tee`,
//! `sed -i`, `perl -i`, `dd of=`, `tar -x -C`, `unzip -d`, `rsync`, `chmod`/`chown`/`chgrp`,
//! `truncate`, `touch`, `mkdir`, `patch`, `sort -o`, the compressors, the downloaders and
//! `strace -o` write, create, move, delete or change the mode of (redirections are read in
//! `shell.rs`); and the files downloaders wrote earlier on the line, so that running one is
//! seen for what it is.

use std::path::Path;

use super::opts::{self, Spec};
use super::{Arg, Call, Cwd, Walker, is_shell};
use crate::paths::ANY;

/// Commands that write what they fetch from the network.
const DOWNLOADERS: &[&str] = &[
    "curl",
    "wget",
    "wget2",
    "aria2c",
    "fetch",
    "http",
    "https",
    "xh",
    "xhs",
    "lwp-download",
    "lwp-request",
    "GET",
];

/// Whether `name` fetches from the network.
pub(super) fn is_downloader(name: &str) -> bool {
    DOWNLOADERS.contains(&name)
}

impl Walker {
    /// The files `name ARGS` writes (its redirections aside), resolved as it would reach them.
    pub(super) fn write_targets(&self, name: &str, args: &[Arg]) -> Vec<super::PathOperand> {
        let out = match name {
            "cp" | "mv" | "install" => copy_targets(name, args),
            "ln" => self.link_targets(args),
            "tee" | "sponge" => opts::parse(args, &permuting("", &[])).operands,
            "sed" | "gsed" => match sed_files(args) {
                (true, files) => files,
                (false, _) => Vec::new(),
            },
            _ if matches!(
                crate::interp::Lang::of(name),
                Some(crate::interp::Lang::Perl | crate::interp::Lang::Ruby)
            ) =>
            {
                in_place_files(args)
            }
            "dd" => dd_targets(args),
            "tar" | "gtar" | "bsdtar" => tar(args).writes,
            "unzip" => unzip_targets(args),
            "rsync" => rsync_targets(args),
            "chmod" | "chown" | "chgrp" => mode_targets(name, args),
            "truncate" | "touch" | "mkdir" | "mkfifo" | "mknod" => make_targets(name, args),
            "patch" => patch_targets(args),
            "cc" | "gcc" | "g++" | "c++" | "clang" | "clang++" | "ld" | "ld.lld" | "ld.gold"
            | "as" | "rustc" | "tcc" => compiler_targets(args),
            "go" if args.first().and_then(Arg::lit) == Some("build") => {
                option_values(&args[1..], &permuting("o", &[]), &["o"])
            }
            "iconv" => option_values(
                args,
                &permuting("oft", &["--output", "--from-code", "--to-code"]),
                &["o", "--output"],
            ),
            "xxd" => {
                let p = opts::parse(args, &permuting("cglnosC", &[]));
                if p.has(&["r"]) {
                    p.operands.into_iter().nth(1).into_iter().collect()
                } else {
                    Vec::new()
                }
            }
            "sort" => option_values(args, &permuting("okStT", &["--output"]), &["o", "--output"]),
            "uniq" => {
                let p = opts::parse(args, &permuting("fsw", &[]));
                p.operands.into_iter().nth(1).into_iter().collect()
            }
            "gzip" | "gunzip" | "bzip2" | "bunzip2" | "xz" | "unxz" | "lzma" | "unlzma"
            | "zstd" | "unzstd" | "lz4" | "pigz" | "unpigz" | "compress" | "uncompress" => {
                compressor_targets(args)
            }
            "openssl" => values_after(args, &["-out", "-keyout"]),
            "strace" | "ltrace" => option_values(
                args,
                &Spec {
                    short: super::follow::trace_values(name),
                    long: &["--output"],
                    permute: false,
                },
                &["o", "--output"],
            ),
            "find" => values_after(args, &["-fprint", "-fprint0", "-fprintf", "-fls"]),
            _ if is_downloader(name) => download_targets(name, args).0,
            _ => Vec::new(),
        };
        out.iter()
            .filter(|a| !matches!(a.lit(), Some("-" | "/dev/stdout" | "/dev/stderr")))
            .map(|a| self.path_of(a))
            .collect()
    }

    /// `ln`: the links it makes (any path where the link's name is only known at run time).
    fn link_targets(&self, args: &[Arg]) -> Vec<Arg> {
        let (_, made) = self.links(args);
        made.into_iter()
            .map(|(_, link)| match link {
                Some(l) => Arg::Lit(l.to_string_lossy().into_owned()),
                None => Arg::Computed(ANY.to_string()),
            })
            .collect()
    }

    /// Commands `tar` and `rsync` run (`--to-command`, `--checkpoint-action=exec=`, `-I`,
    /// `-F`, `rsync -e`): each is read as a shell command.
    pub(super) fn archive_commands(&mut self, name: &str, args: &[Arg]) {
        let commands = match name {
            "tar" | "gtar" | "bsdtar" => tar(args).commands,
            "rsync" => {
                let p = opts::parse(args, &permuting("efTBM", RSYNC_LONG));
                p.values(&["e", "--rsh"]).cloned().collect()
            }
            _ => return,
        };
        for c in commands {
            match c {
                Arg::Lit(s) => self.run_string(&s, name),
                Arg::Computed(_) => self.failures.push(super::Failure::Computed(format!(
                    "{name} runs a command computed at run time"
                ))),
            }
        }
    }

    /// After the command recorded at `at`: the files it wrote are downloads when it is a
    /// downloader or reads one's output (`curl … | tee f`), and copies of downloads are too.
    pub(super) fn note_downloads(&mut self, at: usize, call: &Call) {
        let inv = &self.out[at];
        let name = inv.name.as_str();
        let fetches = is_downloader(name) || call.fed_by.iter().any(|n| is_downloader(n));
        // What reads a download and writes a file makes another (`cp`, `cat a > b`,
        // `base64 -d a > b`); unpacking an archive into a folder is not followed.
        let copies = !matches!(name, "tar" | "gtar" | "bsdtar" | "unzip" | "7z" | "cpio")
            && (inv.operands.iter().any(|o| self.is_download(o))
                || call.redirects.iter().any(|r| self.is_download(r)));
        if !(fetches || copies) {
            return;
        }
        let mut found = Vec::new();
        let mut unknown = false;
        for w in &inv.writes {
            match w {
                super::PathOperand::Known(p) => found.push(p.clone()),
                super::PathOperand::Unknown(_) => unknown = true,
            }
        }
        if is_downloader(name) && download_targets(name, &inv.args).1 {
            unknown = true;
        }
        self.downloads.extend(found);
        self.download_unknown |= unknown;
    }

    /// Whether a path is a file a downloader wrote earlier on the line.
    fn is_download(&self, o: &super::PathOperand) -> bool {
        match o {
            super::PathOperand::Known(p) => {
                self.downloads.iter().any(|d| d == p)
                    || (self.download_unknown && self.may_hold_downloads(p))
            }
            super::PathOperand::Unknown(_) => self.download_unknown,
        }
    }

    /// Where a download whose name is only known at run time may be: the workspace, the
    /// directory the command runs in, the scratch folders.
    fn may_hold_downloads(&self, p: &Path) -> bool {
        let here = match &self.cwd {
            Cwd::Known(c) => p.starts_with(c),
            Cwd::Shape(_) | Cwd::Unknown => true,
        };
        here || ["/tmp", "/var/tmp", "/dev/shm"]
            .iter()
            .any(|d| p.starts_with(d))
            || self.home.as_deref().is_some_and(|h| p.starts_with(h))
    }

    /// Whether `path ARGS` runs, sources or interprets a file a downloader wrote earlier on
    /// the line: the command itself, the script a shell or interpreter is given, or what is
    /// fed to its stdin.
    pub(super) fn runs_download(&self, path: &str, name: &str, args: &[Arg], call: &Call) -> bool {
        if self.downloads.is_empty() && !self.download_unknown {
            return false;
        }
        if path.contains('/') && self.is_download(&self.path_of(&Arg::Lit(path.to_owned()))) {
            return true;
        }
        // A download run through PATH (`PATH=.:$PATH tool`).
        if !path.contains('/')
            && self
                .downloads
                .iter()
                .any(|d| d.file_name().is_some_and(|n| n == name))
        {
            return true;
        }
        let interprets = is_shell(name)
            || matches!(name, "source" | ".")
            || crate::interp::Lang::of(name).is_some_and(|l| l.runs_scripts());
        if !interprets {
            return false;
        }
        if let Some(script) = super::code::script_operand(name, args)
            && self.is_download(&self.path_of(script))
        {
            return true;
        }
        call.redirects
            .iter()
            .filter(|r| !call.writes.contains(r))
            .any(|r| self.is_download(r))
    }
}

/// The values of options `names` (parsed by `spec`).
fn option_values(args: &[Arg], spec: &Spec<'_>, names: &[&str]) -> Vec<Arg> {
    opts::parse(args, spec).values(names).cloned().collect()
}

/// The words after each of `flags` (`openssl -out F`, `find -fprint F`).
fn values_after(args: &[Arg], flags: &[&str]) -> Vec<Arg> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a.lit().is_some_and(|s| flags.contains(&s)) {
            out.extend(it.next().cloned());
        }
    }
    out
}

/// `cp`, `mv`, `install`: the target (directory), and for `mv` what is moved away as well.
fn copy_targets(name: &str, args: &[Arg]) -> Vec<Arg> {
    let spec = Spec {
        short: if name == "install" { "tSmogZ" } else { "tS" },
        long: &[
            "--target-directory",
            "--suffix",
            "--mode",
            "--owner",
            "--group",
            "--strip-program",
        ],
        permute: true,
    };
    let p = opts::parse(args, &spec);
    let dirs: Vec<&Arg> = p.values(&["t", "--target-directory"]).collect();
    let mut out = Vec::new();
    if name == "mv" {
        // What is moved away is gone from where it was.
        out.extend(p.operands.iter().cloned());
        out.extend(dirs.into_iter().cloned());
    } else if !dirs.is_empty() {
        out.extend(dirs.into_iter().cloned());
    } else if name == "install" && p.has(&["d", "--directory"]) {
        out.extend(p.operands.iter().cloned());
    } else if p.operands.len() >= 2 {
        out.extend(p.operands.last().cloned());
    }
    out
}

/// `dd of=FILE` (any computed word may be one).
fn dd_targets(args: &[Arg]) -> Vec<Arg> {
    let mut out = Vec::new();
    for a in args {
        match a {
            Arg::Lit(s) => {
                if let Some(v) = s.strip_prefix("of=") {
                    out.push(Arg::Lit(v.to_owned()));
                }
            }
            Arg::Computed(_) => out.push(a.clone()),
        }
    }
    out
}

/// `unzip`: its `-d` directory, or the current one unless it only lists, tests or prints.
fn unzip_targets(args: &[Arg]) -> Vec<Arg> {
    let p = opts::parse(args, &permuting("dxP", &[]));
    match p.values(&["d"]).next() {
        Some(d) => vec![d.clone()],
        None if !p.has(&["p", "l", "t", "v", "Z"]) => vec![Arg::Lit(".".to_owned())],
        None => Vec::new(),
    }
}

/// `rsync`: a local destination, and the files and folders its options name.
fn rsync_targets(args: &[Arg]) -> Vec<Arg> {
    let p = opts::parse(args, &permuting("efTBM", RSYNC_LONG));
    let mut out = Vec::new();
    if p.operands.len() >= 2
        && let Some(dest) = p.operands.last()
        && !is_remote(dest)
    {
        out.push(dest.clone());
    }
    out.extend(
        p.values(&[
            "--backup-dir",
            "--log-file",
            "--partial-dir",
            "T",
            "--temp-dir",
        ])
        .cloned(),
    );
    out
}

/// `chmod`, `chown`, `chgrp`: the files after the mode or owner (all of them with
/// `--reference`).
fn mode_targets(name: &str, args: &[Arg]) -> Vec<Arg> {
    let mut operands = Vec::new();
    let mut reference = false;
    let mut options = true;
    for a in args {
        match a.lit() {
            Some("--") if options => options = false,
            Some(s) if options && s.starts_with("--") => {
                reference |= s.starts_with("--reference");
            }
            // `chmod -w f`: a mode, not an option.
            Some(s)
                if options
                    && s.len() > 1
                    && s.starts_with('-')
                    && !(name == "chmod" && is_chmod_mode(s)) => {}
            _ => operands.push(a.clone()),
        }
    }
    let skip = usize::from(!reference);
    operands.into_iter().skip(skip).collect()
}

/// `truncate`, `touch`, `mkdir`, `mkfifo`: their operands; `mknod`: its first.
fn make_targets(name: &str, args: &[Arg]) -> Vec<Arg> {
    let p = opts::parse(
        args,
        &permuting(
            "srdtmZ",
            &[
                "--size",
                "--reference",
                "--date",
                "--time",
                "--mode",
                "--context",
            ],
        ),
    );
    if name == "mknod" {
        p.operands.into_iter().take(1).collect()
    } else {
        p.operands
    }
}

/// `patch`: its output and directory options, and the file it patches.
fn patch_targets(args: &[Arg]) -> Vec<Arg> {
    let p = opts::parse(
        args,
        &permuting("BDFgiopVYzrd", &["--input", "--output", "--directory"]),
    );
    let mut out: Vec<Arg> = p
        .values(&["o", "--output", "d", "--directory"])
        .cloned()
        .collect();
    out.extend(p.operands.into_iter().take(1));
    out
}

/// Compilers and linkers: `-o FILE`, `-oFILE`.
fn compiler_targets(args: &[Arg]) -> Vec<Arg> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.lit() {
            Some("-o") => out.extend(it.next().cloned()),
            Some(s) if s.starts_with("-o") && s.len() > 2 => out.push(Arg::Lit(s[2..].to_owned())),
            _ => {}
        }
    }
    out
}

/// The compressors: `-o FILE`, and the files they replace unless they write to stdout.
fn compressor_targets(args: &[Arg]) -> Vec<Arg> {
    let p = opts::parse(args, &permuting("oSLTbM", &["--output", "--suffix"]));
    let mut out: Vec<Arg> = p.values(&["o", "--output"]).cloned().collect();
    let to_stdout = p.has(&["c", "--stdout", "t", "--test", "l", "--list"]);
    if !to_stdout {
        out.extend(p.operands);
    }
    out
}

/// A spec for a GNU command whose options may come after its operands.
fn permuting<'a>(short: &'a str, long: &'a [&'a str]) -> Spec<'a> {
    Spec {
        short,
        long,
        permute: true,
    }
}

/// rsync's long options that take a value.
const RSYNC_LONG: &[&str] = &[
    "--rsh",
    "--filter",
    "--exclude",
    "--include",
    "--exclude-from",
    "--include-from",
    "--files-from",
    "--temp-dir",
    "--backup-dir",
    "--partial-dir",
    "--log-file",
    "--log-file-format",
    "--compare-dest",
    "--copy-dest",
    "--link-dest",
    "--chmod",
    "--chown",
    "--password-file",
    "--port",
    "--timeout",
    "--bwlimit",
    "--max-size",
    "--min-size",
    "--suffix",
    "--out-format",
    "--skip-compress",
    "--info",
    "--debug",
    "--usermap",
    "--groupmap",
    "--iconv",
    "--modify-window",
    "--max-delete",
    "--block-size",
    "--compress-level",
    "--checksum-choice",
    "--address",
    "--sockopts",
    "--outbuf",
    "--remote-option",
    "--rsync-path",
];

/// An rsync operand on another host (`host:path`, `rsync://…`): not a local file.
fn is_remote(a: &Arg) -> bool {
    let Some(s) = a.lit() else { return false };
    s.contains("://") || s.split('/').next().is_some_and(|first| first.contains(':'))
}

/// A chmod mode written like an option (`-w`, `-x`, `-rwx`).
fn is_chmod_mode(s: &str) -> bool {
    s[1..].chars().all(|c| {
        matches!(
            c,
            'r' | 'w' | 'x' | 'X' | 's' | 't' | ',' | '+' | '-' | '=' | 'u' | 'g' | 'o' | 'a'
        ) || c.is_ascii_digit()
    }) && !s[1..].is_empty()
        && s[1..]
            .chars()
            .any(|c| matches!(c, 'r' | 'w' | 'x' | 'X' | 's' | 't'))
        && !matches!(s, "-R")
}

/// The files `perl -i`/`ruby -i` edit in place: the operands after the code (after the
/// script when no `-e` gives it); none without `-i`.
fn in_place_files(args: &[Arg]) -> Vec<Arg> {
    let mut in_place = false;
    let mut code_given = false;
    let mut i = 0;
    while i < args.len() {
        let Some(s) = args[i].lit().filter(|s| s.len() > 1 && s.starts_with('-')) else {
            break;
        };
        i += 1;
        if s == "--" {
            break;
        }
        if s.starts_with("--") {
            continue;
        }
        for (at, c) in s.char_indices().skip(1) {
            match c {
                'i' => {
                    in_place = true;
                    break;
                }
                'e' | 'E' => {
                    code_given = true;
                    if s[at + 1..].is_empty() {
                        i += 1;
                    }
                    break;
                }
                'I' | 'M' | 'm' | 'r' | 'C' | 'F' | 'x' | 'd' | 'D' => {
                    if s[at + 1..].is_empty() && c != 'x' && c != 'd' && c != 'D' {
                        i += 1;
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    if !in_place {
        return Vec::new();
    }
    let skip = usize::from(!code_given);
    args.get(i..)
        .unwrap_or(&[])
        .iter()
        .skip(skip)
        .cloned()
        .collect()
}

/// `sed`'s options: whether it edits in place (`-i`, `-i.bak`, `--in-place[=SUF]`), and the
/// files it reads (and then writes): the operands after the script when none is given by
/// `-e`/`-f`.
pub(super) fn sed_files(args: &[Arg]) -> (bool, Vec<Arg>) {
    let mut in_place = false;
    let mut script_given = false;
    let mut operands = Vec::new();
    let mut options = true;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        let Some(s) = a
            .lit()
            .filter(|s| options && s.len() > 1 && s.starts_with('-'))
        else {
            if a.lit() == Some("--") && options {
                options = false;
            } else {
                operands.push(a.clone());
            }
            continue;
        };
        if let Some(long) = s.strip_prefix("--") {
            let k = long.split_once('=').map_or(long, |(k, _)| k);
            match k {
                "in-place" => in_place = true,
                "expression" | "file" => {
                    script_given = true;
                    if !long.contains('=') {
                        i += 1;
                    }
                }
                "line-length" if !long.contains('=') => i += 1,
                _ => {}
            }
            continue;
        }
        for (at, c) in s.char_indices().skip(1) {
            match c {
                // `-i` takes the rest of the cluster as its suffix.
                'i' => {
                    in_place = true;
                    break;
                }
                'e' | 'f' | 'l' => {
                    if c != 'l' {
                        script_given = true;
                    }
                    if s[at + 1..].is_empty() {
                        i += 1;
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    if !script_given && !operands.is_empty() {
        operands.remove(0);
    }
    (in_place, operands)
}

/// What `tar ARGS` writes and the commands it runs.
#[derive(Default)]
struct Tar {
    writes: Vec<Arg>,
    commands: Vec<Arg>,
}

/// Reads tar's options, old style (`tar xzf F -C D`) or not: extracting writes into each `-C`
/// folder (the current one without), anywhere with `-P`; creating writes the archive and,
/// with `--remove-files`, deletes what it adds.
fn tar(args: &[Arg]) -> Tar {
    const VALUE: &str = "fCTXbHLNVKgFI";
    let long_value = [
        "--file",
        "--directory",
        "--files-from",
        "--exclude-from",
        "--to-command",
        "--checkpoint-action",
        "--use-compress-program",
        "--info-script",
        "--new-volume-script",
        "--rsh-command",
        "--listed-incremental",
        "--index-file",
    ];
    let mut opts: Vec<(String, Option<Arg>)> = Vec::new();
    let mut operands = Vec::new();
    let mut i = 0;
    // Old style: the first word without a dash is a bundle of letters, their values next.
    if let Some(Arg::Lit(first)) = args.first()
        && !first.starts_with('-')
        && !first.is_empty()
        && first.chars().all(|c| c.is_ascii_alphabetic())
    {
        i = 1;
        for c in first.chars() {
            let value = if VALUE.contains(c) {
                i += 1;
                args.get(i - 1).cloned()
            } else {
                None
            };
            opts.push((c.to_string(), value));
        }
    }
    let p = opts::parse(
        &args[i..],
        &Spec {
            short: VALUE,
            long: &long_value,
            permute: true,
        },
    );
    opts.extend(p.opts.into_iter().map(|o| (o.name, o.value)));
    operands.extend(p.operands);
    let has = |names: &[&str]| opts.iter().any(|(n, _)| names.contains(&n.as_str()));
    let values = |names: &[&str]| -> Vec<Arg> {
        opts.iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .filter_map(|(_, v)| v.clone())
            .collect()
    };
    let mut t = Tar::default();
    let dirs = values(&["C", "--directory"]);
    if has(&["x", "--extract", "--get"]) {
        if has(&["P", "--absolute-names"]) {
            t.writes.push(Arg::Computed(ANY.to_string()));
        }
        if dirs.is_empty() {
            t.writes.push(Arg::Lit(".".into()));
        }
        t.writes.extend(dirs);
    } else if has(&[
        "c",
        "r",
        "u",
        "A",
        "--create",
        "--append",
        "--update",
        "--catenate",
        "--concatenate",
        "--delete",
    ]) {
        t.writes.extend(values(&["f", "--file"]));
        if has(&["--remove-files"]) {
            t.writes.extend(operands.iter().cloned());
        }
    }
    t.writes
        .extend(values(&["g", "--listed-incremental", "--index-file"]));
    t.commands.extend(values(&[
        "--to-command",
        "I",
        "--use-compress-program",
        "F",
        "--info-script",
        "--new-volume-script",
        "--rsh-command",
    ]));
    for a in values(&["--checkpoint-action"]) {
        match a {
            Arg::Lit(s) => {
                if let Some(cmd) = s.strip_prefix("exec=") {
                    t.commands.push(Arg::Lit(cmd.to_owned()));
                }
            }
            c => t.commands.push(c),
        }
    }
    t
}

/// What a downloader writes (`curl -o F`, `curl -O URL`, `wget URL`, `wget -O F`, …), and
/// whether it writes a file whose name only the run knows (`curl -OJ`, a computed URL).
fn download_targets(name: &str, args: &[Arg]) -> (Vec<Arg>, bool) {
    let mut found = Downloads::default();
    match name {
        "curl" => found.curl(args),
        "wget" | "wget2" => found.wget(args),
        "aria2c" => found.aria2c(args),
        _ => found.other(args),
    }
    (found.out, found.unknown)
}

/// curl's options that take a value.
const CURL_LONG: &[&str] = &[
    "--output",
    "--output-dir",
    "--dump-header",
    "--cookie-jar",
    "--trace",
    "--trace-ascii",
    "--stderr",
    "--libcurl",
    "--etag-save",
    "--data",
    "--data-binary",
    "--data-raw",
    "--data-urlencode",
    "--form",
    "--header",
    "--user",
    "--request",
    "--user-agent",
    "--referer",
    "--cookie",
    "--proxy",
    "--config",
    "--max-time",
    "--connect-timeout",
    "--retry",
    "--url",
    "--cacert",
    "--cert",
    "--key",
    "--resolve",
    "--write-out",
];

/// wget's options that take a value.
const WGET_LONG: &[&str] = &[
    "--output-document",
    "--directory-prefix",
    "--output-file",
    "--append-output",
    "--user-agent",
    "--header",
    "--tries",
    "--timeout",
    "--input-file",
    "--post-data",
    "--post-file",
    "--user",
    "--password",
    "--load-cookies",
    "--save-cookies",
];

/// The files a downloader writes, found option by option.
#[derive(Default)]
struct Downloads {
    out: Vec<Arg>,
    /// It writes a file whose name only the run knows.
    unknown: bool,
}

impl Downloads {
    /// The file a URL is saved as under the server's name (in `dir`), or unknown.
    fn remote_name(&mut self, url: &Arg, dir: Option<&Arg>) {
        match remote_name(url, dir) {
            Some(f) => self.out.push(f),
            None => self.unknown = true,
        }
    }

    fn curl(&mut self, args: &[Arg]) {
        let p = opts::parse(args, &permuting("oDcdFHuUXAeErTwxYyzbCKmQt", CURL_LONG));
        let dir = p.values(&["--output-dir"]).next();
        for o in p.values(&["o", "--output"]) {
            match (o, dir.and_then(Arg::lit)) {
                (Arg::Lit(f), Some(d)) if !f.starts_with('/') => self
                    .out
                    .push(Arg::Lit(format!("{}/{f}", d.trim_end_matches('/')))),
                (o, _) => self.out.push(o.clone()),
            }
        }
        self.out.extend(
            p.values(&[
                "D",
                "--dump-header",
                "c",
                "--cookie-jar",
                "--trace",
                "--trace-ascii",
                "--stderr",
                "--libcurl",
                "--etag-save",
            ])
            .cloned(),
        );
        let remote = p
            .opts
            .iter()
            .filter(|o| matches!(o.name.as_str(), "O" | "--remote-name" | "--remote-name-all"))
            .count();
        if remote > 0 {
            if p.has(&["J", "--remote-header-name"]) {
                self.unknown = true;
            }
            let urls: Vec<&Arg> = p.operands.iter().chain(p.values(&["--url"])).collect();
            for u in urls {
                self.remote_name(u, dir);
            }
        }
    }

    fn wget(&mut self, args: &[Arg]) {
        let p = opts::parse(args, &permuting("OPoaeUtTwQiBY", WGET_LONG));
        self.out.extend(
            p.values(&[
                "o",
                "--output-file",
                "a",
                "--append-output",
                "--save-cookies",
            ])
            .cloned(),
        );
        let docs: Vec<&Arg> = p.values(&["O", "--output-document"]).collect();
        if !docs.is_empty() {
            self.out.extend(docs.into_iter().cloned());
            return;
        }
        let dir = p.values(&["P", "--directory-prefix"]).next();
        if p.has(&[
            "i",
            "--input-file",
            "r",
            "--recursive",
            "m",
            "--mirror",
            "--content-disposition",
        ]) {
            self.unknown = true;
        }
        for u in &p.operands {
            self.remote_name(u, dir);
        }
    }

    fn aria2c(&mut self, args: &[Arg]) {
        let p = opts::parse(
            args,
            &permuting("odix", &["--out", "--dir", "--input-file"]),
        );
        let dir = p.values(&["d", "--dir"]).next();
        let named: Vec<&Arg> = p.values(&["o", "--out"]).collect();
        if named.is_empty() {
            for u in &p.operands {
                self.remote_name(u, dir);
            }
        }
        self.out.extend(named.into_iter().cloned());
    }

    /// fetch -o F, httpie/xh --download [-o F]: a name of its own or the server's.
    fn other(&mut self, args: &[Arg]) {
        let p = opts::parse(args, &permuting("o", &["--output"]));
        let named: Vec<&Arg> = p.values(&["o", "--output"]).collect();
        if named.is_empty() && p.has(&["d", "--download"]) {
            self.unknown = true;
        }
        self.out.extend(named.into_iter().cloned());
    }
}

/// The file a downloader saves `url` as under the server's name (in `dir`); `None` for a
/// computed URL.
fn remote_name(url: &Arg, dir: Option<&Arg>) -> Option<Arg> {
    let url = url.lit()?;
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let path = path.split_once("://").map_or(path, |(_, rest)| rest);
    let base = path.rsplit('/').next().filter(|b| !b.is_empty());
    let base = base.unwrap_or("index.html");
    Some(match dir.and_then(Arg::lit) {
        Some(d) => Arg::Lit(format!("{}/{base}", d.trim_end_matches('/'))),
        None => Arg::Lit(base.to_owned()),
    })
}
