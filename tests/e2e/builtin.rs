//! What ships inside the `cradle` binary: the built-in workflows and backends
//! run a project that has neither a workflow directory nor plugin files, from
//! any working directory; a project's own workflow directory replaces the
//! built-in set; `cradle init` writes a starter project that runs and never
//! overwrites a file without `--force`.
//!
//! Needs `target/debug/cradle` (and, for the file-override test, the sample
//! plugin `scripts/test` builds). Simulated guests bind port 22 on
//! 127.35.<n>.0/24, a prefix no other test uses; each test here its own `n` (1, 2 for the init project, 3, 4), since they run at the same time.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use cradle_tests::fixture::{Backend, Cluster, LabInventory, ProjectConfig, SimCluster, Wait, Workflows};
use cradle_tests::{Out, cradle_bin, plugin_wasm, workspace};
use serde_json::Value;

/// A project naming the built-in `direct` backend (environment `test`) and
/// the built-in `sample` (environment `demo`) on a two-node simulator, with
/// no `[plugins]`, no workflows and no `state_dir`.
fn bare() -> ProjectConfig {
    let sim = SimCluster { nodes: vec!["pve1", "pve2"], time_scale: 0.0, seed: None, faults: None, extra: Vec::new() };
    ProjectConfig::new(Cluster::Sim(sim))
        .state_dir(None)
        .workflows(Workflows::BuiltIn)
        .backend(Backend::BuiltIn)
        .append("[environments.demo]\ncluster = \"sim\"\nbackend = \"sample\"\n")
}

/// Runs cradle in `cwd` (never the project directory: the binary must not
/// need one), with `args`.
fn cradle(cwd: &Path, args: &[&str]) -> Out {
    cradle_tests::cradle_in(cwd, args)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// A one-VM inventory (`lab-0`, VMID 300 on pve1) on 127.35.`n`.0/24 with fast waits.
fn write_inventory(dir: &Path, n: u8) -> PathBuf {
    let wait = Wait { reboot_attempts: None, ..Wait::fast() };
    LabInventory::new("127.35", n).name_prefix("lab").vmid_base(Some(300)).target_node("pve1").wait(wait).write(dir)
}

fn hosts_results(doc: &Value) -> Vec<String> {
    doc["hosts"].as_array().expect("hosts").iter().map(|h| h["result"].as_str().unwrap_or("").to_string()).collect()
}

#[test]
fn a_project_without_workflows_or_plugin_files_provisions_with_the_built_ins() {
    let project = tempfile::tempdir().expect("tmp");
    let elsewhere = tempfile::tempdir().expect("tmp");
    let config = bare().write(project.path());
    let inventory = write_inventory(project.path(), 1);
    let state = project.path().join("state");
    let base = ["--config", s(&config), "--state-dir", s(&state), "--output", "json"];

    let check = cradle(elsewhere.path(), &[&base[..], &["workflows", "check"]].concat()).json();
    assert_eq!(check["ok"], true, "{check}");
    assert_eq!(check["source"], "built-in", "{check}");
    let files: Vec<&str> =
        check["modules"].as_array().expect("modules").iter().filter_map(|m| m["file"].as_str()).collect();
    assert!(files.contains(&"built-in:lib/guest.rhai"), "lib/ is embedded and imported: {files:?}");

    let plugins = cradle(elsewhere.path(), &[&base[..], &["plugins", "list"]].concat()).json();
    let rows = plugins["plugins"].as_array().expect("plugins");
    assert_eq!(rows.len(), 3, "both environments' built-in backends and the built-in netbox: {plugins}");
    for row in rows {
        assert_eq!((row["status"].as_str(), row["source"].as_str()), (Some("ok"), Some("built-in")), "{row}");
        let name = row["name"].as_str().unwrap_or("");
        let kind = if name == "netbox" { "integration" } else { "backend" };
        assert_eq!(row["kind"], kind, "each row says its kind: {row}");
        let expected = if name == "direct" {
            "default (built-in, destructive on the simulated cluster)"
        } else {
            "default (built-in)"
        };
        assert_eq!(row["grants"], expected, "{row}");
    }
    let text = cradle(elsewhere.path(), &["--config", s(&config), "--state-dir", s(&state), "plugins", "list"]);
    assert!(
        text.ok().contains("built-in, grants: default (built-in)"),
        "the text list says the grants are defaults: {text:#?}"
    );

    let args = [&base[..], &["provision", "-i", s(&inventory)]].concat();
    let first = cradle(elsewhere.path(), &args);
    assert_eq!(hosts_results(&first.json()), ["created"], "{first:#?}");
    let again = cradle(elsewhere.path(), &args);
    assert_eq!(hosts_results(&again.json()), ["skipped"], "a rerun converges: {again:#?}");
}

#[test]
fn a_project_workflow_dir_replaces_the_built_in_set_and_a_plugin_path_the_built_in_component() {
    let project = tempfile::tempdir().expect("tmp");
    let elsewhere = tempfile::tempdir().expect("tmp");
    let sample = plugin_wasm("sample");
    let config = bare().append(&format!("\n[plugins.sample]\npath = {:?}\n", s(&sample))).write(project.path());
    let workflows = project.path().join("workflows");
    std::fs::create_dir_all(&workflows).expect("mkdir");
    std::fs::write(workflows.join("plan.rhai"), "fn main(name) { `project plan for ${name}` }\n").expect("write");
    let state = project.path().join("state");
    let base = ["--config", s(&config), "--state-dir", s(&state)];

    let out = cradle(elsewhere.path(), &[&base[..], &["run", "plan", "--env", "demo", "test-0"]].concat());
    assert!(out.ok().contains("project plan for test-0"), "the project's plan.rhai ran: {out:#?}");

    // The whole set is replaced: the built-in provision.rhai is not there.
    let out = cradle(elsewhere.path(), &[&base[..], &["run", "provision", "--fn", "check", "x"]].concat());
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(out.stderr.contains("provision") && out.stderr.contains("plan"), "names the scripts there are: {out:#?}");

    let check = cradle(elsewhere.path(), &[&base[..], &["--output", "json", "workflows", "check"]].concat()).json();
    assert_eq!((check["source"].as_str(), check["dir"].as_str()), (Some("project"), Some(s(&workflows))), "{check}");

    let plugins = cradle(elsewhere.path(), &[&base[..], &["--output", "json", "plugins", "list"]].concat()).json();
    let row = |name: &str| {
        plugins["plugins"].as_array().expect("rows").iter().find(|r| r["name"] == name).cloned().expect("row")
    };
    assert_eq!(row("sample")["source"], "file", "{plugins}");
    assert_eq!(row("sample")["path"], s(&sample), "{plugins}");
    assert_eq!(row("direct")["source"], "built-in", "{plugins}");
}

#[test]
fn an_explicit_workflow_dir_that_does_not_exist_is_an_error_not_a_fallback() {
    let project = tempfile::tempdir().expect("tmp");
    let config = bare().default_environment(false).workflows(Workflows::Dir("flows".into())).write(project.path());
    let out = cradle(project.path(), &["--config", s(&config), "--state-dir", "state", "workflows", "check"]);
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(out.stderr.contains("dir = \"flows\"") && out.stderr.contains("cradle init"), "{out:#?}");
}

#[test]
fn init_writes_a_starter_project_that_runs_and_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("proj");
    let out = cradle(tmp.path(), &["init", s(&dir)]);
    out.ok();

    // The built-in workflows, byte for byte, every file of workflows/ including lib/.
    let source = workspace().join("workflows");
    let mut compared = 0;
    for rel in ["sample.rhai", "provision.rhai", "remove.rhai", "lib/guest.rhai", "lib/finalize.rhai", "lib/vm.rhai"] {
        let written = std::fs::read_to_string(dir.join("workflows").join(rel)).expect("written");
        let expected = std::fs::read_to_string(source.join(rel)).expect("source");
        assert!(
            written == expected,
            "{rel} differs from workflows/{rel}: is target/debug/cradle stale? (scripts/build)"
        );
        compared += 1;
    }
    assert_eq!(compared, 6);
    for rel in ["cradle.toml", "workflows/provision.rhai", "inventory/hosts.ini", "inventory/group_vars/all.yml"] {
        let mode = std::fs::metadata(dir.join(rel)).expect(rel).permissions().mode() & 0o777;
        assert_eq!(mode & 0o600, 0o600, "{rel}: {mode:o}");
        assert_eq!(mode & 0o022, 0, "{rel} is not group/world writable: {mode:o}");
    }

    // A second init refuses, naming the file and --force, and writes nothing.
    std::fs::write(dir.join("workflows/sample.rhai"), "// mine\n").expect("edit");
    let again = cradle(tmp.path(), &["init", s(&dir)]);
    assert_eq!(again.code, 1, "{again:#?}");
    let config = dir.join("cradle.toml");
    assert!(again.stderr.contains(s(&config)) && again.stderr.contains("--force"), "{again:#?}");
    assert_eq!(std::fs::read_to_string(dir.join("workflows/sample.rhai")).expect("read"), "// mine\n");
    // One existing file is enough to refuse.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(other.join("inventory")).expect("mkdir");
    std::fs::write(other.join("inventory/hosts.ini"), "[x]\n").expect("write");
    let partial = cradle(tmp.path(), &["init", s(&other)]);
    assert_eq!(partial.code, 1, "{partial:#?}");
    assert!(partial.stderr.contains("hosts.ini already exists"), "{partial:#?}");
    assert!(!other.join("cradle.toml").exists(), "nothing was written");

    let forced = cradle(tmp.path(), &["init", "--force", s(&dir)]);
    forced.ok();
    assert_ne!(std::fs::read_to_string(dir.join("workflows/sample.rhai")).expect("read"), "// mine\n");

    // What init wrote runs, from another directory: the project's workflows
    // (a copy of the built-ins) and the built-in backends with the grants it wrote.
    let check = cradle(tmp.path(), &["--config", s(&config), "--output", "json", "workflows", "check"]).json();
    assert_eq!((check["ok"].as_bool(), check["source"].as_str()), (Some(true), Some("project")), "{check}");
    let plugins = cradle(tmp.path(), &["--config", s(&config), "--output", "json", "plugins", "list"]).json();
    for row in plugins["plugins"].as_array().expect("rows") {
        assert_eq!((row["status"].as_str(), row["source"].as_str()), (Some("ok"), Some("built-in")), "{row}");
        assert_eq!(row["grants"], "cradle.toml", "{row}");
    }
    let inventory = dir.join("inventory");
    let planned =
        cradle(tmp.path(), &["--config", s(&config), "--output", "json", "provision", "-i", s(&inventory), "--check"]);
    assert_eq!(hosts_results(&planned.json()), ["create", "create"], "{planned:#?}");
    let state = dir.join(".cradle");
    let mode = std::fs::metadata(&state).expect("state dir").permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the state dir is owner-only");
}

/// `cradle init lab && cd lab`, then every command with no `--config`: the
/// default `cradle.toml` (a bare file name, whose parent is the empty path)
/// loads through the one config loader as `--config ./cradle.toml` would —
/// before the fix, `runs`, `unlock`, `remove` and `--env` completion failed
/// with "`terraform` must be an absolute path".
#[test]
fn every_command_runs_inside_an_init_project_without_config() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("lab");
    cradle(tmp.path(), &["init", s(&dir)]).ok();
    // The starter's own addresses (127.20.0.x) belong to the demo: this test's
    // guests answer on 127.35.2.0/24.
    let hosts = std::fs::read_to_string(dir.join("inventory/hosts.ini")).expect("hosts.ini");
    std::fs::write(dir.join("inventory/hosts.ini"), hosts.replace("127.20.0.", "127.35.2.")).expect("write");
    let all = std::fs::read_to_string(dir.join("inventory/group_vars/all.yml")).expect("all.yml");
    std::fs::write(dir.join("inventory/group_vars/all.yml"), all.replace("127.20.0.1", "127.35.2.1")).expect("write");
    let json = |args: &[&str]| cradle(&dir, &[&["--output", "json"], args].concat()).json();

    let check = json(&["workflows", "check"]);
    assert_eq!(check["ok"], true, "{check}");
    let plugins = json(&["plugins", "list"]);
    assert!(plugins["plugins"].as_array().is_some_and(|p| !p.is_empty()), "{plugins}");
    let planned = json(&["provision", "-i", "inventory", "--limit", "test-0", "--check"]);
    assert_eq!(hosts_results(&planned), ["create"], "{planned}");
    let created = json(&["provision", "-i", "inventory", "--limit", "test-0"]);
    assert_eq!(hosts_results(&created), ["created"], "{created}");
    let id = created["hosts"][0]["run_id"].as_str().expect("run_id").to_string();

    let list = cradle(&dir, &["runs", "list"]);
    assert!(list.ok().contains(&id[..8]), "runs list shows the run: {list:#?}");
    let show = cradle(&dir, &["runs", "show", &id]);
    assert!(show.ok().contains("test-0"), "{show:#?}");
    let unlock = cradle(&dir, &["unlock", "test-0"]);
    assert_eq!(unlock.code, 1, "{unlock:#?}");
    assert!(unlock.stderr.contains("nothing to unlock"), "unlock reads the project, not an error: {unlock:#?}");

    let mut complete = Command::new(cradle_bin());
    complete
        .args(["--", "cradle", "provision", "--env", ""])
        .envs([("COMPLETE", "zsh"), ("_CLAP_IFS", "\n"), ("_CLAP_COMPLETE_INDEX", "3")])
        .env_remove("CRADLE_CONFIG")
        .env_remove("CRADLE_STATE_DIR")
        .current_dir(&dir);
    let envs = Out::from(complete.output().expect("run cradle"));
    let offered: Vec<&str> = envs.ok().lines().map(|l| l.split(':').next().unwrap_or("")).collect();
    assert!(offered.contains(&"test"), "--env completes from ./cradle.toml: {envs:#?}");

    let removed = json(&["remove", "-i", "inventory", "--limit", "test-0", "--yes"]);
    assert_eq!(hosts_results(&removed), ["removed"], "{removed}");
}

/// The node lines of a known_hosts file (`[ip]:port key`): everything but the
/// guests on 127.35.0.0/16.
fn node_pins(known_hosts: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(known_hosts).expect("known_hosts");
    text.lines().filter(|l| !l.starts_with("127.35.") && !l.starts_with("[127.35.")).map(str::to_string).collect()
}

#[test]
fn runs_on_the_built_in_cluster_keep_known_hosts_at_a_constant_size_and_take_over_a_port_pinned_with_another_key() {
    let project = tempfile::tempdir().expect("tmp");
    let config = bare().write(project.path());
    let inventory = write_inventory(project.path(), 3);
    let state = project.path().join("state");
    let known_hosts = state.join("known_hosts");
    let args = ["--config", s(&config), "--state-dir", s(&state), "--output", "json", "provision", "-i", s(&inventory)];
    let first = cradle(project.path(), &args);
    assert_eq!(hosts_results(&first.json()), ["created"], "{first:#?}");
    let size = std::fs::read_to_string(&known_hosts).expect("known_hosts").lines().count();
    let nodes = node_pins(&known_hosts);
    assert_eq!(nodes.len(), 2, "one pin per node: {nodes:?}");
    // Every ephemeral port of both node addresses pinned with another key, as
    // other clusters' runs would leave them: the next start's ports are among them.
    let other_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/";
    let ips: Vec<&str> =
        nodes.iter().map(|l| l.trim_start_matches('[').split(']').next().expect("[ip]:port")).collect();
    let mut foreign = String::new();
    for ip in &ips {
        for port in 32768..61000 {
            foreign.push_str(&format!("[{ip}]:{port} {other_key}\n"));
        }
    }
    for run in 0..3 {
        let before = std::fs::read_to_string(&known_hosts).expect("known_hosts");
        if run == 1 {
            std::fs::write(&known_hosts, format!("{before}{foreign}")).expect("seed");
        }
        let again = cradle(project.path(), &args);
        assert_eq!(hosts_results(&again.json()), ["skipped"], "run {run}: {again:#?}");
        let text = std::fs::read_to_string(&known_hosts).expect("known_hosts");
        let ours = text.lines().filter(|l| !l.ends_with(other_key)).count();
        assert_eq!(ours, size, "run {run}: our pins replaced, not appended");
    }
}

#[test]
fn verbose_output_logs_each_step_start_once() {
    let project = tempfile::tempdir().expect("tmp");
    let config = bare().write(project.path());
    let inventory = write_inventory(project.path(), 4);
    let state = project.path().join("state");
    let out = cradle(
        project.path(),
        &["-v", "--config", s(&config), "--state-dir", s(&state), "provision", "-i", s(&inventory)],
    );
    out.ok();
    // The engine and the run's observer both logged each start, fields in
    // another order: the same (VM, step) started twice in a row. A step may
    // run again later (discover after the lock), so neighbours are compared.
    let field = |line: &str, name: &str| {
        let at = line.find(&format!(" {name}=\""))? + name.len() + 3;
        line[at..].split('"').next().map(str::to_string)
    };
    let steps: Vec<(bool, Option<String>, Option<String>)> = out
        .stderr
        .lines()
        .filter(|l| ["step started", "step done", "step failed"].iter().any(|m| l.contains(m)))
        .map(|l| (l.contains("step started"), field(l, "vm"), field(l, "step")))
        .collect();
    assert!(steps.iter().filter(|s| s.0).count() >= 5, "-v shows the steps: {}", out.stderr);
    for pair in steps.windows(2) {
        assert!(!(pair[0].0 && pair[0] == pair[1]), "{:?} logged twice: {}", pair[0], out.stderr);
    }
}
