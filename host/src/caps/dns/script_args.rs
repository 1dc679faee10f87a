//! A script's DNS record (`#{zone, name, kind, value, ttl}`) and record kind
//! (`"a"`, `"aaaa"`, `"ptr"`, any case) as the `dns` capability's typed
//! [`DnsRecord`] and [`RecordKind`]: the one reading of them, used by
//! `dns::upsert`/`dns::delete` (`rhai.rs`) and `cradle::check_inputs`
//! (`vms_dns_record`).
//!
//! Contract: depends only on `rhai`, the value glue
//! ([`crate::caps::script_glue`]) and the WIT types; no run, no I/O (so
//! `fuzz/` compiles it: target `script_args`). Unknown keys are refused, so a
//! typo does not silently drop a field; `ttl` left out, `()` or `0` is the
//! provider's. A refused value throws `#{kind: "invalid", message}` naming
//! the function and the field. The names and the value are the provider's to
//! check (`scope.rs`, `wire.rs`), on every call.

use rhai::Map;

use crate::caps::script_glue::{Res, int_arg, invalid};
use crate::contract::bindings::cradle::host::dns::{DnsRecord, RecordKind};

/// The keys of a record map.
pub const FIELDS: [&str; 5] = ["zone", "name", "kind", "value", "ttl"];

/// `kind` (any case) as a record kind; `function` names the caller.
pub fn record_kind(function: &str, kind: &str) -> Res<RecordKind> {
    match kind.to_ascii_lowercase().as_str() {
        "a" => Ok(RecordKind::A),
        "aaaa" => Ok(RecordKind::Aaaa),
        "ptr" => Ok(RecordKind::Ptr),
        other => Err(invalid(format!("{function}: unknown record kind `{other}` (a, aaaa, ptr)"))),
    }
}

fn string_field(rec: &Map, key: &str) -> Res<String> {
    let value = rec.get(key).ok_or_else(|| invalid(format!("dns::upsert: missing field `{key}`")))?;
    value.clone().into_string().map_err(|t| invalid(format!("dns::upsert: `{key}` must be a string, got {t}")))
}

/// A record map as `dns::upsert` takes it.
pub fn record(rec: &Map) -> Res<DnsRecord> {
    if let Some(unknown) = rec.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(invalid(format!("dns::upsert: unknown field `{unknown}` (expected {})", FIELDS.join(", "))));
    }
    let ttl = match rec.get("ttl") {
        None => 0,
        Some(v) if v.is_unit() => 0,
        Some(v) => {
            let ttl = v.as_int().map_err(|t| invalid(format!("dns::upsert: `ttl` must be an integer, got {t}")))?;
            int_arg(ttl, "dns::upsert: ttl")?
        }
    };
    Ok(DnsRecord {
        zone: string_field(rec, "zone")?,
        name: string_field(rec, "name")?,
        kind: record_kind("dns::upsert", &string_field(rec, "kind")?)?,
        value: string_field(rec, "value")?,
        ttl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::script_glue::{thrown_message, to_map};

    fn map(script: &str) -> Map {
        rhai::Engine::new().eval::<Map>(script).expect("map")
    }

    #[test]
    fn a_record_map_converts_with_the_provider_ttl_when_left_out() {
        let r = record(&map(r#"#{zone: "lab.example.", name: "a.lab.example.", kind: "A", value: "10.0.10.5"}"#))
            .expect("record");
        assert_eq!((r.kind, r.ttl, r.value.as_str()), (RecordKind::A, 0, "10.0.10.5"));
        let r = record(&map(r#"#{zone: "z.", name: "n.z.", kind: "ptr", value: "a.lab.example.", ttl: 60}"#))
            .expect("record");
        assert_eq!((r.kind, r.ttl), (RecordKind::Ptr, 60));
    }

    #[test]
    fn an_accepted_record_re_parses_from_its_own_map_form() {
        let r =
            record(&map(r#"#{zone: "z.", name: "n.z.", kind: "AAAA", value: "fd00::5", ttl: 300}"#)).expect("record");
        let again = record(&to_map(&r).expect("map form")).expect("re-parses");
        assert_eq!(
            (again.zone, again.name, again.kind, again.value, again.ttl),
            (r.zone, r.name, r.kind, r.value, r.ttl)
        );
    }

    #[test]
    fn typos_bad_kinds_and_missing_fields_are_refused_by_name() {
        let typo = record(&map(r#"#{zone: "z.", name: "n.z.", kind: "a", value: "10.0.0.1", tll: 5}"#));
        assert!(thrown_message(&typo.expect_err("typo")).contains("unknown field `tll`"));
        let kind = record(&map(r#"#{zone: "z.", name: "n.z.", kind: "cname", value: "x."}"#));
        assert!(thrown_message(&kind.expect_err("kind")).contains("unknown record kind `cname`"));
        let missing = record(&map(r#"#{zone: "z.", kind: "a", value: "10.0.0.1"}"#));
        assert!(thrown_message(&missing.expect_err("missing")).contains("missing field `name`"));
        let ttl = record(&map(r#"#{zone: "z.", name: "n.z.", kind: "a", value: "10.0.0.1", ttl: -1}"#));
        assert!(thrown_message(&ttl.expect_err("ttl")).contains("dns::upsert: ttl -1 is out of range"));
    }
}
