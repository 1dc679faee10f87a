//! A journal's bytes as a run's record: the JSONL lines, the torn last line,
//! the run's summary.
//!
//! Contract: pure and self-contained (std, serde, serde_json and the journal's
//! `event` types): no file, state directory or process is touched, so
//! `fuzz/` compiles this file on its own (target `journal_reader`). The
//! reader (`reader.rs`) reads the file and decides `in_progress`. Each line is
//! one [`Event`]; only the last line may be torn (a crash mid-write): it is
//! skipped and reported as a [`TornLine`]. A bad line elsewhere is a
//! [`BadLine`] naming its 1-based number.

use serde::Serialize;

use super::{CallOutcome, Event, RunStatus, Timestamp};

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
    /// The workflow function it called (`apply_vm` of workflow `maintain` is a
    /// maintenance change), from `run_started`; none in older journals.
    pub function: Option<String>,
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

/// A line, not the last, that is not an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// Its 1-based line number.
    pub line: usize,
    /// What the parser said.
    pub detail: String,
}

/// The events of a journal's `bytes`, in order, and its torn last line if any.
pub fn parse_lines(bytes: &[u8]) -> Result<(Vec<Event>, Option<TornLine>), BadLine> {
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
            Err(e) => return Err(BadLine { line: i + 1, detail: e.to_string() }),
        }
    }
    Ok((events, torn_line))
}

/// A summary with nothing known but the run id.
pub fn empty_summary(id: String) -> RunSummary {
    RunSummary {
        id,
        workflow: None,
        function: None,
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

/// The summary of a run's `events` (its journal's last line torn or not), as
/// far as the journal says: `in_progress` stays false, the reader decides it
/// from the recorded `node`/`pid` (whether that process is alive here).
pub fn summarize(id: &str, events: &[Event], torn: bool) -> RunSummary {
    let mut s = empty_summary(id.to_string());
    s.torn = torn;
    for event in events {
        match event {
            Event::RunStarted { workflow, function, at, host, pid, argv, .. } => {
                s.workflow = Some(workflow.clone());
                s.function.clone_from(function);
                s.started = Some(*at);
                s.node = Some(host.clone());
                s.pid = Some(*pid);
                s.command.clone_from(argv);
                // `--check` runs `check(vm)`, which changes nothing. From
                // the command line: journals written before the function
                // was recorded have only that.
                s.check = argv.iter().any(|a| a == "provision") && argv.iter().any(|a| a == "--check");
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
    s
}
