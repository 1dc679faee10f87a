//! Two control nodes sharing one etcd (`[coordination] backend = "etcd"`) and
//! one cluster (the simulator in its own process), each with its own state
//! directory, as two machines would run cradle: exactly one of them works on
//! a VM at a time, the other is told who holds it; a holder stopped past its
//! lease (SIGSTOP) loses the VM to the other node and, once continued, is
//! refused before its next side effect, so the VM is made exactly once; a
//! holder killed mid-run leaves its checkpoint and creation record in etcd,
//! so the other node finishes the VM exactly once after the lease, with the
//! same guest host key; etcd never holds that key in clear.
//!
//! Also: building cradle needs no `protoc` (etcd is spoken through its JSON
//! gateway, not a generated gRPC client).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cradle_testkit::etcd::{Etcd, EtcdCluster};
use cradle_tests::fixture::{Cluster, LabInventory, ProjectConfig, Wait};
use cradle_tests::remote_sim::RemoteSim;
use cradle_tests::{cradle_bin, wait_stopped};
use serde_json::Value;

/// The records key, a canary: it must never show up in output or journals.
const RECORDS_KEY: &str = "CANARY-records-key-5f1d0c9a7b3e4d2f8a6c1b0e9d8c7b6a";

/// An etcd, a simulated cluster and two control nodes with one VM (`vm-0`,
/// VMID 500) on `127.37.<subnet>.10`, locks leased for `ttl_s`.
struct TwoNodes {
    etcd: Etcd,
    sim: RemoteSim,
    a: ControlNode,
    b: ControlNode,
    /// Dropped last: the processes above stop before their files go.
    _root: tempfile::TempDir,
}

impl TwoNodes {
    fn start(ttl_s: u64, subnet: u8) -> TwoNodes {
        let etcd = Etcd::start();
        let root = tempfile::tempdir().expect("tmp");
        let sim = RemoteSim::start(root.path(), "0");
        let a = ControlNode::new(root.path(), "node-a", &sim, &etcd, ttl_s, subnet);
        let b = ControlNode::new(root.path(), "node-b", &sim, &etcd, ttl_s, subnet);
        TwoNodes { etcd, sim, a, b, _root: root }
    }
}

/// One control node: its own project directory and state, the shared cluster and etcd.
struct ControlNode {
    dir: PathBuf,
}

impl ControlNode {
    /// `subnet`: the guest's addresses (`127.37.<subnet>.x`), one per test, as
    /// the tests run side by side.
    fn new(root: &Path, name: &str, sim: &RemoteSim, etcd: &Etcd, ttl_s: u64, subnet: u8) -> ControlNode {
        Self::with_vms(root, name, sim, std::slice::from_ref(&etcd.url), ttl_s, subnet, 1, Some(500))
    }

    /// `count` VMs, VMIDs from `vmid_base` (none: probed under the allocation lock).
    #[allow(clippy::too_many_arguments, reason = "a test fixture; each argument is one knob of the scenario")]
    fn with_vms(
        root: &Path,
        name: &str,
        sim: &RemoteSim,
        endpoints: &[String],
        ttl_s: u64,
        subnet: u8,
        count: usize,
        vmid_base: Option<u32>,
    ) -> ControlNode {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).expect("node dir");
        let key_file = root.join("records.key");
        if !key_file.exists() {
            cradle_testkit::bind::write_secret(&key_file, RECORDS_KEY);
        }
        ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
            .append(&format!(
                "[coordination]\nbackend = \"etcd\"\nendpoints = {endpoints:?}\nlease_ttl_s = {ttl_s}\nprefix = \"test/\"\n\
                 records_key = {{ file = \"{}\" }}\n",
                key_file.display()
            ))
            .write(&dir);
        LabInventory::new("127.37", subnet)
            .count(count)
            .vmid_base(vmid_base)
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

    /// Provision again and again while another node's lock (its lease not
    /// yet expired in etcd) refuses it, up to a minute; the first other answer.
    fn provision_once_the_lease_ends(&self) -> (Value, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (doc, text) = report(&self.provision());
            let held = doc["hosts"][0]["error"].as_str().is_some_and(|e| e.contains("is held by run"));
            if !held || Instant::now() > deadline {
                return (doc, text);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Provision with `CRADLE_CRASH_AT=at`: killed with SIGKILL there.
    fn provision_killed_at(&self, at: &str) -> Output {
        self.command().env("CRADLE_CRASH_AT", at).output().expect("run cradle")
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
    let nodes = TwoNodes::start(30, 1);
    let (sim, a, b) = (&nodes.sim, &nodes.a, &nodes.b);
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
    assert_eq!(vms_named(sim, "vm-0"), 1, "exactly one VM");
    let (doc, text) = report(&b.provision());
    assert_eq!(result(&doc), "skipped", "node b then finds it complete: {text}");
}

#[test]
fn a_holder_stopped_past_its_lease_is_refused_before_its_next_side_effect_and_the_vm_is_made_once() {
    let nodes = TwoNodes::start(5, 2);
    let (sim, a, b) = (&nodes.sim, &nodes.a, &nodes.b);
    // Node a freezes itself between two calls, right after it took the lock
    // and wrote the VM's creation record.
    let first = a
        .command()
        .env("CRADLE_CRASH_AT", "before:snippets@vm-0")
        .env("CRADLE_CRASH_SIGNAL", "STOP")
        .spawn()
        .expect("a");
    wait_stopped(&first);
    // Past the lease: etcd drops node a's lock, node b takes the VM and makes it.
    let (doc, text) = b.provision_once_the_lease_ends();
    assert_eq!(result(&doc), "created", "node b takes over: {text}");
    signal(&first, "CONT");
    let (doc, text) = report(&first.wait_with_output().expect("node a"));
    assert!(!ok(&doc), "node a must not go on: {text}");
    let error = doc["hosts"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("was lost") && error.contains("stops before its next side effect"), "{text}");
    assert_eq!(vms_named(sim, "vm-0"), 1, "exactly one VM");
    assert!(a.journal().contains("was lost"), "node a's journal records the refused call");
}

/// Every key and value under the test prefix in etcd, as text.
fn etcd_dump(etcd: &Etcd) -> String {
    let config = cradle::caps::coordination::CoordinationConfig {
        backend: cradle::caps::coordination::CoordinationBackend::Etcd,
        endpoints: vec![etcd.url.clone()],
        ..Default::default()
    };
    let conn =
        cradle::caps::coordination::etcd::EtcdConn::connect(&config, std::path::Path::new("/")).expect("connect");
    conn.list("test/", "dump")
        .expect("list")
        .into_iter()
        .map(|(k, v)| format!("{k} = {}\n", String::from_utf8_lossy(&v)))
        .collect()
}

/// Node a is killed at `at`; node b is refused while a's lease lives, then
/// takes over and ends with `want`: one VM, nothing left in etcd, the key
/// never in clear and the records key nowhere.
fn killed_holder_then_other_node(at: &str, want: &str, seen_in_etcd: &str, subnet: u8) {
    let nodes = TwoNodes::start(5, subnet);
    let (etcd, sim, a, b) = (&nodes.etcd, &nodes.sim, &nodes.a, &nodes.b);
    let killed = a.provision_killed_at(at);
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&killed.status), Some(9), "{}", report(&killed).1);
    let shared = etcd_dump(etcd);
    assert!(shared.contains(seen_in_etcd), "node a left {seen_in_etcd} in etcd:\n{shared}");
    assert!(!shared.contains("PRIVATE KEY") && !shared.contains(RECORDS_KEY), "nothing secret in clear:\n{shared}");
    let (doc, text) = report(&b.provision());
    assert!(!ok(&doc), "the dead holder's lease still lives: {text}");
    let (doc, text) = b.provision_once_the_lease_ends();
    assert_eq!(
        result(&doc),
        want,
        "node b finishes the VM from the shared records: {text}\nA known_hosts: {}\nB known_hosts: {}\nB journal: {}",
        std::fs::read_to_string(a.dir.join("state/known_hosts")).unwrap_or_default(),
        std::fs::read_to_string(b.dir.join("state/known_hosts")).unwrap_or_default(),
        b.journal()
    );
    assert_eq!(vms_named(sim, "vm-0"), 1, "exactly one VM");
    let vm = sim.vms().into_iter().find(|v| v["config"]["name"] == "vm-0").expect("vm-0");
    assert!(vm["config"].get("ide2").is_none_or(|d| !d.to_string().contains("cloudinit")), "finalized: {vm}");
    let left = etcd_dump(etcd);
    assert!(!left.contains("checkpoints/") && !left.contains("creation/") && !left.contains("locks/"), "{left}");
    let (doc, text) = report(&a.provision());
    assert_eq!(result(&doc), "skipped", "node a's rerun finds it complete: {text}");
    for node in [&a, &b] {
        assert!(!node.journal().contains(RECORDS_KEY), "the records key is not journaled");
    }
}

#[test]
fn a_holder_killed_during_finalization_leaves_it_to_the_other_node_which_finishes_it_once() {
    killed_holder_then_other_node("before:reboot@vm-0", "finalized", "test/checkpoints/vm-0", 3);
}

#[test]
fn a_creation_killed_on_one_node_is_resumed_on_the_other_with_the_same_guest_host_key() {
    // The guest boots with the key node a sealed into the record; node b
    // re-renders the same snippets and pins the same key, or SSH would refuse.
    killed_holder_then_other_node("after:create@vm-0", "created", "\"host_key_sealed\"", 4);
}

#[test]
fn a_holder_killed_after_its_snippets_went_leaves_the_guest_key_in_the_shared_checkpoint() {
    // The creation record went with the snippets; the checkpoint still
    // carries the guest's public key, which node b pins before connecting.
    killed_holder_then_other_node("before:checkpoint-clear@vm-0", "finalized", "\"host_key\":\"ssh-ed25519 ", 5);
}

#[test]
fn a_hundred_vms_provisioned_by_two_control_nodes_at_once_exist_once_each_with_distinct_vmids() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().expect("tmp");
    let sim = RemoteSim::start(root.path(), "0");
    // No VMIDs in the inventory: both nodes probe them, under the shared
    // allocation lock and the shared reservations.
    let (a, b) = (
        ControlNode::with_vms(root.path(), "node-a", &sim, std::slice::from_ref(&etcd.url), 15, 6, 100, None),
        ControlNode::with_vms(root.path(), "node-b", &sim, std::slice::from_ref(&etcd.url), 15, 6, 100, None),
    );
    let both = [
        a.command().args(["--forks", "20"]).spawn().expect("a"),
        b.command().args(["--forks", "20"]).spawn().expect("b"),
    ];
    let mut done = Vec::new();
    for child in both {
        done.push(child.wait_with_output().expect("wait"));
    }
    // A VM is provisioned by one node; the other was told the holder, or found it complete.
    let mut created = 0;
    for out in &done {
        let (doc, text) = report(out);
        for host in doc["hosts"].as_array().unwrap_or_else(|| panic!("{text}")) {
            match host["result"].as_str() {
                Some("created") => created += 1,
                Some("skipped") => {}
                _ => {
                    let error = host["error"].as_str().unwrap_or_default();
                    assert!(error.contains("is held by run"), "only a lock conflict may fail a VM: {host}");
                }
            }
        }
    }
    assert_eq!(created, 100, "every VM created exactly once across both nodes");
    let guests: Vec<Value> = sim.vms().into_iter().filter(|v| v["config"]["template"] != "1").collect();
    assert_eq!(guests.len(), 100, "no duplicate VM");
    let mut names: Vec<String> =
        guests.iter().map(|v| v["config"]["name"].as_str().unwrap_or("").to_string()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 100, "one VM per name");
    let mut vmids: Vec<u64> = guests.iter().filter_map(|v| v["vmid"].as_u64()).collect();
    vmids.sort_unstable();
    vmids.dedup();
    assert_eq!(vmids.len(), 100, "no duplicate VMID");
    // Both nodes now find every VM complete.
    for node in [&a, &b] {
        let (doc, text) = report(&node.command().args(["--forks", "20"]).output().expect("rerun"));
        assert!(ok(&doc), "{text}");
        assert!(doc["hosts"].as_array().expect("hosts").iter().all(|h| h["result"] == "skipped"), "{text}");
    }
}

#[test]
fn losing_the_etcd_quorum_mid_run_stops_the_run_with_a_clear_error_and_never_makes_two_holders() {
    let mut cluster = EtcdCluster::start();
    let root = tempfile::tempdir().expect("tmp");
    let sim = RemoteSim::start(root.path(), "0.2");
    let (a, b) = (
        ControlNode::with_vms(root.path(), "node-a", &sim, &cluster.urls, 5, 7, 1, Some(500)),
        ControlNode::with_vms(root.path(), "node-b", &sim, &cluster.urls, 5, 7, 1, Some(500)),
    );
    let first = a.spawn_provision();
    a.wait_for_lock();
    // Two of three members gone: the third has no quorum and answers nothing.
    cluster.stop_member(0);
    cluster.stop_member(1);
    let (doc, text) = report(&b.provision());
    assert!(!ok(&doc), "no quorum, no lock for node b: {text}");
    assert!(
        text.contains("etcd") && text.contains(&cluster.urls[2]),
        "node b's error names etcd and its endpoints: {text}"
    );
    let (doc, text) = report(&first.wait_with_output().expect("node a"));
    assert!(!ok(&doc), "node a stops: {text}");
    let error = doc["hosts"][0]["error"].as_str().unwrap_or_default();
    // Whichever comes first: a shared write that etcd cannot take, or the
    // guard seeing the lease lapse.
    assert!(
        error.contains("in etcd at") || error.contains("was lost"),
        "node a says its lock or etcd is gone, naming the endpoints: {text}"
    );
    assert!(vms_named(&sim, "vm-0") <= 1, "never two VMs");
}

#[test]
fn unlock_on_another_node_shows_the_holder_from_etcd_and_refuses_a_live_lease() {
    let nodes = TwoNodes::start(30, 8);
    let (a, b) = (&nodes.a, &nodes.b);
    let first = a.spawn_provision();
    a.wait_for_lock();
    signal(&first, "STOP");
    let out = Command::new(cradle_bin())
        .arg("--config")
        .arg(b.dir.join("cradle.toml"))
        .args(["unlock", "vm-0"])
        .output()
        .expect("unlock");
    signal(&first, "CONT");
    let (_, text) = report(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("vm-0 is locked by run") && text.contains("live etcd lease"), "{text}");
    let (doc, text) = report(&first.wait_with_output().expect("node a"));
    assert_eq!(result(&doc), "created", "the holder goes on: {text}");
}

#[test]
fn the_file_backend_provisions_with_no_etcd_anywhere_on_the_path() {
    let root = tempfile::tempdir().expect("tmp");
    // A PATH with the programs cradle runs, and no etcd.
    let bin = root.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    for program in ["ssh", "ssh-keygen", "sh", "true", "id", "kill", "cloud-init"] {
        let Some(found) = std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .map(|d| Path::new(d).join(program))
            .find(|p| p.is_file())
        else {
            continue;
        };
        std::os::unix::fs::symlink(found, bin.join(program)).expect("symlink");
    }
    assert!(!bin.join("etcd").exists() && !bin.join("etcdctl").exists());
    let project = root.path().join("project");
    let init = Command::new(cradle_bin()).arg("init").arg(&project).env("PATH", &bin).output().expect("init");
    assert!(init.status.success(), "{}", report(&init).1);
    for file in ["inventory/hosts.ini", "inventory/group_vars/all.yml"] {
        let path = project.join(file);
        let body = std::fs::read_to_string(&path).expect("read inventory");
        std::fs::write(&path, body.replace("127.20.0", "127.37.9")).expect("write inventory");
    }
    let out = Command::new(cradle_bin())
        .arg("--config")
        .arg(project.join("cradle.toml"))
        .args(["--output", "json", "provision", "-i"])
        .arg(project.join("inventory"))
        .env("PATH", &bin)
        .output()
        .expect("provision");
    let (doc, text) = report(&out);
    assert!(ok(&doc), "{text}");
    assert!(doc["hosts"].as_array().expect("hosts").iter().all(|h| h["result"] == "created"), "{text}");
}

/// cradle talks to etcd through its JSON gateway, and the test provider's
/// gRPC code is committed: nothing in the workspace's build generates code
/// from `.proto` files, which needs `protoc` (an operator's `cargo install
/// --path host` on a machine with only Rust failed in etcd-client's build
/// script). Read from the resolved dependency graph, so it holds for every
/// crate a plain `cargo build` compiles, without building anything again.
#[test]
fn building_the_workspace_needs_no_protoc() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root");
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["tree", "--workspace", "--locked", "--edges", "normal,build,dev", "--prefix", "none"])
        .args(["--format", "{p}"])
        .current_dir(root)
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    assert!(tree.lines().any(|l| l.starts_with("cradle ")), "the graph lists cradle:\n{tree}");
    let generators: Vec<&str> = tree
        .lines()
        .filter(|l| {
            ["prost-build ", "tonic-build ", "protobuf-codegen ", "protoc-bin-vendored "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    assert!(generators.is_empty(), "build scripts that run protoc: {generators:?}");
}
