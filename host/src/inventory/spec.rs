//! What the resolution of one host is made of, shared by `resolve` and the
//! parts it delegates to (`hardware`, `nic`): the run's own settings
//! ([`ResolveOptions`]), the OS template entry ([`OsTemplate`]), a data disk
//! ([`Disk`]) and `vm_state` ([`VmState`]); and what a plan hands the backend,
//! the WIT `vm-spec` and `nic` records as the Rhai bridge reads them
//! ([`SpecRecord`], [`NicRecord`]). Plain data: no parsing here.

use serde::Serialize;

use super::Vars;

/// Settings a run supplies that are not in the inventory.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// The environment the run targets (`--env`), copied into the plan.
    pub environment: String,
    /// The guest interface of `nic0` when neither the NIC nor the OS entry names
    /// one (`ens18`, what Debian/Ubuntu cloud images call the first virtio NIC).
    pub default_guest_interface: String,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        ResolveOptions { environment: "default".into(), default_guest_interface: "ens18".into() }
    }
}

/// `vm_state`: whether the VM should exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VmState {
    /// The VM should exist (default).
    Present,
    /// The VM should be removed.
    Absent,
}

/// The template entry `global_os[vms_os]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OsTemplate {
    /// The `vms_os` key, e.g. `debian12`.
    pub key: String,
    /// The template VM's name (`template`).
    pub template: String,
    /// The guest's first interface name (`interface`), if the entry names one.
    pub guest_interface: Option<String>,
    /// The whole entry, references rendered (for cloud-init settings).
    pub settings: Vars,
}

/// An extra data disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Disk {
    /// Proxmox slot (`scsi1`).
    pub slot: String,
    /// Storage id.
    pub storage: String,
    /// Size in GiB.
    pub size_gib: u32,
}

/// The WIT `vm-spec` record of a plan, with the bridge's snake_case keys; it
/// serializes to the map a workflow passes to the backend. `vmid` is `None`
/// (a script `()`) until the workflow finds or probes the VM's VMID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecRecord {
    /// The canonical VM name.
    pub name: String,
    /// The VMID, when known.
    pub vmid: Option<u32>,
    /// The node.
    pub node: String,
    /// The template's name.
    pub template: String,
    /// The storage of the boot disk and the cloud-init drive.
    pub storage: String,
    /// Cores.
    pub cores: u32,
    /// Memory in MiB.
    pub memory_mib: u32,
    /// The boot disk's size in GiB; `None` keeps the template's.
    pub disk_gib: Option<u32>,
    /// Extra data disks.
    pub disks: Vec<Disk>,
    /// The NICs.
    pub nics: Vec<NicRecord>,
    /// The `startup` order.
    pub startup_order: Option<u32>,
    /// Tags.
    pub tags: Vec<String>,
    /// The environment.
    pub environment: String,
    /// `vms_terraform_allow_replacement`.
    pub allow_replacement: bool,
}

/// The WIT `nic` record of a NIC (snake_case keys, addresses as text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicRecord {
    /// Proxmox slot, `net0`.
    pub slot: String,
    /// Bridge on the node.
    pub bridge: String,
    /// VLAN tag.
    pub vlan: Option<u16>,
    /// The static address in CIDR form; `None` means DHCP.
    pub address: Option<String>,
    /// The default gateway.
    pub gateway: Option<String>,
    /// The guest's interface name.
    pub guest_interface: String,
}
