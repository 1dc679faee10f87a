//! `--allow-disk-move` (issue 34; docs/MAINTENANCE.md, "The refusal flags";
//! docs/INVARIANTS.md 10): the real binary against a simulator in its own
//! process with a second images storage, `fast`, and the inventory's storage
//! changed from `local-lvm` to `fast` (the boot disk, `scsi0`):
//! - without the flag the change is `refused` naming the flag, and apply
//!   moves nothing;
//! - with it, apply moves the disk with one `POST …/move_disk`; the old volume
//!   stays as `unused0`; a new plan finds nothing to do;
//! - kill -9 before, inside (right after the `move-disk` call) and after the
//!   move step, then a plain rerun: the disk is moved exactly once;
//! - a target storage outside the workflow's grant is denied before any
//!   request, and nothing moves.
//!
//! Guests bind port 22 on 127.68.<subnet>.0/24, a prefix no other test file uses.

use std::os::unix::process::ExitStatusExt;

use crate::maintenance_lab::{Project, json_of, row, show, writes_between};

const PREFIX: &str = "127.68";

const MOVE: &str = "POST /nodes/{node}/qemu/{vmid}/move_disk";

/// A project whose VMs were provisioned on `local-lvm`, the inventory now
/// naming `fast` as their storage.
fn moved_inventory(subnet: u8, hosts: usize) -> Project {
    let p = Project::with_sim_args(PREFIX, subnet, hosts, &["--storage", "fast=lvmthin:images,rootdir"]);
    p.provision();
    p.edit_inventory("storage: local-lvm", "storage: fast");
    p
}

/// The volume of `vm`'s `key` drive in the simulator's state.
fn volume(p: &Project, vm: &str, key: &str) -> String {
    let v = p.vm(vm);
    let value = v["config"][key].as_str().unwrap_or_else(|| panic!("{vm} has no {key}: {v}")).to_string();
    value.split(',').next().unwrap_or_default().to_string()
}

/// `vm`'s boot disk is on `fast`, and its old volume is its only unused disk.
fn assert_moved_once(p: &Project, vm: &str, old: &str, context: &str) {
    let v = p.vm(vm);
    assert!(volume(p, vm, "scsi0").starts_with("fast:vm-"), "{context}: scsi0 on fast: {v}");
    assert_eq!(v["config"]["unused0"], old, "{context}: the old volume kept as unused0: {v}");
    assert!(v["config"]["unused1"].is_null(), "{context}: one move, one unused disk: {v}");
}

#[test]
fn a_storage_change_is_refused_without_allow_disk_move_and_nothing_moves() {
    let p = moved_inventory(1, 1);
    let vm = p.names[0].clone();
    let plan = p.plan_path("no-flag.plan");
    let doc = p.plan_json(&plan, &[]);
    let changes = row(&doc, &vm)["changes"].as_array().cloned().unwrap_or_default();
    let storage = changes.iter().find(|c| c["what"] == "boot disk storage").unwrap_or_else(|| panic!("{doc}"));
    assert_eq!((storage["class"].as_str(), storage["flag"].as_str()), (Some("refused"), Some("--allow-disk-move")));
    let old = volume(&p, &vm, "scsi0");
    let before = p.requests();
    let applied = p.apply(&plan, "never", None);
    assert!(applied.status.success(), "{}", show(&applied));
    assert_eq!(row(&json_of(&applied), &vm)["result"], "unchanged", "{}", show(&applied));
    assert!(writes_between(&before, &p.requests()).is_empty(), "no write at all");
    assert_eq!(volume(&p, &vm, "scsi0"), old);
}

#[test]
fn with_allow_disk_move_kill_9_around_the_move_then_a_rerun_moves_the_boot_disk_once() {
    // vm-0 unkilled; then one VM per boundary of the move step.
    let boundaries = [None, Some("before:move-scsi0"), Some("call:move-disk"), Some("after:move-scsi0")];
    let p = moved_inventory(2, boundaries.len());
    for (i, crash) in boundaries.into_iter().enumerate() {
        let vm = p.names[i].clone();
        let ctx = format!("{vm} killed at {crash:?}");
        let old = volume(&p, &vm, "scsi0");
        let plan = p.plan_path(&format!("{vm}.plan"));
        let planned = p.plan_json(&plan, &["--limit", &vm, "--allow-disk-move"]);
        let change = &row(&planned, &vm)["changes"][0];
        assert_eq!((change["what"].as_str(), change["class"].as_str()), (Some("boot disk storage"), Some("live")));
        let counted = p.requests();
        if let Some(at) = crash {
            let killed = p.apply(&plan, "never", Some(at));
            assert_eq!(killed.status.signal(), Some(9), "{ctx}: cradle died of SIGKILL: {}", show(&killed));
        }
        let applied = p.apply(&plan, "never", None);
        assert!(applied.status.success(), "{ctx}: {}", show(&applied));
        let result = row(&json_of(&applied), &vm)["result"].clone();
        assert!(result == "applied" || result == "unchanged", "{ctx}: {}", show(&applied));
        let writes = writes_between(&counted, &p.requests());
        assert_eq!(writes.get(MOVE), Some(&1), "{ctx}: one move_disk in all: {writes:?}");
        assert_eq!(writes.len(), 1, "{ctx}: no other write: {writes:?}");
        assert_moved_once(&p, &vm, &old, &ctx);
    }
    let again = p.plan_json(&p.plan_path("again.plan"), &["--allow-disk-move"]);
    assert_eq!(again["summary"]["unchanged"], p.names.len(), "a new plan finds nothing to do: {again}");
}

#[test]
fn a_move_to_a_storage_outside_the_workflow_grant_is_denied_before_any_request() {
    let p = moved_inventory(3, 1);
    let vm = p.names[0].clone();
    let config = p.dir.path().join("cradle.toml");
    let text = std::fs::read_to_string(&config).expect("cradle.toml");
    let narrowed = text.replacen("storages = [\"*\"]", "storages = [\"local-lvm\", \"local\"]", 1);
    assert_ne!(text, narrowed, "the workflow grant names its storages");
    std::fs::write(&config, narrowed).expect("narrow the grant");
    let plan = p.plan_path("denied.plan");
    p.plan_json(&plan, &["--allow-disk-move"]);
    let old = volume(&p, &vm, "scsi0");
    let before = p.requests();
    let applied = p.apply(&plan, "never", None);
    assert!(!applied.status.success(), "the move is denied: {}", show(&applied));
    let error = row(&json_of(&applied), &vm)["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains("denied") && error.contains("move-scsi0") && error.contains("`fast`"),
        "names the step and the storage: {error}"
    );
    assert!(writes_between(&before, &p.requests()).is_empty(), "no request was sent");
    assert_eq!(volume(&p, &vm, "scsi0"), old);
}
