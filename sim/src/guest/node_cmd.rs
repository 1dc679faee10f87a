//! Commands a PVE node answers over SSH: uploads (`tee PATH`, `cat > PATH`, `install -m
//! MODE /dev/stdin PATH`, `scp -t PATH`; streamed, see [`super::upload`]), `mv [-f]
//! [-T]`, `mkdir -p`, `rm [-f]`, `test`, `realpath [-e] [--] PATH...`, `df`, `findmnt`,
//! `stat -c %s`, `sha256sum` (see [`super::node_fs_cmd`]), `pvesm apiinfo`, `qm disk
//! import` / `qm importdisk` (see [`super::qm_cmd`]).
//!
//! Contract: every path must be absolute, free of `.`/`..` components and under one of
//! the `dir` storages' paths (e.g. `/var/lib/vz/`), `/var/tmp/` or `/tmp/`; anything
//! else is "Permission denied". Files are created with mode 0600.
//!
//! Symlinks in the node's directory tree behave as on a real node, inside the node:
//! directories are followed (an absolute link target means the node's path, never the
//! simulator host's), `install` and `mv` replace a symlink at the final name, `tee`
//! and `cat >` write through it. A path that resolves outside the allowed trees is
//! "Permission denied" like any other, so nothing ever reaches the host's files
//! outside the node's root. `realpath` prints the node's view.

use std::sync::Arc;

use super::commands::{Action, Outcome, not_found, run_line, split_line, strip_sudo};
use super::upload::Sink;
use crate::sim::Sim;

/// Whether a node command consumes stdin (an upload).
pub fn node_reads_stdin(line: &str) -> bool {
    split_line(line).iter().any(|(_, w)| {
        let (w, _) = strip_sudo(w);
        matches!(w.first().map(String::as_str), Some("tee"))
            || (w.first().is_some_and(|c| c == "install") && w.iter().any(|x| x == "/dev/stdin"))
            || (w.first().is_some_and(|c| c == "cat") && w.iter().any(|x| x.starts_with('>')))
            || (w.first().is_some_and(|c| c == "scp") && w.iter().any(|x| x == "-t"))
    })
}

/// Node trees besides the `dir` storages' paths that commands may touch.
const SCRATCH: [&str; 2] = ["/var/tmp", "/tmp"];

pub(super) fn node_path_ok(sim: &Sim, path: &str) -> bool {
    if !path.starts_with('/') || path.split('/').any(|c| c == ".." || c == ".") {
        return false;
    }
    sim.cfg
        .storages
        .iter()
        .filter_map(|s| s.path.as_deref())
        .chain(SCRATCH)
        .any(|base| path.starts_with(&format!("{}/", base.trim_end_matches('/'))))
}

/// Whether `path` or anything below it may be touched (`/var/tmp` itself included).
pub(super) fn node_path_ok_dir(sim: &Sim, path: &str) -> bool {
    node_path_ok(sim, &format!("{}/", path.trim_end_matches('/')))
}

/// The "Permission denied" of a path outside the allowed trees.
pub(super) fn deny(cmd: &str, p: &str) -> Outcome {
    Outcome::fail(1, format!("{cmd}: {p}: Permission denied (outside the node's storage paths)\n"))
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

/// The node path `path` resolves to on `node` (its directories resolved, and its final
/// component too when `follow_final`) with the simulator-host path behind it, if that
/// stays inside the allowed trees; `None` is "Permission denied".
pub(super) fn place(sim: &Sim, node: &str, path: &str, follow_final: bool) -> Option<(String, std::path::PathBuf)> {
    if !node_path_ok_dir(sim, path) {
        return None;
    }
    let resolved = if follow_final {
        resolve(sim, node, path, false).ok()?
    } else {
        let (dir, name) = path.rsplit_once('/')?;
        let dir = resolve(sim, node, if dir.is_empty() { "/" } else { dir }, false).ok()?;
        format!("{}/{name}", dir.trim_end_matches('/'))
    };
    node_path_ok_dir(sim, &resolved).then(|| (resolved.clone(), sim.node_path(node, &resolved)))
}

/// How a command line starts: answered at once, or streaming stdin into a sink.
pub enum Start {
    /// The whole line ran (it read no stdin).
    Done(Outcome),
    /// An upload is under way; the line continues when it ends.
    Stream(Box<Streaming>),
}

/// A command line whose upload is streaming.
pub struct Streaming {
    /// The sink taking stdin.
    pub sink: Sink,
    node: String,
    stdout: String,
    stderr: String,
    rest: Vec<(String, Vec<String>)>,
}

impl Streaming {
    /// The client closed stdin: end the upload and run the rest of the line.
    pub fn end(self, sim: &Arc<Sim>) -> Outcome {
        let Streaming { sink, node, stdout, stderr, rest } = self;
        let out = sink.eof(sim);
        Streaming { sink: Sink::Done, node, stdout, stderr, rest }.finish(sim, out)
    }

    /// The upload ended with `out` (at EOF or on an error): run the rest of the line.
    pub fn finish(self, sim: &Arc<Sim>, out: Outcome) -> Outcome {
        let (mut stdout, mut stderr) = (self.stdout, self.stderr);
        stdout.push_str(&out.stdout);
        stderr.push_str(&out.stderr);
        crate::nodefs::invalidate(sim, &self.node);
        let mut last = out;
        for (conn, words) in self.rest {
            if (conn == "&&" && last.code != 0) || (conn == "||" && last.code == 0) {
                continue;
            }
            last = node_one(sim, &self.node, &words);
            stdout.push_str(&last.stdout);
            stderr.push_str(&last.stderr);
        }
        Outcome { stdout, stderr, code: last.code, action: Action::None }
    }
}

/// Start a command line on a node: run it up to its upload, if any, and open that.
pub fn start_node(sim: &Arc<Sim>, node: &str, line: &str) -> Start {
    let segs = split_line(line);
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let mut last = Outcome::ok("");
    for (i, (conn, words)) in segs.iter().enumerate() {
        if (conn == "&&" && last.code != 0) || (conn == "||" && last.code == 0) {
            continue;
        }
        let (w, _) = strip_sudo(words);
        let planned = match super::scp::plan(sim, node, &w) {
            Some(r) => Some(r.map(Sink::Scp)),
            None => super::upload::plan(&w).map(|r| r.and_then(|t| super::upload::open(sim, node, t))),
        };
        last = match planned {
            Some(Ok(sink)) => {
                let rest = segs[i + 1..].to_vec();
                return Start::Stream(Box::new(Streaming { sink, node: node.to_string(), stdout, stderr, rest }));
            }
            Some(Err(out)) => out,
            None => node_one(sim, node, words),
        };
        stdout.push_str(&last.stdout);
        stderr.push_str(&last.stderr);
    }
    Start::Done(Outcome { stdout, stderr, code: last.code, action: Action::None })
}

/// Run a command line that reads no stdin on a node (as root).
pub fn run_node(sim: &Arc<Sim>, node: &str, line: &str) -> Outcome {
    run_line(line, |words| node_one(sim, node, words))
}

fn node_one(sim: &Arc<Sim>, node: &str, words: &[String]) -> Outcome {
    let (w, _) = strip_sudo(words);
    let Some(cmd) = w.first().map(String::as_str) else { return Outcome::ok("") };
    let args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
    let deny = |p: &str| deny(cmd, p);
    if let Some(out) = super::node_fs_cmd::run(sim, node, cmd, &args) {
        return out;
    }
    match cmd {
        "true" => Outcome::ok(""),
        "hostname" => Outcome::ok(format!("{node}\n")),
        "echo" => Outcome::ok(format!("{}\n", args.join(" "))),
        "pvesm" if args == ["apiinfo"] => Outcome::ok("APIVER 11\nAPIAGE 2\n"),
        "qm" => super::qm_cmd::run(sim, node, &args),
        "cat" if args.is_empty() => Outcome::ok(""),
        "cat" => {
            let mut out = String::new();
            for p in &args {
                let Some((_, real)) = place(sim, node, p, true) else { return deny(p) };
                match std::fs::read_to_string(real) {
                    Ok(s) => out.push_str(&s),
                    Err(_) => {
                        return Outcome {
                            stdout: out,
                            ..Outcome::fail(1, format!("cat: {p}: No such file or directory\n"))
                        };
                    }
                }
            }
            Outcome::ok(out)
        }
        "mv" => {
            let files: Vec<&str> = args.iter().copied().filter(|a| !a.starts_with('-')).collect();
            let no_target_dir = args.iter().any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('T'));
            let [src, dest] = files.as_slice() else {
                return Outcome::fail(1, "mv: missing destination file operand\n".to_string());
            };
            let (Some((_, from)), Some((_, mut to))) = (place(sim, node, src, false), place(sim, node, dest, false))
            else {
                return deny(if place(sim, node, src, false).is_none() { src } else { dest });
            };
            crate::nodefs::invalidate(sim, node);
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
                let Some((_, real)) = place(sim, node, p, true) else { return deny(p) };
                if let Err(e) = crate::fsutil::ensure_dir(&real) {
                    return Outcome::fail(1, format!("mkdir: {p}: {e}\n"));
                }
            }
            Outcome::ok("")
        }
        "rm" => {
            for p in args.iter().filter(|a| !a.starts_with('-')) {
                let Some((_, real)) = place(sim, node, p, false) else { return deny(p) };
                let _ = std::fs::remove_file(real);
            }
            crate::nodefs::invalidate(sim, node);
            Outcome::ok("")
        }
        "test" | "[" => {
            let args: Vec<&str> = args.iter().copied().filter(|a| *a != "]").collect();
            let ok = match args.as_slice() {
                [flag @ ("-e" | "-f" | "-d" | "-w" | "-r" | "-s"), p] => {
                    // The node's view: symlinks followed inside the node.
                    let as_dir = |q: &str| node_path_ok_dir(sim, q);
                    let resolved = resolve(sim, node, p, false).ok().filter(|r| as_dir(p) && as_dir(r));
                    resolved.map(|r| sim.node_path(node, &r)).is_some_and(|real| match *flag {
                        "-d" => real.is_dir(),
                        "-f" => real.is_file(),
                        "-s" => std::fs::metadata(&real).is_ok_and(|m| m.len() > 0),
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
                if !node_path_ok_dir(sim, p) {
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
