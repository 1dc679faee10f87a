//! Files around an inventory: the sources inside an inventory directory and the
//! `group_vars/` / `host_vars/` trees beside it (Ansible's `host_group_vars`).
//!
//! - In a directory given to `-i`, every file is a source, in name order, recursing
//!   into subdirectories; skipped: hidden names, `group_vars`, `host_vars`, and
//!   Ansible's ignored extensions (`.pyc .pyo .swp .bak ~ .rpm .md .txt .rst .orig
//!   .cfg .retry`, ansible-core 2.19's list, which reads `.ini`). `.yml`, `.yaml`
//!   and `.json` files are YAML; anything else is INI.
//! - For an entity `name`, the first of `<dir>/name` (a directory: all files below
//!   it, recursively, in name order), `name`, `name.yml`, `name.yaml`, `name.json`
//!   is read; later files win key by key.
//! - A vault-encrypted file (`$ANSIBLE_VAULT;` header) is skipped with a warning
//!   and listed by [`Inventory::skipped_vault_files`]; cradle never decrypts vault.
//!
//! Failure modes: unreadable files, YAML errors, a vars file whose top level is not
//! a mapping: `Read`/`Parse` errors naming the file.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Inventory, InventoryError, Layer, yaml};

const IGNORED_EXTS: [&str; 12] =
    [".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry"];

pub(crate) fn is_yaml_name(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("yml" | "yaml" | "json"))
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, InventoryError> {
    let read = |source| InventoryError::Read { path: dir.to_path_buf(), source };
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let entry = entry.map_err(read)?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        entries.push(entry.path());
    }
    entries.sort();
    Ok(entries)
}

/// The inventory sources inside directory `dir`, in the order Ansible reads them.
pub(crate) fn inventory_files(dir: &Path) -> Result<Vec<PathBuf>, InventoryError> {
    let mut out = Vec::new();
    for p in sorted_entries(dir)? {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if p.is_dir() {
            if name != "group_vars" && name != "host_vars" {
                out.extend(inventory_files(&p)?);
            }
        } else if !IGNORED_EXTS.iter().any(|ext| name.ends_with(ext)) {
            out.push(p);
        }
    }
    Ok(out)
}

/// Load `group_vars/` and `host_vars/` under `base` into the inventory.
pub(crate) fn load_vars_dirs(inv: &mut Inventory, base: &Path) -> Result<(), InventoryError> {
    let gdir = base.join("group_vars");
    for g in 0..inv.groups.len() {
        let name = inv.groups[g].name.clone();
        let mut layer = Layer::default();
        for file in vars_files(&gdir, &name)? {
            read_vars_file(inv, &file, base, &mut layer)?;
        }
        inv.groups[g].file_vars = layer;
    }
    let hdir = base.join("host_vars");
    for h in 0..inv.hosts.len() {
        let name = inv.hosts[h].name.clone();
        let mut layer = Layer::default();
        for file in vars_files(&hdir, &name)? {
            read_vars_file(inv, &file, base, &mut layer)?;
        }
        inv.hosts[h].file_vars = layer;
    }
    warn_orphans(inv, &gdir, |inv, n| inv.group_ix.contains_key(n));
    warn_orphans(inv, &hdir, |inv, n| inv.host_ix.contains_key(n));
    Ok(())
}

/// Ansible's `find_vars_files`: the first existing candidate wins.
fn vars_files(dir: &Path, name: &str) -> Result<Vec<PathBuf>, InventoryError> {
    for ext in ["", ".yml", ".yaml", ".json"] {
        let p = dir.join(format!("{name}{ext}"));
        if p.is_dir() {
            return dir_files(&p);
        }
        if p.is_file() {
            return Ok(vec![p]);
        }
    }
    Ok(Vec::new())
}

fn dir_files(dir: &Path) -> Result<Vec<PathBuf>, InventoryError> {
    let mut out = Vec::new();
    for p in sorted_entries(dir)? {
        if p.is_dir() {
            out.extend(dir_files(&p)?);
        } else if matches!(p.extension().and_then(|e| e.to_str()), None | Some("yml" | "yaml" | "json")) {
            out.push(p);
        }
    }
    Ok(out)
}

fn read_vars_file(inv: &mut Inventory, file: &Path, base: &Path, layer: &mut Layer) -> Result<(), InventoryError> {
    let text =
        std::fs::read_to_string(file).map_err(|source| InventoryError::Read { path: file.to_path_buf(), source })?;
    if text.trim_start().starts_with("$ANSIBLE_VAULT;") {
        tracing::warn!(file = %file.display(), "skipping a vault-encrypted vars file: cradle does not decrypt Ansible Vault");
        inv.skipped_vault.push(file.to_path_buf());
        return Ok(());
    }
    let origin = file.strip_prefix(base).unwrap_or(file).display().to_string();
    match yaml::to_json(&text, file)? {
        Value::Null => Ok(()),
        Value::Object(map) => {
            for (k, v) in map {
                layer.set(&k, v, &origin);
            }
            Ok(())
        }
        _ => Err(InventoryError::Parse {
            path: file.to_path_buf(),
            line: None,
            message: "a vars file must be a mapping of variable names to values".into(),
        }),
    }
}

/// A `group_vars/typo.yml` that matches no group is most likely a typo: say so.
fn warn_orphans(inv: &Inventory, dir: &Path, known: impl Fn(&Inventory, &str) -> bool) {
    let Ok(entries) = sorted_entries(dir) else { return };
    for p in entries {
        let Some(name) = p.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
        let stem = ["yml", "yaml", "json"]
            .iter()
            .find_map(|ext| name.strip_suffix(&format!(".{ext}")))
            .unwrap_or(&name)
            .to_string();
        if !known(inv, &stem) {
            tracing::warn!(file = %p.display(), "vars file matches no group or host of the inventory; it is not read");
        }
    }
}
