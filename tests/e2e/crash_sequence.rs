//! The one provision sequence (workflows/lib/sequence.rhai) behaves alike for
//! every workflow built on it: kill -9 at the sequence's own boundaries —
//! right after the lock is taken, right after the VM type's create step (the
//! VM exists, stopped), and as the reconcile begins (after finalize) — then a
//! plain rerun (no `cradle unlock`: the lock of a holder shown gone is taken
//! back by the sequence's lock step, for every workflow alike) converges to
//! exactly one VM of the name, running, with no lock and no checkpoint left.
//!
//! Parameterised over the workflows: the built-in `provision` (direct
//! backend, cloud-init) and the image VM type (examples/vm-types, lib/image.rhai).
//! "Proxmox" outlives each kill: the simulator runs as its own process.
//! Guests bind port 22 on 127.62.1.0/24, a prefix no other test uses.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use cradle_tests::cradle_bin;
use cradle_tests::fixture::{Cluster, LabInventory, ProjectConfig, Wait, Workflows, example_project, held_locks};
use cradle_tests::remote_sim::RemoteSim;
use serde_json::Value;

/// The sequence's boundaries every workflow passes.
const BOUNDARIES: [&str; 3] = ["after:lock", "after:create", "before:reconcile"];

fn cradle(dir: &Path, args: &[&str], crash_at: Option<&str>) -> Output {
    let mut cmd = Command::new(cradle_bin());
    cmd.arg("--config").arg(dir.join("cradle.toml")).args(args).env_remove("CRADLE_CRASH_AT");
    if let Some(at) = crash_at {
        cmd.env("CRADLE_CRASH_AT", at);
    }
    cmd.stdin(Stdio::null()).output().expect("run cradle")
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The files in `state/checkpoints` (not the directories under it).
fn checkpoints(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir.join("state/checkpoints")) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// For each boundary: provision `vm` killed there, rerun, check it converged,
/// then remove it so the next boundary starts from no VM.
fn kill_at_each_boundary_then_rerun(dir: &Path, sim: &RemoteSim, vm: &str) {
    let inv = dir.join("inventory").display().to_string();
    let provision = ["--output", "json", "provision", "-i", inv.as_str(), "--limit", vm];
    for boundary in BOUNDARIES {
        let killed = cradle(dir, &provision, Some(&format!("{boundary}@{vm}")));
        assert_eq!(killed.status.signal(), Some(9), "{vm} {boundary}: cradle died of SIGKILL: {}", show(&killed));
        assert!(!held_locks(&dir.join("state")).is_empty(), "{vm} {boundary}: the killed run left its lock");
        let rerun = cradle(dir, &provision, None);
        assert!(rerun.status.success(), "{vm} {boundary}: the rerun converges without unlock: {}", show(&rerun));
        let said = String::from_utf8_lossy(&rerun.stderr);
        assert!(said.contains(&format!("|{vm}` from run")), "{vm} {boundary}: the rerun took the lock back: {said}");
        let doc: Value = serde_json::from_slice(&rerun.stdout).expect("json output");
        let result = doc["hosts"][0]["result"].as_str().unwrap_or_default().to_string();
        assert!(["created", "resumed", "finalized", "skipped"].contains(&result.as_str()), "{vm} {boundary}: {doc}");
        let mine: Vec<Value> = sim.vms().into_iter().filter(|v| v["config"]["name"] == vm).collect();
        assert_eq!(mine.len(), 1, "{vm} {boundary}: exactly one VM: {mine:?}");
        assert_eq!(mine[0]["power"], "running", "{vm} {boundary}: it runs: {}", mine[0]);
        assert!(held_locks(&dir.join("state")).is_empty(), "{vm} {boundary}: no lock left");
        assert_eq!(checkpoints(dir), Vec::<String>::new(), "{vm} {boundary}: no checkpoint left");
        let removed = cradle(dir, &["--output", "json", "remove", "-i", inv.as_str(), "--limit", vm, "--yes"], None);
        assert!(removed.status.success(), "{vm} {boundary}: removed for the next boundary: {}", show(&removed));
    }
}

#[test]
fn provision_with_the_direct_backend_killed_at_the_sequences_boundaries_converges_on_rerun() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = RemoteSim::start(dir.path(), "0");
    ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone())).write(dir.path());
    let wait = Wait {
        ssh_ms: 60000,
        cloudinit_interval_ms: 500,
        reboot_attempts: Some(120),
        reboot_interval_s: 0.5,
        ..Wait::fast()
    };
    LabInventory::new("127.62", 1).vmid_base(Some(400)).nameservers(None).wait(wait).write(dir.path());
    kill_at_each_boundary_then_rerun(dir.path(), &sim, "vm-0");
}

#[test]
fn an_image_vm_type_killed_at_the_sequences_boundaries_converges_on_rerun() {
    let dir = example_project("vm-types");
    let sim = RemoteSim::start(dir.path(), "0");
    std::fs::create_dir_all(dir.path().join("images")).expect("images dir");
    std::fs::write(dir.path().join("images/haos.qcow2"), crate::vm_types::qcow2(1 << 20, 6 << 30)).expect("image");
    ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
        .workflows(Workflows::Dir("workflows".into()))
        .write(dir.path());
    kill_at_each_boundary_then_rerun(dir.path(), &sim, "ha-1");
}

/// The sequence's own steps are written in lib/sequence.rhai alone: every
/// provisioning workflow reaches them through `seq::run`, so the lock and
/// the decision cannot drift apart between workflows again. (The removal
/// functions, a sequence of their own, are left out: `fn remove`.)
#[test]
fn the_provision_sequences_lock_and_decide_steps_live_in_lib_sequence_rhai_alone() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workflows");
    let mut found = Vec::new();
    for rel in
        ["provision.rhai", "netbox.rhai", "lib/image.rhai", "lib/lxc.rhai", "lib/windows.rhai", "lib/sequence.rhai"]
    {
        let text = std::fs::read_to_string(root.join(rel)).expect("workflow file");
        // The text up to the removal function, which has its own lock step.
        let provisioning = text.split("\nfn remove(").next().unwrap_or_default();
        for step in ["\"lock\"", "\"decide\"", "\"validate\""] {
            if provisioning.contains(step) {
                found.push(format!("{rel}: {step}"));
            }
        }
        if rel != "lib/sequence.rhai" {
            assert!(text.contains("seq::run("), "{rel} runs the one sequence");
        }
    }
    assert_eq!(
        found,
        ["lib/sequence.rhai: \"lock\"", "lib/sequence.rhai: \"decide\"", "lib/sequence.rhai: \"validate\""],
        "the sequence's steps are in one file"
    );
}
