//! The legacy SCP sink (`scp -t [-p] [-d] [-v] [-r] [--] PATH`), what `scp -O` runs on
//! the remote side, streaming each file to disk like the other uploads.
//!
//! Protocol (OpenSSH `scp.c`, `sink()`): the sink sends `\0`; the source sends
//! `C<mode> <size> <name>\n`, the sink answers `\0` (or `\x01scp: <path>: <error>\n`),
//! then `<size>` bytes and a `\0` follow and the sink answers `\0` (or the error of the
//! write); `T<mtime> 0 <atime> 0\n` (with `-p`) and `E\n` are answered `\0`. The
//! command ends at EOF with exit 0, or 1 after any error. A directory (`D`) is refused
//! with a fatal `\x02` line (not modelled). Files are created 0600 whatever the mode
//! line says; `-p` sets the modification time. A full filesystem leaves the partial
//! file and reports `No space left on device` after the file's data, as the real sink.

use std::sync::Arc;

use super::commands::Outcome;
use super::node_cmd::{node_path_ok_dir, place};
use super::upload::Step;
use crate::nodefs::{Writer, io_text};
use crate::sim::Sim;

/// Parse `scp -t ...` into its sink, or `None` when the words are not a sink.
pub fn plan(sim: &Arc<Sim>, node: &str, w: &[String]) -> Option<Result<ScpSink, Outcome>> {
    if w.first().map(String::as_str) != Some("scp") || !w.iter().any(|a| a == "-t") {
        return None;
    }
    let mut dir_expected = false;
    let mut preserve = false;
    let mut target = None;
    let mut rest = false;
    for a in &w[1..] {
        match a.as_str() {
            "--" if !rest => rest = true,
            f if f.starts_with('-') && !rest => {
                dir_expected |= f.contains('d');
                preserve |= f.contains('p');
            }
            p => target = Some(p.to_string()),
        }
    }
    let Some(target) = target else {
        return Some(Err(Outcome::fail(1, "usage: scp [-346ABCOpqRrsTv] source ... target\n")));
    };
    if !target.starts_with('/') || !node_path_ok_dir(sim, &target) {
        return Some(Err(Outcome::fail(
            1,
            format!("scp: {target}: Permission denied (outside the node's storage paths)\n"),
        )));
    }
    let sink = ScpSink {
        sim: sim.clone(),
        node: node.to_string(),
        target,
        dir_expected,
        preserve,
        state: State::Header(Vec::new()),
        mtime: None,
        failed: false,
    };
    Some(Ok(sink))
}

#[derive(Debug)]
enum State {
    Header(Vec<u8>),
    Data { writer: Option<Writer>, left: u64, err: Option<String>, shown: String },
    End { writer: Option<Writer>, err: Option<String>, shown: String },
    Dead,
}

/// One `scp -t` session.
pub struct ScpSink {
    sim: Arc<Sim>,
    node: String,
    target: String,
    dir_expected: bool,
    preserve: bool,
    state: State,
    mtime: Option<u64>,
    failed: bool,
}

impl std::fmt::Debug for ScpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScpSink").field("target", &self.target).field("state", &self.state).finish()
    }
}

fn warn(reply: &mut Vec<u8>, msg: &str) {
    reply.push(1);
    reply.extend_from_slice(format!("scp: {msg}\n").as_bytes());
}

impl ScpSink {
    fn header(&mut self, line: &str, reply: &mut Vec<u8>) -> Option<Outcome> {
        let Some(kind) = line.chars().next() else {
            return self.fatal(reply, "protocol error: expected control record");
        };
        match kind {
            'T' => {
                self.mtime = line[1..].split(' ').next().and_then(|s| s.parse().ok());
                reply.push(0);
            }
            'E' => reply.push(0),
            'C' => self.begin_file(line, reply),
            'D' => return self.fatal(reply, "directories are not supported by this node"),
            '\x01' | '\x02' => self.failed = true,
            _ => return self.fatal(reply, "protocol error: expected control record"),
        }
        None
    }

    fn fatal(&mut self, reply: &mut Vec<u8>, msg: &str) -> Option<Outcome> {
        reply.push(2);
        reply.extend_from_slice(format!("scp: {msg}\n").as_bytes());
        self.state = State::Dead;
        Some(Outcome::fail(1, ""))
    }

    fn begin_file(&mut self, line: &str, reply: &mut Vec<u8>) {
        let mut parts = line[1..].splitn(3, ' ');
        let (_mode, size, name) = (parts.next(), parts.next(), parts.next());
        let (Some(size), Some(name)) = (size.and_then(|s| s.parse::<u64>().ok()), name) else {
            self.failed = true;
            warn(reply, "protocol error: bad mode");
            return;
        };
        if name.is_empty() || name.contains('/') || name == ".." || name == "." {
            self.failed = true;
            warn(reply, &format!("error: unexpected filename: {name}"));
            return;
        }
        let sim = self.sim.clone();
        let is_dir = place(&sim, &self.node, &self.target, true).is_some_and(|(_, real)| real.is_dir());
        let dest = if is_dir { format!("{}/{name}", self.target.trim_end_matches('/')) } else { self.target.clone() };
        if self.dir_expected && !is_dir {
            self.failed = true;
            warn(reply, &format!("{}: Not a directory", self.target));
            return;
        }
        let opened = match place(&sim, &self.node, &dest, true) {
            None => Err(format!("{dest}: Permission denied (outside the node's storage paths)")),
            Some((abs, real)) => {
                Writer::create(&sim, &self.node, &abs, &real, false).map_err(|e| format!("{dest}: {}", io_text(&e)))
            }
        };
        match opened {
            Ok(w) => {
                reply.push(0);
                self.state = if size == 0 {
                    State::End { writer: Some(w), err: None, shown: dest }
                } else {
                    State::Data { writer: Some(w), left: size, err: None, shown: dest }
                };
            }
            Err(e) => {
                self.failed = true;
                warn(reply, &e);
            }
        }
    }

    fn end_file(&mut self, writer: Option<Writer>, err: Option<String>, shown: &str, reply: &mut Vec<u8>) {
        let path = writer.as_ref().map(|w| w.path.clone());
        let err = match (err, writer.map(Writer::finish)) {
            (Some(e), _) | (None, Some(Err(e))) => Some(e),
            _ => None,
        };
        if let (Some(t), Some(p), true) = (self.mtime.take(), path, self.preserve) {
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
            let _ = std::fs::File::options().write(true).open(p).and_then(|f| f.set_modified(when));
        }
        match err {
            Some(e) => {
                self.failed = true;
                warn(reply, &format!("{shown}: {e}"));
            }
            None => reply.push(0),
        }
    }

    /// Take one data packet.
    pub fn data(&mut self, _sim: &Sim, mut data: &[u8]) -> Step {
        let mut reply = Vec::new();
        while !data.is_empty() {
            match std::mem::replace(&mut self.state, State::Dead) {
                State::Dead => return Step { reply, done: None },
                State::Header(mut buf) => match data.iter().position(|b| *b == b'\n') {
                    Some(i) => {
                        buf.extend_from_slice(&data[..i]);
                        data = &data[i + 1..];
                        self.state = State::Header(Vec::new());
                        let line = String::from_utf8_lossy(&buf).into_owned();
                        if let Some(out) = self.header(&line, &mut reply) {
                            return Step { reply, done: Some(out) };
                        }
                    }
                    None => {
                        buf.extend_from_slice(data);
                        data = &[];
                        if buf.len() > 4096 {
                            let out = self.fatal(&mut reply, "protocol error: header too long");
                            return Step { reply, done: out };
                        }
                        self.state = State::Header(buf);
                    }
                },
                State::Data { mut writer, left, mut err, shown } => {
                    let n = (left.min(data.len() as u64)) as usize;
                    if let Some(w) = writer.as_mut()
                        && let Err(e) = w.write(&self.sim, &data[..n])
                    {
                        err = Some(e);
                        if let Some(w) = writer.take() {
                            let _ = w.finish();
                        }
                    }
                    data = &data[n..];
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::End { writer, err, shown }
                    } else {
                        State::Data { writer, left, err, shown }
                    };
                }
                State::End { writer, err, shown } => {
                    // The source's `\0` after the data.
                    data = &data[1..];
                    self.end_file(writer, err, &shown, &mut reply);
                    self.state = State::Header(Vec::new());
                }
            }
        }
        Step { reply, done: None }
    }

    /// The source closed its side.
    pub fn eof(self, _sim: &Sim) -> Outcome {
        let truncated = matches!(self.state, State::Data { .. } | State::End { .. });
        if truncated || self.failed { Outcome::fail(1, "") } else { Outcome::ok("") }
    }
}
