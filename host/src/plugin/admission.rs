//! Admission: what a compiled component imports and exports, checked against
//! its manifest, the WIT version this host speaks and the operator's grants —
//! before anything is instantiated.
//!
//! Refusals, each naming the interface and what to do:
//! - an import of `cradle:host/*` at another version (built against another WIT);
//! - an import of a capability the manifest does not declare (the manifest lies);
//! - an import of a capability the operator did not grant;
//! - an import of anything that is neither WASI nor cradle;
//! - a missing `cradle:host/lifecycle@0.1.0` export;
//! - (at load, once linked) lifecycle functions whose names or types differ
//!   from wit/backend.wit ([`AdmissionError::Signature`]).

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::manifest::Manifest;
use crate::caps::Grants;
use crate::caps::{Capability, WIT_PACKAGE, WIT_VERSION};
use crate::workflow::ExportSig;

/// The export every backend provides.
pub fn lifecycle_export() -> String {
    format!("{WIT_PACKAGE}/lifecycle@{WIT_VERSION}")
}

/// Why a component was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// Built against another version of cradle's WIT.
    #[error(
        "plugin `{plugin}` was built against {found}, but this cradle speaks {WIT_PACKAGE}@{WIT_VERSION}: rebuild the plugin against this cradle's wit/ folder"
    )]
    WitVersion {
        /// The plugin.
        plugin: String,
        /// The interface it imports or exports.
        found: String,
    },
    /// Imports a capability its manifest does not declare.
    #[error(
        "plugin `{plugin}` imports `{interface}` but its manifest does not declare `{capability}`: the plugin is inconsistent; add it to `needs` in its manifest and rebuild"
    )]
    Undeclared {
        /// The plugin.
        plugin: String,
        /// The import.
        interface: String,
        /// The capability.
        capability: Capability,
    },
    /// Imports a capability that was not granted.
    #[error(
        "plugin `{plugin}` imports `{interface}`, which is not granted: add [plugins.{plugin}.grants.{capability}] to cradle.toml if it should have it"
    )]
    NotGranted {
        /// The plugin.
        plugin: String,
        /// The import.
        interface: String,
        /// The capability.
        capability: Capability,
    },
    /// Imports something cradle does not provide.
    #[error(
        "plugin `{plugin}` imports `{interface}`, which cradle does not provide (plugins may import WASI and {WIT_PACKAGE}@{WIT_VERSION} interfaces only)"
    )]
    Unknown {
        /// The plugin.
        plugin: String,
        /// The import.
        interface: String,
    },
    /// Does not export the lifecycle interface.
    #[error(
        "plugin `{plugin}` does not export `{expected}`: a backend must implement the lifecycle interface of wit/backend.wit"
    )]
    NoLifecycle {
        /// The plugin.
        plugin: String,
        /// The expected export.
        expected: String,
    },
    /// Exports the lifecycle interface with other functions or types than the
    /// host's wit/backend.wit.
    #[error(
        "plugin `{plugin}` exports the lifecycle interface, but not as wit/backend.wit of {WIT_PACKAGE}@{WIT_VERSION} defines it: {message}; rebuild the plugin against this cradle's wit/"
    )]
    Signature {
        /// The plugin.
        plugin: String,
        /// wasmtime's account of the first difference.
        message: String,
    },
}

/// What an admitted component imports and exports.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// Every import name, for `cradle plugins inspect`.
    pub imports: Vec<String>,
    /// The capabilities it imports.
    pub capabilities: Vec<Capability>,
    /// The lifecycle functions it exports.
    pub exports: Vec<ExportSig>,
}

/// Split `cradle:host/proxmox@0.1.0` into (`proxmox`, `0.1.0`).
fn cradle_interface(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(WIT_PACKAGE)?.strip_prefix('/')?;
    Some(rest.split_once('@').unwrap_or((rest, "")))
}

/// Inspect imports and exports without checking grants.
pub fn inspect(engine: &Engine, component: &Component, plugin: &str) -> Result<Admitted, AdmissionError> {
    let ty = component.component_type();
    let mut imports = Vec::new();
    let mut capabilities = Vec::new();
    for (name, _) in ty.imports(engine) {
        imports.push(name.to_string());
        if name.starts_with("wasi:") {
            continue;
        }
        let Some((iface, version)) = cradle_interface(name) else {
            return Err(AdmissionError::Unknown { plugin: plugin.into(), interface: name.into() });
        };
        if version != WIT_VERSION {
            return Err(AdmissionError::WitVersion { plugin: plugin.into(), found: name.into() });
        }
        if iface == "types" {
            continue;
        }
        match Capability::from_name(iface) {
            Some(cap) => capabilities.push(cap),
            None => return Err(AdmissionError::Unknown { plugin: plugin.into(), interface: name.into() }),
        }
    }
    let expected = lifecycle_export();
    let mut exports = Vec::new();
    let mut found = false;
    for (name, item) in ty.exports(engine) {
        if let Some(("lifecycle", version)) = cradle_interface(name) {
            if version != WIT_VERSION {
                return Err(AdmissionError::WitVersion { plugin: plugin.into(), found: name.into() });
            }
            found = true;
            if let ComponentItem::ComponentInstance(inst) = item.ty {
                for (fname, fitem) in inst.exports(engine) {
                    if let ComponentItem::ComponentFunc(f) = fitem.ty {
                        exports.push(ExportSig::from_func(fname, &f));
                    }
                }
            }
        }
    }
    if !found {
        return Err(AdmissionError::NoLifecycle { plugin: plugin.into(), expected });
    }
    Ok(Admitted { imports, capabilities, exports })
}

/// Inspect, then check the imports against the manifest and the grants.
/// `plugin` is the name the operator gave it in cradle.toml (used in messages).
pub fn admit(
    engine: &Engine,
    component: &Component,
    plugin: &str,
    manifest: &Manifest,
    grants: &Grants,
) -> Result<Admitted, AdmissionError> {
    let admitted = inspect(engine, component, plugin)?;
    for cap in &admitted.capabilities {
        let interface = cap.interface();
        if !manifest.needs.contains(cap) {
            return Err(AdmissionError::Undeclared { plugin: plugin.into(), interface, capability: *cap });
        }
        if !grants.allows(*cap) {
            return Err(AdmissionError::NotGranted { plugin: plugin.into(), interface, capability: *cap });
        }
    }
    Ok(admitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(imports: &[&str], export_lifecycle: &str) -> (Engine, Component) {
        let engine = Engine::default();
        let mut text = String::from("(component\n");
        for i in imports {
            text.push_str(&format!("  (import \"{i}\" (instance))\n"));
        }
        text.push_str("  (instance $life)\n");
        if !export_lifecycle.is_empty() {
            text.push_str(&format!("  (export \"{export_lifecycle}\" (instance $life))\n"));
        }
        text.push(')');
        let component = Component::new(&engine, text).expect("component");
        (engine, component)
    }

    fn manifest(needs: &[Capability]) -> Manifest {
        Manifest { name: "p".into(), version: "1".into(), description: String::new(), needs: needs.to_vec(), wit: None }
    }

    fn grants(text: &str) -> Grants {
        toml::from_str(text).expect("grants")
    }

    const LIFE: &str = "cradle:host/lifecycle@0.1.0";

    #[test]
    fn an_import_of_another_wit_version_is_refused_naming_both_versions() {
        let (e, c) = component(&["cradle:host/log@0.0.9"], LIFE);
        let err =
            admit(&e, &c, "old", &manifest(&[Capability::Log]), &Grants::default()).expect_err("refused").to_string();
        assert!(
            err.contains("cradle:host/log@0.0.9") && err.contains("cradle:host@0.1.0") && err.contains("rebuild"),
            "{err}"
        );
    }

    #[test]
    fn a_lifecycle_export_of_another_wit_version_is_refused() {
        let (e, c) = component(&[], "cradle:host/lifecycle@0.2.0");
        let err = admit(&e, &c, "new", &manifest(&[]), &Grants::default()).expect_err("refused").to_string();
        assert!(err.contains("cradle:host/lifecycle@0.2.0"), "{err}");
    }

    #[test]
    fn an_import_missing_from_the_manifest_is_refused() {
        let (e, c) = component(&["cradle:host/proxmox@0.1.0"], LIFE);
        let g = grants("[proxmox]\nvmids = \"100-199\"");
        let err = admit(&e, &c, "liar", &manifest(&[Capability::Log]), &g).expect_err("refused").to_string();
        assert!(err.contains("manifest does not declare `proxmox`"), "{err}");
    }

    #[test]
    fn an_ungranted_import_is_refused_naming_the_section_to_add() {
        let (e, c) = component(&["cradle:host/ssh@0.1.0"], LIFE);
        let err = admit(&e, &c, "direct", &manifest(&[Capability::Ssh]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("`cradle:host/ssh@0.1.0`, which is not granted")
                && err.contains("[plugins.direct.grants.ssh]"),
            "{err}"
        );
    }

    #[test]
    fn a_foreign_import_is_refused() {
        let (e, c) = component(&["acme:evil/backdoor"], LIFE);
        let err = admit(&e, &c, "x", &manifest(&[]), &Grants::default()).expect_err("refused").to_string();
        assert!(err.contains("acme:evil/backdoor") && err.contains("cradle does not provide"), "{err}");
    }

    #[test]
    fn a_component_without_the_lifecycle_export_is_refused() {
        let (e, c) = component(&[], "");
        let err = admit(&e, &c, "x", &manifest(&[]), &Grants::default()).expect_err("refused").to_string();
        assert!(err.contains("does not export `cradle:host/lifecycle@0.1.0`"), "{err}");
    }

    #[test]
    fn declared_granted_imports_and_wasi_are_admitted() {
        let (e, c) =
            component(&["wasi:cli/environment@0.2.6", "cradle:host/types@0.1.0", "cradle:host/log@0.1.0"], LIFE);
        let ok = admit(&e, &c, "x", &manifest(&[Capability::Log]), &Grants::default()).expect("admitted");
        assert_eq!(ok.capabilities, vec![Capability::Log]);
    }
}
