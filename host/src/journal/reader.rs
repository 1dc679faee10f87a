//! Reading journals back: the run list and one run's record.
//!
//! A journal without `run_finished` belongs to a run that crashed or is still
//! running: its status is `interrupted`, and `in_progress` says whether the
//! recorded process is still alive on this host. Only the last line may be torn
//! (a crash mid-write); it is skipped and reported. A bad line elsewhere is
//! [`JournalError::Corrupt`] naming `file:line`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{CallOutcome, Event, JournalError, RunStatus, Timestamp};
use crate::state::StateDir;
use crate::state::process::{Liveness, process_liveness};

/// A torn final line, skipped when reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornLine {
    /// Its 1-based line number.
    pub line: usize,
    /// How many bytes it had.
    pub bytes: usize,
}

/// One row of `cradle runs list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    /// The run id.
    pub id: String,
    /// The workflow, from `run_started`.
    pub workflow: Option<String>,
    /// When the run started.
    pub started: Option<Timestamp>,
    /// The control node (host name) that ran it, from `run_started`: with
    /// several control nodes on one etcd, which one did what.
    pub node: Option<String>,
    /// The process that ran it (with `node`, which command's run it is).
    pub pid: Option<u32>,
    /// The command line that started it, from `run_started` (redacted when written).
    pub command: Vec<String>,
    /// The VM it worked on: the first VM a step or log event names.
    pub vm: Option<String>,
    /// A `cradle provision --check` run: it changed nothing.
    pub check: bool,
    /// When it finished; none if `run_finished` was never written.
    pub finished: Option<Timestamp>,
    /// Its status; `interrupted` when it never finished.
    pub status: RunStatus,
    /// Unfinished and its process is still alive on this host.
    pub in_progress: bool,
    /// Steps started.
    pub steps: usize,
    /// Steps that finished with an error.
    pub failed_steps: usize,
    /// Capability calls denied by a grant.
    pub denials: usize,
    /// The last line was torn by a crash.
    pub torn: bool,
    /// Set (in [`list_runs`] only) when the journal could not be read; the
    /// other fields are then empty.
    pub problem: Option<String>,
}

impl RunSummary {
    /// The status word shown to operators: `running`, `interrupted`,
    /// `succeeded`, `failed` or `unreadable`.
    pub fn status_word(&self) -> String {
        if self.problem.is_some() {
            "unreadable".into()
        } else if self.finished.is_none() && self.in_progress {
            "running".into()
        } else {
            self.status.to_string()
        }
    }
}

/// One run's full record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRecord {
    /// The summary.
    pub summary: RunSummary,
    /// The journal file.
    pub path: PathBuf,
    /// Every event, in order.
    pub events: Vec<Event>,
    /// The torn last line, if any.
    pub torn_line: Option<TornLine>,
}

/// Every run in the state directory, newest first. A journal that cannot be read
/// is listed with [`RunSummary::problem`] set rather than hiding the others.
pub fn list_runs(state: &StateDir) -> Result<Vec<RunSummary>, JournalError> {
    let dir = state.runs()?;
    let mut runs: Vec<RunSummary> = run_ids(&dir)?
        .into_iter()
        .map(|id| {
            let path = dir.join(format!("{id}.jsonl"));
            match parse_file(&id, &path) {
                Ok(record) => record.summary,
                Err(e) => RunSummary { problem: Some(e.to_string()), ..empty_summary(id) },
            }
        })
        .collect();
    newest_first(&mut runs);
    Ok(runs)
}

/// Orders `runs` newest first. An id starts with the UTC start second and ends
/// with a random suffix, so runs of the same second (a check right after a
/// provision) are ordered by their recorded start (milliseconds), not by the
/// suffix; a journal without a readable start keeps its id's second.
fn newest_first(runs: &mut [RunSummary]) {
    fn second(r: &RunSummary) -> &str {
        r.id.get(..16).unwrap_or(&r.id)
    }
    runs.sort_by(|a, b| second(b).cmp(second(a)).then_with(|| b.started.cmp(&a.started)).then_with(|| b.id.cmp(&a.id)));
}

/// The run whose id is `id_or_prefix` exactly, or the only one starting with it.
pub fn read_run(state: &StateDir, id_or_prefix: &str) -> Result<RunRecord, JournalError> {
    let dir = state.runs()?;
    let ids = run_ids(&dir)?;
    let id = if ids.iter().any(|i| i == id_or_prefix) {
        id_or_prefix.to_string()
    } else {
        let mut matches: Vec<String> =
            ids.into_iter().filter(|i| !id_or_prefix.is_empty() && i.starts_with(id_or_prefix)).collect();
        matches.sort();
        match matches.len() {
            0 => {
                return Err(JournalError::NotFound { prefix: id_or_prefix.to_string() });
            }
            1 => matches.remove(0),
            _ => {
                return Err(JournalError::Ambiguous { prefix: id_or_prefix.to_string(), candidates: matches });
            }
        }
    };
    let path = dir.join(format!("{id}.jsonl"));
    parse_file(&id, &path)
}

fn run_ids(dir: &Path) -> Result<Vec<String>, JournalError> {
    let read_err = |source| JournalError::Read { path: dir.to_path_buf(), source };
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let name = entry.map_err(read_err)?.file_name();
        if let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) {
            // Hidden files are not journals (e.g. an editor's swap file).
            if !id.is_empty() && !id.starts_with('.') {
                ids.push(id.to_string());
            }
        }
    }
    Ok(ids)
}

fn empty_summary(id: String) -> RunSummary {
    RunSummary {
        id,
        workflow: None,
        started: None,
        node: None,
        pid: None,
        command: Vec::new(),
        vm: None,
        check: false,
        finished: None,
        status: RunStatus::Interrupted,
        in_progress: false,
        steps: 0,
        failed_steps: 0,
        denials: 0,
        torn: false,
        problem: None,
    }
}

/// The run in journal file `path` (named `<id>.jsonl`), read as [`read_run`]
/// reads one: for a reader that watches the directory itself.
pub fn read_run_file(id: &str, path: &Path) -> Result<RunRecord, JournalError> {
    parse_file(id, path)
}

fn parse_file(id: &str, path: &Path) -> Result<RunRecord, JournalError> {
    let bytes = std::fs::read(path).map_err(|source| JournalError::Read { path: path.to_path_buf(), source })?;
    let mut segments: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // A complete file ends with '\n', which leaves one empty segment at the end.
    if segments.last().is_some_and(|s| s.is_empty()) {
        segments.pop();
    }
    let mut events = Vec::with_capacity(segments.len());
    let mut torn_line = None;
    let last = segments.len();
    for (i, segment) in segments.into_iter().enumerate() {
        match serde_json::from_slice::<Event>(segment) {
            Ok(event) => events.push(event),
            Err(_) if i + 1 == last => {
                torn_line = Some(TornLine { line: i + 1, bytes: segment.len() });
            }
            Err(e) => {
                return Err(JournalError::Corrupt { path: path.to_path_buf(), line: i + 1, detail: e.to_string() });
            }
        }
    }
    let summary = summarize(id, &events, torn_line.is_some());
    Ok(RunRecord { summary, path: path.to_path_buf(), events, torn_line })
}

fn summarize(id: &str, events: &[Event], torn: bool) -> RunSummary {
    let mut s = empty_summary(id.to_string());
    s.torn = torn;
    let mut process = None;
    for event in events {
        match event {
            Event::RunStarted { workflow, at, host, pid, argv, .. } => {
                s.workflow = Some(workflow.clone());
                s.started = Some(*at);
                s.node = Some(host.clone());
                s.pid = Some(*pid);
                s.command.clone_from(argv);
                // `--check` runs `check(vm)`, which changes nothing; the
                // journal records the command line, not the function.
                s.check = argv.iter().any(|a| a == "provision") && argv.iter().any(|a| a == "--check");
                process = Some((host.clone(), *pid));
            }
            Event::StepStarted { vm, .. } => {
                s.steps += 1;
                if s.vm.is_none() {
                    s.vm.clone_from(vm);
                }
            }
            Event::Log { vm: Some(vm), .. } if s.vm.is_none() => s.vm = Some(vm.clone()),
            Event::StepFinished { error: Some(_), .. } => s.failed_steps += 1,
            Event::CapabilityCall { outcome: CallOutcome::Denied { .. }, .. } => s.denials += 1,
            Event::RunFinished { status, at, .. } => {
                s.status = *status;
                s.finished = Some(*at);
            }
            _ => {}
        }
    }
    if s.finished.is_none() {
        s.in_progress =
            process.is_some_and(|(host, pid)| matches!(process_liveness(&host, pid, None), Liveness::Alive));
    }
    s
}

#[cfg(test)]
mod order_tests {
    use super::*;

    fn run(id: &str, started: &str) -> RunSummary {
        RunSummary { started: Some(Timestamp::parse(started).expect("timestamp")), ..empty_summary(id.into()) }
    }

    #[test]
    fn runs_of_the_same_second_are_newest_first_by_their_start_not_their_random_suffix() {
        // Suffixes ordered against the starts: `ffff` began first.
        let mut runs = vec![
            run("20261206T060743Z-ffff", "2026-12-06T06:07:43.100Z"),
            run("20261206T060743Z-0000", "2026-12-06T06:07:43.900Z"),
            run("20261206T060742Z-aaaa", "2026-12-06T06:07:42.999Z"),
            RunSummary { problem: Some("unreadable".into()), ..empty_summary("20261206T060744Z-1234".into()) },
        ];
        newest_first(&mut runs);
        let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            ["20261206T060744Z-1234", "20261206T060743Z-0000", "20261206T060743Z-ffff", "20261206T060742Z-aaaa"]
        );
    }
}
