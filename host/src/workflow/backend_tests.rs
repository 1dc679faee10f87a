//! Backend exports called from scripts through a fake [`Backend`]: argument
//! conversion, `ok` unwrapping, thrown errors, and wrong arguments.

use std::sync::{Arc, Mutex};

use rhai::Dynamic;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Val};

use super::engine_tests::{file, load_with};
use super::*;

const LIFECYCLE: &str = r#"(component
  (type $nic' (record (field "slot" string) (field "vlan" (option u16))))
  (import "nic" (type $nic (eq $nic')))
  (type $spec' (record (field "name" string) (field "vmid" u32) (field "memory-mib" u32) (field "nics" (list $nic))))
  (import "vm-spec" (type $spec (eq $spec')))
  (type $state' (record (field "name" string) (field "vmid" u32) (field "has-cloudinit-drive" bool)))
  (import "vm-state" (type $state (eq $state')))
  (type $error' (variant (case "denied" string) (case "not-found" string) (case "conflict" string) (case "failed" string)))
  (import "error" (type $error (eq $error')))
  (import "discover" (func (param "vm" $spec) (result (result (option $state) (error $error)))))
  (import "check-ownership" (func (param "vm" $spec) (param "found" (option $state)) (result (result (error $error)))))
)"#;

/// A backend whose `discover` finds the VM and whose `check-ownership` refuses it.
struct Fake {
    sigs: Vec<ExportSig>,
    calls: Mutex<Vec<(String, Vec<Val>)>>,
}

impl Fake {
    fn new() -> Arc<Fake> {
        let engine = wasmtime::Engine::default();
        let component = Component::new(&engine, LIFECYCLE).expect("valid WAT");
        let ty = component.component_type();
        let sigs = ty
            .imports(&engine)
            .filter_map(|(name, item)| match item.ty {
                ComponentItem::ComponentFunc(f) => Some(ExportSig::from_func(name, &f)),
                _ => None,
            })
            .collect();
        Arc::new(Fake { sigs, calls: Mutex::new(Vec::new()) })
    }
}

impl Backend for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    fn exports(&self) -> Vec<ExportSig> {
        self.sigs.clone()
    }
    fn call(&self, _run: &RunContext, func: &str, args: Vec<Val>) -> Result<Option<Val>, anyhow::Error> {
        self.calls.lock().expect("calls lock").push((func.to_string(), args));
        let boxed = |v: Val| Some(Box::new(v));
        Ok(Some(match func {
            "discover" => Val::Result(Ok(boxed(Val::Option(boxed(Val::Record(vec![
                ("name".into(), Val::String("test-0".into())),
                ("vmid".into(), Val::U32(100)),
                ("has-cloudinit-drive".into(), Val::Bool(true)),
            ])))))),
            _ => {
                Val::Result(Err(boxed(Val::Variant("conflict".into(), boxed(Val::String("owned by tf-other".into()))))))
            }
        }))
    }
}

fn backend_set(script: &str) -> (tempfile::TempDir, WorkflowSet, Arc<Fake>) {
    let fake = Fake::new();
    let opts = EngineOptions { backends: vec![fake.clone()], ..EngineOptions::default() };
    let (dir, set) = load_with(&[("w.rhai", script)], &opts);
    (dir, set.expect("loads"), fake)
}

fn call_with_backend(set: &WorkflowSet, fake: &Arc<Fake>) -> Result<Dynamic, WorkflowError> {
    let handle = Dynamic::from(BackendHandle::new(fake.clone()));
    set.call("w", "main", vec![handle], RunContext::detached())
}

const SPEC: &str = r#"#{name: "test-0", vmid: 100, memory_mib: 2048, nics: [#{slot: "net0", vlan: 20}]}"#;

#[test]
fn backend_exports_are_methods_converting_maps_to_records_and_unwrapping_ok() {
    let script = format!(
        "fn main(backend) {{\n  let found = backend.discover({SPEC});\n  `${{backend.name}} ${{found.name}} ${{found.has_cloudinit_drive}}`\n}}"
    );
    let (_dir, set, fake) = backend_set(&script);
    let out = call_with_backend(&set, &fake).expect("discover succeeds");
    assert_eq!(out.to_string(), "fake test-0 true");
    let calls = fake.calls.lock().expect("calls lock");
    let Val::Record(fields) = &calls[0].1[0] else { panic!("not a record: {:?}", calls[0]) };
    assert_eq!(calls[0].0, "discover");
    assert!(fields.contains(&("memory-mib".to_string(), Val::U32(2048))));
}

#[test]
fn an_error_result_is_thrown_as_kind_and_message_and_can_be_caught() {
    let script = format!(
        "fn main(backend) {{\n  let r = \"no error\";\n  try {{ backend.check_ownership({SPEC}, ()); }}\n  catch (e) {{ r = `${{e.kind}}: ${{e.message}}`; }}\n  r\n}}"
    );
    let (_dir, set, fake) = backend_set(&script);
    let out = call_with_backend(&set, &fake).expect("the error is caught");
    assert_eq!(out.to_string(), "conflict: owned by tf-other");
    let uncaught = format!("fn main(backend) {{\n  backend.check_ownership({SPEC}, ())\n}}");
    let (dir, set, fake) = backend_set(&uncaught);
    let err = call_with_backend(&set, &fake).expect_err("uncaught");
    assert_eq!(err.to_string(), format!("{}:2:11: conflict: owned by tf-other", file(&dir, "w.rhai")));
    assert!(matches!(err, WorkflowError::Script { kind: Some(k), .. } if k == "conflict"));
}

#[test]
fn wrong_argument_types_and_counts_are_reported_with_the_field_path() {
    let bad = SPEC.replace("vlan: 20", "vlan: \"x\"");
    let (_dir, set, fake) = backend_set(&format!("fn main(backend) {{ backend.discover({bad}) }}"));
    let text = call_with_backend(&set, &fake).expect_err("a mismatch").to_string();
    assert!(text.ends_with(r#"backend 'fake': discover: vm.nics[0].vlan: expected u16, got string "x""#), "{text}");
    let (_dir, set, fake) = backend_set("fn main(backend) { backend.check_ownership(1) }");
    let text = call_with_backend(&set, &fake).expect_err("wrong arity").to_string();
    assert!(
        text.ends_with(
            "check_ownership takes 2 argument(s), got 1: check_ownership(vm: record, found: option<record>)"
        ),
        "{text}"
    );
    assert!(fake.calls.lock().expect("calls lock").is_empty());
}
