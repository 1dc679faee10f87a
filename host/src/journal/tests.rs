//! The journal on disk: run ids, owner-only files read back in order,
//! redaction in every field, whole lines from concurrent writers and after a
//! crash, torn vs. corrupt lines, the status of unfinished runs, and run-id
//! prefixes.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use super::*;

/// A state directory in a temporary directory (shared with the timeline tests).
pub(super) fn state() -> (tempfile::TempDir, StateDir) {
    let tmp = tempfile::tempdir().unwrap();
    let s = StateDir::resolve(Some(&tmp.path().join("state"))).unwrap();
    (tmp, s)
}

/// A provision run of plugin `direct` 0.3.1 in environment `lab`.
pub(super) fn start(state: &StateDir) -> JournalWriter {
    JournalWriter::start(
        state,
        RunStart {
            workflow: "provision.rhai".into(),
            function: Some("provision".into()),
            workflow_hash: "ab".repeat(32),
            plugins: vec![PluginVersion { name: "direct".into(), version: "0.3.1".into(), hash: "cd".repeat(32) }],
            argv: vec!["cradle".into(), "provision".into()],
            environment: Some("lab".into()),
            backend: Some("direct".into()),
        },
    )
    .unwrap()
}

/// Writes a journal file by hand (a run of another host, so never "running").
fn write_raw(state: &StateDir, id: &str, lines: &[&str], final_newline: bool) {
    let mut text = lines.join("\n");
    if final_newline {
        text.push('\n');
    }
    fs::write(state.runs().unwrap().join(format!("{id}.jsonl")), text).unwrap();
}

fn started_line(id: &str) -> String {
    format!(
        r#"{{"event":"run_started","run_id":"{id}","workflow":"w","workflow_hash":"h","plugins":[],"host":"elsewhere.invalid","pid":1,"argv":[],"at":"2026-11-30T08:00:00Z"}}"#
    )
}

const STEP: &str = r#"{"event":"step_started","vm":"test-0","step":"discover","at":"2026-11-30T08:00:01Z"}"#;

#[test]
fn run_ids_are_timestamp_plus_hex_suffix_and_unique() {
    let id = new_run_id();
    let (stamp, suffix) = id.split_once('-').unwrap();
    assert_eq!(stamp.len(), 16, "{id}");
    assert!(stamp.starts_with("20") && stamp.ends_with('Z') && &stamp[8..9] == "T");
    assert!(suffix.len() == 4 && suffix.chars().all(|c| c.is_ascii_hexdigit()));
    let (_t, s) = state();
    let ids: std::collections::HashSet<String> = (0..20).map(|_| start(&s).run_id().to_string()).collect();
    assert_eq!(ids.len(), 20);
}

#[test]
fn written_events_read_back_in_order_from_an_owner_only_file() {
    let (_t, s) = state();
    let w = start(&s);
    w.step_started(Some("test-0"), "discover").unwrap();
    w.capability_call(
        Some("test-0"),
        "direct",
        "proxmox",
        "clone",
        CallOutcome::Denied { scope: "proxmox: vmid 5000 is outside 100..199".into() },
        Duration::from_micros(40),
    )
    .unwrap();
    w.step_finished(Some("test-0"), "discover", Duration::from_millis(1500), Some("boom")).unwrap();
    w.run_finished(RunStatus::Failed, Some("boom")).unwrap();
    let mode = fs::metadata(w.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = fs::read_to_string(w.path()).unwrap();
    assert!(text.lines().nth(1).unwrap().starts_with(r#"{"event":"step_started""#));

    let run = read_run(&s, w.run_id()).unwrap();
    assert_eq!(run.events.len(), 5);
    assert!(matches!(&run.events[0], Event::RunStarted { pid, .. } if *pid == std::process::id()));
    let sum = &run.summary;
    assert_eq!((sum.steps, sum.failed_steps, sum.denials), (1, 1, 1));
    assert_eq!(sum.status, RunStatus::Failed);
    assert!(sum.finished.is_some() && run.torn_line.is_none());

    let text = render_run_text(&run);
    assert!(text.contains("!! DENIED proxmox.clone by direct: proxmox: vmid 5000"), "{text}");
    assert!(text.contains("FAIL  discover (1.5 s): boom"), "{text}");
    assert!(text.contains("status    failed: boom"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&render_run_json(&run).unwrap()).unwrap();
    assert_eq!(json["summary"]["status"], "failed");
}

#[test]
fn registered_secrets_never_reach_the_journal_in_any_field() {
    let canary = "CANARY-journal-8812-secret";
    crate::secrets::register(canary);
    let (_t, s) = state();
    let w = JournalWriter::start(
        &s,
        RunStart {
            workflow: "w".into(),
            function: Some(format!("fn-{canary}")),
            workflow_hash: "h".into(),
            plugins: vec![],
            argv: vec![format!("--token={canary}")],
            environment: None,
            backend: None,
        },
    )
    .unwrap();
    w.log(
        Some("test-0"),
        LogLevel::Warn,
        &format!("token is {canary}"),
        vec![("auth".into(), format!("PVEAPIToken={canary}")), (canary.into(), "k".into())],
    )
    .unwrap();
    let failed = CallOutcome::Failed { kind: "failed".into(), message: format!("401 for {canary}") };
    w.capability_call(None, "workflow", "http", "get", failed, Duration::ZERO).unwrap();
    w.step_finished(None, "s", Duration::ZERO, Some(canary)).unwrap();
    w.run_finished(RunStatus::Failed, Some(&format!("x{canary}x"))).unwrap();
    let text = fs::read_to_string(w.path()).unwrap();
    assert!(!text.contains(canary), "{text}");
    assert_eq!(text.matches("[redacted]").count(), 8, "{text}");
}

#[test]
fn threads_sharing_a_writer_produce_whole_lines() {
    let (_t, s) = state();
    let w = start(&s);
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let w = w.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let msg = format!("thread {t} line {i} {}", "x".repeat(500));
                    w.log(None, LogLevel::Info, &msg, vec![]).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let run = read_run(&s, w.run_id()).unwrap();
    assert_eq!(run.events.len(), 201);
    assert!(run.torn_line.is_none());
}

#[test]
fn torn_last_line_is_tolerated_and_reported() {
    let (_t, s) = state();
    let id = "20261130T080000Z-0001";
    write_raw(&s, id, &[&started_line(id), STEP, r#"{"event":"step_fin"#], false);
    let run = read_run(&s, id).unwrap();
    assert_eq!(run.events.len(), 2);
    assert_eq!(run.torn_line, Some(TornLine { line: 3, bytes: 18 }));
    assert!(run.summary.torn);
    let text = render_run_text(&run);
    assert!(text.contains("status    interrupted: the journal has no run_finished"), "{text}");
    assert!(render_run_text(&run).contains("line 3 (18 bytes) was torn"));
}

#[test]
fn corrupt_middle_line_is_an_error_naming_file_and_line() {
    let (_t, s) = state();
    let id = "20261130T080000Z-0002";
    write_raw(&s, id, &[&started_line(id), "{garbage", STEP], true);
    let err = read_run(&s, id).unwrap_err().to_string();
    assert!(err.contains(&format!("{id}.jsonl:2:")), "{err}");
    // The run list still shows the other runs and flags this one.
    let list = list_runs(&s).unwrap();
    assert_eq!(list[0].status_word(), "unreadable");
}

#[test]
fn unfinished_run_of_a_gone_process_is_interrupted_and_list_is_newest_first() {
    let (_t, s) = state();
    let old = "20261129T080000Z-aaaa";
    let new = "20261130T080000Z-bbbb";
    write_raw(&s, old, &[&started_line(old)], true);
    let finished = r#"{"event":"run_finished","status":"succeeded","at":"2026-11-30T08:01:00Z","error":null}"#;
    write_raw(&s, new, &[&started_line(new), STEP, finished], true);
    let list = list_runs(&s).unwrap();
    let ids: Vec<&str> = list.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [new, old]);
    assert_eq!(list[0].status_word(), "succeeded");
    assert_eq!(list[1].status_word(), "interrupted");
    assert!(list[1].finished.is_none());
    let table = render_list_text(&list);
    // Each run under the heading of its command (here, one each).
    assert!(table.lines().nth(1).unwrap().starts_with("$ (command not recorded) - 1 run: 1 succeeded"), "{table}");
    assert!(table.lines().nth(2).unwrap().starts_with(new), "{table}");
    // Which control node ran it (several may share one etcd).
    let node = list[0].node.clone().expect("the run's host is listed");
    assert!(table.lines().next().unwrap().contains("NODE") && table.lines().nth(2).unwrap().contains(&node), "{table}");
    assert_eq!(serde_json::to_value(&list[0]).unwrap()["node"], node.as_str());
    let json: serde_json::Value = serde_json::from_str(&render_list_json(&list).unwrap()).unwrap();
    assert_eq!(json[1]["status"], "interrupted");
}

/// A journal of process `pid` running `argv`, with one step on `vm`, ended `status`.
fn command_run(s: &StateDir, id: &str, pid: u32, argv: &[&str], vm: &str, status: &str) {
    let argv = serde_json::to_string(argv).unwrap();
    let started = format!(
        r#"{{"event":"run_started","run_id":"{id}","workflow":"provision","workflow_hash":"h","plugins":[],"host":"elsewhere.invalid","pid":{pid},"argv":{argv},"at":"2026-11-30T08:00:00Z"}}"#
    );
    let step = format!(r#"{{"event":"step_started","vm":"{vm}","step":"lock","at":"2026-11-30T08:00:01Z"}}"#);
    let end = format!(r#"{{"event":"run_finished","status":"{status}","at":"2026-11-30T08:00:02Z","error":null}}"#);
    write_raw(s, id, &[&started, &step, &end], true);
}

#[test]
fn the_run_list_groups_a_commands_runs_under_it_with_each_vm_and_marks_check_runs() {
    let (_t, s) = state();
    let check = ["/opt/bin/cradle", "provision", "-i", "inventory", "--check"];
    let provision = ["/opt/bin/cradle", "provision", "-i", "inventory"];
    command_run(&s, "20261130T080000Z-0001", 10, &provision, "vm-0", "succeeded");
    command_run(&s, "20261130T080000Z-0002", 10, &provision, "vm-1", "failed");
    command_run(&s, "20261130T080100Z-0003", 11, &check, "vm-0", "succeeded");
    command_run(&s, "20261130T080100Z-0004", 11, &check, "vm-1", "succeeded");
    // The same command line again, by another process: another command.
    command_run(&s, "20261130T080200Z-0005", 12, &provision, "vm-0", "succeeded");
    let list = list_runs(&s).unwrap();
    assert_eq!((list[0].vm.as_deref(), list[0].pid, list[0].check), (Some("vm-0"), Some(12), false));
    assert!(list[1].check && list[2].check && !list[3].check);
    let table = render_list_text(&list);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].contains(" VM ") && lines[0].ends_with("WORKFLOW"), "{table}");
    assert_eq!(lines[1], "$ cradle provision -i inventory - 1 run: 1 succeeded", "{table}");
    assert!(lines[2].starts_with("20261130T080200Z-0005"), "{table}");
    assert_eq!(
        lines[3], "$ cradle provision -i inventory --check (check: changed nothing) - 2 runs: 2 succeeded",
        "{table}"
    );
    for (line, id, vm) in [(4, "0004", "vm-1"), (5, "0003", "vm-0")] {
        assert!(lines[line].contains(id) && lines[line].contains(&format!(" {vm} ")), "{table}");
        assert!(lines[line].ends_with("provision --check"), "{table}");
    }
    assert_eq!(lines[6], "$ cradle provision -i inventory - 2 runs: 1 failed, 1 succeeded", "{table}");
    assert!(lines[7].contains("0002") && lines[7].contains(" vm-1 ") && lines[7].ends_with(" provision"), "{table}");
    assert!(lines[8].contains("0001") && lines[8].contains(" vm-0 "), "{table}");
    assert_eq!(lines.len(), 9, "{table}");
}

#[test]
fn unfinished_run_of_this_live_process_is_running() {
    let (_t, s) = state();
    let w = start(&s);
    let list = list_runs(&s).unwrap();
    assert_eq!(list[0].status_word(), "running");
    w.run_finished(RunStatus::Succeeded, None).unwrap();
    assert_eq!(list_runs(&s).unwrap()[0].status_word(), "succeeded");
}

#[test]
fn prefixes_select_one_run_or_explain_why_not() {
    let (_t, s) = state();
    for id in ["20261130T080000Z-aaaa", "20261130T080000Z-aabb", "20261130T090000Z-cccc"] {
        write_raw(&s, id, &[&started_line(id)], true);
    }
    assert_eq!(read_run(&s, "20261130T09").unwrap().summary.id, "20261130T090000Z-cccc");
    let err = read_run(&s, "20261130T080000Z-aa").unwrap_err().to_string();
    assert!(err.contains("-aaaa") && err.contains("-aabb"), "{err}");
    let err = read_run(&s, "1999").unwrap_err();
    assert!(matches!(err, JournalError::NotFound { .. }), "{err}");
    assert!(matches!(read_run(&s, ""), Err(JournalError::NotFound { .. })));
}

#[test]
fn a_journal_appended_after_a_crash_keeps_whole_lines() {
    // Simulates the writer's own guarantee: one write per line, newline last.
    let (_t, s) = state();
    let w = start(&s);
    let mut f = fs::OpenOptions::new().append(true).open(w.path()).unwrap();
    f.write_all(br#"{"event":"log","vm":nu"#).unwrap();
    let run = read_run(&s, w.run_id()).unwrap();
    assert_eq!(run.events.len(), 1);
    assert_eq!(run.torn_line.as_ref().map(|t| t.line), Some(2));
}

#[test]
fn a_maintenance_apply_is_listed_and_shown_with_its_workflow_and_function() {
    let (_t, s) = state();
    for function in ["plan_vm", "apply_vm"] {
        let w = JournalWriter::start(
            &s,
            RunStart {
                workflow: "maintain".into(),
                function: Some(function.into()),
                workflow_hash: "ab".repeat(32),
                plugins: vec![],
                argv: vec!["cradle".into(), "apply".into(), "plan.json".into()],
                environment: Some("lab".into()),
                backend: Some("direct".into()),
            },
        )
        .unwrap();
        w.step_started(Some("db-1"), "config").unwrap();
        w.step_finished(Some("db-1"), "config", Duration::ZERO, None).unwrap();
        w.run_finished(RunStatus::Succeeded, None).unwrap();
    }
    let list = list_runs(&s).unwrap();
    let table = render_list_text(&list);
    let rows: Vec<&str> = table.lines().filter(|l| l.contains(" db-1 ")).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows.iter().any(|r| r.ends_with(" maintain:apply_vm")), "{table}");
    assert!(rows.iter().any(|r| r.ends_with(" maintain:plan_vm")), "{table}");
    let json: serde_json::Value = serde_json::from_str(&render_list_json(&list).unwrap()).unwrap();
    let functions: Vec<&str> = json.as_array().unwrap().iter().filter_map(|r| r["function"].as_str()).collect();
    assert_eq!(functions.len(), 2, "{json}");
    let apply = list.iter().find(|r| r.function.as_deref() == Some("apply_vm")).unwrap();
    let record = read_run(&s, &apply.id).unwrap();
    let shown = render_run_text(&record);
    assert!(shown.contains("workflow  maintain (sha256 ") && shown.contains("\nfunction  apply_vm\n"), "{shown}");
    let chart = timeline::Timeline::from_record(&record, Timestamp::now());
    let text = timeline::render_timeline_text(&chart, timeline::GanttStyle::default());
    assert!(text.contains("\nfunction  apply_vm\n"), "`runs show --timeline`: {text}");
    let json: serde_json::Value = serde_json::from_str(&timeline::render_timeline_json(&chart).unwrap()).unwrap();
    assert_eq!(json["run"]["function"], "apply_vm", "{json}");
}
