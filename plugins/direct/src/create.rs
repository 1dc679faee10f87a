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
//! A clone is not idempotent (invariant 5). When the clone call fails in a way
//! that leaves its outcome unknown (`transient`: timeout, reset connection,
//! 5xx), this module waits for the template's running clone tasks and re-reads
//! the cluster: if the VM exists it is used; if it does not and no clone of it
//! is running, the clone did not happen and is tried once more. It never
//! produces a second VM: a retry only follows proof that the first did nothing.

use crate::bindings::cradle::host::log::Level;
use crate::bindings::cradle::host::proxmox::{self, CloneRequest, VmResource};
use crate::bindings::cradle::host::types::{Error, Snippets, VmSpec, VmState};
use crate::{TASK_TIMEOUT_MS, config, find, log, wait};

/// Clone and configure `vm` (or finish configuring it); returns it stopped.
pub fn create(vm: &VmSpec, snippets: &Snippets) -> Result<VmState, Error> {
    let vms = proxmox::list_vms()?;
    if let Some(found) = find::discover_in(&vms, vm)? {
        let found = settle_tasks(vm, found)?;
        if !configure(vm, snippets, &found)? {
            log(Level::Info, "resumed: the configuration was already complete", vm);
        }
        return Ok(VmState { has_cloudinit_drive: true, ..found });
    }
    let template = find::template_in(&vms, vm)?;
    clone(vm, &template)?;
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
    log(Level::Info, "cloned and configured", vm);
    Ok(state)
}

/// Writes the settings that differ and grows the boot disk; `false` when
/// there was nothing to do.
fn configure(vm: &VmSpec, snippets: &Snippets, found: &VmState) -> Result<bool, Error> {
    let node = found.node.as_str();
    let current = proxmox::get_config(node, vm.vmid)?;
    let digest = current.iter().find(|e| e.key == "digest").map(|e| e.value.clone());
    let (set, resize) = config::configure(vm, snippets, &current)?;
    let set = config::differing(set, &current);
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
/// migration, a resize): wait for those before touching the config.
fn settle_tasks(vm: &VmSpec, found: VmState) -> Result<VmState, Error> {
    let Some(lock) = found.lock.clone() else {
        return Ok(found);
    };
    log(Level::Info, &format!("resuming: the VM is locked ({lock}); waiting for its tasks"), vm);
    // A clone's task runs under the template's VMID; every other task under the VM's.
    let (node, id) = if lock == "clone" {
        let template = find::template(vm)?;
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
        if find::discover(vm)?.is_some_and(|now| now.lock.is_none()) {
            break;
        }
    }
    let now = find::discover(vm)?
        .ok_or_else(|| Error::Failed(format!("{} disappeared while its tasks finished; rerun provision", vm.name)))?;
    match now.lock {
        None => Ok(now),
        Some(lock) => Err(Error::Transient(format!(
            "{} (vmid {}) is still locked ({lock}) with no task of it running on {node}; \
             check its Tasks, then `qm unlock {}` if nothing is working on it, and rerun",
            vm.name, vm.vmid, vm.vmid
        ))),
    }
}

fn request(vm: &VmSpec, template: &VmResource) -> CloneRequest {
    CloneRequest {
        node: template.node.clone(),
        template_vmid: template.vmid,
        newid: vm.vmid,
        name: vm.name.clone(),
        full: true,
        storage: Some(vm.storage.clone()),
        target: None,
        description: Some(format!("created by cradle from {}", vm.template)),
    }
}

fn clone(vm: &VmSpec, template: &VmResource) -> Result<(), Error> {
    let req = request(vm, template);
    let what = format!("clone {} to {}", vm.template, vm.name);
    match proxmox::clone_vm(&req) {
        Ok(upid) => wait(&template.node, &upid, &what),
        Err(Error::Transient(first)) => settle(vm, template, &req, &what, &first),
        Err(e) => Err(e),
    }
}

/// The clone call failed ambiguously: find out what happened before acting.
fn settle(vm: &VmSpec, template: &VmResource, req: &CloneRequest, what: &str, first: &str) -> Result<(), Error> {
    log(Level::Warn, &format!("{what}: outcome unknown ({first}); re-reading the cluster before deciding"), vm);
    // One of the template's running clones may be ours: let them finish.
    for task in proxmox::list_tasks(&template.node, Some(template.vmid), Some("qmclone"))? {
        if task.status.is_none() {
            let _ = proxmox::wait_task(&template.node, &task.upid, TASK_TIMEOUT_MS)?;
        }
    }
    let now = proxmox::list_vms()?;
    match now.iter().find(|r| r.vmid == vm.vmid) {
        Some(r) if r.name.as_deref() == Some(vm.name.as_str()) => {
            if r.lock.as_deref() == Some("clone") {
                return Err(Error::Transient(format!(
                    "{what}: the clone exists but is still locked; rerun provision to continue with it"
                )));
            }
            log(Level::Info, &format!("{what}: the clone had happened; continuing with it"), vm);
            Ok(())
        }
        Some(r) => Err(Error::Conflict(format!(
            "{what}: vmid {} is now taken by {}; not cloning again",
            vm.vmid,
            r.name.as_deref().unwrap_or("an unnamed VM")
        ))),
        None => {
            log(
                Level::Warn,
                &format!("{what}: no trace of the clone in the cluster or its tasks; cloning once more"),
                vm,
            );
            match proxmox::clone_vm(req) {
                Ok(upid) => wait(&template.node, &upid, what),
                Err(Error::Transient(second)) => Err(Error::Transient(format!(
                    "{what}: failed twice with an unknown outcome ({first}; then {second}); rerun provision: it re-discovers before cloning"
                ))),
                Err(e) => Err(e),
            }
        }
    }
}
