//! The typed `lifecycle` path against the by-name bridge, on the real types:
//! the export signatures of the built-in `sample` plugin, built against
//! `wit/`. Scripts must see the same values either way.

use std::collections::BTreeMap;

use rhai::{Dynamic, Engine as Rhai};
use wasmtime::component::{Type, Val};

use super::*;
use crate::workflow::{ExportSig, from_val_typed, to_val};

/// The `lifecycle` signatures of a real plugin, by kebab name.
fn sigs() -> BTreeMap<String, ExportSig> {
    let dir = tempfile::tempdir().expect("tmp");
    let host = super::super::PluginHost::new(&dir.path().join("cache")).expect("host");
    let p = crate::builtin::plugin("sample").expect("the sample plugin is built in");
    let cfg = crate::config::PluginConfig::builtin(p);
    let plugin = host
        .load_source("sample", &super::super::PluginSource::Builtin("sample"), cfg.grants.clone(), cfg.limits.resolve())
        .expect("the sample plugin loads");
    plugin.admitted.exports.iter().map(|e| (e.name.clone(), e.clone())).collect()
}

fn param(sigs: &BTreeMap<String, ExportSig>, func: &str, i: usize) -> Type {
    sigs[func].params[i].1.clone()
}

/// The `ok` type of an export's `result`.
fn ok_type(sigs: &BTreeMap<String, ExportSig>, func: &str) -> Type {
    match &sigs[func].result {
        Some(Type::Result(r)) => r.ok().expect("an ok payload"),
        other => panic!("{func} returns {other:?}"),
    }
}

fn eval(script: &str) -> Dynamic {
    Rhai::new().eval::<Dynamic>(script).expect("the test expression evaluates")
}

/// What the by-name path hands a backend and a script: the value checked
/// and converted back.
fn bridged(value: &Dynamic, ty: &Type, path: &str) -> Dynamic {
    let val = to_val(value, ty, path).expect("the bridge accepts the value");
    from_val_typed(&val, ty, path).expect("and converts it back")
}

fn shown(value: &Dynamic) -> String {
    format!("{value:?}")
}

/// `vm.spec` as the provision workflow passes it, and as a hand-written
/// workflow may (kebab keys, options left out).
const SPECS: [&str; 2] = [
    r#"#{name: "test-0", vmid: 100, node: "pve1", template: "debian-12", storage: "local-lvm",
        cores: 2, memory_mib: 2048, disk_gib: 20,
        disks: [#{slot: "scsi1", storage: "local-lvm", size_gib: 10}],
        nics: [#{slot: "net0", bridge: "vmbr0", vlan: 20, address: "10.0.20.5/24", gateway: "10.0.20.1",
                 guest_interface: "ens18"}],
        startup_order: 3, tags: ["cradle", "test"], environment: "test", allow_replacement: false}"#,
    r#"#{name: "test-1", vmid: 4000000000, node: "pve2", template: "t", storage: "s", cores: 1,
        "memory-mib": 512, disks: [], nics: [#{slot: "net0", bridge: "vmbr0", "guest-interface": "ens18"}],
        tags: [], environment: "prod", "allow-replacement": true}"#,
];

#[test]
fn typed_vm_spec_snippets_and_vm_state_arguments_are_the_bridges_maps() {
    let sigs = sigs();
    let snippets = eval(r#"#{user: "local:snippets/test-0-user.yaml", network: "local:snippets/test-0-net.yaml"}"#);
    let state = eval(
        r#"#{name: "test-0", vmid: 100, node: "pve1", status: "stopped", lock: "clone", has_cloudinit_drive: true}"#,
    );
    for spec in SPECS {
        let vm = bridged(&eval(spec), &param(&sigs, "create", 0), "vm");
        let snippets = bridged(&snippets, &param(&sigs, "create", 1), "snippets");
        let found = bridged(&state, &param(&sigs, "reconcile", 1), "found");
        let create =
            LifecycleCall::parse("create", &[vm.clone(), snippets.clone()]).expect("lifecycle").expect("typed");
        let LifecycleCall::Create(typed_vm, typed_snippets) = &create else { panic!("{create:?}") };
        assert_eq!(shown(&to_dynamic(typed_vm).expect("vm")), shown(&vm), "{spec}");
        assert_eq!(shown(&to_dynamic(typed_snippets).expect("snippets")), shown(&snippets));
        let reconcile = LifecycleCall::parse("reconcile", &[vm.clone(), found.clone()]).expect("lifecycle");
        let LifecycleCall::Reconcile(_, typed_found) = reconcile.expect("typed") else { panic!("not reconcile") };
        assert_eq!(shown(&to_dynamic(&typed_found).expect("state")), shown(&found));
        // The VM binding reads the typed record.
        let bound = super::super::backend::vm_binding(create.vm());
        assert_eq!(
            (bound.name.as_str(), i64::from(bound.vmid)),
            (
                vm.as_map_ref().expect("map")["name"].to_string().as_str(),
                vm.as_map_ref().expect("map")["vmid"].as_int().expect("int")
            )
        );
    }
    let none = LifecycleCall::parse(
        "check-ownership",
        &[bridged(&eval(SPECS[0]), &param(&sigs, "check-ownership", 0), "vm"), Dynamic::UNIT],
    );
    assert!(matches!(none, Some(Ok(LifecycleCall::CheckOwnership(_, None)))), "{none:?}");
}

fn state_val(lock: Option<&str>) -> (VmState, Val) {
    let typed = VmState {
        name: "test-0".into(),
        vmid: 100,
        node: "pve1".into(),
        status: "running".into(),
        lock: lock.map(str::to_string),
        has_cloudinit_drive: true,
    };
    let val = Val::Record(vec![
        ("name".into(), Val::String("test-0".into())),
        ("vmid".into(), Val::U32(100)),
        ("node".into(), Val::String("pve1".into())),
        ("status".into(), Val::String("running".into())),
        ("lock".into(), Val::Option(lock.map(|l| Box::new(Val::String(l.into()))))),
        ("has-cloudinit-drive".into(), Val::Bool(true)),
    ]);
    (typed, val)
}

#[test]
fn typed_results_give_scripts_the_same_values_as_the_bridge() {
    let sigs = sigs();
    for lock in [None, Some("clone")] {
        let (typed, val) = state_val(lock);
        let old = from_val_typed(&Val::Option(Some(Box::new(val.clone()))), &ok_type(&sigs, "discover"), "ok");
        let new = Returned::Found(Some(typed.clone())).to_script().expect("converts");
        assert_eq!(shown(&new), shown(&old.expect("bridge")));
        let old = from_val_typed(&val, &ok_type(&sigs, "create"), "ok").expect("bridge");
        assert_eq!(shown(&Returned::Found(Some(typed)).to_script().expect("converts")), shown(&old));
    }
    let nothing = from_val_typed(&Val::Option(None), &ok_type(&sigs, "discover"), "ok").expect("bridge");
    assert_eq!(shown(&Returned::Found(None).to_script().expect("converts")), shown(&nothing));
    let lines = vec!["onboot: 0 -> 1".to_string()];
    let old = from_val_typed(&Val::List(vec![Val::String(lines[0].clone())]), &ok_type(&sigs, "reconcile"), "ok");
    assert_eq!(shown(&Returned::Lines(lines).to_script().expect("converts")), shown(&old.expect("bridge")));
    for (action, wit) in [
        (PlanAction::Create, "create"),
        (PlanAction::Update, "update"),
        (PlanAction::NoOp, "no-op"),
        (PlanAction::Replace, "replace"),
    ] {
        for plan_id in [None, Some("plan-1".to_string())] {
            let typed = PlanOutcome { action, summary: vec!["clone debian-12".into()], plan_id: plan_id.clone() };
            let val = Val::Record(vec![
                ("action".into(), Val::Enum(wit.into())),
                ("summary".into(), Val::List(vec![Val::String("clone debian-12".into())])),
                ("plan-id".into(), Val::Option(plan_id.map(|p| Box::new(Val::String(p))))),
            ]);
            let old = from_val_typed(&val, &ok_type(&sigs, "plan"), "ok").expect("bridge");
            assert_eq!(shown(&Returned::Plan(typed).to_script().expect("converts")), shown(&old), "{wit}");
        }
    }
}

#[test]
fn returned_errors_are_thrown_with_their_wit_case_names() {
    let sigs = sigs();
    let Some(Type::Result(result)) = &sigs["plan"].result else { panic!("plan returns a result") };
    let Some(Type::Variant(error)) = result.err() else { panic!("the error is a variant") };
    let cases: Vec<String> = error.cases().map(|c| c.name.to_string()).collect();
    for e in [
        WitError::Denied("d".into()),
        WitError::NotFound("n".into()),
        WitError::Conflict("c".into()),
        WitError::Invalid("i".into()),
        WitError::Transient("t".into()),
        WitError::Failed("f".into()),
    ] {
        let CallError::Returned { kind, message } = returned_error(e) else { panic!("returned") };
        assert!(cases.contains(&kind), "{kind} is not one of {cases:?}");
        assert_eq!(message.len(), 1);
    }
}

#[test]
fn only_lifecycle_functions_take_the_typed_path() {
    assert!(LifecycleCall::parse("extra-export", &[]).is_none());
    let err = LifecycleCall::parse("discover", &[eval("#{name: \"x\"}")]).expect("lifecycle").expect_err("no vmid");
    let CallError::Argument(msg) = err else { panic!("an argument error") };
    assert!(msg.starts_with("vm: ") && msg.contains("vmid"), "{msg}");
}
