//! The plan's vocabulary: what the inventory wants ([`Wanted`]), what PVE has
//! ([`Live`]), the operator's flags ([`Allow`]), and one VM's classified
//! changes with everything apply needs to do them once ([`VmChanges`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How PVE takes a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// In effect now (running VM: a fast-plug option or hotplugged; stopped
    /// VM: written to the config, in effect at its next start).
    Live,
    /// PVE keeps it pending until a cold start.
    NextBoot,
    /// Not in the plan's operations: a flag allows it (`flag`), or cradle
    /// cannot do it at all (`why` says what to do by hand).
    Refused,
}

/// One change the operator reviews.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// Operator words: "memory", "net0 VLAN", "scsi1 size", "boot disk size".
    pub what: String,
    /// The PVE config key (`memory`, `net0`, `scsi1`).
    pub key: String,
    /// The value now (operator units), `None` when absent.
    pub from: Option<String>,
    /// The value wanted, `None` for a removal.
    pub to: Option<String>,
    /// How PVE takes it.
    pub class: Class,
    /// The flag that allows a refused change (`--allow-disk-removal`).
    pub flag: Option<String>,
    /// One sentence an operator understands.
    pub why: String,
}

/// A disk to grow: PVE size strings (`10G`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resize {
    /// The drive key (`scsi1`).
    pub disk: String,
    /// Its size at plan time (`10G`).
    pub from: String,
    /// The size to grow it to (`20G`).
    pub to: String,
}

/// A disk to move to another storage (`POST .../move_disk`): PVE copies it
/// (a drive-mirror on a running VM) and keeps the source volume as `unusedN`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Move {
    /// The drive key (`scsi0`).
    pub disk: String,
    /// Its volume at plan time (`local-lvm:vm-150-disk-0`).
    pub volume: String,
    /// Its storage at plan time (`local-lvm`).
    pub from: String,
    /// The storage to move it to (`ceph-vm`).
    pub to: String,
}

/// One VM's plan: the reviewed changes and the operations that make them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmChanges {
    /// The VM's name.
    pub name: String,
    /// Its VMID.
    pub vmid: u32,
    /// Its node.
    pub node: String,
    /// Whether it was running at plan time.
    pub running: bool,
    /// The config's `hotplug` value as read (default `network,disk,usb`).
    pub hotplug: String,
    /// The config digest at plan time.
    pub digest: String,
    /// Every change, refused ones included.
    pub changes: Vec<Change>,
    /// PVE-formatted values to PUT.
    pub set: BTreeMap<String, String>,
    /// Keys to delete.
    pub delete: Vec<String>,
    /// Disks to move to another storage after the config write, before the
    /// resizes. Left out of the file when empty, so a plan written before
    /// moves existed reads (and hashes to its `id`) as it was written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<Move>,
    /// Disks to grow after the config write.
    pub resize: Vec<Resize>,
    /// The effective value of each touched key at plan time (`None`: absent).
    pub before: BTreeMap<String, Option<String>>,
    /// The effective value of each touched key after apply (resized sizes
    /// included; a moved drive keeps its plan-time volume here, and is
    /// compared by storage: [`super::pve::moved`]).
    pub expect: BTreeMap<String, Option<String>>,
    /// sha256 hex of the effective config's untouched keys (`digest`
    /// excluded), as sorted `k=v\n` lines.
    pub rest: String,
    /// Keys already pending at plan time, not from this plan: a cold start
    /// applies them too.
    pub pending_before: Vec<String>,
}

/// A data disk the inventory wants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WantedDisk {
    /// The drive key (`scsi1`).
    pub slot: String,
    /// Its storage id.
    pub storage: String,
    /// Its size in GiB.
    pub size_gib: u32,
}

/// A NIC the inventory wants (the MAC and model are never in the inventory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WantedNic {
    /// The key (`net0`).
    pub slot: String,
    /// The bridge.
    pub bridge: String,
    /// The VLAN tag.
    #[serde(default)]
    pub vlan: Option<u16>,
}

/// The fields of the resolved vm-spec (`inventory::SpecRecord`) the diff
/// compares; other fields of the spec are ignored when read from a script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wanted {
    /// The VM's name.
    pub name: String,
    /// Its VMID (required: maintenance is for VMs that exist).
    pub vmid: u32,
    /// Its node.
    pub node: String,
    /// The boot disk's storage.
    pub storage: String,
    /// Cores.
    pub cores: u32,
    /// Memory in MiB.
    pub memory_mib: u32,
    /// The boot disk's size in GiB; `None` keeps what it has.
    #[serde(default)]
    pub disk_gib: Option<u32>,
    /// Data disks.
    #[serde(default)]
    pub disks: Vec<WantedDisk>,
    /// NICs.
    #[serde(default)]
    pub nics: Vec<WantedNic>,
    /// The `startup` order.
    #[serde(default)]
    pub startup_order: Option<u32>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// One entry of `GET .../pending`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingEntry {
    /// The key.
    pub key: String,
    /// The value in effect (absent for a key only pending).
    #[serde(default)]
    pub value: Option<String>,
    /// The pending value.
    #[serde(default)]
    pub pending: Option<String>,
    /// Whether a delete is pending.
    #[serde(default)]
    pub delete: bool,
}

/// What PVE has: the effective config (`GET config`, pending applied), the
/// pending list, whether the VM runs, and the config digest.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Live {
    /// The effective config, `digest` included or not.
    pub config: BTreeMap<String, String>,
    /// `GET .../pending`.
    pub pending: Vec<PendingEntry>,
    /// Whether the VM is running.
    pub running: bool,
    /// The config digest.
    pub digest: String,
}

/// The operator's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allow {
    /// `--allow-disk-removal`.
    #[serde(default)]
    pub disk_removal: bool,
    /// `--allow-nic-replacement`.
    #[serde(default)]
    pub nic_replacement: bool,
    /// `--allow-disk-move`.
    #[serde(default)]
    pub disk_move: bool,
}
