//! Hardening: lock and ssh capability holes (issue 8, items 5, 6, 10, 11, 15).
//!
//! The hostile plugin runs `lock:*` and `ssh:*` attacks (see
//! `tests/plugins/hostile/src/attacks/{lock,ssh}.rs`) against an in-process
//! simulated cluster; each must come back `denied`, naming the capability and
//! the grant, and be journaled. The lock-key test drives the binary: kill,
//! unlock, rerun on `kind = "sim"`.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

use cradle::caps::policy::{ScopedVm, SshLogin};
use cradle::project::{RunReport, RunRequest};
use cradle_tests::fixture::{Cluster, LabInventory, ProjectConfig, SimCluster, Wait};
use cradle_tests::{Harness, PROBE_RHAI, VM_SPEC_RHAI, cradle_bin};

const CONFIG: &str = r#"
default_environment = "test"
state_dir = "state"
[workflow.grants.lock]
prefixes = ["*"]
[workflow.grants.ssh]
hosts = ["guests", "nodes"]
upload_dirs = ["/var/lib/vz/snippets"]
[clusters.sim]
kind = "sim"
[clusters.sim.sim]
nodes = ["pve1", "pve2"]
time_scale = 0.0
[environments.test]
cluster = "sim"
backend = "hostile"
[plugins.hostile]
path = "@HOSTILE@"
memory_limit_mib = 64
timeout_ms = 5000
[plugins.hostile.grants.proxmox]
nodes = ["pve1", "pve2"]
vmids = "100-199"
storages = ["local-lvm"]
[plugins.hostile.grants.lock]
prefixes = ["*"]
[plugins.hostile.grants.ssh]
hosts = ["guests", "nodes"]
upload_dirs = ["/var/lib/vz/snippets"]
[plugins.hostile.grants.dns]
zones = []
[plugins.hostile.grants.checkpoint]
[plugins.hostile.grants.terraform]
module_root = "terraform"
[plugins.hostile.grants.http]
endpoints = []
"#;

/// What the test script adds to [`PROBE_RHAI`].
const SCRIPT: &str = r#"
// Hold the VM lock as provision.rhai does, let the plugin attack it with the
// key, then report what the attack got, whether the lock was still held after
// it, and whether the workflow's one release then freed it (its nesting count
// untouched).
fn locked(attack) {
    let key = cradle::lock_key("test-0");
    lock::acquire(key);
    let outcome = "";
    try { outcome = `achieved: ${probe(attack, key)}`; } catch (e) { outcome = `${e}`; }
    let held = type_of(lock::holder(key)) != "()";
    lock::release(key);
    let free = type_of(lock::holder(key)) == "()";
    #{ outcome: outcome, held: held, free: free }
}
// The attack `name` under the lock of VM `name` (the run owns that guest).
fn owned(name, extra) {
    lock::acquire(cradle::lock_key(name));
    probe(name, extra)
}
"#;

fn harness() -> Harness {
    Harness::new(CONFIG, &[("attack.rhai", &format!("{PROBE_RHAI}{SCRIPT}")), ("lib/vm.rhai", VM_SPEC_RHAI)])
}

fn call(h: &Harness, func: &str, args: Vec<rhai::Dynamic>, vms: Vec<ScopedVm>) -> RunReport {
    h.run(RunRequest {
        env: Some("test".into()),
        script: "attack".into(),
        func: func.into(),
        args,
        vms,
        ..Default::default()
    })
}

/// A guest of the run, as the inventory gives it.
fn guest(name: &str) -> ScopedVm {
    ScopedVm {
        name: name.into(),
        vmid: 150,
        ssh: Some(SshLogin { host: "127.0.10.5".into(), port: 22, user: "cradle".into() }),
        owned: false,
        allow_replacement: false,
    }
}

fn probe(h: &Harness, attack: &str, extra: &str, vms: Vec<ScopedVm>) -> (Result<String, String>, RunReport) {
    let report = call(h, "probe", vec![attack.into(), extra.into()], vms);
    let result = match &report.result {
        Ok(v) => Ok(v.to_string()),
        Err(e) => Err(e.to_string()),
    };
    (result, report)
}

/// The journal's denial of `function`, checked to name the plugin and `capability`.
fn journaled_denial(report: &RunReport, capability: &str, function: &str) -> String {
    let events = cradle_tests::journal_events(&report.journal);
    let denial = events
        .iter()
        .find(|e| e["event"] == "capability_call" && e["outcome"]["result"] == "denied" && e["function"] == function)
        .unwrap_or_else(|| panic!("no denial of {function} in the journal: {events:#?}"));
    assert_eq!(denial["caller"], "hostile", "{denial}");
    assert_eq!(denial["capability"], capability, "{denial}");
    denial["outcome"]["scope"].as_str().unwrap_or_default().to_string()
}

/// `user@host:port` of node `node` of the harness's simulator (started by a first run).
fn node_login(h: &Harness, node: &str) -> (String, std::path::PathBuf) {
    let _ = probe(h, "benign", "", Vec::new());
    let sim = h.project.sims.get("sim").expect("the simulator runs");
    let addr = sim.node_ssh_addr(node).expect("node address");
    (format!("root@{}:{}", addr.ip(), addr.port()), sim.root().join("nodes").join(node))
}

#[test]
fn a_plugin_releasing_the_workflows_vm_lock_is_denied_and_the_lock_stays_held() {
    let h = harness();
    let report = call(&h, "locked", vec!["lock:release".into()], Vec::new());
    let out = report.result.as_ref().expect("the workflow ran").clone().cast::<rhai::Map>();
    let outcome = out["outcome"].to_string();
    assert!(
        outcome.contains("lock: release of `sim://sim|test-0`: this plugin did not acquire it in this run"),
        "{outcome}"
    );
    assert!(out["held"].as_bool().expect("bool"), "the workflow's lock survived the attack: {out:?}");
    assert!(out["free"].as_bool().expect("bool"), "the workflow's single release freed it: {out:?}");
    let scope = journaled_denial(&report, "lock", "release");
    assert!(scope.contains("did not acquire it"), "{scope}");
}

#[test]
fn a_plugin_cannot_unnest_the_workflows_lock_by_releasing_twice() {
    let h = harness();
    let report = call(&h, "locked", vec!["lock:unnest".into()], Vec::new());
    let out = report.result.as_ref().expect("the workflow ran").clone().cast::<rhai::Map>();
    assert!(out["outcome"].to_string().contains("this plugin did not acquire it in this run"), "{out:?}");
    assert!(out["held"].as_bool().expect("bool"), "still held after the plugin's extra release: {out:?}");
    assert!(out["free"].as_bool().expect("bool"), "the workflow's count was untouched: {out:?}");
    journaled_denial(&report, "lock", "release");
    // A key the plugin takes itself is its own to release.
    let report = call(&h, "locked", vec!["lock:own".into()], Vec::new());
    let out = report.result.as_ref().expect("ran").clone().cast::<rhai::Map>();
    assert!(out["outcome"].to_string().starts_with("achieved"), "{out:?}");
    assert!(out["held"].as_bool().expect("bool") && out["free"].as_bool().expect("bool"), "{out:?}");
}

#[test]
fn a_plugin_replacing_a_pinned_node_host_key_is_denied_and_the_pin_is_kept() {
    let h = harness();
    let (login, _) = node_login(&h, "pve1");
    let known_hosts = h.fixture.state().join("known_hosts");
    let before = std::fs::read_to_string(&known_hosts).expect("the node key is pinned");
    let (result, report) = probe(&h, "ssh:replace-key", &login, Vec::new());
    let err = result.expect_err("denied");
    let host = login.split('@').nth(1).and_then(|r| r.split(':').next()).expect("host");
    assert!(err.contains(&format!("ssh: host-key trust of `{host}` is operator-only: it is a cluster node")), "{err}");
    assert!(journaled_denial(&report, "ssh", "forget-host-key").contains("cluster node"));
    assert_eq!(std::fs::read_to_string(&known_hosts).expect("known_hosts"), before, "the node's pin is unchanged");
}

#[test]
fn a_plugin_pins_a_guest_host_key_only_when_its_run_owns_the_guest() {
    let h = harness();
    let known_hosts = h.fixture.state().join("known_hosts");
    let (result, report) = probe(&h, "ssh:trust", "cradle@127.0.10.5:22", vec![guest("ssh:trust")]);
    let err = result.expect_err("not owned: denied");
    assert!(err.contains("this run does not hold the VM's lock"), "{err}");
    journaled_denial(&report, "ssh", "trust-host-key");
    let pinned = std::fs::read_to_string(&known_hosts).unwrap_or_default();
    assert!(!pinned.contains("127.0.10.5"), "nothing pinned: {pinned}");
    // Another host than the guest's (a literal address the run never created).
    let (result, _) = probe(&h, "ssh:trust", "root@127.0.99.9:22", vec![guest("ssh:trust")]);
    assert!(result.expect_err("denied").contains("`127.0.99.9:22` is operator-only"));
    // Under the VM's lock the run owns the guest: the plugin may pin its key.
    let report = call(&h, "owned", vec!["ssh:trust".into(), "cradle@127.0.10.5:22".into()], vec![guest("ssh:trust")]);
    let pinned = report.result.expect("an owned guest's key may be pinned");
    assert!(pinned.to_string().contains("pinned a key for 127.0.10.5:22"), "{pinned}");
    assert!(std::fs::read_to_string(&known_hosts).expect("known_hosts").contains("127.0.10.5"));
}

#[test]
fn ssh_to_a_guest_with_another_user_or_port_than_the_inventorys_is_denied() {
    let h = harness();
    for login in ["root@127.0.10.5:33599", "root@127.0.10.5:22", "cradle@127.0.10.5:33599"] {
        let (result, report) = probe(&h, "ssh:exec", login, vec![guest("ssh:exec")]);
        let err = result.expect_err("denied");
        assert!(
            err.contains(&format!("ssh: `{login}` is not a granted login: plugins.hostile.grants.ssh.hosts allows 127.0.10.5 only as the guest ssh:exec as cradle@127.0.10.5:22")),
            "{login}: {err}"
        );
        assert!(journaled_denial(&report, "ssh", "exec").contains(login));
    }
}

#[test]
fn an_upload_through_a_symlink_in_the_snippets_dir_of_a_simulated_node_is_denied() {
    let h = harness();
    let (login, root) = node_login(&h, "pve1");
    let snippets = root.join("var/lib/vz/snippets");
    let images = root.join("var/lib/vz/images");
    std::fs::create_dir_all(&snippets).expect("snippets");
    std::fs::create_dir_all(&images).expect("images");
    // On the node, the absolute target is the node's own /var/lib/vz/images.
    std::os::unix::fs::symlink("/var/lib/vz/images", snippets.join("evil")).expect("plant the symlink");
    let (result, report) = probe(&h, "ssh:upload", &format!("{login}|/var/lib/vz/snippets/evil/x.yaml"), Vec::new());
    let err = result.expect_err("denied");
    assert!(
        err.contains("/var/lib/vz/snippets/evil resolves to /var/lib/vz/images on the remote host, outside the granted directory /var/lib/vz/snippets")
            && err.contains("plugins.hostile.grants.ssh.upload_dirs"),
        "{err}"
    );
    assert!(journaled_denial(&report, "ssh", "upload").contains("resolves to /var/lib/vz/images"));
    assert!(!images.join("x.yaml").exists(), "nothing was written outside the snippets dir");
    // The snippets dir itself still takes uploads.
    let (result, _) = probe(&h, "ssh:upload", &format!("{login}|/var/lib/vz/snippets/ok.yaml"), Vec::new());
    result.expect("an upload into the granted dir");
    assert_eq!(std::fs::read(snippets.join("ok.yaml")).expect("written"), b"pwned");
}

fn cradle(dir: &std::path::Path, args: &[&str], crash_at: Option<&str>) -> Output {
    let mut cmd = Command::new(cradle_bin());
    cmd.arg("--config").arg(dir.join("cradle.toml")).args(args).env_remove("CRADLE_CRASH_AT");
    if let Some(at) = crash_at {
        cmd.env("CRADLE_CRASH_AT", at);
    }
    cmd.output().expect("run cradle")
}

fn show(o: &Output) -> String {
    format!(
        "{:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Item 15: on `kind = "sim"` the workflow's lock key is the stable
/// `sim://NAME|VM`, not the simulator's ephemeral API port. So after a kill
/// the next cradle process finds the dead run's lock under the same key:
/// `cradle unlock` removes it; after a second kill a plain rerun takes it back
/// itself (its holder is provably gone: this host, that pid not running) and
/// says so naming the key; the rerun converges, and a further unlock exits
/// non-zero: there is nothing to unlock. (A live holder's exclusion is
/// `caps::lock` tests' and `coordination`'s.)
#[test]
fn on_a_simulated_cluster_kill_then_unlock_then_rerun_converges_and_the_lock_excludes() {
    let dir = tempfile::tempdir().expect("tempdir");
    ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0))).write(dir.path());
    let inv = LabInventory::new("127.36", 1).count(1).vmid_base(Some(300)).wait(Wait::fast()).write(dir.path());
    let inv = inv.display().to_string();
    let lab = LabInventory::new("127.36", 1);
    let vm = lab.name(0);
    let provision =
        |crash: Option<&str>| cradle(dir.path(), &["--output", "json", "provision", "-i", &inv, "--limit", &vm], crash);
    let killed = provision(Some(&format!("before:snippets@{vm}")));
    assert_eq!(killed.status.signal(), Some(9), "cradle died of SIGKILL: {}", show(&killed));
    let unlock = cradle(dir.path(), &["unlock", &vm], None);
    assert!(unlock.status.success(), "unlock finds the killed run's lock: {}", show(&unlock));
    assert!(String::from_utf8_lossy(&unlock.stdout).contains("removed the stale lock"), "{}", show(&unlock));
    let killed = provision(Some(&format!("before:snippets@{vm}")));
    assert_eq!(killed.status.signal(), Some(9), "cradle died of SIGKILL again: {}", show(&killed));
    let rerun = provision(None);
    assert!(rerun.status.success(), "the rerun converges: {}", show(&rerun));
    let said = String::from_utf8_lossy(&rerun.stderr);
    assert!(
        said.contains("took back lock") && said.contains(&format!("sim://sim|{vm}`")),
        "the rerun took back the dead run's lock under the stable key: {}",
        show(&rerun)
    );
    let again = cradle(dir.path(), &["unlock", &vm], None);
    assert_eq!(again.status.code(), Some(1), "nothing to unlock is an error: {}", show(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains(&format!("nothing to unlock: {vm} is not locked (lock key `sim://sim|{vm}`)")),
        "{}",
        show(&again)
    );
}
