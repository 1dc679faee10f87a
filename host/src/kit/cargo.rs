//! `cradle plugin build [DIR]`: build a plugin crate into a component.
//!
//! Runs `cargo build --release --target wasm32-wasip2` on `DIR/Cargo.toml`
//! (cargo from `$CARGO`, else `cargo` on PATH), lets cargo print its progress
//! and rendered diagnostics on stderr, and takes the component's path from
//! cargo's own artifact messages, so `CARGO_TARGET_DIR` and build config are
//! honoured. The component's manifest is read back, so a build that produced
//! no valid plugin is an error here, not at the first provision.
//!
//! Failure modes (each a [`BuildError`] saying what to do): no Cargo.toml,
//! the `wasm32-wasip2` target missing (installed with `rustup target add`
//! only when asked), cargo missing or failing, no component produced, a
//! component without a valid manifest.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use thiserror::Error;

use crate::plugin::manifest::{Manifest, ManifestError};

/// The target plugins are built for.
pub const TARGET: &str = "wasm32-wasip2";

/// A built plugin.
#[derive(Debug)]
pub struct Built {
    /// The component cargo wrote.
    pub wasm: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

/// Why a plugin crate did not become a component.
#[derive(Debug, Error)]
pub enum BuildError {
    /// The directory is not a crate.
    #[error("{0} has no Cargo.toml: point `cradle plugin build` at a plugin crate (made by `cradle plugin new NAME`)")]
    NoCrate(PathBuf),
    /// The Rust target is not installed.
    #[error(
        "the {TARGET} Rust target is not installed: run `rustup target add {TARGET}` (or pass --install-target to let cradle run it)"
    )]
    NoTarget,
    /// A tool could not be run.
    #[error("cannot run `{tool}`: {source} (is the Rust toolchain installed and on PATH?)")]
    Spawn {
        /// The command.
        tool: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `rustup target add` failed.
    #[error("`rustup target add {TARGET}` failed ({0}); install the target by hand")]
    Install(ExitStatus),
    /// cargo reported an error (its diagnostics are above, on stderr).
    #[error("cargo build failed ({0}); its errors are printed above")]
    Cargo(ExitStatus),
    /// cargo succeeded but wrote no component.
    #[error(
        "cargo built {0} but wrote no .wasm: its [lib] must say crate-type = [\"cdylib\"] (as `cradle plugin new` writes it)"
    )]
    NoArtifact(PathBuf),
    /// The component is not a valid plugin.
    #[error("the component cargo built is not a valid plugin: {0}")]
    Manifest(#[from] ManifestError),
    /// The component could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The component.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

fn spawn_error(tool: &str) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Spawn { tool: tool.to_string(), source }
}

/// Whether the standard library for [`TARGET`] is installed (rustc prints
/// the directory whether or not it exists).
pub fn target_installed() -> Result<bool, BuildError> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .stderr(Stdio::null())
        .output()
        .map_err(spawn_error("rustc"))?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    Ok(out.status.success() && std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()))
}

/// `rustup target add wasm32-wasip2`.
pub fn install_target() -> Result<(), BuildError> {
    let status = Command::new("rustup").args(["target", "add", TARGET]).status().map_err(spawn_error("rustup"))?;
    if status.success() { Ok(()) } else { Err(BuildError::Install(status)) }
}

/// Build the crate in `dir` for [`TARGET`] in release mode.
pub fn build(dir: &Path, install: bool) -> Result<Built, BuildError> {
    let manifest_path = dir.join("Cargo.toml");
    if !manifest_path.is_file() {
        return Err(BuildError::NoCrate(dir.to_path_buf()));
    }
    if !target_installed()? {
        if !install {
            return Err(BuildError::NoTarget);
        }
        install_target()?;
    }
    let mut child = Command::new(cargo())
        .args(["build", "--release", "--target", TARGET, "--message-format", "json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest_path)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(spawn_error("cargo"))?;
    let mut wasm = None;
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(found) = component_of(&line) {
                wasm = Some(found);
            }
        }
    }
    let status = child.wait().map_err(spawn_error("cargo"))?;
    if !status.success() {
        return Err(BuildError::Cargo(status));
    }
    let wasm = wasm.ok_or_else(|| BuildError::NoArtifact(dir.to_path_buf()))?;
    let bytes = std::fs::read(&wasm).map_err(|source| BuildError::Read { path: wasm.clone(), source })?;
    let manifest = Manifest::read(&bytes, &wasm)?;
    Ok(Built { wasm, manifest })
}

/// The `.wasm` of a cdylib in one line of cargo's JSON messages.
fn component_of(line: &str) -> Option<PathBuf> {
    let msg: serde_json::Value = serde_json::from_str(line).ok()?;
    if msg["reason"] != "compiler-artifact" {
        return None;
    }
    let kinds = msg["target"]["kind"].as_array()?;
    if !kinds.iter().any(|k| k == "cdylib") {
        return None;
    }
    msg["filenames"].as_array()?.iter().filter_map(|f| f.as_str()).find(|f| f.ends_with(".wasm")).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_component_is_taken_from_cargos_artifact_message() {
        let line = r#"{"reason":"compiler-artifact","target":{"kind":["cdylib"],"name":"mine"},"filenames":["/x/target/wasm32-wasip2/release/mine.wasm"]}"#;
        assert_eq!(component_of(line), Some(PathBuf::from("/x/target/wasm32-wasip2/release/mine.wasm")));
        let dep = r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/x/libwit.rlib"]}"#;
        assert_eq!(component_of(dep), None);
        assert_eq!(component_of("not json"), None);
    }

    #[test]
    fn a_directory_without_a_crate_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = build(dir.path(), false).expect_err("no crate").to_string();
        assert!(err.contains("has no Cargo.toml") && err.contains("cradle plugin new"), "{err}");
    }
}
