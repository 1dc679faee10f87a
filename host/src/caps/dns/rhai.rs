//! `dns::*` for workflow scripts, through the same adapter as a plugin's call
//! (checked against `[workflow.grants.dns]`, journaled):
//!
//! - `dns::upsert(#{zone, name, kind, value, ttl})` → `true` when something
//!   changed. `kind` is `"a"`, `"aaaa"` or `"ptr"`; `ttl` may be left out (or
//!   `0`) for the provider's `ttl`. Unknown keys are an error, so a typo does
//!   not silently drop a field.
//! - `dns::delete(zone, name, kind)` → `true` when something was deleted.
//!
//! Failures throw `#{kind, message}` like every host module.

use rhai::{FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use crate::caps::script::{Res, caps, int_arg, throw, wit_throw};
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::dns::{DnsRecord, Host, RecordKind};

const FIELDS: [&str; 5] = ["zone", "name", "kind", "value", "ttl"];

fn record_kind(function: &str, kind: &str) -> Res<RecordKind> {
    match kind.to_ascii_lowercase().as_str() {
        "a" => Ok(RecordKind::A),
        "aaaa" => Ok(RecordKind::Aaaa),
        "ptr" => Ok(RecordKind::Ptr),
        other => Err(throw(CapError::invalid(format!("{function}: unknown record kind `{other}` (a, aaaa, ptr)")))),
    }
}

fn string_field(rec: &Map, key: &str) -> Res<String> {
    let value = rec.get(key).ok_or_else(|| throw(CapError::invalid(format!("dns::upsert: missing field `{key}`"))))?;
    value
        .clone()
        .into_string()
        .map_err(|t| throw(CapError::invalid(format!("dns::upsert: `{key}` must be a string, got {t}"))))
}

pub(crate) fn record(rec: &Map) -> Res<DnsRecord> {
    if let Some(unknown) = rec.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(throw(CapError::invalid(format!(
            "dns::upsert: unknown field `{unknown}` (expected {})",
            FIELDS.join(", ")
        ))));
    }
    let ttl = match rec.get("ttl") {
        None => 0,
        Some(v) if v.is_unit() => 0,
        Some(v) => {
            let ttl = v
                .as_int()
                .map_err(|t| throw(CapError::invalid(format!("dns::upsert: `ttl` must be an integer, got {t}"))))?;
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

/// The `dns` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("upsert").set_into_module(&mut m, |ctx: NativeCallContext, rec: Map| -> Res<bool> {
        let rec = record(&rec)?;
        Host::upsert(&mut caps(&ctx)?, rec).map_err(wit_throw)
    });
    FuncRegistration::new("delete").set_into_module(
        &mut m,
        |ctx: NativeCallContext, zone: ImmutableString, name: ImmutableString, kind: ImmutableString| -> Res<bool> {
            let kind = record_kind("dns::delete", &kind)?;
            Host::delete(&mut caps(&ctx)?, zone.to_string(), name.to_string(), kind).map_err(wit_throw)
        },
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn message(e: Box<rhai::EvalAltResult>) -> String {
        match e.as_ref() {
            rhai::EvalAltResult::ErrorRuntime(v, _) => v.clone().cast::<Map>()["message"].to_string(),
            other => other.to_string(),
        }
    }

    #[test]
    fn typos_bad_kinds_and_missing_fields_are_refused_by_name() {
        let typo = record(&map(r#"#{zone: "z.", name: "n.z.", kind: "a", value: "10.0.0.1", tll: 5}"#));
        assert!(message(typo.expect_err("typo")).contains("unknown field `tll`"));
        let kind = record(&map(r#"#{zone: "z.", name: "n.z.", kind: "cname", value: "x."}"#));
        assert!(message(kind.expect_err("kind")).contains("unknown record kind `cname`"));
        let missing = record(&map(r#"#{zone: "z.", kind: "a", value: "10.0.0.1"}"#));
        assert!(message(missing.expect_err("missing")).contains("missing field `name`"));
    }
}
