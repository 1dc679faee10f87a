//! `proxmox`: the Proxmox VE API as the host offers it (scoped by the
//! `proxmox` grant: VMID range, nodes, storages, templates, destructive), and
//! the recurring work of a backend built on it:
//!
//! - [`wait`]: wait for a task and turn its end into a [`Result`] naming the step;
//! - [`discover`] / [`template`]: find the VM by its identity (name and VMID
//!   must agree; invariant 6) and the template by name;
//! - [`clone_once`]: clone, and after an ambiguous failure re-read the
//!   cluster and its tasks before deciding; never a second VM (invariant 5).

use crate::Result;
pub use crate::bindings::cradle::host::proxmox::*;
use crate::config::has_cloudinit_drive;
use crate::log::{self, Level};
use crate::types::{VmSpec, VmState};

/// How long one Proxmox task may take before a helper gives up waiting:
/// 15 minutes (a full clone of a large template on slow storage).
pub const TASK_TIMEOUT_MS: u64 = 15 * 60 * 1000;

/// Wait for `upid` on `node` for up to `timeout_ms`. A task that stops with
/// an error is the error its cause stands for (the host's `task-failure`: a
/// locked VM is `conflict`, a linked clone that cannot migrate `invalid`,
/// anything unknown `failed`), naming `what` and the task; one still running
/// at the timeout is `transient` (it may still finish: re-read before acting).
pub fn wait(node: &str, upid: &str, what: &str, timeout_ms: u64) -> Result<()> {
    let status = wait_task(node, upid, timeout_ms)?;
    if status.ok {
        return Ok(());
    }
    match status.exitstatus {
        // Classed by the host as an HTTP error of the same cause would be.
        Some(exit) => Err(task_failure(node, upid, &exit).context(what)),
        None => Err(Error::Transient(format!(
            "{what}: task {upid} still running after {} s; check `Tasks` on node {node}",
            timeout_ms / 1000
        ))),
    }
}

/// A clone request for `vm` from `template`: a full clone onto the VM's
/// storage, on the template's node, described as made by cradle.
pub fn clone_request(vm: &VmSpec, template: &VmResource) -> CloneRequest {
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

/// Clone `template` to `vm` with `req` and wait for the clone task. When the
/// call fails in a way that leaves its outcome unknown (`transient`:
/// timeout, reset connection, 5xx), the template's running clone tasks are
/// waited for and the cluster re-read: an existing VM with the VM's name and
/// VMID is used; a VMID taken by another name is `conflict`; no trace at all
/// means the clone did not happen, and it is tried once more. A retry only
/// follows proof that the first call did nothing.
pub fn clone_once(vm: &VmSpec, template: &VmResource, req: &CloneRequest) -> Result<()> {
    let what = format!("clone {} to {}", vm.template, vm.name);
    match clone_vm(req) {
        Ok(upid) => wait(&template.node, &upid, &what, TASK_TIMEOUT_MS),
        Err(Error::Transient(first)) => settle(vm, template, req, &what, &first),
        Err(e) => Err(e),
    }
}

/// The clone call failed ambiguously: find out what happened before acting.
fn settle(vm: &VmSpec, template: &VmResource, req: &CloneRequest, what: &str, first: &str) -> Result<()> {
    log::vm(Level::Warn, vm, &format!("{what}: outcome unknown ({first}); re-reading the cluster before deciding"));
    // One of the template's running clones may be ours: let them finish.
    for task in list_tasks(&template.node, Some(template.vmid), Some("qmclone"))? {
        if task.status.is_none() {
            wait_task(&template.node, &task.upid, TASK_TIMEOUT_MS)?;
        }
    }
    // Name and VMID as `discover` judges them (a clone without its name yet
    // included): the same rules as a rerun's.
    match discover_in(&list_vms()?, vm) {
        Ok(Some(found)) => {
            if found.lock.as_deref() == Some("clone") {
                return Err(Error::Transient(format!(
                    "{what}: the clone exists but is still locked; rerun provision to continue with it"
                )));
            }
            log::vm(Level::Info, vm, &format!("{what}: the clone had happened; continuing with it"));
            Ok(())
        }
        Err(Error::Conflict(why)) => Err(Error::Conflict(format!("{what}: {why}; not cloning again"))),
        Err(e) => Err(e),
        Ok(None) => {
            log::vm(
                Level::Warn,
                vm,
                &format!("{what}: no trace of the clone in the cluster or its tasks; cloning once more"),
            );
            match clone_vm(req) {
                Ok(upid) => wait(&template.node, &upid, what, TASK_TIMEOUT_MS),
                Err(Error::Transient(second)) => Err(Error::Transient(format!(
                    "{what}: failed twice with an unknown outcome ({first}; then {second}); rerun provision: it re-discovers before cloning"
                ))),
                Err(e) => Err(e),
            }
        }
    }
}

/// Whether `cluster/resources` lists `r` without a name of its own: none, or
/// `VM <vmid>`. Proxmox VE takes that name from `pvestatd`'s last status round
/// (pve-manager `PVE/API2Tools.pm` `extract_vm_stats`), which names a config
/// without `name` `VM <vmid>` (qemu-server `vmstatus`) and lags a config change
/// by seconds. A clone's config is such a config until its first drive is
/// copied (qemu-server `PVE/API2/Qemu.pm` `clone_vm` writes a temporary file
/// with only `lock: clone` first), and its real name can read `VM <vmid>` for
/// a few seconds after the clone ended. So for these the config is read.
fn listed_without_name(r: &VmResource) -> bool {
    let default = format!("VM {}", r.vmid);
    !r.template && r.name.as_deref().is_none_or(|n| n.is_empty() || n == default)
}

/// The VM named `vm.name` with `vm.vmid`, if it exists. Name and VMID must
/// agree: either one alone found on another VM is a conflict (invariant 6).
/// A VM listed without a name of its own at `vm.vmid` ([`listed_without_name`])
/// is judged by its config: its `name` there, or, with no name and
/// `lock: clone`, a clone still copying its first drive, returned as this VM
/// with `lock: clone` to be waited for, never cloned again or taken for
/// another VM. Whether it is this run's clone the workflow decides (the VMID's
/// creation record; `workflows/lib/decide.rhai`).
pub fn discover(vm: &VmSpec) -> Result<Option<VmState>> {
    discover_in(&list_vms()?, vm)
}

/// [`discover`] in a cluster listing already read (one `cluster/resources`
/// read serves several lookups: it is the most expensive call of a run).
pub fn discover_in(vms: &[VmResource], vm: &VmSpec) -> Result<Option<VmState>> {
    let by_name: Vec<&VmResource> = vms.iter().filter(|r| r.name.as_deref() == Some(vm.name.as_str())).collect();
    let by_vmid = vms.iter().find(|r| r.vmid == vm.vmid);
    if by_name.len() > 1 {
        let ids: Vec<String> = by_name.iter().map(|r| r.vmid.to_string()).collect();
        return Err(Error::Conflict(format!(
            "{} VMs are named {} (vmids {}); resolve the duplicate by hand before provisioning",
            by_name.len(),
            vm.name,
            ids.join(", ")
        )));
    }
    match (by_name.first(), by_vmid) {
        (None, None) => Ok(None),
        (Some(named), _) if named.vmid != vm.vmid => Err(Error::Conflict(format!(
            "a VM named {} exists with vmid {} on {}, but the inventory gives vmid {}; fix the inventory or the VM",
            vm.name, named.vmid, named.node, vm.vmid
        ))),
        (None, Some(unnamed)) if listed_without_name(unnamed) => {
            let config = get_config(&unnamed.node, unnamed.vmid)?;
            let get = |key: &str| config.iter().find(|e| e.key == key).map(|e| e.value.as_str());
            let state = |lock: Option<&str>, has_cloudinit_drive| VmState {
                name: vm.name.clone(),
                vmid: unnamed.vmid,
                node: unnamed.node.clone(),
                status: unnamed.status.clone(),
                lock: lock.map(str::to_string),
                has_cloudinit_drive,
            };
            match (get("name"), get("lock")) {
                (Some(name), lock) if name == vm.name => Ok(Some(state(lock, has_cloudinit_drive(&config)))),
                // The template's drives, once the clone has copied them.
                (None, Some("clone")) => Ok(Some(state(Some("clone"), true))),
                (name, _) => Err(Error::Conflict(format!(
                    "vmid {} is taken by {} on {}, not by {}; choose another VMID in the inventory",
                    vm.vmid,
                    name.unwrap_or("an unnamed VM"),
                    unnamed.node,
                    vm.name
                ))),
            }
        }
        (None, Some(other)) => Err(Error::Conflict(format!(
            "vmid {} is taken by {} on {}, not by {}; choose another VMID in the inventory",
            vm.vmid,
            other.name.as_deref().unwrap_or("an unnamed VM"),
            other.node,
            vm.name
        ))),
        (Some(found), _) if found.template => Err(Error::Conflict(format!(
            "{} (vmid {}) is a template, not a VM; refusing to treat it as the guest",
            vm.name, found.vmid
        ))),
        (Some(found), _) => {
            let config = get_config(&found.node, found.vmid)?;
            Ok(Some(VmState {
                name: vm.name.clone(),
                vmid: found.vmid,
                node: found.node.clone(),
                status: found.status.clone(),
                lock: found.lock.clone(),
                has_cloudinit_drive: has_cloudinit_drive(&config),
            }))
        }
    }
}

/// The template `vm.template`: it must exist and be a template.
pub fn template(vm: &VmSpec) -> Result<VmResource> {
    template_in(&list_vms()?, vm)
}

/// [`template`] in a cluster listing already read.
pub fn template_in(vms: &[VmResource], vm: &VmSpec) -> Result<VmResource> {
    let mut templates: Vec<VmResource> =
        vms.iter().filter(|r| r.template && r.name.as_deref() == Some(vm.template.as_str())).cloned().collect();
    match templates.len() {
        0 => Err(Error::NotFound(format!(
            "template {} does not exist in the cluster; check global_os[vms_os].template for {} (it must name a VM converted to a template; Proxmox VE lists only the VMs the API token has VM.Audit on: a token without VM.Audit on /vms/VMID of the template does not see it, see docs/CONFIG.md, \"Proxmox VE permissions\")",
            vm.template, vm.name
        ))),
        1 => Ok(templates.remove(0)),
        n => Err(Error::Conflict(format!(
            "{n} templates are named {}; give them distinct names so {} clones the right one",
            vm.template, vm.name
        ))),
    }
}
