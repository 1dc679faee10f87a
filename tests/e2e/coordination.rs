//! Two control nodes sharing one etcd (`[coordination] backend = "etcd"`) and
//! one cluster (the simulator in its own process), each with its own state
//! directory, as two machines would run cradle: exactly one of them works on
//! a VM at a time, the other is told who holds it; a holder stopped past its
//! lease (SIGSTOP) loses the VM to the other node and, once continued, is
//! refused before its next side effect, so the VM is made exactly once.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cradle_testkit::etcd::Etcd;
use cradle_tests::cradle_bin;
use cradle_tests::fixture::{Cluster, LabInventory, ProjectConfig, Wait};
use cradle_tests::remote_sim::RemoteSim;
use serde_json::Value;

/// One control node: its own project directory and state, the shared cluster and etcd.
struct ControlNode {
    dir: PathBuf,
}

impl ControlNode {
    fn new(root: &Path, name: &str, sim: &RemoteSim, etcd: &Etcd, ttl_s: u64) -> ControlNode {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).expect("node dir");
        ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
            .append(&format!(
                "[coordination]\nbackend = \"etcd\"\nendpoints = [\"{}\"]\nlease_ttl_s = {ttl_s}\nprefix = \"test/\"\n",
                etcd.url
            ))
            .write(&dir);
        LabInventory::new("127.37", 1)
            .count(1)
            .vmid_base(Some(500))
            .nameservers(None)
            .wait(Wait { ssh_ms: 60000, ..Wait::fast() })
            .write(&dir);
        ControlNode { dir }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(cradle_bin());
        cmd.arg("--config").arg(self.dir.join("cradle.toml"));
        cmd.args(["--output", "json", "provision", "-i"]).arg(self.dir.join("inventory"));
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd
    }

    fn provision(&self) -> Output {
        self.command().output().expect("run cradle")
    }

    fn spawn_provision(&self) -> Child {
        self.command().spawn().expect("spawn cradle")
    }

    /// Every journal line of this node's runs.
    fn journal(&self) -> String {
        let Ok(rd) = std::fs::read_dir(self.dir.join("state/runs")) else { return String::new() };
        rd.filter_map(Result::ok).filter_map(|e| std::fs::read_to_string(e.path()).ok()).collect()
    }

    /// Wait until this node's run has taken the VM's lock (the journal's
    /// `lock taken` line, with the fencing token).
    fn wait_for_lock(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.journal().contains("\"lock taken\"") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the run never took its lock; journal:\n{}", self.journal());
    }
}

fn signal(child: &Child, sig: &str) {
    let ok =
        Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig}");
}

fn report(out: &Output) -> (Value, String) {
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let text = format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (doc, text)
}

fn ok(doc: &Value) -> bool {
    doc["ok"] == true
}

fn result(doc: &Value) -> String {
    doc["hosts"][0]["result"].as_str().unwrap_or("").to_string()
}

fn vms_named(sim: &RemoteSim, name: &str) -> usize {
    sim.vms().iter().filter(|v| v["config"]["name"] == name).count()
}

#[test]
fn two_control_nodes_on_one_vm_exactly_one_proceeds_and_the_other_names_the_holder() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().expect("tmp");
    let sim = RemoteSim::start(root.path(), "0");
    let (a, b) = (
        ControlNode::new(root.path(), "node-a", &sim, &etcd, 30),
        ControlNode::new(root.path(), "node-b", &sim, &etcd, 30),
    );
    let first = a.spawn_provision();
    a.wait_for_lock();
    signal(&first, "STOP");
    let (doc, text) = report(&b.provision());
    signal(&first, "CONT");
    assert!(!ok(&doc), "{text}");
    let error = doc["hosts"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("is held by run") && error.contains("cradle unlock"), "node b names the holder: {text}");
    let (doc, text) = report(&first.wait_with_output().expect("node a"));
    assert_eq!(result(&doc), "created", "node a finishes: {text}");
    assert_eq!(vms_named(&sim, "vm-0"), 1, "exactly one VM");
    let (doc, text) = report(&b.provision());
    assert_eq!(result(&doc), "skipped", "node b then finds it complete: {text}");
}

#[test]
fn a_holder_stopped_past_its_lease_is_refused_before_its_next_side_effect_and_the_vm_is_made_once() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().expect("tmp");
    let sim = RemoteSim::start(root.path(), "0");
    let (a, b) = (
        ControlNode::new(root.path(), "node-a", &sim, &etcd, 2),
        ControlNode::new(root.path(), "node-b", &sim, &etcd, 2),
    );
    let first = a.spawn_provision();
    a.wait_for_lock();
    signal(&first, "STOP");
    // Past the lease: etcd drops node a's lock, node b takes the VM and makes it.
    std::thread::sleep(Duration::from_millis(3500));
    let (doc, text) = report(&b.provision());
    assert_eq!(result(&doc), "created", "node b takes over: {text}");
    signal(&first, "CONT");
    let (doc, text) = report(&first.wait_with_output().expect("node a"));
    assert!(!ok(&doc), "node a must not go on: {text}");
    let error = doc["hosts"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("was lost") && error.contains("stops before its next side effect"), "{text}");
    assert_eq!(vms_named(&sim, "vm-0"), 1, "exactly one VM");
    assert!(a.journal().contains("was lost"), "node a's journal records the refused call");
}
