//! What `create` writes on the clone: every setting of the spec, and the boot
//! disk resize. Pure functions over config entries (reading them is the kit's
//! `cradle_guest::config`), so they are tested natively.

use cradle_guest::Error;
use cradle_guest::config::{
    boot_disk, cloudinit_slot, disk_size_gib, entry, get, net_value, startup_changes, tags_value,
};
use cradle_guest::types::{Entry, Snippets, VmSpec};

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
        set.push(entry("tags", tags_value(&vm.tags)));
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
    use cradle_guest::config::differing;
    use cradle_guest::types::Nic;

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
    fn shrinking_the_boot_disk_is_refused() {
        let snippets = Snippets { user: "u".into(), network: "n".into(), meta: None };
        let c = cfg(&[("scsi0", "local-lvm:vm-150-disk-0,size=32G")]);
        let err = configure(&spec(), &snippets, &c).expect_err("no shrink");
        assert!(matches!(err, Error::Invalid(m) if m.contains("cannot shrink")));
    }
}
