//! Human and machine renderings of journals: a run table for `cradle runs list`, a
//! timeline for `cradle runs show <id>`, and JSON for `--output json`.
//!
//! Text is plain ASCII layout (no colour codes) so it reads the same in a pipe or a
//! file; denials and failures are marked `DENIED` / `FAIL` in capitals so they
//! stand out. The journal was redacted on write, so nothing here redacts again.
//! Every string from the journal passes through [`printable`] in the text
//! renderings: plugin, guest and remote text may hold terminal control
//! sequences. The JSON renderings are exact (serde escapes control characters).

use std::fmt::Write as _;

use crate::text::printable;

use super::{CallOutcome, Event, JournalError, RunRecord, RunSummary, Timestamp};

/// The run list as a table, newest first (the order of `runs`), grouped by
/// the command that started the runs: one `cradle provision` of 30 VMs is one
/// heading (its command line, `--check` marked, how its runs ended) over its
/// 30 rows, each naming its VM. A group is the runs of one process (node and
/// pid) with one command line; groups are ordered by their newest run.
pub fn render_list_text(runs: &[RunSummary]) -> String {
    if runs.is_empty() {
        return "no runs recorded yet\n".to_string();
    }
    let mut groups: Vec<Vec<&RunSummary>> = Vec::new();
    for r in runs {
        let same = |g: &&mut Vec<&RunSummary>| {
            let first = g[0];
            !r.command.is_empty() && first.command == r.command && first.pid == r.pid && first.node == r.node
        };
        match groups.iter_mut().find(same) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:<19} {:<16} {:<11} {:>5} {:>6} {:>6}  {:<16} WORKFLOW",
        "RUN ID", "STARTED", "NODE", "STATUS", "STEPS", "FAILED", "DENIED", "VM"
    );
    for group in &groups {
        let _ = writeln!(out, "{}", group_heading(group));
        for r in group {
            let started = r.started.map(short_time).unwrap_or_else(|| "-".into());
            let mut status = r.status_word();
            if r.torn {
                status.push('*');
            }
            let workflow = printable(&run_kind(r)).into_owned();
            let _ = writeln!(
                out,
                "{:<22} {:<19} {:<16} {:<11} {:>5} {:>6} {:>6}  {:<16} {}",
                printable(&r.id),
                started,
                printable(r.node.as_deref().unwrap_or("-")),
                status,
                r.steps,
                r.failed_steps,
                r.denials,
                printable(r.vm.as_deref().unwrap_or("-")),
                workflow
            );
            if let Some(problem) = &r.problem {
                let _ = writeln!(out, "  ! {}", printable(problem));
            }
        }
    }
    if runs.iter().any(|r| r.torn) {
        out.push_str("* the journal's last line was torn by a crash\n");
    }
    out
}

/// What a run list row says the run did: `WORKFLOW:FUNCTION` (`maintain:apply_vm`
/// is a maintenance change, `provision:check` a check), or for a journal
/// written before the function was recorded the workflow, `--check` marked.
fn run_kind(r: &RunSummary) -> String {
    let workflow = r.workflow.as_deref().unwrap_or("-");
    match &r.function {
        Some(f) => format!("{workflow}:{f}"),
        None if r.check => format!("{workflow} --check"),
        None => workflow.to_string(),
    }
}

/// `$ cradle provision -i inventory --check (check: changed nothing) - 30 runs: 29 succeeded, 1 failed`.
fn group_heading(group: &[&RunSummary]) -> String {
    let first = group[0];
    let command = match first.command.split_first() {
        // The program as it was typed may be a long path: its name says enough.
        Some((program, args)) => {
            let name = program.rsplit('/').next().unwrap_or(program);
            std::iter::once(name).chain(args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
        }
        None => "(command not recorded)".to_string(),
    };
    let mut heading = format!("$ {}", printable(&command));
    if first.check {
        heading.push_str(" (check: changed nothing)");
    }
    let mut counts: Vec<(String, usize)> = Vec::new();
    for r in group {
        let word = r.status_word();
        match counts.iter_mut().find(|(w, _)| *w == word) {
            Some((_, n)) => *n += 1,
            None => counts.push((word, 1)),
        }
    }
    let counts: Vec<String> = counts.iter().map(|(w, n)| format!("{n} {w}")).collect();
    let runs = if group.len() == 1 { "1 run".to_string() } else { format!("{} runs", group.len()) };
    let _ = write!(heading, " - {runs}: {}", counts.join(", "));
    heading
}

/// One run as a header and a timeline of its events.
pub fn render_run_text(run: &RunRecord) -> String {
    let s = &run.summary;
    let mut out = String::new();
    let _ = writeln!(out, "run       {}", printable(&s.id));
    let start = s.started;
    for event in &run.events {
        if let Event::RunStarted { workflow, function, workflow_hash, plugins, host, pid, argv, .. } = event {
            let _ = writeln!(out, "workflow  {} (sha256 {})", printable(workflow), printable(abbrev(workflow_hash)));
            if let Some(f) = function {
                let _ = writeln!(out, "function  {}", printable(f));
            }
            let _ = writeln!(out, "host      {}, pid {pid}", printable(host));
            let _ = writeln!(out, "command   {}", printable(&argv.join(" ")));
            for p in plugins {
                let _ = writeln!(
                    out,
                    "plugin    {} {} (sha256 {})",
                    printable(&p.name),
                    printable(&p.version),
                    printable(abbrev(&p.hash))
                );
            }
        }
    }
    if let Some(t) = start {
        let _ = writeln!(out, "started   {t}");
    }
    match (s.finished, start) {
        (Some(end), Some(begin)) => {
            let secs = end.millis_since(begin) as f64 / 1000.0;
            let _ = writeln!(out, "finished  {end} ({secs:.1} s)");
        }
        (Some(end), None) => {
            let _ = writeln!(out, "finished  {end}");
        }
        (None, _) => {}
    }
    let run_error = run.events.iter().rev().find_map(|e| match e {
        Event::RunFinished { error, .. } => Some(error.clone()),
        _ => None,
    });
    match run_error {
        Some(Some(e)) => {
            let _ = writeln!(out, "status    {}: {}", s.status_word(), printable(&e));
        }
        Some(None) => {
            let _ = writeln!(out, "status    {}", s.status_word());
        }
        None if s.in_progress => {
            let _ = writeln!(out, "status    running (its process is still alive)");
        }
        None => {
            let _ = writeln!(
                out,
                "status    interrupted: the journal has no run_finished, so the run crashed \
                 or was killed; locks it held stay until `cradle unlock`"
            );
        }
    }
    out.push('\n');
    let _ = writeln!(out, "{:<10} {:<16} EVENT", "TIME", "VM");
    for event in &run.events {
        if let Some(line) = timeline_line(event, start) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out.push('\n');
    let _ = writeln!(out, "summary   {} steps, {} failed, {} denied calls", s.steps, s.failed_steps, s.denials);
    if let Some(torn) = &run.torn_line {
        let _ = writeln!(out, "note      {}", torn_note(torn));
    }
    out
}

/// What a listing says of a journal's torn last line (`run show`, the timeline).
pub(crate) fn torn_note(torn: &super::TornLine) -> String {
    format!("line {} ({} bytes) was torn by a crash mid-write and is not shown", torn.line, torn.bytes)
}

fn timeline_line(event: &Event, start: Option<Timestamp>) -> Option<String> {
    let (vm, at, text) = match event {
        Event::RunStarted { .. } => return None,
        Event::StepStarted { vm, step, at } => (vm, at, format!("start {step}")),
        Event::StepFinished { vm, step, at, duration_ms, error } => {
            let took = millis(*duration_ms);
            let text = match error {
                None => format!("ok    {step} ({took})"),
                Some(e) => format!("FAIL  {step} ({took}): {e}"),
            };
            (vm, at, text)
        }
        Event::CapabilityCall { vm, caller, capability, function, outcome, duration_us, at } => {
            let call = format!("{capability}.{function} by {caller}");
            let took = micros(*duration_us);
            let text = match outcome {
                CallOutcome::Ok => format!("  call {call}: ok ({took})"),
                CallOutcome::Denied { scope } => format!("!! DENIED {call}: {scope}"),
                CallOutcome::Failed { kind, message } => {
                    format!("  call {call}: {kind}: {message} ({took})")
                }
            };
            (vm, at, text)
        }
        Event::Log { vm, level, message, fields, at } => {
            let mut text = format!("  [{level}] {message}");
            for (k, v) in fields {
                let _ = write!(text, " {k}={v}");
            }
            (vm, at, text)
        }
        Event::RunFinished { status, at, error } => {
            let text = match error {
                Some(e) => format!("run {status}: {e}"),
                None => format!("run {status}"),
            };
            (&None, at, text)
        }
    };
    let offset = match start {
        Some(s) => format!("+{:.3}s", at.millis_since(s) as f64 / 1000.0),
        None => short_time(*at),
    };
    // `text` is built from journal strings only (plus fixed layout), so the
    // whole line is escaped at once.
    Some(format!("{:<10} {:<16} {}", offset, printable(vm.as_deref().unwrap_or("-")), printable(&text)))
}

/// The run list as pretty JSON (an array of summaries).
pub fn render_list_json(runs: &[RunSummary]) -> Result<String, JournalError> {
    Ok(serde_json::to_string_pretty(runs)?)
}

/// One run as pretty JSON (summary, path, events, torn line).
pub fn render_run_json(run: &RunRecord) -> Result<String, JournalError> {
    Ok(serde_json::to_string_pretty(run)?)
}

/// `2026-11-30 08:15:00` (UTC).
fn short_time(t: Timestamp) -> String {
    let d = t.as_offset_date_time();
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        d.year(),
        u8::from(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

fn abbrev(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn millis(ms: u64) -> String {
    if ms >= 1000 { format!("{:.1} s", ms as f64 / 1000.0) } else { format!("{ms} ms") }
}

fn micros(us: u64) -> String {
    if us >= 1000 { millis(us / 1000) } else { format!("{us} us") }
}
