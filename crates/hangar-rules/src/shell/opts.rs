//! A command's options as getopt reads them: short clusters (`-xzf FILE`, `-ofile`), long
//! options with their value attached (`--output=F`) or next (`--output F`), `--`, and the
//! operands among them.

use super::Arg;

/// One option and its value, if it takes one: `"o"` for `-o`, `"--output"` for `--output`.
#[derive(Debug)]
pub(super) struct Opt {
    pub(super) name: String,
    pub(super) value: Option<Arg>,
}

/// What [`parse`] found.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub(super) opts: Vec<Opt>,
    pub(super) operands: Vec<Arg>,
    /// Where the operands begin when options stop at the first one (a wrapper's command).
    pub(super) rest: usize,
}

impl Parsed {
    /// The values of the option named any of `names` (`"o"`, `"--output"`), in order.
    pub(super) fn values<'a>(&'a self, names: &'a [&str]) -> impl Iterator<Item = &'a Arg> + 'a {
        self.opts
            .iter()
            .filter(move |o| names.contains(&o.name.as_str()))
            .filter_map(|o| o.value.as_ref())
    }

    /// Whether an option named any of `names` is given.
    pub(super) fn has(&self, names: &[&str]) -> bool {
        self.opts.iter().any(|o| names.contains(&o.name.as_str()))
    }
}

/// How a command's options are read.
pub(super) struct Spec<'a> {
    /// Short options that take a value (`"of"`: `-o X`, `-fX`).
    pub(super) short: &'a str,
    /// Long options that take a value (`"--output"`); `--x=v` always carries one.
    pub(super) long: &'a [&'a str],
    /// Options may follow operands (GNU getopt); otherwise the first operand ends them (a
    /// wrapper's command and its own options follow).
    pub(super) permute: bool,
}

/// Reads `args` by `spec`. A computed word is an operand.
pub(super) fn parse(args: &[Arg], spec: &Spec) -> Parsed {
    let mut p = Parsed::default();
    let mut i = 0;
    let mut options = true;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        let s = match a {
            Arg::Lit(s) if options && s.len() > 1 && s.starts_with('-') => s,
            _ => {
                if !spec.permute {
                    p.rest = i - 1;
                    return p;
                }
                p.operands.push(a.clone());
                continue;
            }
        };
        if s == "--" {
            options = false;
            if !spec.permute {
                p.rest = i;
                return p;
            }
            continue;
        }
        if let Some(long) = s.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (format!("--{n}"), Some(Arg::Lit(v.to_owned()))),
                None if spec.long.contains(&s.as_str()) => {
                    let v = args.get(i).cloned();
                    i += 1;
                    (s.clone(), v)
                }
                None => (s.clone(), None),
            };
            p.opts.push(Opt { name, value });
            continue;
        }
        for (at, c) in s.char_indices().skip(1) {
            if spec.short.contains(c) {
                let attached = &s[at + c.len_utf8()..];
                let value = if attached.is_empty() {
                    let v = args.get(i).cloned();
                    i += 1;
                    v
                } else {
                    Some(Arg::Lit(attached.to_owned()))
                };
                p.opts.push(Opt {
                    name: c.to_string(),
                    value,
                });
                break;
            }
            p.opts.push(Opt {
                name: c.to_string(),
                value: None,
            });
        }
    }
    p.rest = args.len();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(v: &[&str]) -> Vec<Arg> {
        v.iter().map(|s| Arg::Lit((*s).to_owned())).collect()
    }

    #[test]
    fn reads_clusters_and_long_options() {
        let spec = Spec {
            short: "ot",
            long: &["--output"],
            permute: true,
        };
        let p = parse(
            &lits(&["-vofile", "a", "--output", "x", "-t", "d", "b"]),
            &spec,
        );
        let o: Vec<_> = p.values(&["o", "--output"]).filter_map(Arg::lit).collect();
        assert_eq!(o, ["file", "x"]);
        assert_eq!(
            p.values(&["t"]).filter_map(Arg::lit).collect::<Vec<_>>(),
            ["d"]
        );
        assert_eq!(p.operands, lits(&["a", "b"]));
        assert!(p.has(&["v"]));
        let wrapper = Spec {
            short: "o",
            long: &[],
            permute: false,
        };
        let args = lits(&["-f", "-o", "log", "rm", "-rf", "/"]);
        let p = parse(&args, &wrapper);
        assert_eq!(&args[p.rest..], &lits(&["rm", "-rf", "/"])[..]);
        let args = lits(&["-f", "--", "-x"]);
        let p = parse(&args, &wrapper);
        assert_eq!(&args[p.rest..], &lits(&["-x"])[..]);
    }
}
