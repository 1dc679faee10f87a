//! The optional `maintenance` export (wit/maintenance.wit) at load: admitted
//! with its functions when its shape is the WIT's, refused naming it when not.

use super::{PluginError, PluginHost, PluginSource};
use crate::caps::Grants;

fn host() -> (tempfile::TempDir, PluginHost) {
    let dir = tempfile::tempdir().expect("tmp");
    let host = PluginHost::new(&dir.path().join("cache")).expect("host");
    (dir, host)
}

fn builtin_exports(name: &'static str) -> Vec<String> {
    let (_dir, host) = host();
    let p = crate::builtin::plugin(name).expect("built in");
    let cfg = crate::config::PluginConfig::builtin(p);
    let plugin = host
        .load_source(name, &PluginSource::Builtin(name), cfg.grants.clone(), cfg.limits.resolve())
        .expect("the built-in plugin loads");
    plugin.admitted.exports.iter().map(|e| e.name.clone()).collect()
}

#[test]
fn the_terraform_backend_exports_maintenance_and_the_direct_backend_does_not() {
    let tf = builtin_exports("terraform");
    assert!(tf.iter().any(|e| e == "plan-update") && tf.iter().any(|e| e == "apply-update"), "{tf:?}");
    assert!(tf.iter().any(|e| e == "discover"), "and the lifecycle: {tf:?}");
    let direct = builtin_exports("direct");
    assert!(!direct.iter().any(|e| e == "plan-update"), "{direct:?}");
}

/// `wat` with a `cradle-manifest` custom section appended.
fn with_manifest(wat: &str) -> Vec<u8> {
    let mut wasm = wat::parse_str(wat).expect("wat");
    let name = b"cradle-manifest";
    let manifest = b"name = \"skew\"\nversion = \"1\"\n";
    let mut payload = vec![u8::try_from(name.len()).expect("short")];
    payload.extend_from_slice(name);
    payload.extend_from_slice(manifest);
    wasm.push(0);
    wasm.push(u8::try_from(payload.len()).expect("under 128 bytes"));
    wasm.extend_from_slice(&payload);
    wasm
}

#[test]
fn a_maintenance_export_whose_functions_differ_from_the_wit_is_refused_at_load_naming_it() {
    // The right interface name and version, but `plan-update` takes nothing
    // and returns a u32, and `apply-update` is missing.
    let wat = r#"(component
        (core module $m (func (export "f") (result i32) i32.const 0))
        (core instance $i (instantiate $m))
        (func $plan (result u32) (canon lift (core func $i "f")))
        (instance $life)
        (instance $maint (export "plan-update" (func $plan)))
        (export "cradle:host/lifecycle@0.1.0" (instance $life))
        (export "cradle:host/maintenance@0.1.0" (instance $maint))
    )"#;
    let (dir, host) = host();
    let path = dir.path().join("skew.wasm");
    std::fs::write(&path, with_manifest(wat)).expect("write");
    let err =
        host.load("skew", &path, Grants::default(), crate::plugin::limits::Limits::default()).expect_err("refused");
    assert!(matches!(err, PluginError::Admission(_)), "{err:?}");
    let err = err.to_string();
    assert!(err.contains("plugin `skew` exports the maintenance interface, but not as wit/maintenance.wit"), "{err}");
    assert!(err.contains("rebuild the plugin"), "{err}");
}
