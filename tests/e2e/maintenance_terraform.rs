//! `cradle plan` / `cradle apply` (issue 34) of a VM provisioned through the
//! Terraform backend (`vms_use_terraform`, flavour `telmate`): the real
//! binary, the real `terraform` 1.11.4 and the test provider
//! (tests/tf-provider, installed from a filesystem mirror as
//! [`cradle_tests::terraform_cli_config`] sets it up) against the simulator.
//! What must hold (docs/TERRAFORM.md "Maintenance"):
//! - `plan` shows the terraform plan's update and writes its saved plan's id
//!   into the plan file; `apply` applies exactly that saved plan, the live
//!   config then matches the inventory, and a rerun applies nothing twice
//!   (terraform's state serial unchanged, the kept plan gone);
//! - a disk move (`--allow-disk-move`) is `blocked`: the backend does not
//!   move disks;
//! - a change terraform would make by replacing the VM is `blocked` at plan
//!   time, the module left as provisioning renders it;
//! - a saved plan whose module state moved on since is refused at apply by
//!   terraform ("Saved plan is stale") as a `conflict` naming the VM and
//!   saying to plan again; a VM changed through the API since the plan is
//!   refused by the digest check before terraform runs; nothing is applied;
//! - the plan rewrites the VM's module under the VM's lock: while another
//!   run holds it, the VM is `blocked` and the module is left alone;
//! - kill -9 right after the terraform `apply` call or after the
//!   `terraform-apply` step, then a rerun: what the provider wrote passes the
//!   progress check (memory, NIC and disk values in the forms it writes
//!   them), so the rerun finishes without a second terraform apply.
//!
//! The simulator runs in its own process where "Proxmox" must outlive a
//! `cradle` process (kill -9) or be changed through its API, with the client
//! trusting its CA (terraform's providers cannot pin a fingerprint). Guests
//! bind port 22 on 127.65.<subnet>.0/24, a prefix no other test file uses.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cradle_tests::fixture::{
    Backend, Cluster, LabInventory, ProjectConfig, SimCluster, Wait, held_locks, terraform_toml,
};
use cradle_tests::remote_sim::RemoteSim;
use serde_json::Value;

use crate::maintenance_lab::{Project, json_of, show};

const VMID: u32 = 560;

/// The inventory of vm-0 (`vms_use_terraform`, a 2 GiB data disk `scsi1`).
fn inventory(dir: &Path, subnet: u8) -> LabInventory {
    let lab = LabInventory::new("127.65", subnet)
        .vmid_base(Some(VMID))
        .nameservers(None)
        .wait(Wait::lab())
        .host_vars("vm-0", "vms_use_terraform: true");
    lab.write(dir);
    let all = dir.join("inventory/group_vars/all.yml");
    let text = std::fs::read_to_string(&all).expect("group_vars");
    let text =
        text.replacen("  startup_order: 10\n", "  startup_order: 10\n  disks:\n    - {size: 2, slot: scsi1}\n", 1);
    std::fs::write(&all, text).expect("write group_vars");
    lab
}

/// vm-0 provisioned through terraform on a simulator in its own process.
fn remote(subnet: u8) -> Project {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = RemoteSim::start_trusting_ca(dir.path(), "0");
    let cli_config = cradle_tests::terraform_cli_config(dir.path());
    ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
        .backend(Backend::Plugin { destructive: true })
        .append(&terraform_toml("telmate", &cli_config))
        .write(dir.path());
    let lab = inventory(dir.path(), subnet);
    let p = Project { dir, sim: Some(sim), names: vec![lab.name(0)], lab };
    p.provision();
    assert!(state_serial(&p).is_some(), "vm-0 went through terraform: its module has a state");
    p
}

/// vm-0 provisioned through terraform on the simulator built into each
/// `cradle` process, with a second template `debian-13-cloud` (VMID 9001).
fn builtin_with_two_templates(subnet: u8) -> Project {
    let dir = tempfile::tempdir().expect("tempdir");
    let cli_config = cradle_tests::terraform_cli_config(dir.path());
    let config = ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
        .backend(Backend::Plugin { destructive: true })
        .append(&terraform_toml("telmate", &cli_config))
        .write(dir.path());
    // The templates table belongs to [clusters.sim.sim]: insert it there.
    let templates = "\n[[clusters.sim.sim.templates]]\nvmid = 9000\nname = \"debian-12-cloud\"\nnode = \"pve1\"\n\
                     [[clusters.sim.sim.templates]]\nvmid = 9001\nname = \"debian-13-cloud\"\nnode = \"pve1\"\n";
    let text = std::fs::read_to_string(&config).expect("read cradle.toml");
    assert!(text.contains("\n[environments.test]"), "{text}");
    let text = text.replacen("\n[environments.test]", &format!("{templates}\n[environments.test]"), 1);
    std::fs::write(&config, text).expect("write cradle.toml");
    let lab = inventory(dir.path(), subnet);
    let p = Project { dir, sim: None, names: vec![lab.name(0)], lab };
    p.provision();
    p
}

/// vm-0's module directory.
fn module(p: &Project) -> PathBuf {
    p.dir.path().join("terraform").join(&p.names[0])
}

/// The `serial` of vm-0's `terraform.tfstate` (every apply that changes the
/// state writes it with the next serial).
fn state_serial(p: &Project) -> Option<u64> {
    let text = std::fs::read_to_string(module(p).join("terraform.tfstate")).ok()?;
    serde_json::from_str::<Value>(&text).ok()?["serial"].as_u64()
}

/// The saved plans in vm-0's module directory.
fn saved_plans(p: &Project) -> Vec<String> {
    let mut plans: Vec<String> = std::fs::read_dir(module(p))
        .expect("module dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tfplan"))
        .collect();
    plans.sort();
    plans
}

/// The module on disk is the one provisioning renders: `disk` ignored.
fn assert_module_unlifted(p: &Project) {
    let text = std::fs::read_to_string(module(p).join("main.tf.json")).expect("main.tf.json");
    let doc: Value = serde_json::from_str(&text).expect("module JSON");
    let ignored = &doc["resource"]["proxmox_vm_qemu"]["vm"]["lifecycle"]["ignore_changes"];
    assert!(ignored.as_array().is_some_and(|a| a.iter().any(|v| v == "disk")), "the module is unlifted: {ignored}");
}

/// The plan file's only VM.
fn planned_vm(plan: &Path) -> Value {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(plan).expect("plan file")).expect("plan JSON");
    doc["vms"][0].clone()
}

/// The effective value of `key` (pending applied) and whether it is pending.
fn effective(vm: &Value, key: &str) -> (String, bool) {
    let pending = vm["pending"][key].as_str();
    let value = pending.or(vm["config"][key].as_str()).unwrap_or_default().to_string();
    (value, pending.is_some())
}

fn grow_disk_and_memory(p: &Project) {
    p.edit_inventory("memory: 2048", "memory: 3072");
    p.edit_inventory("{size: 2, slot: scsi1}", "{size: 4, slot: scsi1}");
}

#[test]
fn terraform_plan_shows_the_update_and_apply_applies_exactly_that_saved_plan_once() {
    let p = remote(1);
    let vm = p.names[0].clone();
    grow_disk_and_memory(&p);
    let serial = state_serial(&p);
    let (plan, text) = p.plan_ok("maint.plan");
    assert!(
        text.contains("terraform plan ") && text.contains("update proxmox_vm_qemu.vm") && text.contains("memory"),
        "the terraform plan's update is shown:\n{text}"
    );
    let row = planned_vm(&plan);
    assert_eq!(row["backend"], "terraform", "{row}");
    let id = row["terraform_plan"].as_str().expect("the saved plan's id is in the plan file").to_string();
    assert!(text.contains(&id), "the text names the saved plan {id}:\n{text}");
    assert_eq!(saved_plans(&p).len(), 1, "the saved plan is kept beyond the run: {:?}", saved_plans(&p));
    assert_eq!(state_serial(&p), serial, "plan applied nothing");
    assert_module_unlifted(&p);
    assert!(held_locks(&p.dir.path().join("state")).is_empty(), "plan released the VM's lock");

    let applied = p.apply(&plan, "if-needed", None);
    assert!(applied.status.success(), "apply: {}", show(&applied));
    assert_eq!(json_of(&applied)["vms"][0]["result"], "applied", "{}", show(&applied));
    let after = state_serial(&p);
    assert!(after > serial, "terraform applied the saved plan: serial {serial:?} → {after:?}");
    let live = p.vm(&vm);
    assert_eq!(effective(&live, "memory"), ("3072".to_string(), false), "memory in effect after the reboot: {live}");
    let (scsi1, pending) = effective(&live, "scsi1");
    assert!(scsi1.contains("size=4G") && !pending, "scsi1 grown: {scsi1}");
    assert!(effective(&live, "scsi0").0.contains("size=12G"), "the boot disk is kept: {live}");
    assert!(saved_plans(&p).is_empty(), "the applied plan is gone: {:?}", saved_plans(&p));
    assert_module_unlifted(&p);

    // The same plan again: nothing twice.
    let again = p.apply(&plan, "if-needed", None);
    assert!(again.status.success(), "rerun: {}", show(&again));
    assert_eq!(json_of(&again)["vms"][0]["result"], "unchanged", "{}", show(&again));
    assert_eq!(state_serial(&p), after, "no second terraform apply");
    assert_eq!(p.vm(&vm)["config"], live["config"], "the VM is as the first apply left it");
    // The VM now is what the inventory says.
    let (_, next) = p.plan_ok("again.plan");
    assert!(next.contains("1 VM: 1 planned (1 unchanged)"), "{next}");
}

#[test]
fn a_maintenance_change_terraform_would_make_by_replacing_the_vm_is_blocked_at_plan_time() {
    let p = builtin_with_two_templates(2);
    let vm = p.names[0].clone();
    let before = p.vm(&vm);
    let serial = state_serial(&p);
    p.edit_inventory("memory: 2048", "memory: 3072");
    p.edit_inventory("template: debian-12-cloud", "template: debian-13-cloud");
    let plan = p.plan_path("maint.plan");
    let out = p.cradle(&["--output", "json", "plan", "-i", &p.inventory(), "--out", &plan.display().to_string()], None);
    assert!(!out.status.success(), "a blocked VM fails the plan: {}", show(&out));
    let doc = json_of(&out);
    let row = &doc["vms"][0];
    assert_eq!(row["result"], "blocked", "{doc}");
    let why = row["why"].as_str().unwrap_or_default();
    assert!(
        why.contains(&vm) && why.contains("replace") && why.contains("vms_terraform_allow_replacement"),
        "the refusal names the VM, the replacement and the flag: {why}"
    );
    assert!(saved_plans(&p).is_empty(), "no refused plan is kept: {:?}", saved_plans(&p));
    assert_module_unlifted(&p);
    assert_eq!(state_serial(&p), serial);
    assert_eq!(p.vm(&vm)["config"], before["config"], "the VM is untouched");

    // With the flag terraform may replace it, but maintenance never rebuilds a VM.
    p.edit_inventory("vms_os: debian12\n", "vms_os: debian12\nvms_terraform_allow_replacement: true\n");
    let out = p.cradle(&["--output", "json", "plan", "-i", &p.inventory()], None);
    let doc = json_of(&out);
    let why = doc["vms"][0]["why"].as_str().unwrap_or_default();
    assert_eq!(doc["vms"][0]["result"], "blocked", "{doc}");
    assert!(why.contains("never rebuilds") && why.contains("cradle provision"), "{why}");
    assert!(saved_plans(&p).is_empty(), "{:?}", saved_plans(&p));
    assert_eq!(p.vm(&vm)["config"], before["config"], "the VM is untouched");
}

#[test]
fn a_disk_move_is_blocked_on_the_terraform_backend_even_with_allow_disk_move() {
    let p = builtin_with_two_templates(6);
    let vm = p.names[0].clone();
    let before = p.vm(&vm);
    p.edit_inventory("storage: local-lvm", "storage: fast");
    let plan = p.plan_path("move.plan");
    let out = p.cradle(
        &["--output", "json", "plan", "-i", &p.inventory(), "--allow-disk-move", "--out", &plan.display().to_string()],
        None,
    );
    assert!(!out.status.success(), "a blocked VM fails the plan: {}", show(&out));
    let doc = json_of(&out);
    assert_eq!(doc["vms"][0]["result"], "blocked", "{doc}");
    let why = doc["vms"][0]["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("does not move disks (scsi0 to fast, scsi1 to fast)") && why.contains("Move Storage"),
        "{why}"
    );
    assert!(saved_plans(&p).is_empty(), "no terraform plan was made: {:?}", saved_plans(&p));
    assert_module_unlifted(&p);
    assert_eq!(p.vm(&vm)["config"], before["config"], "the VM is untouched");
}

#[test]
fn a_stale_saved_plan_or_a_vm_changed_since_the_plan_is_refused_and_nothing_is_applied() {
    let p = remote(3);
    let vm = p.names[0].clone();
    grow_disk_and_memory(&p);
    let (plan, _) = p.plan_ok("maint.plan");
    // Another terraform apply in the module since the plan (a refresh-only
    // apply, someone's `terraform apply`) wrote the state with the next serial.
    let path = module(&p).join("terraform.tfstate");
    let mut state: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("state")).expect("JSON");
    let serial = state["serial"].as_u64().expect("serial") + 1;
    state["serial"] = serial.into();
    std::fs::write(&path, serde_json::to_string_pretty(&state).expect("JSON")).expect("write state");
    let before = p.vm(&vm);
    let refused = p.apply(&plan, "if-needed", None);
    assert!(!refused.status.success(), "{}", show(&refused));
    let error = json_of(&refused)["vms"][0]["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains(&vm) && error.contains("stale") && error.contains("plan again") && error.contains("conflict"),
        "terraform's refusal, as a conflict naming the VM: {error}"
    );
    assert_eq!(state_serial(&p), Some(serial), "nothing applied");
    assert_eq!(p.vm(&vm)["config"], before["config"], "the VM is untouched");
    assert_eq!(p.vm(&vm)["pending"], before["pending"], "nothing made pending");

    // A new plan; then the VM is changed through the API before it is applied.
    let (plan, _) = p.plan_ok("second.plan");
    let (vmid, node) = (p.vmid(&vm), p.vm(&vm)["node"].as_str().expect("node").to_string());
    p.api("PUT", &format!("/nodes/{node}/qemu/{vmid}/config"), &["memory=4096"]);
    let before = p.vm(&vm);
    let refused = p.apply(&plan, "if-needed", None);
    assert!(!refused.status.success(), "{}", show(&refused));
    let error = json_of(&refused)["vms"][0]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("changed since the plan") && error.contains("plan again"), "{error}");
    assert_eq!(state_serial(&p), Some(serial), "terraform never ran");
    assert_eq!(p.vm(&vm)["config"], before["config"], "the VM is as the other change left it");
}

#[test]
fn a_rerun_after_kill_9_around_the_terraform_apply_finishes_without_a_second_apply() {
    let p = remote(4);
    let vm = p.names[0].clone();
    // Killed right after the terraform capability's `apply` returned (the
    // plugin has not discarded the plan yet, the workflow has not seen it).
    grow_disk_and_memory(&p);
    let (plan, _) = p.plan_ok("first.plan");
    let killed = p.apply(&plan, "never", Some("call:apply"));
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&killed.status), Some(9), "{}", show(&killed));
    let serial = state_serial(&p);
    let (memory, _) = effective(&p.vm(&vm), "memory");
    assert_eq!(memory, "3072", "the killed run's terraform apply wrote memory");
    let rerun = p.apply(&plan, "never", None);
    assert!(rerun.status.success(), "rerun: {}", show(&rerun));
    let result = json_of(&rerun)["vms"][0]["result"].clone();
    assert_eq!(result, "applied-pending", "memory waits for a cold start: {}", show(&rerun));
    assert_eq!(state_serial(&p), serial, "no second terraform apply");
    let live = p.vm(&vm);
    assert!(effective(&live, "scsi1").0.contains("size=4G"), "{live}");

    // Killed after the terraform-apply step, with a NIC change (the
    // provider's netN form) and another grow.
    p.edit_inventory("vlan: 20", "vlan: 30");
    p.edit_inventory("{size: 4, slot: scsi1}", "{size: 6, slot: scsi1}");
    let (plan, _) = p.plan_ok("second.plan");
    let killed = p.apply(&plan, "never", Some("after:terraform-apply"));
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&killed.status), Some(9), "{}", show(&killed));
    let serial = state_serial(&p);
    let rerun = p.apply(&plan, "never", None);
    assert!(rerun.status.success(), "rerun: {}", show(&rerun));
    let result = json_of(&rerun)["vms"][0]["result"].clone();
    assert!(result == "applied-pending" || result == "unchanged", "{}", show(&rerun));
    assert_eq!(state_serial(&p), serial, "no second terraform apply");
    let live = p.vm(&vm);
    let (net0, _) = effective(&live, "net0");
    assert!(net0.contains("tag=30") && net0.contains("bridge=vmbr0"), "{net0}");
    assert!(effective(&live, "scsi1").0.contains("size=6G"), "{live}");
}

#[test]
fn a_terraform_plan_takes_the_vms_lock_and_is_blocked_while_another_run_holds_it() {
    let p = remote(5);
    let vm = p.names[0].clone();
    grow_disk_and_memory(&p);
    let (first, _) = p.plan_ok("first.plan");
    // An apply of it stops itself (SIGSTOP) holding the VM's lock, right
    // before its terraform apply.
    let mut holder = Command::new(cradle_tests::cradle_bin())
        .current_dir(p.dir.path())
        .arg("--config")
        .arg(p.dir.path().join("cradle.toml"))
        .args(["apply", &first.display().to_string(), "--reboot", "never"])
        .env("CRADLE_CRASH_AT", "before:terraform-apply")
        .env("CRADLE_CRASH_SIGNAL", "STOP")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cradle apply");
    cradle_tests::wait_stopped(&holder);
    let module_file = std::fs::read(module(&p).join("main.tf.json")).expect("main.tf.json");
    let kept = saved_plans(&p);
    let out = p.cradle(&["--output", "json", "plan", "-i", &p.inventory()], None);
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(!out.status.success(), "{}", show(&out));
    let doc = json_of(&out);
    assert_eq!(doc["vms"][0]["result"], "blocked", "{doc}");
    let why = doc["vms"][0]["why"].as_str().unwrap_or_default();
    assert!(why.contains(&vm) && why.contains(&holder.id().to_string()), "it names the VM and the holder: {why}");
    assert_eq!(std::fs::read(module(&p).join("main.tf.json")).expect("main.tf.json"), module_file, "module untouched");
    assert_eq!(saved_plans(&p), kept, "no plan made");
}
