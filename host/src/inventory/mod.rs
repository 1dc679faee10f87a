//! Ansible inventories: the operators' existing `hosts.ini` / `hosts.yml` files with
//! their `group_vars/` and `host_vars/`, read the way Ansible reads them, and resolved
//! host by host into a [`VmPlan`].
//!
//! Contract:
//! - [`Inventory::load`] takes what `-i` names: an INI file, a YAML/JSON file
//!   (`.yml`, `.yaml`, `.json`) or a directory of such files. `group_vars/` and
//!   `host_vars/` are read from the file's directory (or the directory itself).
//!   Groups, `children`, the implicit `all` and `ungrouped`, host ranges
//!   (`web[01:03]`) and `host:port` follow Ansible's INI and YAML plugins.
//! - [`Inventory::host_vars`] merges variables in Ansible's precedence (lowest first):
//!   `all` group vars from the inventory file, other groups' inventory vars,
//!   `group_vars/all`, `group_vars/<group>`, the host's inventory vars,
//!   `host_vars/<host>`; groups of one kind merge by (depth, `ansible_group_priority`,
//!   name). Top-level keys replace (Ansible's default `hash_behaviour=replace`).
//! - [`Inventory::select`] evaluates a `--limit` pattern (see `limit.rs`) and returns
//!   hosts in inventory order, whatever the pattern's order.
//! - [`resolve()`] / [`resolve_selected`] turn a host into a [`VmPlan`]; the VMID of a
//!   host never depends on what `--limit` selected (invariant 6).
//! - [`Inventory::guest_vars`] reads the guest settings a workflow's `vm`
//!   carries besides the plan (packages, FQDN, DNS records, wait bounds, ...).
//!
//! Failure modes: every error is an [`InventoryError`] naming the file (and line),
//! or the host, the variable, the offending value and the accepted form. Nothing is
//! guessed: an unreadable file, an unknown pattern term, a Jinja expression cradle
//! cannot evaluate or a bad value stops the run before any side effect.

mod build;
mod error;
mod files;
mod guest;
mod hardware;
mod hostpat;
mod ini;
mod limit;
mod literal;
mod nesting;
mod nic;
mod resolve;
mod spec;
mod template;
mod values;
mod vmid;
mod yaml;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_resolve;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub use error::InventoryError;
pub use guest::GuestVars;
pub use hardware::{is_bridge_id, is_storage_id};
pub use nic::{IpCidr, Nic};
pub use resolve::{SshTarget, VmPlan, resolve, resolve_selected};
pub use spec::{Disk, NicRecord, OsTemplate, ResolveOptions, SpecRecord, VmState};
pub use template::TemplateError;
pub use vmid::VmidSource;

/// A host's or group's variables: top-level names to values (YAML/JSON shaped).
pub type Vars = serde_json::Map<String, Value>;

/// An inventory hostname (`test-0`, `pve1`) exactly as the inventory spells it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct HostName(String);

impl HostName {
    /// The name as written in the inventory.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for HostName {
    fn from(s: &str) -> Self {
        HostName(s.to_string())
    }
}

/// Variables from one source plus where each key was set (for error messages).
#[derive(Debug, Clone, Default)]
pub(crate) struct Layer {
    pub(crate) vars: Vars,
    pub(crate) origin: BTreeMap<String, String>,
}

impl Layer {
    pub(crate) fn set(&mut self, key: &str, value: Value, origin: &str) {
        self.vars.insert(key.to_string(), value);
        self.origin.insert(key.to_string(), origin.to_string());
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub(crate) name: String,
    /// Variables set in the inventory source (`[g:vars]`, YAML `vars:`).
    pub(crate) vars: Layer,
    /// Variables from `group_vars/<name>`.
    pub(crate) file_vars: Layer,
    /// Direct hosts, in the order they were added.
    pub(crate) hosts: Vec<usize>,
    pub(crate) children: Vec<usize>,
    pub(crate) parents: Vec<usize>,
    /// Longest path from `all` (which has depth 0).
    pub(crate) depth: usize,
}

#[derive(Debug, Clone)]
pub(crate) struct Host {
    pub(crate) name: String,
    /// Variables set in the inventory source (inline on host lines, YAML host maps).
    pub(crate) vars: Layer,
    /// Variables from `host_vars/<name>`.
    pub(crate) file_vars: Layer,
    /// Direct groups (may include `all` for YAML `all: hosts:`).
    pub(crate) groups: Vec<usize>,
}

/// Which variable source won for a key (see [`Inventory::var_scope`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Group(usize),
    Host,
}

/// A loaded, reconciled inventory.
#[derive(Debug, Clone)]
pub struct Inventory {
    pub(crate) source: PathBuf,
    pub(crate) groups: Vec<Group>,
    pub(crate) group_ix: HashMap<String, usize>,
    pub(crate) hosts: Vec<Host>,
    pub(crate) host_ix: HashMap<String, usize>,
    /// Host indices in inventory order (the order of `all`).
    pub(crate) order: Vec<usize>,
    /// Vault-encrypted vars files that were not read.
    pub(crate) skipped_vault: Vec<PathBuf>,
    /// Each group's host positions, for `vms_vmid_base` + index.
    pub(crate) positions: build::Positions,
}

pub(crate) const ALL: usize = 0;
pub(crate) const UNGROUPED: usize = 1;

impl Inventory {
    /// Read `path` (an inventory file or directory) with its `group_vars/` and
    /// `host_vars/`.
    pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
        let mut inv = Inventory::empty(path);
        let meta =
            std::fs::metadata(path).map_err(|source| InventoryError::Read { path: path.to_path_buf(), source })?;
        let base = if meta.is_dir() {
            for file in files::inventory_files(path)? {
                inv.parse_source(&file)?;
            }
            path.to_path_buf()
        } else {
            inv.parse_source(path)?;
            path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
        };
        inv.reconcile()?;
        files::load_vars_dirs(&mut inv, &base)?;
        Ok(inv)
    }

    /// Parse INI text as if read from `path` (no `group_vars/` lookup); for tests
    /// and tools that hold an inventory in memory.
    pub fn from_ini(text: &str, path: &Path) -> Result<Inventory, InventoryError> {
        let mut inv = Inventory::empty(path);
        ini::parse(&mut inv, text, path)?;
        inv.reconcile()?;
        Ok(inv)
    }

    /// Parse YAML inventory text as if read from `path` (no `group_vars/` lookup).
    pub fn from_yaml(text: &str, path: &Path) -> Result<Inventory, InventoryError> {
        let mut inv = Inventory::empty(path);
        yaml::parse(&mut inv, text, path)?;
        inv.reconcile()?;
        Ok(inv)
    }

    fn parse_source(&mut self, file: &Path) -> Result<(), InventoryError> {
        let text = std::fs::read_to_string(file)
            .map_err(|source| InventoryError::Read { path: file.to_path_buf(), source })?;
        if files::is_yaml_name(file) { yaml::parse(self, &text, file) } else { ini::parse(self, &text, file) }
    }

    /// The `-i` path this inventory was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Every host in inventory order.
    pub fn hosts(&self) -> Vec<HostName> {
        self.order.iter().map(|&h| HostName(self.hosts[h].name.clone())).collect()
    }

    /// Every group name (including `all` and `ungrouped`), in creation order.
    pub fn groups(&self) -> Vec<&str> {
        self.groups.iter().map(|g| g.name.as_str()).collect()
    }

    /// The hosts of `group` and of its descendants, in inventory order of the group
    /// (its own hosts first, then its children's, breadth first).
    pub fn group_hosts(&self, group: &str) -> Result<Vec<HostName>, InventoryError> {
        let g = *self.group_ix.get(group).ok_or_else(|| InventoryError::UnknownGroup {
            group: group.to_string(),
            close: limit::close_names(self, group),
        })?;
        Ok(self.group_host_ix(g).into_iter().map(|h| HostName(self.hosts[h].name.clone())).collect())
    }

    /// The groups `host` belongs to, directly or through children, sorted as Ansible
    /// merges their variables; `all` excluded (Ansible's `group_names`).
    pub fn host_groups(&self, host: &str) -> Result<Vec<&str>, InventoryError> {
        let h = self.host_index(host)?;
        Ok(self.sorted_groups(h).into_iter().map(|g| self.groups[g].name.as_str()).collect())
    }

    /// The merged variables of `host` (untemplated), plus Ansible's magic variables
    /// `inventory_hostname`, `inventory_hostname_short` and `group_names`.
    pub fn host_vars(&self, host: &str) -> Result<Vars, InventoryError> {
        let h = self.host_index(host)?;
        Ok(self.merged(h))
    }

    /// Vault-encrypted vars files that cradle skipped (it never decrypts vault).
    pub fn skipped_vault_files(&self) -> &[PathBuf] {
        &self.skipped_vault
    }

    pub(crate) fn host_index(&self, host: &str) -> Result<usize, InventoryError> {
        self.host_ix.get(host).copied().ok_or_else(|| InventoryError::UnknownHost {
            host: host.to_string(),
            close: limit::close_names(self, host),
        })
    }

    /// Variable layers of host `h` in precedence order, lowest first.
    pub(crate) fn layers(&self, h: usize) -> Vec<(Scope, &Layer)> {
        let groups = self.sorted_groups(h);
        let mut out = vec![(Scope::Group(ALL), &self.groups[ALL].vars)];
        out.extend(groups.iter().map(|&g| (Scope::Group(g), &self.groups[g].vars)));
        out.push((Scope::Group(ALL), &self.groups[ALL].file_vars));
        out.extend(groups.iter().map(|&g| (Scope::Group(g), &self.groups[g].file_vars)));
        out.push((Scope::Host, &self.hosts[h].vars));
        out.push((Scope::Host, &self.hosts[h].file_vars));
        out
    }

    pub(crate) fn merged(&self, h: usize) -> Vars {
        let mut vars = Vars::new();
        for (_, layer) in self.layers(h) {
            for (k, v) in &layer.vars {
                vars.insert(k.clone(), v.clone());
            }
        }
        let name = &self.hosts[h].name;
        let short = name.split('.').next().unwrap_or(name);
        // Ansible's `group_names` is sorted by name.
        let mut group_names: Vec<&str> =
            self.sorted_groups(h).into_iter().map(|g| self.groups[g].name.as_str()).collect();
        group_names.sort_unstable();
        let groups: Vec<Value> = group_names.into_iter().map(|g| Value::String(g.to_string())).collect();
        vars.insert("inventory_hostname".into(), Value::String(name.clone()));
        vars.insert("inventory_hostname_short".into(), Value::String(short.to_string()));
        vars.insert("group_names".into(), Value::Array(groups));
        vars
    }

    /// Which source won for `key` on host `h`, and where it was written.
    pub(crate) fn var_scope(&self, h: usize, key: &str) -> Option<(Scope, String)> {
        self.layers(h)
            .into_iter()
            .rev()
            .find(|(_, l)| l.vars.contains_key(key))
            .map(|(s, l)| (s, l.origin.get(key).cloned().unwrap_or_default()))
    }
}

#[cfg(test)]
pub(crate) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/inventory")
}
