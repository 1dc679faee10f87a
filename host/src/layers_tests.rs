//! The layering of `host/src`, checked from the sources: which top-level
//! module names which (`crate::X` paths outside comments and test code), that
//! no two of them import each other through any chain, and that every import
//! is one docs/ARCHITECTURE.md's "Layers" table allows. Adding an import the
//! table does not list fails here until the table (and the design) say so.
//! Below the modules, the files: no two non-test files of host/src reach each
//! other through imports, a child's use of its parent's (`mod.rs`) items
//! aside; a failure lists each circle as `from -> to: the names taken`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn top_level_modules() -> BTreeSet<String> {
    fs::read_dir(src())
        .expect("host/src")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".rs").map(str::to_string);
            match (e.path().is_dir(), stem) {
                (true, _) => Some(name),
                (false, Some(s)) if !matches!(s.as_str(), "lib" | "main") && !s.ends_with("_tests") => Some(s),
                _ => None,
            }
        })
        .collect()
}

fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    name == "tests" || name.ends_with("_tests") || name.ends_with("_fixture") || name.starts_with("tests_")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).expect("read_dir").filter_map(|e| e.ok()) {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The non-test code of a file, without comment lines.
fn code_of(text: &str) -> String {
    let code = text.find("#[cfg(test)]\nmod ").map_or(text, |i| &text[..i]);
    code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn imports() -> Graph {
    let tops = top_level_modules();
    let mut graph = Graph::new();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for file in files {
        let rel = file.strip_prefix(src()).expect("below src").to_path_buf();
        let first = rel.components().next().expect("a path").as_os_str().to_string_lossy().into_owned();
        let top = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        if !tops.contains(&top) || is_test_file(&rel) {
            continue;
        }
        let code = code_of(&fs::read_to_string(&file).expect("read"));
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                .collect();
            if name != top && tops.contains(&name) {
                graph.entry(top.clone()).or_default().insert(name);
            }
        }
    }
    graph
}

/// The modules `from` reaches through imports, itself excluded unless by a loop.
fn reachable(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut next: Vec<String> = graph.get(from).into_iter().flatten().cloned().collect();
    while let Some(m) = next.pop() {
        if seen.insert(m.clone()) {
            next.extend(graph.get(&m).into_iter().flatten().cloned());
        }
    }
    seen
}

/// The "Layers" table: module → the modules it may import (`everything
/// below` = every module of the rows after it).
fn documented() -> Graph {
    let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ARCHITECTURE.md"))
        .expect("docs/ARCHITECTURE.md");
    let section = doc.split("## Layers").nth(1).expect("a Layers section");
    let rows: Vec<(Vec<String>, String)> = section
        .lines()
        .skip_while(|l| !l.starts_with("| module"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let names = cells[0].split(',').map(|n| n.trim().trim_matches('`').to_string()).collect();
            (names, cells.get(1).copied().unwrap_or("").to_string())
        })
        .collect();
    let mut graph = Graph::new();
    for (i, (names, allowed)) in rows.iter().enumerate() {
        let set: BTreeSet<String> = if allowed.contains("everything below") {
            rows[i + 1..].iter().flat_map(|(n, _)| n.clone()).collect()
        } else {
            allowed.split(',').map(|m| m.split('(').next().unwrap_or("").trim().trim_matches('`').to_string()).collect()
        };
        for n in names {
            graph.insert(n.clone(), set.iter().filter(|m| !m.is_empty() && !m.contains(' ')).cloned().collect());
        }
    }
    graph
}

#[test]
fn no_two_top_level_modules_import_each_other_through_any_chain() {
    let graph = imports();
    assert!(graph.contains_key("cli") && graph.contains_key("caps"), "the scan found the imports: {graph:?}");
    let loops: Vec<String> = graph.keys().filter(|m| reachable(&graph, m).contains(*m)).cloned().collect();
    assert!(loops.is_empty(), "modules on an import loop: {loops:?}\nthe imports: {graph:#?}");
}

#[test]
fn every_import_between_top_level_modules_is_one_the_architecture_table_lists() {
    let documented = documented();
    for module in top_level_modules() {
        assert!(documented.contains_key(&module), "`{module}` has no row in the Layers table of docs/ARCHITECTURE.md");
    }
    for (module, uses) in imports() {
        let allowed = &documented[&module];
        let extra: Vec<&String> = uses.iter().filter(|u| !allowed.contains(*u)).collect();
        assert!(
            extra.is_empty(),
            "`{module}` imports {extra:?}, which the Layers table of docs/ARCHITECTURE.md does not list for it"
        );
    }
}

#[path = "layers_files_tests.rs"]
mod files;

use files::{circles, file_imports};

#[test]
fn the_file_reader_resolves_use_groups_super_self_and_re_exports() {
    let graph = file_imports();
    let edge = |from: &str, to: &str| graph.get(from).and_then(|m| m.get(to)).cloned().unwrap_or_default();
    // `use super::{HostName, Inventory, InventoryError, Scope}` in inventory/vmid.rs:
    // its parent's own items are left out.
    assert!(edge("inventory/vmid.rs", "inventory/mod.rs").is_empty(), "{graph:#?}");
    // `use crate::caps::ssh::{ClientKind, SshClient, SshSettings}` in project/services.rs:
    // SshClient through ssh/mod.rs's `pub use client::SshClient`.
    assert!(edge("project/services.rs", "caps/ssh/client.rs").contains("SshClient"), "{graph:#?}");
    assert!(edge("project/services.rs", "caps/ssh/mod.rs").contains("SshSettings"), "{graph:#?}");
    // `super::super::transport::{Trust, check_identity}` in a file of a child module.
    assert!(edge("caps/ssh/native/connect.rs", "caps/ssh/transport.rs").contains("check_identity"), "{graph:#?}");
    // A group below a module path: `use crate::contract::{CapError, ErrorKind}`.
    assert!(edge("caps/ssh/client.rs", "contract/error.rs").contains("ErrorKind"), "{graph:#?}");
}

#[test]
fn no_import_circle_between_files() {
    let graph = file_imports();
    let found = circles(&graph);
    let text: Vec<String> = found
        .iter()
        .map(|group| {
            let mut lines = Vec::new();
            for from in group {
                for (to, names) in graph.get(from).into_iter().flatten() {
                    if group.contains(to) {
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        lines.push(format!("  {from} -> {to}: {}", names.join(", ")));
                    }
                }
            }
            format!("a circle of {} files:\n{}", group.len(), lines.join("\n"))
        })
        .collect();
    assert!(found.is_empty(), "import circles between files of host/src:\n{}", text.join("\n"));
}
