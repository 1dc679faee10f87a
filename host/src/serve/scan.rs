//! The run journals (`<state>/runs/*.jsonl`), read incrementally into the
//! totals `/metrics` serves ([`super::metrics`]).
//!
//! Contract:
//! - each journal is read from where the last scrape stopped (its offset,
//!   by file name and inode): a scrape reads only what was appended since;
//! - only complete lines count: a line without its newline (being written,
//!   or torn by a crash) is read again once it is complete, and never if it
//!   stays torn, as `cradle runs` skips it; a complete line that is not an
//!   event is skipped and counted (`cradle_journal_lines_unreadable_total`);
//! - a run is counted once, when its `run_finished` is read, by its status;
//!   a journal without one whose process is gone (checked before reading, so
//!   a last line written just before exiting is never missed) counts once as
//!   `interrupted`, as `cradle runs list` shows it;
//! - a journal removed (or archived) keeps what it added: counters never go
//!   down; a file replaced under the same name (another inode) or truncated is
//!   a new journal, read from its start;
//! - a run is counted by what it did, the workflow and function its
//!   `run_started` records (`maintain` `apply_vm` apart from `provision`
//!   `provision`); a journal written before the function was recorded counts
//!   as function `unknown`;
//! - step names beyond [`MAX_STEP_NAMES`] distinct ones are counted as
//!   `other`, (workflow, function) pairs beyond [`MAX_RUN_KINDS`] as
//!   (`other`, `other`), and label values are cut at [`MAX_LABEL`]
//!   characters, so a workflow naming steps after VMs, or `cradle run` of
//!   many mistyped names, cannot grow a scrape without bound.
//!
//! Step durations are the journals' own `step_finished.duration_ms`: the typed
//! per-run timeline (`journal::timeline`) was not there when this was written.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::histogram::{Histogram, STEP_BUCKETS};
use crate::journal::{CallOutcome, Event, RunStatus};
use crate::state::process::{Liveness, process_liveness};

/// Distinct step names kept as labels; the rest are `other`.
pub const MAX_STEP_NAMES: usize = 256;
/// Distinct (workflow, function) pairs kept as run labels; the rest are
/// (`other`, `other`). Workflows and their functions are the project's, a
/// handful; the bound is for names typed wrong at `cradle run`.
pub const MAX_RUN_KINDS: usize = 64;
/// The longest label value kept (characters).
pub const MAX_LABEL: usize = 120;
/// At most this much of one journal is read per scrape (the rest next time).
const MAX_READ: u64 = 64 * 1024 * 1024;

/// What the journals say, summed over every journal read by this process.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Totals {
    /// Runs ended, by result, backend, environment, workflow and function.
    pub runs: BTreeMap<RunKey, u64>,
    /// Steps ended, by (step, `ok`/`failed`).
    pub steps: BTreeMap<(String, String), u64>,
    /// Step durations (seconds), by step.
    pub step_durations: BTreeMap<String, Histogram>,
    /// Capability calls, by (capability, caller, `ok`/`failed`/`denied`).
    pub calls: BTreeMap<(String, String, String), u64>,
    /// Plugin traps, by plugin.
    pub traps: BTreeMap<String, u64>,
    /// The (workflow, function) pairs counted under their own names (at
    /// most [`MAX_RUN_KINDS`]).
    pub run_kinds: BTreeSet<(String, String)>,
    /// Complete lines that were not events.
    pub unreadable_lines: u64,
    /// Journals in the directory at the last scan.
    pub journals: usize,
}

/// The labels a run is counted under (`cradle_runs_total`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunKey {
    /// `succeeded`, `failed` or `interrupted`.
    pub result: String,
    /// The backend plugin, `none` without one.
    pub backend: String,
    /// The environment.
    pub environment: String,
    /// The workflow (`provision`, `maintain`, a `[serve.sources]` workflow, ...).
    pub workflow: String,
    /// The workflow function (`provision`, `check`, `plan_vm`, `apply_vm`, ...),
    /// `unknown` in journals written before it was recorded.
    pub function: String,
}

/// How a run's environment label is found when its command line names none.
#[derive(Debug, Clone, Default)]
pub struct RunLabels {
    /// `default_environment`.
    pub default_environment: Option<String>,
    /// The environment of `cradle serve`'s pipeline runs, when every source
    /// runs in the same one.
    pub serve_environment: Option<String>,
}

impl RunLabels {
    fn environment(&self, argv: &[String]) -> String {
        let mut args = argv.iter().skip(1);
        while let Some(a) = args.next() {
            if a == "--env" {
                return args.next().cloned().unwrap_or_default();
            }
            if let Some(v) = a.strip_prefix("--env=") {
                return v.to_string();
            }
        }
        let serve = argv.get(1).is_some_and(|a| a == "serve");
        let found = if serve { self.serve_environment.as_ref() } else { self.default_environment.as_ref() };
        found.cloned().unwrap_or_else(|| "unknown".into())
    }
}

/// A run whose `run_finished` has not been read.
#[derive(Debug, Default)]
struct OpenRun {
    plugins: Vec<String>,
    /// The first plugin that made a capability call.
    caller: Option<String>,
    environment: String,
    /// The backend the journal names.
    backend: Option<String>,
    /// The workflow and function the journal names.
    workflow: Option<String>,
    function: Option<String>,
    process: Option<(String, u32)>,
}

impl OpenRun {
    fn backend(&self) -> String {
        if let Some(b) = &self.backend {
            return b.clone();
        }
        match (&self.caller, self.plugins.as_slice()) {
            (Some(c), _) => c.clone(),
            (None, [only]) => only.clone(),
            _ => "none".into(),
        }
    }
}

#[derive(Debug)]
struct FileState {
    id: (u64, u64),
    offset: u64,
    run: OpenRun,
    ended: bool,
    /// (plugin, function) traps already counted for this run.
    traps: BTreeSet<(String, String)>,
}

impl FileState {
    fn new(id: (u64, u64)) -> FileState {
        FileState { id, offset: 0, run: OpenRun::default(), ended: false, traps: BTreeSet::new() }
    }
}

/// The runs directory and how far each journal was read.
#[derive(Debug)]
pub struct Journals {
    dir: PathBuf,
    labels: RunLabels,
    files: HashMap<OsString, FileState>,
    totals: Totals,
}

fn label(s: &str) -> String {
    s.chars().take(MAX_LABEL).collect()
}

/// The first `plugin `NAME`, function `FUNC`: ` in a plugin error (a trap's
/// shape, `PluginError::Trap`).
fn trap_in(error: &str) -> Option<(String, String)> {
    let mut rest = error;
    while let Some(i) = rest.find("plugin `") {
        let after = &rest[i + "plugin `".len()..];
        if let Some((plugin, tail)) = after.split_once('`')
            && let Some(tail) = tail.strip_prefix(", function `")
            && let Some((func, tail)) = tail.split_once('`')
            && tail.starts_with(": ")
        {
            return Some((plugin.to_string(), func.to_string()));
        }
        rest = after;
    }
    None
}

impl Journals {
    /// Nothing read yet of `dir`.
    pub fn new(dir: impl Into<PathBuf>, labels: RunLabels) -> Journals {
        Journals { dir: dir.into(), labels, files: HashMap::new(), totals: Totals::default() }
    }

    /// What was read so far.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Read what the journals gained since the last scan; the totals.
    pub fn scan(&mut self) -> &Totals {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return &self.totals,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "metrics: cannot read the runs directory");
                return &self.totals;
            }
        };
        let mut seen = BTreeSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(text) = name.to_str() else { continue };
            if !text.ends_with(".jsonl") || text.starts_with('.') {
                continue;
            }
            // Not followed: a symlink is no journal of ours.
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            seen.insert(name.clone());
            let id = (meta.dev(), meta.ino());
            let state = self.files.entry(name).or_insert_with(|| FileState::new(id));
            if state.id != id || meta.len() < state.offset {
                *state = FileState::new(id);
            }
            // Before reading: a process gone now wrote its last line already.
            let gone = !state.ended
                && state
                    .run
                    .process
                    .as_ref()
                    .is_some_and(|(host, pid)| process_liveness(host, *pid, None) == Liveness::Gone);
            if meta.len() > state.offset {
                read_new(&entry.path(), state, &mut self.totals, &self.labels);
            }
            if gone && !state.ended {
                end_run(state, RunStatus::Interrupted, &mut self.totals);
            }
        }
        self.files.retain(|name, _| seen.contains(name));
        self.totals.journals = self.files.len();
        &self.totals
    }
}

fn read_new(path: &Path, state: &mut FileState, totals: &mut Totals, labels: &RunLabels) {
    let mut buf = Vec::new();
    let read = std::fs::File::open(path).and_then(|mut f| {
        f.seek(SeekFrom::Start(state.offset))?;
        f.take(MAX_READ).read_to_end(&mut buf)
    });
    if let Err(e) = read {
        tracing::debug!(path = %path.display(), error = %e, "metrics: cannot read a journal");
        return;
    }
    // Only complete lines; the rest is read again when it is. A line longer
    // than a whole read is no journal line: skip it, counted, rather than
    // read the same bytes at every scrape.
    let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
        if buf.len() as u64 == MAX_READ {
            totals.unreadable_lines += 1;
            state.offset += MAX_READ;
        }
        return;
    };
    for line in buf[..end].split(|b| *b == b'\n') {
        match serde_json::from_slice::<Event>(line) {
            Ok(event) => apply(event, state, totals, labels),
            Err(_) => totals.unreadable_lines += 1,
        }
    }
    state.offset += end as u64 + 1;
}

fn apply(event: Event, state: &mut FileState, totals: &mut Totals, labels: &RunLabels) {
    match event {
        Event::RunStarted { workflow, function, plugins, argv, host, pid, environment, backend, .. } => {
            state.run.workflow = Some(label(&workflow));
            state.run.function = function.as_deref().map(label);
            state.run.plugins = plugins.into_iter().map(|p| label(&p.name)).collect();
            // Journals record both; older ones leave them to be inferred.
            // A journal that records its environment records its backend
            // too: none recorded there means the run had none.
            state.run.backend = match (&backend, &environment) {
                (Some(b), _) => Some(label(b)),
                (None, Some(_)) => Some("none".into()),
                (None, None) => None,
            };
            state.run.environment = label(&environment.unwrap_or_else(|| labels.environment(&argv)));
            state.run.process = Some((host, pid));
        }
        Event::StepFinished { step, duration_ms, error, .. } => {
            let step = label(&step);
            let step = if totals.step_durations.contains_key(&step) || totals.step_durations.len() < MAX_STEP_NAMES {
                step
            } else {
                "other".to_string()
            };
            let result = if error.is_some() { "failed" } else { "ok" };
            *totals.steps.entry((step.clone(), result.into())).or_default() += 1;
            totals
                .step_durations
                .entry(step)
                .or_insert_with(|| Histogram::new(STEP_BUCKETS))
                .observe(duration_ms as f64 / 1000.0);
            if let Some(e) = error {
                count_trap(&e, state, totals);
            }
        }
        Event::CapabilityCall { caller, capability, outcome, .. } => {
            let result = match outcome {
                CallOutcome::Ok => "ok",
                CallOutcome::Failed { .. } => "failed",
                CallOutcome::Denied { .. } => "denied",
            };
            if caller != "workflow" && state.run.caller.is_none() {
                state.run.caller = Some(label(&caller));
            }
            *totals.calls.entry((label(&capability), label(&caller), result.into())).or_default() += 1;
        }
        Event::RunFinished { status, error, .. } => {
            if let Some(e) = error {
                count_trap(&e, state, totals);
            }
            if !state.ended {
                end_run(state, status, totals);
            }
        }
        Event::StepStarted { .. } | Event::Log { .. } => {}
    }
}

fn count_trap(error: &str, state: &mut FileState, totals: &mut Totals) {
    if let Some((plugin, func)) = trap_in(error)
        && state.traps.insert((plugin.clone(), func))
    {
        *totals.traps.entry(label(&plugin)).or_default() += 1;
    }
}

fn end_run(state: &mut FileState, status: RunStatus, totals: &mut Totals) {
    state.ended = true;
    let unknown = || "unknown".to_string();
    let mut kind =
        (state.run.workflow.clone().unwrap_or_else(unknown), state.run.function.clone().unwrap_or_else(unknown));
    if !totals.run_kinds.contains(&kind) {
        if totals.run_kinds.len() < MAX_RUN_KINDS {
            totals.run_kinds.insert(kind.clone());
        } else {
            kind = ("other".into(), "other".into());
        }
    }
    let (workflow, function) = kind;
    let key = RunKey {
        result: status.to_string(),
        backend: state.run.backend(),
        environment: state.run.environment.clone(),
        workflow,
        function,
    };
    *totals.runs.entry(key).or_default() += 1;
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
