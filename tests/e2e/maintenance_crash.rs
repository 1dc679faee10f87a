//! What must hold for `cradle apply` (issue 34, docs/INVARIANTS.md 10), the
//! real binary against the simulator in its own process ("Proxmox" outlives
//! each kill):
//! - kill -9 at EVERY boundary of apply — before and after each step, and
//!   right after the first successful call of each host function — then a
//!   plain rerun of the same `cradle apply PLAN` (no `cradle unlock`: the
//!   rerun takes the dead run's lock back) leaves each VM exactly as planned,
//!   with each write made once across both processes (one config PUT, one
//!   resize, one reboot, counted by the simulator itself), and a rerun after
//!   a kill that came once everything was done says `unchanged`. The
//!   boundaries are read from the journal of an unkilled apply, so a step
//!   added to workflows/maintain.rhai is killed at too, and one renamed
//!   fails the check of the steps the change must pass through;
//! - apply never writes to a VM whose live config is no longer what the plan
//!   read: a setting the plan does not touch changed by hand, or a VM changed
//!   between the config step and a resize (killed after `config`);
//! - a data disk or NIC the inventory dropped is removed only with its flag,
//!   a disk is never shrunk (flags or not);
//! - `--reboot never` never reboots: same boot id, no reboot request, the
//!   change reported pending until the next boot.
//!
//! Guests bind port 22 on 127.66.<subnet>.0/24, a prefix no other test file uses.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;

use cradle_tests::fixture::held_locks;
use serde_json::Value;

use crate::maintenance_lab::{Project, json_of, planned, row, show, writes_between};

const PREFIX: &str = "127.66";

/// VMs provisioned for a kill test: one for the unkilled reference run and
/// one per boundary (each boundary starts from a VM the plan has not touched).
const POOL: usize = 32;

/// The steps and calls the change of [`change_everything`] must pass through
/// (a rename in maintain.rhai fails here; a new step is killed at anyway).
const MUST_PASS: [&str; 9] = [
    "before:config",
    "before:resize-scsi0",
    "before:boot-id",
    "before:reboot",
    "before:verify-reboot",
    "before:verify",
    "call:set-config",
    "call:resize-disk",
    "call:power",
];

const PUT_CONFIG: &str = "PUT /nodes/{node}/qemu/{vmid}/config";
const PUT_RESIZE: &str = "PUT /nodes/{node}/qemu/{vmid}/resize";
const POST_REBOOT: &str = "POST /nodes/{node}/qemu/{vmid}/status/reboot";

/// One change of each kind for every VM: cores 2 → 4 and memory 2048 → 3072
/// (PVE keeps them pending on a running VM: the reboot), tags (live: the
/// config step), boot disk 12 → 14 GiB (the resize step).
fn change_everything(p: &Project) {
    p.edit_inventory("cores: 2", "cores: 4");
    p.edit_inventory("memory: 2048", "memory: 3072");
    p.edit_inventory("  disk: 12\n", "  disk: 14\n  tags: [maint]\n");
}

/// The PVE writes one apply of that change makes, each once.
fn one_of_each() -> BTreeMap<String, u64> {
    [PUT_CONFIG, PUT_RESIZE, POST_REBOOT].into_iter().map(|k| (k.to_string(), 1)).collect()
}

/// `vm` is as the plan said: in effect, nothing pending, nothing left over.
fn assert_as_planned(p: &Project, vm: &str, context: &str) {
    let v = p.vm(vm);
    let c = &v["config"];
    assert_eq!(c["cores"], "4", "{context}: {v}");
    assert_eq!(c["memory"], "3072", "{context}: {v}");
    assert_eq!(c["tags"], "maint", "{context}: {v}");
    assert!(c["scsi0"].as_str().unwrap_or_default().contains("size=14G"), "{context}: {v}");
    assert!(v["pending"].as_object().is_none_or(|m| m.is_empty()), "{context}: nothing pending: {v}");
    assert_eq!(v["power"], "running", "{context}: {v}");
}

/// The boundaries of an apply run as its journal met them: `before:S` and
/// `after:S` for each step S, `call:F` for the first successful call of each
/// host function F (where `CRADLE_CRASH_AT=call:F` kills), in order.
fn boundaries(journal: &[Value]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for e in journal {
        let b = match e["event"].as_str() {
            Some("step_started") => format!("before:{}", e["step"].as_str().unwrap_or_default()),
            Some("step_finished") if e["error"].is_null() => {
                format!("after:{}", e["step"].as_str().unwrap_or_default())
            }
            Some("capability_call") if e["outcome"]["result"] == "ok" => {
                format!("call:{}", e["function"].as_str().unwrap_or_default())
            }
            _ => continue,
        };
        if !seen.contains(&b) {
            seen.push(b);
        }
    }
    seen
}

/// The one body of the kill tests: provision [`POOL`] VMs, change them all;
/// apply vm-0 unkilled (the reference: its journal gives the boundaries, its
/// writes one of each); then for every boundary `pick` keeps, a VM of its own
/// planned, applied killed there, and applied again.
fn kill_at_each_boundary_then_rerun(subnet: u8, pick: fn(&str) -> bool) {
    let p = Project::new(PREFIX, subnet, POOL);
    p.provision();
    change_everything(&p);
    let state = p.dir.path().join("state");

    let reference = p.plan_path("vm-0.plan");
    let counted = p.requests();
    p.plan_json(&reference, &["--limit", "vm-0"]);
    let applied = p.apply(&reference, "if-needed", None);
    assert!(applied.status.success(), "the reference apply: {}", show(&applied));
    let doc = json_of(&applied);
    assert_eq!(row(&doc, "vm-0")["result"], "applied", "{doc}");
    assert_eq!(writes_between(&counted, &p.requests()), one_of_each(), "the reference apply writes each once");
    assert_as_planned(&p, "vm-0", "the reference apply");
    let run_id = row(&doc, "vm-0")["run_id"].as_str().expect("run id").to_string();
    let order = boundaries(&p.journal(&run_id));
    eprintln!("the boundaries of apply, in order: {order:?}");
    for b in MUST_PASS {
        assert!(order.contains(&b.to_string()), "the apply passed {b} (maintain.rhai renamed it?): {order:?}");
    }
    let at = |b: &str| order.iter().position(|x| x == b).unwrap_or_else(|| panic!("no {b} in {order:?}"));
    let (locked, unlocked, rebooted) = (at("call:acquire"), at("call:release"), at("call:power"));

    let picked: Vec<(usize, &String)> = order.iter().enumerate().filter(|(_, b)| pick(b)).collect();
    assert!(!picked.is_empty(), "no boundary picked from {order:?}");
    assert!(picked.len() < POOL, "{} boundaries, {} spare VMs: raise POOL", picked.len(), POOL - 1);
    let mut done = vec!["vm-0".to_string()];
    for (n, (i, boundary)) in picked.into_iter().enumerate() {
        let vm = p.names[n + 1].clone();
        let ctx = format!("{vm} killed at {boundary}");
        let plan = p.plan_path(&format!("{vm}.plan"));
        let boot = p.boot_id(n + 1);
        let counted = p.requests();
        let planned = p.plan_json(&plan, &["--limit", &vm]);
        assert_eq!(row(&planned, &vm)["result"], "changes", "{ctx}: {planned}");

        let killed = p.apply(&plan, "if-needed", Some(boundary));
        assert_eq!(killed.status.signal(), Some(9), "{ctx}: cradle died of SIGKILL: {}", show(&killed));
        let held = !held_locks(&state).is_empty();
        assert_eq!(held, locked <= i && i < unlocked, "{ctx}: the lock is left iff the kill came while it was held");

        let rerun = p.apply(&plan, "if-needed", None);
        assert!(rerun.status.success(), "{ctx}: the plain rerun finishes: {}", show(&rerun));
        let said = String::from_utf8_lossy(&rerun.stderr);
        if held {
            assert!(
                said.contains(&format!("|{vm}` from run")),
                "{ctx}: the rerun took the dead run's lock back: {said}"
            );
        }
        let result = row(&json_of(&rerun), &vm)["result"].clone();
        let finished = i >= rebooted;
        assert_eq!(result, if finished { "unchanged" } else { "applied" }, "{ctx}: {}", show(&rerun));
        assert_eq!(writes_between(&counted, &p.requests()), one_of_each(), "{ctx}: each write made once in all");
        assert_as_planned(&p, &vm, &ctx);
        assert_ne!(p.boot_id(n + 1), boot, "{ctx}: the guest was rebooted");
        assert!(held_locks(&state).is_empty(), "{ctx}: no lock left");
        done.push(vm);
    }
    // What the inventory asks for now: a new plan of these VMs finds nothing to do.
    let again = p.plan_json(&p.plan_path("again.plan"), &["--limit", &done.join(":")]);
    assert_eq!(again["summary"]["unchanged"], done.len(), "{again}");
}

#[test]
fn kill_9_before_and_after_every_step_of_apply_then_a_plain_rerun_makes_each_change_once() {
    kill_at_each_boundary_then_rerun(1, |b| !b.starts_with("call:"));
}

#[test]
fn kill_9_after_the_first_call_of_every_host_function_of_apply_then_a_plain_rerun_makes_each_change_once() {
    kill_at_each_boundary_then_rerun(2, |b| b.starts_with("call:"));
}

/// A project with one VM, provisioned, the inventory changed, a plan made:
/// the project, the VM's name, node, VMID and the plan.
fn planned_one(subnet: u8) -> (Project, String, String, u64, std::path::PathBuf) {
    let (p, plan, _) = planned(PREFIX, subnet, 1, change_everything);
    let vm = p.names[0].clone();
    let (node, vmid) = (p.vm(&vm)["node"].as_str().expect("node").to_string(), p.vmid(&vm));
    (p, vm, node, vmid, plan)
}

/// The refusal of a VM changed since the plan: apply failed naming it.
fn assert_refused_as_changed(applied: &std::process::Output, vm: &str) {
    assert!(!applied.status.success(), "apply must fail: {}", show(applied));
    let r = row(&json_of(applied), vm).clone();
    assert_eq!(r["result"], "failed", "{r}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(error.contains("changed since the plan") && error.contains("plan again"), "{error}");
}

#[test]
fn apply_writes_nothing_to_a_vm_whose_untouched_setting_changed_since_the_plan() {
    let (p, vm, node, vmid, plan) = planned_one(20);
    // Someone edits a setting the plan does not touch.
    p.api("PUT", &format!("/nodes/{node}/qemu/{vmid}/config"), &["description=changed by hand"]);
    let before = p.vm(&vm);
    let counted = p.requests();
    let applied = p.apply(&plan, "if-needed", None);
    assert_refused_as_changed(&applied, &vm);
    assert_eq!(writes_between(&counted, &p.requests()), BTreeMap::new(), "apply sent no write");
    let after = p.vm(&vm);
    assert_eq!((&after["config"], &after["pending"]), (&before["config"], &before["pending"]), "the VM is untouched");
    assert_eq!(after["config"]["cores"], "2", "{after}");
}

#[test]
fn a_vm_changed_between_the_config_step_and_the_resize_is_refused_by_the_rerun_and_not_written_again() {
    let (p, vm, node, vmid, plan) = planned_one(21);
    let killed = p.apply(&plan, "if-needed", Some("after:config"));
    assert_eq!(killed.status.signal(), Some(9), "{}", show(&killed));
    let half = p.vm(&vm);
    assert_eq!(half["config"]["tags"], "maint", "the config step was made: {half}");
    assert!(half["config"]["scsi0"].as_str().unwrap_or_default().contains("size=12G"), "no resize yet: {half}");
    // Between the two steps, someone sets memory (a key the plan touches) by hand.
    p.api("PUT", &format!("/nodes/{node}/qemu/{vmid}/config"), &["memory=4096"]);
    let before = p.vm(&vm);
    let reboots = p.tasks_of("qmreboot", vmid);
    let counted = p.requests();
    let rerun = p.apply(&plan, "if-needed", None);
    assert_refused_as_changed(&rerun, &vm);
    let error = row(&json_of(&rerun), &vm)["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("memory is 4096"), "the refusal names what differs: {error}");
    assert_eq!(writes_between(&counted, &p.requests()), BTreeMap::new(), "the rerun sent no write");
    let after = p.vm(&vm);
    assert_eq!((&after["config"], &after["pending"]), (&before["config"], &before["pending"]), "the VM is untouched");
    assert!(after["config"]["scsi0"].as_str().unwrap_or_default().contains("size=12G"), "never resized: {after}");
    assert_eq!(p.tasks_of("qmreboot", vmid), reboots, "never rebooted");
    assert!(
        held_locks(&p.dir.path().join("state")).is_empty(),
        "the refusing rerun took the lock back and released it"
    );
}

/// The changes of a plan file's only VM.
fn planned_changes(plan: &std::path::Path) -> Value {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(plan).expect("plan")).expect("plan JSON");
    doc["vms"][0]["changes"].clone()
}

/// The change of `what` in a plan's JSON row.
fn change<'a>(r: &'a Value, what: &str) -> &'a Value {
    r["changes"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["what"] == what))
        .unwrap_or_else(|| panic!("no change `{what}`: {r}"))
}

#[test]
fn a_dropped_disk_or_nic_is_removed_only_with_its_flag_and_a_disk_is_never_shrunk() {
    let p = Project::new(PREFIX, 22, 1);
    p.edit_inventory("  startup_order: 10\n", "  startup_order: 10\n  disks:\n    - {size: 2, slot: scsi1}\n");
    let nic1 = "    nic1:\n      bridge: vmbr0\n      vlan: 30\n      ip: 192.168.66.10/24\n      interface: ens19\n";
    p.edit_inventory("vms_wait:", &format!("{nic1}vms_wait:"));
    p.provision();
    let vm = p.names[0].clone();
    let live = p.vm(&vm);
    let (scsi1, net1) = (live["config"]["scsi1"].clone(), live["config"]["net1"].clone());
    assert!(scsi1.is_string() && net1.is_string(), "provisioned with a data disk and a second NIC: {live}");

    // The inventory drops both, asks for a smaller boot disk, and a tag.
    p.edit_inventory("  disks:\n    - {size: 2, slot: scsi1}\n", "");
    p.edit_inventory(nic1, "");
    p.edit_inventory("  disk: 12\n", "  disk: 10\n  tags: [flagged]\n");

    let plan = p.plan_path("noflags.plan");
    let doc = p.plan_json(&plan, &[]);
    let r = row(&doc, &vm);
    for (what, flag) in [("scsi1", Value::from("--allow-disk-removal")), ("net1", "--allow-nic-replacement".into())] {
        assert_eq!(change(r, what)["class"], "refused", "{what} without its flag: {r}");
        assert_eq!(change(r, what)["flag"], flag, "{what} names its flag: {r}");
    }
    assert_eq!(change(r, "boot disk size")["class"], "refused", "{r}");
    assert_eq!(change(r, "boot disk size")["flag"], Value::Null, "no flag allows a shrink: {r}");
    let ops = planned_changes(&plan);
    assert_eq!(ops["delete"], serde_json::json!([]), "the plan removes nothing: {ops}");
    assert_eq!(ops["resize"], serde_json::json!([]), "the plan resizes nothing: {ops}");
    assert_eq!(ops["set"], serde_json::json!({"tags": "flagged"}), "the plan sets the tag only: {ops}");
    let applied = p.apply(&plan, "never", None);
    assert!(applied.status.success(), "{}", show(&applied));
    let after = p.vm(&vm);
    assert_eq!(after["config"]["tags"], "flagged", "the allowed change was made: {after}");
    assert_eq!((&after["config"]["scsi1"], &after["config"]["net1"]), (&scsi1, &net1), "disk and NIC kept: {after}");
    assert!(after["config"]["scsi0"].as_str().unwrap_or_default().contains("size=12G"), "not shrunk: {after}");

    // With both flags: the disk is detached (its volume kept unused), the NIC
    // removed; the shrink is still refused.
    let plan = p.plan_path("flags.plan");
    let doc = p.plan_json(&plan, &["--allow-disk-removal", "--allow-nic-replacement"]);
    let r = row(&doc, &vm);
    for what in ["scsi1", "net1"] {
        assert_ne!(change(r, what)["class"], "refused", "{what} with its flag: {r}");
    }
    assert_eq!(change(r, "boot disk size")["class"], "refused", "a shrink even with flags: {r}");
    // Detaching a disk is a destructive call: a flag never widens the grants.
    let denied = p.apply(&plan, "never", None);
    assert!(!denied.status.success(), "{}", show(&denied));
    let error = row(&json_of(&denied), &vm)["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("destructive calls are not granted"), "{error}");
    assert_eq!(p.vm(&vm)["config"]["scsi1"], scsi1, "nothing detached without the grant");
    p.edit_config(
        "storages = [\"*\"]\n[workflow.grants.ssh]",
        "storages = [\"*\"]\ndestructive = true\n[workflow.grants.ssh]",
    );
    let counted = p.requests();
    let applied = p.apply(&plan, "never", None);
    assert!(applied.status.success(), "{}", show(&applied));
    assert_eq!(row(&json_of(&applied), &vm)["result"], "applied", "{}", show(&applied));
    assert_eq!(writes_between(&counted, &p.requests()).get(PUT_RESIZE), None, "no resize");
    let after = p.vm(&vm);
    let c = &after["config"];
    assert!(c["scsi1"].is_null() && c["net1"].is_null(), "disk and NIC removed: {after}");
    let volume = scsi1.as_str().unwrap().split(',').next().unwrap().to_string();
    assert_eq!(c["unused0"], volume.as_str(), "the disk's volume is kept as unused0: {after}");
    assert!(c["scsi0"].as_str().unwrap_or_default().contains("size=12G"), "not shrunk: {after}");
}

#[test]
fn apply_with_reboot_never_leaves_the_guest_booted_and_says_what_waits_for_the_next_boot() {
    let (p, vm, _node, vmid, plan) = planned_one(23);
    let boot = p.boot_id(0);
    let reboots = p.tasks_of("qmreboot", vmid);
    let counted = p.requests();
    let applied = p.apply(&plan, "never", None);
    assert!(applied.status.success(), "{}", show(&applied));
    let r = row(&json_of(&applied), &vm).clone();
    assert_eq!(r["result"], "applied-pending", "{r}");
    let why = r["why"].as_str().unwrap_or_default();
    assert!(why.contains("cores") && why.contains("memory") && why.contains("pending until the next boot"), "{why}");
    let writes = writes_between(&counted, &p.requests());
    let expected: BTreeMap<String, u64> = [(PUT_CONFIG.to_string(), 1), (PUT_RESIZE.to_string(), 1)].into();
    assert_eq!(writes, expected, "the config and the resize, no power request");
    assert_eq!(p.tasks_of("qmreboot", vmid), reboots, "no reboot task");
    assert_eq!(p.boot_id(0), boot, "the guest was not rebooted");
    let after = p.vm(&vm);
    assert_eq!(after["power"], "running");
    assert_eq!((&after["pending"]["cores"], &after["pending"]["memory"]), (&"4".into(), &"3072".into()), "{after}");
}
