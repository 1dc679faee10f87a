//! A PVE API answer body, as the proxmox client decodes it: the `{"data": ...}`
//! envelope unwrapped as the client does (`client/request.rs`: a missing `data`
//! is null), then every response decoder of `client/answers.rs` on that value,
//! and every string in it as a UPID.
//!
//! Invariants: a decoder either answers or says which field is wrong, never
//! panics; the config, pending and volume lists come back sorted; a task is
//! `ok` only when stopped with `OK`/`WARNINGS: n`, and a running one has no exit
//! status; a parsed UPID has the eight fields in order (its node and type
//! non-empty, `UPID:` first, `:` last); an entry of a task list carries the
//! `upid` it was listed with.
#![no_main]

use cradle_fuzz::pve::answers::{
    config_entries, exit_ok, ha_resources, ha_rules, log_lines, parse_upid, pending_entries, storage_definition,
    storage_in_index, storage_status, task_list, task_status_from, upid_from, version, vm_resources, vm_runtime,
    vmid_value, volumes,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const UPID: &str = "UPID:pve1:000003E9:0001A1FF:6B151D7A:qmclone:9000:root@pam!cradle:";

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<Value>(data) else { return };
    let data = match body {
        Value::Object(mut map) => map.remove("data").unwrap_or(Value::Null),
        other => other,
    };
    let _ = vm_resources(&data);
    let _ = vmid_value(&data);
    let _ = storage_definition("local-lvm", &data);
    let _ = storage_in_index("local-lvm", &data);
    let _ = ha_resources(&data);
    let _ = ha_rules(&data);
    let _ = storage_status("local", &data);
    let _ = version(&data);
    let _ = log_lines(&data);
    if let Ok(entries) = config_entries(&data) {
        assert!(entries.windows(2).all(|w| w[0].key <= w[1].key), "config entries unsorted");
    }
    if let Ok(pending) = pending_entries(&data) {
        assert!(pending.windows(2).all(|w| w[0].key <= w[1].key), "pending entries unsorted");
    }
    if let Ok(vols) = volumes(&data) {
        assert!(vols.windows(2).all(|w| w[0].volid <= w[1].volid), "volumes unsorted");
    }
    let _ = vm_runtime(&data);
    if let Ok(status) = task_status_from(UPID, &data) {
        if status.ok {
            assert_eq!(status.status, "stopped");
            assert!(status.exitstatus.as_deref().is_some_and(exit_ok));
        }
        if status.status == "running" {
            assert_eq!(status.exitstatus, None);
        }
    }
    if let Ok(tasks) = task_list(&data) {
        let listed = data.as_array().expect("a task list decodes only from a list");
        for (summary, entry) in tasks.iter().zip(listed) {
            let upid = entry.get("upid").and_then(Value::as_str);
            assert!(upid.is_none_or(|u| u == summary.upid), "summary of another task");
            assert!(parse_upid(&summary.upid).is_ok(), "a listed task with a bad UPID");
        }
    }
    if let Ok(upid) = upid_from(&data) {
        assert_eq!(Some(upid.as_str()), data.as_str());
    }
    for text in strings(&data) {
        if let Ok(u) = parse_upid(text) {
            assert!(text.starts_with("UPID:") && text.ends_with(':'), "{text:?}");
            assert!(!u.node.is_empty() && !u.kind.is_empty() && !u.user.is_empty(), "{text:?}");
            let fields: Vec<&str> = text.split(':').collect();
            assert_eq!((fields[1], fields[5], fields[6], fields[7]), (&*u.node, &*u.kind, &*u.id, &*u.user));
        }
    }
});

/// Every string in `v`, depth first (bounded: serde_json refuses nesting past 128).
fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().flat_map(strings).collect(),
        Value::Object(map) => map.iter().flat_map(|(k, v)| std::iter::once(k.as_str()).chain(strings(v))).collect(),
        _ => Vec::new(),
    }
}
