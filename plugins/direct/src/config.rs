//! Proxmox config values: reading the clone's config and writing the VM's.
//! Pure functions over config entries, so they are tested natively.

use crate::bindings::cradle::host::types::{Entry, Error, Nic, Snippets, VmSpec};

fn get<'a>(config: &'a [Entry], key: &str) -> Option<&'a str> {
    config.iter().find(|e| e.key == key).map(|e| e.value.as_str())
}

fn entry(key: &str, value: impl Into<String>) -> Entry {
    Entry { key: key.into(), value: value.into() }
}

fn is_disk_key(key: &str) -> bool {
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
pub fn differing(set: Vec<Entry>, config: &[Entry]) -> Vec<Entry> {
    set.into_iter().filter(|e| get(config, &e.key).is_none_or(|have| !same_property(have, &e.value))).collect()
}

fn same_property(a: &str, b: &str) -> bool {
    a == b || property_parts(a) == property_parts(b)
}

fn property_parts(s: &str) -> Vec<&str> {
    let mut v: Vec<&str> = s.split(',').filter(|p| !p.is_empty()).collect();
    v.sort_unstable();
    v
}

/// A disk to grow: the slot and the new absolute size (`("scsi0", "32G")`).
pub type Resize = (String, String);

/// Everything `create` sets on the fresh clone, and the boot disk resize
/// when the spec wants it larger than the template's.
pub fn configure(vm: &VmSpec, snippets: &Snippets, config: &[Entry]) -> Result<(Vec<Entry>, Option<Resize>), Error> {
    let mut set = vec![entry("cores", vm.cores.to_string()), entry("memory", vm.memory_mib.to_string())];
    for nic in &vm.nics {
        set.push(entry(&nic.slot, net_value(get(config, &nic.slot), nic)));
    }
    let mut cicustom = format!("user={},network={}", snippets.user, snippets.network);
    if let Some(meta) = &snippets.meta {
        cicustom.push_str(&format!(",meta={meta}"));
    }
    set.push(entry("cicustom", cicustom));
    if cloudinit_slot(config).is_none() {
        set.push(entry("ide2", format!("{}:cloudinit", vm.storage)));
    }
    for disk in &vm.disks {
        if get(config, &disk.slot).is_none() {
            set.push(entry(&disk.slot, format!("{}:{}", disk.storage, disk.size_gib)));
        }
    }
    if !vm.tags.is_empty() {
        set.push(entry("tags", vm.tags.join(";")));
    }
    set.extend(startup_changes(vm, config));
    let resize = match vm.disk_gib {
        None => None,
        Some(want) => {
            let disk = boot_disk(config).ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: the template has no boot disk (scsi0/virtio0/sata0) to resize to {want} GiB",
                    vm.name
                ))
            })?;
            let have = get(config, &disk).and_then(disk_size_gib).unwrap_or(0);
            match u64::from(want) {
                w if w > have => Some((disk, format!("{want}G"))),
                w if w == have => None,
                _ => {
                    return Err(Error::Invalid(format!(
                        "{}: disk_gib {want} is smaller than the template's {disk} ({have} GiB); Proxmox cannot shrink disks",
                        vm.name
                    )));
                }
            }
        }
    };
    Ok((set, resize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Vec<Entry> {
        pairs.iter().map(|(k, v)| entry(k, *v)).collect()
    }

    fn nic(vlan: Option<u16>) -> Nic {
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
    fn startup_settings_are_only_changed_when_they_differ() {
        let vm = spec();
        assert_eq!(startup_changes(&vm, &cfg(&[("onboot", "1"), ("startup", "order=10")])).len(), 0);
        let changes = startup_changes(&vm, &cfg(&[("onboot", "0")]));
        assert_eq!(changes.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["onboot", "startup"]);
    }

    fn spec() -> VmSpec {
        VmSpec {
            name: "test-0".into(),
            vmid: 150,
            node: "pve1".into(),
            template: "debian-12".into(),
            storage: "local-lvm".into(),
            cores: 2,
            memory_mib: 2048,
            disk_gib: Some(20),
            disks: vec![],
            nics: vec![nic(Some(20))],
            startup_order: Some(10),
            tags: vec!["cradle".into()],
            environment: "test".into(),
            allow_replacement: false,
        }
    }

    #[test]
    fn a_fresh_clone_gets_every_setting_and_a_grown_boot_disk() {
        let snippets = Snippets {
            user: "local:snippets/test-0-user.yaml".into(),
            network: "local:snippets/test-0-network.yaml".into(),
            meta: None,
        };
        let c = cfg(&[("scsi0", "local-lvm:vm-150-disk-0,size=8G"), ("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0")]);
        let (set, resize) = configure(&spec(), &snippets, &c).expect("configure");
        let keys: Vec<&str> = set.iter().map(|e| e.key.as_str()).collect();
        for k in ["cores", "memory", "net0", "cicustom", "ide2", "tags", "onboot", "startup"] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        assert_eq!(resize, Some(("scsi0".to_string(), "20G".to_string())));
    }

    #[test]
    fn a_configured_vm_needs_no_second_write_and_a_partial_one_only_the_rest() {
        let snippets = Snippets { user: "u".into(), network: "n".into(), meta: None };
        let fresh =
            cfg(&[("scsi0", "local-lvm:vm-150-disk-0,size=8G"), ("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0")]);
        let (set, _) = configure(&spec(), &snippets, &fresh).expect("configure");
        // What Proxmox holds after the writes: each key replaced, the drive allocated, the disk grown.
        let mut done: Vec<Entry> = vec![entry("scsi0", "local-lvm:vm-150-disk-0,size=20G")];
        done.extend(
            set.iter().map(|e| entry(&e.key, e.value.replace("local-lvm:cloudinit", "local-lvm:vm-150-cloudinit"))),
        );
        let (again, resize) = configure(&spec(), &snippets, &done).expect("configure again");
        let left: Vec<String> = differing(again, &done).into_iter().map(|e| e.key).collect();
        assert!(left.is_empty(), "nothing left to write: {left:?}");
        assert_eq!(resize, None, "the disk already has its size");
        let partial: Vec<Entry> = done.iter().filter(|e| e.key != "cicustom").cloned().collect();
        let (rest, _) = configure(&spec(), &snippets, &partial).expect("configure partial");
        let keys: Vec<String> = differing(rest, &partial).into_iter().map(|e| e.key).collect();
        assert_eq!(keys, ["cicustom"]);
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
    fn shrinking_the_boot_disk_is_refused() {
        let snippets = Snippets { user: "u".into(), network: "n".into(), meta: None };
        let c = cfg(&[("scsi0", "local-lvm:vm-150-disk-0,size=32G")]);
        let err = configure(&spec(), &snippets, &c).expect_err("no shrink");
        assert!(matches!(err, Error::Invalid(m) if m.contains("cannot shrink")));
    }
}
