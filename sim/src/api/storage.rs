//! Per-node storage: status with real space numbers, and content listing.
//!
//! Contract (pve-storage `PVE/API2/Storage/Status.pm` `index`/`read_status`,
//! `PVE/Storage/Plugin.pm` `status` and `$get_subdir_files`): a `dir` storage reports
//! the node's root filesystem (`df` of its path: every dir storage on a node shares it);
//! an lvmthin storage reports `size_bytes` (default 100 GiB) as total and the sum of
//! the `size=` of the VM disks on it (on that node; on every node when shared) as used.
//! Content lists `snippets`, `iso` (`*.iso`/`*.img`), `import` (`[safe chars]+.(ova|
//! ovf|qcow2|raw|vmdk)`, case-insensitive, format = the extension as written) and VM
//! `images`, each with `size` and `ctime`. An unknown storage is 500 `storage 'x' does
//! not exist`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::nodes::find_storage;
use super::{ApiResult, Params, Reply};
use crate::config::{DEFAULT_STORAGE_BYTES, StorageSpec};
use crate::nodefs::{Fs, space};
use crate::sim::{Sim, lock};

/// `(total, used, avail)` of a storage on a node, in bytes.
pub fn usage(sim: &Sim, node: &str, s: &StorageSpec) -> (u64, u64, u64) {
    if s.path.is_some() {
        let sp = space(sim, node, Fs::Root);
        return (sp.total, sp.used, sp.avail);
    }
    let total = s.size_bytes.unwrap_or(DEFAULT_STORAGE_BYTES);
    let st = lock(&sim.state);
    let prefix = format!("{}:", s.id);
    let used: u64 = st
        .vms
        .values()
        .filter(|vm| s.shared || vm.node == node)
        .flat_map(|vm| vm.volids().into_iter().filter(|v| v.starts_with(&prefix)).map(move |v| vm.volume_size(&v)))
        .map(Option::unwrap_or_default)
        .sum();
    (total, used, total.saturating_sub(used))
}

fn node_storage_json(sim: &Sim, node: &str, s: &StorageSpec) -> Value {
    let (total, used, avail) = usage(sim, node, s);
    let fraction = if total == 0 { 0.0 } else { used as f64 / total as f64 };
    json!({
        "storage": s.id, "type": s.kind, "content": s.content, "shared": u8::from(s.shared),
        "active": 1, "enabled": 1, "total": total, "used": used, "avail": avail, "used_fraction": fraction,
    })
}

pub fn node_storage_list(sim: &Arc<Sim>, node: &str, p: &Params) -> ApiResult {
    p.only(&["content", "enabled", "format", "storage", "target"])?;
    let out: Vec<Value> = sim
        .cfg
        .storages
        .iter()
        .filter(|s| p.get("content").is_none_or(|c| s.content.split(',').any(|x| x == c)))
        .filter(|s| p.get("storage").is_none_or(|id| id == s.id))
        .map(|s| node_storage_json(sim, node, s))
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

pub fn node_storage_status(sim: &Arc<Sim>, node: &str, id: &str) -> ApiResult {
    Ok(Reply::data(node_storage_json(sim, node, find_storage(sim, id)?)))
}

/// `$SAFE_CHAR_CLASS_RE` of pve-storage.
pub fn safe_chars(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-.+=_".contains(c))
}

/// The volid name and format of a file in a storage subdirectory, if PVE lists it.
fn listed(content: &str, name: &str) -> Option<(String, String)> {
    let lower = name.to_ascii_lowercase();
    match content {
        "snippets" => (!name.starts_with('.')).then(|| (format!("snippets/{name}"), "snippet".into())),
        "iso" => (lower.ends_with(".iso") || lower.ends_with(".img")).then(|| (format!("iso/{name}"), "iso".into())),
        // `$get_subdir_files` (pve-storage `Plugin.pm`): `vztmpl/<file>` for
        // `.tar` and `.tar.{gz,xz,zst,bz2}`, format `tar` or `t` + the
        // compression's extension (`tzst`).
        "vztmpl" => {
            let format = ["gz", "xz", "zst", "bz2"]
                .iter()
                .find(|c| lower.ends_with(&format!(".tar.{c}")))
                .map(|c| format!("t{c}"))
                .or_else(|| lower.ends_with(".tar").then(|| "tar".to_string()))?;
            (!name.starts_with('.')).then(|| (format!("vztmpl/{name}"), format))
        }
        "import" => {
            let (stem, ext) = name.rsplit_once('.')?;
            let ok = ["ova", "ovf", "qcow2", "raw", "vmdk"].contains(&ext.to_ascii_lowercase().as_str());
            (ok && safe_chars(stem)).then(|| (format!("import/{name}"), ext.to_string()))
        }
        _ => None,
    }
}

pub fn storage_content(sim: &Arc<Sim>, node: &str, id: &str, p: &Params) -> ApiResult {
    p.only(&["content", "vmid"])?;
    let s = find_storage(sim, id)?;
    let mut out = Vec::new();
    let want = p.get("content");
    if let Some(dir) = sim.storage_dir(node, id) {
        let kinds =
            [("snippets", "snippets"), ("iso", "template/iso"), ("vztmpl", "template/cache"), ("import", "import")];
        for (content, sub) in kinds {
            if want.is_some_and(|w| w != content) || !s.content.split(',').any(|c| c == content) {
                continue;
            }
            let Ok(rd) = std::fs::read_dir(dir.join(sub)) else { continue };
            let mut files: Vec<_> = rd.flatten().collect();
            files.sort_by_key(|e| e.file_name());
            for e in files {
                let Ok(md) = e.metadata() else { continue };
                let name = e.file_name().to_string_lossy().into_owned();
                let Some((volname, format)) = listed(content, &name).filter(|_| md.is_file()) else { continue };
                let ctime = md
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                out.push(json!({
                    "volid": format!("{id}:{volname}"), "content": content, "format": format,
                    "size": md.len(), "ctime": ctime,
                }));
            }
        }
    } else if want.is_none_or(|w| w == "images") {
        let st = lock(&sim.state);
        for vm in st.vms.values().filter(|v| v.node == node) {
            for volid in vm.volids() {
                if volid.starts_with(&format!("{id}:")) && !volid.contains("cloudinit") {
                    let size = vm.volume_size(&volid).unwrap_or(0);
                    let content = if vm.is_ct() { "rootdir" } else { "images" };
                    out.push(json!({"volid": volid, "content": content, "format": "raw",
                        "size": size, "vmid": vm.vmid}));
                }
            }
        }
    }
    Ok(Reply::data(Value::Array(out)))
}
