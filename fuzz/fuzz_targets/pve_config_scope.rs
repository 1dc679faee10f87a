//! PVE config property strings (`net0`, `ide2`, `scsi0`, `startup`, `cicustom`,
//! `efidisk0`, `unused0`...) as the proxmox capability reads them to decide
//! which storages, volumes and VMIDs a config change names. The input is
//! `key: value` lines (a VM config as `qm config` prints it); a line `-key` is a
//! deletion. The same lines are the VM's current config.
//!
//! Invariant: describing the same change twice gives the same scope.
#![no_main]

use cradle_fuzz::config_scope::{deletion_needs_config, describe, describe_container, is_drive_key, node_key};
use cradle_fuzz::contract::bindings::cradle::host::types::Entry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut set = Vec::new();
    let mut delete = Vec::new();
    for line in text.lines() {
        if let Some(key) = line.strip_prefix('-') {
            delete.push(key.to_string());
        } else if let Some((key, value)) = line.split_once(':') {
            set.push(Entry { key: key.trim().to_string(), value: value.trim_start().to_string() });
        }
    }
    for e in &set {
        let _ = is_drive_key(&e.key);
        let _ = node_key(&e.key);
    }
    let a = describe(&set, &delete, Some(&set));
    let b = describe(&set, &delete, Some(&set));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let _ = describe(&set, &delete, None);
    let _ = describe_container(&set, &delete);
    let _ = deletion_needs_config(&delete);
});
