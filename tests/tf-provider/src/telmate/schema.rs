//! The `proxmox_vm_qemu` schema (Telmate flavour) and its state type.
//!
//! Contract: exactly the attributes docs/TERRAFORM.md renders, with the real
//! provider's names, types and R/O/C flags (`schemas.md` (a)): top-level `name`,
//! `vmid` (O+C), `target_node`, `clone`, `full_clone`, `os_type`, `memory`,
//! `power_state`, `cicustom`, `tags` (a `;` string); the SDKv2 list blocks `cpu` (max
//! 1: `cores`, `sockets`), `disk` (`slot` R, `type`, `storage`, `size` O+C) and
//! `network` (`id` R, `model` R, `bridge`, `tag`); plus the computed `id`
//! (`<node>/qemu/<vmid>`) and `current_node`. [`FORCE_NEW`] lists the real
//! provider's force-new attributes among them.

use serde::{Deserialize, Serialize};
use tf_provider::schema::{AttributeType as T, Schema};

use crate::common::{C, Flag, Num, O, OC, R, Str, attr, block, list, list_max1, null_as_empty};

/// Top-level attributes whose change plans a replacement (`ForceNew` in the real
/// provider; `clone_id`, `pxe`, `os_network_config`, `ssh_user` and
/// `force_recreate_on_change_of` are not part of this schema).
pub const FORCE_NEW: &[&str] = &["vmid", "clone", "full_clone", "cicustom"];

/// The resource state (and config / plan) of `proxmox_vm_qemu`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VmQemu {
    pub id: Str,
    pub name: Str,
    pub vmid: Num,
    pub target_node: Str,
    pub current_node: Str,
    pub clone: Str,
    pub full_clone: Flag,
    pub os_type: Str,
    pub memory: Num,
    #[serde(deserialize_with = "null_as_empty")]
    pub cpu: Vec<Cpu>,
    pub power_state: Str,
    #[serde(deserialize_with = "null_as_empty")]
    pub disk: Vec<Disk>,
    #[serde(deserialize_with = "null_as_empty")]
    pub network: Vec<Network>,
    pub cicustom: Str,
    pub tags: Str,
}

/// `cpu {}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cpu {
    pub cores: Num,
    pub sockets: Num,
}

/// `disk {}` (v3 slot-based disks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Disk {
    pub slot: Str,
    #[serde(rename = "type")]
    pub kind: Str,
    pub storage: Str,
    pub size: Str,
}

/// `network {}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Network {
    pub id: Num,
    pub model: Str,
    pub bridge: Str,
    pub tag: Num,
}

/// The schema Terraform gets.
pub fn schema() -> Schema {
    let cpu = block(
        "CPU",
        vec![("cores", attr(T::Number, O, "Cores per socket")), ("sockets", attr(T::Number, O, "Sockets"))],
        vec![],
    );
    let disk = block(
        "A disk in a slot",
        vec![
            ("slot", attr(T::String, R, "ide0-3, sata0-5, scsi0-30, virtio0-15")),
            ("type", attr(T::String, O, "disk, cdrom, cloudinit or ignore")),
            ("storage", attr(T::String, O, "Storage ID")),
            ("size", attr(T::String, OC, "Size, e.g. 32G (a bare number is GiB)")),
        ],
        vec![],
    );
    let network = block(
        "A network interface",
        vec![
            ("id", attr(T::Number, R, "N of netN")),
            ("model", attr(T::String, R, "NIC model, e.g. virtio")),
            ("bridge", attr(T::String, O, "Bridge, e.g. vmbr0")),
            ("tag", attr(T::Number, O, "VLAN tag")),
        ],
        vec![],
    );
    let top = block(
        "A QEMU VM cloned from a template (Telmate flavour)",
        vec![
            ("id", attr(T::String, C, "<node>/qemu/<vmid>")),
            ("name", attr(T::String, O, "VM name")),
            ("vmid", attr(T::Number, OC, "VMID (next free one when unset)")),
            ("target_node", attr(T::String, O, "Node to create the VM on")),
            ("current_node", attr(T::String, C, "Node the VM is on now")),
            ("clone", attr(T::String, O, "Name of the template to clone")),
            ("full_clone", attr(T::Bool, O, "Full (true, the default) or linked clone")),
            ("os_type", attr(T::String, O, "Provisioning flavour, e.g. cloud-init")),
            ("memory", attr(T::Number, O, "Memory in MiB")),
            ("power_state", attr(T::String, O, "running or stopped")),
            ("cicustom", attr(T::String, O, "cloud-init snippets: user=…,network=…,meta=…")),
            ("tags", attr(T::String, O, "Tags joined with ;")),
        ],
        vec![("cpu", list_max1(cpu)), ("disk", list(disk)), ("network", list(network))],
    );
    Schema { version: 0, block: top }
}
