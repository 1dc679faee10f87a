//! The plugin manifest: name, version, description and the capability
//! interfaces the plugin needs, embedded in the component as the custom section
//! `cradle-manifest` (see `plugins/guest`).
//!
//! Reading it needs no compilation, so `cradle plugins list` is cheap and a
//! plugin that is not a component, or has no manifest, is refused before any
//! work is spent on it.

use std::path::Path;

use serde::Deserialize;
use wasmparser::{Encoding, Parser, Payload};

use crate::caps::{Capability, WIT_PACKAGE, WIT_VERSION};

/// The custom section holding the manifest.
pub const SECTION: &str = "cradle-manifest";

/// A plugin's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// One line saying what it does.
    pub description: String,
    /// The capabilities it needs.
    pub needs: Vec<Capability>,
    /// The WIT version of the kit it was built with (`wit` in the manifest;
    /// absent in plugins that declare their manifest by hand).
    pub wit: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: String,
    version: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    needs: Vec<String>,
    #[serde(default)]
    wit: Option<String>,
}

/// Why a file is not a usable plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// A core module, not a component.
    #[error("{path} is a core WebAssembly module, not a component: build the plugin for the wasm32-wasip2 target")]
    CoreModule {
        /// The file.
        path: String,
    },
    /// Not WebAssembly at all.
    #[error(
        "{path} is not a WebAssembly component ({reason}): point plugins.NAME.path at a .wasm built for wasm32-wasip2"
    )]
    NotWasm {
        /// The file.
        path: String,
        /// What the parser said.
        reason: String,
    },
    /// No `cradle-manifest` section.
    #[error(
        "{path} has no `cradle-manifest` section: declare one with `cradle_guest::manifest!` and rebuild the plugin"
    )]
    Missing {
        /// The file.
        path: String,
    },
    /// Built with the kit of another WIT version.
    #[error(
        "{path}: plugin `{plugin}` was built with the plugin kit for {WIT_PACKAGE}@{found}, but this cradle speaks {WIT_PACKAGE}@{WIT_VERSION}: regenerate its kit with this cradle (`cradle plugin new` writes the kit of the cradle that runs it) and rebuild"
    )]
    WitVersion {
        /// The file.
        path: String,
        /// The plugin's name.
        plugin: String,
        /// The WIT version its manifest names.
        found: String,
    },
    /// The manifest is malformed.
    #[error("{path}: its manifest is malformed ({reason}); fix the `cradle_guest::manifest!` call and rebuild")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl Manifest {
    /// Read the manifest from the component bytes of `path`.
    pub fn read(bytes: &[u8], path: &Path) -> Result<Manifest, ManifestError> {
        let display = path.display().to_string();
        if !bytes.starts_with(b"\0asm") {
            return Err(ManifestError::NotWasm {
                path: display,
                reason: "it does not start with the WebAssembly magic bytes".into(),
            });
        }
        let mut found: Option<Vec<u8>> = None;
        for (i, payload) in Parser::new(0).parse_all(bytes).enumerate() {
            let payload = payload.map_err(|e| ManifestError::NotWasm {
                path: display.clone(),
                reason: e.message().split_whitespace().collect::<Vec<_>>().join(" "),
            })?;
            match payload {
                // Only the file's own header decides what it is; a component's
                // nested core modules have headers of their own later on.
                Payload::Version { encoding: Encoding::Module, .. } if i == 0 => {
                    return Err(ManifestError::CoreModule { path: display });
                }
                Payload::CustomSection(reader) if reader.name() == SECTION => {
                    found.get_or_insert_with(Vec::new).extend_from_slice(reader.data());
                }
                _ => {}
            }
        }
        let data = match found {
            Some(d) if !d.is_empty() => d,
            _ => return Err(ManifestError::Missing { path: display }),
        };
        let text = String::from_utf8(data)
            .map_err(|_| ManifestError::Malformed { path: display.clone(), reason: "not UTF-8".into() })?;
        let raw: RawManifest = toml::from_str(&text)
            .map_err(|e| ManifestError::Malformed { path: display.clone(), reason: e.message().to_string() })?;
        let mut needs = Vec::new();
        for n in &raw.needs {
            let cap = Capability::from_name(n).ok_or_else(|| ManifestError::Malformed {
                path: display.clone(),
                reason: format!(
                    "needs `{n}`, which is not a cradle capability (known: {})",
                    Capability::ALL.map(|c| c.name()).join(", ")
                ),
            })?;
            if !needs.contains(&cap) {
                needs.push(cap);
            }
        }
        if raw.name.is_empty() || !raw.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(ManifestError::Malformed {
                path: display,
                reason: format!("name `{}` must be [A-Za-z0-9_-]+", raw.name),
            });
        }
        if let Some(found) = raw.wit.as_ref().filter(|w| *w != WIT_VERSION) {
            return Err(ManifestError::WitVersion { path: display, plugin: raw.name, found: found.clone() });
        }
        let wit = raw.wit;
        Ok(Manifest { name: raw.name, version: raw.version, description: raw.description, needs, wit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component_with_section(text: &str) -> Vec<u8> {
        let mut wasm = wat::parse_str("(component)").expect("wat");
        // A custom section: id 0, size, name, data.
        let mut section = Vec::new();
        section.push(SECTION.len() as u8);
        section.extend_from_slice(SECTION.as_bytes());
        section.extend_from_slice(text.as_bytes());
        wasm.push(0);
        wasm.push(section.len() as u8);
        wasm.extend_from_slice(&section);
        wasm
    }

    #[test]
    fn a_manifest_section_is_read() {
        let wasm = component_with_section("name = \"x\"\nversion = \"1.0\"\nneeds = [\"log\", \"proxmox\", ]\n");
        let m = Manifest::read(&wasm, Path::new("x.wasm")).expect("manifest");
        assert_eq!(m.name, "x");
        assert_eq!(m.needs, vec![Capability::Log, Capability::Proxmox]);
    }

    #[test]
    fn a_core_module_is_refused_with_the_target_to_build_for() {
        let wasm = wat::parse_str("(module)").expect("wat");
        let err = Manifest::read(&wasm, Path::new("core.wasm")).expect_err("core").to_string();
        assert!(err.contains("core WebAssembly module") && err.contains("wasm32-wasip2"), "{err}");
    }

    #[test]
    fn a_non_wasm_file_is_refused() {
        let err = Manifest::read(b"#!/bin/sh\necho hi\n", Path::new("x.wasm")).expect_err("text").to_string();
        assert!(err.contains("x.wasm is not a WebAssembly component"), "{err}");
    }

    #[test]
    fn a_component_without_manifest_is_refused() {
        let wasm = wat::parse_str("(component)").expect("wat");
        let err = Manifest::read(&wasm, Path::new("bare.wasm")).expect_err("missing").to_string();
        assert!(err.contains("no `cradle-manifest` section"), "{err}");
    }

    #[test]
    fn a_plugin_built_with_the_kit_of_another_wit_version_is_refused_naming_both() {
        let wasm = component_with_section("name = \"old\"\nversion = \"1\"\nneeds = []\nwit = \"0.0.9\"\n");
        let err = Manifest::read(&wasm, Path::new("old.wasm")).expect_err("other wit").to_string();
        assert!(err.contains("cradle:host@0.0.9") && err.contains(&format!("cradle:host@{WIT_VERSION}")), "{err}");
        assert!(err.contains("plugin `old`") && err.contains("cradle plugin new"), "{err}");
        let same = component_with_section(&format!("name = \"new\"\nversion = \"1\"\nwit = \"{WIT_VERSION}\"\n"));
        assert_eq!(Manifest::read(&same, Path::new("new.wasm")).expect("same wit").wit.as_deref(), Some(WIT_VERSION));
    }

    #[test]
    fn an_unknown_capability_in_needs_is_refused() {
        let wasm = component_with_section("name = \"x\"\nversion = \"1\"\nneeds = [\"root-shell\"]\n");
        let err = Manifest::read(&wasm, Path::new("x.wasm")).expect_err("bad").to_string();
        assert!(err.contains("root-shell"), "{err}");
    }
}
