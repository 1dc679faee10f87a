//! The nodes' filesystems with capacity: the root filesystem (`/dev/mapper/pve-root`,
//! ext4, holding `/var/tmp` and the `dir` storages' paths) and `/tmp` (a tmpfs).
//!
//! Contract: the used space of a filesystem on a node is the bytes of the files under it
//! in the node's directory (`<root>/nodes/<node>/`, `/tmp` apart), found by a walk and
//! then kept in a per-node cache that writers through [`Writer`] update as they write;
//! any other change (rm, mv, a finished upload) calls [`invalidate`], so the next
//! question walks again. A write that would exceed the capacity writes what fits and
//! then fails with `No space left on device`, leaving the partial file, as a full disk
//! does. Never panics; I/O errors while walking count as nothing used.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::sim::{Sim, lock};

/// Which filesystem of a node a path is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fs {
    /// `/` (ext4 on `/dev/mapper/pve-root`).
    Root,
    /// `/tmp` (tmpfs).
    Tmp,
}

impl Fs {
    /// The filesystem holding the node path `abs`.
    pub fn of(abs: &str) -> Fs {
        if abs == "/tmp" || abs.starts_with("/tmp/") { Fs::Tmp } else { Fs::Root }
    }

    /// `df`'s Filesystem column.
    pub fn source(self) -> &'static str {
        match self {
            Fs::Root => "/dev/mapper/pve-root",
            Fs::Tmp => "tmpfs",
        }
    }

    /// `df`'s Mounted on column.
    pub fn target(self) -> &'static str {
        match self {
            Fs::Root => "/",
            Fs::Tmp => "/tmp",
        }
    }

    /// `findmnt -o FSTYPE`.
    pub fn fstype(self) -> &'static str {
        match self {
            Fs::Root => "ext4",
            Fs::Tmp => "tmpfs",
        }
    }
}

/// Used bytes per (node, filesystem), when known.
#[derive(Debug, Default)]
pub struct Usage {
    used: std::sync::Mutex<HashMap<(String, Fs), u64>>,
}

/// `(total, used, avail)` of a filesystem on a node.
#[derive(Debug, Clone, Copy)]
pub struct Space {
    /// Capacity.
    pub total: u64,
    /// Bytes of files on it.
    pub used: u64,
    /// `total - used` (no reserved blocks are modelled).
    pub avail: u64,
}

fn capacity(sim: &Sim, fs: Fs) -> u64 {
    match fs {
        Fs::Root => sim.cfg.node_disk.root_bytes,
        Fs::Tmp => sim.cfg.node_disk.tmp_bytes,
    }
}

fn walk(dir: &Path, skip: Option<&Path>) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    let mut sum = 0;
    for e in rd.flatten() {
        let path = e.path();
        if skip.is_some_and(|s| s == path) {
            continue;
        }
        let Ok(md) = std::fs::symlink_metadata(&path) else { continue };
        if md.is_dir() {
            sum += walk(&path, skip);
        } else if md.is_file() {
            sum += md.len();
        }
    }
    sum
}

fn measure(sim: &Sim, node: &str, fs: Fs) -> u64 {
    let base = sim.node_path(node, "/");
    let tmp = sim.node_path(node, "/tmp");
    match fs {
        Fs::Root => walk(&base, Some(&tmp)),
        Fs::Tmp => walk(&tmp, None),
    }
}

/// The space of `fs` on `node` now.
pub fn space(sim: &Sim, node: &str, fs: Fs) -> Space {
    let mut map = lock(&sim.disk_usage.used);
    let used = *map.entry((node.to_string(), fs)).or_insert_with(|| measure(sim, node, fs));
    let total = capacity(sim, fs);
    Space { total, used, avail: total.saturating_sub(used) }
}

/// Forget the cached usage of a node (after rm, mv, rename, an upload's end).
pub fn invalidate(sim: &Sim, node: &str) {
    lock(&sim.disk_usage.used).retain(|(n, _), _| n != node);
}

/// Account `want` more bytes on `fs`: returns how many fit (all of them, or fewer when
/// the filesystem fills up).
fn reserve(sim: &Sim, node: &str, fs: Fs, want: u64) -> u64 {
    let mut map = lock(&sim.disk_usage.used);
    let used = map.entry((node.to_string(), fs)).or_insert_with(|| measure(sim, node, fs));
    let fits = want.min(capacity(sim, fs).saturating_sub(*used));
    *used += fits;
    fits
}

/// The error text of a full filesystem.
pub const ENOSPC: &str = "No space left on device";

/// A file being written on a node, checked against its filesystem's capacity.
pub struct Writer {
    file: std::io::BufWriter<File>,
    node: String,
    fs: Fs,
    /// The real path written.
    pub path: PathBuf,
    /// Bytes written so far.
    pub written: u64,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("path", &self.path).field("written", &self.written).finish()
    }
}

impl Writer {
    /// Create (truncate) `real`, the node path `abs` of `node`, mode 0600. When
    /// `replace`, an existing entry (a symlink) is removed first, as `install` does.
    pub fn create(sim: &Sim, node: &str, abs: &str, real: &Path, replace: bool) -> std::io::Result<Writer> {
        use std::os::unix::fs::OpenOptionsExt;
        if replace {
            let _ = std::fs::remove_file(real);
        }
        let file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(real)?;
        // Truncating freed what the file held.
        invalidate(sim, node);
        Ok(Writer {
            file: std::io::BufWriter::with_capacity(1 << 20, file),
            node: node.to_string(),
            fs: Fs::of(abs),
            path: real.to_path_buf(),
            written: 0,
        })
    }

    /// Write `data`; `Err` is the `strerror` text (`No space left on device` once the
    /// filesystem is full, after writing what fits).
    pub fn write(&mut self, sim: &Sim, data: &[u8]) -> Result<(), String> {
        let fits = reserve(sim, &self.node, self.fs, data.len() as u64) as usize;
        let fits = fits.min(data.len());
        self.file.write_all(&data[..fits]).map_err(|e| io_text(&e))?;
        self.written += fits as u64;
        if fits < data.len() {
            let _ = self.file.flush();
            return Err(ENOSPC.into());
        }
        Ok(())
    }

    /// Flush to the file (no fsync: the page cache is what a fast upload needs).
    pub fn finish(mut self) -> Result<u64, String> {
        self.file.flush().map_err(|e| io_text(&e))?;
        Ok(self.written)
    }
}

/// An I/O error as coreutils prints it (`strerror`, no "(os error N)").
pub fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
