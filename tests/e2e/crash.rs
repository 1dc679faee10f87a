//! kill -9 of the `cradle` process at every step boundary of a provisioning
//! run, followed by `cradle unlock` and a rerun, converges: exactly one VM,
//! finalized (no cloud-init drive) and running on its node, no lock left, no
//! checkpoint, no creation record, no snippet (they hold the guest's private
//! host key) left on any node. The same for `cradle remove`: after a kill at
//! any of its boundaries, unlock and a rerun leave the VM gone with its
//! checkpoint, lock and pinned host key.
//!
//! "Proxmox" must survive the kill, so the simulator runs as its own process
//! (`cradle sim serve --write-config`) and the project talks to it like to a
//! real cluster: HTTPS with a pinned fingerprint, a token file, node SSH with
//! pinned host keys. The kill is `CRADLE_CRASH_AT=before:STEP@VM`: the cradle
//! process sends itself SIGKILL as that step begins (no destructor, no lock
//! release), and the test checks it really died of SIGKILL.
//!
//! The boundaries are not hard-coded: a probe VM is provisioned first and the
//! step names are read from its run journal, so a step added to the workflow
//! is crash-tested without touching this file.
//!
//! Each test owns a loopback subnet 127.33.<n>.0/24 (n in 1..=14), a prefix no
//! other test uses, where the simulated guests bind port 22.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use cradle_tests::cradle_bin;
use cradle_tests::fixture::{Cluster, LabInventory, ProjectConfig, SimCluster, Wait};
use cradle_tests::remote_sim::RemoteSim;
use serde_json::Value;

/// A project with `hosts` VMs on `subnet`, on the remote simulator (`sim`) or
/// on the simulated cluster built into cradle (`sim` none: it lives and dies
/// with each cradle process, its state in `state/sim/sim`).
struct Project {
    dir: tempfile::TempDir,
    sim: Option<RemoteSim>,
}

fn name(i: usize) -> String {
    format!("vm-{i}")
}

impl Project {
    fn new(subnet: u8, hosts: usize, scale: &str) -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        let sim = RemoteSim::start(dir.path(), scale);
        ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone())).write(dir.path());
        Project::with_inventory(dir, Some(sim), subnet, hosts)
    }

    /// On the built-in simulated cluster (`kind = "sim"`) at `scale`.
    fn builtin(subnet: u8, hosts: usize, scale: f64) -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(scale))).write(dir.path());
        Project::with_inventory(dir, None, subnet, hosts)
    }

    fn with_inventory(dir: tempfile::TempDir, sim: Option<RemoteSim>, subnet: u8, hosts: usize) -> Project {
        LabInventory::new("127.33", subnet)
            .count(hosts)
            .vmid_base(Some(300))
            .nameservers(None)
            .wait(Wait::lab())
            .write(dir.path());
        Project { dir, sim }
    }

    /// The simulator's state directory.
    fn sim_state(&self) -> PathBuf {
        match &self.sim {
            Some(sim) => sim.state.clone(),
            None => self.state().join("sim").join("sim"),
        }
    }

    /// The simulator's VMs, as its state file has them.
    fn vms(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.sim_state().join("state.json")).expect("state.json");
        let doc: Value = serde_json::from_str(&text).expect("state.json parses");
        doc["vms"].as_object().map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// The simulator's tasks, as its state file has them.
    fn tasks(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.sim_state().join("state.json")).expect("state.json");
        let doc: Value = serde_json::from_str(&text).expect("state.json parses");
        doc["tasks"].as_array().cloned().unwrap_or_default()
    }

    /// Every snippet on the nodes, as `node:file`.
    fn snippet_files(&self) -> Vec<String> {
        let mut out = Vec::new();
        for node in ["pve1", "pve2", "pve3"] {
            let dir = self.sim_state().join("nodes").join(node).join("var/lib/vz/snippets");
            if let Ok(rd) = std::fs::read_dir(dir) {
                out.extend(rd.filter_map(Result::ok).map(|e| format!("{node}:{}", e.file_name().to_string_lossy())));
            }
        }
        out
    }

    fn cradle(&self, args: &[&str], crash_at: Option<&str>) -> Output {
        let mut cmd = Command::new(cradle_bin());
        cmd.arg("--config").arg(self.dir.path().join("cradle.toml")).args(args).env_remove("CRADLE_CRASH_AT");
        if let Some(at) = crash_at {
            cmd.env("CRADLE_CRASH_AT", at);
        }
        cmd.stdin(Stdio::null()).output().expect("run cradle")
    }

    fn provision(&self, vm: &str, crash_at: Option<&str>) -> Output {
        let inv = self.dir.path().join("inventory").display().to_string();
        self.cradle(&["--output", "json", "provision", "-i", &inv, "--limit", vm], crash_at)
    }

    fn remove(&self, vm: &str, crash_at: Option<&str>) -> Output {
        let inv = self.dir.path().join("inventory").display().to_string();
        self.cradle(&["--output", "json", "remove", "-i", &inv, "--limit", vm, "--yes"], crash_at)
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn files_in(&self, sub: &str) -> Vec<String> {
        match std::fs::read_dir(self.state().join(sub)) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()) || sub == "locks")
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Step names of `vm`'s runs of `workflow`, in the order they first started.
    fn journal_steps(&self, workflow: &str, vm: &str) -> Vec<String> {
        let mut steps: Vec<String> = Vec::new();
        for file in std::fs::read_dir(self.state().join("runs")).expect("runs dir").filter_map(Result::ok) {
            let text = std::fs::read_to_string(file.path()).expect("journal");
            let first: Value = text.lines().next().and_then(|l| serde_json::from_str(l).ok()).unwrap_or_default();
            if first["workflow"] != workflow {
                continue;
            }
            for line in text.lines() {
                let Ok(ev) = serde_json::from_str::<Value>(line) else { continue };
                if ev["event"] == "step_started" && ev["vm"] == vm {
                    let step = ev["step"].as_str().expect("step name").to_string();
                    if !steps.contains(&step) {
                        steps.push(step);
                    }
                }
            }
        }
        steps
    }
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Everything a converged `vm` looks like.
fn assert_converged(p: &Project, vm: &str, boundary: &str) {
    let vms: Vec<Value> = p.vms().into_iter().filter(|v| v["config"]["name"] == vm).collect();
    assert_eq!(vms.len(), 1, "{boundary}: exactly one {vm}: {vms:?}");
    let config = vms[0]["config"].as_object().expect("config");
    assert!(
        !config.values().any(|v| v.as_str().is_some_and(|v| v.contains("cloudinit"))),
        "{boundary}: {vm} is finalized (no cloud-init drive): {config:?}"
    );
    assert_eq!(vms[0]["node"], "pve2", "{boundary}: {vm} runs on its node");
    assert!(config.get("cicustom").is_some() && config["scsi0"].as_str().unwrap_or("").contains("size=12G"));
    assert_eq!(p.files_in("locks"), Vec::<String>::new(), "{boundary}: no lock left");
    assert_eq!(p.files_in("checkpoints"), Vec::<String>::new(), "{boundary}: no checkpoint left");
    assert_eq!(p.files_in("checkpoints/creating"), Vec::<String>::new(), "{boundary}: no creation record left");
    let left: Vec<String> = p.snippet_files().into_iter().filter(|f| f.contains(vm)).collect();
    assert_eq!(left, Vec::<String>::new(), "{boundary}: the snippets (the host's private key) were deleted");
}

/// Provision a probe VM to learn the step boundaries, then for each boundary
/// in `range` kill a fresh VM's run there, unlock and rerun.
fn crash_at_every_boundary(subnet: u8, range: std::ops::Range<usize>) {
    let p = Project::new(subnet, 32, "0");
    let probe = p.provision(&name(0), None);
    assert!(probe.status.success(), "the probe VM provisions: {}", show(&probe));
    let steps = p.journal_steps("provision", &name(0));
    for expected in ["lock", "snippets", "create", "trust", "cloud-init", "drive-removal", "reboot", "checkpoint-clear"]
    {
        assert!(steps.iter().any(|s| s == expected), "the journal names step {expected}: {steps:?}");
    }
    let mut boundaries: Vec<String> = steps.iter().map(|s| format!("before:{s}")).collect();
    boundaries.push(format!("after:{}", steps.last().expect("steps")));
    assert!(boundaries.len() < 32, "enough hosts in the inventory for {boundaries:?}");
    let end = range.end.min(boundaries.len());
    assert!(range.start < end, "the range {range:?} selects boundaries of {boundaries:?}");
    eprintln!("boundaries {:?} of {boundaries:?}", range.start..end);
    for (i, boundary) in boundaries.iter().enumerate().take(end).skip(range.start) {
        let vm = name(i + 1);
        let killed = p.provision(&vm, Some(&format!("{boundary}@{vm}")));
        assert_eq!(killed.status.signal(), Some(9), "{boundary}: cradle died of SIGKILL: {}", show(&killed));
        if !p.files_in("locks").is_empty() {
            let unlock = p.cradle(&["unlock", &vm], None);
            assert!(unlock.status.success(), "{boundary}: unlock after the kill: {}", show(&unlock));
        }
        let rerun = p.provision(&vm, None);
        assert!(rerun.status.success(), "{boundary}: the rerun converges: {}", show(&rerun));
        let doc: Value = serde_json::from_slice(&rerun.stdout).expect("json output");
        let result = doc["hosts"][0]["result"].as_str().unwrap_or_default().to_string();
        assert!(["created", "finalized", "skipped"].contains(&result.as_str()), "{boundary}: {doc}");
        assert_converged(&p, &vm, boundary);
    }
}

#[test]
fn kill_9_before_any_creation_step_then_unlock_and_rerun_converges() {
    crash_at_every_boundary(1, 0..8);
}

#[test]
fn kill_9_inside_the_creation_stage_then_unlock_and_rerun_converges() {
    crash_at_every_boundary(2, 8..15);
}

#[test]
fn kill_9_during_finalization_then_unlock_and_rerun_converges() {
    crash_at_every_boundary(3, 15..usize::MAX);
}

/// kill -9 at every step boundary of `cradle remove`, then unlock and rerun
/// the removal: the VM is gone, and so are its checkpoint, lock, snippets and
/// pinned host key — also when the kill came after the destroy (the
/// `removal` checkpoint lets the rerun finish instead of failing closed).
#[test]
fn kill_9_at_every_removal_boundary_then_unlock_and_rerun_remove_converges() {
    let p = Project::new(5, 16, "0");
    let inv = p.dir.path().join("inventory").display().to_string();
    let all = p.cradle(&["--output", "json", "provision", "-i", &inv, "--forks", "4"], None);
    assert!(all.status.success(), "the VMs provision: {}", show(&all));
    let probe = p.remove(&name(0), None);
    assert!(probe.status.success(), "the probe VM is removed: {}", show(&probe));
    let steps = p.journal_steps("remove", &name(0));
    for expected in ["lock", "discover", "checkpoint-write", "destroy", "forget-host-key", "checkpoint-clear"] {
        assert!(steps.iter().any(|s| s == expected), "the journal names step {expected}: {steps:?}");
    }
    let mut boundaries: Vec<String> = steps.iter().map(|s| format!("before:{s}")).collect();
    boundaries.push(format!("after:{}", steps.last().expect("steps")));
    assert!(boundaries.len() < 16, "enough hosts for {boundaries:?}");
    let known_hosts = p.state().join("known_hosts");
    eprintln!(
        "boundaries {boundaries:?}\nknown_hosts before:\n{}",
        std::fs::read_to_string(&known_hosts).unwrap_or_default()
    );
    for (i, boundary) in boundaries.iter().enumerate() {
        let vm = name(i + 1);
        let address = format!("127.33.5.{}", 11 + i);
        let killed = p.remove(&vm, Some(&format!("{boundary}@{vm}")));
        assert_eq!(killed.status.signal(), Some(9), "{boundary}: cradle died of SIGKILL: {}", show(&killed));
        if !p.files_in("locks").is_empty() {
            let unlock = p.cradle(&["unlock", &vm], None);
            assert!(unlock.status.success(), "{boundary}: unlock after the kill: {}", show(&unlock));
        }
        let rerun = p.remove(&vm, None);
        let gone_already = boundary == &format!("after:{}", steps.last().expect("steps"));
        assert!(rerun.status.success(), "{boundary}: the rerun converges: {}", show(&rerun));
        let doc: Value = serde_json::from_slice(&rerun.stdout).expect("--output json");
        // The first removal finished: the second finds nothing and says `absent`.
        let expected = if gone_already { "absent" } else { "removed" };
        assert_eq!(doc["hosts"][0]["result"], expected, "{boundary}: {}", show(&rerun));
        assert!(p.vms().iter().all(|v| v["config"]["name"] != vm.as_str()), "{boundary}: {vm} is gone");
        assert_eq!(p.files_in("locks"), Vec::<String>::new(), "{boundary}: no lock left");
        assert_eq!(p.files_in("checkpoints"), Vec::<String>::new(), "{boundary}: no checkpoint left");
        let pinned = std::fs::read_to_string(&known_hosts).unwrap_or_default();
        assert!(!pinned.contains(&format!("{address} ")), "{boundary}: the host key of {address} is forgotten");
    }
}

/// The target of the clone `vm`'s run started, while its task runs: the VM
/// with `vm`'s name, or (PVE's clone names it only after its first drive is
/// copied) the one with only `lock: clone`.
fn clone_target(p: &Project, vm: &str) -> Vec<Value> {
    let named: Vec<Value> = p.vms().into_iter().filter(|v| v["config"]["name"] == vm).collect();
    if !named.is_empty() {
        return named;
    }
    p.vms().into_iter().filter(|v| v["config"]["name"].is_null() && v["config"]["lock"] == "clone").collect()
}

/// Killed while the clone task runs (right after PVE accepted the clone), the
/// rerun finds the VM locked by that task, waits for it instead of touching
/// the config or cloning again, and finishes the creation.
#[test]
fn kill_9_while_the_clone_task_runs_then_the_rerun_waits_for_it_and_converges() {
    // Realistic durations: the clone task runs for seconds after the kill.
    let p = Project::new(4, 1, "1");
    let vm = name(0);
    let killed = p.provision(&vm, Some(&format!("call:clone-vm@{vm}")));
    assert_eq!(killed.status.signal(), Some(9), "cradle died of SIGKILL: {}", show(&killed));
    let locked = clone_target(&p, &vm);
    assert_eq!(locked.len(), 1, "the clone exists: {locked:?}");
    assert_eq!(locked[0]["config"]["lock"], "clone", "and its task still runs: {:?}", locked[0]);
    let unlock = p.cradle(&["unlock", &vm], None);
    assert!(unlock.status.success(), "unlock after the kill: {}", show(&unlock));
    let rerun = p.provision(&vm, None);
    assert!(rerun.status.success(), "the rerun converges: {}", show(&rerun));
    let journals: String = std::fs::read_dir(p.state().join("runs"))
        .expect("runs")
        .filter_map(Result::ok)
        .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
        .collect();
    assert!(
        journals.contains("resuming: the VM is locked (clone)"),
        "the rerun met the running clone and waited for it (the journal says so)"
    );
    assert_converged(&p, &vm, "call:clone-vm");
}

/// Killed right after PVE accepted the clone, while the target has only
/// qemu-server's temporary config (`lock: clone`, no name, no disks: the clone
/// names it only after its first drive, qemu-server e6352be
/// src/PVE/API2/Qemu.pm:4615 and :4676). That VM is this run's clone, not a
/// foreign VM on the reserved VMID: the rerun waits for the clone task (listed
/// under the template's VMID) and converges to exactly one VM; and `cradle
/// remove` after the same kill destroys it rather than leaving a clone behind.
#[test]
fn kill_9_while_the_target_has_only_the_temporary_clone_config_then_rerun_and_remove_converge_on_one_vm() {
    let p = Project::new(13, 2, "1");
    for (i, then) in ["provision", "remove"].into_iter().enumerate() {
        let vm = name(i);
        let killed = p.provision(&vm, Some(&format!("call:clone-vm@{vm}")));
        assert_eq!(killed.status.signal(), Some(9), "{then}: cradle died of SIGKILL: {}", show(&killed));
        let temp: Vec<Value> = p.vms().into_iter().filter(|v| v["config"]["lock"] == "clone").collect();
        assert_eq!(temp.len(), 1, "{then}: one clone runs: {temp:?}");
        let config = temp[0]["config"].as_object().expect("config");
        assert!(
            config.get("name").is_none()
                && !config.contains_key("scsi0")
                && config["description"] == " qmclone temporary file",
            "{then}: the target has only the temporary config when cradle dies: {config:?}"
        );
        let unlock = p.cradle(&["unlock", &vm], None);
        assert!(unlock.status.success(), "{then}: unlock after the kill: {}", show(&unlock));
        if then == "provision" {
            let rerun = p.provision(&vm, None);
            assert!(rerun.status.success(), "the rerun converges: {}", show(&rerun));
            assert_converged(&p, &vm, "temporary clone config");
        } else {
            let removed = p.remove(&vm, None);
            assert!(removed.status.success(), "remove after the kill: {}", show(&removed));
            let doc: Value = serde_json::from_slice(&removed.stdout).expect("--output json");
            assert_eq!(doc["hosts"][0]["result"], "removed", "the clone was removed: {}", show(&removed));
            assert_eq!(p.files_in("checkpoints/creating"), Vec::<String>::new(), "no creation record left");
        }
    }
    // One VM in all (name(0)); the removed clone left nothing, running or not.
    let guests: Vec<Value> = p.vms().into_iter().filter(|v| v["config"]["template"].is_null()).collect();
    assert_eq!(guests.len(), 1, "exactly one VM, no duplicate and no leftover clone: {guests:?}");
    assert_eq!(guests[0]["config"]["name"], name(0).as_str());
    let running: Vec<Value> = p.tasks().into_iter().filter(|t| t["exitstatus"].is_null()).collect();
    assert_eq!(running, Vec::<Value>::new(), "no task is left running");
}

/// A clone with no name yet at the inventory's VMID that no creation record of
/// this control node started is someone else's: `provision --check` says
/// `blocked` (never `finalize` or `resume`), naming the VMID and the clone.
/// (Time scale 100: the clone runs 400 s, its first 200 s on the temporary
/// config.)
#[test]
fn an_unnamed_clone_at_the_vmid_without_a_creation_record_is_blocked_not_taken_as_the_vm() {
    let p = Project::new(14, 1, "100");
    let vm = name(0);
    let killed = p.provision(&vm, Some(&format!("call:clone-vm@{vm}")));
    assert_eq!(killed.status.signal(), Some(9), "cradle died of SIGKILL: {}", show(&killed));
    let temp: Vec<Value> = p.vms().into_iter().filter(|v| v["config"]["lock"] == "clone").collect();
    assert!(temp.len() == 1 && temp[0]["config"]["name"].is_null(), "the temporary config: {temp:?}");
    // Not this control node's creation (its record is gone: another one's clone).
    std::fs::remove_file(p.state().join("checkpoints/creating").join(format!("{vm}.json"))).expect("the record");
    let inv = p.dir.path().join("inventory").display().to_string();
    let check = p.cradle(&["--output", "json", "provision", "-i", &inv, "--limit", &vm, "--check"], None);
    let doc: Value = serde_json::from_slice(&check.stdout).unwrap_or_else(|_| panic!("json: {}", show(&check)));
    let host = &doc["hosts"][0];
    assert_eq!(host["result"], "blocked", "{}", show(&check));
    let why = host["detail"].as_str().unwrap_or_default();
    assert!(why.contains("vmid 300 is being cloned") && why.contains("no creation"), "{why}");
}

/// Whether a run journal of `vm` shows the reboot's `power` call accepted:
/// a `proxmox.power` capability call after the `reboot` step started.
fn reboot_requested(p: &Project, vm: &str) -> bool {
    journal_events(p).values().any(|run| {
        let mut in_reboot = false;
        run.iter().any(|ev| {
            if ev["event"] == "step_started" && ev["vm"] == vm {
                in_reboot = ev["step"] == "reboot";
            }
            in_reboot && ev["event"] == "capability_call" && ev["function"] == "power"
        })
    })
}

/// The events of every run journal, by journal file name.
fn journal_events(p: &Project) -> std::collections::BTreeMap<String, Vec<Value>> {
    let Ok(rd) = std::fs::read_dir(p.state().join("runs")) else { return Default::default() };
    rd.filter_map(Result::ok)
        .map(|f| {
            let text = std::fs::read_to_string(f.path()).unwrap_or_default();
            let events = text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect();
            (f.file_name().to_string_lossy().into_owned(), events)
        })
        .collect()
}

/// The simulator's persisted power state of `vm` (`running`, `stopped`).
fn power_of(p: &Project, vm: &str) -> Option<String> {
    let text = std::fs::read_to_string(p.sim_state().join("state.json")).ok()?;
    let doc: Value = serde_json::from_str(&text).ok()?;
    let vms = doc["vms"].as_object()?;
    let found = vms.values().find(|v| v["config"]["name"] == vm)?;
    found["power"].as_str().map(str::to_string)
}

/// Killed inside the reboot (item 16). PVE's `qmreboot` task ends once the VM
/// has stopped, then PVE starts the VM with a `qmstart` task of its own
/// (time scale 1: 5 s of shutdown, then 2 s of start; the rerun reaches its
/// `start` step about 0.1 s after the kill). A rerun whose `start`
/// step read `stopped` in that gap started the VM a second time, and that
/// start failed with "VM N already running"; the step must wait for the VM's
/// running tasks first. The kill is driven from here at the moment the
/// simulator has persisted the VM as stopped (the reboot task's end, the
/// start of the gap), since `CRADLE_CRASH_AT` knows only step and call edges
/// and the reboot step's own task poll may return seconds later. The rerun
/// must have met the running start (its `start` step waited for a task):
/// otherwise the test missed the gap and says so.
#[test]
fn kill_9_inside_the_reboot_then_the_rerun_waits_for_the_vms_own_start_and_converges() {
    let p = Project::new(6, 1, "1");
    let vm = name(0);
    let inv = p.dir.path().join("inventory").display().to_string();
    let mut child = Command::new(cradle_bin())
        .arg("--config")
        .arg(p.dir.path().join("cradle.toml"))
        .args(["--output", "json", "provision", "-i", &inv, "--limit", &vm])
        .env_remove("CRADLE_CRASH_AT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cradle provision");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let mut requested = false;
    loop {
        assert!(std::time::Instant::now() < deadline, "the run never reached the end of the reboot task");
        assert!(child.try_wait().expect("try_wait").is_none(), "cradle ended before the reboot task ended");
        requested = requested || reboot_requested(&p, &vm);
        if requested && power_of(&p, &vm).as_deref() == Some("stopped") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().expect("kill -9");
    let status = child.wait().expect("wait");
    assert_eq!(status.signal(), Some(9), "cradle was killed inside the reboot");
    let runs_before = journal_events(&p);
    let unlock = p.cradle(&["unlock", &vm], None);
    assert!(unlock.status.success(), "unlock after the kill: {}", show(&unlock));
    let rerun = p.provision(&vm, None);
    assert!(rerun.status.success(), "the rerun converges: {}", show(&rerun));
    // The rerun's `start` step found PVE's own start running and waited for
    // it, and then had no start of its own to issue.
    let waited = journal_events(&p).iter().filter(|(f, _)| !runs_before.contains_key(*f)).any(|(_, run)| {
        let mut in_start = false;
        let calls: Vec<&Value> = run
            .iter()
            .filter(|ev| {
                if ev["event"] == "step_started" && ev["vm"] == vm.as_str() {
                    in_start = ev["step"] == "start";
                }
                in_start && ev["event"] == "capability_call"
            })
            .map(|ev| &ev["function"])
            .collect();
        calls.contains(&&Value::from("wait-task")) && !calls.contains(&&Value::from("power"))
    });
    assert_converged(&p, &vm, "inside the reboot");
    assert!(waited, "the rerun's start step met PVE's own start of the VM (else the kill missed the gap)");
}

/// The built-in simulated cluster (`kind = "sim"`) lives in the cradle
/// process: a kill -9 while one of the VM's tasks runs kills "Proxmox" too.
/// On PVE the task would run on and clear its `lock` when it ends; the
/// simulator must do the same when it next loads its state (sim/src/recover.rs),
/// and the dead run's lock must be taken back by the rerun itself (no
/// `cradle unlock`): a plain rerun converges to one complete VM.
///
/// `crash_at` is `call:FUNCTION`: the kill comes right after that host call
/// succeeded, with the task it started running (no `@VM`: the workflow's own
/// calls, `migrate` and `power`, carry none, and the project has one VM) (time scale 0.25: the clone
/// runs 1 s, the migration 2 s, a start 0.5 s, a reboot's shutdown 1.25 s).
/// `task` is the worker type the kill must have interrupted (the state the
/// dead cradle left shows it running), so the test cannot pass by missing it.
fn kill_9_on_the_builtin_cluster_then_a_plain_rerun_converges(p: &Project, vm: &str, crash_at: &str, task: &str) {
    let killed = p.provision(vm, Some(crash_at));
    assert_eq!(killed.status.signal(), Some(9), "{crash_at}: cradle died of SIGKILL: {}", show(&killed));
    assert_interrupted(p, vm, crash_at, task);
    rerun_converges(p, vm, crash_at);
}

/// The state the killed cradle left: `task` of `vm` still running, and the
/// VM's lock still held by the dead run.
fn assert_interrupted(p: &Project, vm: &str, crash_at: &str, task: &str) {
    let vmid = clone_target(p, vm).into_iter().next().map(|v| v["vmid"].clone());
    let vmid = vmid.unwrap_or_else(|| panic!("{crash_at}: {vm} exists after the kill"));
    let running: Vec<Value> =
        p.tasks().into_iter().filter(|t| t["vmid"] == vmid && t["exitstatus"].is_null()).collect();
    assert!(
        running.iter().any(|t| t["kind"] == task),
        "{crash_at}: the kill interrupted the {task} task of {vm}: {running:?}"
    );
    assert_eq!(p.files_in("locks").len(), 1, "{crash_at}: the dead run's lock is left");
}

/// A plain rerun (no `cradle unlock`) takes back the dead run's lock, says so,
/// and converges.
fn rerun_converges(p: &Project, vm: &str, crash_at: &str) {
    let rerun = p.provision(vm, None);
    assert!(rerun.status.success(), "{crash_at}: the plain rerun converges: {}", show(&rerun));
    let said = String::from_utf8_lossy(&rerun.stderr);
    assert!(
        said.contains("took back lock") && said.contains(&format!("|{vm}`")),
        "{crash_at}: the rerun says it took back the dead run's lock: {said}"
    );
    let journaled = journal_events(p)
        .values()
        .flatten()
        .any(|ev| ev["event"] == "log" && ev["message"].as_str().is_some_and(|m| m.starts_with("took back lock")));
    assert!(journaled, "{crash_at}: the takeover is in the rerun's journal");
    assert_converged(p, vm, crash_at);
    let running: Vec<Value> = p.tasks().into_iter().filter(|t| t["exitstatus"].is_null()).collect();
    assert_eq!(running, Vec::<Value>::new(), "{crash_at}: no task is left running");
}

#[test]
fn kill_9_during_the_clone_on_the_builtin_cluster_then_a_plain_rerun_converges() {
    let p = Project::builtin(7, 1, 0.25);
    kill_9_on_the_builtin_cluster_then_a_plain_rerun_converges(&p, &name(0), "call:clone-vm", "qmclone");
}

#[test]
fn kill_9_during_the_migration_on_the_builtin_cluster_then_a_plain_rerun_converges() {
    let p = Project::builtin(8, 1, 0.25);
    kill_9_on_the_builtin_cluster_then_a_plain_rerun_converges(&p, &name(0), "call:migrate", "qmigrate");
}

#[test]
fn kill_9_during_the_start_on_the_builtin_cluster_then_a_plain_rerun_converges() {
    // The run's first `power` call is the start.
    let p = Project::builtin(9, 1, 0.25);
    kill_9_on_the_builtin_cluster_then_a_plain_rerun_converges(&p, &name(0), "call:power", "qmstart");
}

/// The reboot is the finalization's `power` call: a first run is killed
/// before the `reboot` step (the VM is running, its checkpoint written), the
/// second (which takes back the first's lock) at its `power` call, with the
/// `qmreboot` task running; the third is the plain rerun.
#[test]
fn kill_9_during_the_reboot_on_the_builtin_cluster_then_a_plain_rerun_converges() {
    let p = Project::builtin(10, 1, 0.25);
    let vm = name(0);
    let first = p.provision(&vm, Some(&format!("before:reboot@{vm}")));
    assert_eq!(first.status.signal(), Some(9), "killed before the reboot: {}", show(&first));
    assert_eq!(power_of(&p, &vm).as_deref(), Some("running"), "the VM ran when the first run died");
    kill_9_on_the_builtin_cluster_then_a_plain_rerun_converges(&p, &vm, "call:power", "qmreboot");
}

/// `cradle remove --yes` right after a kill -9 during the migration (no
/// unlock, no rerun of provision): the lock is taken back, the migration is
/// finished by the simulator as PVE would have, and the VM is removed with its
/// creation record and snippets.
#[test]
fn remove_yes_after_a_kill_9_during_the_migration_on_the_builtin_cluster_removes_the_vm() {
    let p = Project::builtin(11, 1, 0.25);
    let vm = name(0);
    let killed = p.provision(&vm, Some("call:migrate"));
    assert_eq!(killed.status.signal(), Some(9), "cradle died of SIGKILL: {}", show(&killed));
    assert_interrupted(&p, &vm, "call:migrate", "qmigrate");
    let removed = p.remove(&vm, None);
    assert!(removed.status.success(), "remove --yes after the kill: {}", show(&removed));
    assert!(p.vms().iter().all(|v| v["config"]["name"] != vm.as_str()), "{vm} is gone: {:?}", p.vms());
    assert_eq!(p.files_in("locks"), Vec::<String>::new(), "no lock left");
    assert_eq!(p.files_in("checkpoints"), Vec::<String>::new(), "no checkpoint left");
    assert_eq!(p.files_in("checkpoints/creating"), Vec::<String>::new(), "no creation record left");
    let left: Vec<String> = p.snippet_files().into_iter().filter(|f| f.contains(vm.as_str())).collect();
    assert_eq!(left, Vec::<String>::new(), "the snippets (the host's private key) were deleted");
}

/// A Proxmox lock that no task holds (here `backup`, written into the
/// built-in simulator's state as a vzdump killed on the node would leave it)
/// is really stuck: neither a rerun nor cradle can know it is safe to clear.
/// `cradle remove` stops before any change and its error names the VM, the
/// lock, and how to clear it on Proxmox VE (`qm unlock VMID` on the node) and
/// on `cradle sim serve`.
#[test]
fn a_lock_no_task_holds_is_refused_naming_the_vm_the_lock_and_how_to_clear_it() {
    let p = Project::builtin(12, 1, 0.0);
    let vm = name(0);
    let made = p.provision(&vm, None);
    assert!(made.status.success(), "{}", show(&made));
    let path = p.sim_state().join("state.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("state.json")).expect("json");
    let vmid = doc["vms"]
        .as_object()
        .and_then(|m| m.iter().find(|(_, v)| v["config"]["name"] == vm.as_str()).map(|(k, _)| k.clone()))
        .expect("the VM in the state");
    doc["vms"][&vmid]["config"]["lock"] = Value::from("backup");
    std::fs::write(&path, serde_json::to_vec(&doc).expect("json")).expect("write state.json");

    let refused = p.remove(&vm, None);
    assert!(!refused.status.success(), "{}", show(&refused));
    let out = show(&refused);
    for needle in [vm.as_str(), "backup", &format!("qm unlock {vmid}"), "cradle sim serve"] {
        assert!(out.contains(needle), "the error names `{needle}`: {out}");
    }
    assert!(p.vms().iter().any(|v| v["config"]["name"] == vm.as_str()), "nothing was destroyed");
    assert_eq!(p.files_in("locks"), Vec::<String>::new(), "cradle's own lock is released");
}
