//! Sandbox tests: a hostile plugin tries to escape or exhaust the host. Each
//! attempt fails with its documented error while the host keeps serving.

use cradle::project::{Project, RunReport, RunRequest};
use cradle_tests::{Fixture, Harness, PROBE_RHAI, VM_SPEC_RHAI};

const CONFIG: &str = r#"
default_environment = "test"
state_dir = "state"
[workflow.grants.lock]
prefixes = ["*"]
[clusters.sim]
kind = "sim"
[environments.test]
cluster = "sim"
backend = "hostile"
[environments.sample]
cluster = "sim"
backend = "sample"
[plugins.hostile]
path = "@HOSTILE@"
memory_limit_mib = 32
timeout_ms = 300
[plugins.hostile.grants.proxmox]
nodes = ["pve1"]
vmids = "100-199"
[plugins.hostile.grants.lock]
prefixes = ["vm/"]
[plugins.hostile.grants.ssh]
hosts = ["guests"]
[plugins.hostile.grants.dns]
zones = []
[plugins.hostile.grants.checkpoint]
[plugins.hostile.grants.terraform]
module_root = "terraform"
[plugins.hostile.grants.http]
endpoints = []
[plugins.sample]
path = "@SAMPLE@"
"#;

/// What the test script adds to [`PROBE_RHAI`].
const SCRIPT: &str = r#"
fn plan_lines(name) {
    cradle::backend().plan(spec::vm(name)).summary.len()
}
"#;

type Env = Harness;

fn env_with(config: &str) -> Env {
    Harness::new(config, &[("sandbox.rhai", &format!("{PROBE_RHAI}{SCRIPT}")), ("lib/vm.rhai", VM_SPEC_RHAI)])
}

fn env() -> Env {
    env_with(CONFIG)
}

/// The sandbox workflow's calls, on the shared harness.
trait Sandbox {
    fn call(&self, env: &str, func: &str, args: Vec<rhai::Dynamic>) -> RunReport;
    fn probe(&self, name: &str, extra: &str) -> Result<String, String>;
    fn benign_call_still_works(&self);
}

impl Sandbox for Env {
    fn call(&self, env: &str, func: &str, args: Vec<rhai::Dynamic>) -> RunReport {
        self.run(RunRequest {
            env: Some(env.into()),
            script: "sandbox".into(),
            func: func.into(),
            args,
            ..Default::default()
        })
    }

    fn probe(&self, name: &str, extra: &str) -> Result<String, String> {
        let report = self.call("test", "probe", vec![name.into(), extra.into()]);
        match report.result {
            Ok(v) if v.is_unit() => Ok("()".into()),
            Ok(v) => Ok(v.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn benign_call_still_works(&self) {
        assert_eq!(self.probe("benign", "").expect("benign call after a failure"), "()");
    }
}

#[test]
fn a_plugin_cannot_read_host_files() {
    let env = env();
    let err = env.probe("read-passwd", "").expect_err("must not read /etc/passwd");
    assert!(!err.contains("root:"), "host file content leaked: {err}");
    assert!(err.contains("/etc/passwd"), "{err}");
    let err = env.probe("list-root", "").expect_err("must not list /");
    assert!(err.contains("read_dir /"), "{err}");
    env.benign_call_still_works();
}

#[test]
fn a_plugin_sees_no_inherited_environment() {
    let env = env();
    assert!(std::env::vars().count() > 0, "the test process itself has an environment");
    let out = env.probe("env", "").expect("env probe");
    assert!(out.contains("0 env vars"), "{out}");
}

#[test]
fn a_plugin_cannot_open_a_socket() {
    let env = env();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr").to_string();
    let err = env.probe("socket", &addr).expect_err("connect must fail");
    assert!(err.contains(&format!("connect {addr}")), "{err}");
    assert!(listener.accept().is_err(), "the plugin reached the listener");
}

#[test]
fn a_proxmox_call_outside_the_vmid_grant_is_denied_and_journaled() {
    let env = env();
    let report = env.call("test", "probe", vec!["out-of-scope".into(), "".into()]);
    let err = report.result.expect_err("denied").to_string();
    assert!(err.contains("proxmox: vmid 5000 is outside plugins.hostile.grants.proxmox.vmids = \"100-199\""), "{err}");
    let journal = std::fs::read_to_string(&report.journal).expect("journal");
    let denial = journal
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json line"))
        .find(|e| e["event"] == "capability_call" && e["outcome"]["result"] == "denied")
        .unwrap_or_else(|| panic!("no denial in the journal:\n{journal}"));
    assert_eq!(denial["caller"], "hostile");
    assert_eq!(denial["capability"], "proxmox");
    assert_eq!(denial["function"], "vm-status");
    assert!(denial["outcome"]["scope"].as_str().unwrap_or("").contains("vmid 5000"), "{denial}");
}

#[test]
fn a_lock_key_outside_the_plugin_prefixes_is_denied() {
    let env = env();
    let err = env.probe("lock", "other/key").expect_err("denied");
    assert!(
        err.contains("lock: key `other/key` does not start with a prefix in plugins.hostile.grants.lock.prefixes"),
        "{err}"
    );
    let ok = env.probe("lock", "vm/test-0").expect("granted prefix");
    assert!(ok.contains("name"), "{ok}");
}

#[test]
fn an_endless_loop_is_stopped_by_the_deadline() {
    let env = env();
    let err = env.probe("loop", "").expect_err("must be stopped");
    assert!(err.contains("timeout") && err.contains("timeout_ms in [plugins.hostile]"), "{err}");
    env.benign_call_still_works();
}

#[test]
fn memory_past_the_limit_traps_with_the_limit_named() {
    let env = env();
    let err = env.probe("alloc", "").expect_err("must trap");
    assert!(err.contains("memory limit") && err.contains("32 MiB"), "{err}");
    env.benign_call_still_works();
}

#[test]
fn malformed_values_from_a_plugin_are_rejected() {
    let env = env();
    let err = env.probe("malformed", "").expect_err("must be rejected");
    assert!(err.to_lowercase().contains("utf-8"), "{err}");
    env.benign_call_still_works();
}

#[test]
fn a_panicking_plugin_reports_its_panic_message() {
    let env = env();
    let err = env.probe("panic", "").expect_err("trap");
    assert!(err.contains("hostile plugin panicked on purpose"), "{err}");
    env.benign_call_still_works();
}

#[test]
fn a_plugin_importing_an_ungranted_interface_is_refused_before_instantiation() {
    let config = CONFIG.replace("[plugins.hostile.grants.proxmox]\nnodes = [\"pve1\"]\nvmids = \"100-199\"\n", "");
    let fixture =
        Fixture::new(&config, &[("sandbox.rhai", &format!("{PROBE_RHAI}{SCRIPT}")), ("lib/vm.rhai", VM_SPEC_RHAI)]);
    let project = Project::open(&fixture.config(), None).expect("open");
    let err = project.load().expect_err("refused").to_string();
    assert!(
        err.contains("plugin `hostile` imports `cradle:host/proxmox@0.1.0`, which is not granted")
            && err.contains("[plugins.hostile.grants.proxmox]"),
        "{err}"
    );
}

#[test]
fn the_host_keeps_serving_other_runs_while_a_plugin_loops() {
    let env = env();
    std::thread::scope(|s| {
        let looping = s.spawn(|| env.probe("loop", ""));
        let planned = s.spawn(|| env.call("sample", "plan_lines", vec!["test-1".into()]));
        assert!(looping.join().expect("thread").is_err());
        let report = planned.join().expect("thread");
        assert!(report.result.expect("sample plan ran beside the loop").as_int().expect("int") >= 2);
    });
    let _ = &env.fixture;
}
