//! Commands a PVE node answers over SSH: snippet upload (`tee PATH`, `cat > PATH`,
//! `install -m MODE /dev/stdin PATH`, with or without `sudo -n`), `mv [-f] [-T]`,
//! `mkdir -p`, `rm`, `test`, `pvesm apiinfo`.
//!
//! Contract: every path must be absolute, free of `.`/`..` components and under one of
//! the `dir` storages' paths (e.g. `/var/lib/vz/`); anything else is "Permission
//! denied". Files are written atomically with mode 0600.

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
                    if !node_path_ok(sim, p) {
                        return deny(p);
                    }
                    match std::fs::read_to_string(sim.node_path(node, p)) {
                        Ok(s) => Outcome::ok(s),
                        Err(_) => Outcome::fail(1, format!("cat: {p}: No such file or directory\n")),
                    }
                };
            };
            if !node_path_ok(sim, path) {
                return deny(path);
            }
            let real = sim.node_path(node, path);
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
            if !node_path_ok(sim, dest) {
                return deny(dest);
            }
            let real = sim.node_path(node, dest);
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
            for p in [src, dest] {
                if !node_path_ok(sim, p) {
                    return deny(p);
                }
            }
            let (from, mut to) = (sim.node_path(node, src), sim.node_path(node, dest));
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
                if !node_path_ok(sim, p) {
                    return deny(p);
                }
                if let Err(e) = crate::fsutil::ensure_dir(&sim.node_path(node, p)) {
                    return Outcome::fail(1, format!("mkdir: {p}: {e}\n"));
                }
            }
            Outcome::ok("")
        }
        "rm" => {
            for p in args.iter().filter(|a| !a.starts_with('-')) {
                if !node_path_ok(sim, p) {
                    return deny(p);
                }
                let _ = std::fs::remove_file(sim.node_path(node, p));
            }
            Outcome::ok("")
        }
        "test" | "[" => {
            let args: Vec<&str> = args.iter().copied().filter(|a| *a != "]").collect();
            let ok = match args.as_slice() {
                [flag @ ("-e" | "-f" | "-d" | "-w" | "-r" | "-s"), p] => {
                    let real = sim.node_path(node, p);
                    node_path_ok(sim, &format!("{}/", p.trim_end_matches('/')))
                        && match *flag {
                            "-d" => real.is_dir(),
                            "-f" | "-s" => real.is_file(),
                            _ => real.exists(),
                        }
                }
                _ => false,
            };
            if ok { Outcome::ok("") } else { Outcome::fail(1, "") }
        }
        other => not_found(other),
    }
}
