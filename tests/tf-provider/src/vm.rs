//! VM operations both flavours share, as the API calls the real providers make, and
//! the parsing of PVE's config values (`net0`, `scsi0`, `cicustom`, `tags`, sizes).
//!
//! Contract: guests are located through `GET /cluster/resources?type=vm` (so a VM that
//! migrated is still found on its current node, and one that is gone is `None`);
//! clone, config-as-task, resize, power and destroy wait for their tasks. Every error
//! is a [`CallError`] naming the call. Nothing here decides what to change: the
//! flavour modules do.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::{CallError, Pve};

/// One guest as `/cluster/resources` lists it.
#[derive(Debug, Clone)]
pub struct Guest {
    /// VMID.
    pub vmid: u64,
    /// Name (may be empty).
    pub name: String,
    /// The node it is on now.
    pub node: String,
    /// `status == running`.
    pub running: bool,
}

/// A VM config: key → value as PVE returns it (numbers as their decimal text).
pub type Config = BTreeMap<String, String>;

const GIB: u64 = 1 << 30;

/// All QEMU guests of the cluster.
pub async fn guests(pve: &Pve) -> Result<Vec<Guest>, CallError> {
    let data = pve.get("/cluster/resources", &[("type", "vm".into())]).await?;
    let list = data.as_array().cloned().unwrap_or_default();
    Ok(list
        .iter()
        .filter(|g| g.get("type").and_then(Value::as_str) == Some("qemu"))
        .filter_map(|g| {
            Some(Guest {
                vmid: g.get("vmid")?.as_u64()?,
                name: g.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                node: g.get("node")?.as_str()?.to_string(),
                running: g.get("status").and_then(Value::as_str) == Some("running"),
            })
        })
        .collect())
}

/// The guest with `vmid`, if it exists.
pub async fn locate(pve: &Pve, vmid: u64) -> Result<Option<Guest>, CallError> {
    Ok(guests(pve).await?.into_iter().find(|g| g.vmid == vmid))
}

/// The first free VMID (`GET /cluster/nextid`).
pub async fn next_id(pve: &Pve) -> Result<u64, CallError> {
    let data = pve.get("/cluster/nextid", &[]).await?;
    let parsed = match &data {
        Value::String(s) => s.parse().ok(),
        v => v.as_u64(),
    };
    parsed.ok_or_else(|| CallError {
        method: "GET",
        path: "/cluster/nextid".into(),
        status: None,
        detail: format!("unexpected answer {data}"),
    })
}

fn vm_path(node: &str, vmid: u64, tail: &str) -> String {
    format!("/nodes/{}/qemu/{vmid}{tail}", crate::api::segment(node))
}

/// What a clone request carries.
#[derive(Debug)]
pub struct CloneSpec<'a> {
    /// The source (template) guest.
    pub source: &'a Guest,
    /// New VMID.
    pub newid: u64,
    /// New name, if any.
    pub name: Option<&'a str>,
    /// Full (true) or linked clone.
    pub full: bool,
    /// Target node when it is not the source's.
    pub target: Option<&'a str>,
}

/// `POST /nodes/{node}/qemu/{source}/clone` and wait for the task.
pub async fn clone(pve: &Pve, spec: &CloneSpec<'_>) -> Result<Vec<String>, CallError> {
    let mut form = vec![("newid", spec.newid.to_string()), ("full", if spec.full { "1" } else { "0" }.to_string())];
    if let Some(n) = spec.name.filter(|n| !n.is_empty()) {
        form.push(("name", n.to_string()));
    }
    if let Some(t) = spec.target.filter(|t| *t != spec.source.node) {
        form.push(("target", t.to_string()));
    }
    pve.task("POST", &vm_path(&spec.source.node, spec.source.vmid, "/clone"), &form).await
}

/// `GET /nodes/{node}/qemu/{vmid}/config`.
pub async fn config(pve: &Pve, node: &str, vmid: u64) -> Result<Config, CallError> {
    let data = pve.get(&vm_path(node, vmid, "/config"), &[]).await?;
    let obj = data.as_object().cloned().unwrap_or_default();
    Ok(obj
        .into_iter()
        .filter(|(k, _)| k != "digest")
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            (k, s)
        })
        .collect())
}

/// `POST …/config` (a `qmconfig` task, waited for), as proxmox-api-go sends it.
pub async fn update_config_task(
    pve: &Pve,
    node: &str,
    vmid: u64,
    params: &[(&str, String)],
) -> Result<Vec<String>, CallError> {
    if params.is_empty() {
        return Ok(Vec::new());
    }
    pve.task("POST", &vm_path(node, vmid, "/config"), params).await
}

/// `PUT …/config` (synchronous), as bpg's `UpdateVM` sends it.
pub async fn update_config_sync(pve: &Pve, node: &str, vmid: u64, params: &[(&str, String)]) -> Result<(), CallError> {
    if params.is_empty() {
        return Ok(());
    }
    pve.put(&vm_path(node, vmid, "/config"), params).await.map(|_| ())
}

/// `PUT …/resize` to an absolute size, waited for.
pub async fn resize(pve: &Pve, node: &str, vmid: u64, disk: &str, bytes: u64) -> Result<Vec<String>, CallError> {
    let form = [("disk", disk.to_string()), ("size", format_size(bytes))];
    pve.task("PUT", &vm_path(node, vmid, "/resize"), &form).await
}

/// `POST …/status/start` or `…/status/stop`, waited for.
pub async fn power(pve: &Pve, node: &str, vmid: u64, start: bool) -> Result<Vec<String>, CallError> {
    let action = if start { "/status/start" } else { "/status/stop" };
    pve.task("POST", &vm_path(node, vmid, action), &[]).await
}

/// `POST …/migrate` to `target` (online when running, with local disks), waited for.
pub async fn migrate(pve: &Pve, guest: &Guest, target: &str) -> Result<Vec<String>, CallError> {
    let mut form = vec![("target", target.to_string()), ("with-local-disks", "1".to_string())];
    if guest.running {
        form.push(("online", "1".into()));
    }
    pve.task("POST", &vm_path(&guest.node, guest.vmid, "/migrate"), &form).await
}

/// Stop the guest if it runs, then `DELETE …?purge=1[&destroy-unreferenced-disks=1]`.
pub async fn destroy(pve: &Pve, guest: &Guest, unreferenced_disks: bool) -> Result<Vec<String>, CallError> {
    let mut warnings = Vec::new();
    if guest.running {
        warnings.extend(power(pve, &guest.node, guest.vmid, false).await?);
    }
    let mut query = vec![("purge", "1".to_string())];
    if unreferenced_disks {
        query.push(("destroy-unreferenced-disks", "1".into()));
    }
    warnings.extend(pve.task("DELETE", &vm_path(&guest.node, guest.vmid, ""), &query).await?);
    Ok(warnings)
}

/// The config writes of one create or update: keys to set, keys to delete, disks to grow.
#[derive(Debug, Default)]
pub struct Changes {
    /// `key = value` to write.
    pub sets: Vec<(String, String)>,
    /// Keys to delete.
    pub deletes: Vec<String>,
    /// Disks to grow to a size in bytes.
    pub resizes: Vec<(String, u64)>,
}

impl Changes {
    /// Write `key = value`.
    pub fn set(&mut self, key: impl Into<String>, value: impl ToString) {
        self.sets.push((key.into(), value.to_string()));
    }
}

/// How a flavour writes the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigCall {
    /// `POST …/config`, a task (proxmox-api-go, Telmate).
    Task,
    /// `PUT …/config`, synchronous (bpg's `UpdateVM`).
    Sync,
}

/// Write `changes`: one config call (nothing when there is nothing to write), then the
/// resizes.
pub async fn apply(
    pve: &Pve,
    node: &str,
    vmid: u64,
    changes: &Changes,
    call: ConfigCall,
) -> Result<Vec<String>, CallError> {
    let mut params: Vec<(&str, String)> = changes.sets.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    if !changes.deletes.is_empty() {
        params.push(("delete", changes.deletes.join(",")));
    }
    let mut warnings = match call {
        ConfigCall::Task => update_config_task(pve, node, vmid, &params).await?,
        ConfigCall::Sync => {
            update_config_sync(pve, node, vmid, &params).await?;
            Vec::new()
        }
    };
    for (disk, bytes) in &changes.resizes {
        warnings.extend(resize(pve, node, vmid, disk, *bytes).await?);
    }
    Ok(warnings)
}

/// Split a property string; a bare item gets key `""`.
pub fn props(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (String::new(), p.trim().to_string()),
        })
        .collect()
}

/// A `netN` value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nic {
    /// NIC model (`virtio`).
    pub model: String,
    /// MAC address, as PVE spells it.
    pub mac: String,
    /// Bridge.
    pub bridge: Option<String>,
    /// VLAN tag.
    pub tag: Option<i64>,
}

/// The NIC models PVE accepts (the key of `model=MAC`).
const NIC_MODELS: &[&str] = &[
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
    "rtl8139",
    "virtio",
    "vmxnet3",
];

/// Parse `virtio=BC:24:11:…,bridge=vmbr0,tag=20`.
pub fn parse_nic(v: &str) -> Nic {
    let mut nic = Nic::default();
    for (k, val) in props(v) {
        match k.as_str() {
            "bridge" => nic.bridge = Some(val),
            "tag" => nic.tag = val.parse().ok(),
            "macaddr" => nic.mac = val,
            "model" => nic.model = val,
            "" if NIC_MODELS.contains(&val.as_str()) => nic.model = val,
            m if NIC_MODELS.contains(&m) => {
                nic.model = m.to_string();
                nic.mac = val;
            }
            _ => {}
        }
    }
    nic
}

/// Render a `netN` value, keeping `mac` when there is one.
pub fn render_nic(model: &str, mac: Option<&str>, bridge: &str, tag: Option<i64>) -> String {
    let mut out = match mac.filter(|m| !m.is_empty()) {
        Some(m) => format!("{model}={m}"),
        None => model.to_string(),
    };
    out.push_str(&format!(",bridge={bridge}"));
    if let Some(t) = tag.filter(|t| *t > 0) {
        out.push_str(&format!(",tag={t}"));
    }
    out
}

/// What a drive slot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drive {
    /// Storage ID (`local-lvm`).
    pub storage: String,
    /// `disk`, `cdrom` or `cloudinit` (Telmate's disk `type`).
    pub kind: &'static str,
    /// Size in bytes, when known.
    pub bytes: Option<u64>,
}

/// Whether `key` is a drive slot key (`ide0`, `scsi1`, …).
pub fn is_drive_key(key: &str) -> bool {
    ["ide", "sata", "scsi", "virtio"]
        .iter()
        .any(|p| key.strip_prefix(p).is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())))
}

/// Parse a drive value (`local-lvm:vm-120-disk-0,size=20G`).
pub fn parse_drive(v: &str) -> Drive {
    let parts = props(v);
    let volume = parts.first().map(|(_, v)| v.as_str()).unwrap_or("");
    let storage = volume.split_once(':').map(|(s, _)| s).unwrap_or(volume).to_string();
    let kind = if volume.contains("cloudinit") {
        "cloudinit"
    } else if parts.iter().any(|(k, v)| k == "media" && v == "cdrom") {
        "cdrom"
    } else {
        "disk"
    };
    let bytes = parts.iter().find(|(k, _)| k == "size").and_then(|(_, s)| parse_size(s));
    Drive { storage, kind, bytes }
}

/// The slot holding the cloud-init drive, if any.
pub fn cloudinit_slot(cfg: &Config) -> Option<(String, Drive)> {
    cfg.iter()
        .filter(|(k, _)| is_drive_key(k))
        .map(|(k, v)| (k.clone(), parse_drive(v)))
        .find(|(_, d)| d.kind == "cloudinit")
}

/// Parse a size: `20G`, `512M`, `1T`, `64K`, or a bare number of GiB.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], GIB),
        'T' | 't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, GIB),
    };
    let n: f64 = num.parse().ok()?;
    (n >= 0.0).then_some((n * mult as f64) as u64)
}

/// Format bytes the way Telmate's `size.String` does (`1T`, `20G`, `512M`, `64K`).
pub fn format_size(bytes: u64) -> String {
    let kib = bytes.div_ceil(1 << 10);
    for (unit, per) in [("T", 1u64 << 30), ("G", 1 << 20), ("M", 1 << 10)] {
        if kib.is_multiple_of(per) && kib > 0 {
            return format!("{}{unit}", kib / per);
        }
    }
    format!("{kib}K")
}

/// Whole GiB, rounded up (PVE's `storage:N` allocation unit, bpg's `disk.size`).
pub fn gib_ceil(bytes: u64) -> u64 {
    bytes.div_ceil(GIB)
}

/// GiB to bytes.
pub fn gib(n: u64) -> u64 {
    n.saturating_mul(GIB)
}

/// Parse `cicustom` into `user|network|meta|vendor` → volume.
pub fn parse_cicustom(v: &str) -> BTreeMap<String, String> {
    props(v).into_iter().filter(|(k, _)| !k.is_empty()).collect()
}

/// Split PVE tags (`;`, `,` or space separated), dropping empties.
pub fn split_tags(v: &str) -> Vec<String> {
    v.split([';', ',', ' ']).map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect()
}

/// Tags as a sorted, de-duplicated set (the providers' "same tags" test).
pub fn tag_set(v: &[String]) -> Vec<String> {
    let mut t: Vec<String> = v.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    t.sort();
    t.dedup();
    t
}

/// Parse an integer config value.
pub fn int(cfg: &Config, key: &str) -> Option<i64> {
    cfg.get(key).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nics_parse_and_render_like_pve() {
        let n = parse_nic("virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=20");
        assert_eq!(n.model, "virtio");
        assert_eq!(n.mac, "BC:24:11:00:00:01");
        assert_eq!(n.bridge.as_deref(), Some("vmbr0"));
        assert_eq!(n.tag, Some(20));
        assert_eq!(
            render_nic("virtio", Some(&n.mac), "vmbr0", Some(20)),
            "virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=20"
        );
        assert_eq!(render_nic("e1000", None, "vmbr1", None), "e1000,bridge=vmbr1");
    }

    #[test]
    fn drives_and_sizes() {
        let d = parse_drive("local-lvm:vm-120-disk-0,size=20G");
        assert_eq!((d.storage.as_str(), d.kind, d.bytes), ("local-lvm", "disk", Some(20 * GIB)));
        assert_eq!(parse_drive("local-lvm:vm-120-cloudinit,media=cdrom").kind, "cloudinit");
        assert_eq!(format_size(20 * GIB), "20G");
        assert_eq!(format_size(1024 * GIB), "1T");
        assert_eq!(format_size(512 << 20), "512M");
        assert_eq!(parse_size("50"), Some(50 * GIB));
        assert_eq!(gib_ceil(3 * GIB + 1), 4);
    }

    #[test]
    fn tags_compare_as_sets() {
        assert_eq!(tag_set(&split_tags("web;env-test;web")), vec!["env-test".to_string(), "web".to_string()]);
    }
}
