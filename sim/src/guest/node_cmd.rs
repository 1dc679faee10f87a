//! Commands a PVE node answers over SSH: snippet upload (`tee PATH`, `cat > PATH`,
//! `install -m MODE /dev/stdin PATH`, with or without `sudo -n`), `mv [-f] [-T]`,
//! `mkdir -p`, `rm`, `test`, `realpath [-e] [--] PATH...`, `pvesm apiinfo`.
//!
//! Contract: every path must be absolute, free of `.`/`..` components and under one of
//! the `dir` storages' paths (e.g. `/var/lib/vz/`); anything else is "Permission
//! denied". Files are written atomically with mode 0600.
//!
//! Symlinks in the node's directory tree behave as on a real node, inside the node:
//! directories are followed (an absolute link target means the node's path, never the
//! simulator host's), `install` and `mv` replace a symlink at the final name, `tee`
//! and `cat >` write through it. A path that resolves outside the storage paths is
//! "Permission denied" like any other, so nothing ever reaches the host's files
//! outside the node's root. `realpath` prints the node's view.

use std::sync::Arc;

use super::commands::{Outcome, not_found, run_line, split_line, strip_sudo};
use crate::sim::Sim;

/// Whether a node command consumes stdin (an upload).
pub fn node_reads_stdin(line: &str) -> bool {
    split_line(line).iter().any(|(_, w)| {
        let (w, _) = strip_sudo(w);
        matches!(w.first().map(String::as_str), Some("tee"))
            || (w.first().is_some_and(|c| c == "install") && w.iter().any(|x| x == "/dev/stdin"))
            || (w.first().is_some_and(|c| c == "cat") && w.iter().any(|x| x.starts_with('>')))
    })
}

fn node_path_ok(sim: &Sim, path: &str) -> bool {
    if !path.starts_with('/') || path.split('/').any(|c| c == ".." || c == ".") {
        return false;
    }
    sim.cfg
        .storages
        .iter()
        .filter_map(|s| s.path.as_deref())
        .any(|base| path.starts_with(&format!("{}/", base.trim_end_matches('/'))))
}

/// Resolve `path` on `node` as the node's kernel would: every symlink among its
/// components followed (an absolute target is a node path), `..` applied after
/// resolution. `must_exist`: every component must exist (`realpath -e`). Returns the
/// node-view path, or the `realpath`-style error.
pub fn resolve(sim: &Sim, node: &str, path: &str, must_exist: bool) -> Result<String, String> {
    let mut todo: std::collections::VecDeque<String> =
        path.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect();
    let mut out: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        match c.as_str() {
            "." => continue,
            ".." => {
                out.pop();
                continue;
            }
            _ => out.push(c),
        }
        let here = sim.node_path(node, &format!("/{}", out.join("/")));
        match std::fs::symlink_metadata(&here) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Err(format!("{path}: Too many levels of symbolic links"));
                }
                let target = std::fs::read_link(&here).map_err(|e| format!("{path}: {e}"))?;
                let target = target.to_string_lossy().into_owned();
                out.pop();
                if target.starts_with('/') {
                    out.clear();
                }
                for part in target.split('/').filter(|c| !c.is_empty()).rev() {
                    todo.push_front(part.to_string());
                }
            }
            Ok(_) => {}
            Err(_) if must_exist => {
                return Err(format!("{path}: No such file or directory"));
            }
            Err(_) => {}
        }
    }
    Ok(format!("/{}", out.join("/")))
}

/// The simulator-host path `path` names on `node` once its directories are resolved
/// (and its final component too when `follow_final`), if that stays under the
/// storage paths; `None` is "Permission denied".
fn place(sim: &Sim, node: &str, path: &str, follow_final: bool) -> Option<std::path::PathBuf> {
    if !node_path_ok(sim, path) {
        return None;
    }
    let resolved = if follow_final {
        resolve(sim, node, path, false).ok()?
    } else {
        let (dir, name) = path.rsplit_once('/')?;
        let dir = resolve(sim, node, if dir.is_empty() { "/" } else { dir }, false).ok()?;
        format!("{}/{name}", dir.trim_end_matches('/'))
    };
    node_path_ok(sim, &resolved).then(|| sim.node_path(node, &resolved))
}

/// Run a command line on a node (as root) with the channel's stdin.
pub fn run_node(sim: &Arc<Sim>, node: &str, line: &str, stdin: &[u8]) -> Outcome {
    run_line(line, |words| node_one(sim, node, words, stdin))
}

fn node_one(sim: &Arc<Sim>, node: &str, words: &[String], stdin: &[u8]) -> Outcome {
    let (w, _) = strip_sudo(words);
    let Some(cmd) = w.first().map(String::as_str) else { return Outcome::ok("") };
    let args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
    let deny =
        |p: &str| Outcome::fail(1, format!("{cmd}: {p}: Permission denied (outside the node's storage paths)\n"));
    match cmd {
        "true" => Outcome::ok(""),
        "hostname" => Outcome::ok(format!("{node}\n")),
        "echo" => Outcome::ok(format!("{}\n", args.join(" "))),
        "pvesm" if args == ["apiinfo"] => Outcome::ok("APIVER 11\nAPIAGE 2\n"),
        "tee" | "cat" => {
            let (target, quiet) = if cmd == "tee" {
                let files: Vec<&str> = args
                    .iter()
                    .copied()
                    .filter(|a| !a.starts_with('-') && !a.starts_with('>') && *a != "/dev/null")
                    .collect();
                (files.first().copied(), args.iter().any(|a| a.starts_with('>')))
            } else {
                let pos = args.iter().position(|a| a.starts_with('>'));
                let target = pos.and_then(|i| {
                    let a = args[i].trim_start_matches('>');
                    if a.is_empty() { args.get(i + 1).copied() } else { Some(a) }
                });
                (target, true)
            };
            let Some(path) = target else {
                return if cmd == "cat" && args.is_empty() {
                    Outcome::ok(String::from_utf8_lossy(stdin))
                } else {
                    let p = args.first().copied().unwrap_or("");
                    let Some(real) = place(sim, node, p, true) else { return deny(p) };
                    match std::fs::read_to_string(real) {
                        Ok(s) => Outcome::ok(s),
                        Err(_) => Outcome::fail(1, format!("cat: {p}: No such file or directory\n")),
                    }
                };
            };
            let Some(real) = place(sim, node, path, true) else { return deny(path) };
            if !real.parent().is_some_and(|p| p.is_dir()) {
                return Outcome::fail(1, format!("{cmd}: {path}: No such file or directory\n"));
            }
            if let Err(e) = crate::fsutil::write_private(&real, stdin) {
                return Outcome::fail(1, format!("{cmd}: {path}: {e}\n"));
            }
            if quiet { Outcome::ok("") } else { Outcome::ok(String::from_utf8_lossy(stdin)) }
        }
        "install" => {
            // install [-m MODE] /dev/stdin DEST: only the stdin form uploads.
            let files: Vec<&str> = {
                let mut out = Vec::new();
                let mut skip = false;
                for a in &args {
                    if skip {
                        skip = false;
                    } else if *a == "-m" {
                        skip = true;
                    } else if !a.starts_with('-') {
                        out.push(*a);
                    }
                }
                out
            };
            let [src, dest] = files.as_slice() else {
                return Outcome::fail(1, "install: missing destination file operand\n".to_string());
            };
            if *src != "/dev/stdin" {
                return Outcome::fail(1, format!("install: cannot stat '{src}': not supported on this node\n"));
            }
            let Some(real) = place(sim, node, dest, false) else { return deny(dest) };
            if !real.parent().is_some_and(|p| p.is_dir()) {
                return Outcome::fail(
                    1,
                    format!("install: cannot create regular file '{dest}': No such file or directory\n"),
                );
            }
            match crate::fsutil::write_private(&real, stdin) {
                Ok(()) => Outcome::ok(""),
                Err(e) => Outcome::fail(1, format!("install: {dest}: {e}\n")),
            }
        }
        "mv" => {
            let files: Vec<&str> = args.iter().copied().filter(|a| !a.starts_with('-')).collect();
            let no_target_dir = args.iter().any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('T'));
            let [src, dest] = files.as_slice() else {
                return Outcome::fail(1, "mv: missing destination file operand\n".to_string());
            };
            let (Some(from), Some(mut to)) = (place(sim, node, src, false), place(sim, node, dest, false)) else {
                return deny(if place(sim, node, src, false).is_none() { src } else { dest });
            };
            if to.is_dir() {
                if no_target_dir {
                    return Outcome::fail(1, format!("mv: cannot overwrite directory '{dest}' with non-directory\n"));
                }
                to = to.join(from.file_name().unwrap_or_default());
            }
            match std::fs::rename(&from, &to) {
                Ok(()) => Outcome::ok(""),
                Err(e) => Outcome::fail(1, format!("mv: cannot move '{src}' to '{dest}': {e}\n")),
            }
        }
        "mkdir" => {
            for p in args.iter().filter(|a| !a.starts_with('-')) {
                let Some(real) = place(sim, node, p, true) else { return deny(p) };
                if let Err(e) = crate::fsutil::ensure_dir(&real) {
                    return Outcome::fail(1, format!("mkdir: {p}: {e}\n"));
                }
            }
            Outcome::ok("")
        }
        "rm" => {
            for p in args.iter().filter(|a| !a.starts_with('-')) {
                let Some(real) = place(sim, node, p, false) else { return deny(p) };
                let _ = std::fs::remove_file(real);
            }
            Outcome::ok("")
        }
        "test" | "[" => {
            let args: Vec<&str> = args.iter().copied().filter(|a| *a != "]").collect();
            let ok = match args.as_slice() {
                [flag @ ("-e" | "-f" | "-d" | "-w" | "-r" | "-s"), p] => {
                    // The node's view: symlinks followed inside the node.
                    let as_dir = |q: &str| node_path_ok(sim, &format!("{}/", q.trim_end_matches('/')));
                    let resolved = resolve(sim, node, p, false).ok().filter(|r| as_dir(p) && as_dir(r));
                    resolved.map(|r| sim.node_path(node, &r)).is_some_and(|real| match *flag {
                        "-d" => real.is_dir(),
                        "-f" | "-s" => real.is_file(),
                        _ => real.exists(),
                    })
                }
                _ => false,
            };
            if ok { Outcome::ok("") } else { Outcome::fail(1, "") }
        }
        "realpath" => {
            let must_exist = args.contains(&"-e");
            let mut out = String::new();
            for p in args.iter().filter(|a| !a.starts_with('-')) {
                if !node_path_ok(sim, &format!("{}/", p.trim_end_matches('/'))) {
                    return deny(p);
                }
                match resolve(sim, node, p, must_exist) {
                    Ok(r) => {
                        out.push_str(&r);
                        out.push('\n');
                    }
                    Err(e) => return Outcome { stdout: out, ..Outcome::fail(1, format!("realpath: {e}\n")) },
                }
            }
            Outcome::ok(out)
        }
        other => not_found(other),
    }
}
