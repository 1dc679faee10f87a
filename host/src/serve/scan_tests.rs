//! Tests of the incremental journal scan behind `/metrics` (`scan.rs`).

use std::io::Write;

use super::*;
use crate::journal::{PluginVersion, Timestamp};

fn line(e: &Event) -> String {
    format!("{}\n", serde_json::to_string(e).expect("json"))
}

fn started(pid: u32, argv: &[&str]) -> Event {
    Event::RunStarted {
        run_id: "r".into(),
        workflow: "provision".into(),
        function: Some("provision".into()),
        workflow_hash: "h".into(),
        plugins: vec![PluginVersion { name: "direct".into(), version: "1".into(), hash: "x".into() }],
        host: crate::state::host_name(),
        pid,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        environment: None,
        backend: None,
        at: Timestamp::now(),
    }
}

fn call(capability: &str, caller: &str, outcome: CallOutcome) -> Event {
    Event::CapabilityCall {
        vm: None,
        caller: caller.into(),
        capability: capability.into(),
        function: "f".into(),
        outcome,
        duration_us: 5,
        at: Timestamp::now(),
    }
}

fn step(name: &str, ms: u64, error: Option<&str>) -> Event {
    Event::StepFinished {
        vm: Some("web-1".into()),
        step: name.into(),
        at: Timestamp::now(),
        duration_ms: ms,
        error: error.map(str::to_string),
    }
}

fn finished(status: RunStatus) -> Event {
    Event::RunFinished { status, at: Timestamp::now(), error: None }
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open");
    f.write_all(text.as_bytes()).expect("write");
}

fn labels() -> RunLabels {
    RunLabels { default_environment: Some("lab".into()), serve_environment: Some("netbox-env".into()) }
}

/// Runs by (result, backend, environment).
fn runs(t: &Totals) -> Vec<(String, String, String, u64)> {
    let mut by: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for (k, n) in &t.runs {
        *by.entry((k.result.clone(), k.backend.clone(), k.environment.clone())).or_default() += n;
    }
    by.into_iter().map(|((r, b, e), n)| (r, b, e, n)).collect()
}

/// Runs by (workflow, function, result).
fn kinds(t: &Totals) -> Vec<(String, String, String, u64)> {
    let mut by: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for (k, n) in &t.runs {
        *by.entry((k.workflow.clone(), k.function.clone(), k.result.clone())).or_default() += n;
    }
    by.into_iter().map(|((w, f, r), n)| (w, f, r, n)).collect()
}

/// A run of `workflow`'s `function` (none: a journal from before it was
/// recorded) that ended with `status`, in journal `name`.
fn run_of(dir: &Path, name: &str, workflow: &str, function: Option<&str>, status: RunStatus) {
    let mut start = started(std::process::id(), &["cradle", "apply", "plan.json"]);
    if let Event::RunStarted { workflow: w, function: f, .. } = &mut start {
        *w = workflow.into();
        *f = function.map(str::to_string);
    }
    let path = dir.join(name);
    append(&path, &line(&start));
    append(&path, &line(&step("config", 3, None)));
    append(&path, &line(&finished(status)));
}

fn calls(t: &Totals, cap: &str, caller: &str, result: &str) -> u64 {
    t.calls.get(&(cap.into(), caller.into(), result.into())).copied().unwrap_or(0)
}

/// A process of this host that is gone.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("true");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

#[test]
fn appended_lines_are_read_once_and_a_torn_line_when_it_is_complete() {
    let dir = tempfile::tempdir().expect("tmp");
    let a = dir.path().join("20260101T000000Z-aaaa.jsonl");
    let me = std::process::id();
    append(&a, &line(&started(me, &["cradle", "provision", "--env", "prod"])));
    append(&a, &line(&call("proxmox", "direct", CallOutcome::Ok)));
    append(&a, &line(&call("proxmox", "direct", CallOutcome::Denied { scope: "vmid".into() })));
    append(&a, &line(&step("create", 1500, None)));
    let last = line(&finished(RunStatus::Succeeded));
    let (head, tail) = last.split_at(10);
    append(&a, head);
    let mut j = Journals::new(dir.path(), labels());
    let t = j.scan().clone();
    assert!(t.runs.is_empty(), "the torn last line is not read yet: {t:?}");
    assert_eq!((calls(&t, "proxmox", "direct", "ok"), calls(&t, "proxmox", "direct", "denied")), (1, 1));
    assert_eq!(t.step_durations["create"].count(), 1);
    assert_eq!(t.unreadable_lines, 0);
    assert_eq!(j.scan(), &t, "nothing new, nothing counted twice");
    append(&a, tail);
    let t = j.scan().clone();
    assert_eq!(runs(&t), [("succeeded".into(), "direct".into(), "prod".into(), 1)]);
    assert_eq!(calls(&t, "proxmox", "direct", "ok"), 1, "earlier lines are not read again");
    assert_eq!(t.steps[&("create".into(), "ok".into())], 1);
    assert_eq!(j.scan(), &t);
}

#[test]
fn a_journal_that_names_its_environment_and_backend_is_labelled_with_them_not_by_inference() {
    let dir = tempfile::tempdir().expect("tmp");
    let a = dir.path().join("20260101T000000Z-cccc.jsonl");
    let mut start = started(std::process::id(), &["cradle", "serve"]);
    if let Event::RunStarted { environment, backend, .. } = &mut start {
        *environment = Some("staging".into());
        *backend = Some("terraform".into());
    }
    append(&a, &line(&start));
    append(&a, &line(&call("proxmox", "direct", CallOutcome::Ok)));
    append(&a, &line(&finished(RunStatus::Failed)));
    let mut j = Journals::new(dir.path(), labels());
    assert_eq!(runs(j.scan()), [("failed".into(), "terraform".into(), "staging".into(), 1)]);
}

#[test]
fn new_removed_and_replaced_journals_and_unreadable_lines() {
    let dir = tempfile::tempdir().expect("tmp");
    let me = std::process::id();
    let a = dir.path().join("a.jsonl");
    append(&a, &line(&started(me, &["cradle", "provision"])));
    append(&a, &line(&finished(RunStatus::Succeeded)));
    let mut j = Journals::new(dir.path(), labels());
    assert_eq!(j.scan().journals, 1);
    let b = dir.path().join("b.jsonl");
    append(&b, &line(&started(me, &["cradle", "serve", "--event=3", "--fn=staged"])));
    append(&b, "{not an event}\n");
    append(&b, &line(&step("make", 20, Some("the clone failed"))));
    append(&b, &line(&finished(RunStatus::Failed)));
    append(&dir.path().join(".swap.jsonl"), "junk\n");
    append(&dir.path().join("notes.txt"), "junk\n");
    let t = j.scan().clone();
    assert_eq!(
        runs(&t),
        [
            ("failed".into(), "direct".into(), "netbox-env".into(), 1),
            ("succeeded".into(), "direct".into(), "lab".into(), 1)
        ]
    );
    assert_eq!((t.unreadable_lines, t.journals), (1, 2));
    assert_eq!(t.steps[&("make".into(), "failed".into())], 1);
    // Removed: its counts stay (a counter never goes down).
    std::fs::remove_file(&a).expect("rm");
    let t2 = j.scan().clone();
    assert_eq!((t2.runs.clone(), t2.journals), (t.runs.clone(), 1));
    // Replaced by another file under the same name: a new journal.
    let tmp = dir.path().join("b.tmp");
    append(&tmp, &line(&started(me, &["cradle", "provision"])));
    append(&tmp, &line(&finished(RunStatus::Succeeded)));
    std::fs::rename(&tmp, &b).expect("rename");
    let t3 = j.scan().clone();
    assert_eq!(
        runs(&t3),
        [
            ("failed".into(), "direct".into(), "netbox-env".into(), 1),
            ("succeeded".into(), "direct".into(), "lab".into(), 2)
        ],
        "{t3:?}"
    );
}

#[test]
fn an_unfinished_run_counts_as_interrupted_once_its_process_is_gone() {
    let dir = tempfile::tempdir().expect("tmp");
    append(&dir.path().join("alive.jsonl"), &line(&started(std::process::id(), &["cradle", "provision"])));
    let dead = dir.path().join("dead.jsonl");
    append(&dead, &line(&started(dead_pid(), &["cradle", "provision"])));
    append(&dead, "{\"event\":\"step_fin");
    let mut j = Journals::new(dir.path(), labels());
    assert!(j.scan().runs.is_empty(), "the first read learns the process");
    let t = j.scan().clone();
    assert_eq!(runs(&t), [("interrupted".into(), "direct".into(), "lab".into(), 1)]);
    assert_eq!(j.scan(), &t, "once");
}

#[test]
fn a_trap_counts_once_per_run_by_plugin_and_step_names_are_bounded() {
    let dir = tempfile::tempdir().expect("tmp");
    let a = dir.path().join("a.jsonl");
    append(&a, &line(&started(std::process::id(), &["cradle", "provision"])));
    let trap = "backend 'direct': create: plugin `direct`, function `create`: wasm trap: unreachable";
    append(&a, &line(&step("create", 1, Some(trap))));
    append(&a, &line(&step("build", 2, Some(&format!("in create: {trap}")))));
    append(&a, &line(&step("x", 2, Some("plugin `direct` has no function `nope` (it exports: a)"))));
    append(
        &a,
        &line(&Event::RunFinished { status: RunStatus::Failed, at: Timestamp::now(), error: Some(trap.into()) }),
    );
    for i in 0..MAX_STEP_NAMES + 5 {
        append(&a, &line(&step(&format!("vm-{i}"), 1, None)));
    }
    let mut j = Journals::new(dir.path(), labels());
    let t = j.scan();
    assert_eq!(t.traps.iter().collect::<Vec<_>>(), [(&"direct".to_string(), &1)]);
    assert_eq!(t.step_durations.len(), MAX_STEP_NAMES + 1, "the rest are `other`");
    assert!(t.step_durations["other"].count() >= 5);
    assert_eq!(trap_in("plugin `p`, function `f`: boom"), Some(("p".into(), "f".into())));
    assert_eq!(trap_in("plugin `p`: cannot be linked"), None);
}

#[test]
fn a_run_is_counted_under_its_workflow_and_function_so_maintenance_applies_stand_apart() {
    let dir = tempfile::tempdir().expect("tmp");
    run_of(dir.path(), "a.jsonl", "provision", Some("provision"), RunStatus::Succeeded);
    run_of(dir.path(), "b.jsonl", "maintain", Some("plan_vm"), RunStatus::Succeeded);
    run_of(dir.path(), "c.jsonl", "maintain", Some("apply_vm"), RunStatus::Succeeded);
    run_of(dir.path(), "d.jsonl", "maintain", Some("apply_vm"), RunStatus::Failed);
    // Written before the function was recorded.
    run_of(dir.path(), "e.jsonl", "provision", None, RunStatus::Succeeded);
    let mut j = Journals::new(dir.path(), labels());
    let t = j.scan().clone();
    let kind = |w: &str, f: &str, r: &str, n: u64| (w.to_string(), f.to_string(), r.to_string(), n);
    assert_eq!(
        kinds(&t),
        [
            kind("maintain", "apply_vm", "failed", 1),
            kind("maintain", "apply_vm", "succeeded", 1),
            kind("maintain", "plan_vm", "succeeded", 1),
            kind("provision", "provision", "succeeded", 1),
            kind("provision", "unknown", "succeeded", 1),
        ]
    );
    let text = super::super::metrics::render(
        &t,
        &super::super::metrics::Deliveries::new([]),
        super::super::metrics::Queue { depth: 0, limit: 1 },
    );
    assert!(
        text.contains(
            "cradle_runs_total{result=\"succeeded\",backend=\"direct\",environment=\"lab\",workflow=\"maintain\",function=\"apply_vm\"} 1\n"
        ),
        "{text}"
    );
}

#[test]
fn workflow_and_function_pairs_beyond_the_bound_are_counted_as_other() {
    let dir = tempfile::tempdir().expect("tmp");
    for i in 0..MAX_RUN_KINDS + 3 {
        run_of(dir.path(), &format!("{i:03}.jsonl"), &format!("typo-{i}"), Some("main"), RunStatus::Failed);
    }
    let mut j = Journals::new(dir.path(), labels());
    let t = j.scan().clone();
    assert_eq!(t.run_kinds.len(), MAX_RUN_KINDS);
    let other: u64 =
        t.runs.iter().filter(|(k, _)| k.workflow == "other" && k.function == "other").map(|(_, n)| n).sum();
    assert_eq!(other, 3, "{t:?}");
    assert_eq!(t.runs.values().sum::<u64>(), MAX_RUN_KINDS as u64 + 3, "every run is counted once");
    // A pair already counted keeps its own name after the bound is reached.
    let first = t.run_kinds.iter().next().expect("a kind").0.clone();
    run_of(dir.path(), "zzz.jsonl", &first, Some("main"), RunStatus::Succeeded);
    let t = j.scan();
    assert!(t.runs.keys().any(|k| k.workflow == first && k.result == "succeeded"), "{t:?}");
}
