//! The run journal: one owner-only JSONL file per run at
//! `<state>/runs/<run-id>.jsonl`. The progress display, the audit trail
//! (`cradle runs list`, `cradle runs show`) and crash recovery all read it.
//!
//! Contract:
//! - Run ids sort by start time and are unique in the state directory:
//!   `20261130T081500Z-3f9a` (UTC second + random hex; the file is created with
//!   `O_EXCL`, and a collision picks another suffix).
//! - [`JournalWriter`] is cheap to clone and shared across threads. Each event is
//!   written as one complete line with a single unbuffered `write`, so a crash loses
//!   at most the line being written; [`JournalWriter::run_finished`] fsyncs.
//! - Every string of every event passes through [`crate::secrets::redact`] just
//!   before it is written (invariant 7): secrets registered with the redactor
//!   never reach the file, whatever field they hide in.
//! - The reader ([`list_runs`], [`read_run`]) tolerates a torn last line (reported
//!   in [`RunRecord::torn_line`]) but treats a corrupt line anywhere else as an
//!   error naming `file:line`.

mod event;
mod parse;
mod reader;
mod render;
pub mod timeline;

pub use event::{CallOutcome, Event, LogLevel, PluginVersion, RunStatus, Timestamp};
pub use reader::{RunRecord, RunSummary, TornLine, list_runs, read_run, read_run_file};
pub use render::{render_list_json, render_list_text, render_run_json, render_run_text};

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::state::{StateDir, StateError};

/// Errors from writing or reading journals.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The state directory could not be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// Writing a line failed; the run's record is incomplete from here on.
    #[error("cannot write run journal {path}: {source}; check free space and permissions there")]
    Write {
        /// The journal file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Reading a journal or the runs directory failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A line other than the last is not a valid event.
    #[error(
        "{path}:{line}: not a valid journal event ({detail}); the file was modified or \
         damaged — inspect that line, or move the file out of the runs directory"
    )]
    Corrupt {
        /// The journal file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What the parser said.
        detail: String,
    },
    /// No run id starts with the given prefix.
    #[error("no run matches `{prefix}`; `cradle runs list` lists the run ids")]
    NotFound {
        /// What the operator typed.
        prefix: String,
    },
    /// Several run ids start with the prefix.
    #[error("`{prefix}` matches several runs: {}; give more of the id", candidates.join(", "))]
    Ambiguous {
        /// What the operator typed.
        prefix: String,
        /// The matching run ids.
        candidates: Vec<String>,
    },
    /// An event could not be encoded (cannot happen for the types here).
    #[error("cannot encode a journal event: {0}")]
    Encode(#[from] serde_json::Error),
}

/// What the caller knows at the start of a run; the writer adds the run id, host,
/// pid and time.
#[derive(Debug, Clone)]
pub struct RunStart {
    /// The workflow file or built-in name.
    pub workflow: String,
    /// The workflow function the run calls.
    pub function: Option<String>,
    /// SHA-256 of the workflow source, hex.
    pub workflow_hash: String,
    /// The plugins loaded for the run.
    pub plugins: Vec<PluginVersion>,
    /// The command line, already redacted by the caller.
    pub argv: Vec<String>,
    /// The environment the run is in.
    pub environment: Option<String>,
    /// The environment's backend plugin, when one is loaded.
    pub backend: Option<String>,
}

/// Appends events to one run's journal. Clone it freely; all clones share the file.
#[derive(Clone)]
pub struct JournalWriter {
    inner: Arc<Inner>,
}

struct Inner {
    run_id: String,
    path: PathBuf,
    // A Mutex (not just O_APPEND) so lines from threads never interleave even if
    // the kernel splits a large write.
    file: Mutex<File>,
}

impl std::fmt::Debug for JournalWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalWriter").field("run_id", &self.inner.run_id).field("path", &self.inner.path).finish()
    }
}

/// How many suffixes to try before giving up on a unique run id; a collision
/// needs two runs in the same second with the same 16 random bits.
const ID_ATTEMPTS: usize = 32;

impl JournalWriter {
    /// Creates `<state>/runs/<new run id>.jsonl` (0600) and writes `run_started`.
    pub fn start(state: &StateDir, start: RunStart) -> Result<JournalWriter, JournalError> {
        let runs = state.runs()?;
        let mut last_err = None;
        for _ in 0..ID_ATTEMPTS {
            let run_id = new_run_id();
            let path = runs.join(format!("{run_id}.jsonl"));
            match create_exclusive(&path) {
                Ok(file) => {
                    let writer = JournalWriter {
                        inner: Arc::new(Inner { run_id: run_id.clone(), path, file: Mutex::new(file) }),
                    };
                    writer.record(Event::RunStarted {
                        run_id,
                        workflow: start.workflow,
                        function: start.function,
                        workflow_hash: start.workflow_hash,
                        plugins: start.plugins,
                        host: crate::state::host_name(),
                        pid: std::process::id(),
                        argv: start.argv,
                        environment: start.environment,
                        backend: start.backend,
                        at: Timestamp::now(),
                    })?;
                    return Ok(writer);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
                Err(source) => return Err(JournalError::Write { path, source }),
            }
        }
        Err(JournalError::Write {
            path: runs,
            source: last_err.unwrap_or_else(|| io::Error::other("no unique run id found")),
        })
    }

    /// This run's id.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Redacts every string in `event` and appends it as one line.
    pub fn record(&self, event: Event) -> Result<(), JournalError> {
        self.record_sized(event).map(drop)
    }

    /// [`JournalWriter::record`], returning the bytes written (the line with its
    /// newline), which a plugin call's journal budget is charged with.
    pub fn record_sized(&self, event: Event) -> Result<usize, JournalError> {
        let mut event = event;
        event.redact_strings();
        let mut line = serde_json::to_string(&event)?;
        line.push('\n');
        // A poisoned lock means a thread panicked while holding it; the file handle
        // is still fine, and losing the journal would be worse.
        let mut file = self.inner.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(line.as_bytes()).map_err(|source| self.write_error(source))?;
        Ok(line.len())
    }

    /// Records the start of `step`.
    pub fn step_started(&self, vm: Option<&str>, step: &str) -> Result<(), JournalError> {
        self.record(Event::StepStarted { vm: vm.map(str::to_string), step: step.to_string(), at: Timestamp::now() })
    }

    /// Records the end of `step`, with its error if it failed.
    pub fn step_finished(
        &self,
        vm: Option<&str>,
        step: &str,
        duration: Duration,
        error: Option<&str>,
    ) -> Result<(), JournalError> {
        self.record(Event::StepFinished {
            vm: vm.map(str::to_string),
            step: step.to_string(),
            at: Timestamp::now(),
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            error: error.map(str::to_string),
        })
    }

    /// Records a capability call (allowed, denied or failed); the bytes written.
    pub fn capability_call(
        &self,
        vm: Option<&str>,
        caller: &str,
        capability: &str,
        function: &str,
        outcome: CallOutcome,
        duration: Duration,
    ) -> Result<usize, JournalError> {
        self.record_sized(Event::CapabilityCall {
            vm: vm.map(str::to_string),
            caller: caller.to_string(),
            capability: capability.to_string(),
            function: function.to_string(),
            outcome,
            duration_us: u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
            at: Timestamp::now(),
        })
    }

    /// Records a structured log event; the bytes written.
    pub fn log(
        &self,
        vm: Option<&str>,
        level: LogLevel,
        message: &str,
        fields: Vec<(String, String)>,
    ) -> Result<usize, JournalError> {
        self.record_sized(Event::Log {
            vm: vm.map(str::to_string),
            level,
            message: message.to_string(),
            fields,
            at: Timestamp::now(),
        })
    }

    /// Records the end of the run and fsyncs the journal.
    pub fn run_finished(&self, status: RunStatus, error: Option<&str>) -> Result<(), JournalError> {
        self.record(Event::RunFinished { status, at: Timestamp::now(), error: error.map(str::to_string) })?;
        let file = self.inner.file.lock().unwrap_or_else(|e| e.into_inner());
        file.sync_all().map_err(|source| self.write_error(source))
    }

    fn write_error(&self, source: io::Error) -> JournalError {
        JournalError::Write { path: self.inner.path.clone(), source }
    }
}

fn create_exclusive(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().append(true).create_new(true).mode(0o600).open(path)
}

/// A new run id: `YYYYMMDDTHHMMSSZ-xxxx` (UTC; 16 random bits in hex).
pub fn new_run_id() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z-{:04x}",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        random_u16()
    )
}

fn random_u16() -> u16 {
    let mut buf = [0u8; 2];
    let read = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
    if read.is_ok() {
        return u16::from_le_bytes(buf);
    }
    // No /dev/urandom (odd containers): mix pid, time and a counter. Uniqueness
    // does not depend on it — the O_EXCL create does — only the retry count does.
    use sha2::{Digest, Sha256};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = format!("{}-{}-{n}", std::process::id(), time::OffsetDateTime::now_utc().unix_timestamp_nanos());
    let digest = Sha256::digest(seed.as_bytes());
    u16::from_le_bytes([digest[0], digest[1]])
}

#[cfg(test)]
mod tests;
