//! Pending-finalization checkpoints (invariant 4: creation and finalization are
//! separate).
//!
//! Contract:
//! - One owner-only JSON file per VM, `<dir>/<vm_name>.json`, written before the
//!   cloud-init drive is removed and cleared only after a verified reboot.
//! - [`CheckpointStore::write`] is atomic and durable (temp file 0600, fsync,
//!   rename, fsync of the directory) and stamps `written` with the current time.
//! - [`CheckpointStore::read`] returns `None` only when there is no file. A file
//!   that cannot be read or parsed, or that records another VM name than its file
//!   name, is an error naming the file — never treated as absent, since "absent"
//!   would let a rerun clone a second VM.
//! - [`CheckpointStore::clear`] is idempotent (no file is Ok) but refuses a
//!   checkpoint for another VMID ([`CheckpointError::Mismatch`]): that needs review.
//! - VM names must match `[A-Za-z0-9][A-Za-z0-9._-]{0,62}`, which rules out path
//!   traversal and hidden files.

use std::io;
use std::path::{Path, PathBuf};

mod host;
pub(crate) mod rhai;
pub mod scope;

use serde::{Deserialize, Serialize};

use crate::caps::coordination::etcd::{EtcdFailure, Fence};
use crate::caps::coordination::records::SharedRecords;
use crate::state::{StateError, create_private_dir, sync_dir, write_private_file_atomic};

/// The shared records' kind (`<prefix>checkpoints/<vm>`).
const KIND: &str = "checkpoints";

/// A pending finalization (the WIT `checkpoint.finalization` record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finalization {
    /// The canonical VM name.
    pub vm_name: String,
    /// The VMID the checkpoint belongs to.
    pub vmid: u32,
    /// The node the VM was on when it was written.
    pub node: String,
    /// The finalization stage reached (`drive-removal`, `reboot`, ...).
    pub stage: String,
    /// When it was written (RFC 3339); set by [`CheckpointStore::write`].
    pub written: String,
    /// The fencing token of the VM's lock it was written under (shared
    /// records only); set by [`CheckpointStore::write`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<i64>,
    /// The guest's public host key, so a rerun on another control node can
    /// pin it before it connects (workflows write it; not part of the WIT record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<String>,
}

/// Why a checkpoint operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The VM name cannot be a checkpoint file name.
    #[error(
        "invalid VM name `{name}` for a checkpoint: names must start with a letter or \
         digit and contain only letters, digits, `.`, `_` and `-` (at most 63 characters)"
    )]
    InvalidName {
        /// The offending name (control characters escaped).
        name: String,
    },
    /// The checkpoint exists but cannot be read.
    #[error(
        "cannot read checkpoint {}: {source}; check the file's permissions and the \
         disk — the checkpoint decides whether the VM is finalized, so it is not skipped",
        path.display()
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The checkpoint file is not a valid checkpoint.
    #[error(
        "checkpoint {} is corrupt ({detail}); inspect it and the VM (its VMID and whether \
         its cloud-init drive is still attached) before removing the file",
        path.display()
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The checkpoint belongs to another VMID than the one being cleared.
    #[error(
        "checkpoint {} for `{vm_name}` records VMID {recorded}, not VMID {requested}; \
         review which VM is the real `{vm_name}` before clearing it",
        path.display()
    )]
    Mismatch {
        /// The VM name.
        vm_name: String,
        /// The VMID in the file.
        recorded: u32,
        /// The VMID the caller asked to clear.
        requested: u32,
        /// The file.
        path: PathBuf,
    },
    /// Writing or removing failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The shared store (etcd) failed or refused the write.
    #[error("checkpoint of `{vm_name}`: {source}")]
    Shared {
        /// The VM name.
        vm_name: String,
        /// What failed.
        source: EtcdFailure,
    },
    /// A shared checkpoint written without the VM's lock.
    #[error(
        "checkpoint of `{vm_name}`: shared checkpoints are written only by the run that holds the VM's lock \
         (its fencing token goes with every write), and this run does not hold it"
    )]
    Unfenced {
        /// The VM name.
        vm_name: String,
    },
    /// Removing the file failed.
    #[error("cannot remove checkpoint {}: {source}", path.display())]
    Remove {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Checkpoints in one owner-only directory (normally `StateDir::checkpoints`),
/// or, with `[coordination] backend = "etcd"`, in etcd
/// ([`SharedRecords`]), written under the fencing token of the VM's lock.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    shared: Option<SharedRecords>,
    fence: Option<Fence>,
}

impl CheckpointStore {
    /// A store in `dir`; the directory is created 0700 on the first write.
    pub fn new(dir: PathBuf) -> CheckpointStore {
        CheckpointStore { dir, shared: None, fence: None }
    }

    /// The same store with its records in etcd (`None`: in `dir`).
    pub fn shared(self, shared: Option<SharedRecords>) -> CheckpointStore {
        CheckpointStore { shared, ..self }
    }

    /// This store for a run holding the VM's lock under `fence`.
    pub fn under(&self, fence: Option<Fence>) -> CheckpointStore {
        CheckpointStore { fence, ..self.clone() }
    }

    /// The shared records, when the checkpoints are in etcd.
    pub fn shared_records(&self) -> Option<&SharedRecords> {
        self.shared.as_ref()
    }

    /// The fencing token this store writes under.
    pub fn fence(&self) -> Option<&Fence> {
        self.fence.as_ref()
    }

    fn shared_err(vm_name: &str) -> impl FnOnce(EtcdFailure) -> CheckpointError + '_ {
        move |source| CheckpointError::Shared { vm_name: vm_name.to_string(), source }
    }

    /// Parse a checkpoint of `vm_name` read from `origin`.
    fn parse(vm_name: &str, bytes: &[u8], origin: PathBuf) -> Result<Finalization, CheckpointError> {
        let cp: Finalization = serde_json::from_slice(bytes)
            .map_err(|e| CheckpointError::Corrupt { path: origin.clone(), detail: e.to_string() })?;
        if cp.vm_name != vm_name {
            return Err(CheckpointError::Corrupt {
                path: origin,
                detail: format!("it records the VM name `{}`", cp.vm_name),
            });
        }
        Ok(cp)
    }

    /// The file of `vm_name`'s checkpoint (after validating the name).
    pub fn path(&self, vm_name: &str) -> Result<PathBuf, CheckpointError> {
        validate_name(vm_name)?;
        Ok(self.dir.join(format!("{vm_name}.json")))
    }

    /// The checkpoint of `vm_name`, or `None` if it has none.
    pub fn read(&self, vm_name: &str) -> Result<Option<Finalization>, CheckpointError> {
        let path = self.path(vm_name)?;
        if let Some(shared) = &self.shared {
            let key = shared.key(KIND, vm_name);
            let found = shared.conn.get(&key, "read a checkpoint").map_err(Self::shared_err(vm_name))?;
            return found.map(|b| Self::parse(vm_name, &b, PathBuf::from(format!("etcd:{key}")))).transpose();
        }
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(CheckpointError::Unreadable { path, source }),
        };
        Self::parse(vm_name, &bytes, path).map(Some)
    }

    /// Writes (or replaces) the checkpoint durably with `written` set to now, and
    /// returns what was stored.
    pub fn write(&self, cp: &Finalization) -> Result<Finalization, CheckpointError> {
        let path = self.path(&cp.vm_name)?;
        let written = crate::journal::Timestamp::now().to_string();
        if let Some(shared) = &self.shared {
            let fence = self.fence.as_ref().ok_or_else(|| CheckpointError::Unfenced { vm_name: cp.vm_name.clone() })?;
            let stored = Finalization { written, fence: Some(fence.revision), ..cp.clone() };
            let json = serde_json::to_vec(&stored)
                .map_err(|e| CheckpointError::Corrupt { path: path.clone(), detail: e.to_string() })?;
            let key = shared.key(KIND, &cp.vm_name);
            shared.conn.fenced(&key, Some(json), fence, "write a checkpoint").map_err(Self::shared_err(&cp.vm_name))?;
            return Ok(stored);
        }
        create_private_dir(&self.dir)?;
        let stored = Finalization { written, fence: None, ..cp.clone() };
        let json = serde_json::to_vec_pretty(&stored)
            .map_err(|e| CheckpointError::Corrupt { path: path.clone(), detail: e.to_string() })?;
        write_private_file_atomic(&path, &json)?;
        Ok(stored)
    }

    /// Removes `vm_name`'s checkpoint if it is for `vmid`; none is Ok.
    pub fn clear(&self, vm_name: &str, vmid: u32) -> Result<(), CheckpointError> {
        let Some(cp) = self.read(vm_name)? else {
            return Ok(());
        };
        let path = self.path(vm_name)?;
        if cp.vmid != vmid {
            return Err(CheckpointError::Mismatch {
                vm_name: vm_name.to_string(),
                recorded: cp.vmid,
                requested: vmid,
                path,
            });
        }
        if let Some(shared) = &self.shared {
            let fence =
                self.fence.as_ref().ok_or_else(|| CheckpointError::Unfenced { vm_name: vm_name.to_string() })?;
            let key = shared.key(KIND, vm_name);
            return shared.conn.fenced(&key, None, fence, "clear a checkpoint").map_err(Self::shared_err(vm_name));
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(CheckpointError::Remove { path, source }),
        }
        // Make the removal durable: a resurrected checkpoint would re-finalize.
        sync_dir(&self.dir)?;
        Ok(())
    }

    /// The directory holding the checkpoints.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

pub(crate) fn validate_name(name: &str) -> Result<(), CheckpointError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if first_ok && rest_ok && name.len() <= 63 {
        Ok(())
    } else {
        Err(CheckpointError::InvalidName { name: name.escape_debug().to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn store() -> (tempfile::TempDir, CheckpointStore) {
        let tmp = tempfile::tempdir().unwrap();
        let s = CheckpointStore::new(tmp.path().join("checkpoints"));
        (tmp, s)
    }

    fn cp(vm: &str, vmid: u32) -> Finalization {
        Finalization {
            vm_name: vm.into(),
            vmid,
            node: "pve1".into(),
            stage: "drive-removal".into(),
            written: String::new(),
            fence: None,
            host_key: None,
        }
    }

    #[test]
    fn write_then_read_round_trips_with_a_host_set_timestamp_and_private_modes() {
        let (_t, s) = store();
        assert_eq!(s.read("test-0").unwrap(), None);
        let stored = s.write(&cp("test-0", 120)).unwrap();
        assert!(crate::journal::Timestamp::parse(&stored.written).is_ok(), "{stored:?}");
        assert_eq!(s.read("test-0").unwrap(), Some(stored));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&s.path("test-0").unwrap()), 0o600);
        assert_eq!(mode(s.dir()), 0o700);
    }

    #[test]
    fn clear_is_idempotent_for_the_right_vmid() {
        let (_t, s) = store();
        s.write(&cp("test-0", 120)).unwrap();
        s.clear("test-0", 120).unwrap();
        assert_eq!(s.read("test-0").unwrap(), None);
        s.clear("test-0", 120).unwrap();
    }

    #[test]
    fn clear_for_another_vmid_is_a_mismatch_naming_both_and_keeps_the_file() {
        let (_t, s) = store();
        s.write(&cp("test-0", 120)).unwrap();
        let err = s.clear("test-0", 121).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, CheckpointError::Mismatch { recorded: 120, requested: 121, .. }));
        assert!(msg.contains("VMID 120") && msg.contains("VMID 121") && msg.contains("review"));
        assert!(s.read("test-0").unwrap().is_some());
    }

    #[test]
    fn traversal_and_malformed_names_are_refused() {
        let (_t, s) = store();
        for bad in ["", "../etc/passwd", ".hidden", "a/b", "-x", &"a".repeat(64), "a\0b"] {
            let err = s.read(bad).unwrap_err();
            assert!(matches!(err, CheckpointError::InvalidName { .. }), "{bad:?}: {err}");
        }
        assert!(s.write(&cp("../x", 1)).is_err());
        assert!(s.read(&"a".repeat(63)).unwrap().is_none());
    }

    #[test]
    fn corrupt_or_misnamed_checkpoints_are_errors_not_absent() {
        let (_t, s) = store();
        std::fs::create_dir_all(s.dir()).unwrap();
        std::fs::write(s.path("test-0").unwrap(), "{\"vm_name\":").unwrap();
        let err = s.read("test-0").unwrap_err().to_string();
        assert!(err.contains("test-0.json is corrupt"), "{err}");
        assert!(s.clear("test-0", 120).is_err());
        let other = serde_json::to_vec(&cp("test-1", 121)).unwrap();
        std::fs::write(s.path("test-0").unwrap(), other).unwrap();
        let err = s.read("test-0").unwrap_err().to_string();
        assert!(err.contains("records the VM name `test-1`"), "{err}");
    }

    #[test]
    fn unreadable_checkpoint_is_an_error() {
        let (_t, s) = store();
        // A directory where the file should be: unreadable as a file, even as root.
        std::fs::create_dir_all(s.path("test-0").unwrap()).unwrap();
        let err = s.read("test-0").unwrap_err();
        assert!(matches!(err, CheckpointError::Unreadable { .. }), "{err}");
    }
}
