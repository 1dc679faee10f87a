//! The status page's model over journals written by hand in the journal's
//! format: what a refresh reads and reports, filters and order, unreadable
//! journals, and the NetBox pipeline's stages.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use super::*;

/// A journal `id` of a run started at 08:00:`sec` by `pid` on `host` in
/// `env`, with `lines` after `run_started`.
fn write(dir: &Path, id: &str, workflow: &str, env: &str, host: &str, pid: u32, lines: &[String]) {
    let started = format!(
        r#"{{"event":"run_started","run_id":"{id}","workflow":"{workflow}","workflow_hash":"{h}","plugins":[{{"name":"direct","version":"0.3.1","hash":"h"}}],"host":"{host}","pid":{pid},"argv":[],"environment":"{env}","backend":"direct","at":"2026-11-30T08:00:00Z"}}"#,
        h = "ef".repeat(32)
    );
    let text: Vec<String> = std::iter::once(started).chain(lines.iter().cloned()).collect();
    fs::write(dir.join(format!("{id}.jsonl")), text.join("\n") + "\n").expect("journal");
}

fn append(dir: &Path, id: &str, line: &str) {
    use std::io::Write as _;
    let mut f = fs::OpenOptions::new().append(true).open(dir.join(format!("{id}.jsonl"))).expect("open");
    writeln!(f, "{line}").expect("append");
}

fn started(vm: &str, step: &str, sec: u32) -> String {
    format!(r#"{{"event":"step_started","vm":"{vm}","step":"{step}","at":"2026-11-30T08:00:{sec:02}Z"}}"#)
}

fn finished(vm: &str, step: &str, sec: u32, error: Option<&str>) -> String {
    let error = error.map_or("null".to_string(), |e| serde_json::to_string(e).expect("json"));
    format!(
        r#"{{"event":"step_finished","vm":"{vm}","step":"{step}","at":"2026-11-30T08:00:{sec:02}Z","duration_ms":1000,"error":{error}}}"#
    )
}

fn done(status: &str, sec: u32, error: Option<&str>) -> String {
    let error = error.map_or("null".to_string(), |e| serde_json::to_string(e).expect("json"));
    format!(r#"{{"event":"run_finished","status":"{status}","at":"2026-11-30T08:00:{sec:02}Z","error":{error}}}"#)
}

fn steps(vm: &str, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .enumerate()
        .flat_map(|(i, n)| [started(vm, n, i as u32), finished(vm, n, i as u32 + 1, None)])
        .collect()
}

/// Past the backoff after a reading (ten times the reading of a small
/// journal: well under 50 ms), so the next refresh reads what changed.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(50));
}

fn board(dir: &Path) -> Board {
    Board::new(dir.to_path_buf(), BTreeSet::from(["netbox".to_string()]))
}

fn changed_ids(changes: &[Change]) -> Vec<String> {
    let mut ids: Vec<String> = changes
        .iter()
        .map(|c| match c {
            Change::Run(card) => card.run.id.clone(),
            Change::Removed(id) => format!("-{id}"),
        })
        .collect();
    ids.sort();
    ids
}

const ME: &str = "elsewhere.invalid";

#[test]
fn a_refresh_reports_new_changed_and_removed_journals_and_nothing_else() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    let mut lines = steps("web-1", &["validate", "create"]);
    lines.push(done("succeeded", 9, None));
    write(dir, "20261130T080000Z-a", "provision", "prod", ME, 1, &lines);
    write(dir, "20261130T080001Z-b", "provision", "prod", ME, 1, &steps("db-1", &["validate"]));
    fs::write(dir.join(".swap.jsonl"), "x").expect("hidden");
    let mut b = board(dir);
    assert_eq!(changed_ids(&b.refresh(false)), ["20261130T080000Z-a", "20261130T080001Z-b"]);
    assert!(b.refresh(false).is_empty(), "an unchanged directory changes nothing");
    assert!(b.refresh(true).is_empty(), "no run is running (another host's runs never are)");
    append(dir, "20261130T080001Z-b", &started("db-1", "create", 5));
    settle();
    assert_eq!(changed_ids(&b.refresh(false)), ["20261130T080001Z-b"]);
    let (card, timeline) = b.run("20261130T080001Z-b").expect("run");
    assert_eq!(card.steps, 2);
    assert_eq!(timeline.expect("timeline").lanes[0].steps.len(), 2);
    fs::remove_file(dir.join("20261130T080000Z-a.jsonl")).expect("rm");
    assert_eq!(changed_ids(&b.refresh(false)), ["-20261130T080000Z-a"]);
    assert!(b.run("20261130T080000Z-a").is_none());
}

#[test]
fn a_refresh_of_named_paths_reads_only_those_journals() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    write(dir, "20261130T080000Z-a", "provision", "prod", ME, 1, &steps("web-1", &["validate"]));
    write(dir, "20261130T080001Z-b", "provision", "prod", ME, 1, &steps("db-1", &["validate"]));
    let mut b = board(dir);
    assert_eq!(b.refresh_paths([dir.join("20261130T080000Z-a.jsonl").as_path()]).len(), 1);
    assert!(b.run("20261130T080001Z-b").is_none(), "b was not named, so not read");
    settle();
    append(dir, "20261130T080000Z-a", &started("web-1", "create", 5));
    let other = tempfile::tempdir().expect("tmp");
    let named = [
        Path::new("/elsewhere/20261130T080000Z-a.jsonl"), // the name counts, not how the directory is spelt
        Path::new("20261130T080000Z-a.jsonl.tmp"),
        Path::new(".swap.jsonl"),
        other.path(),
    ];
    assert_eq!(changed_ids(&b.refresh_paths(named)), ["20261130T080000Z-a"]);
    assert!(b.refresh_paths([dir.join("20261130T080000Z-a.jsonl").as_path()]).is_empty(), "unchanged");
    fs::remove_file(dir.join("20261130T080000Z-a.jsonl")).expect("rm");
    assert_eq!(
        changed_ids(&b.refresh_paths([dir.join("20261130T080000Z-a.jsonl").as_path()])),
        ["-20261130T080000Z-a"]
    );
    assert_eq!(changed_ids(&b.refresh(false)), ["20261130T080001Z-b"], "the full refresh finds what was not named");
}

#[test]
fn an_unreadable_journal_is_a_card_saying_why_not_a_failed_page() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    fs::write(dir.join("20261130T080000Z-bad.jsonl"), "not json\n{\"event\":\"nope\"}\n").expect("bad");
    write(dir, "20261130T080001Z-ok", "provision", "prod", ME, 1, &[done("succeeded", 2, None)]);
    let mut b = board(dir);
    b.refresh(false);
    let (card, timeline) = b.run("20261130T080000Z-bad").expect("listed");
    assert!(card.problem.as_deref().is_some_and(|p| p.contains("line 1")), "{:?}", card.problem);
    assert!(timeline.is_none());
    let list = b.list(&Filter { result: Some("unreadable".into()), ..Filter::default() }, 10);
    assert_eq!(list.runs.iter().map(|c| c.run.id.as_str()).collect::<Vec<_>>(), ["20261130T080000Z-bad"]);
}

#[test]
fn the_list_keeps_what_the_filters_say_running_first_then_newest() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    let host = crate::state::host_name();
    let me = std::process::id();
    let mut failed = steps("Web-Front-1", &["validate"]);
    failed.push(started("Web-Front-1", "create", 2));
    failed.push(finished("Web-Front-1", "create", 3, Some("clone failed: storage full")));
    failed.push(done("failed", 4, Some("clone failed: storage full")));
    write(dir, "20261130T080000Z-old", "provision", "prod", ME, 1, &failed);
    write(dir, "20261130T080005Z-new", "provision", "lab", ME, 1, &[done("succeeded", 6, None)]);
    // This test's own process: alive, so the run is running.
    write(dir, "20261130T070000Z-live", "provision", "lab", &host, me, &[started("db-2", "create", 1)]);
    let mut b = board(dir);
    b.refresh(false);
    let ids = |l: List| l.runs.iter().map(|c| c.run.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(b.list(&Filter::default(), 10)),
        ["20261130T070000Z-live", "20261130T080005Z-new", "20261130T080000Z-old"]
    );
    let by_vm = Filter { vm: Some("web-front".into()), ..Filter::default() };
    assert_eq!(ids(b.list(&by_vm, 10)), ["20261130T080000Z-old"], "VM names match case-insensitively");
    let by_env = Filter { environment: Some("lab".into()), ..Filter::default() };
    assert_eq!(ids(b.list(&by_env, 10)), ["20261130T070000Z-live", "20261130T080005Z-new"]);
    let by_result = Filter { result: Some("running".into()), ..Filter::default() };
    assert_eq!(ids(b.list(&by_result, 10)), ["20261130T070000Z-live"]);
    let list = b.list(&Filter::default(), 1);
    assert_eq!((list.total, list.matched, list.runs.len()), (3, 3, 1));
    assert_eq!(list.environments, ["lab", "prod"]);
    assert_eq!(list.kinds, ["provision"], "journals written before the function was recorded");
    let (old, _) = b.run("20261130T080000Z-old").expect("old");
    let failing = old.failing.as_ref().expect("failing step");
    assert_eq!((failing.vm.as_deref(), failing.path.as_slice()), (Some("Web-Front-1"), &["create".to_string()][..]));
    assert_eq!(failing.error, "clone failed: storage full");
    let (live, _) = b.run("20261130T070000Z-live").expect("live");
    assert_eq!(live.running, [Current { vm: Some("db-2".into()), path: vec!["create".into()] }]);
}

#[test]
fn a_running_run_whose_process_is_gone_turns_interrupted_at_the_recheck() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    let host = crate::state::host_name();
    let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
    write(dir, "20261130T080000Z-k", "provision", "lab", &host, child.id(), &[started("vm-1", "create", 1)]);
    let mut b = board(dir);
    b.refresh(false);
    assert_eq!(b.run("20261130T080000Z-k").expect("run").0.result(), Some(RunResult::Running));
    child.kill().expect("kill");
    child.wait().expect("reap");
    settle();
    assert!(b.refresh(false).is_empty(), "the file did not change");
    let changes = b.refresh(true);
    assert_eq!(changed_ids(&changes), ["20261130T080000Z-k"]);
    assert_eq!(b.run("20261130T080000Z-k").expect("run").0.result(), Some(RunResult::Interrupted));
}

fn stage_states(card: &Card) -> Vec<(&'static str, &'static str)> {
    card.stages.as_ref().expect("a pipeline run has stages").iter().map(|s| (s.name, s.state)).collect()
}

#[test]
fn a_pipeline_run_is_drawn_as_its_stages_with_the_failing_one_and_the_rest_pending() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    let mut lines = steps(
        "web-1",
        &["validate", "lock", "decide", "vmid", "ownership", "dns", "snippets", "create", "mac", "netbox-mac"],
    );
    lines.push(started("web-1", "dhcp", 20));
    lines.push(finished("web-1", "dhcp", 21, Some("UniFi: api.err.MacUsed")));
    lines.push(done("failed", 22, Some("UniFi: api.err.MacUsed")));
    write(dir, "20261130T080000Z-nb", "netbox", "prod", ME, 1, &lines);
    write(dir, "20261130T080001Z-plain", "provision", "prod", ME, 1, &steps("x", &["validate"]));
    let mut b = board(dir);
    b.refresh(false);
    let (card, _) = b.run("20261130T080000Z-nb").expect("run");
    assert_eq!(
        stage_states(&card),
        [
            ("validate", "done"),
            ("create", "done"),
            ("mac", "done"),
            ("dhcp", "failed"),
            ("ha", "pending"),
            ("boot", "pending"),
            ("os-config", "pending"),
            ("dns", "pending"),
            ("active", "pending")
        ],
        "the `dns` of the create stage stays there"
    );
    assert!(b.run("20261130T080001Z-plain").expect("plain").0.stages.is_none(), "not a pipeline workflow");
}

#[test]
fn a_finished_pipeline_skips_the_stages_it_did_not_need_and_lights_the_running_one() {
    let names = ["validate", "create", "mac", "dhcp", "ha", "start", "checkpoint-clear", "dns", "active"];
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    let mut lines = steps("web-2", &names);
    lines.push(done("succeeded", 30, None));
    write(dir, "20261130T080000Z-ok", "netbox", "prod", ME, 1, &lines);
    let host = crate::state::host_name();
    let mut running = steps("web-3", &names[..5]);
    running.push(started("web-3", "start", 9));
    write(dir, "20261130T080001Z-run", "netbox", "prod", &host, std::process::id(), &running);
    let mut b = board(dir);
    b.refresh(false);
    let ok = stage_states(&b.run("20261130T080000Z-ok").expect("ok").0);
    assert_eq!(ok[6], ("os-config", "skipped"), "checkpoint-clear after boot stays in boot: {ok:?}");
    assert!(ok.iter().all(|(n, s)| *s == "done" || *n == "os-config"), "{ok:?}");
    let run = stage_states(&b.run("20261130T080001Z-run").expect("run").0);
    assert_eq!(&run[4..7], [("ha", "done"), ("boot", "current"), ("os-config", "pending")]);
}

#[test]
fn a_large_journal_read_a_moment_ago_waits_before_it_is_read_again() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    // About 3 MB: its reading takes milliseconds, so the backoff is a
    // measurable window.
    let lines: Vec<String> = (0..12_000)
        .flat_map(|i| [started("big", &format!("s{i}"), 1), finished("big", &format!("s{i}"), 2, None)])
        .collect();
    write(dir, "20261130T080000Z-big", "provision", "prod", ME, 1, &lines);
    let path = dir.join("20261130T080000Z-big.jsonl");
    let mut b = board(dir);
    assert_eq!(b.refresh_paths([path.as_path()]).len(), 1);
    append(dir, "20261130T080000Z-big", &done("succeeded", 3, None));
    assert!(b.refresh_paths([path.as_path()]).is_empty(), "named again at once: left for later");
    assert!(b.refresh(true).is_empty(), "the full refresh waits too");
    let start = std::time::Instant::now();
    loop {
        if !b.refresh(true).is_empty() {
            break;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "read again once the backoff passed");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(b.run("20261130T080000Z-big").expect("run").0.result(), Some(RunResult::Succeeded));
}

#[test]
fn only_so_many_finished_timelines_stay_in_memory_and_the_others_are_read_again_when_asked_for() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    for i in 0..5 {
        let mut lines = steps(&format!("vm-{i}"), &["validate", "create"]);
        lines.push(done("succeeded", 9, None));
        write(dir, &format!("20261130T08000{i}Z-r"), "provision", "prod", ME, 1, &lines);
    }
    let mut b = board(dir).keeping_timelines(2);
    b.refresh(false);
    let held = |b: &Board| b.entries.values().filter(|e| e.timeline.is_some()).count();
    assert_eq!(held(&b), 2);
    for i in 0..5 {
        let (card, timeline) = b.run(&format!("20261130T08000{i}Z-r")).expect("run");
        let timeline = timeline.expect("read again when it was not kept");
        assert_eq!(timeline.lanes[0].vm.as_deref(), Some(format!("vm-{i}").as_str()));
        assert_eq!(card.steps, 2);
        assert!(held(&b) <= 2, "still at most two kept");
    }
}

#[test]
fn a_maintenance_apply_card_names_its_workflow_and_function_and_an_older_journal_its_workflow_only() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    let mut lines = steps("db-1", &["lock", "config", "verify"]);
    lines.push(done("succeeded", 9, None));
    write(dir, "20261130T080000Z-apply", "maintain", "prod", ME, 1, &lines);
    // `run_started` as cradle writes it now: with the function it called.
    let path = dir.join("20261130T080000Z-apply.jsonl");
    let text = fs::read_to_string(&path).expect("journal");
    fs::write(&path, text.replacen(r#""workflow":"maintain","#, r#""workflow":"maintain","function":"apply_vm","#, 1))
        .expect("journal");
    write(dir, "20261130T080001Z-old", "provision", "prod", ME, 1, &lines);
    let mut b = board(dir);
    b.refresh(false);
    let (apply, timeline) = b.run("20261130T080000Z-apply").expect("apply");
    assert_eq!((apply.run.workflow.as_deref(), apply.run.function.as_deref()), (Some("maintain"), Some("apply_vm")));
    assert_eq!(timeline.expect("timeline").run.function.as_deref(), Some("apply_vm"));
    // What the page reads: the card's JSON, the run's fields flattened.
    let json = serde_json::to_value(&*apply).expect("json");
    assert_eq!((&json["workflow"], &json["function"]), (&"maintain".into(), &"apply_vm".into()), "{json}");
    let old = b.run("20261130T080001Z-old").expect("old").0;
    assert_eq!((old.run.workflow.as_deref(), old.run.function.as_deref()), (Some("provision"), None));
    assert!(serde_json::to_value(&*old).expect("json")["function"].is_null());
}

#[test]
fn the_kind_filter_keeps_a_workflow_function_or_every_function_of_a_workflow() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    let lines = [done("succeeded", 9, None)];
    // `run_started` with the function it called, as cradle writes it now.
    let with_function = |id: &str, workflow: &str, function: &str| {
        write(dir, id, workflow, "prod", ME, 1, &lines);
        let path = dir.join(format!("{id}.jsonl"));
        let text = fs::read_to_string(&path).expect("journal");
        let from = format!(r#""workflow":"{workflow}","#);
        fs::write(&path, text.replacen(&from, &format!(r#"{from}"function":"{function}","#), 1)).expect("journal");
    };
    with_function("20261130T080003Z-apply", "maintain", "apply_vm");
    with_function("20261130T080002Z-plan", "maintain", "plan_vm");
    with_function("20261130T080001Z-prov", "provision", "provision");
    // Written before the function was recorded: its kind is the workflow.
    write(dir, "20261130T080000Z-old", "maintain", "prod", ME, 1, &lines);
    // No workflow at all: no kind.
    fs::write(dir.join("20261130T075900Z-bad.jsonl"), "not json\n").expect("bad");
    let mut b = board(dir);
    b.refresh(false);
    let ids = |kind: &str| {
        let filter = Filter { kind: Some(kind.into()), ..Filter::default() };
        b.list(&filter, 10).runs.iter().map(|c| c.run.id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids("maintain:apply_vm"), ["20261130T080003Z-apply"]);
    assert_eq!(
        ids("maintain"),
        ["20261130T080003Z-apply", "20261130T080002Z-plan", "20261130T080000Z-old"],
        "a bare workflow keeps every function of it, and a journal without one"
    );
    assert_eq!(ids("provision:provision"), ["20261130T080001Z-prov"]);
    assert!(ids("maintain:apply").is_empty(), "a kind is matched whole, not by prefix");
    assert!(ids("apply_vm").is_empty(), "a function alone is no kind");
    assert_eq!(ids("").len(), 5, "an empty kind filters nothing, the unreadable journal included");
    let list = b.list(&Filter::default(), 10);
    assert_eq!(list.kinds, ["maintain", "maintain:apply_vm", "maintain:plan_vm", "provision:provision"]);
    let (apply, _) = b.run("20261130T080003Z-apply").expect("apply");
    assert_eq!(apply.kind().as_deref(), Some("maintain:apply_vm"));
    assert_eq!(b.run("20261130T075900Z-bad").expect("bad").0.kind(), None);
}
