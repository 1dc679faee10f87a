//! Reading journals back: the run list and one run's record.
//!
//! A journal without `run_finished` belongs to a run that crashed or is still
//! running: its status is `interrupted`, and `in_progress` says whether the
//! recorded process is still alive on this host. Only the last line may be torn
//! (a crash mid-write); it is skipped and reported. A bad line elsewhere is
//! [`JournalError::Corrupt`] naming `file:line`. The lines and the summary are
//! read by `parse.rs` (pure, fuzzed); this file adds the state directory, the
//! files and whether an unfinished run's process is alive.

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use super::parse::{RunSummary, TornLine};
use super::parse::{empty_summary, parse_lines, summarize};
use super::{Event, JournalError};
use crate::state::StateDir;
use crate::state::process::{Liveness, process_liveness};

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

/// The run in journal file `path` (named `<id>.jsonl`), read as [`read_run`]
/// reads one: for a reader that watches the directory itself.
pub fn read_run_file(id: &str, path: &Path) -> Result<RunRecord, JournalError> {
    parse_file(id, path)
}

fn parse_file(id: &str, path: &Path) -> Result<RunRecord, JournalError> {
    let bytes = std::fs::read(path).map_err(|source| JournalError::Read { path: path.to_path_buf(), source })?;
    let (events, torn_line) = parse_lines(&bytes).map_err(|bad| JournalError::Corrupt {
        path: path.to_path_buf(),
        line: bad.line,
        detail: bad.detail,
    })?;
    let mut summary = summarize(id, &events, torn_line.is_some());
    if summary.finished.is_none() {
        summary.in_progress = summary
            .node
            .as_deref()
            .zip(summary.pid)
            .is_some_and(|(host, pid)| matches!(process_liveness(host, pid, None), Liveness::Alive));
    }
    Ok(RunRecord { summary, path: path.to_path_buf(), events, torn_line })
}

#[cfg(test)]
mod order_tests {
    use super::super::Timestamp;
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
