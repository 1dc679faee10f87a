//! Provisioning end to end (issue 4): the real workflow (workflows/provision.rhai
//! and workflows/lib), the direct backend and the simulated cluster the project
//! starts in-process, with guests that answer real SSH on loopback.
//!
//! Every test owns a fixture project (cradle.toml, inventory, state dir) and
//! its own loopback subnet 127.31.<n>.0/24 (a prefix no other test uses):
//! simulated guests bind port 22 on the address from their network-data, and
//! tests run in parallel processes.
//! What happened is read from the simulator (request counters, boot ids,
//! snippet dirs, its persisted state.json) and from the state dir
//! (checkpoints, locks), never from timing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use cradle::caps::checkpoint::{CheckpointStore, Finalization};
use cradle::inventory::{Inventory, ResolveOptions, resolve_selected};
use cradle::provision::{Action, Extra, HostResult, run_all};
use cradle_tests::fixture::{
    Cluster, LabInventory, ProjectConfig, SimCluster, SimSession, Wait, assert_ok, error_of, writes,
};
use serde_json::Value;

/// The first VMID of the `lab` group (VMID = base + index in the group).
const VMID_BASE: u32 = 200;

/// How the simulator behaves in one project session.
#[derive(Clone)]
struct Sim {
    scale: f64,
    faults: &'static str,
    seed: u64,
}

impl Sim {
    fn instant() -> Sim {
        Sim { scale: 0.0, faults: "", seed: 1 }
    }
    fn faults(faults: &'static str) -> Sim {
        Sim { scale: 0.0, faults, seed: 1 }
    }
}

/// The inventory of most tests: one VM `vm-0` at VMID [`VMID_BASE`] on node
/// pve2, on 127.31.`subnet`.0/24.
fn hosts(subnet: u8) -> LabInventory {
    LabInventory::new("127.31", subnet).vmid_base(Some(VMID_BASE))
}

/// One fixture project with its own loopback subnet.
struct Lab {
    dir: tempfile::TempDir,
}

/// A project opened on the lab, with the runtime its simulator lives on.
/// Dropping it stops the simulator (guests' sockets included).
struct Session(SimSession);

fn name(i: usize) -> String {
    format!("vm-{i}")
}

fn vmid(i: usize) -> u32 {
    VMID_BASE + i as u32
}

impl Lab {
    fn new(hosts: LabInventory) -> Lab {
        let lab = Lab { dir: tempfile::tempdir().expect("tempdir") };
        hosts.write(lab.dir.path());
        lab
    }

    fn inventory(&self) -> PathBuf {
        self.dir.path().join("inventory")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Write cradle.toml for `sim` and open the project (which starts the
    /// simulator on the lab's state dir at its first run).
    fn open(&self, sim: &Sim) -> Session {
        let cluster =
            SimCluster { faults: Some(sim.faults.into()), seed: Some(sim.seed), ..SimCluster::three_nodes(sim.scale) };
        let config = ProjectConfig::new(Cluster::Sim(cluster)).write(self.dir.path());
        Session(SimSession::open(&config))
    }

    /// The simulator's persisted state (VMs by VMID).
    fn vms(&self) -> BTreeMap<u32, Value> {
        cradle_tests::fixture::sim_vms(&self.state())
    }

    /// The VMs (not templates) named `name`.
    fn vms_named(&self, name: &str) -> Vec<Value> {
        self.vms().into_values().filter(|v| v["config"]["name"] == name && v["config"]["template"] != "1").collect()
    }

    /// VMs that are not templates.
    fn guests(&self) -> Vec<Value> {
        self.vms().into_values().filter(|v| v["config"]["template"] != "1").collect()
    }

    fn checkpoints(&self) -> CheckpointStore {
        CheckpointStore::new(self.state().join("checkpoints"))
    }

    fn checkpoint(&self, vm: &str) -> Option<Finalization> {
        self.checkpoints().read(vm).expect("read checkpoint")
    }

    /// Lock directories left in the state dir.
    fn held_locks(&self) -> Vec<String> {
        cradle_tests::fixture::held_locks(&self.state())
    }
}

impl Session {
    /// `cradle provision` for the hosts matching `limit`, at `forks`.
    fn provision(&self, lab: &Lab, limit: Option<&str>, forks: usize) -> Vec<HostResult> {
        self.0.run(&lab.inventory(), limit, Action::Provision, forks)
    }

    /// `action` for every host of the inventory, at `forks`.
    fn run(&self, lab: &Lab, action: Action, forks: usize) -> Vec<HostResult> {
        self.0.run(&lab.inventory(), None, action, forks)
    }

    /// `cradle remove --yes` for every host.
    fn remove_all(&self, lab: &Lab) -> Vec<HostResult> {
        self.run(lab, Action::Remove, 1)
    }

    fn provision_one(&self, lab: &Lab) -> HostResult {
        let mut results = self.provision(lab, None, 1);
        assert_eq!(results.len(), 1);
        results.remove(0)
    }

    /// Requests the simulator served so far.
    fn counts(&self) -> BTreeMap<String, u64> {
        self.0.counts().expect("the simulator was started by a run")
    }

    fn boot_id(&self, vmid: u32) -> Option<String> {
        self.0.project.sims.get("sim").expect("simulator").guest_boot_id(vmid)
    }

    fn snippets_on(&self, node: &str) -> Vec<String> {
        self.0.snippets_on(node).expect("simulator")
    }
}

fn count(counts: &BTreeMap<String, u64>, key: &str) -> u64 {
    counts.get(key).copied().unwrap_or(0)
}

fn has_cloudinit_drive(vm: &Value) -> bool {
    vm["config"].as_object().is_some_and(|c| {
        c.iter().any(|(k, v)| {
            (k.starts_with("ide") || k.starts_with("sata") || k.starts_with("scsi"))
                && v.as_str().is_some_and(|v| v.contains("cloudinit"))
        })
    })
}

#[test]
fn a_new_vm_is_created_running_on_its_node_finalized_and_cleaned_up() {
    let lab = Lab::new(hosts(1));
    let s = lab.open(&Sim::instant());
    let r = s.provision_one(&lab);
    assert_ok(&r, "created");
    assert_eq!((r.vmid, r.node.as_str()), (Some(vmid(0)), "pve2"));

    let vms = lab.vms_named(&name(0));
    assert_eq!(vms.len(), 1, "exactly one VM named {}", name(0));
    let vm = &vms[0];
    assert_eq!(vm["vmid"], vmid(0));
    assert_eq!(vm["node"], "pve2", "the VM lives on the requested node (cloned on pve1, migrated)");
    assert_eq!(vm["power"], "running");
    assert!(!has_cloudinit_drive(vm), "the cloud-init drive is gone: {}", vm["config"]);
    assert_eq!(vm["pending_delete"], Value::Array(vec![]), "no pending changes left");
    assert_eq!(vm["config"]["onboot"], "1");
    assert!(vm["config"]["startup"].as_str().unwrap_or("").contains("order=10"), "{}", vm["config"]);
    assert!(vm["config"].get("lock").is_none(), "no Proxmox lock left: {}", vm["config"]);

    assert!(s.boot_id(vmid(0)).is_some(), "the guest is up");
    assert_eq!(lab.checkpoint(&name(0)), None, "the checkpoint was cleared");
    assert_eq!(lab.held_locks(), Vec::<String>::new(), "no workflow lock left");
    assert_eq!(s.snippets_on("pve2"), Vec::<String>::new(), "the snippets were deleted from the node");
    let counts = s.counts();
    assert_eq!(count(&counts, "POST /nodes/{node}/qemu/{vmid}/clone"), 1, "{counts:?}");
}

#[test]
fn a_rerun_skips_the_vm_and_writes_nothing_to_the_api() {
    let lab = Lab::new(hosts(2));
    let s = lab.open(&Sim::instant());
    assert_ok(&s.provision_one(&lab), "created");
    let boot = s.boot_id(vmid(0));
    let before = s.counts();

    let r = s.provision_one(&lab);
    assert_ok(&r, "skipped");
    let after = s.counts();
    assert_eq!(writes(&after), writes(&before), "the rerun only read (onboot/startup already match)");
    assert!(after.values().sum::<u64>() > before.values().sum::<u64>(), "the rerun did look at the cluster");
    assert_eq!(s.boot_id(vmid(0)), boot, "the guest was not touched");
    assert_eq!(lab.vms_named(&name(0)).len(), 1);
    assert_eq!(lab.held_locks(), Vec::<String>::new());
}

#[test]
fn two_concurrent_runs_for_one_vm_let_exactly_one_proceed_and_name_the_holder() {
    let lab = Lab::new(hosts(3));
    // Slow enough that the first run still holds the lock when the second asks.
    let s = lab.open(&Sim { scale: 0.05, faults: "", seed: 1 });
    let inv = Arc::new(Inventory::load(&lab.inventory()).expect("inventory"));
    let hosts = inv.select(None).expect("select");
    let opts = ResolveOptions { environment: "test".into(), ..ResolveOptions::default() };
    let plans = resolve_selected(&inv, &hosts, &opts).expect("resolve");
    let loaded = Arc::new(s.0.project.load().expect("load"));
    let run = || {
        run_all(
            s.0.project.clone(),
            loaded.clone(),
            inv.clone(),
            plans.clone(),
            Some("test".into()),
            Action::Provision,
            1,
            Extra::default(),
        )
    };
    let rt = s.0.rt();
    let (a, b) = rt.block_on(async { tokio::join!(run(), run()) });
    let mut all: Vec<HostResult> = a.expect("a").into_iter().chain(b.expect("b")).collect();
    all.sort_by_key(|r| !r.ok());
    let (winner, loser) = (&all[0], &all[1]);
    assert_ok(winner, "created");
    let err = error_of(loser);
    let run_id = winner.run_id.clone().expect("the winner's run id");
    assert!(err.contains("is held by"), "{err}");
    assert!(err.contains(&run_id), "the error names the holder's run {run_id}: {err}");
    assert!(err.contains(&format!("pid {}", std::process::id())), "the error names the holder's pid: {err}");
    assert_eq!(lab.vms_named(&name(0)).len(), 1, "one VM");
    assert_eq!(count(&s.counts(), "POST /nodes/{node}/qemu/{vmid}/clone"), 1, "one clone");
    assert_eq!(lab.held_locks(), Vec::<String>::new(), "both runs released what they held");
}

#[test]
fn twenty_vms_at_ten_forks_all_succeed() {
    let lab = Lab::new(hosts(4).count(20));
    let s = lab.open(&Sim::instant());
    let results = s.provision(&lab, None, 10);
    assert_eq!(results.len(), 20);
    for r in &results {
        assert_ok(r, "created");
    }
    let guests = lab.guests();
    assert_eq!(guests.len(), 20, "twenty VMs, no more");
    let mut ids: Vec<u64> = guests.iter().map(|v| v["vmid"].as_u64().expect("vmid")).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..20).map(|i| u64::from(vmid(i))).collect::<Vec<_>>(), "VMIDs are base + index");
    for v in &guests {
        assert_eq!(v["power"], "running");
        assert!(!has_cloudinit_drive(v), "{}", v["config"]);
    }
    assert!((0..20).all(|i| lab.checkpoint(&name(i)).is_none()), "every checkpoint cleared");
    assert_eq!(lab.held_locks(), Vec::<String>::new());
    assert_eq!(s.snippets_on("pve2"), Vec::<String>::new());
}

/// A cloud-init verdict other than a clean `done` fails the VM, names what to
/// inspect, and neither reboots the guest nor marks it complete, then or on a rerun.
fn cloud_init_failure_is_not_finalized(subnet: u8, fault: &'static str, expected: &str, inspect: &str) {
    let lab = Lab::new(hosts(subnet));
    let s = lab.open(&Sim::faults(fault));
    let r = s.provision_one(&lab);
    let err = error_of(&r);
    for part in [name(0).as_str(), "cloud-init", inspect, expected] {
        assert!(err.contains(part), "the error names `{part}`: {err}");
    }
    assert_eq!(lab.checkpoint(&name(0)), None, "no checkpoint: nothing was marked for finalization");
    let vms = lab.vms_named(&name(0));
    assert_eq!(vms.len(), 1);
    assert!(has_cloudinit_drive(&vms[0]), "the cloud-init drive stays for inspection");
    assert_eq!(vms[0]["pending_delete"], Value::Array(vec![]), "no drive removal pending");
    let counts = s.counts();
    assert_eq!(count(&counts, "POST /nodes/{node}/qemu/{vmid}/status/reboot"), 0, "{counts:?}");
    assert_eq!(count(&counts, "POST /nodes/{node}/qemu/{vmid}/status/start"), 1, "booted once: {counts:?}");
    assert_eq!(lab.held_locks(), Vec::<String>::new(), "the lock was released");

    // A rerun sees the same verdict and still does not reboot.
    let boot = s.boot_id(vmid(0)).expect("the guest is up");
    let again = s.provision_one(&lab);
    assert!(error_of(&again).contains(inspect), "{again:?}");
    assert_eq!(s.boot_id(vmid(0)), Some(boot), "the guest was not rebooted");
    let counts = s.counts();
    assert_eq!(count(&counts, "POST /nodes/{node}/qemu/{vmid}/status/reboot"), 0, "{counts:?}");
    assert_eq!(count(&counts, "POST /nodes/{node}/qemu/{vmid}/clone"), 1, "{counts:?}");
    assert_eq!(lab.checkpoint(&name(0)), None);
}

#[test]
fn removing_a_vm_whose_creation_did_not_finish_deletes_its_snippets_and_creation_record() {
    let lab = Lab::new(hosts(14));
    let s = lab.open(&Sim::faults("cloud-init-error"));
    error_of(&s.provision_one(&lab));
    let record = lab.state().join("checkpoints/creating").join(format!("{}.json", name(0)));
    assert!(record.exists(), "an unfinished creation keeps its record");
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(&record).expect("record")).expect("json");
    let private = rec["host_key_private"].as_str().expect("private key");
    // The key body (not its armor lines) must never reach a journal.
    let canary = private.lines().nth(1).expect("key body");
    for f in std::fs::read_dir(lab.state().join("runs")).expect("runs").filter_map(Result::ok) {
        let text = std::fs::read_to_string(f.path()).expect("journal");
        assert!(!text.contains(canary), "{} holds the guest's private host key", f.path().display());
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&record).expect("meta").permissions().mode() & 0o777, 0o600);
    assert!(s.snippets_on("pve2").iter().any(|f| f.contains(&name(0))), "and its snippets on the node");
    let removed = s.remove_all(&lab);
    assert_ok(&removed[0], "removed");
    assert!(lab.vms_named(&name(0)).is_empty());
    assert!(!record.exists(), "the creation record went with the VM");
    assert_eq!(s.snippets_on("pve2"), Vec::<String>::new(), "the snippets (with the private host key) went too");
}

/// A creation that died before any VM existed (here: the clone task failed
/// and PVE removed the half-made VM) leaves a creation record and snippets.
/// `cradle remove` cleans those up instead of failing with "does not exist".
#[test]
fn removing_a_creation_that_never_produced_a_vm_cleans_up_its_record_and_snippets() {
    let lab = Lab::new(hosts(16));
    let s = lab.open(&Sim::faults("clone-fail"));
    let err = error_of(&s.provision_one(&lab));
    assert!(err.contains("clone"), "{err}");
    assert!(lab.vms_named(&name(0)).is_empty(), "no VM");
    let record = lab.state().join("checkpoints/creating").join(format!("{}.json", name(0)));
    assert!(record.exists(), "the creation record stays for the rerun");
    let removed = s.remove_all(&lab);
    assert_ok(&removed[0], "removed");
    assert!(removed[0].detail.as_deref().unwrap_or("").contains("no VM was ever created"), "{removed:?}");
    assert!(!record.exists(), "the record is gone");
    assert_eq!(s.snippets_on("pve2"), Vec::<String>::new(), "and so are the snippets");
    // Nothing is left: removing again is `absent`, a success, as Ansible's
    // `state: absent` says of a VM already gone.
    let again = s.remove_all(&lab);
    assert_ok(&again[0], "absent");
    assert!(again[0].detail.as_deref().unwrap_or("").contains("nothing to remove"), "{again:?}");
    assert_eq!(lab.held_locks(), Vec::<String>::new(), "the lock is released");
}

#[test]
fn cloud_init_error_fails_without_reboot_or_finalization() {
    cloud_init_failure_is_not_finalized(5, "cloud-init-error", "status `error`", "cloud-init status --long");
}

/// Proxmox stores tags lower-cased, sorted and unique (pve-guest-common
/// `get_unique_tags`, the simulator too). A rerun that resumes a running VM
/// whose creation did not finish compares its config with the spec: tags
/// written as `Web;cradle;web` read back `cradle;web` and are the same setting,
/// not an "incomplete configuration" conflict.
#[test]
fn a_resume_compares_tags_as_proxmox_stores_them_and_raises_no_false_conflict() {
    let config = "vms_config:\n  disk: 12\n  startup_order: 10\n  tags: [Web, cradle, web]\n  network:\n    nic0:\n      \
                  bridge: vmbr0\n      vlan: 20\n      ip: \"{{ ansible_host }}/24\"\n      gateway: 127.31.17.1\n";
    let lab = Lab::new(hosts(17).host_vars(&name(0), config));
    let s = lab.open(&Sim::faults("cloud-init-error"));
    error_of(&s.provision_one(&lab));
    let vms = lab.vms_named(&name(0));
    assert_eq!(vms[0]["config"]["tags"], "cradle;web", "stored as PVE stores them");
    // The VM runs, its creation record says unfinished: the rerun resumes it.
    let err = error_of(&s.provision_one(&lab));
    assert!(!err.contains("configuration is incomplete"), "a false conflict: {err}");
    assert!(err.contains("cloud-init"), "the rerun reached the same cloud-init verdict: {err}");
}

#[test]
fn cloud_init_degraded_fails_without_reboot_or_finalization() {
    // Debian 12's cloud-init 22.4 says `done`: the warning is found in its log.
    cloud_init_failure_is_not_finalized(
        6,
        "cloud-init-degraded",
        "util.py[WARNING]: Invalid cloud-config",
        "inspect /var/log/cloud-init.log",
    );
}

#[test]
fn a_hung_reboot_keeps_the_checkpoint_and_the_rerun_finalizes_without_cloning() {
    let lab = Lab::new(hosts(7).wait(Wait { reboot_attempts: Some(2), ..Wait::fast() }));
    {
        let s = lab.open(&Sim::faults("reboot-hang"));
        let r = s.provision_one(&lab);
        let err = error_of(&r);
        assert!(err.contains(&name(0)) && err.contains("verify-reboot") && err.contains("new boot id"), "{err}");
        let cp = lab.checkpoint(&name(0)).expect("the checkpoint stays after the failed reboot");
        assert_eq!((cp.vmid, cp.stage.as_str()), (vmid(0), "reboot"));
        let vms = lab.vms_named(&name(0));
        assert!(!has_cloudinit_drive(&vms[0]), "the API reboot applied the drive removal: {}", vms[0]["config"]);
        assert_eq!(s.boot_id(vmid(0)), None, "the guest never came back");
        assert_eq!(lab.held_locks(), Vec::<String>::new());
        let counts = s.counts();
        assert_eq!(count(&counts, "POST /nodes/{node}/qemu/{vmid}/clone"), 1);
        assert_eq!(count(&counts, "POST /nodes/{node}/qemu/{vmid}/status/reboot"), 1, "{counts:?}");
    }
    // The fault is gone (the operator fixed the guest); the same state dir.
    let s = lab.open(&Sim::instant());
    let r = s.provision_one(&lab);
    assert_ok(&r, "finalized");
    let counts = s.counts();
    assert_eq!(count(&counts, "POST /nodes/{node}/qemu/{vmid}/clone"), 0, "no clone on the rerun: {counts:?}");
    assert_eq!(lab.checkpoint(&name(0)), None, "the checkpoint was cleared");
    let vms = lab.vms_named(&name(0));
    assert_eq!(vms.len(), 1);
    assert!(!has_cloudinit_drive(&vms[0]));
    assert_eq!(vms[0]["power"], "running");
    assert_eq!(lab.held_locks(), Vec::<String>::new());
}

/// A bad inventory value fails closed before the API sees any write.
fn fails_before_any_side_effect(hosts: LabInventory, expected: &[&str]) {
    let lab = Lab::new(hosts);
    let s = lab.open(&Sim::instant());
    let r = s.provision_one(&lab);
    let err = error_of(&r);
    for part in expected {
        assert!(err.contains(part), "the error names `{part}`: {err}");
    }
    let counts = s.counts();
    assert_eq!(writes(&counts), BTreeMap::new(), "no API writes");
    assert!(lab.guests().is_empty(), "no VM was created");
    assert_eq!(lab.checkpoint(&name(0)), None);
    assert_eq!(lab.held_locks(), Vec::<String>::new());
    for node in ["pve1", "pve2", "pve3"] {
        assert_eq!(s.snippets_on(node), Vec::<String>::new(), "no snippets uploaded to {node}");
    }
}

#[test]
fn a_missing_template_fails_before_any_side_effect() {
    fails_before_any_side_effect(hosts(8).template("debian-13-missing"), &["debian-13-missing", "global_os"]);
}

#[test]
fn a_storage_without_snippets_fails_before_any_side_effect() {
    fails_before_any_side_effect(hosts(9).var("vms_snippet_storage=local-lvm"), &["local-lvm", "snippets"]);
}

#[test]
fn an_unknown_node_fails_before_any_side_effect() {
    fails_before_any_side_effect(hosts(10).target_node("pve9"), &["pve9"]);
}

/// Transient API faults: 500s before the action, `got no worker upid`, and
/// 596s / dropped connections AFTER the action happened (clone included).
/// Two VMs one after the other, so the seeded fault stream is the same on
/// every run.
const TRANSIENT: Sim = Sim { scale: 0.0, faults: "drop-after=0.3,http-596=0.2,api-500=0.05,no-worker=0.1", seed: 7 };

/// Provision `lab` up to `reruns` times under [`TRANSIENT`], checking after
/// every run that no VM exists twice and no lock leaked; true once every VM
/// succeeded.
fn provision_under_transient_faults(lab: &Lab, s: &Session, reruns: usize) -> bool {
    for attempt in 0..reruns {
        let results = s.provision(lab, None, 1);
        for i in 0..2 {
            let vms = lab.vms_named(&name(i));
            assert!(vms.len() <= 1, "attempt {attempt}: a second VM named {}: {vms:?}", name(i));
            assert!(vms.iter().all(|v| v["vmid"] == vmid(i)), "attempt {attempt}: {vms:?}");
        }
        assert!(lab.guests().len() <= 2, "attempt {attempt}: stray VMs: {:?}", lab.guests());
        assert_eq!(lab.held_locks(), Vec::<String>::new(), "attempt {attempt}: a lock leaked");
        if results.iter().all(HostResult::ok) {
            return true;
        }
    }
    false
}

#[test]
fn transient_api_faults_never_yield_a_second_vm() {
    let lab = Lab::new(hosts(11).count(2));
    let s = lab.open(&TRANSIENT);
    provision_under_transient_faults(&lab, &s, 5);
    for i in 0..2 {
        assert_eq!(lab.vms_named(&name(i)).len(), 1, "{} was cloned exactly once", name(i));
    }
    let counts = s.counts();
    assert!(count(&counts, "POST /nodes/{node}/qemu/{vmid}/clone") >= 2, "{counts:?}");
}

#[test]
fn provisioning_converges_after_transient_api_faults() {
    let lab = Lab::new(hosts(13).count(2));
    let s = lab.open(&TRANSIENT);
    assert!(provision_under_transient_faults(&lab, &s, 12), "provisioning converged within the reruns");
    for i in 0..2 {
        let vms = lab.vms_named(&name(i));
        assert_eq!(vms.len(), 1, "exactly one {}", name(i));
        assert_eq!(vms[0]["node"], "pve2");
        assert!(!has_cloudinit_drive(&vms[0]), "{}", vms[0]["config"]);
        assert!(vms[0]["config"]["scsi0"].as_str().unwrap_or("").contains("size=12G"), "{}", vms[0]["config"]);
        assert_eq!(lab.checkpoint(&name(i)), None);
    }
}

#[test]
fn hosts_without_a_vmid_get_distinct_probed_vmids_that_reruns_keep() {
    let lab = Lab::new(hosts(15).count(6).vmid_base(None));
    let s = lab.open(&Sim::instant());
    let planned = s.run(&lab, Action::Check, 6);
    for r in &planned {
        assert_eq!(r.result, "create", "{r:?}");
        assert!(r.detail.as_deref().unwrap_or("").contains("nextid"), "{r:?}");
    }
    let first = s.provision(&lab, None, 6);
    let mut vmids = BTreeMap::new();
    for r in &first {
        assert_ok(r, "created");
        let vmid = r.vmid.expect("the result names the probed VMID");
        assert!((100..=999).contains(&vmid), "inside the grant: {vmid}");
        assert!(vmids.insert(vmid, r.name.clone()).is_none(), "VMID {vmid} given twice: {first:?}");
        let vms = lab.vms_named(&r.name);
        assert_eq!(vms.len(), 1, "exactly one {}", r.name);
        assert_eq!(vms[0]["vmid"].as_u64(), Some(u64::from(vmid)), "{}", vms[0]);
    }
    assert_eq!(lab.guests().len(), 6);
    assert!(lab.state().join("checkpoints/creating").read_dir().map(|d| d.count()).unwrap_or(0) == 0, "no record left");
    let clones = count(&s.counts(), "POST /nodes/{node}/qemu/{vmid}/clone");
    let again = s.provision(&lab, None, 6);
    for r in &again {
        assert_ok(r, "skipped");
        assert_eq!(vmids.get(&r.vmid.expect("vmid")), Some(&r.name), "{} keeps its VMID", r.name);
    }
    assert_eq!(count(&s.counts(), "POST /nodes/{node}/qemu/{vmid}/clone"), clones, "no clone on the rerun");
    assert_eq!(lab.held_locks(), Vec::<String>::new(), "the allocation lock was released");
}

#[test]
fn a_checkpoint_for_another_vmid_blocks_for_review() {
    let lab = Lab::new(hosts(12));
    lab.checkpoints()
        .write(&Finalization {
            vm_name: name(0),
            vmid: 777,
            node: "pve2".into(),
            stage: "reboot".into(),
            written: String::new(),
            fence: None,
            host_key: None,
        })
        .expect("write checkpoint");
    let s = lab.open(&Sim::instant());
    let r = s.provision_one(&lab);
    let err = error_of(&r);
    assert!(err.contains("777") && err.contains("review"), "{err}");
    assert_eq!(writes(&s.counts()), BTreeMap::new(), "nothing was changed");
    assert!(lab.guests().is_empty(), "no VM was created");
    assert_eq!(lab.checkpoint(&name(0)).map(|c| c.vmid), Some(777), "the checkpoint is kept for review");
    assert_eq!(lab.held_locks(), Vec::<String>::new());
}
