//! The status page's model of the run journals: one [`Card`] per run (what
//! the run list shows) and its [`Timeline`] (what an opened run draws), kept
//! in memory and brought up to date by [`Board::refresh`].
//!
//! Contract:
//! - a journal is read again only when its size, modification time or inode
//!   changed since the last refresh, or (with `recheck_running`) while its run
//!   is still running, so a process that died without `run_finished` turns
//!   `interrupted` and a running step's duration grows; every other journal
//!   costs one `stat` per [`Board::refresh`], and nothing at all per
//!   [`Board::refresh_paths`] (the paths the watcher saw change); either
//!   leaves a journal for later while less than [`BACKOFF`] times its last
//!   reading's duration has passed, so reading stays a bounded share of a
//!   core however large a journal grows;
//! - [`Board::refresh`] returns what changed (a card that differs, or a
//!   journal gone), so the live stream sends only that;
//! - a journal that cannot be read is a card with [`Card::problem`] set, never
//!   an error for the whole page (as `cradle runs list` shows it);
//! - every card stays in memory, but only the timelines of running runs and
//!   of the [`KEEP_TIMELINES`] finished runs read last: another is read from
//!   its journal when asked for ([`Board::run`]);
//! - cards and timelines are the journal's exact strings: escaping for the
//!   page is [`super::render`]'s job, in one place;
//! - the NetBox pipeline's runs (their workflow is a `[serve.sources]`
//!   workflow) get [`Card::stages`]: the pipeline drawn as its stages, each
//!   `done`, `current`, `failed`, `interrupted`, `skipped` or `pending`.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::journal::timeline::{FailingStep, RunInfo, RunResult, Step, StepOutcome, Timeline};
use crate::journal::{Timestamp, read_run_file};

/// The most runs one list answer holds.
pub const MAX_LIST: usize = 1000;
/// Timelines of finished runs kept in memory (the most recently read); the
/// others are read from their journal when a page opens them.
pub const KEEP_TIMELINES: usize = 256;
/// A journal named by the watcher is read again only once this many times
/// its last reading's duration has passed (else at the next full refresh):
/// a run of 1,000 VMs appends to a journal of megabytes many times a second,
/// and reading it whole each time would keep a core busy.
pub const BACKOFF: u32 = 10;

/// One run as the run list shows it: the run as its timeline has it
/// (flattened: `id`, `workflow`, `result`, ...) and what the list adds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Card {
    /// The run: ids, versions, environment, backend, times, result, error.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The VMs it worked on, in the order their first steps started.
    pub vms: Vec<String>,
    /// The steps running now (innermost), per VM.
    pub running: Vec<Current>,
    /// Where it failed.
    pub failing: Option<FailingStep>,
    /// Steps started.
    pub steps: usize,
    /// Steps that failed (including failures the workflow caught).
    pub failed_steps: usize,
    /// The NetBox pipeline's stages, for a pipeline run.
    pub stages: Option<Vec<Stage>>,
    /// Why the journal could not be read (the run then holds only its id).
    pub problem: Option<String>,
}

impl Card {
    /// How the run ended (or that it runs); `None` for an unreadable journal.
    pub fn result(&self) -> Option<RunResult> {
        self.problem.is_none().then_some(self.run.result)
    }

    /// What the run is: `WORKFLOW:FUNCTION` (`maintain:apply_vm`), the
    /// workflow alone for a journal written before the function was
    /// recorded, `None` without a workflow (an unreadable journal). The
    /// page's `runKind` (app.js) spells it the same way.
    pub fn kind(&self) -> Option<String> {
        let workflow = self.run.workflow.as_deref()?;
        Some(match self.run.function.as_deref() {
            Some(function) => format!("{workflow}:{function}"),
            None => workflow.to_string(),
        })
    }
}

/// A step running now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Current {
    /// Its VM.
    pub vm: Option<String>,
    /// The step names from the top-level step down to the running one.
    pub path: Vec<String>,
}

/// One stage of the NetBox pipeline, as one run went through it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stage {
    /// The stage's name.
    pub name: &'static str,
    /// `done`, `current`, `failed`, `interrupted`, `skipped` or `pending`.
    pub state: &'static str,
}

/// The NetBox pipeline's stages and the top-level steps of the built-in
/// `workflows/netbox.rhai` (and its libraries) each one holds. A step is
/// placed in the nearest stage at or after the stage of the step before it
/// that lists it (`dns`, `trust`, `checkpoint-clear` appear twice), and a step
/// no stage lists (an operator's own) in the stage of the step before it.
pub const PIPELINE: &[(&str, &[&str])] = &[
    ("validate", &["validate", "lock", "look", "decide", "ownership"]),
    ("create", &["vmid", "ownership", "dns", "snippets", "create", "image", "forget-host-key", "trust", "preflight"]),
    ("mac", &["mac", "netbox-mac"]),
    ("dhcp", &["dhcp"]),
    ("ha", &["ha"]),
    (
        "boot",
        &[
            "migrate",
            "start",
            "connect",
            "cloud-init",
            "network",
            "checkpoint-write",
            "drive-removal",
            "boot-id",
            "reboot",
            "verify-reboot",
            "cleanup",
            "checkpoint-clear",
            "trust",
            "cloud-init-settle",
        ],
    ),
    ("os-config", &["os-config", "checkpoint-clear"]),
    ("dns", &["dns"]),
    ("active", &["active"]),
];

/// What a refresh found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new or changed run.
    Run(Arc<Card>),
    /// A journal that is gone.
    Removed(String),
}

/// Which runs a list shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Runs with a VM whose name contains this (case-insensitive).
    pub vm: Option<String>,
    /// Runs with this result (`running`, `succeeded`, `failed`, `interrupted`).
    pub result: Option<String>,
    /// Runs in this environment.
    pub environment: Option<String>,
    /// Runs of this kind ([`Card::kind`]: `maintain:apply_vm`), or of any
    /// function of this workflow (`maintain`); a run without a workflow has
    /// no kind and is dropped.
    pub kind: Option<String>,
}

impl Filter {
    fn keeps(&self, card: &Card) -> bool {
        if let Some(vm) = self.vm.as_deref().map(str::to_lowercase).filter(|v| !v.is_empty())
            && !card.vms.iter().any(|n| n.to_lowercase().contains(&vm))
        {
            return false;
        }
        if let Some(r) = self.result.as_deref().filter(|r| !r.is_empty()) {
            let word = card.result().map_or_else(|| "unreadable".to_string(), |r| r.to_string());
            if word != r {
                return false;
            }
        }
        if let Some(env) = self.environment.as_deref().filter(|e| !e.is_empty())
            && card.run.environment.as_deref() != Some(env)
        {
            return false;
        }
        if let Some(want) = self.kind.as_deref().filter(|k| !k.is_empty()) {
            let Some(kind) = card.kind() else { return false };
            if kind != want && card.run.workflow.as_deref() != Some(want) {
                return false;
            }
        }
        true
    }
}

/// One page of the run list.
#[derive(Debug, Clone, Serialize)]
pub struct List {
    /// Runs in the journal directory.
    pub total: usize,
    /// Runs the filter keeps.
    pub matched: usize,
    /// The first of those (running first, then newest first).
    pub runs: Vec<Arc<Card>>,
    /// Every environment seen, for the filter.
    pub environments: Vec<String>,
    /// Every kind seen ([`Card::kind`]), for the filter.
    pub kinds: Vec<String>,
}

/// What identifies a journal file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    ino: u64,
}

struct Entry {
    stamp: Stamp,
    card: Arc<Card>,
    timeline: Option<Arc<Timeline>>,
    /// When it was last read, and how long that took.
    read_at: Instant,
    read_cost: Duration,
}

impl Entry {
    /// Read too recently to be read again (see [`BACKOFF`]).
    fn deferred(&self) -> bool {
        self.read_at.elapsed() < self.read_cost * BACKOFF
    }
}

/// The runs of one journal directory (module docs).
pub struct Board {
    dir: PathBuf,
    pipelines: BTreeSet<String>,
    entries: HashMap<String, Entry>,
    /// Timelines of finished runs kept in memory at most.
    keep_timelines: usize,
}

impl Board {
    /// A board over `dir` (`<state>/runs`); runs of the workflows in
    /// `pipelines` are drawn as the NetBox pipeline. Nothing is read yet.
    pub fn new(dir: PathBuf, pipelines: BTreeSet<String>) -> Board {
        Board { dir, pipelines, entries: HashMap::new(), keep_timelines: KEEP_TIMELINES }
    }

    /// This board, keeping at most `n` timelines of finished runs (tests).
    #[cfg(test)]
    pub fn keeping_timelines(mut self, n: usize) -> Board {
        self.keep_timelines = n;
        self
    }

    /// The journal directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Read what changed (module docs). A directory that cannot be listed
    /// changes nothing (the page shows what it had).
    pub fn refresh(&mut self, recheck_running: bool) -> Vec<Change> {
        let Ok(listing) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut seen = BTreeSet::new();
        let mut changes = Vec::new();
        for entry in listing.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else { continue };
            if id.is_empty() || id.starts_with('.') {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            let stamp = Stamp { len: meta.len(), modified: meta.modified().ok(), ino: meta.ino() };
            seen.insert(id.to_string());
            let stale = match self.entries.get(id) {
                None => true,
                Some(e) => {
                    (e.stamp != stamp || (recheck_running && e.card.result() == Some(RunResult::Running)))
                        && !e.deferred()
                }
            };
            if !stale {
                continue;
            }
            changes.extend(self.update(id, &entry.path(), stamp));
        }
        let gone: Vec<String> = self.entries.keys().filter(|id| !seen.contains(*id)).cloned().collect();
        for id in gone {
            self.entries.remove(&id);
            changes.push(Change::Removed(id));
        }
        changes
    }

    /// Read only the journals named by `paths` (what the watcher saw change,
    /// by file name in this directory): a name that is no journal is ignored,
    /// a journal that is gone is [`Change::Removed`]. Costs nothing per journal that did not change,
    /// however many there are.
    pub fn refresh_paths<'a>(&mut self, paths: impl IntoIterator<Item = &'a std::path::Path>) -> Vec<Change> {
        let mut changes = Vec::new();
        for path in paths {
            // Only this directory is watched; the name is what counts (the
            // watcher may spell the directory differently).
            let Some(name) = path.file_name() else { continue };
            let path = &self.dir.join(name);
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
                continue;
            };
            if id.is_empty() || id.starts_with('.') {
                continue;
            }
            let Ok(meta) = std::fs::metadata(path) else {
                if self.entries.remove(id).is_some() {
                    changes.push(Change::Removed(id.to_string()));
                }
                continue;
            };
            let stamp = Stamp { len: meta.len(), modified: meta.modified().ok(), ino: meta.ino() };
            if self.entries.get(id).is_some_and(|e| e.stamp == stamp || e.deferred()) {
                continue;
            }
            changes.extend(self.update(id, path, stamp));
        }
        changes
    }

    /// Read journal `id` at `path` (now `stamp`); the change, if its card
    /// differs.
    fn update(&mut self, id: &str, path: &std::path::Path, stamp: Stamp) -> Option<Change> {
        let read_at = Instant::now();
        let (card, timeline) = self.read(id, path);
        let read_cost = read_at.elapsed();
        let changed = self.entries.get(id).is_none_or(|e| *e.card != card);
        let card = Arc::new(card);
        let entry = Entry { stamp, card: card.clone(), timeline: timeline.map(Arc::new), read_at, read_cost };
        self.entries.insert(id.to_string(), entry);
        self.trim_timelines();
        changed.then_some(Change::Run(card))
    }

    /// Drop the timelines of the finished runs read longest ago beyond
    /// `keep_timelines` (a running run's always stays: it is what pages open).
    fn trim_timelines(&mut self) {
        let mut finished: Vec<(Instant, &String)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.timeline.is_some() && e.card.result() != Some(RunResult::Running))
            .map(|(id, e)| (e.read_at, id))
            .collect();
        if finished.len() <= self.keep_timelines {
            return;
        }
        finished.sort();
        let drop: Vec<String> =
            finished[..finished.len() - self.keep_timelines].iter().map(|(_, id)| (*id).clone()).collect();
        for id in drop {
            if let Some(e) = self.entries.get_mut(&id) {
                e.timeline = None;
            }
        }
    }

    fn read(&self, id: &str, path: &std::path::Path) -> (Card, Option<Timeline>) {
        match read_run_file(id, path) {
            Ok(record) => {
                let timeline = Timeline::from_record(&record, Timestamp::now());
                let pipeline = timeline.run.workflow.as_ref().is_some_and(|w| self.pipelines.contains(w));
                (card_of(&timeline, pipeline), Some(timeline))
            }
            Err(e) => (unreadable(id, e.to_string()), None),
        }
    }

    /// The runs `filter` keeps, running first, then newest first; at most
    /// `limit` (capped at [`MAX_LIST`]).
    pub fn list(&self, filter: &Filter, limit: usize) -> List {
        let mut kept: Vec<&Arc<Card>> = self.entries.values().map(|e| &e.card).filter(|c| filter.keeps(c)).collect();
        kept.sort_by(|a, b| {
            let running = |c: &Card| c.result() == Some(RunResult::Running);
            running(b)
                .cmp(&running(a))
                .then_with(|| b.run.started.cmp(&a.run.started))
                .then_with(|| b.run.id.cmp(&a.run.id))
        });
        let environments: BTreeSet<String> =
            self.entries.values().filter_map(|e| e.card.run.environment.clone()).collect();
        let kinds: BTreeSet<String> = self.entries.values().filter_map(|e| e.card.kind()).collect();
        List {
            total: self.entries.len(),
            matched: kept.len(),
            runs: kept.into_iter().take(limit.min(MAX_LIST)).cloned().collect(),
            environments: environments.into_iter().collect(),
            kinds: kinds.into_iter().collect(),
        }
    }

    /// Run `id`'s card and timeline (no timeline for an unreadable journal).
    /// A timeline no longer kept is read again from the journal.
    pub fn run(&mut self, id: &str) -> Option<(Arc<Card>, Option<Arc<Timeline>>)> {
        let entry = self.entries.get(id)?;
        if entry.timeline.is_none() && entry.card.problem.is_none() {
            let path = self.dir.join(format!("{id}.jsonl"));
            if let Ok(meta) = std::fs::metadata(&path) {
                let stamp = Stamp { len: meta.len(), modified: meta.modified().ok(), ino: meta.ino() };
                // A change found on the way reaches pages at the watcher's
                // next refresh, which finds the card already current.
                let _ = self.update(id, &path, stamp);
            }
        }
        self.entries.get(id).map(|e| (e.card.clone(), e.timeline.clone()))
    }
}

fn unreadable(id: &str, problem: String) -> Card {
    Card {
        run: RunInfo::unknown(id),
        vms: Vec::new(),
        running: Vec::new(),
        failing: None,
        steps: 0,
        failed_steps: 0,
        stages: None,
        problem: Some(problem),
    }
}

/// The card of `timeline`; `pipeline`: draw its stages.
pub fn card_of(timeline: &Timeline, pipeline: bool) -> Card {
    let run = &timeline.run;
    let mut running = Vec::new();
    let (mut steps, mut failed_steps) = (0, 0);
    for lane in &timeline.lanes {
        for (_, step) in lane.flatten() {
            steps += 1;
            if matches!(step.outcome, StepOutcome::Failed { .. }) {
                failed_steps += 1;
            }
        }
        for step in &lane.steps {
            if let Some(path) = running_path(step) {
                running.push(Current { vm: lane.vm.clone(), path });
            }
        }
    }
    // A pipeline run with a VM's steps; the `host` and `failed` runs of an
    // event have none to draw.
    let stages = timeline
        .lanes
        .iter()
        .find(|l| l.vm.is_some() && !l.steps.is_empty())
        .filter(|_| pipeline)
        .map(|lane| stages_of(&lane.steps, run.result));
    Card {
        run: run.clone(),
        vms: timeline.lanes.iter().filter_map(|l| l.vm.clone()).collect(),
        running,
        failing: timeline.failing.clone(),
        steps,
        failed_steps,
        stages,
        problem: None,
    }
}

/// The path down to the innermost running step under `step`, if it runs.
fn running_path(step: &Step) -> Option<Vec<String>> {
    if step.outcome != StepOutcome::Running {
        return None;
    }
    let mut path = vec![step.name.clone()];
    let mut at = step;
    while let Some(inner) = at.steps.iter().rev().find(|s| s.outcome == StepOutcome::Running) {
        path.push(inner.name.clone());
        at = inner;
    }
    Some(path)
}

fn contains_failing(step: &Step) -> bool {
    step.failing || step.steps.iter().any(contains_failing)
}

/// The pipeline's stages for one VM's top-level `steps` (see [`PIPELINE`]).
pub fn stages_of(steps: &[Step], result: RunResult) -> Vec<Stage> {
    let mut placed: Vec<Vec<&Step>> = vec![Vec::new(); PIPELINE.len()];
    let mut cursor = 0;
    for step in steps {
        if let Some(i) = (cursor..PIPELINE.len()).find(|i| PIPELINE[*i].1.contains(&step.name.as_str())) {
            cursor = i;
        }
        placed[cursor].push(step);
    }
    let last_reached = placed.iter().rposition(|s| !s.is_empty());
    placed
        .iter()
        .enumerate()
        .map(|(i, steps)| {
            let state = if steps.iter().any(|s| contains_failing(s)) {
                "failed"
            } else if steps.iter().any(|s| s.outcome == StepOutcome::Running) {
                "current"
            } else if steps.iter().any(|s| s.outcome == StepOutcome::Interrupted) {
                "interrupted"
            } else if !steps.is_empty() {
                "done"
            } else if result == RunResult::Succeeded || last_reached.is_some_and(|l| l > i) {
                "skipped"
            } else {
                "pending"
            };
            Stage { name: PIPELINE[i].0, state }
        })
        .collect()
}

#[cfg(test)]
#[path = "board_tests.rs"]
mod tests;
