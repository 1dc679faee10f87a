//! `cradle runs show` draws a run's timeline: after a real provision on the
//! simulator (built-in workflows and backend), every step of the VM has a
//! line with a bar and a duration; a provision that fails has its failing
//! step marked `✗` with the error on the next line, and a run that failed
//! outside any step a `(run)` row marked `✗` with the run's error; `--timeline --output
//! json` gives the same model as JSON; nothing the binary prints to a pipe
//! carries a colour code.
//!
//! Needs `target/debug/cradle`. Simulated guests bind port 22 on
//! 127.41.<n>.0/24, a prefix no other test uses.

use std::path::Path;
use std::process::Command;

use cradle_tests::fixture::{Backend, Cluster, LabInventory, ProjectConfig, SimCluster, Wait, Workflows};
use cradle_tests::{Out, cradle_bin};
use serde_json::Value;

struct Project {
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
}

fn project() -> Project {
    let dir = tempfile::tempdir().expect("tmp");
    let sim = SimCluster { nodes: vec!["pve1", "pve2"], time_scale: 0.0, seed: None, faults: None, extra: Vec::new() };
    let config = ProjectConfig::new(Cluster::Sim(sim))
        .state_dir(None)
        .workflows(Workflows::BuiltIn)
        .backend(Backend::BuiltIn)
        .write(dir.path());
    Project { dir, config }
}

fn cradle(p: &Project, args: &[&str]) -> Out {
    let state = p.dir.path().join("state");
    let out = Command::new(cradle_bin())
        .current_dir(p.dir.path())
        .arg("--config")
        .arg(&p.config)
        .arg("--state-dir")
        .arg(&state)
        .args(args)
        .env_remove("CRADLE_CONFIG")
        .env_remove("CRADLE_STATE_DIR")
        // Not set: a pipe alone must keep the output free of colour codes.
        .env_remove("NO_COLOR")
        .output()
        .expect("run cradle");
    let out = Out::from(out);
    assert!(!out.stderr.contains("panicked"), "{out:#?}");
    out
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Provisions the inventory; the one host's JSON row.
fn provision(p: &Project, inventory: &Path) -> Value {
    let out = cradle(p, &["--output", "json", "provision", "-i", s(inventory)]);
    let doc = out.json();
    doc["hosts"][0].clone()
}

/// The Gantt line of `step` (a step line: its name, then the bar).
fn step_line<'a>(text: &'a str, step: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(&format!("{step} ")) && l.contains('|'))
        .unwrap_or_else(|| panic!("no timeline line for {step}:\n{text}"))
}

fn bar(line: &str) -> &str {
    &line[line.find('|').expect("bar") + 1..line.rfind('|').expect("bar")]
}

#[test]
fn a_provision_run_shows_every_step_of_its_vm_with_a_bar() {
    let p = project();
    let wait = Wait { reboot_attempts: None, ..Wait::fast() };
    let inv = LabInventory::new("127.41", 1).name_prefix("tl").vmid_base(Some(310)).target_node("pve1").wait(wait);
    let inventory = inv.write(p.dir.path());
    let host = provision(&p, &inventory);
    assert_eq!(host["result"], "created", "{host}");
    let id = host["run_id"].as_str().expect("run_id");

    let out = cradle(&p, &["runs", "show", "--timeline", id]);
    assert_eq!(out.code, 0, "{out:#?}");
    let text = &out.stdout;
    assert!(!text.contains('\x1b'), "no colour codes in a pipe: {text:?}");
    assert!(text.lines().any(|l| l.starts_with("result    succeeded after")), "{text}");
    assert!(text.lines().any(|l| l == "vm tl-0"), "{text}");
    for step in ["validate", "lock", "decide", "snippets", "create", "reboot", "reconcile"] {
        let line = step_line(text, step);
        assert_eq!(bar(line).chars().count(), 40, "{line}");
        assert!(bar(line).contains('█') && !line.contains('✗'), "{line}");
        assert!(line.ends_with(" ms") || line.ends_with(" s"), "a duration: {line}");
    }
    // Later steps start further right.
    let col = |step: &str| bar(step_line(text, step)).chars().position(|c| c == '█').expect("a filled span");
    assert!(col("validate") <= col("create") && col("create") <= col("reconcile"), "{text}");

    // `runs show` without the flag: the event log, then the same chart.
    let full = cradle(&p, &["runs", "show", id]);
    assert!(full.stdout.contains("\ntimeline\n") && full.stdout.contains("ok    create"), "{}", full.stdout);
    assert_eq!(step_line(&full.stdout, "create"), step_line(text, "create"));

    let doc = cradle(&p, &["--output", "json", "runs", "show", "--timeline", id]).json();
    assert_eq!(doc["run"]["id"], id, "{doc}");
    assert_eq!(doc["run"]["result"], "succeeded", "{doc}");
    assert!(doc["run"]["plugins"].as_array().expect("plugins").iter().any(|p| p["name"] == "direct"), "{doc}");
    let lane = &doc["lanes"][0];
    assert_eq!(lane["vm"], "tl-0", "{doc}");
    let names: Vec<&str> = lane["steps"].as_array().expect("steps").iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names.first(), Some(&"validate"), "{names:?}");
    assert!(names.contains(&"reconcile"), "{names:?}");
    assert!(lane["steps"].as_array().expect("steps").iter().all(|s| s["outcome"] == "ok"), "{doc}");
}

#[test]
fn a_failed_provision_shows_its_failing_step_and_error() {
    let p = project();
    let inv = LabInventory::new("127.41", 2)
        .name_prefix("bad")
        .vmid_base(Some(320))
        .target_node("pve1")
        .template("no-such-template")
        .wait(Wait::fast());
    let inventory = inv.write(p.dir.path());
    let host = provision(&p, &inventory);
    let id = host["run_id"].as_str().unwrap_or_else(|| panic!("a run id: {host}"));
    assert!(host["error"].as_str().is_some_and(|e| !e.is_empty()), "{host}");

    let doc = cradle(&p, &["--output", "json", "runs", "show", "--timeline", id]).json();
    assert_eq!(doc["run"]["result"], "failed", "{doc}");
    let failing = &doc["failing"];
    let path: Vec<&str> = failing["path"].as_array().expect("path").iter().filter_map(|s| s.as_str()).collect();
    let step = *path.last().unwrap_or_else(|| panic!("a failing step: {doc}"));
    let error = failing["error"].as_str().expect("error");
    assert!(error.contains("no-such-template"), "{doc}");

    let text = cradle(&p, &["runs", "show", "--timeline", id]).stdout;
    let line = step_line(&text, step);
    assert!(line.contains('✗') && line.ends_with("failing step"), "{text}");
    let next = text.lines().skip_while(|l| *l != line).nth(1).expect("a line after the failing step");
    assert!(next.trim_start().starts_with("error: ") && next.contains("no-such-template"), "{text}");
    assert!(next.starts_with("    "), "indented: {text}");
    assert!(text.lines().any(|l| l.starts_with("result    failed after")), "{text}");
    // The steps before it succeeded.
    assert!(!step_line(&text, "validate").contains('✗'), "{text}");
}

#[test]
fn a_run_that_failed_outside_any_step_has_its_own_failing_row_with_the_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let sim = SimCluster { nodes: vec!["pve1"], time_scale: 0.0, seed: None, faults: None, extra: Vec::new() };
    let config = ProjectConfig::new(Cluster::Sim(sim))
        .state_dir(None)
        .workflows(Workflows::Dir("wf".into()))
        .backend(Backend::BuiltIn)
        .write(dir.path());
    std::fs::create_dir_all(dir.path().join("wf")).expect("mkdir");
    // One step that succeeds, then a failure in script code after it.
    std::fs::write(
        dir.path().join("wf/app.rhai"),
        "fn main(name) {\n    step(name, \"prepare\", || 1);\n    throw \"gave up after the last step\";\n}\n",
    )
    .expect("write workflow");
    let p = Project { dir, config };
    let out = cradle(&p, &["--output", "json", "run", "app", "vm-9"]);
    assert_ne!(out.code, 0, "{out:#?}");
    let doc = out.json();
    let id = doc["run_id"].as_str().unwrap_or_else(|| panic!("a run id: {doc}"));

    let text = cradle(&p, &["runs", "show", "--timeline", id]).stdout;
    assert!(text.lines().any(|l| l.starts_with("result    failed after")), "{text}");
    assert!(!step_line(&text, "prepare").contains('✗'), "the step itself succeeded: {text}");
    let row = step_line(&text, "(run)");
    assert!(row.contains('✗') && row.ends_with("failing: outside any step"), "{text}");
    let next = text.lines().skip_while(|l| *l != row).nth(1).expect("a line after the row");
    assert!(next.trim_start().starts_with("error: ") && next.contains("gave up after the last step"), "{text}");
    // `runs show` without the flag ends with the same chart.
    let full = cradle(&p, &["runs", "show", id]).stdout;
    assert_eq!(step_line(&full, "(run)"), row, "{full}");
}
