//! What a run has read from the cluster and may answer again without asking:
//! a provisioning run reads the VM listing, a VM's config and a storage's
//! definition several times with nothing of its own in between, and each of
//! those reads was one HTTPS request to `pveproxy`.
//!
//! Contract:
//! - `storage-info` is held for the whole run: a storage's definition is
//!   datacenter configuration, changed by an operator, never by provisioning.
//! - `list-vms` and `get-config` are held until the run's next call that may
//!   change the cluster or wait for it to change: any `proxmox` call that is
//!   not a pure read (clone, set-config, power, wait-task, migrate, destroy,
//!   HA changes, ...) and any `ssh` command (a guest can power itself off, a
//!   node command can change a VM). A decision made after the run's own change
//!   therefore always sees the cluster anew. Held answers are also dropped
//!   after [`HELD_FOR`], so another run's changes are seen soon; the run's own
//!   VM is under its lock, and what must be exact (a free VMID, a VM that must
//!   not exist) is confirmed by the write itself (`nextid?vmid=N`, clone's
//!   "config file already exists").
//! - `vm-status`, `get-pending`, `list-tasks`, `wait-task` and the HA listings
//!   are never held: they change by themselves (a guest powers off, a task ends).
//! - A failed read is not held; a held answer is returned as read (a copy).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::contract::bindings::cradle::host::proxmox::{StorageDefinition, VmResource};
use crate::contract::bindings::cradle::host::types::Entry;

/// How long a held listing or config may be answered from.
pub const HELD_FOR: Duration = Duration::from_secs(10);

/// `proxmox` functions that only read and change nothing, held or not.
const READS: [&str; 17] = [
    "list-vms",
    "task-failure",
    "get-container-config",
    "container-status",
    "task-log",
    "storage-status",
    "storage-content",
    "pve-version",
    "get-config",
    "storage-info",
    "vm-status",
    "get-pending",
    "list-tasks",
    "next-id",
    "list-ha-resources",
    "list-ha-rules",
    "agent-ping",
];

/// Whether a `proxmox` function may change the cluster (or waits for it to).
pub fn changes_cluster(function: &str) -> bool {
    !READS.contains(&function)
}

/// One run's held reads (see the module docs).
#[derive(Debug, Default)]
pub struct Held {
    inner: Mutex<Reads>,
}

#[derive(Debug, Default)]
struct Reads {
    vms: Option<(Instant, Vec<VmResource>)>,
    configs: HashMap<(String, u32), (Instant, Vec<Entry>)>,
    storages: HashMap<String, StorageDefinition>,
}

fn fresh<T: Clone>(held: Option<&(Instant, T)>) -> Option<T> {
    held.filter(|(at, _)| at.elapsed() < HELD_FOR).map(|(_, v)| v.clone())
}

impl Held {
    fn reads(&self) -> std::sync::MutexGuard<'_, Reads> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The held VM listing, if any.
    pub fn vms(&self) -> Option<Vec<VmResource>> {
        fresh(self.reads().vms.as_ref())
    }

    /// Holds a VM listing just read.
    pub fn keep_vms(&self, vms: &[VmResource]) {
        self.reads().vms = Some((Instant::now(), vms.to_vec()));
    }

    /// The held config of `vmid` on `node`, if any.
    pub fn config(&self, node: &str, vmid: u32) -> Option<Vec<Entry>> {
        fresh(self.reads().configs.get(&(node.to_string(), vmid)))
    }

    /// Holds a config just read.
    pub fn keep_config(&self, node: &str, vmid: u32, config: &[Entry]) {
        self.reads().configs.insert((node.to_string(), vmid), (Instant::now(), config.to_vec()));
    }

    /// The held definition of `storage`, if any.
    pub fn storage(&self, storage: &str) -> Option<StorageDefinition> {
        self.reads().storages.get(storage).cloned()
    }

    /// Holds a storage definition just read.
    pub fn keep_storage(&self, storage: &str, def: &StorageDefinition) {
        self.reads().storages.insert(storage.to_string(), def.clone());
    }

    /// Drops what the cluster may have changed: the listing and the configs.
    pub fn forget_changeable(&self) {
        let mut r = self.reads();
        r.vms = None;
        r.configs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(k: &str, v: &str) -> Entry {
        Entry { key: k.into(), value: v.into() }
    }

    #[test]
    fn reads_are_held_until_a_change_and_storages_for_the_whole_run() {
        let held = Held::default();
        assert!(held.config("pve1", 300).is_none());
        held.keep_config("pve1", 300, &[entry("name", "a")]);
        let config = held.config("pve1", 300).expect("held");
        assert_eq!((config.len(), config[0].value.as_str()), (1, "a"));
        assert!(held.config("pve2", 300).is_none(), "held per node and VMID");
        held.keep_vms(&[]);
        assert!(held.vms().is_some_and(|v| v.is_empty()));
        let def = StorageDefinition {
            storage: "local".into(),
            kind: "dir".into(),
            path: Some("/var/lib/vz".into()),
            content: vec!["snippets".into()],
            shared: false,
        };
        held.keep_storage("local", &def);
        held.forget_changeable();
        assert!(held.vms().is_none() && held.config("pve1", 300).is_none());
        assert_eq!(held.storage("local").and_then(|d| d.path).as_deref(), Some("/var/lib/vz"));
    }

    #[test]
    fn only_pure_reads_keep_what_is_held() {
        for f in [
            "clone-vm",
            "set-config",
            "power",
            "wait-task",
            "migrate",
            "destroy",
            "resize-disk",
            "move-disk",
            "add-ha-resource",
        ] {
            assert!(changes_cluster(f), "{f}");
        }
        for f in ["list-vms", "get-config", "storage-info", "vm-status", "list-tasks"] {
            assert!(!changes_cluster(f), "{f}");
        }
    }
}
