//! Just enough of git's config file syntax to read the settings this crate honours
//! (`core.excludesFile`, `core.fileMode`, `core.symlinks`) and those it reports
//! (`core.autocrlf`, `filter.*.clean`, `filter.*.process`). Files are only read; `include.path`
//! is followed, `includeIf` is not.

use std::path::{Path, PathBuf};

/// One `section.subsection.key = value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigEntry {
    /// Lower case.
    pub section: String,
    /// As written (case matters).
    pub subsection: Option<Vec<u8>>,
    /// Lower case.
    pub key: String,
    /// `None` for a bare `key` (boolean true).
    pub value: Option<Vec<u8>>,
}

/// Settings from a sequence of config files, later ones overriding earlier ones.
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    pub entries: Vec<ConfigEntry>,
}

impl Config {
    /// Reads `path` (and what it includes) onto the end; a missing file adds nothing.
    /// `home` expands `~/` in include paths. Returns the files read, for change detection.
    pub(crate) fn add_file(&mut self, path: &Path, home: Option<&Path>, read: &mut Vec<PathBuf>) {
        self.add_file_depth(path, home, read, 0);
    }

    fn add_file_depth(
        &mut self,
        path: &Path,
        home: Option<&Path>,
        read: &mut Vec<PathBuf>,
        depth: usize,
    ) {
        read.push(path.to_path_buf());
        if depth > 10 {
            return;
        }
        let Ok(text) = std::fs::read(path) else {
            return;
        };
        let mut parsed = Vec::new();
        parse(&text, &mut parsed);
        for entry in parsed {
            let include =
                entry.section == "include" && entry.subsection.is_none() && entry.key == "path";
            if include {
                if let Some(target) = entry.value.as_deref().and_then(|v| expand_path(v, home)) {
                    let target = if target.is_relative() {
                        path.parent().map_or(target.clone(), |d| d.join(&target))
                    } else {
                        target
                    };
                    self.add_file_depth(&target, home, read, depth + 1);
                }
                continue;
            }
            self.entries.push(entry);
        }
    }

    /// The last value of `section.key` (no subsection).
    pub(crate) fn get(&self, section: &str, key: &str) -> Option<Option<&[u8]>> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.section == section && e.subsection.is_none() && e.key == key)
            .map(|e| e.value.as_deref())
    }

    /// The last value of `section.key` read as a boolean (`None` if unset or not a boolean).
    pub(crate) fn get_bool(&self, section: &str, key: &str) -> Option<bool> {
        match self.get(section, key)? {
            None => Some(true),
            Some(v) => parse_bool(v),
        }
    }
}

fn parse_bool(v: &[u8]) -> Option<bool> {
    let v = String::from_utf8_lossy(v).to_ascii_lowercase();
    match v.as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" | "" => Some(false),
        _ => v.parse::<i64>().ok().map(|n| n != 0),
    }
}

/// Git's path interpolation: `~/` is the home directory. `~user/` and `%(prefix)/` are not
/// supported (`None`).
pub(crate) fn expand_path(value: &[u8], home: Option<&Path>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if let Some(rest) = value.strip_prefix(b"~/") {
        return Some(home?.join(std::ffi::OsStr::from_bytes(rest)));
    }
    if value == b"~" {
        return home.map(Path::to_path_buf);
    }
    if value.starts_with(b"~") || value.starts_with(b"%(prefix)/") {
        return None;
    }
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(value)))
}

/// Parses config text; lines git would reject are skipped.
pub(crate) fn parse(text: &[u8], out: &mut Vec<ConfigEntry>) {
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let mut p = Parser { s: text, i: 0 };
    let mut section: Option<(String, Option<Vec<u8>>)> = None;
    while p.i < p.s.len() {
        let c = p.s[p.i];
        if c == b'\n' || c.is_ascii_whitespace() {
            p.i += 1;
            continue;
        }
        if c == b'#' || c == b';' {
            p.skip_line();
            continue;
        }
        if c == b'[' {
            p.i += 1;
            section = p.section_header();
            if section.is_none() {
                p.skip_line();
            }
            continue;
        }
        if !c.is_ascii_alphabetic() {
            p.skip_line();
            continue;
        }
        let key = p.key();
        while p.i < p.s.len() && matches!(p.s[p.i], b' ' | b'\t') {
            p.i += 1;
        }
        let value = if p.i < p.s.len() && p.s[p.i] == b'=' {
            p.i += 1;
            match p.value() {
                Some(v) => Some(v),
                None => {
                    p.skip_line();
                    continue;
                }
            }
        } else if p.i >= p.s.len() || matches!(p.s[p.i], b'\n' | b'\r' | b'#' | b';') {
            p.skip_line();
            None
        } else {
            p.skip_line();
            continue;
        };
        if let Some((name, sub)) = &section {
            out.push(ConfigEntry {
                section: name.clone(),
                subsection: sub.clone(),
                key: key.to_ascii_lowercase(),
                value,
            });
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn skip_line(&mut self) {
        while self.i < self.s.len() && self.s[self.i] != b'\n' {
            self.i += 1;
        }
        self.i += 1;
    }

    fn key(&mut self) -> String {
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'-')
        {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    /// After `[`: `name]`, `name "sub"]` or the old `name.sub]`.
    fn section_header(&mut self) -> Option<(String, Option<Vec<u8>>)> {
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric() || matches!(self.s[self.i], b'-' | b'.'))
        {
            self.i += 1;
        }
        let name = String::from_utf8_lossy(&self.s[start..self.i]).to_ascii_lowercase();
        if self.i >= self.s.len() {
            return None;
        }
        match self.s[self.i] {
            b']' => {
                self.i += 1;
                match name.split_once('.') {
                    Some((sec, sub)) => Some((sec.to_string(), Some(sub.as_bytes().to_vec()))),
                    None => Some((name, None)),
                }
            }
            b' ' | b'\t' => {
                while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t') {
                    self.i += 1;
                }
                if self.i >= self.s.len() || self.s[self.i] != b'"' {
                    return None;
                }
                self.i += 1;
                let mut sub = Vec::new();
                loop {
                    let c = *self.s.get(self.i)?;
                    self.i += 1;
                    match c {
                        b'\n' => return None,
                        b'"' => break,
                        b'\\' => {
                            let e = *self.s.get(self.i)?;
                            self.i += 1;
                            if e == b'\n' {
                                return None;
                            }
                            sub.push(e);
                        }
                        _ => sub.push(c),
                    }
                }
                if self.s.get(self.i) != Some(&b']') {
                    return None;
                }
                self.i += 1;
                Some((name, Some(sub)))
            }
            _ => None,
        }
    }

    /// After `=`: the value up to the end of the line, with git's quoting and escapes.
    fn value(&mut self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut quote = false;
        let mut comment = false;
        let mut spaces = 0usize;
        loop {
            let c = self.next_char();
            if c == b'\n' {
                if quote {
                    return None;
                }
                return Some(out);
            }
            if comment {
                continue;
            }
            if c.is_ascii_whitespace() && !quote {
                if !out.is_empty() {
                    spaces += 1;
                }
                continue;
            }
            if !quote && (c == b';' || c == b'#') {
                comment = true;
                continue;
            }
            out.extend(std::iter::repeat_n(b' ', spaces));
            spaces = 0;
            if c == b'\\' {
                let e = self.next_char();
                let ch = match e {
                    b'\n' => continue,
                    b't' => b'\t',
                    b'b' => 8,
                    b'n' => b'\n',
                    b'\\' | b'"' => e,
                    _ => return None,
                };
                out.push(ch);
                continue;
            }
            if c == b'"' {
                quote = !quote;
                continue;
            }
            out.push(c);
        }
    }

    /// The next byte, with `\r\n` read as `\n` and the end of the text as `\n`.
    fn next_char(&mut self) -> u8 {
        match self.s.get(self.i) {
            None => {
                self.i += 1;
                b'\n'
            }
            Some(&b'\r') if self.s.get(self.i + 1) == Some(&b'\n') => {
                self.i += 2;
                b'\n'
            }
            Some(&c) => {
                self.i += 1;
                c
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_git_syntax() {
        let mut out = Vec::new();
        parse(
            b"[core]\n\texcludesFile = \"~/my ignore\" ; comment\n\tfilemode\n[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n[Core.Sub]\nx=1\n",
            &mut out,
        );
        let c = Config { entries: out };
        assert_eq!(
            c.get("core", "excludesfile"),
            Some(Some(&b"~/my ignore"[..]))
        );
        assert_eq!(c.get_bool("core", "filemode"), Some(true));
        assert!(c.entries.iter().any(|e| e.section == "filter"
            && e.subsection.as_deref() == Some(&b"lfs"[..])
            && e.key == "clean"));
        assert!(
            c.entries
                .iter()
                .any(|e| e.section == "core" && e.subsection.as_deref() == Some(&b"sub"[..]))
        );
    }
}
