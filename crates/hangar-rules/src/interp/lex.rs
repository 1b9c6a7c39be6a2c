//! One lexer for the scripting languages the rules read (Python, Perl, Ruby, JavaScript, PHP,
//! Lua): names, string literals with their escapes decoded and their interpolations marked,
//! command literals (backquotes, `qx`, `%x`), numbers and punctuation; comments and regular
//! expressions are skipped as the language skips them. A string's value is a *shape*: where
//! the text is only known at run time (an interpolation, or a part of the command line the
//! shell computes) it holds [`ANY`].

use crate::paths::{ANY, DIGITS};

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// A name (`os`, `system`, Perl's `$x`, `@ARGV`, `%ENV`).
    Ident(String),
    /// A string literal's value (a shape).
    Str(String),
    /// A command literal: backquotes, `qx//`, `%x()`, `` Bun.$`…` `` (a shape).
    Cmd(String),
    /// Code the language evaluates that sits inside a literal (Perl's `s///e` replacement).
    Code(String),
    /// The interpolations of the string or command literal just before: where each stands in
    /// its shape (the byte offset of its [`ANY`]) and its code.
    Interp(Vec<(usize, String)>),
    /// A number.
    Num,
    /// Punctuation, one or two characters (`(`, `,`, `.`, `::`, `=>`, `->`, `..`).
    Punct(&'static str),
    /// A line break (statements end there in Python, Ruby and Lua).
    Newline,
    /// Code only known at run time, outside any literal.
    Computed,
}

/// Which language's lexical rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    Python,
    Perl,
    Ruby,
    Js,
    Php,
    Lua,
    /// awk: `"…"` strings only, regular expressions, `#` comments.
    Awk,
}

/// What went wrong, if anything, besides the tokens: the lexer stops at what it cannot read.
#[derive(Debug, Default)]
pub struct Lexed {
    pub toks: Vec<Tok>,
    /// Set when a literal or comment is not closed (the code does not run as written).
    pub unclosed: bool,
}

const TWO: &[&str] = &[
    "::", "=>", "->", "..", "=~", "!~", "**", "==", "!=", "<=", ">=", "&&", "||", "<<", "+=", ">>",
    "|&",
];
const ONE: &[&str] = &[
    "(", ")", "[", "]", "{", "}", ",", ";", ".", "+", "-", "*", "/", "%", "=", "<", ">", "!", "?",
    ":", "&", "|", "^", "~", "@", "$", "#", "\\",
];

/// Names after which a `/` starts a regular expression rather than dividing.
const REGEX_AFTER: &[&str] = &[
    "if", "unless", "and", "or", "not", "return", "split", "grep", "map", "when", "while", "until",
    "print", "push", "unshift", "join", "x", "lt", "gt", "le", "ge", "eq", "ne", "cmp", "typeof",
    "in", "of", "case", "do", "else", "elsif", "then", "yield", "new", "delete", "void", "throw",
];

struct Lexer<'a> {
    c: Vec<char>,
    i: usize,
    syntax: Syntax,
    out: &'a mut Lexed,
    /// Interpolations of the literal being read (see [`Tok::Interp`]).
    interps: Vec<(usize, String)>,
    /// Here-documents opened on the current line: their token, tag and quote.
    heredocs: Vec<(usize, String, Option<char>)>,
}

/// Tokens of `code` in `syntax`.
pub fn lex(code: &str, syntax: Syntax) -> Lexed {
    let mut out = Lexed::default();
    let mut l = Lexer {
        c: code.chars().collect(),
        i: 0,
        syntax,
        out: &mut out,
        interps: Vec::new(),
        heredocs: Vec::new(),
    };
    l.run();
    out
}

impl Lexer<'_> {
    fn peek(&self, k: usize) -> Option<char> {
        self.c.get(self.i + k).copied()
    }

    fn push(&mut self, t: Tok) {
        let literal = matches!(t, Tok::Str(_) | Tok::Cmd(_));
        self.out.toks.push(t);
        if literal && !self.interps.is_empty() {
            let interps = std::mem::take(&mut self.interps);
            self.out.toks.push(Tok::Interp(interps));
        }
    }

    /// Skips an interpolation's `{…}` from its opening brace and records its code at the
    /// place of the [`ANY`] about to be pushed to `s`.
    fn interpolated(&mut self, s: &str) {
        let start = self.i + 1;
        self.skip_balanced('{', '}');
        let end = self.i.saturating_sub(1).max(start);
        let code: String = self.c[start.min(self.c.len())..end.min(self.c.len())]
            .iter()
            .collect();
        self.interps.push((s.len(), code));
    }

    /// Whether a `/` here starts a regular expression (after an operator or a keyword).
    fn regex_allowed(&self) -> bool {
        match self.out.toks.last() {
            None | Some(Tok::Newline) => true,
            Some(Tok::Punct(p)) => !matches!(*p, ")" | "]" | "}"),
            Some(Tok::Ident(n)) => REGEX_AFTER.contains(&n.as_str()),
            _ => false,
        }
    }

    fn run(&mut self) {
        while let Some(ch) = self.peek(0) {
            match ch {
                '\n' => {
                    self.i += 1;
                    self.push(Tok::Newline);
                    if !self.heredocs.is_empty() {
                        self.heredoc_bodies();
                    }
                    if self.syntax == Syntax::Ruby && self.at_line("=begin") {
                        self.skip_until_line("=end");
                    }
                }
                c if c == ANY || c == DIGITS => {
                    self.i += 1;
                    self.push(Tok::Computed);
                }
                c if c.is_whitespace() => self.i += 1,
                '#' if self.hash_comment() => self.skip_line(),
                '/' if self.peek(1) == Some('/') && self.slash_comments() => self.skip_line(),
                '/' if self.peek(1) == Some('*') && self.slash_comments() => {
                    self.i += 2;
                    self.skip_block_comment();
                }
                '-' if self.syntax == Syntax::Lua && self.peek(1) == Some('-') => {
                    self.i += 2;
                    if self.peek(0) == Some('[') && self.long_bracket_level().is_some() {
                        let _ = self.lua_long_string();
                    } else {
                        self.skip_line();
                    }
                }
                '[' if self.syntax == Syntax::Lua && self.long_bracket_level().is_some() => {
                    let s = self.lua_long_string();
                    self.push(Tok::Str(s));
                }
                '\'' if self.syntax == Syntax::Awk => self.i += 1,
                '"' | '\'' => self.string_literal(ch),
                '`' => self.backquote(),
                '/' if self.regex_allowed()
                    && matches!(
                        self.syntax,
                        Syntax::Perl | Syntax::Ruby | Syntax::Js | Syntax::Awk
                    ) =>
                {
                    self.i += 1;
                    self.delimited('/', false);
                }
                '%' if self.syntax == Syntax::Ruby && self.ruby_percent() => {}
                '<' if self.peek(1) == Some('<') && self.heredoc() => {}
                '$' | '@' | '%' if self.syntax == Syntax::Perl && self.perl_variable() => {}
                '$' if self.syntax == Syntax::Php && self.peek(1).is_some_and(ident_start) => {
                    self.i += 1;
                    let n = self.ident();
                    self.push(Tok::Ident(format!("${n}")));
                }
                '$' if self.syntax == Syntax::Js && self.peek(1) == Some('`') => {
                    // zx and Bun's shell: $`cmd` runs a command.
                    self.i += 2;
                    let s = self.quoted('`', true, Interp::Js);
                    self.push(Tok::Cmd(s));
                }
                c if c.is_ascii_digit() => {
                    while self
                        .peek(0)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                    {
                        if self.peek(0) == Some('.') && self.peek(1) == Some('.') {
                            break;
                        }
                        self.i += 1;
                    }
                    self.push(Tok::Num);
                }
                c if ident_start(c) => {
                    self.word();
                }
                _ => self.punct(),
            }
        }
    }

    fn hash_comment(&self) -> bool {
        match self.syntax {
            Syntax::Python | Syntax::Ruby | Syntax::Php | Syntax::Awk => true,
            Syntax::Perl => true,
            Syntax::Js | Syntax::Lua => false,
        }
    }

    fn slash_comments(&self) -> bool {
        matches!(self.syntax, Syntax::Js | Syntax::Php)
    }

    fn at_line(&self, word: &str) -> bool {
        word.chars()
            .enumerate()
            .all(|(k, w)| self.peek(k) == Some(w))
    }

    fn skip_line(&mut self) {
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.i += 1;
        }
    }

    fn skip_until_line(&mut self, word: &str) {
        loop {
            self.skip_line();
            if self.peek(0).is_none() {
                self.out.unclosed = true;
                return;
            }
            self.i += 1;
            if self.at_line(word) {
                self.skip_line();
                return;
            }
        }
    }

    fn skip_block_comment(&mut self) {
        while let Some(c) = self.peek(0) {
            self.i += 1;
            if c == '*' && self.peek(0) == Some('/') {
                self.i += 1;
                return;
            }
        }
        self.out.unclosed = true;
    }

    fn punct(&mut self) {
        let two: String = self.c[self.i..(self.i + 2).min(self.c.len())]
            .iter()
            .collect();
        if let Some(p) = TWO.iter().find(|p| **p == two) {
            self.i += 2;
            self.push(Tok::Punct(p));
            return;
        }
        let one: String = self.c[self.i..self.i + 1].iter().collect();
        self.i += 1;
        if let Some(p) = ONE.iter().find(|p| **p == one) {
            self.push(Tok::Punct(p));
        }
    }

    fn ident(&mut self) -> String {
        let start = self.i;
        while self.peek(0).is_some_and(ident_char) {
            self.i += 1;
        }
        self.c[start..self.i].iter().collect()
    }

    /// A name, or a literal that starts like one (Python's `f"…"`, Perl's `qq{…}`).
    fn word(&mut self) -> String {
        let start = self.i;
        let name = self.ident();
        let next = self.peek(0);
        if self.syntax == Syntax::Python
            && name.len() <= 2
            && name.chars().all(|c| "rRbBuUfF".contains(c))
            && matches!(next, Some('"' | '\''))
        {
            let raw = name.contains(['r', 'R']);
            let f = name.contains(['f', 'F']);
            let q = next.unwrap_or('"');
            self.python_string(q, raw, f);
            return name;
        }
        if self.syntax == Syntax::Perl
            && matches!(
                name.as_str(),
                "q" | "qq" | "qw" | "qx" | "m" | "qr" | "s" | "tr" | "y"
            )
            && self.perl_quote_like(&name)
        {
            return name;
        }
        if self.syntax == Syntax::Perl && (name == "__END__" || name == "__DATA__") {
            self.i = self.c.len();
            return name;
        }
        // Ruby's `?x`… no; method names may end in `?` or `!`.
        if self.syntax == Syntax::Ruby
            && matches!(self.peek(0), Some('?' | '!'))
            && !matches!(self.peek(1), Some('='))
        {
            self.i += 1;
        }
        let _ = start;
        self.push(Tok::Ident(name.clone()));
        name
    }

    /// `'…'` or `"…"` (Python's go through [`Lexer::python_string`]).
    fn string_literal(&mut self, q: char) {
        if self.syntax == Syntax::Python {
            self.python_string(q, false, false);
            return;
        }
        self.i += 1;
        let interp = match (self.syntax, q) {
            (_, '\'') => Interp::None,
            (Syntax::Perl | Syntax::Php, '"') => Interp::Sigil,
            (Syntax::Ruby, '"') => Interp::Ruby,
            _ => Interp::None,
        };
        let full_escapes = q == '"' || matches!(self.syntax, Syntax::Js | Syntax::Lua);
        let s = self.quoted(q, full_escapes, interp);
        if self.syntax == Syntax::Ruby && self.peek(0) == Some(':') && self.peek(1) != Some(':') {
            // `"key": value` is a symbol key.
        }
        self.push(Tok::Str(s));
    }

    fn python_string(&mut self, q: char, raw: bool, f: bool) {
        let triple = self.peek(1) == Some(q) && self.peek(2) == Some(q);
        self.i += if triple { 3 } else { 1 };
        let mut s = String::new();
        loop {
            let Some(c) = self.peek(0) else {
                self.out.unclosed = true;
                break;
            };
            if c == q && (!triple || (self.peek(1) == Some(q) && self.peek(2) == Some(q))) {
                self.i += if triple { 3 } else { 1 };
                break;
            }
            if c == '\n' && !triple {
                self.out.unclosed = true;
                break;
            }
            if f && c == '{' {
                if self.peek(1) == Some('{') {
                    s.push('{');
                    self.i += 2;
                } else {
                    self.interpolated(&s);
                    s.push(ANY);
                }
                continue;
            }
            if f && c == '}' && self.peek(1) == Some('}') {
                s.push('}');
                self.i += 2;
                continue;
            }
            if c == '\\' && !raw {
                self.i += 1;
                self.escape(&mut s);
                continue;
            }
            if c == '\\' && raw {
                s.push(c);
                self.i += 1;
                if let Some(n) = self.peek(0) {
                    s.push(n);
                    self.i += 1;
                }
                continue;
            }
            s.push(c);
            self.i += 1;
        }
        self.push(Tok::Str(s));
    }

    /// Skips a `{…}` (or other pair) from its opening character, nesting.
    fn skip_balanced(&mut self, open: char, close: char) {
        let mut depth = 0usize;
        while let Some(c) = self.peek(0) {
            self.i += 1;
            if c == open {
                depth += 1;
            } else if c == close {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return;
                }
            } else if c == '\\' {
                self.i += 1;
            }
        }
        self.out.unclosed = true;
    }

    /// The text up to the closing `q` (the opening one already read), escapes decoded when
    /// `full_escapes` (else only `\\` and `\q`), interpolations marked.
    fn quoted(&mut self, q: char, full_escapes: bool, interp: Interp) -> String {
        let close = closing(q);
        let nests = close != q;
        let mut depth = 0usize;
        let mut s = String::new();
        loop {
            let Some(c) = self.peek(0) else {
                self.out.unclosed = true;
                return s;
            };
            if nests && c == q {
                depth += 1;
            } else if c == close {
                if depth == 0 {
                    self.i += 1;
                    return s;
                }
                depth -= 1;
            }
            if c == '\\' {
                self.i += 1;
                if full_escapes {
                    self.escape(&mut s);
                } else {
                    match self.peek(0) {
                        Some(n) if n == '\\' || n == q || n == close => {
                            s.push(n);
                            self.i += 1;
                        }
                        _ => s.push('\\'),
                    }
                }
                continue;
            }
            if self.interpolation(interp, &mut s) {
                continue;
            }
            s.push(c);
            self.i += 1;
        }
    }

    /// An interpolation at the cursor (`${…}`, `#{…}`, `$x`, `@x`): marked in `s`.
    fn interpolation(&mut self, interp: Interp, s: &mut String) -> bool {
        let (c, n) = (self.peek(0), self.peek(1));
        match interp {
            Interp::None => false,
            Interp::Js if c == Some('$') && n == Some('{') => {
                self.i += 1;
                self.interpolated(s);
                s.push(ANY);
                true
            }
            Interp::Ruby if c == Some('#') && n == Some('{') => {
                self.i += 1;
                self.interpolated(s);
                s.push(ANY);
                true
            }
            Interp::Sigil if matches!(c, Some('$' | '@')) => {
                let start = self.i;
                match n {
                    Some('{') => {
                        self.i += 1;
                        self.skip_balanced('{', '}');
                    }
                    Some(x) if ident_start(x) || x == ':' => {
                        self.i += 1;
                        while self.peek(0).is_some_and(|c| ident_char(c) || c == ':') {
                            self.i += 1;
                        }
                        // `$h{k}`, `$a[0]`, `$o->{k}`.
                        loop {
                            match self.peek(0) {
                                Some('[') => self.skip_balanced('[', ']'),
                                Some('{') => self.skip_balanced('{', '}'),
                                Some('-') if self.peek(1) == Some('>') => self.i += 2,
                                _ => break,
                            }
                        }
                    }
                    Some('$' | '!' | '0' | '&' | '_') if c == Some('$') => self.i += 2,
                    _ => return false,
                }
                // `${\ system(…)}`, `@{[ … ]}`: the code inside runs.
                let code: String = self.c[start..self.i.min(self.c.len())].iter().collect();
                let code = match code.strip_prefix("${").or_else(|| code.strip_prefix("@{")) {
                    Some(inner) => inner.strip_suffix('}').unwrap_or(inner).to_owned(),
                    None => code,
                };
                self.interps.push((s.len(), code));
                s.push(ANY);
                true
            }
            Interp::Php if c == Some('{') && n == Some('$') => {
                self.interpolated(s);
                s.push(ANY);
                true
            }
            _ => false,
        }
    }

    /// A backslash escape (the backslash already read), decoded into `s`.
    fn escape(&mut self, s: &mut String) {
        let Some(e) = self.peek(0) else { return };
        self.i += 1;
        let hex = |l: &mut Self, max: usize| -> Option<char> {
            let braced = l.peek(0) == Some('{');
            if braced {
                l.i += 1;
            }
            let mut v = String::new();
            while v.len() < if braced { 8 } else { max }
                && l.peek(0).is_some_and(|c| c.is_ascii_hexdigit())
            {
                v.extend(l.peek(0));
                l.i += 1;
            }
            if braced && l.peek(0) == Some('}') {
                l.i += 1;
            }
            u32::from_str_radix(&v, 16).ok().and_then(char::from_u32)
        };
        match e {
            'n' => s.push('\n'),
            't' => s.push('\t'),
            'r' => s.push('\r'),
            '0'..='7' => {
                let mut v = String::from(e);
                while v.len() < 3 && self.peek(0).is_some_and(|c| ('0'..='7').contains(&c)) {
                    v.extend(self.peek(0));
                    self.i += 1;
                }
                match u32::from_str_radix(&v, 8).ok().and_then(char::from_u32) {
                    Some(c) => s.push(c),
                    None => s.push(ANY),
                }
            }
            'x' => match hex(self, 2) {
                Some(c) => s.push(c),
                None => s.push(ANY),
            },
            'u' => match hex(self, 4) {
                Some(c) => s.push(c),
                None => s.push(ANY),
            },
            'U' => match hex(self, 8) {
                Some(c) => s.push(c),
                None => s.push(ANY),
            },
            // Python's `\N{NAME}`, Perl's `\c`, `\e`…: a character the rules do not spell out.
            'N' | 'c' => s.push(ANY),
            '\n' => {}
            other => s.push(other),
        }
    }

    /// A backquoted literal: a command (Perl, Ruby, PHP, shell-like), or JavaScript's template.
    fn backquote(&mut self) {
        self.i += 1;
        match self.syntax {
            Syntax::Js => {
                let s = self.quoted('`', true, Interp::Js);
                // A tagged template: `` $`cmd` `` is handled before; others are strings.
                self.push(Tok::Str(s));
            }
            Syntax::Perl | Syntax::Php => {
                let s = self.quoted('`', true, Interp::Sigil);
                self.push(Tok::Cmd(s));
            }
            Syntax::Ruby => {
                let s = self.quoted('`', true, Interp::Ruby);
                self.push(Tok::Cmd(s));
            }
            Syntax::Python | Syntax::Lua | Syntax::Awk => self.punct_char(),
        }
    }

    fn punct_char(&mut self) {
        // A character the language does not give meaning here: skipped.
    }

    /// A regular expression or other delimited literal whose content is not code: skipped
    /// (with its trailing flags).
    fn delimited(&mut self, q: char, interp: bool) {
        let _ = self.quoted(q, true, if interp { Interp::Sigil } else { Interp::None });
        if self.syntax != Syntax::Awk {
            while self.peek(0).is_some_and(|c| c.is_ascii_alphabetic()) {
                self.i += 1;
            }
        }
        self.push(Tok::Str(String::new()));
    }

    /// Perl's `q//`, `qq//`, `qw//`, `qx//`, `m//`, `qr//`, `s///`, `tr///`, `y///`, after
    /// the name; false when the name is not followed by a delimiter (then it is a name).
    fn perl_quote_like(&mut self, name: &str) -> bool {
        let save = self.i;
        while self.peek(0).is_some_and(|c| c == ' ' || c == '\t') {
            self.i += 1;
        }
        let Some(d) = self.peek(0) else {
            self.i = save;
            return false;
        };
        // `s = 1`, `y => 2`, `q,` are not quote-like.
        if d.is_alphanumeric()
            || d == '_'
            || d.is_whitespace()
            || matches!(d, ',' | ';' | ')' | '=')
            || (d == '=' && self.peek(1) == Some('>'))
        {
            self.i = save;
            return false;
        }
        self.i += 1;
        match name {
            "q" | "qw" => {
                let s = self.quoted(d, false, Interp::None);
                if name == "qw" {
                    for w in s.split_whitespace() {
                        self.push(Tok::Str(w.to_owned()));
                        self.push(Tok::Punct(","));
                    }
                    self.out.toks.pop_if(|t| *t == Tok::Punct(","));
                } else {
                    self.push(Tok::Str(s));
                }
            }
            "qq" => {
                let s = self.quoted(d, true, Interp::Sigil);
                self.push(Tok::Str(s));
            }
            "qx" => {
                let interp = if d == '\'' {
                    Interp::None
                } else {
                    Interp::Sigil
                };
                let s = self.quoted(d, true, interp);
                self.push(Tok::Cmd(s));
            }
            "m" | "qr" => self.delimited(d, false),
            _ => {
                // s/PATTERN/REPLACEMENT/FLAGS, tr/…/…/: two parts.
                let _ = self.quoted(d, true, Interp::None);
                let d2 = if closing(d) != d {
                    while self.peek(0).is_some_and(char::is_whitespace) {
                        self.i += 1;
                    }
                    let n = self.peek(0).unwrap_or(d);
                    self.i += 1;
                    n
                } else {
                    d
                };
                let replacement = self.quoted(d2, false, Interp::None);
                let mut flags = String::new();
                while let Some(c) = self.peek(0).filter(char::is_ascii_alphabetic) {
                    flags.push(c);
                    self.i += 1;
                }
                if name == "s" && flags.contains('e') {
                    if flags.matches('e').count() > 1 {
                        // `ee`: the replacement's value is evaluated again.
                        self.push(Tok::Computed);
                    }
                    self.push(Tok::Code(replacement));
                } else {
                    self.push(Tok::Str(String::new()));
                }
            }
        }
        true
    }

    /// Perl's `$x`, `@x`, `%x`, `$#x`, `${…}`, `$::x`, special variables; false when the
    /// sigil is an operator (`%` modulo).
    fn perl_variable(&mut self) -> bool {
        let sigil = self.peek(0).unwrap_or('$');
        let n = self.peek(1);
        let name_follows = n.is_some_and(|c| ident_start(c) || c == ':');
        if sigil == '%' && !(name_follows || n == Some('{')) {
            return false;
        }
        if sigil == '%' && n == Some('{') && !self.regex_allowed() {
            return false;
        }
        self.i += 1;
        if sigil == '$' && self.peek(0) == Some('#') {
            self.i += 1;
        }
        if self.peek(0) == Some('{') {
            self.push(Tok::Ident(sigil.to_string()));
            return true;
        }
        let start = self.i;
        while self.peek(0).is_some_and(|c| ident_char(c) || c == ':') {
            self.i += 1;
        }
        if self.i == start {
            // A punctuation variable: `$$`, `$!`, `$0`, `$_`, `$&`, `$/`, `$@`.
            if sigil == '$' && self.peek(0).is_some() {
                self.i += 1;
            }
        }
        let name: String = self.c[start..self.i].iter().collect();
        self.push(Tok::Ident(format!("{sigil}{name}")));
        true
    }

    /// Ruby's `%q()`, `%Q()`, `%()`, `%w[]`, `%i[]`, `%x()`, `%r{}`, `%s()`; false when `%` is
    /// an operator.
    fn ruby_percent(&mut self) -> bool {
        let (t, d) = match (self.peek(1), self.peek(2)) {
            (Some(t @ ('q' | 'Q' | 'w' | 'W' | 'i' | 'I' | 'x' | 'r' | 's')), Some(d))
                if !d.is_alphanumeric() && !d.is_whitespace() =>
            {
                (t, d)
            }
            (Some(d @ ('(' | '[' | '{' | '<' | '|' | '!' | '/')), _) if self.regex_allowed() => {
                ('Q', d)
            }
            _ => return false,
        };
        self.i += if t == 'Q' && self.peek(1) == Some(d) {
            2
        } else {
            3
        };
        let interp = if matches!(t, 'q' | 'w' | 'i' | 's') {
            Interp::None
        } else {
            Interp::Ruby
        };
        let s = self.quoted(d, !matches!(t, 'q' | 'w' | 'i' | 's'), interp);
        match t {
            'x' => self.push(Tok::Cmd(s)),
            'r' => self.push(Tok::Str(String::new())),
            'w' | 'W' | 'i' | 'I' => {
                self.push(Tok::Punct("["));
                for w in s.split_whitespace() {
                    self.push(Tok::Str(w.to_owned()));
                    self.push(Tok::Punct(","));
                }
                self.out.toks.pop_if(|t| *t == Tok::Punct(","));
                self.push(Tok::Punct("]"));
            }
            _ => self.push(Tok::Str(s)),
        }
        true
    }

    /// A here-document (`<<EOF`, `<<'EOF'`, `<<~EOF`, `<<-EOF`, PHP's `<<<EOF`): its body is a
    /// string (or a command, Ruby's ``<<`EOF` ``). False when `<<` is a shift.
    fn heredoc(&mut self) -> bool {
        if !matches!(self.syntax, Syntax::Perl | Syntax::Ruby | Syntax::Php) {
            return false;
        }
        let save = self.i;
        self.i += 2;
        if self.syntax == Syntax::Php && self.peek(0) == Some('<') {
            self.i += 1;
        }
        if matches!(self.peek(0), Some('~' | '-')) {
            self.i += 1;
        }
        let quote = match self.peek(0) {
            Some(q @ ('\'' | '"' | '`')) => {
                self.i += 1;
                Some(q)
            }
            _ => None,
        };
        let tag = self.ident();
        if tag.is_empty()
            || (quote.is_none()
                && !tag
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))
        {
            self.i = save;
            return false;
        }
        if let Some(q) = quote {
            if self.peek(0) != Some(q) {
                self.i = save;
                return false;
            }
            self.i += 1;
        }
        // The body starts on the next line: the rest of this one is read first, and the
        // bodies are read at its end (`heredoc_bodies`), in order.
        self.out.toks.push(if quote == Some('`') {
            Tok::Cmd(String::new())
        } else {
            Tok::Str(String::new())
        });
        self.heredocs.push((self.out.toks.len() - 1, tag, quote));
        true
    }

    /// At the end of a line that opened here-documents: their bodies, put in their tokens.
    fn heredoc_bodies(&mut self) {
        let pending = std::mem::take(&mut self.heredocs);
        let mut inserted = 0;
        for (at, tag, quote) in pending {
            let mut body = String::new();
            let mut closed = false;
            while self.peek(0).is_some() {
                let start = self.i;
                while self.peek(0).is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
                let line: String = self.c[start..self.i].iter().collect();
                if self.peek(0) == Some('\n') {
                    self.i += 1;
                }
                if line.trim() == tag || line.trim().trim_end_matches(';') == tag {
                    closed = true;
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            if !closed {
                self.out.unclosed = true;
            }
            let mut interps = Vec::new();
            if quote != Some('\'') {
                let mut out = Lexed::default();
                let mut sub = Lexer {
                    c: body.chars().collect(),
                    i: 0,
                    syntax: self.syntax,
                    out: &mut out,
                    interps: Vec::new(),
                    heredocs: Vec::new(),
                };
                let interp = match self.syntax {
                    Syntax::Ruby => Interp::Ruby,
                    _ => Interp::Sigil,
                };
                sub.c.push('\u{7f}');
                body = sub.quoted('\u{7f}', true, interp);
                interps = std::mem::take(&mut sub.interps);
            }
            let k = at + inserted;
            if let Some(Tok::Cmd(s) | Tok::Str(s)) = self.out.toks.get_mut(k) {
                *s = body;
            }
            if !interps.is_empty() && k < self.out.toks.len() {
                self.out.toks.insert(k + 1, Tok::Interp(interps));
                inserted += 1;
            }
        }
    }

    /// Lua's `[[…]]`, `[==[…]==]`: the number of `=` when one starts here.
    fn long_bracket_level(&self) -> Option<usize> {
        let mut k = 1;
        while self.peek(k) == Some('=') {
            k += 1;
        }
        (self.peek(k) == Some('[')).then_some(k - 1)
    }

    fn lua_long_string(&mut self) -> String {
        let level = self.long_bracket_level().unwrap_or(0);
        self.i += level + 2;
        let close: Vec<char> = std::iter::once(']')
            .chain(std::iter::repeat_n('=', level))
            .chain(std::iter::once(']'))
            .collect();
        let mut s = String::new();
        while self.i < self.c.len() {
            if self.c[self.i..].starts_with(&close) {
                self.i += close.len();
                return s;
            }
            s.push(self.c[self.i]);
            self.i += 1;
        }
        self.out.unclosed = true;
        s
    }
}

/// Which interpolation a string literal has.
#[derive(Clone, Copy)]
enum Interp {
    None,
    /// `${…}` (JavaScript templates).
    Js,
    /// `#{…}` (Ruby).
    Ruby,
    /// `$x`, `@x`, `${…}` (Perl, PHP double quotes).
    Sigil,
    /// PHP's `{$…}` besides [`Interp::Sigil`].
    #[allow(dead_code)]
    Php,
}

fn ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The closing delimiter of a bracketing one (`(` → `)`), else itself.
fn closing(d: char) -> char {
    match d {
        '(' => ')',
        '[' => ']',
        '{' => '}',
        '<' => '>',
        d => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(code: &str, s: Syntax) -> Vec<String> {
        lex(code, s)
            .toks
            .into_iter()
            .filter_map(|t| match t {
                Tok::Str(s) | Tok::Cmd(s) | Tok::Code(s) => Some(s.replace(ANY, "@")),
                _ => None,
            })
            .filter(|s| !s.is_empty())
            .collect()
    }

    #[test]
    fn reads_literals() {
        assert_eq!(
            strs(r#"os.system("rm -rf \x2f")"#, Syntax::Python),
            ["rm -rf /"]
        );
        assert_eq!(
            strs(r#"f"/proc/{pid}/environ""#, Syntax::Python),
            ["/proc/@/environ"]
        );
        assert_eq!(strs(r#"r'\d' + '''a'b'''"#, Syntax::Python), [r"\d", "a'b"]);
        assert_eq!(
            strs(r#"system "rm $x"; `id`"#, Syntax::Perl),
            ["rm @", "id"]
        );
        assert_eq!(strs(r#"qx{ls}; q(a(b)c)"#, Syntax::Perl), ["ls", "a(b)c"]);
        assert_eq!(strs(r#"print if /"/; system("x")"#, Syntax::Perl), ["x"]);
        assert_eq!(
            strs(r#"s/a/system("id")/e"#, Syntax::Perl),
            [r#"system("id")"#]
        );
        assert_eq!(
            strs(r#"%x(ls #{d}); "a#{b}""#, Syntax::Ruby),
            ["ls @", "a@"]
        );
        assert_eq!(strs("x = `a${b}` // c\n/'/.test(y)", Syntax::Js), ["a@"]);
        assert_eq!(strs("$`rm -rf ${d}`", Syntax::Js), ["rm -rf @"]);
        assert_eq!(
            strs("os.execute([[rm -rf /]]) -- x", Syntax::Lua),
            ["rm -rf /"]
        );
        assert_eq!(strs("print <<'E';\n$x\nE\n", Syntax::Perl), ["$x\n"]);
    }
}
