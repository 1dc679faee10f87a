//! `create`: clone the template, wait for the clone, configure the VM.
//!
//! Called for a VM that already exists (the workflow does so only while the
//! VM's creation record says its creation stage did not finish), `create`
//! resumes instead of cloning: it waits for the VM's own running tasks (a
//! clone or migration the interrupted run started), then writes only the
//! settings that still differ and grows the disk if it is still smaller. A
//! running VM whose configuration is incomplete is a `conflict`: its pending
//! changes would not apply until a reboot, so it is left for the operator.
//!
//! A clone is not idempotent (invariant 5): it goes through the kit's
//! `proxmox::clone_once`, which after an ambiguous failure re-reads the
//! cluster and the template's tasks before deciding, and never produces a
//! second VM.

use cradle_guest::Error;
use cradle_guest::log::{self, Level};
use cradle_guest::proxmox::{self, TASK_TIMEOUT_MS};
use cradle_guest::types::{Snippets, VmSpec, VmState};

use crate::{config, wait};

/// Clone and configure `vm` (or finish configuring it); returns it stopped.
pub fn create(vm: &VmSpec, snippets: &Snippets) -> Result<VmState, Error> {
    let vms = proxmox::list_vms()?;
    if let Some(found) = proxmox::discover_in(&vms, vm)? {
        let found = settle_tasks(vm, found)?;
        if !configure(vm, snippets, &found)? {
            log::vm(Level::Info, vm, "resumed: the configuration was already complete");
        }
        return Ok(VmState { has_cloudinit_drive: true, ..found });
    }
    let template = proxmox::template_in(&vms, vm)?;
    proxmox::clone_once(vm, &template, &proxmox::clone_request(vm, &template))?;
    // The clone task ended OK: the VM is on the template's node, stopped and unlocked.
    let state = VmState {
        name: vm.name.clone(),
        vmid: vm.vmid,
        node: template.node.clone(),
        status: "stopped".into(),
        lock: None,
        has_cloudinit_drive: true,
    };
    configure(vm, snippets, &state)?;
    log::vm(Level::Info, vm, "cloned and configured");
    Ok(state)
}

/// Writes the settings that differ and grows the boot disk; `false` when
/// there was nothing to do.
fn configure(vm: &VmSpec, snippets: &Snippets, found: &VmState) -> Result<bool, Error> {
    let node = found.node.as_str();
    let current = proxmox::get_config(node, vm.vmid)?;
    let digest = current.iter().find(|e| e.key == "digest").map(|e| e.value.clone());
    let (set, resize) = config::configure(vm, snippets, &current)?;
    let set = cradle_guest::config::differing(set, &current);
    if set.is_empty() && resize.is_none() {
        return Ok(false);
    }
    if found.status != "stopped" {
        let keys: Vec<&str> = set.iter().map(|e| e.key.as_str()).collect();
        return Err(Error::Conflict(format!(
            "{} (vmid {}) is {} but its configuration is incomplete (still to set: {}{}); \
             stop it on {node} (`qm stop {}`) and rerun provision, or remove it",
            vm.name,
            vm.vmid,
            found.status,
            keys.join(", "),
            if resize.is_some() { ", boot disk size" } else { "" },
            vm.vmid
        )));
    }
    if !set.is_empty() {
        proxmox::set_config(node, vm.vmid, &set, &[], digest.as_deref())?;
    }
    if let Some((disk, size)) = resize {
        let upid = proxmox::resize_disk(node, vm.vmid, &disk, &size)?;
        wait(node, &upid, &format!("resize {disk} of {}", vm.name))?;
    }
    Ok(true)
}

/// An interrupted run may have left a task working on the VM (its clone, a
/// migration, a resize): wait for those before touching the config (or
/// destroying it). A lock that outlives every task of the VM is stuck:
/// [`stuck_lock`] says how to clear it.
pub(crate) fn settle_tasks(vm: &VmSpec, found: VmState) -> Result<VmState, Error> {
    let Some(lock) = found.lock.clone() else {
        return Ok(found);
    };
    log::vm(Level::Info, vm, &format!("resuming: the VM is locked ({lock}); waiting for its tasks"));
    // A clone's task runs under the template's VMID; every other task under the VM's.
    let (node, id) = if lock == "clone" {
        let template = proxmox::template(vm)?;
        (template.node, template.vmid)
    } else {
        (found.node.clone(), vm.vmid)
    };
    // Only the tasks that can hold this VM's lock; stop as soon as it is free.
    let kind = if lock == "clone" { Some("qmclone") } else { None };
    for task in proxmox::list_tasks(&node, Some(id), kind)? {
        if task.status.is_some() {
            continue;
        }
        // Another VM's clone of the same template may fail: not our concern here.
        let _ = proxmox::wait_task(&node, &task.upid, TASK_TIMEOUT_MS);
        if proxmox::discover(vm)?.is_some_and(|now| now.lock.is_none()) {
            break;
        }
    }
    let now = proxmox::discover(vm)?
        .ok_or_else(|| Error::Failed(format!("{} disappeared while its tasks finished; rerun provision", vm.name)))?;
    match now.lock {
        None => Ok(now),
        Some(lock) => Err(stuck_lock(vm, &lock, &now.node)),
    }
}

/// A VM whose config `lock` no running task holds: on Proxmox VE the task that
/// took it ended without clearing it (a node crash, a killed worker), and only
/// the operator can tell it is safe to clear. Names the VM, the lock, and the
/// way out on PVE (`qm unlock` on the node) and on the simulator (the same
/// command over its node SSH, or a restart, which finishes the tasks it was
/// running as PVE would and releases their locks).
pub(crate) fn stuck_lock(vm: &VmSpec, lock: &str, node: &str) -> Error {
    Error::Transient(format!(
        "{} (vmid {}) is still locked ({lock}) on {node} and no task of it is running: the task that \
         took the lock is gone. On Proxmox VE check the VM's Tasks, then run `qm unlock {}` on node \
         {node}; on a simulator (`cradle sim serve`) run the same `qm unlock {}` over its node SSH, \
         or restart it (a restarted simulator finishes the tasks it was running and releases their \
         locks). Then rerun",
        vm.name, vm.vmid, vm.vmid, vm.vmid
    ))
}
