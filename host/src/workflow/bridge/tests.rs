//! Round trips and mismatches for every WIT kind. Types come from the imports of a
//! small WAT component: no implementation is needed to get at them.

use std::collections::BTreeMap;

use rhai::{Dynamic, Engine as Rhai};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Type, Val};

use super::*;

const TYPES: &str = r#"(component
  (type $nic' (record (field "slot" string) (field "vlan" (option u16)) (field "guest-interface" string)))
  (import "nic" (type $nic (eq $nic')))
  (type $action' (enum "create" "update" "no-op" "replace"))
  (import "action" (type $action (eq $action')))
  (type $vm' (record
      (field "name" string) (field "vmid" u32) (field "memory-mib" u32)
      (field "disk-gib" (option u32)) (field "nics" (list $nic)) (field "tags" (list string))
      (field "action" $action)))
  (import "vm" (type $vm (eq $vm')))
  (type $error' (variant (case "denied" string) (case "not-found" string) (case "gone")))
  (import "error" (type $error (eq $error')))
  (type $perms' (flags "read" "write" "exec-it"))
  (import "perms" (type $perms (eq $perms')))
  (import "res" (type $res (sub resource)))
  (import "f" (func
      (param "vm" $vm) (param "error" $error) (param "perms" $perms)
      (param "pair" (tuple u8 string)) (param "bytes" (list u8))
      (param "res-ok" (result u32 (error string))) (param "unit-res" (result (error $error)))
      (param "s8" s8) (param "s16" s16) (param "s32" s32) (param "s64" s64)
      (param "u8" u8) (param "u16" u16) (param "u32" u32) (param "u64" u64)
      (param "f32" f32) (param "f64" f64) (param "char" char) (param "bool" bool)
      (param "string" string) (param "opt" (option string)) (param "handle" (own $res))
      (result (result $vm (error $error)))))
)"#;

/// The parameter types of import `f`, by name (plus `return`).
fn types() -> BTreeMap<String, Type> {
    let engine = wasmtime::Engine::default();
    let component = Component::new(&engine, TYPES).expect("the test component is valid WAT");
    let ty = component.component_type();
    let mut out = BTreeMap::new();
    for (name, item) in ty.imports(&engine) {
        if let (ComponentItem::ComponentFunc(f), "f") = (item.ty, name) {
            for (p, t) in f.params() {
                out.insert(p.to_string(), t);
            }
            out.insert("return".to_string(), f.results().next().expect("f has a result"));
        }
    }
    out
}

fn ty(name: &str) -> Type {
    types().remove(name).expect("the test type exists")
}

fn eval(script: &str) -> Dynamic {
    Rhai::new().eval::<Dynamic>(script).expect("the test expression evaluates")
}

const VM: &str = r#"#{
    name: "test-0", vmid: 100, memory_mib: 2048,
    nics: [#{slot: "net0", vlan: 20, guest_interface: "ens18"}, #{slot: "net1", "guest-interface": "ens19"}],
    tags: ["a"], action: "no_op"
}"#;

fn round_trip(name: &str, script: &str) -> (Val, Dynamic) {
    let t = ty(name);
    let val = to_val(&eval(script), &t, name).expect("the value converts");
    let back = from_val_typed(&val, &t, name).expect("the value converts back");
    assert_eq!(to_val(&back, &t, name).expect("the output is accepted as input"), val);
    (val, back)
}

#[test]
fn records_become_maps_with_snake_case_keys_and_missing_options_are_none() {
    let (val, back) = round_trip("vm", VM);
    let Val::Record(fields) = &val else { panic!("not a record: {val:?}") };
    assert!(fields.contains(&("memory-mib".to_string(), Val::U32(2048))));
    assert!(fields.contains(&("disk-gib".to_string(), Val::Option(None))));
    assert!(fields.contains(&("action".to_string(), Val::Enum("no-op".to_string()))));
    let map = back.as_map_ref().expect("a map");
    assert_eq!(map["memory_mib"].as_int(), Ok(2048));
    assert!(map["disk_gib"].is_unit());
    assert_eq!(map["action"].to_string(), "no-op");
    let nic = map["nics"].as_array_ref().expect("an array")[1].clone();
    assert!(nic.as_map_ref().expect("a map")["vlan"].is_unit());
}

#[test]
fn a_missing_field_is_reported_with_its_path_and_type() {
    let err = to_val(&eval(r#"#{name: "x", vmid: 1, nics: [], tags: [], action: "create"}"#), &ty("vm"), "vm");
    assert_eq!(err.unwrap_err().to_string(), "vm.memory_mib: missing field (expected u32)");
}

#[test]
fn an_unknown_field_is_an_error_with_a_suggestion() {
    let script = VM.replace("memory_mib", "memroy_mib");
    let err = to_val(&eval(&script), &ty("vm"), "vm").unwrap_err().to_string();
    assert!(err.starts_with("vm: unknown field 'memroy_mib' (did you mean 'memory_mib'?)"), "{err}");
}

#[test]
fn a_nested_mismatch_names_the_full_path() {
    let script = VM.replace("vlan: 20", r#"vlan: "x""#);
    let err = to_val(&eval(&script), &ty("vm"), "vm").unwrap_err().to_string();
    assert_eq!(err, r#"vm.nics[0].vlan: expected u16, got string "x""#);
}

#[test]
fn integers_are_range_checked() {
    let script = VM.replace("vmid: 100", "vmid: -1");
    let err = to_val(&eval(&script), &ty("vm"), "vm").unwrap_err().to_string();
    assert_eq!(err, "vm.vmid: -1 does not fit u32");
    for (name, bad) in
        [("s8", "128"), ("s16", "40000"), ("s32", "3000000000"), ("u8", "256"), ("u16", "-2"), ("u64", "-5")]
    {
        let err = to_val(&eval(bad), &ty(name), name).unwrap_err().to_string();
        assert_eq!(err, format!("{name}: {bad} does not fit {name}"));
    }
}

#[test]
fn scalars_round_trip() {
    for (name, script) in [
        ("s8", "-5"),
        ("s16", "-300"),
        ("s32", "-70000"),
        ("s64", "-9000000000"),
        ("u8", "255"),
        ("u16", "65535"),
        ("u32", "4000000000"),
        ("u64", "5"),
        ("f32", "1.5"),
        ("f64", "2.25"),
        ("char", "'x'"),
        ("bool", "true"),
        ("string", r#""hi""#),
    ] {
        let (_, back) = round_trip(name, script);
        assert_eq!(back.to_string(), eval(script).to_string(), "{name}");
    }
    assert_eq!(to_val(&eval("3"), &ty("f64"), "f").expect("an int is a float"), Val::Float64(3.0));
}

#[test]
fn u64_above_i64_max_comes_out_as_a_decimal_string_and_goes_back() {
    let t = ty("u64");
    let back = from_val_typed(&Val::U64(u64::MAX), &t, "n").expect("converts");
    assert_eq!(back.to_string(), u64::MAX.to_string());
    assert_eq!(to_val(&back, &t, "n").expect("accepted"), Val::U64(u64::MAX));
}

#[test]
fn enums_accept_kebab_or_snake_and_list_the_cases_on_error() {
    let t = ty("vm");
    let script = VM.replace("no_op", "destroy");
    let err = to_val(&eval(&script), &t, "vm").unwrap_err().to_string();
    assert_eq!(err, r#"vm.action: unknown case "destroy"; expected one of: create, update, no-op, replace"#);
    let kebab = VM.replace("no_op", "no-op");
    assert!(to_val(&eval(&kebab), &t, "vm").is_ok());
}

#[test]
fn variants_are_strings_without_payload_and_maps_with_one() {
    let (val, back) = round_trip("error", r#"#{kind: "not_found", value: "vm 100"}"#);
    assert_eq!(val, Val::Variant("not-found".into(), Some(Box::new(Val::String("vm 100".into())))));
    assert_eq!(back.as_map_ref().expect("a map")["kind"].to_string(), "not-found");
    let (val, back) = round_trip("error", r#""gone""#);
    assert_eq!(val, Val::Variant("gone".into(), None));
    assert_eq!(back.to_string(), "gone");
    let err = to_val(&eval(r#""denied""#), &ty("error"), "e").unwrap_err().to_string();
    assert_eq!(err, "e.value: missing field (expected string)");
}

#[test]
fn flags_tuples_bytes_options_and_results_round_trip() {
    let (val, _) = round_trip("perms", r#"["read", "exec_it"]"#);
    assert_eq!(val, Val::Flags(vec!["read".into(), "exec-it".into()]));
    let err = to_val(&eval(r#"["red"]"#), &ty("perms"), "p").unwrap_err().to_string();
    assert!(err.starts_with(r#"p[0]: unknown flag "red" (did you mean 'read'?)"#), "{err}");
    let _ = round_trip("pair", r#"[7, "x"]"#);
    let err = to_val(&eval("[7]"), &ty("pair"), "pair").unwrap_err().to_string();
    assert_eq!(err, "pair: expected 2 elements, got 1");
    let (_, back) = round_trip("bytes", "blob(3, 0x41)");
    assert!(back.is_blob());
    assert_eq!(
        to_val(&eval(r#""AB""#), &ty("bytes"), "b").expect("a string is bytes"),
        Val::List(vec![Val::U8(65), Val::U8(66)])
    );
    let _ = round_trip("opt", "()");
    let _ = round_trip("opt", r#""some""#);
    let _ = round_trip("res-ok", "#{ok: 5}");
    let _ = round_trip("res-ok", r#"#{err: "no"}"#);
    let _ = round_trip("unit-res", "#{ok: ()}");
}

#[test]
fn resources_are_refused_with_a_clear_message() {
    let err = to_val(&eval("1"), &ty("handle"), "handle").unwrap_err().to_string();
    assert!(err.starts_with("handle: resource values are not supported across the workflow boundary"), "{err}");
}

#[test]
fn untyped_from_val_converts_by_value() {
    let val = Val::Record(vec![
        ("has-cloudinit-drive".into(), Val::Bool(true)),
        ("lock".into(), Val::Option(None)),
        ("data".into(), Val::List(vec![Val::U8(1)])),
    ]);
    let map = from_val(&val);
    let map = map.as_map_ref().expect("a map");
    assert_eq!(map["has_cloudinit_drive"].as_bool(), Ok(true));
    assert!(map["lock"].is_unit());
    assert!(map["data"].is_blob());
}
