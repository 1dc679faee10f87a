//! The control-node side of an image: where it is, that it is a regular
//! file, its size and its SHA-256, checked against what the inventory says.
//!
//! Failure modes: a missing path is `not-found` naming the resolved path and
//! the inventory value to fix; a directory or special file, a size or digest
//! mismatch and an unreadable file are `invalid`/`failed` with both values.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::contract::{CapError, ErrorKind};

/// A control-node image that passed [`check_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    /// The absolute path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// The file name (what the node's copy is named after).
    pub name: String,
}

/// Resolve `path` against `project_dir` and check the file is there (and of
/// `size` bytes when given). `what` names the VM and the inventory key for
/// messages (`ha-1: homeassistant_image`).
pub fn check_file(project_dir: &Path, path: &str, size: Option<u64>, what: &str) -> Result<ImageFile, CapError> {
    let given = Path::new(path);
    let abs = if given.is_absolute() { given.to_path_buf() } else { project_dir.join(given) };
    let meta = std::fs::metadata(&abs).map_err(|e| {
        let kind = if e.kind() == std::io::ErrorKind::NotFound { ErrorKind::NotFound } else { ErrorKind::Failed };
        CapError::new(
            kind,
            format!(
                "{what}: the disk image {path} ({}) cannot be read: {e}; put the image there or fix the path in the \
                 inventory (relative paths are read from the directory of cradle.toml); nothing was changed",
                abs.display()
            ),
        )
    })?;
    if !meta.is_file() {
        return Err(CapError::invalid(format!(
            "{what}: the disk image {path} ({}) is not a regular file; name the image file itself",
            abs.display()
        )));
    }
    if let Some(want) = size
        && want != meta.len()
    {
        return Err(CapError::invalid(format!(
            "{what}: the disk image {} is {} bytes, the inventory says {want}: the file is incomplete or another \
             image; replace it or correct the size",
            abs.display(),
            meta.len()
        )));
    }
    let name = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) && !n.starts_with('.'))
        .ok_or_else(|| {
            CapError::invalid(format!(
                "{what}: the disk image {} needs a plain file name (letters, digits, `.`, `_`, `-`), as PVE names \
                 the node's copy after it",
                abs.display()
            ))
        })?;
    Ok(ImageFile { path: abs, size: meta.len(), name })
}

/// The SHA-256 of `file` (lower-case hex), read in 1 MiB blocks.
pub fn sha256_file(file: &Path) -> Result<String, CapError> {
    let mut f = std::fs::File::open(file)
        .map_err(|e| CapError::failed(format!("cannot read the disk image {}: {e}", file.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| CapError::failed(format!("cannot read the disk image {}: {e}", file.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// `want` must be a SHA-256 in hex (either case) equal to `got`.
pub fn check_digest(image: &ImageFile, want: &str, got: &str, what: &str) -> Result<(), CapError> {
    let want_l = want.trim().to_ascii_lowercase();
    if want_l.len() != 64 || !want_l.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CapError::invalid(format!("{what}: the image's sha256 `{want}` is not 64 hex digits")));
    }
    if want_l != got {
        return Err(CapError::invalid(format!(
            "{what}: the disk image {} has SHA-256 {got}, the inventory says {want_l}: the file is damaged or \
             another image; nothing was changed",
            image.path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_image_is_not_found_with_the_resolved_path_and_the_fix() {
        let dir = tempfile::tempdir().expect("dir");
        let e = check_file(dir.path(), "images/haos.qcow2", None, "ha-1: homeassistant_image").expect_err("missing");
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert!(e.message.contains("images/haos.qcow2"), "{}", e.message);
        assert!(e.message.contains(&dir.path().join("images/haos.qcow2").display().to_string()), "{}", e.message);
        assert!(e.message.contains("put the image there or fix the path"), "{}", e.message);
    }

    #[test]
    fn a_wrong_size_a_directory_or_an_odd_name_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("a.qcow2"), b"1234").expect("write");
        let e = check_file(dir.path(), "a.qcow2", Some(5), "x").expect_err("size");
        assert!(e.message.contains("is 4 bytes, the inventory says 5"), "{}", e.message);
        assert!(check_file(dir.path(), ".", None, "x").is_err());
        std::fs::write(dir.path().join("a b.qcow2"), b"1").expect("write");
        assert!(check_file(dir.path(), "a b.qcow2", None, "x").expect_err("name").message.contains("plain file name"));
        let ok = check_file(dir.path(), "a.qcow2", Some(4), "x").expect("ok");
        assert_eq!((ok.size, ok.name.as_str()), (4, "a.qcow2"));
    }

    #[test]
    fn the_digest_must_match_the_inventory() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("a.raw"), b"abc").expect("write");
        let img = check_file(dir.path(), "a.raw", None, "x").expect("ok");
        let got = sha256_file(&img.path).expect("hash");
        assert_eq!(got, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        check_digest(&img, &got.to_ascii_uppercase(), &got, "x").expect("same digest");
        let e = check_digest(&img, &"0".repeat(64), &got, "x").expect_err("other");
        assert!(e.message.contains("damaged or another image"), "{}", e.message);
        assert!(check_digest(&img, "abc", &got, "x").is_err());
    }
}
