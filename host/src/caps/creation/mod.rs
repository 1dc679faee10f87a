//! Creation: the guest's first-boot snippets and the records that let a rerun
//! finish an interrupted creation stage, as a typed service.
//!
//! Layout: this file is the record store ([`CreationStore`], [`Creation`]);
//! [`service`] reads, reserves, begins and releases a VM's record through the
//! one guard (checked as the `checkpoint` capability, journaled as
//! `creation-<function>`); [`snippets`] renders, uploads and deletes the
//! snippets and waits for cloud-init, through the `proxmox` and `ssh` WIT
//! adapters on [`super::context::CapCtx`]; `rhai.rs` is the `cloudinit`
//! script module, which only turns the script's `vm` map into the service's
//! typed inputs and its typed outputs back into script values. Creation is no
//! capability of its own: no WIT interface, no grant, no `scope.rs`.
//!
//! Why records: a clone is not idempotent, but everything after it is
//! (configuration, resize, migration, pinning the guest's host key, starting
//! it). What a rerun cannot recompute is the guest's SSH host key generated on
//! the control node: it went into the user-data snippet, and a cloud-init that
//! already ran on the first boot keeps it. So before anything is created the
//! host writes a record with the VMID, the node the snippets went to and that
//! key pair; a rerun re-renders byte-identical snippets and pins the same key.
//!
//! Contract of the store:
//! - One owner-only JSON file per VM, `<dir>/<vm_name>.json` (directory 0700,
//!   file 0600, written atomically and durably). It holds a private host key,
//!   so it never enters a journal, a log or the workflow script.
//! - Lifetime: written when a VMID is probed and reserved for the VM
//!   (`cloudinit::reserve` in `workflows/lib/vmid.rhai`), at the latest before
//!   the first side effect of the creation stage. Removed
//!   ([`CreationStore::clear`]) once the snippets were deleted from the node
//!   ([`snippets::delete_snippets`]: at the end of finalization, before the
//!   checkpoint is cleared, or by `cradle remove`), or by [`service::release`]
//!   when a failed preflight gives back a VMID probed for this run. So "a
//!   record and no checkpoint" always means "the creation stage did not
//!   finish".
//! - [`CreationStore::list`] yields every record, i.e. the VMIDs this control
//!   node has reserved; a file that is not a valid record is an error, never
//!   skipped.
//! - [`CreationStore::read`] returns `None` only when there is no file; an
//!   unreadable, corrupt, group- or world-accessible or foreign-owned file is
//!   an error naming it, never "absent".
//! - [`CreationStore::begin`] returns the existing record for the same VMID,
//!   refuses one for another VMID ([`CreationError::Mismatch`]) and otherwise
//!   stores a new one.

use std::io;
use std::path::{Path, PathBuf};

pub mod guest;
pub(crate) mod rhai;
pub(crate) mod script_args;
pub mod service;
pub mod snippets;

use serde::{Deserialize, Serialize};

use super::checkpoint::{CheckpointError, validate_name};
use super::coordination::etcd::{EtcdFailure, Fence};
use super::coordination::records::{SealError, SharedRecords};
use crate::secrets::Secret;
use crate::state::{StateError, create_private_dir, sync_dir, write_private_file_atomic};

/// One VM's creation in progress.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creation {
    /// The canonical VM name.
    pub vm_name: String,
    /// The VMID being created.
    pub vmid: u32,
    /// The node the snippets were uploaded to (the node that starts the VM).
    pub node: String,
    /// The guest's public host key line, pinned before the first connection.
    pub host_key_public: String,
    /// The guest's private host key (OpenSSH format), for identical re-renders.
    pub host_key_private: String,
    /// When the record was first written (RFC 3339).
    pub written: String,
}

impl std::fmt::Debug for Creation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Creation")
            .field("vm_name", &self.vm_name)
            .field("vmid", &self.vmid)
            .field("node", &self.node)
            .field("host_key_public", &self.host_key_public)
            .field("host_key_private", &"[redacted]")
            .field("written", &self.written)
            .finish()
    }
}

impl Creation {
    /// The private key as a [`Secret`] (registered with the redactor).
    pub fn private_key(&self) -> Secret {
        Secret::new(self.host_key_private.clone())
    }
}

/// Why a creation record could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CreationError {
    /// The VM name is not a valid file name (same rule as checkpoints).
    #[error(transparent)]
    Name(#[from] CheckpointError),
    /// The record exists but cannot be read or parsed.
    #[error(
        "creation record {} cannot be used ({detail}); it holds the host key of a VM whose creation \
         did not finish: inspect the VM before removing the file",
        path.display()
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A record for another VMID exists under this name.
    #[error(
        "creation record {} for `{vm_name}` is for VMID {recorded}, the inventory says VMID {requested}: \
         review which VM is `{vm_name}`; `cradle remove` clears the record (with the VM, if one was created)",
        path.display()
    )]
    Mismatch {
        /// The VM name.
        vm_name: String,
        /// The VMID in the file.
        recorded: u32,
        /// The VMID asked for.
        requested: u32,
        /// The file.
        path: PathBuf,
    },
    /// Writing, syncing or removing failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The shared store (etcd) failed or refused the write.
    #[error("creation record of `{vm_name}`: {source}")]
    Shared {
        /// The VM name.
        vm_name: String,
        /// What failed.
        source: EtcdFailure,
    },
    /// A shared record's sealed key does not open.
    #[error("creation record of `{vm_name}` in etcd: {source}")]
    Sealed {
        /// The VM name.
        vm_name: String,
        /// Why.
        source: SealError,
    },
    /// A shared record written without the VM's lock.
    #[error(
        "creation record of `{vm_name}`: shared records are written only by the run that holds the VM's lock, \
         and this run does not hold it"
    )]
    Unfenced {
        /// The VM name.
        vm_name: String,
    },
}

/// A creation record as etcd holds it: the private key sealed.
#[derive(Serialize, Deserialize)]
struct SharedCreation {
    vm_name: String,
    vmid: u32,
    node: String,
    host_key_public: String,
    /// The private key sealed with `records_key`, bound to `vm_name|vmid`.
    host_key_sealed: String,
    written: String,
    /// The fencing token of the VM's lock it was written under.
    fence: i64,
}

/// What a sealed key is bound to.
fn seal_context(vm_name: &str, vmid: u32) -> String {
    format!("{vm_name}|{vmid}")
}

/// The shared records' kind (`<prefix>creation/<vm>`).
const KIND: &str = "creation";

/// Creation records in one owner-only directory, or, with `[coordination]
/// backend = "etcd"`, in etcd with the private key sealed, written under the
/// fencing token of the VM's lock.
#[derive(Debug, Clone)]
pub struct CreationStore {
    dir: PathBuf,
    shared: Option<SharedRecords>,
    fence: Option<Fence>,
}

impl CreationStore {
    /// A store in `dir`, created 0700 on the first write.
    pub fn new(dir: PathBuf) -> CreationStore {
        CreationStore { dir, shared: None, fence: None }
    }

    /// The store that lives with `checkpoints` (`<checkpoints>/creating/`, or
    /// the same etcd, under the same fencing token): both decide together
    /// what a rerun does, so they are kept together.
    pub fn for_checkpoints(checkpoints: &super::checkpoint::CheckpointStore) -> CreationStore {
        CreationStore {
            dir: checkpoints.dir().join("creating"),
            shared: checkpoints.shared_records().cloned(),
            fence: checkpoints.fence().cloned(),
        }
    }

    fn shared_err(vm_name: &str) -> impl FnOnce(EtcdFailure) -> CreationError + '_ {
        move |source| CreationError::Shared { vm_name: vm_name.to_string(), source }
    }

    /// Parse (and open) a shared record of `vm_name`.
    fn open_shared(shared: &SharedRecords, vm_name: &str, bytes: &[u8]) -> Result<Creation, CreationError> {
        let origin = PathBuf::from(format!("etcd:{}", shared.key(KIND, vm_name)));
        let rec: SharedCreation = serde_json::from_slice(bytes)
            .map_err(|e| CreationError::Corrupt { path: origin.clone(), detail: e.to_string() })?;
        if rec.vm_name != vm_name {
            return Err(CreationError::Corrupt {
                path: origin,
                detail: format!("it records the VM name `{}`", rec.vm_name),
            });
        }
        let private = shared
            .sealer
            .open(&rec.host_key_sealed, &seal_context(&rec.vm_name, rec.vmid))
            .map_err(|source| CreationError::Sealed { vm_name: vm_name.to_string(), source })?;
        Ok(Creation {
            vm_name: rec.vm_name,
            vmid: rec.vmid,
            node: rec.node,
            host_key_public: rec.host_key_public,
            host_key_private: private.expose().to_string(),
            written: rec.written,
        })
    }

    fn path(&self, vm_name: &str) -> Result<PathBuf, CreationError> {
        validate_name(vm_name)?;
        Ok(self.dir.join(format!("{vm_name}.json")))
    }

    /// The record of `vm_name`, or `None` when it has none.
    pub fn read(&self, vm_name: &str) -> Result<Option<Creation>, CreationError> {
        let path = self.path(vm_name)?;
        if let Some(shared) = &self.shared {
            let found = shared
                .conn
                .get(&shared.key(KIND, vm_name), "read a creation record")
                .map_err(Self::shared_err(vm_name))?;
            return found.map(|b| Self::open_shared(shared, vm_name, &b)).transpose();
        }
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CreationError::Corrupt { path, detail: e.to_string() }),
        };
        // It holds a private key: a file others can read (or that someone else
        // owns) is not trusted, and the error says how to fix it.
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&path)
            .map_err(|e| CreationError::Corrupt { path: path.clone(), detail: e.to_string() })?;
        let owner = std::fs::metadata(&self.dir).map(|d| d.uid()).unwrap_or(meta.uid());
        if meta.mode() & 0o077 != 0 || meta.uid() != owner {
            return Err(CreationError::Corrupt {
                detail: format!(
                    "mode {:o}, owner uid {}: it must be 0600 and owned like its directory (chmod 600 {})",
                    meta.mode() & 0o777,
                    meta.uid(),
                    path.display()
                ),
                path,
            });
        }
        let rec: Creation = serde_json::from_slice(&bytes)
            .map_err(|e| CreationError::Corrupt { path: path.clone(), detail: e.to_string() })?;
        if rec.vm_name != vm_name {
            return Err(CreationError::Corrupt { path, detail: format!("it records the VM name `{}`", rec.vm_name) });
        }
        Ok(Some(rec))
    }

    /// The record for `fresh.vm_name`: the stored one when it is for the same
    /// VMID, else `fresh` (stamped now) after writing it durably.
    pub fn begin(&self, fresh: Creation) -> Result<Creation, CreationError> {
        if let Some(existing) = self.read(&fresh.vm_name)? {
            if existing.vmid != fresh.vmid {
                return Err(CreationError::Mismatch {
                    path: self.path(&fresh.vm_name)?,
                    vm_name: fresh.vm_name,
                    recorded: existing.vmid,
                    requested: fresh.vmid,
                });
            }
            return Ok(existing);
        }
        let path = self.path(&fresh.vm_name)?;
        let stored = Creation { written: crate::journal::Timestamp::now().to_string(), ..fresh };
        if let Some(shared) = &self.shared {
            let vm_name = stored.vm_name.clone();
            let fence = self.fence.as_ref().ok_or_else(|| CreationError::Unfenced { vm_name: vm_name.clone() })?;
            let sealed = shared
                .sealer
                .seal(&stored.host_key_private, &seal_context(&stored.vm_name, stored.vmid))
                .map_err(|source| CreationError::Sealed { vm_name: vm_name.clone(), source })?;
            let rec = SharedCreation {
                vm_name: stored.vm_name.clone(),
                vmid: stored.vmid,
                node: stored.node.clone(),
                host_key_public: stored.host_key_public.clone(),
                host_key_sealed: sealed,
                written: stored.written.clone(),
                fence: fence.revision,
            };
            let json = serde_json::to_vec(&rec)
                .map_err(|e| CreationError::Corrupt { path: path.clone(), detail: e.to_string() })?;
            shared
                .conn
                .fenced(&shared.key(KIND, &vm_name), Some(json), fence, "write a creation record")
                .map_err(Self::shared_err(&vm_name))?;
            return Ok(stored);
        }
        create_private_dir(&self.dir)?;
        let json = serde_json::to_vec_pretty(&stored)
            .map_err(|e| CreationError::Corrupt { path: path.clone(), detail: e.to_string() })?;
        write_private_file_atomic(&path, &json)?;
        Ok(stored)
    }

    /// Every record, sorted by VM name (the VMIDs they reserve). A file that
    /// is not a valid record is an error, never skipped: skipping it could
    /// hand its VMID to another VM.
    pub fn list(&self) -> Result<Vec<Creation>, CreationError> {
        if self.shared.is_some() {
            let mut out = Vec::new();
            for name in self.shared_names()? {
                out.extend(self.read(&name)?);
            }
            return Ok(out);
        }
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StateError::io("list creation records", &self.dir, e).into()),
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).map(str::to_string))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            out.extend(self.read(&name)?);
        }
        Ok(out)
    }

    /// Removes `vm_name`'s record; none is Ok. Durable: a resurrected record
    /// would make a finished VM look half-created.
    pub fn clear(&self, vm_name: &str) -> Result<(), CreationError> {
        let path = self.path(vm_name)?;
        if let Some(shared) = &self.shared {
            let fence = self.fence.as_ref().ok_or_else(|| CreationError::Unfenced { vm_name: vm_name.to_string() })?;
            return shared
                .conn
                .fenced(&shared.key(KIND, vm_name), None, fence, "clear a creation record")
                .map_err(Self::shared_err(vm_name));
        }
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(sync_dir(&self.dir)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StateError::io("remove creation record", &path, e).into()),
        }
    }

    /// The VMIDs every record reserves (of every control node, when shared),
    /// sorted by VM name. A record that cannot be parsed is an error.
    pub fn reserved_vmids(&self) -> Result<Vec<u32>, CreationError> {
        let Some(shared) = &self.shared else {
            return Ok(self.list()?.into_iter().map(|r| r.vmid).collect());
        };
        // Only the VMIDs: the sealed keys are not opened for this.
        let all = shared.conn.list(&shared.prefix(KIND), "list the creation records").map_err(Self::shared_err(""))?;
        let mut out = Vec::new();
        for (key, bytes) in all {
            let rec: SharedCreation = serde_json::from_slice(&bytes).map_err(|e| CreationError::Corrupt {
                path: PathBuf::from(format!("etcd:{key}")),
                detail: e.to_string(),
            })?;
            out.push(rec.vmid);
        }
        Ok(out)
    }

    fn shared_names(&self) -> Result<Vec<String>, CreationError> {
        let Some(shared) = &self.shared else { return Ok(Vec::new()) };
        let prefix = shared.prefix(KIND);
        let all = shared.conn.list(&prefix, "list the creation records").map_err(Self::shared_err(""))?;
        Ok(all.into_iter().filter_map(|(k, _)| k.strip_prefix(&prefix).map(str::to_string)).collect())
    }

    /// The directory holding the records.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn rec(vmid: u32, key: &str) -> Creation {
        Creation {
            vm_name: "test-0".into(),
            vmid,
            node: "pve2".into(),
            host_key_public: format!("ssh-ed25519 {key}"),
            host_key_private: format!("PRIVATE-{key}"),
            written: String::new(),
        }
    }

    #[test]
    fn begin_keeps_the_first_key_for_the_same_vmid_in_a_private_file() {
        let tmp = tempfile::tempdir().unwrap();
        let s = CreationStore::new(tmp.path().join("creating"));
        let first = s.begin(rec(150, "AAA")).unwrap();
        let again = s.begin(rec(150, "BBB")).unwrap();
        assert_eq!(again, first, "a rerun reuses the stored key");
        assert_eq!(again.host_key_private, "PRIVATE-AAA");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(s.dir()), 0o700);
        assert_eq!(mode(&s.dir().join("test-0.json")), 0o600);
    }

    #[test]
    fn a_record_for_another_vmid_is_refused_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let s = CreationStore::new(tmp.path().join("creating"));
        s.begin(rec(150, "AAA")).unwrap();
        let err = s.begin(rec(151, "BBB")).unwrap_err().to_string();
        assert!(err.contains("VMID 150") && err.contains("VMID 151") && err.contains("review"), "{err}");
        assert_eq!(s.read("test-0").unwrap().unwrap().vmid, 150);
    }

    #[test]
    fn clear_is_idempotent_and_a_corrupt_record_is_an_error_not_absent() {
        let tmp = tempfile::tempdir().unwrap();
        let s = CreationStore::new(tmp.path().join("creating"));
        s.clear("test-0").unwrap();
        s.begin(rec(150, "AAA")).unwrap();
        s.clear("test-0").unwrap();
        assert_eq!(s.read("test-0").unwrap(), None);
        std::fs::write(s.dir().join("test-0.json"), b"{not json").unwrap();
        let err = s.read("test-0").unwrap_err().to_string();
        assert!(err.contains("test-0.json") && err.contains("inspect the VM"), "{err}");
        assert!(s.read("../etc").is_err(), "names are validated");
    }

    #[test]
    fn list_returns_every_record_and_refuses_a_corrupt_one() {
        let tmp = tempfile::tempdir().unwrap();
        let s = CreationStore::new(tmp.path().join("creating"));
        assert!(s.list().unwrap().is_empty(), "no directory yet");
        s.begin(rec(150, "AAA")).unwrap();
        s.begin(Creation { vm_name: "test-1".into(), ..rec(151, "BBB") }).unwrap();
        let vmids: Vec<u32> = s.list().unwrap().into_iter().map(|r| r.vmid).collect();
        assert_eq!(vmids, [150, 151]);
        std::fs::write(s.dir().join("test-2.json"), b"[]").unwrap();
        assert!(s.list().is_err(), "a corrupt record is not skipped");
    }

    #[test]
    fn a_record_readable_by_others_is_refused_with_the_chmod_to_run() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let s = CreationStore::new(tmp.path().join("creating"));
        s.begin(rec(150, "AAA")).unwrap();
        let file = s.dir().join("test-0.json");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = s.read("test-0").unwrap_err().to_string();
        assert!(err.contains("chmod 600") && err.contains("644"), "{err}");
    }

    #[test]
    fn debug_output_never_shows_the_private_key() {
        let shown = format!("{:?}", rec(150, "CANARY-7f3a"));
        assert!(!shown.contains("PRIVATE-CANARY-7f3a"), "{shown}");
    }
}
