//! Stand-in for `host/src/state`'s private-file write (its module is entangled
//! with the journal and process state). The fuzz target writes its own
//! scratch file; atomicity is not what is fuzzed.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Write `bytes` to `path`, owner-only.
pub fn write_private_file_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)
}
