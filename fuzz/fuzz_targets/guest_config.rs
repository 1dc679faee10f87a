//! A VM's config (`key: value` lines, as `qm config` prints them) through the
//! guest kit's config code: the cloud-init drive, the boot disk, disk sizes,
//! NIC values, `onboot`/`startup`, `tags`, and the property-string comparison
//! behind `differing`.
//!
//! Invariants: `tags` print → parse is the parse (`pve_tags(tags_value(t)) ==
//! t`); writing a NIC value again changes nothing (`net_value` of its own
//! output is that output); a config differs from nothing of its own.
#![no_main]

use cradle_fuzz::guest_config::{
    boot_disk, cloudinit_slot, differing, disk_size_gib, net_value, pve_tags, startup_changes, tags_value,
};
use cradle_fuzz::types::{Entry, Nic, VmSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let config: Vec<Entry> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| Entry { key: k.trim().to_string(), value: v.trim_start().to_string() })
        .collect();
    let _ = cloudinit_slot(&config);
    let _ = boot_disk(&config);
    let nic = Nic { bridge: "vmbr0".into(), vlan: Some(20) };
    for e in &config {
        let _ = disk_size_gib(&e.value);
        let tags = pve_tags(&e.value);
        assert_eq!(pve_tags(&tags_value(&tags)), tags, "tags print → parse of {:?}", e.value);
        let once = net_value(Some(&e.value), &nic);
        assert_eq!(net_value(Some(&once), &nic), once, "net_value of its own output {once:?}");
    }
    let _ = startup_changes(&VmSpec { startup_order: Some(10) }, &config);
    let mut unique: Vec<Entry> = Vec::new();
    for e in &config {
        if !unique.iter().any(|u| u.key == e.key) {
            unique.push(e.clone());
        }
    }
    assert!(differing(unique.clone(), &unique).is_empty(), "a config differs from itself");
    // The same settings, each property string re-ordered as PVE re-prints it.
    let reordered: Vec<Entry> = unique
        .iter()
        .map(|e| {
            let mut parts: Vec<&str> = e.value.split(',').collect();
            parts.reverse();
            Entry { key: e.key.clone(), value: parts.join(",") }
        })
        .collect();
    let _ = differing(reordered, &unique);
});
