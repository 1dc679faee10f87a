//! What `ssh` children and mux sessions share: their stdout and stderr read
//! into buffers capped at [`MAX_STREAM`] bytes (what is cut is counted and said),
//! and the short, redacted excerpt of `ssh`'s
//! stderr that errors quote.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

use super::MAX_STREAM;

/// The last few lines of `stderr`, secrets redacted, as one line of ≤ 400 chars.
pub(crate) fn excerpt(stderr: &str) -> String {
    let lines: Vec<&str> =
        stderr.lines().map(str::trim).filter(|l| !l.is_empty() && !l.chars().all(|c| c == '@')).collect();
    let tail = lines[lines.len().saturating_sub(4)..].join("; ");
    let tail = crate::secrets::redact(&tail).into_owned();
    let text =
        if tail.chars().count() > 400 { format!("{}…", tail.chars().take(400).collect::<String>()) } else { tail };
    if text.is_empty() { "ssh printed nothing".into() } else { format!("ssh said: {text}") }
}

/// A stream kept up to [`MAX_STREAM`] bytes, counting what was discarded.
#[derive(Debug, Default)]
pub(super) struct Capped {
    data: Vec<u8>,
    dropped: u64,
}

impl Capped {
    /// Keeps what fits of `chunk`, counts the rest.
    pub(super) fn push(&mut self, chunk: &[u8]) {
        let room = MAX_STREAM.saturating_sub(self.data.len()).min(chunk.len());
        self.data.extend_from_slice(&chunk[..room]);
        self.dropped += (chunk.len() - room) as u64;
    }

    /// The kept bytes, with a note of what was discarded.
    pub(super) fn finish(&mut self) -> Vec<u8> {
        let mut data = std::mem::take(&mut self.data);
        if self.dropped > 0 {
            data.extend_from_slice(
                format!("\n[cradle: output cut at {MAX_STREAM} bytes; {} more bytes discarded]\n", self.dropped)
                    .as_bytes(),
            );
        }
        data
    }
}

pub(super) fn spawn_reader<R: AsyncRead + Unpin + Send + 'static>(mut r: R, buf: Arc<Mutex<Capped>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut chunk = vec![0u8; 64 * 1024];
        while let Ok(n) = r.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            buf.lock().unwrap_or_else(|e| e.into_inner()).push(&chunk[..n]);
        }
    })
}

pub(super) fn take(buf: &Mutex<Capped>) -> Vec<u8> {
    buf.lock().unwrap_or_else(|e| e.into_inner()).finish()
}
