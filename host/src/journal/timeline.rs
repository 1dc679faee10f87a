//! One run's timeline: the typed model `cradle runs show --timeline` draws as a
//! text Gantt chart, and the model any other view of a run (a status page,
//! metrics) is to be built from, so that every view tells the same story.
//!
//! Contract:
//! - [`Timeline::from_record`] (or [`Timeline::from_events`]) turns one run's
//!   journal events into the run ([`RunInfo`]: id, workflow, plugin versions,
//!   node, start, end, result) and, per VM ([`Lane`], in the order each VM's
//!   first step started; steps without a VM in a lane whose `vm` is `None`),
//!   its steps in start order ([`Step`]: name, start offset from the run's
//!   start, duration, [`StepOutcome`], nested steps).
//! - Nesting is what the journal implies: a run executes on one thread, so a
//!   step that starts while another is open runs inside it and becomes its
//!   child (whatever VM it names). A `step_finished` closes the innermost open
//!   step with the same VM and name.
//! - Outcomes: `ok`; `failed` with the step's error; `running` (the run has no
//!   `run_finished` and its process is alive); `interrupted` (the step never
//!   finished and the run ended without it: a killed or crashed process, or a
//!   step still open when `run_finished` was written). A running step's
//!   duration runs to `now` (the caller's clock); an interrupted step's to the
//!   end of the run, which for a run without `run_finished` is its last event,
//!   the last moment the journal proves it was alive.
//! - The failing step ([`Timeline::failing`], and [`Step::failing`] on it) is
//!   set only for a failed run: the innermost failed step of the last failed
//!   top-level step. A failure the workflow caught shows as a `failed` step
//!   but is not the failing step unless no later step failed; a run that failed
//!   outside any step has none.
//! - Nothing here fails: a journal is read by [`super::read_run`], which
//!   tolerates a torn last line (kept in [`Timeline::torn_line`]) and rejects
//!   a corrupt line elsewhere. Odd but parseable journals still give a
//!   timeline: a `step_finished` without its start becomes a step that began
//!   `duration_ms` before it; a journal without `run_started` is timed from its
//!   first event; clocks that go backwards give zero offsets, never a panic.
//! - The environment and backend come from `run_started`; journals written
//!   before it recorded them give `None` for [`RunInfo::environment`] and
//!   [`RunInfo::backend`].
//! - Strings are exact (the journal was redacted when written). The text
//!   rendering ([`render_timeline_text`], [`render_gantt`]) passes every one
//!   through [`printable`]; ANSI colour only when the caller asks for it
//!   ([`GanttStyle::color`]: a terminal without `NO_COLOR`). The JSON
//!   rendering ([`render_timeline_json`]) is exact.

use std::fmt::Write as _;

use serde::Serialize;

use crate::text::printable;

use super::{Event, JournalError, PluginVersion, RunRecord, RunStatus, Timestamp, TornLine};

/// How a run ended, or that it has not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunResult {
    /// `run_finished` says every step succeeded.
    Succeeded,
    /// `run_finished` says it failed.
    Failed,
    /// No `run_finished` yet and its process is alive.
    Running,
    /// Stopped by a signal (`run_finished` says so), or no `run_finished` and
    /// its process is gone (killed or crashed).
    Interrupted,
}

impl std::fmt::Display for RunResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RunResult::Succeeded => "succeeded",
            RunResult::Failed => "failed",
            RunResult::Running => "running",
            RunResult::Interrupted => "interrupted",
        })
    }
}

/// The run as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunInfo {
    /// The run id.
    pub id: String,
    /// The workflow, from `run_started`.
    pub workflow: Option<String>,
    /// The workflow function the run called (`apply_vm` of `maintain` is a
    /// maintenance change), from `run_started`; `None` in older journals.
    pub function: Option<String>,
    /// SHA-256 of the workflow source, from `run_started`.
    pub workflow_hash: Option<String>,
    /// The environment (`None` in journals written before it was recorded).
    pub environment: Option<String>,
    /// The backend plugin (`None` without one, or in older journals).
    pub backend: Option<String>,
    /// The plugins loaded for the run, with their versions.
    pub plugins: Vec<PluginVersion>,
    /// The control node (host name) that ran it.
    pub node: Option<String>,
    /// When it started (else the first event's time).
    pub started: Option<Timestamp>,
    /// When `run_finished` was written; `None` while running or after a crash.
    pub ended: Option<Timestamp>,
    /// The span the step offsets are within: to `ended`, to `now` while
    /// running, or to the last event of an interrupted run (and at least to
    /// the end of every finished step).
    pub duration_ms: u64,
    /// How it ended.
    pub result: RunResult,
    /// The run-level error from `run_finished`.
    pub error: Option<String>,
}

impl RunInfo {
    /// Run `id` before anything is known of it: no workflow, no times,
    /// `interrupted` (what a journal that says nothing else amounts to).
    pub fn unknown(id: &str) -> RunInfo {
        RunInfo {
            id: id.to_string(),
            workflow: None,
            function: None,
            workflow_hash: None,
            environment: None,
            backend: None,
            plugins: Vec::new(),
            node: None,
            started: None,
            ended: None,
            duration_ms: 0,
            result: RunResult::Interrupted,
            error: None,
        }
    }
}

/// How a step ended, or that it has not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum StepOutcome {
    /// It succeeded.
    Ok,
    /// It failed with `error`.
    Failed {
        /// The step's error (its innermost message).
        error: String,
    },
    /// The run is still going and the step has not finished.
    Running,
    /// The run ended (or its process died) before the step finished.
    Interrupted,
}

/// One step of a VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The step's name.
    pub name: String,
    /// Milliseconds from the run's start to the step's start.
    pub start_ms: u64,
    /// How long it took (so far, for a running step).
    pub duration_ms: u64,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: StepOutcome,
    /// This is the step the run failed at ([`Timeline::failing`]).
    pub failing: bool,
    /// Steps run inside this one, in start order.
    pub steps: Vec<Step>,
}

/// One VM's steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lane {
    /// The VM; `None` for steps that name none.
    pub vm: Option<String>,
    /// Its top-level steps, in start order.
    pub steps: Vec<Step>,
}

impl Lane {
    /// Every step of the lane depth-first in start order, with its depth
    /// (0 for a top-level step).
    pub fn flatten(&self) -> Vec<(usize, &Step)> {
        fn walk<'a>(steps: &'a [Step], depth: usize, out: &mut Vec<(usize, &'a Step)>) {
            for s in steps {
                out.push((depth, s));
                walk(&s.steps, depth + 1, out);
            }
        }
        let mut out = Vec::new();
        walk(&self.steps, 0, &mut out);
        out
    }
}

/// Where the run failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailingStep {
    /// The lane's VM.
    pub vm: Option<String>,
    /// The step names from the top-level step down to the failing one.
    pub path: Vec<String>,
    /// The failing step's error.
    pub error: String,
}

/// One run's timeline (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// The run.
    pub run: RunInfo,
    /// One lane per VM, in the order their first steps started.
    pub lanes: Vec<Lane>,
    /// The step the run failed at, for a failed run.
    pub failing: Option<FailingStep>,
    /// The journal's torn last line, if a crash tore it.
    pub torn_line: Option<TornLine>,
}

/// A step open while the journal is replayed.
struct Open {
    vm: Option<String>,
    name: String,
    node: usize,
}

/// How a replayed step ended.
enum End {
    /// Its own `step_finished`.
    Finished { duration_ms: u64, error: Option<String> },
    /// Closed at `at` by the end of an enclosing step, without its own.
    Cut { at: Timestamp },
}

/// A step as replayed, in an arena indexed by start order.
struct Node {
    vm: Option<String>,
    name: String,
    start: Timestamp,
    end: Option<End>,
    children: Vec<usize>,
}

impl Node {
    fn failed(&self) -> bool {
        matches!(self.end, Some(End::Finished { error: Some(_), .. }))
    }
}

impl Timeline {
    /// The timeline of a run read by [`super::read_run`]; `now` times steps
    /// still running.
    pub fn from_record(record: &RunRecord, now: Timestamp) -> Timeline {
        Timeline::from_events(
            &record.summary.id,
            &record.events,
            record.summary.in_progress,
            record.torn_line.clone(),
            now,
        )
    }

    /// The timeline of run `id` from its events in journal order. `alive`:
    /// its process is still running (only consulted when there is no
    /// `run_finished`); `now` times steps still running.
    pub fn from_events(
        id: &str,
        events: &[Event],
        alive: bool,
        torn_line: Option<TornLine>,
        now: Timestamp,
    ) -> Timeline {
        let mut run = RunInfo::unknown(id);
        let mut nodes: Vec<Node> = Vec::new();
        let mut roots: Vec<usize> = Vec::new();
        let mut open: Vec<Open> = Vec::new();
        let mut finished_status = None;
        let mut first_at = None;
        let mut last_at: Option<Timestamp> = None;
        let mut last_failed_root = None;

        for event in events {
            let at = event_time(event);
            first_at.get_or_insert(at);
            last_at = Some(last_at.map_or(at, |l| l.max(at)));
            match event {
                Event::RunStarted {
                    workflow,
                    function,
                    workflow_hash,
                    plugins,
                    host,
                    environment,
                    backend,
                    at,
                    ..
                } => {
                    run.function.clone_from(function);
                    run.environment.clone_from(environment);
                    run.backend.clone_from(backend);
                    run.workflow = Some(workflow.clone());
                    run.workflow_hash = Some(workflow_hash.clone());
                    run.plugins = plugins.clone();
                    run.node = Some(host.clone());
                    run.started = Some(*at);
                }
                Event::StepStarted { vm, step, at } => {
                    let node = push_node(&mut nodes, &mut roots, &open, vm, step, *at);
                    open.push(Open { vm: vm.clone(), name: step.clone(), node });
                }
                Event::StepFinished { vm, step, at, duration_ms, error } => {
                    let node = match open.iter().rposition(|o| o.vm == *vm && o.name == *step) {
                        Some(i) => {
                            // Steps opened inside it and never closed ended with it.
                            for inner in open.drain(i + 1..) {
                                nodes[inner.node].end = Some(End::Cut { at: *at });
                            }
                            open.pop().map_or(i, |o| o.node)
                        }
                        // Finished without a recorded start: it began `duration_ms` before.
                        None => push_node(&mut nodes, &mut roots, &open, vm, step, back(*at, *duration_ms)),
                    };
                    nodes[node].end = Some(End::Finished { duration_ms: *duration_ms, error: error.clone() });
                    if error.is_some() && open.is_empty() {
                        last_failed_root = Some(node);
                    }
                }
                Event::RunFinished { status, at, error } => {
                    finished_status = Some(*status);
                    run.ended = Some(*at);
                    run.error.clone_from(error);
                }
                Event::CapabilityCall { .. } | Event::Log { .. } => {}
            }
        }

        run.result = match finished_status {
            Some(RunStatus::Succeeded) => RunResult::Succeeded,
            Some(RunStatus::Failed) => RunResult::Failed,
            Some(RunStatus::Interrupted) => RunResult::Interrupted,
            None if alive => RunResult::Running,
            None => RunResult::Interrupted,
        };
        let origin = run.started.or(first_at).unwrap_or(now);
        run.started = Some(origin);
        let end = match (run.ended, run.result) {
            (Some(end), _) => end,
            (None, RunResult::Running) => now.max(last_at.unwrap_or(origin)),
            (None, _) => last_at.unwrap_or(origin),
        };
        // Step durations are measured on a monotonic clock, timestamps are cut
        // to the millisecond: the span covers both.
        let steps_end = nodes
            .iter()
            .filter_map(|n| match n.end {
                Some(End::Finished { duration_ms, .. }) => {
                    Some(n.start.millis_since(origin).saturating_add(duration_ms))
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        run.duration_ms = end.millis_since(origin).max(steps_end);

        // The failing chain: the last failed top-level step, then its last
        // failed child, and so on down.
        let mut chain = Vec::new();
        if run.result == RunResult::Failed
            && let Some(root) = last_failed_root
        {
            chain.push(root);
            while let Some(&child) =
                chain.last().and_then(|&n: &usize| nodes[n].children.iter().rev().find(|&&c| nodes[c].failed()))
            {
                chain.push(child);
            }
        }
        let leaf = chain.last().copied();
        let failing = leaf.map(|leaf| FailingStep {
            vm: nodes[chain[0]].vm.clone(),
            path: chain.iter().map(|&n| nodes[n].name.clone()).collect(),
            error: match &nodes[leaf].end {
                Some(End::Finished { error: Some(e), .. }) => e.clone(),
                _ => String::new(),
            },
        });

        let ctx = Build { nodes: &nodes, origin, end, running: run.result == RunResult::Running, leaf };
        let mut lanes: Vec<Lane> = Vec::new();
        for &root in &roots {
            let step = ctx.step(root);
            let vm = &nodes[root].vm;
            match lanes.iter_mut().find(|l| l.vm == *vm) {
                Some(lane) => lane.steps.push(step),
                None => lanes.push(Lane { vm: vm.clone(), steps: vec![step] }),
            }
        }
        Timeline { run, lanes, failing, torn_line }
    }

    /// The failing step itself, if the run failed at one.
    pub fn failing_step(&self) -> Option<&Step> {
        self.failing.as_ref()?;
        self.lanes.iter().flat_map(|l| l.flatten()).map(|(_, s)| s).find(|s| s.failing)
    }
}

fn push_node(
    nodes: &mut Vec<Node>,
    roots: &mut Vec<usize>,
    open: &[Open],
    vm: &Option<String>,
    step: &str,
    start: Timestamp,
) -> usize {
    let node = nodes.len();
    nodes.push(Node { vm: vm.clone(), name: step.to_string(), start, end: None, children: Vec::new() });
    match open.last() {
        Some(parent) => nodes[parent.node].children.push(node),
        None => roots.push(node),
    }
    node
}

fn event_time(event: &Event) -> Timestamp {
    match event {
        Event::RunStarted { at, .. }
        | Event::StepStarted { at, .. }
        | Event::StepFinished { at, .. }
        | Event::CapabilityCall { at, .. }
        | Event::Log { at, .. }
        | Event::RunFinished { at, .. } => *at,
    }
}

/// `at` minus `ms` milliseconds (`at` itself if that is out of range).
fn back(at: Timestamp, ms: u64) -> Timestamp {
    let d = time::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX));
    at.as_offset_date_time().checked_sub(d).map_or(at, Timestamp::from)
}

/// What turning replayed nodes into [`Step`]s needs.
struct Build<'a> {
    nodes: &'a [Node],
    origin: Timestamp,
    end: Timestamp,
    running: bool,
    leaf: Option<usize>,
}

impl Build<'_> {
    fn step(&self, n: usize) -> Step {
        let node = &self.nodes[n];
        let (duration_ms, outcome) = match &node.end {
            Some(End::Finished { duration_ms, error: None }) => (*duration_ms, StepOutcome::Ok),
            Some(End::Finished { duration_ms, error: Some(e) }) => {
                (*duration_ms, StepOutcome::Failed { error: e.clone() })
            }
            Some(End::Cut { at }) => (at.millis_since(node.start), StepOutcome::Interrupted),
            None if self.running => (self.end.millis_since(node.start), StepOutcome::Running),
            None => (self.end.millis_since(node.start), StepOutcome::Interrupted),
        };
        Step {
            name: node.name.clone(),
            start_ms: node.start.millis_since(self.origin),
            duration_ms,
            outcome,
            failing: self.leaf == Some(n),
            steps: node.children.iter().map(|&c| self.step(c)).collect(),
        }
    }
}

/// How [`render_gantt`] draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GanttStyle {
    /// Columns of the bar (the run's whole span).
    pub width: usize,
    /// ANSI colour (a terminal, and `NO_COLOR` unset).
    pub color: bool,
}

impl Default for GanttStyle {
    fn default() -> Self {
        GanttStyle { width: 40, color: false }
    }
}

/// The longest step-name column; longer names are cut with `…`.
const NAME_MAX: usize = 32;

/// The timeline as pretty JSON.
pub fn render_timeline_json(timeline: &Timeline) -> Result<String, JournalError> {
    Ok(serde_json::to_string_pretty(timeline)?)
}

/// A short header (run, workflow, plugins, node, start, result) and the Gantt chart.
pub fn render_timeline_text(timeline: &Timeline, style: GanttStyle) -> String {
    let run = &timeline.run;
    let mut out = String::new();
    let _ = writeln!(out, "run       {}", printable(&run.id));
    if let Some(w) = &run.workflow {
        match &run.workflow_hash {
            Some(h) => {
                let _ = writeln!(out, "workflow  {} (sha256 {})", printable(w), printable(h.get(..12).unwrap_or(h)));
            }
            None => {
                let _ = writeln!(out, "workflow  {}", printable(w));
            }
        }
    }
    for (label, value) in
        [("function", &run.function), ("env", &run.environment), ("backend", &run.backend), ("node", &run.node)]
    {
        if let Some(v) = value {
            let _ = writeln!(out, "{label:<9} {}", printable(v));
        }
    }
    if !run.plugins.is_empty() {
        let list: Vec<String> = run.plugins.iter().map(|p| format!("{} {}", p.name, p.version)).collect();
        let _ = writeln!(out, "plugins   {}", printable(&list.join(", ")));
    }
    if let Some(t) = run.started {
        let _ = writeln!(out, "started   {t}");
    }
    let took = duration(run.duration_ms);
    let result = match (run.result, &run.error) {
        (RunResult::Running, _) => format!("running for {took} so far"),
        (RunResult::Interrupted, _) if run.ended.is_none() => {
            format!("interrupted after {took}: the journal has no run_finished, so the run crashed or was killed")
        }
        (r, Some(e)) => format!("{r} after {took}: {}", printable(e)),
        (r, None) => format!("{r} after {took}"),
    };
    let _ = writeln!(out, "result    {result}");
    out.push('\n');
    out.push_str(&render_gantt(timeline, style));
    out
}

/// The Gantt chart: per VM a heading, then one line per step (nested steps
/// indented): name, a bar placed and scaled within the run's span, duration
/// and, unless ok, the outcome. A failed step is marked `✗` and, unless a
/// step inside it failed with the same error, its error follows indented;
/// the run's failing step is marked `✗ failing step`. A failed run without a
/// failing step (it failed outside any step) ends with a `(run)` row marked
/// `✗` and the run's error.
pub fn render_gantt(timeline: &Timeline, style: GanttStyle) -> String {
    let width = style.width.max(1);
    let total = timeline.run.duration_ms.max(1);
    let mut out = String::new();
    if timeline.lanes.is_empty() {
        out.push_str("no steps recorded\n");
    }
    let name_w = timeline
        .lanes
        .iter()
        .flat_map(|l| l.flatten())
        .map(|(d, s)| 2 * d + printable(&s.name).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(4, NAME_MAX);
    if !timeline.lanes.is_empty() {
        let end = duration(timeline.run.duration_ms);
        let _ = writeln!(out, "{:pad$}|0{end:>w$}|", "", pad = name_w + 5, w = width.saturating_sub(1));
    }
    for lane in &timeline.lanes {
        match lane.vm.as_deref() {
            Some(vm) => {
                let _ = writeln!(out, "vm {}", printable(vm));
            }
            None => out.push_str("(no vm)\n"),
        }
        for (depth, step) in lane.flatten() {
            let label = fit(&format!("{}{}", "  ".repeat(depth), printable(&step.name)), name_w);
            let failed = matches!(step.outcome, StepOutcome::Failed { .. });
            let mark = if failed { '✗' } else { ' ' };
            let (fill, color) = match step.outcome {
                StepOutcome::Ok => ('█', ""),
                StepOutcome::Failed { .. } => ('█', "\x1b[31m"),
                StepOutcome::Running => ('▒', "\x1b[33m"),
                StepOutcome::Interrupted => ('░', "\x1b[33m"),
            };
            let bar = bar(step.start_ms, step.duration_ms, total, width, fill);
            let bar = if style.color && !color.is_empty() { format!("{color}{bar}\x1b[0m") } else { bar };
            let note = match &step.outcome {
                StepOutcome::Ok => String::new(),
                StepOutcome::Failed { .. } if step.failing => "  failing step".into(),
                StepOutcome::Failed { .. } => "  failed".into(),
                StepOutcome::Running => "  running".into(),
                StepOutcome::Interrupted => "  interrupted".into(),
            };
            let _ = writeln!(out, "  {label:<name_w$} {mark} |{bar}| {:>7}{note}", duration(step.duration_ms));
            if let StepOutcome::Failed { error } = &step.outcome {
                let repeated =
                    step.steps.iter().any(|c| matches!(&c.outcome, StepOutcome::Failed { error: e } if e == error));
                if !repeated {
                    let _ = writeln!(out, "  {}  error: {}", "  ".repeat(depth), printable(error));
                }
            }
        }
    }
    // A run that failed outside any step (in script code between steps, or
    // after a failure the workflow caught) has no failing step: its ✗ is a
    // row of its own, from its last step's end to the run's end, so the
    // chart never shows a failed run without one.
    if timeline.run.result == RunResult::Failed && timeline.failing.is_none() {
        let last_end = timeline
            .lanes
            .iter()
            .flat_map(|l| l.flatten())
            .map(|(_, s)| s.start_ms.saturating_add(s.duration_ms))
            .max()
            .unwrap_or(0);
        let rest = timeline.run.duration_ms.saturating_sub(last_end);
        let bar = bar(last_end, rest, total, width, '█');
        let bar = if style.color { format!("\x1b[31m{bar}\x1b[0m") } else { bar };
        let label = fit(OUTSIDE, name_w.max(OUTSIDE.chars().count()));
        let _ = writeln!(out, "  {label:<name_w$} ✗ |{bar}| {:>7}  failing: outside any step", duration(rest));
        let error = timeline.run.error.as_deref().unwrap_or("(the run recorded no error)");
        let _ = writeln!(out, "  error: {}", printable(error));
    }
    if let Some(torn) = &timeline.torn_line {
        let _ = writeln!(out, "note: {}", super::render::torn_note(torn));
    }
    out
}

/// The label of the row of a run that failed outside any step.
const OUTSIDE: &str = "(run)";

/// `width` columns with `fill` from the step's start to its end, at least one.
fn bar(start: u64, dur: u64, total: u64, width: usize, fill: char) -> String {
    let w = width as u128;
    let t = u128::from(total);
    let from = (u128::from(start.min(total)) * w / t).min(w - 1);
    let to = (u128::from(start.saturating_add(dur).min(total)) * w).div_ceil(t).clamp(from + 1, w);
    (0..w).map(|i| if i >= from && i < to { fill } else { ' ' }).collect()
}

/// `s` padded or cut (with `…`) to `w` characters.
fn fit(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(w.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn duration(ms: u64) -> String {
    if ms >= 60_000 {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    } else if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
