//! The NoCloud seed ISO of a qemu guest, built as Proxmox VE builds it
//! (`PVE::QemuServer::Cloudinit::commit_cloudinit_disk`): the files `user-data`,
//! `network-config`, `meta-data` and `vendor-data` in one directory, turned into an
//! ISO 9660 image labelled `cidata` by `genisoimage -quiet -iso-level 3 -R -V cidata`.
//!
//! Failure modes: `genisoimage` missing (the error says which package gives it) or
//! failing (its stderr is in the error). The directory and the ISO are the VM's own
//! files (0700 / 0600), rewritten at every cold start as PVE regenerates the drive.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::guest::CiSeed;

/// Write the seed files and the ISO under `dir`; returns the ISO's path.
pub fn build(dir: &Path, seed: &CiSeed) -> Result<PathBuf, String> {
    let files = dir.join("cidata");
    let _ = std::fs::remove_dir_all(&files);
    crate::fsutil::ensure_dir(&files).map_err(|e| e.to_string())?;
    for (name, text) in [
        ("user-data", &seed.user),
        ("network-config", &seed.network),
        ("meta-data", &seed.meta),
        ("vendor-data", &seed.vendor),
    ] {
        crate::fsutil::write_private(&files.join(name), text.as_bytes()).map_err(|e| e.to_string())?;
    }
    let iso = dir.join("cloudinit.iso");
    let out = Command::new("genisoimage")
        .args(["-quiet", "-iso-level", "3", "-R", "-V", "cidata", "-o"])
        .arg(&iso)
        .arg(&files)
        .output()
        .map_err(|e| format!("cannot run genisoimage ({e}); install Debian's genisoimage package"))?;
    if !out.status.success() {
        return Err(format!("genisoimage failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(iso)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_is_an_iso_labelled_cidata_with_the_four_nocloud_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let seed = CiSeed {
            user: "#cloud-config\nhostname: q\n".into(),
            network: "version: 2\n".into(),
            meta: "instance-id: abc\n".into(),
            vendor: String::new(),
            instance_id: "abc".into(),
        };
        let iso = build(dir.path(), &seed).expect("iso");
        let bytes = std::fs::read(&iso).expect("read iso");
        // ISO 9660: the primary volume descriptor at sector 16, volume id at offset 40.
        let pvd = &bytes[16 * 2048..17 * 2048];
        assert_eq!(&pvd[1..6], b"CD001");
        assert_eq!(String::from_utf8_lossy(&pvd[40..72]).trim_end(), "cidata");
        let listing = Command::new("isoinfo").args(["-R", "-f", "-i"]).arg(&iso).output().expect("isoinfo");
        let names = String::from_utf8_lossy(&listing.stdout);
        for f in ["/user-data", "/network-config", "/meta-data", "/vendor-data"] {
            assert!(names.lines().any(|l| l == f), "{f} missing from {names}");
        }
    }
}
