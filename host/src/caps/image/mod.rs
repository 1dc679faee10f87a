//! The image service: a VM type's baked disk image, from the control node (or
//! a storage of the cluster) to a source a new VM's disk is imported from.
//! No capability of its own: its remote steps are `proxmox` and `ssh` calls
//! through their adapters (checked against the caller's grants, journaled).
//!
//! Contract:
//! - [`check_image`] runs before any side effect (the workflow's `image`
//!   step, and `cradle provision --check`). A control-node image must exist
//!   as a regular file (a relative path is read from the project directory);
//!   its size and SHA-256 must match the inventory's when given: the file is
//!   hashed there, once per process while it is unchanged, and staging reuses
//!   that digest. A volume already on Proxmox storage
//!   (`local:import/haos.qcow2`) must be listed by that storage on the VM's
//!   node (`disk_image::check`). Never a fallback to another image.
//! - [`stage`] brings a control-node image to the node (`stage.rs`), checking
//!   the digest again (the file may have changed since the check). Through
//!   the API (`api.rs`) where the cluster takes disk images as `import`
//!   content (PVE 8.4 and later, on a storage with `import` content): PVE
//!   verifies the SHA-256 and only then moves the file into the storage, and
//!   the result is the volume `local:import/<digest>-<name>`. Otherwise (or
//!   with `transfer: "ssh"`) over SSH into a directory on the node's disk
//!   (default [`DEFAULT_NODE_DIR`]; any directory under `/tmp`, or on a
//!   tmpfs, is refused before anything is created), after a free-space check,
//!   written to a hidden `.part` name, verified by size and SHA-256 on the
//!   node, and only then renamed to its final name, which carries the image's
//!   digest. A complete image already there (same name, same digest) is
//!   reused; a `.part` file is never trusted: a rerun removes it and writes a
//!   new one (a new file, so an upload a killed run left running writes only
//!   to the old, unlinked one and never reaches the final name).
//!   The result is then the final path on the node, which `qm disk import`
//!   on the node attaches (PVE lets no API token import from a path).
//!
//! Failure modes: a missing image, a size or digest mismatch (at the check,
//! before the workflow's first side effect), a `/tmp` or tmpfs directory, too
//! little free space on the node (at staging) are refused with the path, both
//! values and the fix (`not-found`, `invalid`, `failed`), before anything is
//! written; an upload that fails or is cut leaves only its `.part` file;
//! adapter errors pass through.

mod api;
pub mod iso;
mod local;
pub mod media;
pub(crate) mod rhai;
mod stage;

pub use api::{IMPORT_UPLOAD_SINCE, supports_import_upload};
pub use local::{ImageFile, check_file, check_image};
pub use stage::{DEFAULT_NODE_DIR, StageOptions, Transfer, stage};

use std::time::Duration;

use serde::Serialize;

/// Where a VM type's image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// A file on the control node, as the inventory names it.
    File {
        /// The path as written (relative paths are read from the project directory).
        path: String,
        /// The size in bytes the inventory expects, if it says.
        size: Option<u64>,
        /// The SHA-256 (lower-case hex) the inventory expects, if it says.
        sha256: Option<String>,
    },
    /// A volume already on Proxmox storage (`local:import/haos.qcow2`).
    Volume(String),
}

/// What [`stage`] did (through the API or over SSH).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Staged {
    /// The `import-from` source: the `import` volume (API), or the final
    /// path on the node (SSH, attached with `qm disk import`).
    pub import_from: String,
    /// `api` (an `import` volume) or `ssh` (a file on the node).
    pub via: String,
    /// Whether bytes were sent (false: a complete copy was already there).
    pub uploaded: bool,
    /// The image's size.
    pub bytes: u64,
    /// Its SHA-256.
    pub sha256: String,
}

/// A transfer's (or a remote checksum's) time limit: 10 MB/s at the worst,
/// plus a minute.
pub(crate) fn long_timeout(size: u64) -> Duration {
    Duration::from_secs(60 + size / 10_000_000)
}
