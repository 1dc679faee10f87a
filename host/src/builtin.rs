//! What ships inside the `cradle` binary: the built-in workflows (the
//! workspace's `workflows/` tree) and the built-in plugins (the backends
//! `direct`, `sample`, `terraform`; the integration plugin `netbox`), so cradle
//! runs from any directory.
//!
//! Contract:
//! - [`WORKFLOWS`] holds every `*.rhai` of `workflows/` (including `lib/`) by
//!   relative path, embedded at build time by `build.rs`. A project uses them
//!   when it has no workflow directory; a project directory replaces them as a
//!   whole (see [`crate::workflow::WorkflowSource`]).
//! - [`PLUGINS`] holds each built-in component with its default grants and
//!   limits written as a `[plugins.NAME]` table body ([`BuiltinDefaults::config`],
//!   in `catalogue.rs`, which the config loader reads without the components),
//!   parsed by the same code as `cradle.toml` — so a built-in is granted
//!   exactly what that text says, checked by the same policy code, and
//!   `cradle init` writes the same text out for the operator to edit.
//! - Default grants are never destructive, except on the built-in simulated
//!   cluster ([`BuiltinDefaults::destructive_on_sim`]): an environment on a real
//!   cluster (`kind = "proxmox"`) gets destructive calls only when cradle.toml
//!   says `[plugins.NAME.grants.proxmox] destructive = true`.
//! - Built-in components go through the same manifest check, component cache
//!   and admission as `.wasm` files; only where the bytes come from differs.
//!
//! Failure modes: none at run time — a missing or unbuildable component fails
//! the build of cradle itself (see `build.rs`).

/// Every built-in workflow file: (path relative to the workflow directory, source).
pub static WORKFLOWS: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/builtin_workflows.rs"));

pub mod catalogue;

pub use catalogue::BuiltinDefaults;

/// A backend plugin compiled into the binary: its catalogue entry (name,
/// summary, default table; `p.name` reads through it) and its component.
#[derive(Debug)]
pub struct BuiltinPlugin {
    /// What the catalogue says of it.
    pub about: &'static BuiltinDefaults,
    /// The component.
    pub wasm: &'static [u8],
}

impl std::ops::Deref for BuiltinPlugin {
    type Target = BuiltinDefaults;

    fn deref(&self) -> &BuiltinDefaults {
        self.about
    }
}

/// The built-in plugins, in [`catalogue::CATALOGUE`] order.
pub static PLUGINS: &[BuiltinPlugin] = &[
    BuiltinPlugin { about: &catalogue::DIRECT, wasm: include_bytes!(concat!(env!("OUT_DIR"), "/direct.wasm")) },
    BuiltinPlugin { about: &catalogue::SAMPLE, wasm: include_bytes!(concat!(env!("OUT_DIR"), "/sample.wasm")) },
    BuiltinPlugin { about: &catalogue::TERRAFORM, wasm: include_bytes!(concat!(env!("OUT_DIR"), "/terraform.wasm")) },
    BuiltinPlugin { about: &catalogue::NETBOX, wasm: include_bytes!(concat!(env!("OUT_DIR"), "/netbox.wasm")) },
];

/// The built-in plugin `name`.
pub fn plugin(name: &str) -> Option<&'static BuiltinPlugin> {
    PLUGINS.iter().find(|p| p.name == name)
}

/// The built-in plugins' names, for messages.
pub fn plugin_names() -> String {
    catalogue::names()
}

/// The built-in workflow file at `rel` (`provision.rhai`, `lib/guest.rhai`).
pub fn workflow(rel: &str) -> Option<&'static str> {
    WORKFLOWS.iter().find(|(path, _)| *path == rel).map(|(_, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workflow_file_is_embedded_including_lib() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../workflows");
        let mut on_disk = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read workflows/") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rhai") {
                    let rel = path.strip_prefix(&root).expect("under root").to_string_lossy().replace('\\', "/");
                    on_disk.push(rel);
                }
            }
        }
        on_disk.sort();
        let embedded: Vec<String> = WORKFLOWS.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(embedded, on_disk);
        assert!(workflow("provision.rhai").is_some() && workflow("lib/guest.rhai").is_some());
    }

    #[test]
    fn the_catalogue_the_config_loader_reads_lists_exactly_the_embedded_plugins() {
        let embedded: Vec<&str> = PLUGINS.iter().map(|p| p.name).collect();
        let catalogue: Vec<&str> = catalogue::CATALOGUE.iter().map(|p| p.name).collect();
        assert_eq!(embedded, catalogue);
        assert_eq!(plugin_names(), "direct, sample, terraform, netbox");
    }

    #[test]
    fn built_in_plugins_are_components_with_a_manifest_and_valid_default_grants() {
        for p in PLUGINS {
            let m = crate::plugin::manifest::Manifest::read(p.wasm, std::path::Path::new(p.name)).expect("manifest");
            assert!(!m.version.is_empty(), "{}", p.name);
            let mut cfg = crate::config::PluginConfig::builtin(p);
            // A module root is relative to cradle.toml until the config is loaded.
            if let Some(tf) = cfg.grants.terraform.as_mut() {
                tf.module_root = std::path::Path::new("/p").join(&tf.module_root);
            }
            cfg.grants.validate().expect("grants");
            cfg.limits.validate().expect("limits");
        }
        let direct = crate::config::PluginConfig::builtin(plugin("direct").expect("direct"));
        assert!(direct.implicit && direct.is_builtin() && direct.grants.builtin_defaults);
        let proxmox = direct.grants.proxmox.expect("direct is granted proxmox");
        assert!(!proxmox.destructive, "the defaults for any cluster are not destructive");
        let on_sim = crate::config::PluginConfig::builtin_on_sim(plugin("direct").expect("direct"));
        assert!(on_sim.grants.proxmox.expect("proxmox").destructive, "the simulated cluster's defaults are");
    }

    #[test]
    fn the_built_in_workflows_compile_with_their_lib_imports_resolved_in_the_embedded_set() {
        use crate::workflow::{EngineOptions, WorkflowSet, WorkflowSource};
        let opts = EngineOptions { host_modules: crate::caps::script::modules(), ..EngineOptions::default() };
        let set = WorkflowSet::load_from(&WorkflowSource::Builtin, &opts).expect("built-in workflows compile");
        let scripts: Vec<String> = set.scripts().into_iter().map(|s| s.name).collect();
        for name in ["sample", "provision", "remove", "maintain"] {
            assert!(scripts.iter().any(|s| s == name), "{name}: {scripts:?}");
        }
        let modules: Vec<&str> = set.modules().iter().map(|m| m.name.as_str()).collect();
        assert!(modules.contains(&"lib/guest") && modules.contains(&"lib/finalize"), "{modules:?}");
        assert!(set.scripts().iter().all(|s| s.file.starts_with(WorkflowSource::BUILTIN_PREFIX)));
        assert!(set.source().is_builtin());
    }

    #[test]
    fn a_project_directory_does_not_import_built_in_modules() {
        use crate::workflow::{EngineOptions, WorkflowError, WorkflowSet};
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("mine.rhai"), "import \"lib/guest\" as guest;\nfn main() { 1 }\n")
            .expect("write");
        let err = WorkflowSet::load(dir.path(), &EngineOptions::default()).expect_err("no lib/guest in the project");
        assert!(matches!(err, WorkflowError::Compile { .. }), "{err}");
        assert!(err.to_string().contains("lib/guest"), "{err}");
    }

    #[test]
    fn a_built_in_plugin_loads_through_the_cache_and_admission_like_a_file() {
        use crate::plugin::cache::CacheOutcome;
        use crate::plugin::{PluginHost, PluginSource};
        let dir = tempfile::tempdir().expect("tmp");
        let host = PluginHost::new(&dir.path().join("cache")).expect("host");
        let p = plugin("sample").expect("sample");
        let cfg = crate::config::PluginConfig::builtin(p);
        let source = PluginSource::Builtin("sample");
        let first = host.load_source("sample", &source, cfg.grants.clone(), cfg.limits.resolve()).expect("load");
        assert_eq!(first.cache, CacheOutcome::Miss);
        assert_eq!(first.hash, hex::encode(<sha2::Sha256 as sha2::Digest>::digest(p.wasm)));
        assert_eq!(first.path, std::path::Path::new("built-in:sample"));
        let second = host.load_source("sample", &source, cfg.grants.clone(), cfg.limits.resolve()).expect("reload");
        assert_eq!(second.cache, CacheOutcome::Hit, "the verified cache entry is reused");
        // The same bytes from a file share the entry: one path from the bytes on.
        let file = dir.path().join("sample.wasm");
        std::fs::write(&file, p.wasm).expect("write");
        let from_file = host.load("sample", &file, cfg.grants.clone(), cfg.limits.resolve()).expect("file");
        assert_eq!((from_file.cache, from_file.hash), (CacheOutcome::Hit, first.hash.clone()));
        // Admission still checks grants: direct imports proxmox, which nothing grants here.
        let err = host
            .load_source("direct", &PluginSource::Builtin("direct"), Default::default(), cfg.limits.resolve())
            .expect_err("ungranted proxmox");
        assert!(err.to_string().contains("proxmox"), "{err}");
    }
}
