//! Admission: what a compiled component imports and exports, checked against
//! its manifest, the WIT version this host speaks and the operator's grants —
//! before anything is instantiated.
//!
//! Refusals, each naming the interface and what to do:
//! - an import of `cradle:host/*` at another version (built against another WIT);
//! - an import of a capability the manifest does not declare (the manifest lies);
//! - an import of a capability the operator did not grant;
//! - an import of anything that is neither WASI nor cradle;
//! - a missing `cradle:host/lifecycle@0.1.0` export.

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::manifest::Manifest;
use crate::caps::grants::Grants;
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
