//! Disk image files as `qemu-img info` sees them: format and virtual size.
//!
//! Contract: two readers, as pve-storage `PVE::Storage::file_size_info` is called.
//! [`untrusted`] checks a file against the format its name claims (the "untrusted
//! image" check of `PVE/Storage/Plugin.pm` `file_size_info(..., $untrusted = 1)`):
//! qcow2 must start with the `QFI\xfb` magic and have no backing file; raw is any file;
//! vmdk must be a sparse extent (`KDMV` magic). [`detect`] is `'auto-detect'` (what
//! `qm disk import` uses): qcow2 by its magic, sparse vmdk by its magic, anything else
//! raw; backing files are allowed. Sizes: qcow2 = the big-endian u64 at byte 24, vmdk =
//! the little-endian sector count at byte 12 × 512, raw = the file length; the data
//! size is always the file length. Failure modes are PVE's texts (`failed to query file
//! information with qemu-img`, `backing file not allowed for untrusted image '<f>'!`);
//! other formats are refused as not modelled. Never panics.

use std::io::Read;
use std::path::Path;

/// What a reader found out about an image file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// `qcow2`, `vmdk` or `raw`.
    pub format: &'static str,
    /// The disk size the image describes (bytes).
    pub virtual_size: u64,
    /// The file's length (bytes of data to copy).
    pub data: u64,
}

const QCOW2_MAGIC: &[u8; 4] = b"QFI\xfb";
const VMDK_MAGIC: &[u8; 4] = b"KDMV";

fn head(file: &Path) -> Option<[u8; 32]> {
    let mut h = [0u8; 32];
    std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut h)).ok().map(|()| h)
}

fn be64(h: &[u8; 32], at: usize) -> u64 {
    h[at..at + 8].try_into().map(u64::from_be_bytes).unwrap_or(0)
}

fn le64(h: &[u8; 32], at: usize) -> u64 {
    h[at..at + 8].try_into().map(u64::from_le_bytes).unwrap_or(0)
}

/// The untrusted check of a file claimed to be `format` (`shown` names it in errors).
pub fn untrusted(file: &Path, shown: &str, format: &str) -> Result<ImageInfo, String> {
    let md = std::fs::metadata(file).map_err(|_| format!("failed to stat '{shown}'"))?;
    let bad = || "failed to query file information with qemu-img".to_string();
    match format {
        "raw" => Ok(ImageInfo { format: "raw", virtual_size: md.len(), data: md.len() }),
        "qcow2" => {
            let h = head(file).filter(|h| &h[..4] == QCOW2_MAGIC).ok_or_else(bad)?;
            if be64(&h, 8) != 0 {
                return Err(format!("backing file not allowed for untrusted image '{shown}'!"));
            }
            Ok(ImageInfo { format: "qcow2", virtual_size: be64(&h, 24), data: md.len() })
        }
        "vmdk" => {
            let h = head(file).filter(|h| &h[..4] == VMDK_MAGIC).ok_or_else(bad)?;
            Ok(ImageInfo { format: "vmdk", virtual_size: le64(&h, 12).saturating_mul(512), data: md.len() })
        }
        other => Err(format!("simulator: '{other}' images are not modelled")),
    }
}

/// `file_size_info(FILE, undef, 'auto-detect')`: the format from the file's content.
pub fn detect(file: &Path) -> Result<ImageInfo, String> {
    let md = std::fs::metadata(file).map_err(|_| "failed to query file information with qemu-img".to_string())?;
    let h = head(file);
    Ok(match h {
        Some(h) if &h[..4] == QCOW2_MAGIC => ImageInfo { format: "qcow2", virtual_size: be64(&h, 24), data: md.len() },
        Some(h) if &h[..4] == VMDK_MAGIC => {
            ImageInfo { format: "vmdk", virtual_size: le64(&h, 12).saturating_mul(512), data: md.len() }
        }
        _ => ImageInfo { format: "raw", virtual_size: md.len(), data: md.len() },
    })
}

/// The format a file name claims by its extension (lower-cased), if any.
pub fn claimed_format(file: &Path) -> String {
    file.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default()
}
