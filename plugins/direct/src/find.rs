//! Discovery: the VM by canonical name and VMID, and the template by name.
//!
//! Two VMs with the VM's name, the name on another VMID, the VMID under another
//! name, or a template with the VM's name is `conflict`; a missing template is
//! `not-found`, several templates with its name `conflict`.

use crate::bindings::cradle::host::proxmox::{self, VmResource};
use crate::bindings::cradle::host::types::{Error, VmSpec, VmState};
use crate::config::has_cloudinit_drive;

/// The VM named `vm.name` with `vm.vmid`, if it exists. Name and VMID must
/// agree: either one alone found on another VM is a conflict (invariant 6).
pub fn discover(vm: &VmSpec) -> Result<Option<VmState>, Error> {
    discover_in(&proxmox::list_vms()?, vm)
}

/// [`discover`] in a cluster listing already read (one `cluster/resources`
/// read serves several lookups: it is the most expensive call of a run).
pub fn discover_in(vms: &[VmResource], vm: &VmSpec) -> Result<Option<VmState>, Error> {
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
            let config = proxmox::get_config(&found.node, found.vmid)?;
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
pub fn template(vm: &VmSpec) -> Result<VmResource, Error> {
    template_in(&proxmox::list_vms()?, vm)
}

/// [`template`] in a cluster listing already read.
pub fn template_in(vms: &[VmResource], vm: &VmSpec) -> Result<VmResource, Error> {
    let mut templates: Vec<VmResource> =
        vms.iter().filter(|r| r.template && r.name.as_deref() == Some(vm.template.as_str())).cloned().collect();
    match templates.len() {
        0 => Err(Error::NotFound(format!(
            "template {} does not exist in the cluster; check global_os[vms_os].template for {} (it must name a VM converted to a template)",
            vm.template, vm.name
        ))),
        1 => Ok(templates.remove(0)),
        n => Err(Error::Conflict(format!(
            "{n} templates are named {}; give them distinct names so {} clones the right one",
            vm.template, vm.name
        ))),
    }
}
