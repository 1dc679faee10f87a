//! The control-node side of an image: where it is, that it is a regular
//! file, its size and its SHA-256, checked against what the inventory says.
//!
//! A file is hashed once per process while it is unchanged ([`sha256_cached`]):
//! the check before any side effect hashes it, and staging reuses that digest.
//!
//! Failure modes: a missing path is `not-found` naming the resolved path and
//! the inventory value to fix; a directory or special file, a size or digest
//! mismatch and an unreadable file are `invalid`/`failed` with both values.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

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
             image; put the right image there or correct the size in the inventory; nothing was changed",
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

/// What identifies one version of a file: device, inode, size, and the
/// modification and status-change times (the latter no tool can set back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Version {
    fn of(file: &Path) -> Option<Version> {
        let m = std::fs::metadata(file).ok()?;
        Some(Version {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// The digests this process computed, by path, with the file version each is of.
fn digests() -> &'static Mutex<HashMap<PathBuf, (Version, String)>> {
    static DIGESTS: OnceLock<Mutex<HashMap<PathBuf, (Version, String)>>> = OnceLock::new();
    DIGESTS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The SHA-256 of `file`, computed once per process while the file keeps its
/// version (device, inode, size, mtime and ctime, read before and after
/// hashing; a file that changed while it was read is not remembered).
///
/// A digest this returns is never the last word on the bytes that leave the
/// control node: the node checks the uploaded bytes against it (PVE's
/// `imgcopy` checksum, or `sha256sum` of the `.part` file over SSH), so a file
/// rewritten within one timestamp tick after it was hashed is refused there,
/// never staged under a wrong digest.
pub fn sha256_cached(file: &Path) -> Result<String, CapError> {
    let before = Version::of(file);
    if let Some(v) = before {
        let known = digests().lock().unwrap_or_else(|e| e.into_inner()).get(file).cloned();
        if let Some((seen, digest)) = known
            && seen == v
        {
            return Ok(digest);
        }
    }
    let digest = sha256_file(file)?;
    if let Some(v) = before
        && Version::of(file) == Some(v)
    {
        digests().lock().unwrap_or_else(|e| e.into_inner()).insert(file.to_path_buf(), (v, digest.clone()));
    }
    Ok(digest)
}

/// `want`, the inventory's SHA-256, as lower-case hex: 64 hex digits.
pub fn parse_sha256(want: &str, what: &str) -> Result<String, CapError> {
    let want_l = want.trim().to_ascii_lowercase();
    if want_l.len() != 64 || !want_l.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CapError::invalid(format!(
            "{what}: the image's sha256 `{want}` is not 64 hex digits; correct it in the inventory; nothing was \
             changed"
        )));
    }
    Ok(want_l)
}

/// `want` must be a SHA-256 in hex (either case) equal to `got`.
pub fn check_digest(image: &ImageFile, want: &str, got: &str, what: &str) -> Result<(), CapError> {
    let want_l = parse_sha256(want, what)?;
    if want_l != got {
        return Err(CapError::invalid(format!(
            "{what}: the disk image {} has SHA-256 {got}, the inventory says {want_l}: the file is damaged or \
             another image; put the right image there (download it again) or correct the sha256 in the \
             inventory; nothing was changed",
            image.path.display()
        )));
    }
    Ok(())
}

/// [`check_file`], then the SHA-256 against `sha256` when the inventory gives
/// one (hashed through [`sha256_cached`]); the digest when it was computed.
pub fn check_image(
    project_dir: &Path,
    path: &str,
    size: Option<u64>,
    sha256: Option<&str>,
    what: &str,
) -> Result<(ImageFile, Option<String>), CapError> {
    let image = check_file(project_dir, path, size, what)?;
    let Some(want) = sha256 else { return Ok((image, None)) };
    parse_sha256(want, what)?;
    let got = sha256_cached(&image.path)?;
    check_digest(&image, want, &got, what)?;
    Ok((image, Some(got)))
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

    #[test]
    fn a_digest_is_reused_only_while_the_file_is_unchanged() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("a.raw");
        std::fs::write(&file, b"abc").expect("write");
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_cached(&file).expect("hash"), abc);
        assert_eq!(sha256_cached(&file).expect("cached"), abc);
        // Rewritten in place, same size: another ctime (and mtime).
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(&file, b"abd").expect("rewrite");
        let abd = sha256_file(&file).expect("hash");
        assert_ne!(abd, abc);
        assert_eq!(sha256_cached(&file).expect("rehashed"), abd);
        // Replaced by another file (another inode) under the same name.
        let other = dir.path().join("b.raw");
        std::fs::write(&other, b"abc").expect("write");
        std::fs::rename(&other, &file).expect("rename");
        assert_eq!(sha256_cached(&file).expect("rehashed"), abc);
    }

    #[test]
    fn the_check_verifies_the_digest_when_the_inventory_gives_one() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("a.raw"), b"abc").expect("write");
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let (_, digest) = check_image(dir.path(), "a.raw", Some(3), None, "x").expect("no digest given");
        assert_eq!(digest, None, "not hashed when the inventory gives no digest");
        let (_, digest) = check_image(dir.path(), "a.raw", None, Some(abc), "x").expect("right digest");
        assert_eq!(digest.as_deref(), Some(abc));
        let e = check_image(dir.path(), "a.raw", None, Some(&"1".repeat(64)), "x").expect_err("wrong digest");
        assert!(e.message.contains(abc) && e.message.contains(&"1".repeat(64)), "{}", e.message);
        assert!(e.message.contains("correct the sha256 in the inventory"), "{}", e.message);
        let e = check_image(dir.path(), "a.raw", None, Some("xyz"), "x").expect_err("not a digest");
        assert!(e.message.contains("not 64 hex digits"), "{}", e.message);
    }
}
