//! Checks of the workspace's shape that the compiler does not make (issue 19): the modules of a
//! crate that must stay layered import each other in no circle, and no function of non-test code
//! is longer than a reader can hold; and (issue 23) no package registry's host is named in the
//! workspace's text files ([`registry_mentions`]). Both walk the sources the way the compiler does: from each
//! crate root through its `mod` declarations, skipping `#[cfg(test)]` modules and items.
//!
//! The tests in `tests/shape.rs` run these over the workspace; they are the checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// What went wrong reading the sources.
#[derive(Debug, thiserror::Error)]
pub enum ShapeError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source} (line {line})")]
    Parse {
        path: PathBuf,
        line: usize,
        source: syn::Error,
    },
    #[error("{path}: `mod {name};` has no file ({name}.rs or {name}/mod.rs)")]
    MissingModule { path: PathBuf, name: String },
}

/// One function of non-test code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// The file, relative to the workspace root.
    pub file: PathBuf,
    /// `Type::name` for methods, `name` otherwise.
    pub name: String,
    pub line: usize,
    /// From the `fn` line to the closing brace.
    pub lines: usize,
}

/// A parsed source file and the module path it is at (`[]` for the crate root).
pub struct SourceFile {
    pub path: PathBuf,
    pub module: Vec<String>,
    pub ast: syn::File,
}

impl std::fmt::Debug for SourceFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceFile")
            .field("path", &self.path)
            .field("module", &self.module)
            .finish_non_exhaustive()
    }
}

/// The crate roots of a crate folder: `src/lib.rs`, `src/main.rs`, `src/bin/*.rs`.
pub fn crate_roots(crate_dir: &Path) -> Vec<PathBuf> {
    let src = crate_dir.join("src");
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|p| p.is_file())
        .collect();
    if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
        let mut bins: Vec<PathBuf> = bins
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        bins.sort();
        roots.extend(bins);
    }
    roots
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    }) || attrs.iter().any(|a| a.path().is_ident("test"))
}

/// The `visit_*` overrides that keep a visitor out of test code: `#[cfg(test)]` modules, and
/// `#[test]` or `#[cfg(test)]` functions and methods.
macro_rules! skip_test_code {
    () => {
        fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
            if !is_cfg_test(&m.attrs) {
                syn::visit::visit_item_mod(self, m);
            }
        }
        fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
            if !is_cfg_test(&f.attrs) {
                syn::visit::visit_item_fn(self, f);
            }
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            if !is_cfg_test(&f.attrs) {
                syn::visit::visit_impl_item_fn(self, f);
            }
        }
    };
}

fn parse(path: &Path) -> Result<syn::File, ShapeError> {
    let text = std::fs::read_to_string(path).map_err(|source| ShapeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    syn::parse_file(&text).map_err(|source| ShapeError::Parse {
        path: path.to_path_buf(),
        line: source.span().start().line,
        source,
    })
}

/// Every non-test source file reachable from `root` through `mod` declarations.
pub fn module_files(root: &Path) -> Result<Vec<SourceFile>, ShapeError> {
    let mut out = Vec::new();
    let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
    collect(root, dir, Vec::new(), &mut out)?;
    Ok(out)
}

/// `dir` is where the file's child modules live (`src/` for a root or a `mod.rs`, `src/a/` for
/// `src/a.rs`).
fn collect(
    path: &Path,
    dir: PathBuf,
    module: Vec<String>,
    out: &mut Vec<SourceFile>,
) -> Result<(), ShapeError> {
    let ast = parse(path)?;
    let mut children = Vec::new();
    inline_children(&ast.items, &dir, &module, path, &mut children)?;
    out.push(SourceFile {
        path: path.to_path_buf(),
        module,
        ast,
    });
    for (file, child_dir, child_module) in children {
        collect(&file, child_dir, child_module, out)?;
    }
    Ok(())
}

/// The out-of-line `mod x;` declarations among `items` (descending into inline modules).
fn inline_children(
    items: &[syn::Item],
    dir: &Path,
    module: &[String],
    path: &Path,
    children: &mut Vec<(PathBuf, PathBuf, Vec<String>)>,
) -> Result<(), ShapeError> {
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        if is_cfg_test(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let mut child_module = module.to_vec();
        child_module.push(name.clone());
        match &m.content {
            Some((_, inner)) => {
                inline_children(inner, &dir.join(&name), &child_module, path, children)?
            }
            None => {
                let flat = dir.join(format!("{name}.rs"));
                let nested = dir.join(&name).join("mod.rs");
                let file = if flat.is_file() {
                    flat
                } else if nested.is_file() {
                    nested
                } else {
                    return Err(ShapeError::MissingModule {
                        path: path.to_path_buf(),
                        name,
                    });
                };
                children.push((file, dir.join(&name), child_module));
            }
        }
    }
    Ok(())
}

/// Every function (free, method, trait default) of non-test code in `files`, with its length.
pub fn functions(files: &[SourceFile], workspace: &Path) -> Vec<Function> {
    let mut out = Vec::new();
    for f in files {
        let mut v = FnVisitor {
            file: f
                .path
                .strip_prefix(workspace)
                .unwrap_or(&f.path)
                .to_path_buf(),
            owner: None,
            out: &mut out,
        };
        v.visit_file(&f.ast);
    }
    out
}

struct FnVisitor<'a> {
    file: PathBuf,
    owner: Option<String>,
    out: &'a mut Vec<Function>,
}

impl FnVisitor<'_> {
    fn record(&mut self, name: &syn::Ident, sig: &syn::Signature, block: &syn::Block) {
        let line = sig.fn_token.span().start().line;
        let end = block.brace_token.span.close().end().line;
        let name = match &self.owner {
            Some(o) => format!("{o}::{name}"),
            None => name.to_string(),
        };
        self.out.push(Function {
            file: self.file.clone(),
            name,
            line,
            lines: end.saturating_sub(line) + 1,
        });
    }
}

impl<'ast> Visit<'ast> for FnVisitor<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_cfg_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_cfg_test(&f.attrs) {
            return;
        }
        self.record(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if is_cfg_test(&i.attrs) {
            return;
        }
        let owner = match &*i.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        let saved = std::mem::replace(&mut self.owner, owner);
        syn::visit::visit_item_impl(self, i);
        self.owner = saved;
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_cfg_test(&f.attrs) {
            return;
        }
        self.record(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.record(&f.sig.ident, &f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// A string literal of non-test code: where, and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Literal {
    /// The file, relative to the workspace root.
    pub file: PathBuf,
    pub line: usize,
    pub text: String,
}

/// Every string literal of non-test code in `files` that `wanted` picks.
pub fn literals(
    files: &[SourceFile],
    workspace: &Path,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<Literal> {
    let mut out = Vec::new();
    for f in files {
        let mut v = LitVisitor {
            file: f
                .path
                .strip_prefix(workspace)
                .unwrap_or(&f.path)
                .to_path_buf(),
            wanted,
            out: &mut out,
        };
        v.visit_file(&f.ast);
    }
    out
}

struct LitVisitor<'a> {
    file: PathBuf,
    wanted: &'a dyn Fn(&str) -> bool,
    out: &'a mut Vec<Literal>,
}

impl<'ast> Visit<'ast> for LitVisitor<'_> {
    skip_test_code!();
    fn visit_lit_str(&mut self, l: &'ast syn::LitStr) {
        let text = l.value();
        if (self.wanted)(&text) {
            self.out.push(Literal {
                file: self.file.clone(),
                line: l.span().start().line,
                text,
            });
        }
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // String literals inside macro calls (`format!`, `json!`) are tokens: read them too.
        for t in m.tokens.clone() {
            if let proc_macro2::TokenTree::Literal(lit) = t
                && let Ok(l) = syn::parse_str::<syn::LitStr>(&lit.to_string())
                && (self.wanted)(&l.value())
            {
                self.out.push(Literal {
                    file: self.file.clone(),
                    line: lit.span().start().line,
                    text: l.value(),
                });
            }
        }
        syn::visit::visit_macro(self, m);
    }
}

/// Every call of non-test code in `files` that reads the process's environment directly
/// (`std::env::var`, `var_os`, `vars`, `vars_os`, by any path ending `env::…`), with the
/// variable it names when the argument is a constant or a literal (`""` when it is not).
pub fn env_reads(files: &[SourceFile], workspace: &Path) -> Vec<Literal> {
    let mut out = Vec::new();
    for f in files {
        let mut v = EnvVisitor {
            file: f
                .path
                .strip_prefix(workspace)
                .unwrap_or(&f.path)
                .to_path_buf(),
            out: &mut out,
        };
        v.visit_file(&f.ast);
    }
    out
}

struct EnvVisitor<'a> {
    file: PathBuf,
    out: &'a mut Vec<Literal>,
}

impl<'ast> Visit<'ast> for EnvVisitor<'_> {
    skip_test_code!();
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if let syn::Expr::Path(f) = &*c.func {
            let segs: Vec<String> = f
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            let reads = matches!(
                segs.as_slice(),
                [.., env, read] if env == "env"
                    && matches!(read.as_str(), "var" | "var_os" | "vars" | "vars_os")
            ) && !matches!(segs.first().map(String::as_str), Some("hangar_protocol"));
            if reads {
                let text = match c.args.first() {
                    Some(syn::Expr::Path(p)) => p
                        .path
                        .segments
                        .last()
                        .map(|s| s.ident.to_string())
                        .unwrap_or_default(),
                    Some(syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(l),
                        ..
                    })) => l.value(),
                    _ => String::new(),
                };
                self.out.push(Literal {
                    file: self.file.clone(),
                    line: c.span().start().line,
                    text,
                });
            }
        }
        syn::visit::visit_expr_call(self, c);
    }
}

/// Which top-level modules of a crate each top-level module uses: an edge `a -> b` for every
/// path in `a` (or below it) that names `crate::b…`, `super::b…` from a top-level module, or an
/// item the crate root re-exports from `b`.
pub fn module_graph(files: &[SourceFile]) -> BTreeMap<String, BTreeSet<String>> {
    let top: BTreeSet<String> = files
        .iter()
        .filter(|f| f.module.len() == 1)
        .map(|f| f.module[0].clone())
        .chain(files.iter().filter(|f| f.module.is_empty()).flat_map(|f| {
            f.ast.items.iter().filter_map(|i| match i {
                syn::Item::Mod(m) if m.content.is_some() && !is_cfg_test(&m.attrs) => {
                    Some(m.ident.to_string())
                }
                _ => None,
            })
        }))
        .collect();
    // Names the crate root re-exports (`pub use plane::ControlPlane;`): `crate::ControlPlane`
    // is a use of `plane`.
    let mut reexports = BTreeMap::new();
    for f in files.iter().filter(|f| f.module.is_empty()) {
        for item in &f.ast.items {
            if let syn::Item::Use(u) = item {
                reexport_names(&u.tree, None, &mut reexports);
            }
        }
    }
    reexports.retain(|_, m: &mut String| top.contains(m));
    let mut graph: BTreeMap<String, BTreeSet<String>> =
        top.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for f in files.iter().filter(|f| !f.module.is_empty()) {
        let from = f.module[0].clone();
        let mut v = PathVisitor {
            depth: f.module.len(),
            names: BTreeSet::new(),
        };
        v.visit_file(&f.ast);
        for name in v.names {
            let to = if top.contains(&name) {
                Some(name)
            } else {
                reexports.get(&name).cloned()
            };
            if let Some(to) = to
                && to != from
                && let Some(edges) = graph.get_mut(&from)
            {
                edges.insert(to);
            }
        }
    }
    graph
}

fn reexport_names(tree: &syn::UseTree, first: Option<&str>, out: &mut BTreeMap<String, String>) {
    match tree {
        syn::UseTree::Path(p) => {
            let seg = p.ident.to_string();
            let first = first.unwrap_or(&seg).to_string();
            reexport_names(&p.tree, Some(&first), out);
        }
        syn::UseTree::Name(n) => {
            if let Some(m) = first {
                out.insert(n.ident.to_string(), m.to_string());
            }
        }
        syn::UseTree::Rename(r) => {
            if let Some(m) = first {
                out.insert(r.rename.to_string(), m.to_string());
            }
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                reexport_names(t, first, out);
            }
        }
        syn::UseTree::Glob(_) => {}
    }
}

/// The first segment after `crate::` (or after enough `super::`s to reach the crate root) of
/// every path and `use` in a file at module depth `depth`.
struct PathVisitor {
    depth: usize,
    names: BTreeSet<String>,
}

impl PathVisitor {
    fn segments(&mut self, segs: &[String]) {
        let supers = segs.iter().take_while(|s| *s == "super").count();
        let rest = if segs.first().is_some_and(|s| s == "crate") {
            &segs[1..]
        } else if supers > 0 && supers >= self.depth {
            &segs[self.depth.min(segs.len())..]
        } else {
            return;
        };
        if let Some(first) = rest.first() {
            self.names.insert(first.clone());
        }
    }
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.segments(&prefix.clone());
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.segments(&prefix.clone());
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.segments(&prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for PathVisitor {
    skip_test_code!();
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&u.tree, &mut Vec::new());
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.segments(&segs);
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Paths inside macro calls (`tokio::select!`, `json!`…) are tokens, not syntax: read
        // `crate :: x` and `super :: x` sequences out of them.
        let toks: Vec<String> = m
            .tokens
            .clone()
            .into_iter()
            .map(|t| t.to_string())
            .collect();
        for (i, t) in toks.iter().enumerate() {
            if t == "crate" || t == "super" {
                let mut segs = vec![t.clone()];
                let mut j = i + 1;
                while j + 2 < toks.len() + 1 && toks.get(j) == Some(&":".to_string()) {
                    // `::` arrives as two `:` puncts.
                    if toks.get(j + 1) != Some(&":".to_string()) {
                        break;
                    }
                    match toks.get(j + 2) {
                        Some(s) => segs.push(s.clone()),
                        None => break,
                    }
                    j += 3;
                }
                self.segments(&segs);
            }
        }
        syn::visit::visit_macro(self, m);
    }
}

/// The import circles in `graph`: each strongly connected set of two or more modules, sorted.
pub fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm; the graphs are a few dozen nodes.
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn strong<'g>(s: &mut State<'g>, v: &'g str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                strong(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.out.push(set);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            strong(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

/// Package registries' host names (written in two pieces here, so this file names none):
/// hangar's code, scripts, fixtures and docs use the mirror the machine's package manager is
/// configured with, and `example.com`-style names in examples.
pub const REGISTRY_HOSTS: &[(&str, &str)] = &[
    ("npmjs", ".org"),
    ("npmjs", ".com"),
    ("yarnpkg", ".com"),
    ("crates", ".io"),
    ("pypi", ".org"),
    ("pythonhosted", ".org"),
    ("deb.debian", ".org"),
    ("security.debian", ".org"),
    ("archive.ubuntu", ".com"),
    ("registry-1.docker", ".io"),
    ("index.docker", ".io"),
    ("hub.docker", ".com"),
    ("ghcr", ".io"),
    ("quay", ".io"),
    ("gcr", ".io"),
    ("rubygems", ".org"),
    ("proxy.golang", ".org"),
    ("repo1.maven", ".org"),
    ("repo.maven.apache", ".org"),
];

/// Folders never looked in: build output, installed tools, what the fuzzer learnt, git's own.
const NOT_SOURCES: &[&str] = &[
    "target",
    ".git",
    ".tools",
    "node_modules",
    "corpus",
    "artifacts",
];

/// One mention of a registry's host: file (relative to the root), line, host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mention {
    pub file: PathBuf,
    pub line: usize,
    pub host: String,
}

/// Every mention of a [`REGISTRY_HOSTS`] host in the text files under `root`, but those of
/// `Cargo.lock` files (cargo writes its index's name there) and of [`NOT_SOURCES`] folders.
pub fn registry_mentions(root: &Path) -> Result<Vec<Mention>, ShapeError> {
    let hosts: Vec<String> = REGISTRY_HOSTS
        .iter()
        .map(|(a, b)| format!("{a}{b}"))
        .collect();
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let read = |source| ShapeError::Read {
            path: dir.clone(),
            source,
        };
        for entry in std::fs::read_dir(&dir).map_err(read)? {
            let entry = entry.map_err(read)?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = entry.file_type().map_err(read)?;
            if kind.is_dir() {
                if !NOT_SOURCES.contains(&name.as_str()) {
                    dirs.push(path);
                }
                continue;
            }
            if !kind.is_file() || name == "Cargo.lock" {
                continue;
            }
            // Binary files and files that are not UTF-8 are not read as text.
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for (n, line) in text.lines().enumerate() {
                let lower = line.to_ascii_lowercase();
                for host in &hosts {
                    if lower.contains(host.as_str()) {
                        found.push(Mention {
                            file: path.strip_prefix(root).unwrap_or(&path).to_path_buf(),
                            line: n + 1,
                            host: host.clone(),
                        });
                    }
                }
            }
        }
    }
    found.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    Ok(found)
}
