//! The diff's classes, each written from the qemu-server e6352be line cited.

use std::collections::BTreeMap;

use super::change::{Allow, Class, Live, PendingEntry, Wanted, WantedDisk, WantedNic};
use super::diff::diff;

pub(super) fn want() -> Wanted {
    Wanted {
        name: "web-1".into(),
        vmid: 150,
        node: "pve1".into(),
        storage: "local-lvm".into(),
        cores: 2,
        memory_mib: 2048,
        disk_gib: Some(20),
        disks: vec![WantedDisk { slot: "scsi1".into(), storage: "local-lvm".into(), size_gib: 10 }],
        nics: vec![WantedNic { slot: "net0".into(), bridge: "vmbr0".into(), vlan: Some(20) }],
        startup_order: Some(10),
        tags: vec!["cradle".into(), "web".into()],
    }
}

pub(super) fn config() -> BTreeMap<String, String> {
    [
        ("boot", "order=scsi0;net0"),
        ("cores", "2"),
        ("memory", "2048"),
        ("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=20,firewall=1"),
        ("scsi0", "local-lvm:vm-150-disk-0,size=20G"),
        ("scsi1", "local-lvm:vm-150-disk-1,size=10G"),
        ("startup", "order=10"),
        ("tags", "cradle;web"),
        ("onboot", "1"),
        ("digest", "d0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

pub(super) fn live(running: bool) -> Live {
    Live { config: config(), pending: vec![], running, digest: "d0".into() }
}

fn with(mut l: Live, key: &str, value: &str) -> Live {
    l.config.insert(key.into(), value.into());
    l
}

#[test]
fn a_vm_as_the_inventory_describes_it_has_no_changes() {
    let c = diff(&want(), &live(true), &Allow::default()).expect("diff");
    assert!(c.changes.is_empty(), "{:?}", c.changes);
    assert!(c.set.is_empty() && c.delete.is_empty() && c.resize.is_empty());
    assert_eq!(c.digest, "d0");
}

#[test]
fn a_memory_bump_on_a_running_vm_without_memory_hotplug_is_next_boot() {
    // QemuServer.pm:4877: `die "skip"` without the memory feature (default hotplug network,disk,usb).
    let w = Wanted { memory_mib: 4096, ..want() };
    let c = diff(&w, &live(true), &Allow::default()).expect("diff");
    assert_eq!(c.changes.len(), 1);
    assert_eq!(c.changes[0].class, Class::NextBoot);
    assert_eq!(c.set.get("memory").map(String::as_str), Some("4096"));
    assert_eq!(c.before.get("memory"), Some(&Some("2048".to_string())));
    assert_eq!(c.expect.get("memory"), Some(&Some("4096".to_string())));
}

#[test]
fn memory_with_the_memory_hotplug_feature_and_numa_is_live() {
    // QemuServer.pm:4877-4878 → Memory.pm:201 qemu_memory_hotplug.
    let l = with(with(live(true), "hotplug", "network,disk,memory"), "numa", "1");
    let c = diff(&Wanted { memory_mib: 4096, ..want() }, &l, &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].class, Class::Live);
}

#[test]
fn memory_hotplug_without_numa_is_refused_with_no_flag() {
    // Memory.pm:364: "NUMA needs to be enabled for memory hotplug".
    let l = with(live(true), "hotplug", "network,disk,memory");
    let c = diff(
        &Wanted { memory_mib: 4096, ..want() },
        &l,
        &Allow { disk_removal: true, nic_replacement: true, disk_move: false },
    )
    .expect("diff");
    assert_eq!(c.changes[0].class, Class::Refused);
    assert_eq!(c.changes[0].flag, None);
    assert!(c.set.is_empty(), "a refused change is no operation");
    assert!(c.changes[0].why.contains("NUMA"), "{}", c.changes[0].why);
}

#[test]
fn memory_stored_as_current_equal_to_the_inventory_is_unchanged() {
    let c = diff(&want(), &with(live(true), "memory", "current=2048"), &Allow::default()).expect("diff");
    assert!(c.changes.is_empty(), "{:?}", c.changes);
}

#[test]
fn cores_on_a_running_vm_are_next_boot() {
    // QemuServer.pm:4889: cores are not hot-pluggable.
    let c = diff(&Wanted { cores: 4, ..want() }, &live(true), &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].class, Class::NextBoot);
    assert!(c.changes[0].why.contains("cold start"));
}

#[test]
fn a_stopped_vm_takes_every_allowed_change_live() {
    // Qemu.pm update_vm_api: a stopped VM's changes go to the config (vmconfig_apply_pending).
    let mut w = Wanted { cores: 4, memory_mib: 4096, disk_gib: Some(30), ..want() };
    w.nics[0].vlan = Some(30);
    w.disks.push(WantedDisk { slot: "scsi2".into(), storage: "local-lvm".into(), size_gib: 5 });
    let l = with(live(false), "net1", "virtio=BC:24:11:00:00:02,bridge=vmbr1");
    let c = diff(&w, &l, &Allow { nic_replacement: true, ..Allow::default() }).expect("diff");
    assert!(c.changes.len() >= 6, "{:?}", c.changes);
    assert!(c.changes.iter().all(|ch| ch.class == Class::Live), "{:?}", c.changes);
    assert!(!c.running);
}

#[test]
fn a_vlan_change_is_live_and_keeps_the_mac() {
    // QemuServer.pm:5139-5190: bridge/tag change on the running tap, no hotplug feature needed.
    let mut w = want();
    w.nics[0].vlan = Some(30);
    let l = with(live(true), "hotplug", "0");
    let c = diff(&w, &l, &Allow::default()).expect("diff");
    assert_eq!(c.changes.len(), 1);
    assert_eq!(c.changes[0].what, "net0 VLAN");
    assert_eq!(c.changes[0].class, Class::Live);
    assert_eq!(c.changes[0].why, "PVE retags the running NIC (no reboot; its MAC is kept)");
    assert_eq!(c.set.get("net0").map(String::as_str), Some("virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=30,firewall=1"));
}

#[test]
fn a_nic_missing_from_the_inventory_is_refused_unless_allowed() {
    let l = with(live(true), "net1", "e1000=BC:24:11:00:00:02,bridge=vmbr1");
    let c = diff(&want(), &l, &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].class, Class::Refused);
    assert_eq!(c.changes[0].flag.as_deref(), Some("--allow-nic-replacement"));
    assert!(c.delete.is_empty());
    let c = diff(&want(), &l, &Allow { nic_replacement: true, ..Allow::default() }).expect("diff");
    assert_eq!(c.changes[0].class, Class::Live, "QemuServer.pm:4767: network feature on by default");
    assert_eq!(c.delete, ["net1"]);
}

#[test]
fn a_nat_nic_given_a_bridge_is_a_replacement() {
    // QemuServer.pm:5121: `!($newnet->{bridge} && $oldnet->{bridge})` unplugs and plugs.
    let l = with(live(true), "net0", "virtio=BC:24:11:AA:BB:CC");
    let c = diff(&want(), &l, &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].class, Class::Refused);
    assert_eq!(c.changes[0].flag.as_deref(), Some("--allow-nic-replacement"));
    let l = with(l, "hotplug", "disk");
    let c = diff(&want(), &l, &Allow { nic_replacement: true, ..Allow::default() }).expect("diff");
    assert_eq!(c.changes[0].class, Class::NextBoot, "no network feature: pending");
}

#[test]
fn a_new_nic_is_hotplugged_with_the_network_feature_else_next_boot() {
    // QemuServer.pm:5193-5204: a new NIC is vm_deviceplug'd only with `network`.
    let mut w = want();
    w.nics.push(WantedNic { slot: "net1".into(), bridge: "vmbr1".into(), vlan: None });
    let c = diff(&w, &live(true), &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].class, Class::Live);
    assert_eq!(c.set.get("net1").map(String::as_str), Some("virtio,bridge=vmbr1"));
    let c = diff(&w, &with(live(true), "hotplug", "disk"), &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].class, Class::NextBoot);
}

#[test]
fn a_data_disk_missing_from_the_inventory_is_refused_unless_allowed() {
    let l = with(with(live(true), "scsi2", "local-lvm:vm-150-disk-2,size=4G"), "boot", "order=scsi0;scsi2;net0");
    let c = diff(&want(), &l, &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].class, Class::Refused);
    assert_eq!(c.changes[0].flag.as_deref(), Some("--allow-disk-removal"));
    assert!(c.delete.is_empty() && c.expect.is_empty());
    let c = diff(&want(), &l, &Allow { disk_removal: true, ..Allow::default() }).expect("diff");
    assert_eq!(c.changes[0].class, Class::Live, "QemuServer.pm:4776: disk feature, scsi slot");
    assert_eq!(c.delete, ["scsi2"]);
    // Qemu.pm:2305-2309: PVE drops the deleted drive from the boot order.
    assert_eq!(c.expect.get("boot"), Some(&Some("order=scsi0;net0".to_string())));
}

#[test]
fn removing_a_sata_disk_from_a_running_vm_is_next_boot() {
    // QemuServer.pm:4777: no hot-unplug of efidisk/ide/sata/tpmstate.
    let l = with(live(true), "sata1", "local-lvm:vm-150-disk-3,size=4G");
    let c = diff(&want(), &l, &Allow { disk_removal: true, ..Allow::default() }).expect("diff");
    assert_eq!(c.changes[0].class, Class::NextBoot);
}

#[test]
fn a_disk_shrink_is_refused_with_no_flag() {
    // Qemu.pm:6048: "shrinking disks is not supported".
    let mut w = Wanted { disk_gib: Some(10), ..want() };
    w.disks[0].size_gib = 5;
    let c =
        diff(&w, &live(true), &Allow { disk_removal: true, nic_replacement: true, disk_move: false }).expect("diff");
    assert_eq!(c.changes.len(), 2);
    assert!(c.changes.iter().all(|ch| ch.class == Class::Refused && ch.flag.is_none()));
    assert!(c.resize.is_empty());
}

#[test]
fn a_disk_grow_is_a_live_resize_with_the_size_in_expect() {
    let mut w = Wanted { disk_gib: Some(32), ..want() };
    w.disks[0].size_gib = 15;
    let c = diff(&w, &live(true), &Allow::default()).expect("diff");
    assert_eq!(c.resize.len(), 2);
    assert_eq!(
        (c.resize[0].disk.as_str(), c.resize[0].from.as_str(), c.resize[0].to.as_str()),
        ("scsi0", "20G", "32G")
    );
    assert_eq!(c.expect.get("scsi1"), Some(&Some("local-lvm:vm-150-disk-1,size=15G".to_string())));
    assert_eq!(c.changes[0].what, "boot disk size");
    assert!(c.set.is_empty());
}

#[test]
fn a_disk_on_another_storage_is_refused_naming_the_move_flag() {
    let mut w = want();
    w.disks[0].storage = "ceph".into();
    w.disks[0].size_gib = 15;
    let c =
        diff(&w, &live(true), &Allow { disk_removal: true, nic_replacement: true, disk_move: false }).expect("diff");
    assert_eq!(c.changes.len(), 1, "the refused move hides the grow too: {:?}", c.changes);
    assert_eq!((c.changes[0].what.as_str(), c.changes[0].class), ("scsi1 storage", Class::Refused));
    assert_eq!(c.changes[0].flag.as_deref(), Some("--allow-disk-move"));
    assert!(c.moves.is_empty() && c.resize.is_empty() && !c.expect.contains_key("scsi1"), "{c:?}");
}

#[test]
fn with_allow_disk_move_a_data_disk_moves_and_then_grows() {
    // Qemu.pm move_vm_disk: a copy to a new volume, online on a running VM;
    // the source stays as unusedN (no `delete`).
    let mut w = want();
    w.disks[0].storage = "ceph".into();
    w.disks[0].size_gib = 15;
    let c = diff(&w, &live(true), &Allow { disk_move: true, ..Allow::default() }).expect("diff");
    let m = &c.moves[..];
    assert_eq!(m.len(), 1);
    assert_eq!((m[0].disk.as_str(), m[0].volume.as_str()), ("scsi1", "local-lvm:vm-150-disk-1"));
    assert_eq!((m[0].from.as_str(), m[0].to.as_str()), ("local-lvm", "ceph"));
    assert_eq!(c.changes[0].class, Class::Live);
    assert_eq!(c.changes[0].flag, None);
    assert!(c.changes[0].why.contains("unused disk"), "{}", c.changes[0].why);
    assert_eq!(c.resize.len(), 1, "the grow is planned after the move");
    assert!(c.set.is_empty() && c.delete.is_empty());
    assert_eq!(c.before.get("scsi1"), Some(&Some("local-lvm:vm-150-disk-1,size=10G".to_string())));
}

#[test]
fn with_allow_disk_move_the_boot_disk_moves_to_the_inventory_storage() {
    let w = Wanted { storage: "ceph".into(), ..want() };
    let c = diff(&w, &live(false), &Allow { disk_move: true, ..Allow::default() }).expect("diff");
    assert_eq!(c.moves.len(), 1);
    assert_eq!((c.moves[0].disk.as_str(), c.moves[0].to.as_str()), ("scsi0", "ceph"));
    assert_eq!((c.changes[0].what.as_str(), c.changes[0].class), ("boot disk storage", Class::Live));
    assert!(c.changes[0].why.contains("stopped"), "{}", c.changes[0].why);
    let refused = diff(&w, &live(false), &Allow::default()).expect("diff");
    assert_eq!(refused.changes[0].flag.as_deref(), Some("--allow-disk-move"));
    assert!(refused.moves.is_empty());
}

#[test]
fn a_new_data_disk_is_written_as_creation_writes_it() {
    let mut w = want();
    w.disks.push(WantedDisk { slot: "scsi2".into(), storage: "local-lvm".into(), size_gib: 8 });
    let c = diff(&w, &live(true), &Allow::default()).expect("diff");
    assert_eq!(c.set.get("scsi2").map(String::as_str), Some("local-lvm:8"));
    assert_eq!(c.changes[0].class, Class::Live);
    let c = diff(&w, &with(live(true), "hotplug", "network"), &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].class, Class::NextBoot);
}

#[test]
fn tags_differing_only_in_case_and_order_are_unchanged() {
    let w = Wanted { tags: vec!["Web".into(), "cradle".into(), "web".into()], ..want() };
    let c = diff(&w, &with(live(true), "tags", "web;Cradle"), &Allow::default()).expect("diff");
    assert!(c.changes.is_empty(), "{:?}", c.changes);
    let w = Wanted { tags: vec!["db".into()], ..want() };
    let c = diff(&w, &live(true), &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].class, Class::Live, "tags are a fast-plug option (QemuServer.pm:4594)");
    assert_eq!(c.set.get("tags").map(String::as_str), Some("db"));
}

#[test]
fn a_startup_order_change_is_live() {
    let c = diff(&Wanted { startup_order: Some(3), ..want() }, &live(true), &Allow::default()).expect("diff");
    assert_eq!(c.changes[0].what, "startup order");
    assert_eq!(c.changes[0].class, Class::Live);
    assert_eq!(c.set.get("startup").map(String::as_str), Some("order=3"));
}

#[test]
fn cipassword_is_never_compared_or_stored() {
    let l = with(live(true), "cipassword", "$5$secret-hash");
    let c = diff(&Wanted { cores: 4, ..want() }, &l, &Allow::default()).expect("diff");
    let text = serde_json::to_string(&c).expect("json");
    assert!(!text.contains("secret-hash"), "{text}");
    assert!(c.changes.iter().all(|ch| ch.key != "cipassword"));
}

#[test]
fn keys_already_pending_are_listed_in_pending_before() {
    let mut l = live(true);
    l.pending = vec![
        PendingEntry {
            key: "cpu".into(),
            value: Some("host".into()),
            pending: Some("x86-64-v3".into()),
            delete: false,
        },
        PendingEntry { key: "cores".into(), value: Some("2".into()), pending: None, delete: false },
        PendingEntry { key: "usb0".into(), value: Some("host=1-1".into()), pending: None, delete: true },
    ];
    let c = diff(&want(), &l, &Allow::default()).expect("diff");
    assert_eq!(c.pending_before, ["cpu", "usb0"]);
}

#[test]
fn an_unreadable_live_value_names_the_vm_and_key() {
    let e = diff(&want(), &with(live(true), "memory", "lots"), &Allow::default()).expect_err("unreadable");
    let text = e.to_string();
    assert!(text.contains("web-1") && text.contains("memory"), "{text}");
    let e = diff(&want(), &with(live(true), "hotplug", "teleport"), &Allow::default()).expect_err("bad hotplug");
    assert!(e.to_string().contains("hotplug"));
}

#[test]
fn a_drive_or_nic_pve_would_not_store_is_unreadable_not_guessed_at() {
    // The `maintenance_diff` fuzz target's find: `size=4G` and a bare `size`
    // in one drive value read as 4 GiB before the resize and unreadable after.
    let twice = "local-lvm:vm-100-disk-0,size=4G,size";
    let e = diff(&want(), &with(live(false), "scsi0", twice), &Allow::default()).expect_err("duplicate key");
    let text = e.to_string();
    assert!(text.contains("web-1") && text.contains("scsi0") && text.contains("twice"), "{text}");
    let e = diff(&want(), &with(live(true), "scsi1", "local-lvm:vm-150-disk-1,size=9G,size=10G"), &Allow::default())
        .expect_err("two sizes");
    assert!(e.to_string().contains("`size` is given twice"), "{e}");
    let e = diff(&want(), &with(live(false), "net0", "virtio,bridge=vmbr0,bridge=vmbr1"), &Allow::default())
        .expect_err("duplicate bridge");
    assert!(e.to_string().contains("`bridge` is given twice"), "{e}");
    assert_eq!(super::pve::duplicate_key("virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=20", None), None);
    // The drive's default key by name and bare is twice too; blank parts are skipped, as PVE does.
    assert_eq!(super::pve::duplicate_key("local:1/a.raw,file=local:1/b.raw", Some("file")), Some("file".into()));
    assert_eq!(super::pve::duplicate_key(",local-lvm:vm-150-disk-1, ,size=4G", Some("file")), None);
    let lead = diff(&want(), &with(live(true), "scsi1", ",local-lvm:vm-150-disk-1,size=10G"), &Allow::default());
    assert!(lead.expect("a leading blank part").changes.is_empty(), "the same volume as without the comma");
    // Nor a volume spelled like an allocation: after the grow it would read as a new 1 GiB disk.
    let e = diff(&want(), &with(live(true), "scsi1", "local-lvm:1,size=4G"), &Allow::default()).expect_err("alloc");
    assert!(e.to_string().contains("allocating a new disk"), "{e}");
}

#[test]
fn a_slot_wanted_twice_or_not_a_slot_is_refused_before_any_change_is_planned() {
    // The `maintenance_diff` fuzz target's find: two wishes for scsi1 planned two resizes.
    let mut w = want();
    w.disks.push(WantedDisk { slot: "scsi1".into(), storage: "local-lvm".into(), size_gib: 40 });
    let e = diff(&w, &live(true), &Allow::default()).expect_err("scsi1 twice");
    assert_eq!(e.to_string(), "web-1: the inventory gives disk slot `scsi1` twice: give each slot once");
    let mut w = want();
    w.nics.push(WantedNic { slot: "net0".into(), bridge: "vmbr1".into(), vlan: None });
    let e = diff(&w, &live(true), &Allow::default()).expect_err("net0 twice");
    assert!(e.to_string().contains("NIC slot `net0` twice"), "{e}");
    // Nor a slot that is none: `data=:local-lvm:8` in the fuzz target read the key "".
    let mut w = want();
    w.disks[0].slot = String::new();
    let e = diff(&w, &live(true), &Allow::default()).expect_err("empty slot");
    assert!(e.to_string().contains("names `` as a disk slot"), "{e}");
    // Nor a storage or bridge that would add options to the value written.
    let mut w = want();
    w.disks[0].storage = ",ocal-lvm".into();
    let e = diff(&w, &live(true), &Allow::default()).expect_err("storage with a comma");
    assert!(e.to_string().contains("names `,ocal-lvm` as a storage"), "{e}");
    let mut w = want();
    w.nics[0].bridge = "vmbr0,firewall=0".into();
    let e = diff(&w, &live(true), &Allow::default()).expect_err("bridge with options");
    assert!(e.to_string().contains("as the bridge of net0"), "{e}");
}

#[test]
fn the_rest_hash_ignores_the_digest_and_the_touched_keys() {
    let a = diff(&Wanted { cores: 4, ..want() }, &live(true), &Allow::default()).expect("diff");
    let mut l = with(live(true), "digest", "other");
    l.config.insert("cores".into(), "3".into());
    let b = diff(&Wanted { cores: 4, ..want() }, &l, &Allow::default()).expect("diff");
    assert_eq!(a.rest, b.rest);
    let c = diff(&Wanted { cores: 4, ..want() }, &with(live(true), "name", "other"), &Allow::default()).expect("diff");
    assert_ne!(a.rest, c.rest);
}
