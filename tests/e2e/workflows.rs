//! Workflow runs through the library: locks, checkpoints, steps and limits as
//! an operator's script sees them, with the journal as the record.

use cradle::caps::lock::{FsLockStore, Holder, LockStore};
use cradle::caps::policy::ScopedVm;
use cradle::project::{Project, RunReport, RunRequest};
use cradle_tests::{Fixture, Harness};

const CONFIG: &str = r#"
default_environment = "demo"
state_dir = "state"
[workflow]
max_operations = 100000
[workflow.grants.lock]
prefixes = ["vm/"]
[workflow.grants.checkpoint]
[clusters.sim]
kind = "sim"
[environments.demo]
cluster = "sim"
backend = "sample"
[plugins.sample]
path = "@SAMPLE@"
"#;

const SCRIPT: &str = r#"
fn fail_while_locked() {
    lock::acquire("vm/a");
    step("a", "create", || { throw "clone failed"; });
}
fn take(key) { lock::acquire(key).run_id }
fn nested() {
    lock::acquire("vm/n");
    lock::acquire("vm/n");
    lock::release("vm/n");
    let still = lock::holder("vm/n");
    lock::release("vm/n");
    [still.run_id, lock::holder("vm/n")]
}
fn checkpoints(vm) {
    checkpoint::write(#{ vm_name: vm, vmid: 150, node: "pve1", stage: "drive-removal" });
    let cp = checkpoint::read(vm);
    checkpoint::clear(vm, 150);
    [cp.vmid, cp.stage, checkpoint::read(vm)]
}
fn spin() { loop { } }
fn outside_grant() { lock::acquire("other/x") }
"#;

type Env = Harness;

fn env() -> Env {
    Harness::new(CONFIG, &[("wf.rhai", SCRIPT)])
}

/// The workflow's calls and what the tests read back, on the shared harness.
trait Calls {
    fn call(&self, func: &str, args: Vec<rhai::Dynamic>, vms: Vec<ScopedVm>) -> RunReport;
    fn locks(&self) -> FsLockStore;
    fn journal_events(&self, report: &RunReport) -> Vec<serde_json::Value>;
}

impl Calls for Env {
    fn call(&self, func: &str, args: Vec<rhai::Dynamic>, vms: Vec<ScopedVm>) -> RunReport {
        self.run(RunRequest { script: "wf".into(), func: func.into(), args, vms, ..Default::default() })
    }

    fn locks(&self) -> FsLockStore {
        FsLockStore::new(self.project.state.locks().expect("locks dir"))
    }

    fn journal_events(&self, report: &RunReport) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&report.journal)
            .expect("journal")
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect()
    }
}

#[test]
fn a_failed_run_releases_its_locks_and_names_the_step_and_line() {
    let env = env();
    let report = env.call("fail_while_locked", vec![], vec![]);
    let err = report.result.as_ref().expect_err("fails").to_string();
    assert!(
        err.contains("wf.rhai:4:") && err.contains("in step 'create' for VM 'a'") && err.contains("clone failed"),
        "{err}"
    );
    assert_eq!(env.locks().holder("vm/a").expect("holder"), None, "the lock was released on the failure path");
    assert!(report.unreleased_locks.is_empty());
    let events = env.journal_events(&report);
    let finished = events.iter().find(|e| e["event"] == "step_finished").expect("step_finished");
    assert_eq!(finished["step"], "create");
    assert!(finished["error"].as_str().unwrap_or("").contains("clone failed"), "{finished}");
    assert_eq!(events.last().expect("last")["status"], "failed");
}

#[test]
fn a_competing_run_fails_at_once_naming_the_holder() {
    let env = env();
    let other = Holder {
        host: "control-2".into(),
        pid: 4242,
        started: "2026-11-30T08:00:00Z".into(),
        run_id: "20261130T080000Z-beef".into(),
        pid_start_ticks: None,
        version: None,
    };
    env.locks().acquire("vm/test-0", &other).expect("foreign holder");
    let report = env.call("take", vec!["vm/test-0".into()], vec![]);
    let err = report.result.expect_err("conflict").to_string();
    for part in ["control-2", "4242", "20261130T080000Z-beef", "cradle unlock"] {
        assert!(err.contains(part), "missing {part}: {err}");
    }
    assert_eq!(
        env.locks().holder("vm/test-0").expect("holder").map(|h| h.run_id),
        Some(other.run_id),
        "the foreign lock is untouched"
    );
}

#[test]
fn a_nested_acquire_is_reused_and_held_until_the_outer_release() {
    let env = env();
    let report = env.call("nested", vec![], vec![]);
    let out = report.result.expect("nested").into_array().expect("array");
    assert_eq!(
        out[0].clone().into_string().expect("run id"),
        report.run_id,
        "held by this run after the inner release"
    );
    assert!(out[1].is_unit(), "free after the outer release");
}

#[test]
fn checkpoints_of_the_runs_vms_round_trip_and_others_are_denied() {
    let env = env();
    let vm = ScopedVm { name: "test-0".into(), vmid: 150, ssh: None, owned: false, allow_replacement: false };
    let report = env.call("checkpoints", vec!["test-0".into()], vec![vm.clone()]);
    let out = report.result.expect("checkpoints").into_array().expect("array");
    assert_eq!(out[0].as_int().expect("vmid"), 150);
    assert_eq!(out[1].clone().into_string().expect("stage"), "drive-removal");
    assert!(out[2].is_unit(), "cleared");
    let report = env.call("checkpoints", vec!["prod-db".into()], vec![vm]);
    let err = report.result.expect_err("denied").to_string();
    assert!(err.contains("checkpoint: VM `prod-db` is not a VM of this call"), "{err}");
}

#[test]
fn a_runaway_script_stops_at_the_configured_operations_limit() {
    let env = env();
    let err = env.call("spin", vec![], vec![]).result.expect_err("stopped").to_string();
    assert!(err.contains("max_operations") && err.contains("100000"), "{err}");
}

#[test]
fn a_lock_outside_the_workflow_grant_is_denied_and_journaled() {
    let env = env();
    let report = env.call("outside_grant", vec![], vec![]);
    let err = report.result.as_ref().expect_err("denied").to_string();
    assert!(err.contains("workflow.grants.lock.prefixes"), "{err}");
    let denied = env
        .journal_events(&report)
        .into_iter()
        .find(|e| e["event"] == "capability_call" && e["outcome"]["result"] == "denied")
        .expect("denial journaled");
    assert_eq!(denied["caller"], "workflow");
    let _ = &env.fixture;
}

#[test]
fn a_script_function_shadowing_a_backend_method_is_refused_at_load() {
    let script = "// plans\nfn plan(vm) { cradle::backend().plan(vm) }\n";
    let fixture = Fixture::new(CONFIG, &[("shadow.rhai", script)]);
    let project = Project::open(&fixture.config(), None).expect("open");
    let err = project.load().expect_err("refused").to_string();
    assert!(err.contains("shadow.rhai:2:1") && err.contains("backend.plan(...)") && err.contains("rename it"), "{err}");
}
