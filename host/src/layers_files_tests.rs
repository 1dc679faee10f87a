//! The import graph between the files of host/src, for the layer test.
//!
//! A small reader of Rust sources, enough for the paths this crate writes:
//! comments, strings and `#[cfg(test)]` items are dropped; `use` trees
//! (groups, `self`, `as`, globs) become bindings; a path in code or in a `use`
//! that starts with `crate`, `super`, `self`, a child module or a binding is
//! resolved to the file that defines its item, following the bindings of the
//! module it passes through (so `crate::caps::ssh::SshClient` in `project.rs`
//! is `caps/ssh/client.rs`, through `caps/ssh/mod.rs`'s `pub use`). A `pub use`
//! the file itself does not use is a re-export, not an import of that file.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use super::{is_test_file, rust_files, src};

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

fn lex(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut toks = Vec::new();
    let mut i = 0;
    // Skips a string whose opening quote is at `i` (`hashes` `#`s for a raw one).
    let skip_string = |mut i: usize, raw: bool, hashes: usize| -> usize {
        i += 1;
        while i < c.len() {
            if !raw && c[i] == '\\' {
                i += 2;
                continue;
            }
            if c[i] == '"' && (0..hashes).all(|k| at(i + 1 + k) == '#') {
                return i + 1 + hashes;
            }
            i += 1;
        }
        i
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(i, false, 0);
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or label: `'a`.
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let hashes = c[i..].iter().take_while(|x| **x == '#').count();
            if matches!(word.as_str(), "r" | "br") && at(i + hashes) == '"' {
                i = skip_string(i + hashes, true, hashes);
            } else if word == "b" && at(i) == '"' {
                i = skip_string(i, false, 0);
            } else if word == "b" && at(i) == '\'' {
                i += 1;
                while i < c.len() && c[i] != '\'' {
                    i += if c[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            } else {
                toks.push(Tok::Ident(word));
            }
        } else if ch == ':' && at(i + 1) == ':' {
            toks.push(Tok::Sep);
            i += 2;
        } else {
            if !ch.is_whitespace() {
                toks.push(Tok::Punct(ch));
            }
            i += 1;
        }
    }
    toks
}

fn is_ident(t: Option<&Tok>, s: &str) -> bool {
    matches!(t, Some(Tok::Ident(x)) if x == s)
}

/// The index after the bracket group opening at `i`.
fn after_group(toks: &[Tok], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < toks.len() {
        match toks[i] {
            Tok::Punct('{' | '[' | '(') => depth += 1,
            Tok::Punct('}' | ']' | ')') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// `toks` without the items under `#[cfg(test)]`.
fn without_test_items(toks: Vec<Tok>) -> Vec<Tok> {
    let cfg_test = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if !toks[i..].starts_with(&cfg_test) {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        i += cfg_test.len();
        // Further attributes, then the item up to its `;` or its body.
        while toks.get(i) == Some(&Tok::Punct('#')) {
            i = after_group(&toks, i + 1);
        }
        while i < toks.len() {
            match toks[i] {
                Tok::Punct(';') => {
                    i += 1;
                    break;
                }
                Tok::Punct('{') => {
                    i = after_group(&toks, i);
                    break;
                }
                Tok::Punct('(' | '[') => i = after_group(&toks, i),
                _ => i += 1,
            }
        }
    }
    out
}

/// One name a `use` brings in: `name` (`*` for a glob) for `path` as written.
#[derive(Clone, Debug)]
struct Binding {
    path: Vec<String>,
    name: String,
    public: bool,
}

/// Parses the use tree at `i` below `prefix`; returns the index after it.
fn use_tree(toks: &[Tok], mut i: usize, prefix: &[String], public: bool, out: &mut Vec<Binding>) -> usize {
    let mut path = prefix.to_vec();
    if toks.get(i) == Some(&Tok::Sep) {
        i += 1;
    }
    loop {
        match toks.get(i) {
            Some(Tok::Punct('{')) => {
                i += 1;
                while i < toks.len() && toks[i] != Tok::Punct('}') {
                    i = use_tree(toks, i, &path, public, out);
                    if toks.get(i) == Some(&Tok::Punct(',')) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            Some(Tok::Punct('*')) => {
                out.push(Binding { path, name: "*".into(), public });
                return i + 1;
            }
            Some(Tok::Ident(seg)) => {
                let seg = seg.clone();
                i += 1;
                if toks.get(i) == Some(&Tok::Sep) {
                    path.push(seg);
                    i += 1;
                    continue;
                }
                let mut name = if seg == "self" { path.last().cloned().unwrap_or_default() } else { seg.clone() };
                if seg != "self" {
                    path.push(seg);
                }
                if is_ident(toks.get(i), "as") {
                    if let Some(Tok::Ident(alias)) = toks.get(i + 1) {
                        name = alias.clone();
                    }
                    i += 2;
                }
                if name != "_" {
                    out.push(Binding { path, name, public });
                }
                return i;
            }
            _ => return i,
        }
    }
}

/// What one source file declares and writes, test items left out.
struct Source {
    module: Vec<String>,
    bindings: Vec<Binding>,
    /// The tokens outside `use` and `mod x;` items.
    code: Vec<Tok>,
}

fn parse_source(module: Vec<String>, text: &str) -> Source {
    let toks = without_test_items(lex(text));
    let mut bindings = Vec::new();
    let mut code = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if is_ident(toks.get(i), "use") {
            let public = code.last().is_some_and(|t| is_ident(Some(t), "pub") || *t == Tok::Punct(')'));
            i = use_tree(&toks, i + 1, &[], public, &mut bindings);
            while i < toks.len() && toks[i] != Tok::Punct(';') {
                i += 1;
            }
            i += 1;
        } else if is_ident(toks.get(i), "mod") && toks.get(i + 2) == Some(&Tok::Punct(';')) {
            i += 3;
        } else {
            code.push(toks[i].clone());
            i += 1;
        }
    }
    Source { module, bindings, code }
}

/// The files of host/src by module path (`x.rs` or `x/mod.rs`, `lib.rs` the root).
fn sources() -> BTreeMap<Vec<String>, (String, Source)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut out = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src()).expect("below src").to_string_lossy().into_owned();
        if rel == "main.rs" {
            continue;
        }
        let mut module: Vec<String> = rel.trim_end_matches(".rs").split('/').map(str::to_string).collect();
        if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
            module.pop();
        }
        let text = fs::read_to_string(&file).expect("read");
        out.insert(module.clone(), (rel, parse_source(module, &text)));
    }
    out
}

/// Where a path leads: an item of a file, or a module (a file itself).
#[derive(Debug, PartialEq)]
enum Target {
    Item(Vec<String>, String),
    Module(Vec<String>),
}

struct Resolver<'a> {
    sources: &'a BTreeMap<Vec<String>, (String, Source)>,
}

impl Resolver<'_> {
    /// `path` as written in module `from`, from the crate root; `None` for
    /// other crates and names not imported.
    fn absolute(&self, from: &[String], path: &[String], depth: usize) -> Option<Vec<String>> {
        let (first, rest) = path.split_first()?;
        let mut base = from.to_vec();
        let mut rest = rest;
        match first.as_str() {
            "crate" => base.clear(),
            "self" => {}
            "super" => {
                base.pop();
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            _ => {
                let child: Vec<String> = from.iter().chain([first]).cloned().collect();
                if self.sources.contains_key(&child) {
                    return Some(child.into_iter().chain(rest.iter().cloned()).collect());
                }
                let binding = self.sources.get(from)?.1.bindings.iter().find(|b| &b.name == first)?;
                if depth > 8 || binding.path.first() == Some(first) {
                    return None;
                }
                let bound = self.absolute(from, &binding.path, depth + 1)?;
                return Some(bound.into_iter().chain(rest.iter().cloned()).collect());
            }
        }
        Some(base.into_iter().chain(rest.iter().cloned()).collect())
    }

    /// The file item or module an absolute path names.
    fn resolve(&self, path: &[String], depth: usize) -> Option<Target> {
        let mut module: Vec<String> = Vec::new();
        for (k, seg) in path.iter().enumerate() {
            let child: Vec<String> = module.iter().chain([seg]).cloned().collect();
            if self.sources.contains_key(&child) {
                module = child;
                continue;
            }
            let (_, source) = self.sources.get(&module)?;
            if let Some(b) = source.bindings.iter().find(|b| &b.name == seg)
                && depth < 8
            {
                let bound = self.absolute(&module, &b.path, depth + 1)?;
                let full: Vec<String> = bound.into_iter().chain(path[k + 1..].iter().cloned()).collect();
                return self.resolve(&full, depth + 1);
            }
            return Some(Target::Item(module, seg.clone()));
        }
        Some(Target::Module(module))
    }

    /// The files `source` imports, with the names it takes from each.
    fn imports(&self, source: &Source) -> BTreeMap<Vec<String>, BTreeSet<String>> {
        let mut out: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
        let mut add = |target: Option<Target>| match target {
            Some(Target::Item(m, name)) if m != source.module => {
                out.entry(m).or_default().insert(name);
            }
            _ => {}
        };
        let used = |name: &str| source.code.iter().any(|t| is_ident(Some(t), name));
        for b in &source.bindings {
            if b.public && !used(&b.name) {
                continue;
            }
            let Some(abs) = self.absolute(&source.module, &b.path, 0) else { continue };
            if b.name == "*" {
                if let Some(Target::Module(m)) = self.resolve(&abs, 0) {
                    add(Some(Target::Item(m, "*".into())));
                }
            } else {
                add(self.resolve(&abs, 0));
            }
        }
        // Paths in code: `a::b::c` not preceded by `::`.
        let code = &source.code;
        let mut i = 0;
        while i < code.len() {
            let starts = matches!(code[i], Tok::Ident(_)) && (i == 0 || code[i - 1] != Tok::Sep);
            if !starts || code.get(i + 1) != Some(&Tok::Sep) {
                i += 1;
                continue;
            }
            let mut path = Vec::new();
            while let Some(Tok::Ident(seg)) = code.get(i) {
                path.push(seg.clone());
                if code.get(i + 1) != Some(&Tok::Sep) {
                    break;
                }
                i += 2;
            }
            i += 1;
            if let Some(abs) = self.absolute(&source.module, &path, 0) {
                add(self.resolve(&abs, 0));
            }
        }
        out
    }
}

/// The import graph between non-test files: file → file → the names taken.
pub(super) fn file_imports() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let sources = sources();
    let resolver = Resolver { sources: &sources };
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (file, source) in sources.values() {
        if is_test_file(Path::new(file)) {
            continue;
        }
        for (module, names) in resolver.imports(source) {
            let to = &sources[&module].0;
            // What a module shares with its children (`super::x`) is not an
            // import between peers: a parent and its children are one unit.
            let ancestor = source.module.starts_with(&module);
            if !ancestor && !is_test_file(Path::new(to)) {
                graph.entry(file.clone()).or_default().insert(to.clone(), names);
            }
        }
    }
    graph
}

/// The groups of files that reach each other (strongly connected, two or more files).
pub(super) fn circles(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut next: Vec<&String> = graph.get(from).into_iter().flat_map(|m| m.keys()).collect();
        while let Some(f) = next.pop() {
            if seen.insert(f.clone()) {
                next.extend(graph.get(f).into_iter().flat_map(|m| m.keys()));
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|f| (f, reach(f))).collect();
    let mut groups: Vec<BTreeSet<String>> = Vec::new();
    for (f, r) in &reaches {
        if !r.contains(*f) || groups.iter().any(|g| g.contains(*f)) {
            continue;
        }
        let group = r.iter().filter(|g| reaches.get(g).is_some_and(|back| back.contains(*f))).cloned().collect();
        groups.push(group);
    }
    groups
}
