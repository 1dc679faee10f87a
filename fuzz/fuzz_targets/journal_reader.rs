//! A run journal's bytes (owner-only JSONL, one event a line), read as
//! `cradle runs list/show` read them: the lines, the torn last line, the run's
//! summary (`host/src/journal/parse.rs`).
//!
//! Invariants: only the last line may be torn, and every other line is an
//! event (else the whole journal is refused naming its line); the summary counts
//! what the events say (steps, failed steps, denials), is unfinished exactly
//! when no `run_finished` was read, and never claims the run is in progress (the
//! reader decides that from the process); the events written back one a line
//! (as the journal writes them) read back as the same events, none torn.
#![no_main]

use cradle_fuzz::journal::parse::{parse_lines, summarize};
use cradle_fuzz::journal::{CallOutcome, Event, RunStatus};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Lines as the reader counts them: a final '\n' ends the last line.
    let segments: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let lines = segments.len() - usize::from(segments.last().is_some_and(|s| s.is_empty()));
    let (events, torn) = match parse_lines(data) {
        Ok(read) => read,
        Err(bad) => {
            assert!(bad.line >= 1 && bad.line < lines, "bad line {} of {lines}", bad.line);
            return;
        }
    };
    match &torn {
        Some(t) => {
            assert_eq!(t.line, lines, "only the last line may be torn");
            assert_eq!(events.len(), lines - 1);
        }
        None => assert_eq!(events.len(), lines),
    }
    let s = summarize("20261206T080850Z-274a", &events, torn.is_some());
    assert_eq!(s.torn, torn.is_some());
    assert!(!s.in_progress, "the pure summary never knows the process");
    let count = |f: fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
    assert_eq!(s.steps, count(|e| matches!(e, Event::StepStarted { .. })));
    assert_eq!(s.failed_steps, count(|e| matches!(e, Event::StepFinished { error: Some(_), .. })));
    assert_eq!(s.denials, count(|e| matches!(e, Event::CapabilityCall { outcome: CallOutcome::Denied { .. }, .. })));
    let finished = count(|e| matches!(e, Event::RunFinished { .. })) > 0;
    assert_eq!(s.finished.is_some(), finished);
    if !finished {
        assert_eq!(s.status, RunStatus::Interrupted);
    }

    // Written back as the journal writes (one JSON object a line), read again.
    let mut written = Vec::new();
    for e in &events {
        written.extend(serde_json::to_vec(e).expect("an event serialises"));
        written.push(b'\n');
    }
    let (again, torn_again) = parse_lines(&written).expect("a written journal reads back");
    assert_eq!(torn_again, None);
    assert_eq!(again.len(), events.len());
    let mut rewritten = Vec::new();
    for e in &again {
        rewritten.extend(serde_json::to_vec(e).expect("an event serialises"));
        rewritten.push(b'\n');
    }
    assert_eq!(rewritten, written, "an event read back writes the same line");
});
