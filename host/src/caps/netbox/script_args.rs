//! A script's arguments to `netbox_api::*` as the `netbox` capability's typed
//! values: object ids, the MAC write path (`"auto"`, `"field"`,
//! `"objects"`), the journal kind (`"info"`, `"success"`, `"warning"`,
//! `"danger"`) and a listing's filters (a map of NetBox filter names to
//! strings, integers or booleans).
//!
//! Contract: no run, no I/O. A refused value throws `#{kind: "invalid",
//! message}` naming the function and the argument; kinds and paths are
//! matched exactly (lower case, as NetBox spells them), so a typo is an
//! error rather than a different entry.

use rhai::{Dynamic, Map};

use crate::caps::script_glue::{Res, invalid};
use crate::contract::bindings::cradle::host::netbox::{JournalKind, MacWrite};
use crate::contract::bindings::cradle::host::types::Entry;

/// A NetBox object id: a positive integer.
pub(crate) fn object_id(function: &str, what: &str, id: i64) -> Res<u64> {
    u64::try_from(id)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| invalid(format!("netbox_api::{function}: {what} {id} is not a NetBox id (a positive integer)")))
}

/// `set_mac`'s `how`.
pub(crate) fn mac_write(how: &str) -> Res<MacWrite> {
    match how {
        "auto" => Ok(MacWrite::Auto),
        "field" => Ok(MacWrite::Field),
        "objects" => Ok(MacWrite::Objects),
        other => Err(invalid(format!("netbox_api::set_mac: unknown write path `{other}` (auto, field, objects)"))),
    }
}

/// `journal`'s `kind`.
pub(crate) fn journal_kind(kind: &str) -> Res<JournalKind> {
    match kind {
        "info" => Ok(JournalKind::Info),
        "success" => Ok(JournalKind::Success),
        "warning" => Ok(JournalKind::Warning),
        "danger" => Ok(JournalKind::Danger),
        other => Err(invalid(format!(
            "netbox_api::journal: unknown journal kind `{other}` (info, success, warning, danger)"
        ))),
    }
}

fn scalar(key: &str, v: &Dynamic) -> Res<String> {
    if let Ok(s) = v.clone().into_string() {
        return Ok(s);
    }
    if let Ok(i) = v.as_int() {
        return Ok(i.to_string());
    }
    if let Ok(b) = v.as_bool() {
        return Ok(b.to_string());
    }
    Err(invalid(format!(
        "netbox_api::list_vms: filter `{key}` must be a string, an integer or a boolean, got {}",
        v.type_name()
    )))
}

/// `list_vms`'s `filters`; an array value repeats the key (NetBox's OR).
pub(crate) fn filters(map: &Map) -> Res<Vec<Entry>> {
    let mut out = Vec::new();
    for (key, value) in map {
        let values = match value.clone().try_cast::<rhai::Array>() {
            Some(items) => items,
            None => vec![value.clone()],
        };
        for v in &values {
            out.push(Entry { key: key.to_string(), value: scalar(key, v)? });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::script_glue::thrown_message;

    #[test]
    fn an_unknown_journal_kind_is_refused_by_name() {
        assert_eq!(journal_kind("danger").expect("danger"), JournalKind::Danger);
        for bad in ["critical", "Danger", ""] {
            let m = thrown_message(&journal_kind(bad).expect_err(bad));
            assert!(m.contains(&format!("unknown journal kind `{bad}`")), "{m}");
        }
    }

    #[test]
    fn write_paths_ids_and_filters_are_read_or_refused() {
        assert_eq!(mac_write("objects").expect("objects"), MacWrite::Objects);
        assert!(thrown_message(&mac_write("both").expect_err("both")).contains("unknown write path `both`"));
        assert_eq!(object_id("read_vm", "VM", 7).expect("7"), 7);
        assert!(thrown_message(&object_id("read_vm", "VM", 0).expect_err("0")).contains("VM 0 is not a NetBox id"));
        let map = rhai::Engine::new().eval::<Map>(r#"#{cluster: "lab", tag: ["a", "b"], id__gt: 5}"#).expect("map");
        let mut got: Vec<(String, String)> =
            filters(&map).expect("filters").into_iter().map(|e| (e.key, e.value)).collect();
        got.sort();
        let want = [("cluster", "lab"), ("id__gt", "5"), ("tag", "a"), ("tag", "b")];
        assert_eq!(got, want.map(|(k, v)| (k.to_string(), v.to_string())));
        let bad = rhai::Engine::new().eval::<Map>("#{cluster: #{}}").expect("map");
        assert!(thrown_message(&filters(&bad).expect_err("map")).contains("filter `cluster` must be"));
    }
}
