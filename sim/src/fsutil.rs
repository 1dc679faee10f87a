//! Owner-only file helpers: every file the simulator writes is 0600, every directory 0700.
//!
//! Failure mode: an I/O error is returned as [`SimError::Io`] naming the path; a write
//! goes to a temporary sibling and is renamed, so a crash never leaves a half file.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::SimError;

/// Create `dir` (and parents) with mode 0700 if missing.
pub fn ensure_dir(dir: &Path) -> Result<(), SimError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| SimError::io("create directory", dir, e))
}

/// Atomically write `data` to `path` with mode 0600, flushed to disk.
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), SimError> {
    write_private_inner(path, data, true)
}

/// Like [`write_private`] without the fsync: for the state file, rewritten after every
/// mutation, where a lost last write after a power cut is acceptable and speed is not.
pub fn write_private_nosync(path: &Path, data: &[u8]) -> Result<(), SimError> {
    write_private_inner(path, data, false)
}

fn write_private_inner(path: &Path, data: &[u8], sync: bool) -> Result<(), SimError> {
    if let Some(parent) = path.parent() {
        ensure_dir(parent)?;
    }
    // A sibling named after the whole file name, so `a.yaml` and `a.yml` never share it.
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp~"));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| SimError::io("create", &tmp, e))?;
    // The mode argument is filtered by umask only to be stricter; enforce 0600 anyway in
    // case the temp file pre-existed with other bits.
    f.set_permissions(fs::Permissions::from_mode(0o600)).map_err(|e| SimError::io("chmod", &tmp, e))?;
    f.write_all(data)
        .and_then(|()| if sync { f.sync_all() } else { Ok(()) })
        .map_err(|e| SimError::io("write", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| SimError::io("rename into place", path, e))
}

/// Read a file if it exists.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, SimError> {
    match fs::read(path) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SimError::io("read", path, e)),
    }
}
