//! The `proxmox_virtual_environment_vm` schema (bpg flavour) and its state type.
//!
//! Contract: exactly the attributes docs/TERRAFORM.md renders, with the real
//! provider's names, types and R/O/C flags (`schemas.md` (b)): top-level `name`,
//! `vm_id` (O+C), `node_name` (R), `started`, `tags` (list of strings); the SDKv2 list
//! blocks `clone` (max 1: `vm_id` R, `full`), `cpu` (max 1: `cores`), `memory` (max 1:
//! `dedicated`), `disk` (`interface` R, `datastore_id`, `size` O+C, GiB),
//! `network_device` (`bridge`, `model`, `vlan_id`) and `initialization` (max 1:
//! `datastore_id`, `interface`, `user_data_file_id` / `network_data_file_id` /
//! `meta_data_file_id` O+C); plus the computed `id` (`"<vmid>"`).

use serde::{Deserialize, Serialize};
use tf_provider::schema::{AttributeType as T, Schema};

use crate::common::{C, Flag, Num, O, OC, R, Str, attr, block, list, list_max1, null_as_empty};

/// The resource state (and config / plan) of `proxmox_virtual_environment_vm`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnvVm {
    pub id: Str,
    pub name: Str,
    pub vm_id: Num,
    pub node_name: Str,
    pub started: Flag,
    pub tags: tf_provider::value::Value<Vec<String>>,
    #[serde(deserialize_with = "null_as_empty")]
    pub clone: Vec<CloneBlock>,
    #[serde(deserialize_with = "null_as_empty")]
    pub cpu: Vec<Cpu>,
    #[serde(deserialize_with = "null_as_empty")]
    pub memory: Vec<Memory>,
    #[serde(deserialize_with = "null_as_empty")]
    pub disk: Vec<Disk>,
    #[serde(deserialize_with = "null_as_empty")]
    pub network_device: Vec<NetworkDevice>,
    #[serde(deserialize_with = "null_as_empty")]
    pub initialization: Vec<Initialization>,
}

/// `clone {}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CloneBlock {
    pub vm_id: Num,
    pub full: Flag,
}

/// `cpu {}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cpu {
    pub cores: Num,
}

/// `memory {}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Memory {
    pub dedicated: Num,
}

/// `disk {}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Disk {
    pub interface: Str,
    pub datastore_id: Str,
    pub size: Num,
}

/// `network_device {}` (entry i is `net<i>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkDevice {
    pub bridge: Str,
    pub model: Str,
    pub vlan_id: Num,
}

/// `initialization {}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Initialization {
    pub datastore_id: Str,
    pub interface: Str,
    pub user_data_file_id: Str,
    pub network_data_file_id: Str,
    pub meta_data_file_id: Str,
}

/// The schema Terraform gets.
pub fn schema() -> Schema {
    let clone = block(
        "The template to clone",
        vec![
            ("vm_id", attr(T::Number, R, "Source VMID")),
            ("full", attr(T::Bool, O, "Full (default) or linked clone")),
        ],
        vec![],
    );
    let cpu = block("CPU", vec![("cores", attr(T::Number, O, "Cores"))], vec![]);
    let memory = block("Memory", vec![("dedicated", attr(T::Number, O, "Memory in MiB"))], vec![]);
    let disk = block(
        "A disk",
        vec![
            ("interface", attr(T::String, R, "e.g. scsi0")),
            ("datastore_id", attr(T::String, O, "Storage ID (default local-lvm)")),
            ("size", attr(T::Number, OC, "Size in GiB")),
        ],
        vec![],
    );
    let nic = block(
        "A network device (entry i is net<i>)",
        vec![
            ("bridge", attr(T::String, O, "Bridge (default vmbr0)")),
            ("model", attr(T::String, O, "Model (default virtio)")),
            ("vlan_id", attr(T::Number, O, "VLAN tag")),
        ],
        vec![],
    );
    let init = block(
        "cloud-init",
        vec![
            ("datastore_id", attr(T::String, O, "Storage of the cloud-init drive (default local-lvm)")),
            ("interface", attr(T::String, O, "Slot of the cloud-init drive (default ide2)")),
            ("user_data_file_id", attr(T::String, OC, "user-data snippet volume")),
            ("network_data_file_id", attr(T::String, OC, "network-data snippet volume")),
            ("meta_data_file_id", attr(T::String, OC, "meta-data snippet volume")),
        ],
        vec![],
    );
    let top = block(
        "A VM cloned from a template (bpg flavour)",
        vec![
            ("id", attr(T::String, C, "The VMID as a string")),
            ("name", attr(T::String, O, "VM name")),
            ("vm_id", attr(T::Number, OC, "VMID (next free one when unset)")),
            ("node_name", attr(T::String, R, "Node of the VM")),
            ("started", attr(T::Bool, O, "Whether the VM runs (default true)")),
            ("tags", attr(T::List(Box::new(T::String)), O, "Tags")),
        ],
        vec![
            ("clone", list_max1(clone)),
            ("cpu", list_max1(cpu)),
            ("memory", list_max1(memory)),
            ("disk", list(disk)),
            ("network_device", list(nic)),
            ("initialization", list_max1(init)),
        ],
    );
    Schema { version: 0, block: top }
}
