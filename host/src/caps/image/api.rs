//! Staging a control-node image through the Proxmox API (PVE 8.4 and later):
//! `POST /nodes/{node}/storage/{storage}/upload` with content `import`, the
//! image's SHA-256 for PVE's `imgcopy` task to verify, into
//! `<storage>:import/<digest prefix>-<name>`.
//!
//! PVE streams the upload to a temporary file under the node's `/var/tmp`
//! and copies it into the storage only after the checksum matched; a cut
//! upload leaves nothing in the storage. A volume of the final name and the
//! image's size is reused (PVE overwrites on upload, and a copy PVE did not
//! finish is removed by PVE or has another size).
//!
//! Free space: the storage must have room for the image, once. PVE's handler
//! (pve-storage `src/PVE/API2/Storage/Status.pm` `upload`) has the body
//! streamed to `/var/tmp/pveupload-*` on the node that *received* the request,
//! and its `imgcopy` worker `cp`s that file into the storage (`scp` when the
//! storage's node is another) before it unlinks it, so the image is briefly
//! there twice. Both copies fall on one filesystem only when the VM's node is
//! the node the API endpoint reaches *and* the storage's directory shares a
//! filesystem with its `/var/tmp` (a default install's `local`); the calls
//! made here reveal neither, so twice the size is not required (it would
//! refuse uploads that fit). An upload that does not fit fails inside PVE,
//! which removes what it wrote (`write to temporary file failed - No space
//! left on device`, or `import failed` with the partial copy unlinked):
//! nothing is left behind and nothing is used.

use super::Staged;
use super::local::ImageFile;
use crate::caps::context::CapCtx;
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::proxmox::Host as _;

/// The first PVE release whose `upload` takes qcow2/raw/vmdk images as
/// `import` content (pve-storage 8.3.6, shipped with PVE 8.4).
pub const IMPORT_UPLOAD_SINCE: (u32, u32) = (8, 4);

/// Whether `version` (`9.0.3`) is at least [`IMPORT_UPLOAD_SINCE`].
pub fn supports_import_upload(version: &str) -> bool {
    let mut parts = version.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= IMPORT_UPLOAD_SINCE,
        _ => false,
    }
}

/// The image's volume id on `storage`.
pub fn volid(storage: &str, digest: &str, image: &ImageFile) -> String {
    format!("{storage}:import/{}-{}", &digest[..16], image.name)
}

/// Stage `image` (whose SHA-256 is `digest`) as an `import` volume of
/// `storage` on `node`.
pub fn stage_api(
    c: &mut CapCtx,
    node: &str,
    storage: &str,
    image: &ImageFile,
    digest: &str,
    what: &str,
) -> Result<Staged, CapError> {
    let volid = volid(storage, digest, image);
    let filename = volid.split_once("import/").map(|(_, f)| f.to_string()).unwrap_or_default();
    let staged = |uploaded| Staged {
        import_from: volid.clone(),
        via: "api".into(),
        uploaded,
        bytes: image.size,
        sha256: digest.to_string(),
    };
    let listed =
        c.storage_content(node.to_string(), storage.to_string(), Some("import".into())).map_err(CapError::from_wit)?;
    if listed.iter().any(|v| v.volid == volid && v.size == image.size) {
        return Ok(staged(false));
    }
    let status = c.storage_status(node.to_string(), storage.to_string()).map_err(CapError::from_wit)?;
    if status.avail < image.size {
        return Err(CapError::failed(format!(
            "{what}: storage {storage} on node {node} has {} bytes free, the image {} needs {}: free space there (or \
             name another storage with `import` content); nothing was uploaded",
            status.avail, image.name, image.size
        )));
    }
    let timeout = super::long_timeout(image.size);
    let upid = c
        .upload_volume(node, storage, "import", &image.path, &filename, digest, timeout)
        .map_err(CapError::from_wit)?;
    let task = c.wait_task(node.to_string(), upid.clone(), timeout.as_millis() as u64).map_err(CapError::from_wit)?;
    if !task.ok {
        let why = task.exitstatus.unwrap_or_else(|| format!("still running after {} s", timeout.as_secs()));
        return Err(CapError::failed(format!(
            "{what}: PVE did not take the upload of {} into {storage} on {node} ({upid}): {why}",
            image.path.display()
        )));
    }
    Ok(staged(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_uploads_of_disk_images_need_pve_8_4() {
        for (v, ok) in
            [("9.0.3", true), ("8.4.1", true), ("8.3.5", false), ("8.2", false), ("10.0", true), ("x", false)]
        {
            assert_eq!(supports_import_upload(v), ok, "{v}");
        }
    }
}
