//! CD-ROM drives in a VM config update (qemu-server `PVE/API2/Qemu.pm`
//! `$check_drive_param`, `PVE/QemuServer.pm` `vmconfig_update_disk`).
//!
//! Contract: an ISO volume (`STORAGE:iso/F`) without `media=cdrom` is the parameter
//! error `explicit 'media=cdrom' is required for iso images`; an ISO that exists on the
//! node gets its `size=`. A medium change on a running VM is `hotplug.rs`'s.

use crate::model::{ids, props};
use crate::sim::Sim;

/// An ISO volume (`STORAGE:iso/F`) needs `media=cdrom` (`$check_drive_param`); its
/// `size=` is filled in from the file on the node when it exists (Qemu.pm).
pub fn iso_drive(sim: &Sim, node: &str, v: &str) -> Result<String, String> {
    let vol = v.split(',').next().unwrap_or("");
    let Some((sid, file)) = vol.split_once(':').and_then(|(s, n)| Some((s, n.strip_prefix("iso/")?))) else {
        return Ok(v.to_string());
    };
    if props::prop(v, "media").as_deref() != Some("cdrom") {
        return Err("explicit 'media=cdrom' is required for iso images".into());
    }
    let len = sim
        .storage_dir(node, sid)
        .filter(|_| !file.contains('/'))
        .and_then(|d| std::fs::metadata(d.join("template/iso").join(file)).ok())
        .map(|m| m.len());
    match len {
        Some(len) if props::prop(v, "size").is_none() => Ok(format!("{v},size={}", ids::format_size_exact(len))),
        _ => Ok(v.to_string()),
    }
}
