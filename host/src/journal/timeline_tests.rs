//! The timeline of real journals: written by [`JournalWriter`] as a run writes
//! them, or by hand in the same format where the times must be exact (a
//! killed run, a torn line, nesting, hostile strings).

use std::fs;
use std::time::Duration;

use super::*;
use crate::journal::read_run;
use crate::journal::tests::{start, state};
use crate::state::StateDir;

fn now() -> Timestamp {
    Timestamp::now()
}

/// A journal written by hand: a run of another host (never "running"),
/// started at 08:00:00; `lines` follow `run_started`.
fn write_raw(state: &StateDir, id: &str, lines: &[String], final_newline: bool) -> Timeline {
    let started = format!(
        r#"{{"event":"run_started","run_id":"{id}","workflow":"provision","workflow_hash":"{h}","plugins":[{{"name":"direct","version":"0.3.1","hash":"h"}}],"host":"elsewhere.invalid","pid":1,"argv":[],"at":"2026-11-30T08:00:00Z"}}"#,
        h = "ef".repeat(32)
    );
    let mut text = std::iter::once(started).chain(lines.iter().cloned()).collect::<Vec<_>>().join("\n");
    if final_newline {
        text.push('\n');
    }
    fs::write(state.runs().unwrap().join(format!("{id}.jsonl")), text).unwrap();
    Timeline::from_record(&read_run(state, id).unwrap(), now())
}

fn started(vm: &str, step: &str, sec: u32) -> String {
    format!(r#"{{"event":"step_started","vm":"{vm}","step":"{step}","at":"2026-11-30T08:00:{sec:02}Z"}}"#)
}

fn finished(vm: &str, step: &str, sec: u32, ms: u64, error: Option<&str>) -> String {
    let error = error.map_or("null".to_string(), |e| serde_json::to_string(e).unwrap());
    format!(
        r#"{{"event":"step_finished","vm":"{vm}","step":"{step}","at":"2026-11-30T08:00:{sec:02}Z","duration_ms":{ms},"error":{error}}}"#
    )
}

fn run_finished(status: &str, sec: u32, error: Option<&str>) -> String {
    let error = error.map_or("null".to_string(), |e| serde_json::to_string(e).unwrap());
    format!(r#"{{"event":"run_finished","status":"{status}","at":"2026-11-30T08:00:{sec:02}Z","error":{error}}}"#)
}

fn names(lane: &Lane) -> Vec<(usize, String, StepOutcome)> {
    lane.flatten().into_iter().map(|(d, s)| (d, s.name.clone(), s.outcome.clone())).collect()
}

fn plain() -> GanttStyle {
    GanttStyle { width: 40, color: false }
}

/// The Gantt line of step `name` (the first whose label is it).
fn line_of<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
}

/// The Gantt's step lines (not the scale above them).
fn step_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.contains('|') && !l.trim_start().starts_with('|')).collect()
}

/// The bar between the `|`s of a Gantt line.
fn bar_of(line: &str) -> &str {
    let from = line.find('|').unwrap() + 1;
    let to = line.rfind('|').unwrap();
    &line[from..to]
}

#[test]
fn an_ok_run_has_its_steps_per_vm_in_order_with_versions_and_bars() {
    let (_t, s) = state();
    let w = start(&s);
    for vm in ["web-0", "web-1"] {
        for step in ["validate", "lock", "create"] {
            w.step_started(Some(vm), step).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            w.step_finished(Some(vm), step, Duration::from_millis(5), None).unwrap();
        }
    }
    w.run_finished(RunStatus::Succeeded, None).unwrap();
    let tl = Timeline::from_record(&read_run(&s, w.run_id()).unwrap(), now());

    assert_eq!(tl.run.id, w.run_id());
    assert_eq!(tl.run.workflow.as_deref(), Some("provision.rhai"));
    assert_eq!((tl.run.environment.as_deref(), tl.run.backend.as_deref()), (Some("lab"), Some("direct")));
    assert_eq!(tl.run.plugins[0].version, "0.3.1");
    assert_eq!(tl.run.result, RunResult::Succeeded);
    assert!(tl.run.ended.is_some() && tl.failing.is_none() && tl.torn_line.is_none());
    let vms: Vec<_> = tl.lanes.iter().map(|l| l.vm.clone().unwrap()).collect();
    assert_eq!(vms, ["web-0", "web-1"]);
    for lane in &tl.lanes {
        let steps: Vec<_> = lane.steps.iter().map(|s| (s.name.as_str(), s.outcome.clone())).collect();
        assert_eq!(steps, [("validate", StepOutcome::Ok), ("lock", StepOutcome::Ok), ("create", StepOutcome::Ok)]);
        assert!(lane.steps.windows(2).all(|p| p[0].start_ms <= p[1].start_ms));
        assert!(lane.steps.iter().all(|s| s.duration_ms == 5 && s.start_ms + 5 <= tl.run.duration_ms + 1));
    }

    let text = render_timeline_text(&tl, plain());
    assert!(text.contains("plugins   direct 0.3.1"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("result    succeeded after")), "{text}");
    assert!(text.contains("vm web-0") && text.contains("vm web-1"), "{text}");
    let steps: Vec<&str> = step_lines(&text);
    assert_eq!(steps.len(), 6, "{text}");
    for l in steps {
        assert_eq!(bar_of(l).chars().count(), 40, "{l}");
        assert!(bar_of(l).contains('█') && !l.contains('✗'), "{l}");
    }
    assert!(!text.contains('\x1b'), "no colour unless asked: {text}");

    let json: serde_json::Value = serde_json::from_str(&render_timeline_json(&tl).unwrap()).unwrap();
    assert_eq!(json["run"]["result"], "succeeded");
    assert_eq!(json["lanes"][1]["vm"], "web-1");
    assert_eq!(json["lanes"][0]["steps"][2]["name"], "create");
    assert_eq!(json["lanes"][0]["steps"][2]["outcome"], "ok");
}

#[test]
fn bars_are_placed_and_scaled_within_the_run() {
    let (_t, s) = state();
    let id = "20261130T080000Z-0b01";
    // 0..10 s: a at 0–2, b at 2–10 (the run ends at 10).
    let tl = write_raw(
        &s,
        id,
        &[
            started("vm-0", "a", 0),
            finished("vm-0", "a", 2, 2000, None),
            started("vm-0", "b", 2),
            finished("vm-0", "b", 10, 8000, None),
            run_finished("succeeded", 10, None),
        ],
        true,
    );
    assert_eq!(tl.run.duration_ms, 10_000);
    let b = &tl.lanes[0].steps[1];
    assert_eq!((b.start_ms, b.duration_ms), (2000, 8000));
    let text = render_gantt(&tl, plain());
    assert_eq!(bar_of(line_of(&text, "a")), format!("{}{}", "█".repeat(8), " ".repeat(32)));
    assert_eq!(bar_of(line_of(&text, "b")), format!("{}{}", " ".repeat(8), "█".repeat(32)));
    assert!(line_of(&text, "b").ends_with("8.0 s"), "{text}");
}

#[test]
fn a_failed_step_is_the_failing_step_with_its_error_even_when_nested() {
    let (_t, s) = state();
    let w = start(&s);
    w.step_started(Some("db-0"), "validate").unwrap();
    w.step_finished(Some("db-0"), "validate", Duration::from_millis(3), None).unwrap();
    w.step_started(Some("db-0"), "create").unwrap();
    w.step_started(Some("db-0"), "preflight").unwrap();
    w.step_finished(Some("db-0"), "preflight", Duration::from_millis(2), Some("template 9000 not found")).unwrap();
    w.step_finished(Some("db-0"), "create", Duration::from_millis(4), Some("template 9000 not found")).unwrap();
    w.run_finished(RunStatus::Failed, Some("step 'create' for VM 'db-0': template 9000 not found")).unwrap();
    let tl = Timeline::from_record(&read_run(&s, w.run_id()).unwrap(), now());

    assert_eq!(tl.run.result, RunResult::Failed);
    let failed = StepOutcome::Failed { error: "template 9000 not found".into() };
    assert_eq!(
        names(&tl.lanes[0]),
        [
            (0, "validate".into(), StepOutcome::Ok),
            (0, "create".into(), failed.clone()),
            (1, "preflight".into(), failed.clone())
        ]
    );
    let failing = tl.failing.clone().expect("a failing step");
    assert_eq!(failing.vm.as_deref(), Some("db-0"));
    assert_eq!(failing.path, ["create", "preflight"]);
    assert_eq!(failing.error, "template 9000 not found");
    assert_eq!(tl.failing_step().map(|s| s.name.as_str()), Some("preflight"));
    assert!(!tl.lanes[0].steps[1].failing, "only the innermost step is the failing one");

    let text = render_timeline_text(&tl, plain());
    let pre = line_of(&text, "preflight");
    assert!(pre.contains('✗') && pre.ends_with("failing step"), "{text}");
    assert!(line_of(&text, "create").contains('✗'), "{text}");
    assert!(!line_of(&text, "validate").contains('✗'), "{text}");
    // The error once, on the line after the failing step, indented.
    assert_eq!(text.matches("error: template 9000 not found").count(), 1, "{text}");
    let after = text.lines().skip_while(|l| !l.contains("preflight")).nth(1).unwrap();
    assert!(after.starts_with("      error: template 9000 not found"), "{text}");
    assert!(text.contains("result    failed after"), "{text}");

    let json: serde_json::Value = serde_json::from_str(&render_timeline_json(&tl).unwrap()).unwrap();
    let pre = &json["lanes"][0]["steps"][1]["steps"][0];
    assert_eq!((pre["outcome"].as_str(), pre["error"].as_str()), (Some("failed"), Some("template 9000 not found")));
    assert_eq!(pre["failing"], true);
    assert_eq!(json["failing"]["path"][1], "preflight");
}

#[test]
fn a_failure_the_workflow_caught_is_failed_but_not_the_failing_step() {
    let (_t, s) = state();
    let tl = write_raw(
        &s,
        "20261130T080000Z-0c01",
        &[
            started("vm-0", "probe", 1),
            finished("vm-0", "probe", 2, 1000, Some("not yet")),
            started("vm-0", "create", 2),
            finished("vm-0", "create", 3, 1000, None),
            run_finished("succeeded", 3, None),
        ],
        true,
    );
    assert!(tl.failing.is_none() && tl.failing_step().is_none());
    let text = render_gantt(&tl, plain());
    assert!(line_of(&text, "probe").ends_with("  failed"), "{text}");
    assert!(text.contains("error: not yet"), "{text}");
}

#[test]
fn a_run_that_failed_outside_any_step_gets_its_own_failing_row() {
    let (_t, s) = state();
    let tl = write_raw(
        &s,
        "20261130T080000Z-0c02",
        &[
            started("vm-0", "lock", 1),
            finished("vm-0", "lock", 2, 1000, None),
            run_finished("failed", 4, Some("workflows/provision.rhai:9:5: no backend named terraform")),
        ],
        true,
    );
    assert!(tl.failing.is_none(), "the model has no failing step: {tl:?}");
    let text = render_gantt(&tl, plain());
    let row = line_of(&text, "(run)");
    assert!(row.contains('✗') && row.ends_with("failing: outside any step"), "{text}");
    assert!(text.contains("error: workflows/provision.rhai:9:5: no backend named terraform"), "{text}");
    // The ✗ row runs from the last step's end (2 s) to the run's end (4 s): the back half.
    let bar = bar_of(row);
    assert!(bar.starts_with(' ') && bar.ends_with('█'), "{bar:?}");
    // A failed run with a failing step, and a run that succeeded, get no such row.
    let ok =
        write_raw(&s, "20261130T080000Z-0c03", &[started("vm-0", "lock", 1), run_finished("succeeded", 2, None)], true);
    assert!(!render_gantt(&ok, plain()).contains("(run)"));
}

#[test]
fn a_run_in_progress_has_running_steps_timed_to_now() {
    let (_t, s) = state();
    let w = start(&s);
    w.step_started(Some("vm-0"), "validate").unwrap();
    w.step_finished(Some("vm-0"), "validate", Duration::from_millis(1), None).unwrap();
    w.step_started(Some("vm-0"), "create").unwrap();
    let record = read_run(&s, w.run_id()).unwrap();
    assert!(record.summary.in_progress, "this test's own process is alive");
    let later = Timestamp::from(record.summary.started.unwrap().as_offset_date_time() + time::Duration::seconds(30));
    let tl = Timeline::from_record(&record, later);

    assert_eq!(tl.run.result, RunResult::Running);
    assert!(tl.run.ended.is_none() && tl.failing.is_none());
    assert_eq!(tl.run.duration_ms, 30_000);
    let create = &tl.lanes[0].steps[1];
    assert_eq!(create.outcome, StepOutcome::Running);
    assert!(create.start_ms + create.duration_ms == 30_000, "{create:?}");
    let text = render_timeline_text(&tl, plain());
    assert!(text.contains("result    running for 30.0 s so far"), "{text}");
    let line = line_of(&text, "create");
    assert!(line.ends_with("running") && bar_of(line).ends_with('▒'), "{text}");
    drop(w);
}

#[test]
fn a_killed_run_has_its_open_steps_interrupted_at_its_last_event() {
    let (_t, s) = state();
    // What a SIGKILL leaves: no run_finished, the process (of another host) gone.
    let tl = write_raw(
        &s,
        "20261130T080000Z-0d01",
        &[
            started("vm-0", "create", 1),
            started("vm-0", "wait-ssh", 2),
            r#"{"event":"log","vm":"vm-0","level":"info","message":"waiting","fields":[],"at":"2026-11-30T08:00:05Z"}"#
                .into(),
        ],
        true,
    );
    assert_eq!(tl.run.result, RunResult::Interrupted);
    assert!(tl.run.ended.is_none() && tl.failing.is_none());
    assert_eq!(tl.run.duration_ms, 5000, "to the last event");
    assert_eq!(
        names(&tl.lanes[0]),
        [(0, "create".into(), StepOutcome::Interrupted), (1, "wait-ssh".into(), StepOutcome::Interrupted)]
    );
    assert_eq!(tl.lanes[0].steps[0].duration_ms, 4000);
    let text = render_timeline_text(&tl, plain());
    assert!(text.contains("result    interrupted after 5.0 s: the journal has no run_finished"), "{text}");
    assert!(line_of(&text, "create").ends_with("interrupted"), "{text}");
    assert!(bar_of(line_of(&text, "wait-ssh")).contains('░'), "{text}");
}

#[test]
fn a_step_left_open_inside_a_finished_one_is_interrupted_there() {
    let (_t, s) = state();
    let tl = write_raw(
        &s,
        "20261130T080000Z-0d02",
        &[
            started("vm-0", "outer", 0),
            started("vm-0", "inner", 1),
            finished("vm-0", "outer", 4, 4000, None),
            run_finished("succeeded", 4, None),
        ],
        true,
    );
    let inner = &tl.lanes[0].steps[0].steps[0];
    assert_eq!((inner.outcome.clone(), inner.duration_ms), (StepOutcome::Interrupted, 3000));
}

#[test]
fn a_torn_last_line_is_skipped_and_reported() {
    let (_t, s) = state();
    let tl = write_raw(
        &s,
        "20261130T080000Z-0e01",
        &[started("vm-0", "create", 1), finished("vm-0", "create", 2, 1000, None), r#"{"event":"step_sta"#.into()],
        false,
    );
    assert_eq!(tl.torn_line, Some(TornLine { line: 4, bytes: 18 }));
    assert_eq!(names(&tl.lanes[0]), [(0, "create".into(), StepOutcome::Ok)]);
    assert_eq!(tl.run.result, RunResult::Interrupted);
    let text = render_gantt(&tl, plain());
    assert!(text.contains("line 4 (18 bytes) was torn"), "{text}");
}

#[test]
fn a_finish_without_its_start_and_a_run_without_steps_still_give_a_timeline() {
    let (_t, s) = state();
    let tl = write_raw(
        &s,
        "20261130T080000Z-0e02",
        &[finished("vm-0", "orphan", 5, 2000, None), run_finished("succeeded", 5, None)],
        true,
    );
    let orphan = &tl.lanes[0].steps[0];
    assert_eq!((orphan.start_ms, orphan.duration_ms), (3000, 2000));
    let empty = Timeline::from_events("x", &[], false, None, now());
    assert!(empty.lanes.is_empty());
    assert!(render_timeline_text(&empty, plain()).contains("no steps recorded"));
}

#[test]
fn hostile_names_and_errors_are_escaped_in_text_and_exact_in_json() {
    let (_t, s) = state();
    let hostile_vm = "vm\x1b[2J";
    let hostile_step = "st\rep\x1b]0;pwned\x07";
    let hostile_error = "boom\x1b[31m\nerror: forged\u{202e}";
    let w = start(&s);
    w.step_started(Some(hostile_vm), hostile_step).unwrap();
    w.step_finished(Some(hostile_vm), hostile_step, Duration::from_millis(1), Some(hostile_error)).unwrap();
    w.run_finished(RunStatus::Failed, Some(hostile_error)).unwrap();
    let tl = Timeline::from_record(&read_run(&s, w.run_id()).unwrap(), now());

    assert_eq!(tl.failing.as_ref().unwrap().error, hostile_error, "the model is exact");
    let text = render_timeline_text(&tl, plain());
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
    assert!(!text.contains('\u{202e}'), "{text:?}");
    assert!(text.contains("vm vm\\u{1b}[2J"), "{text}");
    assert!(text.contains("st\\rep\\u{1b}]0;pwned\\u{7}"), "{text}");
    assert!(text.contains("error: boom\\u{1b}[31m\\nerror: forged\\u{202e}"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("error: forged")), "{text}");
    let json: serde_json::Value = serde_json::from_str(&render_timeline_json(&tl).unwrap()).unwrap();
    assert_eq!(json["lanes"][0]["vm"], hostile_vm);
    assert_eq!(json["lanes"][0]["steps"][0]["name"], hostile_step);
}

#[test]
fn colour_marks_failed_bars_only_when_asked() {
    let (_t, s) = state();
    let tl = write_raw(
        &s,
        "20261130T080000Z-0f01",
        &[
            started("vm-0", "create", 0),
            finished("vm-0", "create", 1, 1000, Some("x")),
            run_finished("failed", 1, None),
        ],
        true,
    );
    let colored = render_gantt(&tl, GanttStyle { width: 20, color: true });
    assert!(colored.contains("\x1b[31m") && colored.contains("\x1b[0m"), "{colored:?}");
    let plain = render_gantt(&tl, GanttStyle { width: 20, color: false });
    assert!(!plain.contains('\x1b') && bar_of(line_of(&plain, "create")).chars().count() == 20, "{plain}");
}

#[test]
fn long_names_are_cut_to_the_name_column() {
    let (_t, s) = state();
    let long = "x".repeat(80);
    let tl = write_raw(
        &s,
        "20261130T080000Z-0f02",
        &[started("vm-0", &long, 0), finished("vm-0", &long, 1, 1000, None), run_finished("succeeded", 1, None)],
        true,
    );
    let text = render_gantt(&tl, plain());
    let line = step_lines(&text)[0];
    assert!(
        line.contains(&format!("{}…", "x".repeat(NAME_MAX - 1))) && !line.contains(&"x".repeat(NAME_MAX)),
        "{line}"
    );
}
