//! Admission: what a compiled component imports and exports, checked against
//! its manifest, the WIT version this host speaks and the operator's grants —
//! before anything is instantiated.
//!
//! Refusals, each naming the interface and what to do:
//! - an import of `cradle:host/*` at another version (built against another WIT);
//! - an import of a capability the manifest does not declare (the manifest lies);
//! - an import of a capability the operator did not grant;
//! - an import of anything that is neither WASI nor cradle;
//! - for a backend (`[plugins.NAME] kind = "backend"`, the default): a missing
//!   `cradle:host/lifecycle@0.1.0` export, and (at load, once linked)
//!   lifecycle functions whose names or types differ from wit/backend.wit
//!   ([`AdmissionError::Signature`]);
//! - for a backend that also exports the optional `maintenance` interface
//!   (wit/maintenance.wit, world `maintainer`): one of another WIT version,
//!   and (at load) functions whose names or types differ from the WIT
//!   ([`AdmissionError::MaintenanceSignature`]). Its functions join the
//!   backend's exports, called by name (`backend.plan_update(..)`);
//! - for an integration plugin (`kind = "integration"`): an export that is
//!   not a `cradle:host/*@0.1.0` interface, a `lifecycle` or `maintenance`
//!   export (a backend's: [`BACKEND_INTERFACES`]), no export at all, or one function name in two exported interfaces (calls
//!   go by name). Its functions are whatever its interfaces declare: cradle
//!   calls them by name from workflows (`cradle::plugin("ROLE")`), with the
//!   same grants, policy checks, limits and budgets as a backend's.

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::manifest::Manifest;
use crate::builtin::catalogue::PluginKind;
use crate::caps::Grants;
use crate::caps::{Capability, WIT_PACKAGE, WIT_VERSION};
use crate::workflow::ExportSig;

/// The export every backend provides.
pub fn lifecycle_export() -> String {
    format!("{WIT_PACKAGE}/lifecycle@{WIT_VERSION}")
}

/// The export a backend may add for reviewed maintenance.
pub fn maintenance_export() -> String {
    format!("{WIT_PACKAGE}/maintenance@{WIT_VERSION}")
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
        "plugin `{plugin}` does not export `{expected}`: a backend must implement the lifecycle interface of wit/backend.wit{}",
        integration_hint(plugin, exports)
    )]
    NoLifecycle {
        /// The plugin.
        plugin: String,
        /// The expected export.
        expected: String,
        /// The `cradle:host` interfaces it exports instead.
        exports: Vec<String>,
    },
    /// Declared an integration plugin but exports a backend's interface
    /// (`lifecycle` or `maintenance`).
    #[error(
        "plugin `{plugin}` is declared kind = \"integration\" but exports `{found}`, a backend's interface: remove kind from [plugins.{plugin}] to use it as a backend"
    )]
    LifecycleInIntegration {
        /// The plugin.
        plugin: String,
        /// The backend's export.
        found: String,
    },
    /// An integration plugin's export is not a cradle interface.
    #[error(
        "plugin `{plugin}` exports `{export}`: an integration plugin exports {WIT_PACKAGE}/NAME@{WIT_VERSION} interfaces only"
    )]
    ForeignExport {
        /// The plugin.
        plugin: String,
        /// The export.
        export: String,
    },
    /// An integration plugin exports nothing cradle can call.
    #[error(
        "plugin `{plugin}` is declared kind = \"integration\" but exports no {WIT_PACKAGE}@{WIT_VERSION} interface: build it for a world that exports one (e.g. wit/pipeline.wit's)"
    )]
    NoIntegrationExport {
        /// The plugin.
        plugin: String,
    },
    /// Two exported interfaces of an integration plugin have a function of one name.
    #[error(
        "plugin `{plugin}` exports `{func}` from both `{first}` and `{second}`: workflows call an integration plugin's functions by name, so each name must be unique"
    )]
    DuplicateFunction {
        /// The plugin.
        plugin: String,
        /// The function name.
        func: String,
        /// One interface.
        first: String,
        /// The other.
        second: String,
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
    /// Exports the optional maintenance interface with other functions or
    /// types than the host's wit/maintenance.wit.
    #[error(
        "plugin `{plugin}` exports the maintenance interface, but not as wit/maintenance.wit of {WIT_PACKAGE}@{WIT_VERSION} defines it: {message}; rebuild the plugin against this cradle's wit/ (or build it for world `backend` if it does not support maintenance)"
    )]
    MaintenanceSignature {
        /// The plugin.
        plugin: String,
        /// wasmtime's account of the first difference.
        message: String,
    },
}

fn integration_hint(plugin: &str, exports: &[String]) -> String {
    if exports.is_empty() {
        String::new()
    } else {
        format!(
            " (it exports {}: if it is an integration plugin, set kind = \"integration\" in [plugins.{plugin}])",
            exports.join(", ")
        )
    }
}

/// What an admitted component imports and exports.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// What it was admitted as.
    pub kind: PluginKind,
    /// Every import name, for `cradle plugins inspect`.
    pub imports: Vec<String>,
    /// The capabilities it imports.
    pub capabilities: Vec<Capability>,
    /// The `cradle:host` interfaces whose functions are [`Admitted::exports`]:
    /// `lifecycle` for a backend, its own interfaces for an integration plugin.
    pub interfaces: Vec<String>,
    /// The functions it exports from those interfaces.
    pub exports: Vec<ExportSig>,
}

/// Split `cradle:host/proxmox@0.1.0` into (`proxmox`, `0.1.0`).
fn cradle_interface(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(WIT_PACKAGE)?.strip_prefix('/')?;
    Some(rest.split_once('@').unwrap_or((rest, "")))
}

/// Inspect imports and exports as a plugin of `kind`, without checking grants.
pub fn inspect(
    engine: &Engine,
    component: &Component,
    plugin: &str,
    kind: PluginKind,
) -> Result<Admitted, AdmissionError> {
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
    let (interfaces, exports) = match kind {
        PluginKind::Backend => backend_exports(engine, &ty, plugin)?,
        PluginKind::Integration => integration_exports(engine, &ty, plugin)?,
    };
    Ok(Admitted { kind, imports, capabilities, interfaces, exports })
}

/// The functions of an exported interface instance.
fn functions(engine: &Engine, item: &ComponentItem) -> Vec<ExportSig> {
    let ComponentItem::ComponentInstance(inst) = item else { return Vec::new() };
    inst.exports(engine)
        .filter_map(|(fname, fitem)| match fitem.ty {
            ComponentItem::ComponentFunc(f) => Some(ExportSig::from_func(fname, &f)),
            _ => None,
        })
        .collect()
}

type Exports = (Vec<String>, Vec<ExportSig>);

/// A backend's `lifecycle` functions, then its optional `maintenance` ones;
/// other exports are not called.
fn backend_exports(
    engine: &Engine,
    ty: &wasmtime::component::types::Component,
    plugin: &str,
) -> Result<Exports, AdmissionError> {
    let expected = lifecycle_export();
    let mut others = Vec::new();
    let mut lifecycle = None;
    let mut maintenance = None;
    for (name, item) in ty.exports(engine) {
        match cradle_interface(name) {
            Some(("lifecycle" | "maintenance", version)) if version != WIT_VERSION => {
                return Err(AdmissionError::WitVersion { plugin: plugin.into(), found: name.into() });
            }
            Some(("lifecycle", _)) => lifecycle = Some(functions(engine, &item.ty)),
            Some(("maintenance", _)) => maintenance = Some(functions(engine, &item.ty)),
            Some(_) => others.push(name.to_string()),
            None => {}
        }
    }
    let Some(mut exports) = lifecycle else {
        return Err(AdmissionError::NoLifecycle { plugin: plugin.into(), expected, exports: others });
    };
    let mut interfaces = vec![expected];
    if let Some(functions) = maintenance {
        // Names cannot collide with lifecycle's (the load-time shape check
        // admits exactly `plan-update` and `apply-update`).
        interfaces.push(maintenance_export());
        exports.extend(functions);
    }
    Ok((interfaces, exports))
}

/// The interfaces only a backend may export: an integration plugin exporting
/// one is a backend in disguise (its `plan-update`/`apply-update` would be
/// callable by name through `cradle::plugin`, outside the maintenance
/// workflow's lock and digest checks), so it is refused.
pub const BACKEND_INTERFACES: [&str; 2] = ["lifecycle", "maintenance"];

/// An integration plugin's interfaces: every export a cradle interface of
/// this WIT version other than a backend's ([`BACKEND_INTERFACES`]), each
/// function name once.
fn integration_exports(
    engine: &Engine,
    ty: &wasmtime::component::types::Component,
    plugin: &str,
) -> Result<Exports, AdmissionError> {
    let mut interfaces = Vec::new();
    let mut exports: Vec<ExportSig> = Vec::new();
    let mut owner: Vec<String> = Vec::new();
    for (name, item) in ty.exports(engine) {
        let Some((iface, version)) = cradle_interface(name) else {
            return Err(AdmissionError::ForeignExport { plugin: plugin.into(), export: name.into() });
        };
        if version != WIT_VERSION {
            return Err(AdmissionError::WitVersion { plugin: plugin.into(), found: name.into() });
        }
        if BACKEND_INTERFACES.contains(&iface) {
            return Err(AdmissionError::LifecycleInIntegration { plugin: plugin.into(), found: name.into() });
        }
        for sig in functions(engine, &item.ty) {
            if let Some(i) = exports.iter().position(|e| e.name == sig.name) {
                return Err(AdmissionError::DuplicateFunction {
                    plugin: plugin.into(),
                    func: sig.name,
                    first: owner[i].clone(),
                    second: name.into(),
                });
            }
            owner.push(name.to_string());
            exports.push(sig);
        }
        interfaces.push(name.to_string());
    }
    if interfaces.is_empty() {
        return Err(AdmissionError::NoIntegrationExport { plugin: plugin.into() });
    }
    Ok((interfaces, exports))
}

/// Inspect, then check the imports against the manifest and the grants.
/// `plugin` is the name the operator gave it in cradle.toml (used in messages).
pub fn admit(
    engine: &Engine,
    component: &Component,
    plugin: &str,
    kind: PluginKind,
    manifest: &Manifest,
    grants: &Grants,
) -> Result<Admitted, AdmissionError> {
    let admitted = inspect(engine, component, plugin, kind)?;
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

    /// A component exporting an (empty) instance under each of `exports`.
    fn exporting(imports: &[&str], exports: &[&str]) -> (Engine, Component) {
        let engine = Engine::default();
        let mut text = String::from("(component\n");
        for i in imports {
            text.push_str(&format!("  (import \"{i}\" (instance))\n"));
        }
        for (n, e) in exports.iter().enumerate() {
            text.push_str(&format!("  (instance $i{n})\n  (export \"{e}\" (instance $i{n}))\n"));
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
        let err = admit(&e, &c, "old", PluginKind::Backend, &manifest(&[Capability::Log]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("cradle:host/log@0.0.9") && err.contains("cradle:host@0.1.0") && err.contains("rebuild"),
            "{err}"
        );
    }

    #[test]
    fn a_lifecycle_export_of_another_wit_version_is_refused() {
        let (e, c) = component(&[], "cradle:host/lifecycle@0.2.0");
        let err = admit(&e, &c, "new", PluginKind::Backend, &manifest(&[]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("cradle:host/lifecycle@0.2.0"), "{err}");
    }

    #[test]
    fn an_import_missing_from_the_manifest_is_refused() {
        let (e, c) = component(&["cradle:host/proxmox@0.1.0"], LIFE);
        let g = grants("[proxmox]\nvmids = \"100-199\"");
        let err = admit(&e, &c, "liar", PluginKind::Backend, &manifest(&[Capability::Log]), &g)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("manifest does not declare `proxmox`"), "{err}");
    }

    #[test]
    fn an_ungranted_import_is_refused_naming_the_section_to_add() {
        let (e, c) = component(&["cradle:host/ssh@0.1.0"], LIFE);
        let err = admit(&e, &c, "direct", PluginKind::Backend, &manifest(&[Capability::Ssh]), &Grants::default())
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
        let err = admit(&e, &c, "x", PluginKind::Backend, &manifest(&[]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("acme:evil/backdoor") && err.contains("cradle does not provide"), "{err}");
    }

    #[test]
    fn a_component_without_the_lifecycle_export_is_refused() {
        let (e, c) = component(&[], "");
        let err = admit(&e, &c, "x", PluginKind::Backend, &manifest(&[]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("does not export `cradle:host/lifecycle@0.1.0`"), "{err}");
    }

    #[test]
    fn declared_granted_imports_and_wasi_are_admitted() {
        let (e, c) =
            component(&["wasi:cli/environment@0.2.6", "cradle:host/types@0.1.0", "cradle:host/log@0.1.0"], LIFE);
        let ok = admit(&e, &c, "x", PluginKind::Backend, &manifest(&[Capability::Log]), &Grants::default())
            .expect("admitted");
        assert_eq!(ok.capabilities, vec![Capability::Log]);
    }

    #[test]
    fn a_backend_exporting_maintenance_is_admitted_with_its_functions_after_the_lifecycle() {
        let (e, c) = exporting(&[], &[LIFE, "cradle:host/maintenance@0.1.0"]);
        let ok = admit(&e, &c, "tf", PluginKind::Backend, &manifest(&[]), &Grants::default()).expect("admitted");
        assert_eq!(ok.interfaces, vec![LIFE.to_string(), "cradle:host/maintenance@0.1.0".to_string()]);
        let (e, c) = exporting(&[], &[LIFE]);
        let ok = admit(&e, &c, "d", PluginKind::Backend, &manifest(&[]), &Grants::default()).expect("admitted");
        assert_eq!(ok.interfaces, vec![LIFE.to_string()], "maintenance is optional");
    }

    #[test]
    fn a_maintenance_export_of_another_wit_version_is_refused() {
        let (e, c) = exporting(&[], &[LIFE, "cradle:host/maintenance@0.2.0"]);
        let err = admit(&e, &c, "tf", PluginKind::Backend, &manifest(&[]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("cradle:host/maintenance@0.2.0") && err.contains("rebuild"), "{err}");
    }

    const PIPELINE: &str = "cradle:host/pipeline@0.1.0";

    #[test]
    fn an_integration_plugin_exporting_cradle_interfaces_is_admitted_as_one() {
        let (e, c) = exporting(&["cradle:host/log@0.1.0"], &[PIPELINE, "cradle:host/extra@0.1.0"]);
        let ok = admit(&e, &c, "nb", PluginKind::Integration, &manifest(&[Capability::Log]), &Grants::default())
            .expect("admitted");
        assert_eq!(ok.kind, PluginKind::Integration);
        assert_eq!(ok.interfaces, vec![PIPELINE.to_string(), "cradle:host/extra@0.1.0".to_string()]);
    }

    #[test]
    fn an_integration_plugin_has_its_imports_checked_as_a_backend_does() {
        let (e, c) = exporting(&["cradle:host/ssh@0.1.0"], &[PIPELINE]);
        let err = admit(&e, &c, "nb", PluginKind::Integration, &manifest(&[Capability::Ssh]), &Grants::default())
            .expect_err("not granted")
            .to_string();
        assert!(err.contains("[plugins.nb.grants.ssh]"), "{err}");
    }

    #[test]
    fn an_integration_plugin_exporting_the_lifecycle_is_refused_as_a_backend_in_disguise() {
        let (e, c) = exporting(&[], &[PIPELINE, LIFE]);
        let err = admit(&e, &c, "nb", PluginKind::Integration, &manifest(&[]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("kind = \"integration\" but exports `cradle:host/lifecycle@0.1.0`"), "{err}");
    }

    #[test]
    fn an_integration_plugin_exporting_maintenance_is_refused_as_a_backend_in_disguise() {
        let (e, c) = exporting(&[], &[PIPELINE, "cradle:host/maintenance@0.1.0"]);
        let err = admit(&e, &c, "nb", PluginKind::Integration, &manifest(&[]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("kind = \"integration\" but exports `cradle:host/maintenance@0.1.0`, a backend's interface")
                && err.contains("remove kind from [plugins.nb]"),
            "{err}"
        );
    }

    #[test]
    fn an_integration_plugin_exporting_a_foreign_or_other_version_interface_is_refused() {
        let (e, c) = exporting(&[], &[PIPELINE, "acme:evil/pipeline@0.1.0"]);
        let err = admit(&e, &c, "nb", PluginKind::Integration, &manifest(&[]), &Grants::default())
            .expect_err("foreign")
            .to_string();
        assert!(err.contains("exports `acme:evil/pipeline@0.1.0`"), "{err}");
        let (e, c) = exporting(&[], &["cradle:host/pipeline@0.2.0"]);
        let err = admit(&e, &c, "nb", PluginKind::Integration, &manifest(&[]), &Grants::default())
            .expect_err("version")
            .to_string();
        assert!(err.contains("cradle:host/pipeline@0.2.0") && err.contains("rebuild"), "{err}");
    }

    #[test]
    fn an_integration_plugin_exporting_nothing_is_refused() {
        let (e, c) = exporting(&[], &[]);
        let err = admit(&e, &c, "nb", PluginKind::Integration, &manifest(&[]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("exports no cradle:host@0.1.0 interface"), "{err}");
    }

    #[test]
    fn a_backend_without_lifecycle_that_exports_cradle_interfaces_is_told_about_kind_integration() {
        let (e, c) = exporting(&[], &[PIPELINE]);
        let err = admit(&e, &c, "nb", PluginKind::Backend, &manifest(&[]), &Grants::default())
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("does not export `cradle:host/lifecycle@0.1.0`")
                && err.contains("set kind = \"integration\" in [plugins.nb]"),
            "{err}"
        );
    }
}
