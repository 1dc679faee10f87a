//! `cradle plugin new NAME [--backend]`: write a plugin crate.
//!
//! Contract:
//! - NAME is the plugin's name in cradle.toml and in its manifest: lower-case
//!   ASCII letters, digits and `-`, starting with a letter, at most 40
//!   characters (it is also the crate name, so cargo accepts it).
//! - Nothing is written when the directory exists and is not empty (unless
//!   `force`); every file is checked before the first write, like `cradle init`.
//! - The crate holds its own copy of the guest kit (`cradle-guest/`, with the
//!   WIT of this cradle in `cradle-guest/wit/`) and this cradle's Cargo.lock,
//!   so it builds offline-reproducibly with the dependency versions cradle was
//!   tested with (cargo drops the entries the plugin does not use).
//! - `--backend` writes a complete backend (clone, configure, reconcile and
//!   remove through the `proxmox` capability); without it, a plugin that only
//!   plans and logs (the `log` capability alone), a start for a backend that
//!   talks to something else.
//!
//! Failure modes: an invalid name, a non-empty directory, or an I/O error
//! naming the file (files written before it stay; rerun with `force`).

use std::path::{Path, PathBuf};

use thiserror::Error;

/// The guest kit's sources, vendored into every plugin crate as `cradle-guest/src/`.
const KIT_SOURCES: &[(&str, &str)] = &[
    ("lib.rs", include_str!("../../../plugins/guest/src/lib.rs")),
    ("bindings.rs", include_str!("../../../plugins/guest/src/bindings.rs")),
    ("config.rs", include_str!("../../../plugins/guest/src/config.rs")),
    ("error.rs", include_str!("../../../plugins/guest/src/error.rs")),
    ("log.rs", include_str!("../../../plugins/guest/src/log.rs")),
    ("proxmox.rs", include_str!("../../../plugins/guest/src/proxmox.rs")),
];

/// The WIT package, vendored as `cradle-guest/wit/`.
const WIT_FILES: &[(&str, &str)] = &[
    ("backend.wit", include_str!("../../../wit/backend.wit")),
    ("checkpoint.wit", include_str!("../../../wit/checkpoint.wit")),
    ("dhcp.wit", include_str!("../../../wit/dhcp.wit")),
    ("dns.wit", include_str!("../../../wit/dns.wit")),
    ("http.wit", include_str!("../../../wit/http.wit")),
    ("lock.wit", include_str!("../../../wit/lock.wit")),
    ("log.wit", include_str!("../../../wit/log.wit")),
    ("maintenance.wit", include_str!("../../../wit/maintenance.wit")),
    ("netbox.wit", include_str!("../../../wit/netbox.wit")),
    ("pipeline.wit", include_str!("../../../wit/pipeline.wit")),
    ("post.wit", include_str!("../../../wit/post.wit")),
    ("proxmox.wit", include_str!("../../../wit/proxmox.wit")),
    ("ssh.wit", include_str!("../../../wit/ssh.wit")),
    ("terraform.wit", include_str!("../../../wit/terraform.wit")),
    ("types.wit", include_str!("../../../wit/types.wit")),
];

/// The dependency versions cradle's own plugins are built and tested with.
const CARGO_LOCK: &str = include_str!("../../../Cargo.lock");

const BACKEND_LIB: &str = include_str!("templates/backend.rs");
const MINIMAL_LIB: &str = include_str!("templates/minimal.rs");
const SIMULATOR_TEST: &str = include_str!("templates/simulator_test.rs");
const README: &str = include_str!("templates/README.md");

/// What kind of plugin to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A complete backend on the `proxmox` capability.
    Backend,
    /// Plans and logs only.
    Minimal,
}

/// Why no plugin crate was written.
#[derive(Debug, Error)]
pub enum ScaffoldError {
    /// The name cannot be a plugin and crate name.
    #[error(
        "`{0}` cannot be a plugin name: use lower-case letters, digits and `-`, starting with a letter, at most 40 characters (e.g. `my-backend`)"
    )]
    Name(String),
    /// The directory already has files.
    #[error("{0} exists and is not empty; nothing was written (choose another --dir, or pass --force to overwrite)")]
    NotEmpty(PathBuf),
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Check a plugin name.
pub fn check_name(name: &str) -> Result<(), ScaffoldError> {
    let ok = name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if ok { Ok(()) } else { Err(ScaffoldError::Name(name.to_string())) }
}

/// Every file of the crate: (path relative to its directory, content).
pub fn files(name: &str, kind: Kind) -> Vec<(PathBuf, String)> {
    let cradle_version = env!("CARGO_PKG_VERSION");
    let fill = |t: &str| t.replace("{{name}}", name).replace("{{cradle_version}}", cradle_version);
    let lib = match kind {
        Kind::Backend => BACKEND_LIB,
        Kind::Minimal => MINIMAL_LIB,
    };
    // The minimal plugin creates nothing, so its simulator test plans only.
    let test_args = match kind {
        Kind::Backend => "",
        Kind::Minimal => ", \"--check\"",
    };
    let mut files = vec![
        (PathBuf::from("Cargo.toml"), fill(&plugin_manifest())),
        (PathBuf::from("Cargo.lock"), CARGO_LOCK.to_string()),
        (PathBuf::from("src/lib.rs"), fill(lib)),
        (PathBuf::from("tests/simulator.rs"), fill(SIMULATOR_TEST).replace("{{test_args}}", test_args)),
        (PathBuf::from("README.md"), fill(README)),
        (PathBuf::from(".gitignore"), "/target\n".to_string()),
        (PathBuf::from("cradle-guest/Cargo.toml"), kit_manifest()),
    ];
    for (file, text) in KIT_SOURCES {
        files.push((Path::new("cradle-guest/src").join(file), text.to_string()));
    }
    for (file, text) in WIT_FILES {
        files.push((Path::new("cradle-guest/wit").join(file), text.to_string()));
    }
    files
}

fn plugin_manifest() -> String {
    r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
rust-version = "1.95"
publish = false

[lib]
# A WebAssembly component: `cradle plugin build` (cargo build --release --target wasm32-wasip2).
crate-type = ["cdylib"]

[dependencies]
# The plugin kit of cradle {{cradle_version}}, with its WIT: regenerate with that
# cradle's `cradle plugin new` when you upgrade cradle.
cradle-guest = { path = "cradle-guest" }

# Small, optimised components, as cradle builds its own plugins.
[profile.release]
opt-level = "s"
debug = false
strip = "debuginfo"

# The plugin is its own workspace (the kit in cradle-guest/ is its member).
[workspace]
"#
    .to_string()
}

fn kit_manifest() -> String {
    // The wit-bindgen requirement is cradle's own (see the workspace Cargo.toml);
    // Cargo.lock pins the exact version.
    format!(
        r#"[package]
name = "cradle-guest"
description = "The cradle plugin kit: cradle:host@{wit} bindings, typed capabilities, helpers and the manifest"
version = "{version}"
edition = "2024"
rust-version = "1.95"
license = "Apache-2.0"
publish = false

[dependencies]
wit-bindgen = "{bindgen}"
"#,
        wit = crate::caps::WIT_VERSION,
        version = env!("CARGO_PKG_VERSION"),
        bindgen = WIT_BINDGEN_REQ,
    )
}

/// The wit-bindgen version requirement of the workspace.
const WIT_BINDGEN_REQ: &str = "0.61";

/// Write the crate into `dir`.
pub fn write(dir: &Path, name: &str, kind: Kind, force: bool) -> Result<Vec<PathBuf>, ScaffoldError> {
    check_name(name)?;
    if !force && std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(ScaffoldError::NotEmpty(dir.to_path_buf()));
    }
    let mut written = Vec::new();
    for (rel, text) in files(name, kind) {
        let path = dir.join(&rel);
        let result = path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(&path, text));
        result.map_err(|source| ScaffoldError::Write { path: path.clone(), source })?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `dir` with one of `exts`, relative names.
    fn listing(dir: &str, ext: &str) -> Vec<String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(ext))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn every_kit_source_and_wit_file_is_vendored() {
        let kit: Vec<&str> = KIT_SOURCES.iter().map(|(n, _)| *n).collect();
        let mut kit_sorted = kit.clone();
        kit_sorted.sort();
        assert_eq!(kit_sorted, listing("../plugins/guest/src", ".rs"), "add the new kit file to KIT_SOURCES");
        let wit: Vec<&str> = WIT_FILES.iter().map(|(n, _)| *n).collect();
        assert_eq!(wit, listing("../wit", ".wit"), "add the new WIT file to WIT_FILES");
    }

    #[test]
    fn the_kit_requires_the_wit_bindgen_of_the_workspace() {
        let workspace = include_str!("../../../Cargo.toml");
        assert!(workspace.contains(&format!("wit-bindgen = \"{WIT_BINDGEN_REQ}\"")), "update WIT_BINDGEN_REQ");
    }

    #[test]
    fn plugin_names_are_checked_before_anything_is_written() {
        for ok in ["mine", "my-backend2"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Mine", "1st", "my_backend", "x-", "../evil", &"a".repeat(41)] {
            let err = check_name(bad).expect_err(bad).to_string();
            assert!(err.contains("cannot be a plugin name"), "{err}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(write(dir.path(), "Bad Name", Kind::Backend, false).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0, "nothing written");
    }

    #[test]
    fn a_directory_with_files_is_not_overwritten_without_force() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("keep.txt"), "mine").expect("write");
        let err = write(dir.path(), "mine", Kind::Backend, false).expect_err("not empty").to_string();
        assert!(err.contains("not empty") && err.contains("--force"), "{err}");
        assert!(!dir.path().join("Cargo.toml").exists());
        write(dir.path(), "mine", Kind::Minimal, true).expect("forced");
        assert!(dir.path().join("cradle-guest/wit/backend.wit").exists());
        assert_eq!(std::fs::read_to_string(dir.path().join("keep.txt")).expect("kept"), "mine");
    }

    #[test]
    fn the_templates_name_the_plugin_everywhere_and_leave_no_placeholder() {
        for kind in [Kind::Backend, Kind::Minimal] {
            for (rel, text) in files("my-backend", kind) {
                assert!(!text.contains("{{"), "{} keeps a placeholder", rel.display());
            }
            let lib = &files("my-backend", kind).into_iter().find(|(p, _)| p.ends_with("src/lib.rs")).expect("lib").1;
            assert!(lib.contains("name: \"my-backend\""), "{lib}");
        }
    }
}
