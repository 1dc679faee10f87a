//! Proxmox VM configuration values (`GET .../config` entries) and property
//! strings (`virtio=BC:24:11:..,bridge=vmbr0,tag=20`): reading what a clone
//! has, rendering what to write, and comparing the two the way PVE does (it
//! re-prints a property string in its own key order). Pure functions, tested
//! natively.

use crate::types::{Entry, Nic, VmSpec};

/// The value of `key`, if the config has it.
pub fn get<'a>(config: &'a [Entry], key: &str) -> Option<&'a str> {
    config.iter().find(|e| e.key == key).map(|e| e.value.as_str())
}

/// One config entry.
pub fn entry(key: &str, value: impl Into<String>) -> Entry {
    Entry { key: key.into(), value: value.into() }
}

/// Whether `key` names a disk slot (`scsi0`, `virtio1`, `sata2`, `ide3`).
pub fn is_disk_key(key: &str) -> bool {
    ["scsi", "virtio", "sata", "ide"]
        .iter()
        .any(|p| key.strip_prefix(p).is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())))
}

/// The slot of the cloud-init drive (`ide2: local-lvm:vm-150-cloudinit,media=cdrom`), if any.
pub fn cloudinit_slot(config: &[Entry]) -> Option<String> {
    config
        .iter()
        .find(|e| is_disk_key(&e.key) && e.value.split(',').next().is_some_and(|v| v.contains("cloudinit")))
        .map(|e| e.key.clone())
}

/// Whether the VM still has its cloud-init drive (its creation is not finalized).
pub fn has_cloudinit_drive(config: &[Entry]) -> bool {
    cloudinit_slot(config).is_some()
}

/// The boot disk: the first disk of `boot: order=...`, else the first of scsi0, virtio0, sata0.
pub fn boot_disk(config: &[Entry]) -> Option<String> {
    if let Some(order) = get(config, "boot").and_then(|b| b.split(',').find_map(|p| p.strip_prefix("order=")))
        && let Some(disk) = order
            .split(';')
            .find(|d| is_disk_key(d) && get(config, d).is_some() && Some(d.to_string()) != cloudinit_slot(config))
    {
        return Some(disk.to_string());
    }
    ["scsi0", "virtio0", "sata0"].iter().find(|k| get(config, k).is_some()).map(|k| k.to_string())
}

/// The size in GiB of a disk value (`local-lvm:vm-150-disk-0,size=20G`).
pub fn disk_size_gib(value: &str) -> Option<u64> {
    let size = value.split(',').find_map(|p| p.strip_prefix("size="))?;
    let (num, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit() && c != '.')?);
    let n: f64 = num.parse().ok()?;
    let gib = match unit {
        "K" => n / (1024.0 * 1024.0),
        "M" => n / 1024.0,
        "G" => n,
        "T" => n * 1024.0,
        _ => return None,
    };
    Some(gib.ceil() as u64)
}

/// The NIC value with the clone's MAC kept: `virtio=BC:24:11:..,bridge=vmbr0,tag=20`.
pub fn net_value(existing: Option<&str>, nic: &Nic) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut model = None;
    for part in existing.unwrap_or("").split(',').filter(|p| !p.is_empty()) {
        let key = part.split('=').next().unwrap_or(part);
        if model.is_none() && ["virtio", "e1000", "rtl8139", "vmxnet3"].contains(&key) {
            model = Some(part.to_string());
        } else if key != "bridge" && key != "tag" {
            parts.push(part.to_string());
        }
    }
    let mut out = vec![model.unwrap_or_else(|| "virtio".to_string()), format!("bridge={}", nic.bridge)];
    if let Some(tag) = nic.vlan {
        out.push(format!("tag={tag}"));
    }
    out.extend(parts);
    out.join(",")
}

/// `onboot` and `startup` as the spec wants them, where the config differs.
pub fn startup_changes(vm: &VmSpec, config: &[Entry]) -> Vec<Entry> {
    let mut out = Vec::new();
    if get(config, "onboot") != Some("1") {
        out.push(entry("onboot", "1"));
    }
    if let Some(order) = vm.startup_order {
        let want = format!("order={order}");
        if get(config, "startup") != Some(want.as_str()) {
            out.push(entry("startup", want));
        }
    }
    out
}

/// The entries of `set` whose value differs from `config`: what an
/// interrupted `create` still has to write (an empty list: nothing).
/// Values compare as property strings: PVE re-prints `a=1,b=2` in its own
/// key order, so `virtio=..,bridge=vmbr0,tag=20,firewall=1` and
/// `virtio=..,bridge=vmbr0,firewall=1,tag=20` are the same setting.
/// `tags` compare as Proxmox stores them ([`pve_tags`]): `Web;cradle` written
/// reads back `cradle;web`, and is the same setting.
pub fn differing(set: Vec<Entry>, config: &[Entry]) -> Vec<Entry> {
    set.into_iter()
        .filter(|e| {
            get(config, &e.key).is_none_or(|have| match e.key.as_str() {
                "tags" => pve_tags(have) != pve_tags(&e.value),
                _ => !same_property(have, &e.value),
            })
        })
        .collect()
}

/// A `tags` value as Proxmox VE stores it with the default datacenter
/// `tag-style`: split on `;`, `,` and whitespace (pve-common `split_list`),
/// lower-cased, sorted and de-duplicated (pve-guest-common
/// `PVE::GuestHelpers::get_unique_tags`, which qemu-server applies on create
/// and on every config update). The one place cradle normalises tags: what it
/// writes ([`tags_value`]) and what it compares ([`differing`]). A cluster set
/// to `case-sensitive` tags or `ordering=config` stores them differently; the
/// comparison still holds them equal, so the spec stays satisfied there too.
pub fn pve_tags(value: &str) -> Vec<String> {
    let mut tags: Vec<String> =
        value.split([',', ';', ' ', '\t', '\n', '\r']).filter(|t| !t.is_empty()).map(str::to_lowercase).collect();
    tags.sort();
    tags.dedup();
    tags
}

/// The `tags` config value for a spec's tags, as Proxmox will store it
/// (`["Web", "cradle", "web"]` → `cradle;web`).
pub fn tags_value(tags: &[String]) -> String {
    pve_tags(&tags.join(";")).join(";")
}

fn same_property(a: &str, b: &str) -> bool {
    a == b || PropertyString::parse(a).same_as(&PropertyString::parse(b))
}

/// A property string as an ordered list of `key=value` parts (a bare part,
/// like the NIC model `virtio` or a volume `local-lvm:vm-150-disk-0`, has no
/// value). Rendering keeps the order it was read in; [`PropertyString::set`]
/// replaces a key in place or appends it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PropertyString {
    parts: Vec<(String, Option<String>)>,
}

impl PropertyString {
    /// Parse `a,b=1,c=2`; empty parts are dropped.
    pub fn parse(s: &str) -> PropertyString {
        let parts = s
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (p.to_string(), None),
            })
            .collect();
        PropertyString { parts }
    }

    /// The value of `key` (`None` when absent or bare).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.parts.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.as_deref())
    }

    /// Set `key=value`, in place when present, else at the end.
    pub fn set(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        let value = Some(value.into());
        match self.parts.iter_mut().find(|(k, _)| k == key) {
            Some(part) => part.1 = value,
            None => self.parts.push((key.to_string(), value)),
        }
        self
    }

    /// Remove `key` (and its value).
    pub fn remove(&mut self, key: &str) -> &mut Self {
        self.parts.retain(|(k, _)| k != key);
        self
    }

    /// The string Proxmox takes.
    pub fn render(&self) -> String {
        let parts: Vec<String> = self
            .parts
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => k.clone(),
            })
            .collect();
        parts.join(",")
    }

    /// The same setting as `other`, whatever the order of the parts.
    pub fn same_as(&self, other: &PropertyString) -> bool {
        let mut a = self.parts.clone();
        let mut b = other.parts.clone();
        a.sort();
        b.sort();
        a == b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Vec<Entry> {
        pairs.iter().map(|(k, v)| entry(k, *v)).collect()
    }

    /// A NIC on `vmbr1` with an optional VLAN tag.
    pub(crate) fn nic(vlan: Option<u16>) -> Nic {
        Nic {
            slot: "net0".into(),
            bridge: "vmbr1".into(),
            vlan,
            address: None,
            gateway: None,
            guest_interface: "ens18".into(),
        }
    }

    #[test]
    fn the_clones_mac_is_kept_and_bridge_and_tag_replaced() {
        let v = net_value(Some("virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=5,firewall=1"), &nic(Some(20)));
        assert_eq!(v, "virtio=BC:24:11:00:00:01,bridge=vmbr1,tag=20,firewall=1");
        assert_eq!(net_value(None, &nic(None)), "virtio,bridge=vmbr1");
    }

    #[test]
    fn the_cloudinit_drive_is_found_by_its_volume() {
        let c =
            cfg(&[("ide2", "local-lvm:vm-150-cloudinit,media=cdrom"), ("scsi0", "local-lvm:vm-150-disk-0,size=8G")]);
        assert_eq!(cloudinit_slot(&c).as_deref(), Some("ide2"));
        assert!(!has_cloudinit_drive(&cfg(&[("ide2", "none,media=cdrom")])));
    }

    #[test]
    fn disk_sizes_parse_in_gib() {
        assert_eq!(disk_size_gib("local-lvm:vm-1-disk-0,size=20G"), Some(20));
        assert_eq!(disk_size_gib("x,size=2252M"), Some(3));
        assert_eq!(disk_size_gib("x,size=1T"), Some(1024));
        assert_eq!(disk_size_gib("x"), None);
    }

    #[test]
    fn the_boot_disk_comes_from_the_boot_order() {
        let c = cfg(&[("boot", "order=virtio0;net0"), ("virtio0", "local:1,size=4G"), ("scsi0", "local:2,size=4G")]);
        assert_eq!(boot_disk(&c).as_deref(), Some("virtio0"));
        assert_eq!(boot_disk(&cfg(&[("scsi0", "local:2,size=4G")])).as_deref(), Some("scsi0"));
    }

    #[test]
    fn a_property_string_in_another_key_order_is_the_same_setting() {
        let want = vec![entry("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=20,firewall=1")];
        let have = cfg(&[("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,firewall=1,tag=20")]);
        assert!(differing(want, &have).is_empty());
        let other = vec![entry("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=21,firewall=1")];
        assert_eq!(differing(other, &have).len(), 1, "a different tag differs");
    }

    #[test]
    fn tags_compare_as_proxmox_stores_them_lowercased_sorted_and_unique() {
        // What PVE keeps of `Web;cradle,web` (GuestHelpers::get_unique_tags).
        let have = cfg(&[("tags", "cradle;web")]);
        let spec: Vec<String> = ["Web", "cradle", "web"].map(String::from).to_vec();
        assert_eq!(tags_value(&spec), "cradle;web");
        assert!(differing(vec![entry("tags", spec.join(";"))], &have).is_empty(), "unsorted, mixed case: same tags");
        assert!(differing(vec![entry("tags", "web cradle")], &have).is_empty(), "space-separated: same tags");
        assert_eq!(differing(vec![entry("tags", "cradle;db")], &have).len(), 1, "another tag differs");
        assert_eq!(differing(vec![entry("tags", "cradle")], &have).len(), 1, "a dropped tag differs");
    }

    #[test]
    fn a_property_string_renders_as_read_with_keys_replaced_in_place() {
        let mut p = PropertyString::parse("virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1");
        assert_eq!(p.get("bridge"), Some("vmbr0"));
        p.set("bridge", "vmbr1").set("tag", "20").remove("firewall");
        assert_eq!(p.render(), "virtio=BC:24:11:00:00:01,bridge=vmbr1,tag=20");
        assert!(p.same_as(&PropertyString::parse("tag=20,virtio=BC:24:11:00:00:01,bridge=vmbr1")));
        assert!(!p.same_as(&PropertyString::parse("virtio=BC:24:11:00:00:01,bridge=vmbr1")));
        assert_eq!(PropertyString::parse("local-lvm:vm-1-disk-0,size=8G").get("size"), Some("8G"));
    }
}
