//! PVE config values as qemu-server stores them, read and compared the way
//! PVE does: property strings as parsed maps, `tags` normalised, `memory` as
//! its `current` MiB, drive sizes in GiB, the `hotplug` feature list.
//!
//! The values written are what cradle writes at creation: this is the host's
//! one copy of the guest kit's mapping (`plugins/guest/src/config.rs`:
//! `net_value`, `tags_value`/`pve_tags`, `boot_disk`, `disk_size_gib`,
//! `is_disk_key`, `cloudinit_slot`, used by the direct plugin's
//! `plugins/direct/src/config.rs` `configure`); the host does not depend on
//! the guest crate (a WASM guest kit). A change to one needs the other.

use std::collections::{BTreeMap, BTreeSet};

/// PVE's NIC models (qemu-server e6352be, src/PVE/QemuServer/Network.pm:16
/// `$nic_model_list`): the part of a `netN` value that carries the MAC.
const NIC_MODELS: [&str; 14] = [
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
    "rtl8139",
    "virtio",
    "vmxnet3",
];

/// A property string as a map: `key=value` parts, and bare parts (a NIC
/// model without MAC, a drive's volume) with no value. PVE re-prints a
/// property string in its own key order, so two strings are the same setting
/// when their maps are equal.
pub type Props = BTreeMap<String, Option<String>>;

/// The parts of a property string as PVE reads them: split on `,`, a blank
/// part skipped (pve-common src/PVE/JSONSchema.pm `parse_property_string`:
/// `next if $part =~ /^\s*$/`).
pub fn parts(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').filter(|p| !p.trim().is_empty())
}

/// Parse `a,b=1,c=2` (blank parts dropped, [`parts`]).
pub fn props(s: &str) -> Props {
    parts(s)
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (p.to_string(), None),
        })
        .collect()
}

/// The first key a property string gives twice, a bare part counting as the
/// format's default key (the drive's volume, the NIC's model): PVE refuses
/// such a value (pve-common src/PVE/JSONSchema.pm `parse_property_string`:
/// "duplicate key in comma-separated list property"), so a GET never shows
/// one and cradle reads it as unreadable, not as whichever copy wins.
/// `default_key` names the bare part's key where the value may also give it
/// by name (a drive's `file`).
pub fn duplicate_key(s: &str, default_key: Option<&str>) -> Option<String> {
    let mut seen = BTreeSet::new();
    for p in parts(s) {
        let key = match p.split_once('=') {
            Some((k, _)) => k,
            None => default_key.unwrap_or(""),
        };
        if !seen.insert(key) {
            return Some(if p.contains('=') { key.to_string() } else { p.to_string() });
        }
    }
    None
}

/// Whether `key` names a disk slot (`scsi0`, `virtio1`, `sata2`, `ide3`).
pub fn is_disk_key(key: &str) -> bool {
    ["scsi", "virtio", "sata", "ide"]
        .iter()
        .any(|p| key.strip_prefix(p).is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())))
}

/// Whether `key` names a NIC (`net0`).
pub fn is_net_key(key: &str) -> bool {
    key.strip_prefix("net").is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// Whether `key` names an unused volume (`unused0`): what a drive delete
/// leaves behind (qemu-server e6352be, src/PVE/QemuServer.pm:4779
/// `vmconfig_delete_or_detach_drive` registers the volume as unused).
pub fn is_unused_key(key: &str) -> bool {
    key.strip_prefix("unused").is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// A drive value split: the volume (first bare part, or `file=`) and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drive {
    /// `local-lvm:vm-150-disk-1`, or an allocation `local-lvm:10`.
    pub volume: String,
    /// The other parts.
    pub opts: Props,
}

impl Drive {
    /// Parse a drive value.
    pub fn parse(value: &str) -> Drive {
        // The volume is the bare part wherever it stands (the format's
        // default key), else `file=`.
        let mut opts = props(value);
        let volume = match parts(value).find(|p| !p.contains('=')) {
            Some(bare) => {
                opts.remove(bare);
                bare.to_string()
            }
            None => opts.remove("file").flatten().unwrap_or_default(),
        };
        Drive { volume, opts }
    }

    /// The storage id of the volume (`local-lvm`), if it names one.
    pub fn storage(&self) -> Option<&str> {
        self.volume.split_once(':').map(|(s, _)| s)
    }

    /// A CD-ROM (`media=cdrom`, or the `none`/`cdrom` volume) or the
    /// cloud-init drive: not a data disk.
    pub fn is_media(&self) -> bool {
        self.opts.get("media").and_then(|m| m.as_deref()) == Some("cdrom")
            || self.volume == "none"
            || self.volume == "cdrom"
            || self.volume.contains("cloudinit")
    }

    /// The size in GiB (rounded up), from `size=`.
    pub fn size_gib(&self) -> Option<u64> {
        size_gib(self.opts.get("size")?.as_deref()?)
    }

    /// An allocation (`local-lvm:10`: a new volume of 10 GiB), as cradle
    /// writes a new disk: its storage and GiB.
    pub fn allocation(&self) -> Option<(&str, u64)> {
        let (storage, n) = self.volume.split_once(':')?;
        Some((storage, n.parse().ok()?))
    }
}

/// A PVE size (`20G`, `2252M`, `1T`) in GiB, rounded up (like the guest
/// kit's `disk_size_gib`).
pub fn size_gib(size: &str) -> Option<u64> {
    let (num, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit() && c != '.')?);
    let n: f64 = num.parse().ok()?;
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    let gib = match unit {
        "K" => n / (1024.0 * 1024.0),
        "M" => n / 1024.0,
        "G" => n,
        "T" => n * 1024.0,
        _ => return None,
    };
    let gib = gib.ceil();
    (gib <= u64::MAX as f64).then_some(gib as u64)
}

/// A drive value with its `size=` set to `size`, every other part in place
/// (the diff refuses a value giving `size=` twice, `duplicate_key`; were one
/// to come here it would collapse into the first).
pub fn with_size(value: &str, size: &str) -> String {
    let mut kept: Vec<String> = Vec::new();
    let mut sized = false;
    for p in parts(value) {
        if p.starts_with("size=") {
            if !sized {
                kept.push(format!("size={size}"));
                sized = true;
            }
        } else {
            kept.push(p.to_string());
        }
    }
    if !sized {
        kept.push(format!("size={size}"));
    }
    kept.join(",")
}

/// A planned drive value as PVE writes it after moving the disk to `volume`
/// (another storage): qemu-server `clone_disk` sets `file` to the new volume
/// and drops `format` (src/PVE/QemuServer.pm, `delete $disk->{format}`),
/// every other part in place; the volume stands bare in front.
pub fn moved(value: &str, volume: &str) -> String {
    let rest = parts(value).filter(|p| p.contains('=') && !p.starts_with("file=") && !p.starts_with("format="));
    std::iter::once(volume).chain(rest).collect::<Vec<_>>().join(",")
}

/// `memory` in MiB: `2048` or `current=2048` (qemu-server e6352be,
/// src/PVE/QemuServer/Memory.pm:68 `$memory_fmt`, `current` the default
/// key; absent = 512, its default).
pub fn memory_mib(value: Option<&str>) -> Option<u64> {
    let Some(value) = value else { return Some(512) };
    let p = props(value);
    let current = match p.get("current") {
        Some(v) => v.as_deref()?,
        None => p.iter().find(|(_, v)| v.is_none()).map(|(k, _)| k.as_str())?,
    };
    current.parse().ok()
}

/// A `tags` value as PVE stores it with the default datacenter `tag-style`
/// (pve-guest-common `PVE::GuestHelpers::get_unique_tags`, applied by
/// qemu-server e6352be src/PVE/API2/Qemu.pm:2496 on every update): split on
/// `;`, `,` and whitespace, lower-cased, sorted, de-duplicated.
pub fn pve_tags(value: &str) -> Vec<String> {
    let tags: BTreeSet<String> =
        value.split([',', ';', ' ', '\t', '\n', '\r']).filter(|t| !t.is_empty()).map(str::to_lowercase).collect();
    tags.into_iter().collect()
}

/// The `tags` value cradle writes for `tags` (`["Web","cradle"]` → `cradle;web`).
pub fn tags_value(tags: &[String]) -> String {
    pve_tags(&tags.join(";")).join(";")
}

/// The hotplug features of a `hotplug` value (qemu-server e6352be,
/// src/PVE/QemuServer.pm:1136 `parse_hotplug_features`: `0` none, `1` the
/// default `network,disk,usb` (:253), else a list); `Err` names a feature
/// PVE would not accept either.
pub fn hotplug_features(value: Option<&str>) -> Result<BTreeSet<String>, String> {
    let value = match value.unwrap_or("1") {
        "0" => return Ok(BTreeSet::new()),
        "1" => "network,disk,usb",
        v => v,
    };
    let mut out = BTreeSet::new();
    for f in value.split([',', ';', ' ', '\t', '\n', '\r']).filter(|f| !f.is_empty()) {
        if !["network", "disk", "cpu", "memory", "usb", "cloudinit"].contains(&f) {
            return Err(format!("invalid hotplug feature '{f}'"));
        }
        out.insert(f.to_string());
    }
    Ok(out)
}

/// The NIC model part of a parsed `netN` value and its MAC (`virtio=BC:..`).
pub fn nic_model(p: &Props) -> Option<(&str, Option<&str>)> {
    p.iter().find(|(k, _)| NIC_MODELS.contains(&k.as_str())).map(|(k, v)| (k.as_str(), v.as_deref()))
}

/// The NIC value cradle writes: the live value's model and MAC kept (or
/// `virtio` for a new NIC: PVE generates the MAC), bridge and tag replaced,
/// every other part kept in place (the guest kit's `net_value`).
pub fn net_value(existing: Option<&str>, bridge: &str, vlan: Option<u16>) -> String {
    let mut kept: Vec<String> = Vec::new();
    let mut model = None;
    for part in parts(existing.unwrap_or("")) {
        let key = part.split('=').next().unwrap_or(part);
        if model.is_none() && NIC_MODELS.contains(&key) {
            model = Some(part.to_string());
        } else if key != "bridge" && key != "tag" {
            kept.push(part.to_string());
        }
    }
    let mut out = vec![model.unwrap_or_else(|| "virtio".to_string()), format!("bridge={bridge}")];
    if let Some(tag) = vlan {
        out.push(format!("tag={tag}"));
    }
    out.extend(kept);
    out.join(",")
}

/// The boot disk: the first disk of `boot: order=...` that exists and is no
/// media, else the first of scsi0, virtio0, sata0 (the guest kit's `boot_disk`).
pub fn boot_disk(config: &BTreeMap<String, String>) -> Option<String> {
    let is_disk = |k: &str| is_disk_key(k) && config.get(k).is_some_and(|v| !Drive::parse(v).is_media());
    if let Some(order) = config.get("boot").and_then(|b| props(b).remove("order").flatten())
        && let Some(disk) = order.split(';').find(|d| is_disk(d))
    {
        return Some(disk.to_string());
    }
    ["scsi0", "virtio0", "sata0"].iter().find(|k| is_disk(k)).map(|k| k.to_string())
}

/// The `boot` value after PVE removes `key` from its order (qemu-server
/// e6352be, src/PVE/API2/Qemu.pm:2305-2309 on a delete, printed by
/// src/PVE/QemuServer.pm:1036 `print_bootorder`: `""` for an empty order),
/// or `None` when the order does not name `key`.
pub fn boot_without(boot: Option<&str>, removed: &[&str]) -> Option<String> {
    let order = props(boot?).remove("order").flatten()?;
    let devs: Vec<&str> = order.split(';').filter(|d| !d.is_empty()).collect();
    let kept: Vec<&str> = devs.iter().copied().filter(|d| !removed.contains(d)).collect();
    if kept.len() == devs.len() {
        return None;
    }
    Some(if kept.is_empty() { String::new() } else { format!("order={}", kept.join(";")) })
}

/// Whether the live value of `key` has the effect of `expect`, compared as
/// PVE stores it: tags normalised, memory by MiB, drives by volume (an
/// allocation `storage:N` by storage and size) and options, NICs as maps
/// where a bare model (a new NIC) accepts the MAC PVE generated, anything
/// else as a property map. `ignore_size` compares a drive without `size=`.
pub fn same_effect(key: &str, expect: Option<&str>, live: Option<&str>, ignore_size: bool) -> bool {
    let (Some(expect), Some(live)) = (expect, live) else { return expect.is_none() && live.is_none() };
    if expect == live && !ignore_size {
        return true;
    }
    match key {
        "tags" => pve_tags(expect) == pve_tags(live),
        "memory" => memory_mib(Some(expect)).is_some() && memory_mib(Some(expect)) == memory_mib(Some(live)),
        k if is_disk_key(k) => {
            let (mut e, mut l) = (Drive::parse(expect), Drive::parse(live));
            let size_ok = ignore_size || {
                let want = e.allocation().map(|(_, n)| n).or_else(|| e.size_gib());
                want == l.size_gib()
            };
            let volume_ok = match e.allocation() {
                Some((storage, _)) => l.storage() == Some(storage) && l.allocation().is_none(),
                None => e.volume == l.volume,
            };
            e.opts.remove("size");
            l.opts.remove("size");
            size_ok && volume_ok && e.opts == l.opts
        }
        k if is_net_key(k) => {
            let (e, mut l) = (props(expect), props(live));
            if let Some((model, None)) = nic_model(&e)
                && let Some(v) = l.get_mut(model)
            {
                *v = None;
            }
            e == l
        }
        _ => props(expect) == props(live),
    }
}
