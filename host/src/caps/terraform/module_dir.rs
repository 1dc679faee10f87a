//! One host's module directory under the grant's module root, and the file
//! rules around it.
//!
//! Contract:
//! - The module is a plain name (the grant's scope check refuses anything
//!   else); its directory is `<root>/<module>`, created 0700. A module
//!   directory that is a symlink, or not a directory, is refused: terraform
//!   must never be steered into another tree.
//! - [`ModuleDir::write`] writes the plugin's files (`*.tf.json` only, plain
//!   names) atomically with mode 0600, and refuses a module directory holding
//!   another configuration file (`*.tf`, `*.tf.json`, `*.tfvars`,
//!   `*.tfvars.json`, `override` files) the plugin did not render: terraform
//!   would read it behind the plugin's back.
//! - [`ModuleDir::tighten`] runs after every terraform command: every
//!   directory 0700, every file 0600 (0700 if executable, the providers under
//!   `.terraform/`), symlinks untouched and never followed. Terraform writes
//!   its state, backups and lock file with its own modes; this makes them
//!   owner-only again before anything else can run.
//! - [`ModuleDir::write_failure_log`] leaves `terraform-failure.log` (0600).
//!
//! Failure modes: every error is `invalid` (a name or a file the operator
//! must fix) or `failed` (I/O), naming the path.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::contract::CapError;
use crate::state::{create_private_dir, write_private_file_atomic};

/// The file cradle leaves after a failed plan or apply.
pub const FAILURE_LOG: &str = "terraform-failure.log";

/// Terraform's local state file.
pub const STATE_FILE: &str = "terraform.tfstate";

/// A module directory (which may not exist yet).
#[derive(Debug, Clone)]
pub struct ModuleDir {
    path: PathBuf,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> CapError {
    CapError::failed(format!("terraform: cannot {what} {}: {e}", path.display()))
}

/// Whether `name` is a configuration file terraform would read.
fn is_config_file(name: &str) -> bool {
    [".tf", ".tf.json", ".tfvars", ".tfvars.json"].iter().any(|ext| name.ends_with(ext))
}

/// A file name the plugin may write: `[A-Za-z0-9_-]+.tf.json`.
fn valid_file_name(name: &str) -> bool {
    name.strip_suffix(".tf.json")
        .is_some_and(|stem| !stem.is_empty() && stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
}

impl ModuleDir {
    /// The directory of `module` under `root` (not created).
    pub fn new(root: &Path, module: &str) -> ModuleDir {
        ModuleDir { path: root.join(module) }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The module's name (the directory's last component).
    pub fn name(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Every configuration file terraform would read in the directory (name,
    /// content), for the host's content check; none when it does not exist.
    pub fn config_files(&self) -> Result<Vec<(String, String)>, CapError> {
        if !self.exists()? {
            return Ok(Vec::new());
        }
        let mut files = Vec::new();
        for entry in fs::read_dir(&self.path).map_err(|e| io("list", &self.path, e))? {
            let entry = entry.map_err(|e| io("list", &self.path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_config_file(&name) {
                let content = fs::read(entry.path()).map_err(|e| io("read", &entry.path(), e))?;
                files.push((name, String::from_utf8_lossy(&content).into_owned()));
            }
        }
        files.sort();
        Ok(files)
    }

    /// Whether the directory exists (as a real directory; a symlink is an error).
    pub fn exists(&self) -> Result<bool, CapError> {
        match fs::symlink_metadata(&self.path) {
            Ok(m) if m.file_type().is_symlink() => Err(CapError::invalid(format!(
                "terraform: module directory {} is a symlink; cradle refuses to run terraform through it (replace it with a directory)",
                self.path.display()
            ))),
            Ok(m) if !m.is_dir() => Err(CapError::invalid(format!(
                "terraform: {} is not a directory; move it away so cradle can keep the module there",
                self.path.display()
            ))),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io("inspect", &self.path, e)),
        }
    }

    /// The directory, which must exist: a missing module is `not-found`.
    pub fn existing(&self) -> Result<&Path, CapError> {
        if self.exists()? {
            Ok(&self.path)
        } else {
            Err(CapError::not_found(format!("terraform: module directory {} does not exist", self.path.display())))
        }
    }

    /// Create the root and the directory (0700) if missing.
    pub fn ensure(&self) -> Result<&Path, CapError> {
        if !self.exists()? {
            create_private_dir(&self.path).map_err(|e| CapError::failed(format!("terraform: {e}")))?;
        }
        Ok(&self.path)
    }

    /// Whether the module has a local state file.
    pub fn has_state(&self) -> Result<bool, CapError> {
        Ok(self.exists()? && self.path.join(STATE_FILE).is_file())
    }

    /// Write `files` (name, content) as the whole module.
    pub fn write(&self, files: &[(String, String)]) -> Result<(), CapError> {
        check_names(files)?;
        let dir = self.ensure()?;
        let entries = fs::read_dir(dir).map_err(|e| io("list", dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io("list", dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_config_file(&name) && !files.iter().any(|(n, _)| *n == name) {
                return Err(CapError::invalid(format!(
                    "terraform: {} holds {name}, which cradle did not render; terraform would read it with the module. Move it out of the directory (keep terraform.tfstate and its backups)",
                    dir.display()
                )));
            }
        }
        for (name, content) in files {
            let path = dir.join(name);
            if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(CapError::invalid(format!(
                    "terraform: {} is a symlink; cradle writes module files itself (remove the link)",
                    path.display()
                )));
            }
            write_private_file_atomic(&path, content.as_bytes())
                .map_err(|e| CapError::failed(format!("terraform: {e}")))?;
        }
        Ok(())
    }

    /// Make everything under the directory owner-only (see the module docs).
    pub fn tighten(&self) -> Result<(), CapError> {
        if self.exists()? {
            tighten_tree(&self.path)?;
        }
        Ok(())
    }

    /// Leave `transcript` as `terraform-failure.log`; returns its path.
    pub fn write_failure_log(&self, transcript: &str) -> Result<PathBuf, CapError> {
        let path = self.path.join(FAILURE_LOG);
        write_private_file_atomic(&path, transcript.as_bytes())
            .map_err(|e| CapError::failed(format!("terraform: {e}")))?;
        Ok(path)
    }
}

/// At least one file, each a plain `*.tf.json` name: `invalid` otherwise.
pub fn check_names(files: &[(String, String)]) -> Result<(), CapError> {
    if files.is_empty() {
        return Err(CapError::invalid("terraform: write-module needs at least one file"));
    }
    for (name, _) in files {
        if !valid_file_name(name) {
            return Err(CapError::invalid(format!(
                "terraform: module file name `{name}` must be a plain name ending in .tf.json (letters, digits, `_`, `-`)"
            )));
        }
    }
    Ok(())
}

/// Directories 0700, files 0600 (0700 when executable), symlinks untouched.
pub fn tighten_tree(dir: &Path) -> Result<(), CapError> {
    set_mode(dir, 0o700)?;
    let entries = fs::read_dir(dir).map_err(|e| io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io("list", dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| io("inspect", &path, e))?;
        if kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            tighten_tree(&path)?;
            continue;
        }
        let mode = entry.metadata().map_err(|e| io("inspect", &path, e))?.permissions().mode();
        set_mode(&path, if mode & 0o100 != 0 { 0o700 } else { 0o600 })?;
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), CapError> {
    let current = fs::symlink_metadata(path).map_err(|e| io("inspect", path, e))?.permissions().mode() & 0o777;
    if current != mode {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| io("chmod", path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_tf_json_names_may_be_written() {
        for bad in ["main.tf", "../x.tf.json", "a/b.tf.json", ".tf.json", "x.tf.json.bak", "sp ace.tf.json"] {
            assert!(!valid_file_name(bad), "{bad}");
        }
        assert!(valid_file_name("main.tf.json") && valid_file_name("vm_1-x.tf.json"));
    }

    #[test]
    fn a_configuration_file_cradle_did_not_render_is_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let m = ModuleDir::new(tmp.path(), "web-1");
        m.ensure().expect("dir");
        fs::write(m.path().join("extra.tf"), "resource \"null_resource\" \"x\" {}").expect("write");
        let err = m.write(&[("main.tf.json".into(), "{}".into())]).expect_err("refused");
        assert!(err.message.contains("extra.tf") && err.message.contains("did not render"), "{}", err.message);
        assert!(!m.path().join("main.tf.json").exists(), "nothing written");
    }

    #[test]
    fn a_module_directory_that_is_a_symlink_is_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).expect("dir");
        std::os::unix::fs::symlink(&elsewhere, tmp.path().join("web-1")).expect("link");
        let m = ModuleDir::new(tmp.path(), "web-1");
        let err = m.write(&[("main.tf.json".into(), "{}".into())]).expect_err("refused");
        assert!(err.message.contains("symlink"), "{}", err.message);
        assert!(fs::read_dir(&elsewhere).expect("list").next().is_none(), "nothing written through the link");
    }

    #[test]
    fn written_files_are_0600_in_a_0700_directory_and_tighten_fixes_what_terraform_wrote() {
        let tmp = tempfile::tempdir().expect("tmp");
        let m = ModuleDir::new(tmp.path(), "web-1");
        m.write(&[("main.tf.json".into(), "{}".into())]).expect("write");
        let mode = |p: &Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!((mode(m.path()), mode(&m.path().join("main.tf.json"))), (0o700, 0o600));
        // What terraform leaves with its own modes.
        fs::write(m.path().join("terraform.tfstate.backup"), "{}").expect("write");
        fs::set_permissions(m.path().join("terraform.tfstate.backup"), fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let prov = m.path().join(".terraform/providers");
        fs::create_dir_all(&prov).expect("dirs");
        fs::set_permissions(&prov, fs::Permissions::from_mode(0o755)).expect("chmod");
        fs::write(prov.join("terraform-provider-x"), "#!").expect("write");
        fs::set_permissions(prov.join("terraform-provider-x"), fs::Permissions::from_mode(0o755)).expect("chmod");
        m.tighten().expect("tighten");
        assert_eq!(mode(&m.path().join("terraform.tfstate.backup")), 0o600);
        assert_eq!((mode(&prov), mode(&prov.join("terraform-provider-x"))), (0o700, 0o700));
    }
}
