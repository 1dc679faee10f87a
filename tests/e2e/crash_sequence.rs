//! The one provision sequence (workflows/lib/sequence.rhai) behaves alike for
//! every workflow built on it: kill -9 at the sequence's own boundaries —
//! right after the lock is taken, right after the VM type's create step (the
//! VM exists, stopped), and after the finalization (as the reconcile begins;
//! the NetBox pipeline, which reconciles nothing, as it writes Active) — then
//! a plain rerun (no `cradle unlock`: the lock of a holder shown gone is
//! taken back by the sequence's lock step, for every workflow alike)
//! converges to exactly one VM of the name, running, with no lock and no
//! checkpoint left; the inventory's VMs are then removable.
//!
//! One test body ([`kill_at_each_boundary_then_rerun`]) over a table of the
//! five workflows, each with its set-up function: the built-in `provision`
//! on the direct backend and on the Terraform backend (the test provider,
//! the real terraform), the image, LXC and Windows VM types (examples/), and
//! the NetBox pipeline (`cradle netbox sync` against the real NetBox 4.7.3,
//! the UniFi and Technitium stand-ins: its rerun is the next sync of the
//! still-Staged VM, which ends with the VM Active in NetBox).
//! "Proxmox" outlives each kill: the simulator runs as its own process (the
//! NetBox lab's in this test process, `cradle` being the killed one).
//! Guests bind port 22 on 127.62.1.0/24 (direct), 127.62.2.0/24 (Terraform)
//! and 127.62.3.0/24 (LXC), a prefix no other test uses; the Windows guest
//! reports through its agent (no address); the NetBox VMs take .60–.62 of
//! the NetBox lab's own /24 (netbox_pipeline.rs).

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use cradle_tests::cradle_bin;
use cradle_tests::fixture::{
    Backend, Cluster, LabInventory, ProjectConfig, SimCluster, Wait, Workflows, copy_tree, example_project, held_locks,
};
use cradle_tests::remote_sim::RemoteSim;
use serde_json::{Value, json};

use crate::netbox_pipeline::{World, fields};

/// The sequence's boundaries the inventory workflows pass: after the lock,
/// after the create step, after the finalization (the reconcile's start).
const BOUNDARIES: [&str; 3] = ["after:lock", "after:create", "before:reconcile"];

/// The NetBox pipeline's: it reconciles nothing, so its boundary after the
/// finalization is the Active write (after the OS configuration and DNS).
const NETBOX_BOUNDARIES: [&str; 3] = ["after:lock", "after:create", "before:active"];

/// A workflow's set-up, as the one test body drives it.
trait Workflow {
    /// The project directory (its cradle.toml).
    fn dir(&self) -> &Path;
    /// Where this workflow's run can be killed.
    fn boundaries(&self) -> [&'static str; 3] {
        BOUNDARIES
    }
    /// The VM the run for the `n`th boundary makes.
    fn vm(&self, n: usize) -> String;
    /// The arguments (after `--config`) of the command that provisions `vm`.
    fn provision(&self, vm: &str) -> Vec<String>;
    /// The workflow's own signs of a converged `vm` (besides one running VM,
    /// no lock, no checkpoint), given the rerun's output.
    fn converged(&self, vm: &str, rerun: &Output);
    /// Remove `vm` so the next boundary starts from no VM (the inventory
    /// workflows; the NetBox pipeline removes nothing: each boundary has a VM
    /// of its own).
    fn remove(&self, vm: &str);
    /// Proxmox's VMs and containers (`state.json`), templates included.
    fn guests(&self) -> Vec<Value>;
}

fn cradle(dir: &Path, args: &[String], crash_at: Option<&str>) -> Output {
    let mut cmd = Command::new(cradle_bin());
    cmd.current_dir(dir).arg("--config").arg(dir.join("cradle.toml")).args(args).env_remove("CRADLE_CRASH_AT");
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

/// The one test body. For each of the workflow's boundaries: provision its
/// VM killed there, rerun, check it converged, then remove it (where the
/// workflow removes) so the next boundary starts from no VM.
fn kill_at_each_boundary_then_rerun(w: &dyn Workflow) {
    let dir = w.dir();
    for (n, boundary) in w.boundaries().into_iter().enumerate() {
        let vm = w.vm(n);
        let provision = w.provision(&vm);
        let killed = cradle(dir, &provision, Some(&format!("{boundary}@{vm}")));
        assert_eq!(killed.status.signal(), Some(9), "{vm} {boundary}: cradle died of SIGKILL: {}", show(&killed));
        assert!(!held_locks(&dir.join("state")).is_empty(), "{vm} {boundary}: the killed run left its lock");
        let rerun = cradle(dir, &provision, None);
        assert!(rerun.status.success(), "{vm} {boundary}: the rerun converges without unlock: {}", show(&rerun));
        let said = String::from_utf8_lossy(&rerun.stderr);
        assert!(said.contains(&format!("|{vm}` from run")), "{vm} {boundary}: the rerun took the lock back: {said}");
        w.converged(&vm, &rerun);
        let mine: Vec<Value> = w
            .guests()
            .into_iter()
            .filter(|v| v["config"]["name"] == vm.as_str() || v["config"]["hostname"] == vm.as_str())
            .collect();
        assert_eq!(mine.len(), 1, "{vm} {boundary}: exactly one VM: {mine:?}");
        assert_eq!(mine[0]["power"], "running", "{vm} {boundary}: it runs: {}", mine[0]);
        assert!(held_locks(&dir.join("state")).is_empty(), "{vm} {boundary}: no lock left");
        assert_eq!(checkpoints(dir), Vec::<String>::new(), "{vm} {boundary}: no checkpoint left");
        w.remove(&vm);
    }
}

/// A project whose VM comes from an inventory (`cradle provision`), on the
/// simulator in its own process.
struct Inventory {
    dir: tempfile::TempDir,
    sim: RemoteSim,
    vm: &'static str,
}

impl Workflow for Inventory {
    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn vm(&self, _n: usize) -> String {
        self.vm.to_string()
    }

    fn provision(&self, vm: &str) -> Vec<String> {
        let inv = self.dir.path().join("inventory").display().to_string();
        ["--output", "json", "provision", "-i", inv.as_str(), "--limit", vm].map(String::from).to_vec()
    }

    fn converged(&self, vm: &str, rerun: &Output) {
        let doc: Value = serde_json::from_slice(&rerun.stdout).expect("json output");
        let result = doc["hosts"][0]["result"].as_str().unwrap_or_default().to_string();
        assert!(["created", "resumed", "finalized", "skipped"].contains(&result.as_str()), "{vm}: {doc}");
    }

    fn remove(&self, vm: &str) {
        let inv = self.dir.path().join("inventory").display().to_string();
        let args = ["--output", "json", "remove", "-i", inv.as_str(), "--limit", vm, "--yes"].map(String::from);
        let removed = cradle(self.dir.path(), &args, None);
        assert!(removed.status.success(), "{vm}: removed for the next boundary: {}", show(&removed));
    }

    fn guests(&self) -> Vec<Value> {
        self.sim.vms()
    }
}

/// `provision` on the direct backend: vm-0 on 127.62.1.0/24.
fn direct_provision() -> Inventory {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = RemoteSim::start(dir.path(), "0");
    ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone())).write(dir.path());
    LabInventory::new("127.62", 1).vmid_base(Some(400)).nameservers(None).wait(Wait::lab()).write(dir.path());
    Inventory { dir, sim, vm: "vm-0" }
}

/// `provision` on the Terraform backend (flavour `telmate`, the test
/// provider through the real terraform, as crash_terraform.rs): vm-0 on
/// 127.62.2.0/24. Terraform's providers check the simulator's certificate
/// against its CA, not a pinned fingerprint.
fn terraform_provision() -> Inventory {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sim = RemoteSim::start(dir.path(), "0");
    let ca = sim.state.join("pve-root-ca.pem");
    let pinned = sim.cluster_toml.lines().filter(|l| l.starts_with("fingerprint = ")).count();
    assert_eq!(pinned, 1, "the written config pins one fingerprint:\n{}", sim.cluster_toml);
    sim.cluster_toml = sim
        .cluster_toml
        .lines()
        .map(|l| if l.starts_with("fingerprint = ") { format!("ca_file = \"{}\"", ca.display()) } else { l.into() })
        .collect::<Vec<_>>()
        .join("\n");
    let cli_config = cradle_tests::terraform_cli_config(dir.path());
    ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
        .backend(Backend::Terraform { flavour: "telmate", cli_config })
        .write(dir.path());
    LabInventory::new("127.62", 2).vmid_base(Some(400)).nameservers(None).wait(Wait::lab()).write(dir.path());
    Inventory { dir, sim, vm: "vm-0" }
}

/// The image VM type (examples/vm-types, lib/image.rhai): ha-1.
fn image_type() -> Inventory {
    let dir = example_project("vm-types");
    let sim = RemoteSim::start(dir.path(), "0");
    std::fs::create_dir_all(dir.path().join("images")).expect("images dir");
    std::fs::write(dir.path().join("images/haos.qcow2"), crate::vm_types::qcow2(1 << 20, 6 << 30)).expect("image");
    ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
        .workflows(Workflows::Dir("workflows".into()))
        .write(dir.path());
    Inventory { dir, sim, vm: "ha-1" }
}

/// The LXC type (examples/lxc, lib/lxc.rhai): ct-1 on 127.62.3.0/24, from
/// the rootfs template put on pve1's `local` storage (what `pveam download`
/// does), as lxc.rs sets it up.
fn lxc_type() -> Inventory {
    let dir = example_project("lxc");
    let sim = RemoteSim::start(dir.path(), "0");
    for (file, from, to) in [
        ("inventory/hosts.yml", "10.0.40.", "127.62.3."),
        ("inventory/group_vars/containers.yml", "10.0.40.1", "127.62.3.1"),
    ] {
        let path = dir.path().join(file);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains(from), "{file} changed shape: no {from}");
        std::fs::write(&path, text.replace(from, to)).expect("write");
    }
    let cache = sim.state.join("nodes/pve1/var/lib/vz/template/cache");
    std::fs::create_dir_all(&cache).expect("cache dir");
    std::fs::write(cache.join("debian-12-standard_12.7-1_amd64.tar.zst"), b"a baked rootfs").expect("template");
    ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
        .workflows(Workflows::Dir("workflows".into()))
        .workflow_destructive(true)
        .write(dir.path());
    Inventory { dir, sim, vm: "ct-1" }
}

/// The Windows type (examples/windows, lib/windows.rhai): win-1, installed
/// from the ISOs uploaded to pve1's `local` storage, reporting through its
/// guest agent, as windows.rs sets it up.
fn windows_type() -> Inventory {
    let dir = example_project("windows");
    let sim = RemoteSim::start(dir.path(), "0");
    let isos = sim.state.join("nodes/pve1/var/lib/vz/template/iso");
    std::fs::create_dir_all(&isos).expect("iso dir");
    for iso in ["windows-server-2022.iso", "virtio-win.iso"] {
        std::fs::write(isos.join(iso), vec![0u8; 32 << 10]).expect("iso");
    }
    ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
        .workflows(Workflows::Dir("workflows".into()))
        .write(dir.path());
    Inventory { dir, sim, vm: "win-1" }
}

/// The NetBox pipeline (workflows/netbox.rhai) through `cradle netbox sync`:
/// a VM per boundary, Staged in the real NetBox; the rerun is the next sync,
/// which finds it still Staged.
struct NetBoxPipeline {
    world: World,
}

fn netbox_pipeline() -> NetBoxPipeline {
    NetBoxPipeline { world: World::new("") }
}

impl Workflow for NetBoxPipeline {
    fn dir(&self) -> &Path {
        &self.world.dir
    }

    fn boundaries(&self) -> [&'static str; 3] {
        NETBOX_BOUNDARIES
    }

    fn vm(&self, n: usize) -> String {
        format!("{}-crash{n}", self.world.side.prefix)
    }

    fn provision(&self, vm: &str) -> Vec<String> {
        let side = &self.world.side;
        // Made and Staged the first time, found Staged by the rerun's sync.
        if side.netbox.list(&format!("/api/virtualization/virtual-machines/?name={vm}")).is_empty() {
            let n: u8 = vm.rsplit("crash").next().and_then(|n| n.parse().ok()).expect("a boundary's VM");
            let address = format!("127.78.{}.{}", self.world.lab.net, 60 + n);
            let (made, _) = side.planned_vm(vm, &address, fields("pve2", Some("debian-12-cloud")));
            side.netbox.patch_vm(&made, &json!({ "status": "staged" }));
        }
        ["--output", "json", "netbox", "sync", "--query", &format!("name={vm}")].map(String::from).to_vec()
    }

    fn converged(&self, vm: &str, rerun: &Output) {
        let doc: Value = serde_json::from_slice(&rerun.stdout).expect("json output");
        assert_eq!(doc["vms"].as_array().map(Vec::len), Some(1), "{vm}: the sync ran its one Staged VM: {doc}");
        let side = &self.world.side;
        let found = side.netbox.list(&format!("/api/virtualization/virtual-machines/?name={vm}"));
        assert_eq!(found.len(), 1, "{vm}: one NetBox VM");
        assert_eq!(found[0]["status"]["value"], "active", "{vm}: Active in NetBox: {}", show(rerun));
        assert_eq!(self.world.vms_named(vm).len(), 1, "{vm}: one VM in Proxmox");
    }

    fn remove(&self, _vm: &str) {}

    fn guests(&self) -> Vec<Value> {
        self.world.lab.state()["vms"].as_object().map(|m| m.values().cloned().collect()).unwrap_or_default()
    }
}

/// The table: a test per workflow, named for what it proves, its set-up
/// function, all through the one body.
macro_rules! killed_at_the_sequences_boundaries_converges_on_rerun {
    ($($test:ident => $setup:expr;)*) => {$(
        #[test]
        fn $test() {
            kill_at_each_boundary_then_rerun(&$setup());
        }
    )*};
}

killed_at_the_sequences_boundaries_converges_on_rerun! {
    provision_with_the_direct_backend_killed_at_the_sequences_boundaries_converges_on_rerun => direct_provision;
    provision_with_the_terraform_backend_killed_at_the_sequences_boundaries_converges_on_rerun => terraform_provision;
    an_image_vm_type_killed_at_the_sequences_boundaries_converges_on_rerun => image_type;
    an_lxc_container_type_killed_at_the_sequences_boundaries_converges_on_rerun => lxc_type;
    a_windows_vm_type_killed_at_the_sequences_boundaries_converges_on_rerun => windows_type;
    the_netbox_pipeline_killed_at_the_sequences_boundaries_converges_to_one_active_vm_on_the_next_sync => netbox_pipeline;
}

/// A workflow on the sequence whose create step fails (after the lock):
/// its `on_failure` hook prints what it was given, its run's journal records
/// each print.
const FAILING_CREATE: &str = r#"
import "lib/sequence" as seq;

fn main(name) {
    let vm = #{ name: name, node: "pve1", spec: #{ vmid: 900 } };
    seq::run(vm, #{
        validate: |vm| (),
        look: |vm| #{ vmid: vm.spec.vmid, found: (), cp: (), unfinished: () },
        decide: |vm, seen| #{ result: "create", why: "no guest" },
        create: |vm| step(vm.name, "create", || step(vm.name, "clone", || throw #{ kind: "failed", message: "no room on pve1" })),
        on_failure: |vm, failure| print(`on_failure: step ${failure.step}: ${failure.message}; kind ${failure.error.kind}`),
    })
}
"#;

/// The on-failure hook: a failure after the lock runs it once, with the
/// innermost step that failed and its reason; the run fails with that
/// error as raised (its step and message, not the hook's rethrow) and no
/// lock is left.
#[test]
fn a_failure_after_the_lock_runs_the_on_failure_hook_once_keeps_its_step_and_leaves_no_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The built-in workflows (lib/ included) and this one beside them.
    copy_tree(&cradle_tests::workspace().join("workflows"), &dir.path().join("workflows"));
    std::fs::write(dir.path().join("workflows/failing.rhai"), FAILING_CREATE).expect("workflow");
    ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
        .workflows(Workflows::Dir("workflows".into()))
        .write(dir.path());
    let args = ["--output", "json", "run", "failing", "--fn", "main", "vm-hook"].map(String::from);
    let out = cradle(dir.path(), &args, None);
    assert!(!out.status.success(), "the run fails: {}", show(&out));
    let said = show(&out);
    assert!(said.contains("clone") && said.contains("no room on pve1"), "the error as raised: {said}");
    assert!(!said.contains("on_failure hook failed"), "{said}");
    let runs = dir.path().join("state/runs");
    let journals: String = std::fs::read_dir(&runs)
        .expect("state/runs")
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect();
    let hook = "on_failure: step clone: no room on pve1; kind failed";
    assert_eq!(journals.matches(hook).count(), 1, "the hook ran once with the step and reason:\n{journals}");
    assert!(held_locks(&dir.path().join("state")).is_empty(), "no lock left");
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
