//! Hardware settings of a VM: `vms_config.KEY` with `global_os[vms_os].KEY` as the
//! template-level default (cores, memory, disk, storage), extra `disks` and `tags`.
//!
//! Failure modes: a required key set nowhere is `Missing` (naming both places it
//! may be set); a value of the wrong form is `Invalid` with the accepted form.

use serde_json::{Map, Value};

use super::InventoryError;
use super::spec::{Disk, OsTemplate};
use super::values::Ctx;

/// Hardware keys: `vms_config.KEY`, else `global_os[vms_os].KEY`.
pub(crate) struct Hardware<'a> {
    pub(crate) ctx: &'a Ctx<'a>,
    pub(crate) config: &'a Map<String, Value>,
    pub(crate) os: &'a OsTemplate,
}

impl Hardware<'_> {
    pub(crate) fn optional<T>(
        &self,
        key: &str,
        read: impl Fn(&Value, &str) -> Result<T, InventoryError>,
    ) -> Result<Option<T>, InventoryError> {
        if let Some(v) = self.config.get(key) {
            return read(v, &format!("vms_config.{key}")).map(Some);
        }
        match self.os.settings.get(key) {
            Some(v) => read(v, &format!("global_os.{}.{key}", self.os.key)).map(Some),
            None => Ok(None),
        }
    }

    pub(crate) fn optional_config<T>(
        &self,
        key: &str,
        read: impl Fn(&Value, &str) -> Result<T, InventoryError>,
    ) -> Result<Option<T>, InventoryError> {
        self.config.get(key).map(|v| read(v, &format!("vms_config.{key}"))).transpose()
    }

    pub(crate) fn required<T>(
        &self,
        key: &str,
        read: impl Fn(&Value, &str) -> Result<T, InventoryError>,
    ) -> Result<T, InventoryError> {
        self.optional(key, read)?.ok_or_else(|| {
            self.ctx.missing(
                &format!("vms_config.{key}"),
                &format!("set vms_config.{key} (or {key} in global_os.{}); see docs/INVENTORY.md", self.os.key),
            )
        })
    }
}

/// PVE's storage id: `^[a-z][a-z0-9\-\_\.]*[a-z0-9]$`, any case
/// (pve-common src/PVE/JSONSchema.pm `parse_id`, format `pve-storage-id`).
/// cradle writes it into drive values (`local-lvm:20`), so a `,` or `=` in
/// it would add options of the operator's choosing.
pub fn is_storage_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_alphabetic()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// PVE's bridge name: `^[-_.\w\d]+$` (format `pve-bridge-id`, the `bridge`
/// of a `netN` value; ASCII here). cradle writes it into NIC values, so a
/// `,` or `=` in it would add options of the operator's choosing.
pub fn is_bridge_id(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

pub(crate) fn storage_id(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<String, InventoryError> {
    let s = ctx.string(path, v)?;
    if is_storage_id(&s) { Ok(s) } else { Err(ctx.invalid(path, v, "a Proxmox storage id such as local-lvm")) }
}

pub(crate) fn disks(ctx: &Ctx<'_>, config: &Map<String, Value>, storage: &str) -> Result<Vec<Disk>, InventoryError> {
    let items = match config.get("disks") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(ctx.invalid("vms_config.disks", other, "a list of { size: 50, storage: local-lvm }"));
        }
    };
    let mut out: Vec<Disk> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("vms_config.disks[{i}]");
        let Value::Object(d) = item else {
            return Err(ctx.invalid(&path, item, "a mapping { size: 50, storage: local-lvm, slot: scsi1 }"));
        };
        let size = match d.get("size") {
            Some(v) => ctx.size(&format!("{path}.size"), v, 1024, "a size in GiB (50) or with a unit (50G, 1T)")?,
            None => return Err(ctx.missing(&format!("{path}.size"), "give each extra disk a size in GiB")),
        };
        let storage = match d.get("storage") {
            Some(v) => storage_id(ctx, &format!("{path}.storage"), v)?,
            None => storage.to_string(),
        };
        let slot = match d.get("slot") {
            Some(v) => {
                let s = ctx.string(&format!("{path}.slot"), v)?;
                let bus = s.trim_end_matches(|c: char| c.is_ascii_digit());
                let ok = matches!(bus, "scsi" | "virtio" | "sata" | "ide") && bus.len() < s.len();
                if !ok {
                    return Err(ctx.invalid(&format!("{path}.slot"), v, "a disk slot such as scsi1, virtio1, sata1"));
                }
                s
            }
            None => format!("scsi{}", i + 1),
        };
        if out.iter().any(|o| o.slot == slot) || slot == "scsi0" {
            return Err(ctx.invalid(
                &format!("{path}.slot"),
                &Value::String(slot),
                "a slot no other disk uses (scsi0 is the boot disk)",
            ));
        }
        out.push(Disk { slot, storage, size_gib: size.min(u64::from(u32::MAX)) as u32 });
    }
    Ok(out)
}

pub(crate) fn tags(ctx: &Ctx<'_>, v: &Value) -> Result<Vec<String>, InventoryError> {
    let tags = ctx.strings("vms_config.tags", v)?;
    let mut out = Vec::new();
    for t in tags {
        let t = t.to_ascii_lowercase();
        let ok = t.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '.'));
        if !ok {
            return Err(ctx.invalid(
                "vms_config.tags",
                v,
                "Proxmox tags: letters, digits, _ - + . (first a letter, digit or _)",
            ));
        }
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(out)
}

const CONFIG_KEYS: [&str; 8] = ["cores", "memory", "disk", "storage", "disks", "tags", "startup_order", "network"];

/// Keys of `vms_config` (and `vms_config.network`) that cradle does not read are
/// reported, not silently dropped: they may belong to the operator's Ansible role,
/// or be a typo.
pub(crate) fn warn_unused(ctx: &Ctx<'_>, config: &Map<String, Value>) {
    let is_nic = |k: &str| k.strip_prefix("nic").and_then(|n| n.parse::<u8>().ok()).is_some_and(|n| n < 32);
    for key in config.keys().filter(|k| !CONFIG_KEYS.contains(&k.as_str()) && !is_nic(k)) {
        tracing::warn!(host = ctx.host(), variable = %format!("vms_config.{key}"), "not used by cradle");
    }
    if let Some(Value::Object(network)) = config.get("network") {
        for key in network.keys().filter(|k| !is_nic(k)) {
            tracing::warn!(host = ctx.host(), variable = %format!("vms_config.network.{key}"), "not used by cradle");
        }
    }
}
