//! Streaming uploads on a node: `tee PATH [> /dev/null]`, `cat > PATH`, `install [-m
//! MODE] /dev/stdin PATH` and the legacy SCP sink `scp -t` (see [`super::scp`]), each
//! with or without `sudo -n`.
//!
//! Contract: the target is opened when the command starts and every data packet is
//! written as it arrives (nothing is held in memory beyond a 1 MiB write buffer, no
//! fsync), so a dropped connection leaves the partial file under its name, as a real
//! node does. The only size limit is the capacity of the target's filesystem
//! (`nodefs`): a write that does not fit writes what fits and the command ends at once
//! with exit 1 and coreutils' message (`cat: write error: No space left on device`,
//! `tee: PATH: No space left on device`, `install: error writing 'PATH': No space left
//! on device`). Paths follow `node_cmd`'s rules (allowed trees, symlinks inside the
//! node); files are created 0600.

use std::sync::Arc;

use super::commands::Outcome;
use super::node_cmd::{deny, place};
use crate::nodefs::{Writer, io_text};
use crate::sim::Sim;

/// What a stdin-reading command writes to.
#[derive(Debug)]
pub struct Target {
    /// `tee`, `cat`, `install`.
    cmd: &'static str,
    /// The node path given.
    path: String,
    /// `tee` without a redirection echoes its input.
    echo: bool,
}

/// The stdin-reading form of a command (`None`: it does not read stdin), or the
/// outcome of a malformed one.
pub fn plan(w: &[String]) -> Option<Result<Target, Outcome>> {
    let cmd = w.first()?.as_str();
    let args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
    match cmd {
        "tee" => {
            let files: Vec<&str> = args
                .iter()
                .copied()
                .filter(|a| !a.starts_with('-') && !a.starts_with('>') && *a != "/dev/null")
                .collect();
            let echo = !args.iter().any(|a| a.starts_with('>'));
            let path = files.first()?;
            Some(Ok(Target { cmd: "tee", path: path.to_string(), echo }))
        }
        "cat" => {
            let i = args.iter().position(|a| a.starts_with('>'))?;
            let a = args[i].trim_start_matches('>');
            let path = if a.is_empty() { args.get(i + 1).copied()? } else { a };
            Some(Ok(Target { cmd: "cat", path: path.to_string(), echo: false }))
        }
        "install" if args.contains(&"/dev/stdin") => {
            let mut files = Vec::new();
            let mut skip = false;
            for a in &args {
                if skip {
                    skip = false;
                } else if *a == "-m" {
                    skip = true;
                } else if !a.starts_with('-') {
                    files.push(*a);
                }
            }
            match files.as_slice() {
                ["/dev/stdin", dest] => Some(Ok(Target { cmd: "install", path: dest.to_string(), echo: false })),
                _ => Some(Err(Outcome::fail(1, "install: missing destination file operand\n"))),
            }
        }
        _ => None,
    }
}

/// A sink receiving a channel's data.
#[derive(Debug)]
pub enum Sink {
    /// A file being written by tee/cat/install.
    File(FileSink),
    /// The SCP sink protocol.
    Scp(super::scp::ScpSink),
    /// Nothing any more (the upload ended).
    Done,
}

/// tee/cat/install writing one file.
#[derive(Debug)]
pub struct FileSink {
    target: Target,
    writer: Option<Writer>,
}

/// What a packet produced: bytes for the client, and the command's end if it ended.
#[derive(Debug, Default)]
pub struct Step {
    /// Bytes for the client's stdout.
    pub reply: Vec<u8>,
    /// The command ended (an error) with this outcome.
    pub done: Option<Outcome>,
}

/// Open the target of `t` on `node`, or the command's failure.
pub fn open(sim: &Arc<Sim>, node: &str, t: Target) -> Result<Sink, Outcome> {
    let install = t.cmd == "install";
    let Some((abs, real)) = place(sim, node, &t.path, !install) else { return Err(deny(t.cmd, &t.path)) };
    if !real.parent().is_some_and(|p| p.is_dir()) {
        return Err(Outcome::fail(
            1,
            if install {
                format!("install: cannot create regular file '{}': No such file or directory\n", t.path)
            } else {
                format!("{}: {}: No such file or directory\n", t.cmd, t.path)
            },
        ));
    }
    match Writer::create(sim, node, &abs, &real, install) {
        Ok(w) => Ok(Sink::File(FileSink { target: t, writer: Some(w) })),
        Err(e) => Err(Outcome::fail(1, format!("{}: {}: {}\n", t.cmd, t.path, io_text(&e)))),
    }
}

fn write_error(t: &Target, e: &str) -> Outcome {
    Outcome::fail(
        1,
        match t.cmd {
            "cat" => format!("cat: write error: {e}\n"),
            "install" => format!("install: error writing '{}': {e}\n", t.path),
            _ => format!("tee: {}: {e}\n", t.path),
        },
    )
}

impl Sink {
    /// Bytes to send the client when the command starts.
    pub fn greeting(&self) -> Vec<u8> {
        match self {
            Sink::File(_) | Sink::Done => Vec::new(),
            Sink::Scp(_) => vec![0],
        }
    }

    /// Take one data packet.
    pub fn data(&mut self, sim: &Sim, data: &[u8]) -> Step {
        match self {
            Sink::Done => Step::default(),
            Sink::Scp(s) => s.data(sim, data),
            Sink::File(f) => {
                let Some(w) = f.writer.as_mut() else { return Step::default() };
                match w.write(sim, data) {
                    Ok(()) => Step { reply: if f.target.echo { data.to_vec() } else { Vec::new() }, done: None },
                    Err(e) => {
                        let out = write_error(&f.target, &e);
                        if let Some(w) = f.writer.take() {
                            let _ = w.finish();
                        }
                        Step { reply: Vec::new(), done: Some(out) }
                    }
                }
            }
        }
    }

    /// The client closed stdin: the command's outcome.
    pub fn eof(self, sim: &Sim) -> Outcome {
        match self {
            Sink::Done => Outcome::ok(""),
            Sink::Scp(s) => s.eof(sim),
            Sink::File(f) => match f.writer.map(Writer::finish) {
                Some(Err(e)) => write_error(&f.target, &e),
                _ => Outcome::ok(""),
            },
        }
    }
}
