//! `POST /nodes/{node}/qemu`: create a VM, with new empty disks, disks imported from
//! an image (`STORAGE:0,import-from=SOURCE`), a cloud-init drive and ISO CD-ROMs.
//!
//! Contract (qemu-server `PVE/API2/Qemu.pm` `create_vm`, `create_disks`,
//! `$check_drive_param`, `$check_storage_access`): parameters are checked first (400 with
//! an `errors` map, or 500), then the config is created at once holding only `lock:
//! create` (`create_and_lock_config`; an existing VMID fails the call with `unable to
//! create VM N - VM N already exists on node 'X'`) and a `qmcreate` task (id = VMID)
//! allocates the disks in sorted key order and writes the full config without the
//! lock. Its duration is `timings.create` plus `timings.import_per_gib` per GiB of
//! imported image data, times `time_scale`. A failing task removes the config; its
//! error is `unable to create VM N - <reason>`. `start=1` starts the VM at the task's
//! end. Import sources: `STORAGE:import/FILE` on that node (qcow2: virtual size from
//! the header, `QFI\xfb` magic checked, no backing file; raw: the file length; vmdk: a
//! sparse extent; others are refused as not modelled; see `crate::image`). Absolute
//! paths are refused as PVE refuses them to any API token (`Only root can pass
//! arbitrary filesystem paths.`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::{ApiError, ApiResult, Params, Reply};
use crate::model::{Vm, ids, props};
use crate::sim::{Sim, lock};

/// How a drive parameter is to be allocated.
#[derive(Debug, Clone)]
enum Plan {
    /// A new empty disk of N GiB on a storage.
    New { storage: String, gib: f64 },
    /// A new disk imported from a file of a storage (`storage:import/x.qcow2`).
    Import { storage: String, source: String, file: std::path::PathBuf },
    /// The cloud-init drive.
    CloudInit { storage: String },
    /// An existing ISO volume.
    Iso { volid: String, file: std::path::PathBuf },
    /// As given (`none`, `cdrom`).
    Keep,
}

const META: &[&str] = &["vmid", "start", "storage", "node"];
const NOT_MODELLED: &[&str] =
    &["archive", "pool", "force", "unique", "live-restore", "bwlimit", "ha-managed", "import-working-storage"];

fn images_storage(sim: &Sim, id: &str) -> Result<(), ApiError> {
    let s = sim
        .cfg
        .storages
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| ApiError::die(format!("storage '{id}' does not exist")))?;
    if !s.content.split(',').any(|c| c == "images") {
        return Err(ApiError::param("storage", format!("storage '{id}' does not support vm images")));
    }
    Ok(())
}

/// The file a `storage:subdir/file` volid names on `node`, with its vtype.
fn dir_volume(sim: &Sim, node: &str, volid: &str) -> Result<(String, String, std::path::PathBuf), ApiError> {
    let (sid, volname) = volid.split_once(':').unwrap_or(("", volid));
    let dir = sim.storage_dir(node, sid).ok_or_else(|| match sim.cfg.storages.iter().any(|s| s.id == sid) {
        true => ApiError::die(format!("simulator: volume '{volid}' is not on a dir storage (not modelled)")),
        false => ApiError::die(format!("storage '{sid}' does not exist")),
    })?;
    let bad = || ApiError::die(format!("unable to parse directory volume name '{volname}'"));
    let (vtype, file) = volname.split_once('/').ok_or_else(bad)?;
    if file.contains('/') || !super::storage::safe_chars(file) {
        return Err(bad());
    }
    let sub = match vtype {
        "import" if sim.cfg.has_import_content() => "import",
        "iso" => "template/iso",
        "snippets" => "snippets",
        _ => return Err(bad()),
    };
    Ok((sid.to_string(), vtype.to_string(), dir.join(sub).join(file)))
}

fn plan_drive(sim: &Sim, node: &str, key: &str, value: &str, default: Option<&str>) -> Result<Plan, ApiError> {
    let vol = value.split(',').next().unwrap_or("");
    let import = props::prop(value, "import-from");
    let media_cdrom = props::prop(value, "media").as_deref() == Some("cdrom");
    // NEW_DISK_RE: ^(([^/:\s]+):)?(\d+(\.\d+)?)$
    let (sid, size) = match vol.rsplit_once(':') {
        Some((s, n)) if !s.contains('/') => (Some(s), n),
        _ => (None, vol),
    };
    let is_new = !size.is_empty()
        && size.split_once('.').map_or(size, |(a, _)| a).chars().all(|c| c.is_ascii_digit())
        && size.parse::<f64>().is_ok();
    if let Some(source) = import {
        if !is_new || size.parse::<f64>().ok() != Some(0.0) {
            return Err(ApiError::param(
                key,
                "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>",
            ));
        }
        let storage =
            sid.or(default).ok_or_else(|| ApiError::die("no storage ID specified (and no default storage)"))?;
        images_storage(sim, storage)?;
        if source.starts_with('/') || !source.contains(':') {
            return Err(ApiError::die(
                "Only root can pass arbitrary filesystem paths. at /usr/share/perl5/PVE/Storage.pm line 651.",
            ));
        }
        let (_, vtype, file) = dir_volume(sim, node, &source)?;
        if vtype != "import" {
            return Err(ApiError::param(
                key,
                format!("{source} has wrong type '{vtype}' - needs to be 'images' or 'import'"),
            ));
        }
        return Ok(Plan::Import { storage: storage.to_string(), source, file });
    }
    if is_new {
        let storage =
            sid.or(default).ok_or_else(|| ApiError::die("no storage ID specified (and no default storage)"))?;
        images_storage(sim, storage)?;
        return Ok(Plan::New { storage: storage.to_string(), gib: size.parse().unwrap_or(0.0) });
    }
    if let Some((s, "cloudinit")) = vol.split_once(':') {
        return Ok(Plan::CloudInit { storage: s.to_string() });
    }
    if vol == "none" || vol == "cdrom" {
        return Ok(Plan::Keep);
    }
    let (_, vtype, file) = dir_volume(sim, node, vol)?;
    if vtype != "iso" {
        return Err(ApiError::param(key, "content type needs to be 'images' or 'iso'"));
    }
    if !media_cdrom {
        return Err(ApiError::param(key, "explicit 'media=cdrom' is required for iso images"));
    }
    Ok(Plan::Iso { volid: vol.to_string(), file })
}

/// The options of a drive value besides its volume, without `import-from`, sorted.
fn drive_opts(value: &str, extra: &[(&str, String)]) -> String {
    let mut opts: BTreeMap<String, String> = props::split_props(value)
        .into_iter()
        .skip(1)
        .filter(|(k, _)| k != "import-from" && k != "size" && !k.is_empty())
        .collect();
    for (k, v) in extra {
        opts.insert(k.to_string(), v.clone());
    }
    opts.iter().map(|(k, v)| format!(",{k}={v}")).collect()
}

pub fn create(sim: &Arc<Sim>, node: &str, p: &Params) -> ApiResult {
    let mut errors = BTreeMap::new();
    for k in p.map.keys() {
        if NOT_MODELLED.contains(&k.as_str()) {
            return Err(ApiError::die(format!("simulator: create parameter '{k}' is not modelled")));
        }
        if !META.contains(&k.as_str()) && !props::is_config_key(k) {
            errors.insert(k.clone(), props::NOT_IN_SCHEMA.to_string());
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    let vmid = super::params::vmid("vmid", p.required("vmid")?)?;
    let start = p.bool("start", false)?;
    let default = p.get("storage");
    let mut st = lock(&sim.state);
    let mut counter = st.id_counter;
    let mut config = BTreeMap::new();
    let mut plans = Vec::new();
    for (k, v) in p.map.iter().filter(|(k, _)| !META.contains(&k.as_str())) {
        if props::is_drive_key(k) && !k.starts_with("unused") {
            match plan_drive(sim, node, k, v, default) {
                Ok(plan) => plans.push((k.clone(), v.clone(), plan)),
                Err(ApiError::Params(e)) => errors.extend(e),
                Err(e) => return Err(e),
            }
            continue;
        }
        super::params::put_normalized(
            props::normalize,
            sim.cfg.seed,
            vmid,
            &mut counter,
            k,
            v,
            &mut config,
            &mut errors,
        );
    }
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    if let Some(other) = st.vms.get(&vmid) {
        return Err(ApiError::die(format!(
            "unable to create VM {vmid} - {} {vmid} already exists on node '{}'",
            other.type_str(),
            other.node
        )));
    }
    st.id_counter = counter + 3;
    let c = st.id_counter;
    config.entry("smbios1".into()).or_insert_with(|| format!("uuid={}", ids::uuid(sim.cfg.seed, c)));
    config.entry("vmgenid".into()).or_insert_with(|| ids::uuid(sim.cfg.seed, c + 1));
    config.insert("meta".into(), format!("creation-qemu=9.2.0,ctime={}", ids::now_unix()));
    let locked = BTreeMap::from([("lock".to_string(), "create".to_string())]);
    st.vms.insert(vmid, Vm::stopped(vmid, node.to_string(), locked));
    let upid = sim.new_task(&mut st, node, "qmcreate", &vmid.to_string(), Some(vmid));
    sim.changed();
    drop(st);
    let data: u64 = plans
        .iter()
        .filter_map(|(_, _, plan)| match plan {
            Plan::Import { file, .. } => std::fs::metadata(file).ok().map(|m| m.len()),
            _ => None,
        })
        .sum();
    let delay = sim.cfg.timings.create + sim.cfg.timings.import_per_gib.mul_f64(data as f64 / (1u64 << 30) as f64);
    let u = upid.clone();
    let node = node.to_string();
    sim.after(sim.scaled(delay), move |sim| {
        let mut log = Vec::new();
        let result = allocate(sim, &node, vmid, plans, &mut config, &mut log);
        let mut st = lock(&sim.state);
        for l in log {
            Sim::task_log(&mut st, &u, l);
        }
        match result {
            Ok(()) => {
                if !config.contains_key("boot") {
                    config.insert("boot".into(), default_boot(&config));
                }
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.config = config;
                }
            }
            Err(e) => {
                st.vms.remove(&vmid);
                Sim::finish_task_in(&mut st, &u, Err(format!("unable to create VM {vmid} - {e}")));
                sim.changed();
                return;
            }
        }
        sim.changed();
        drop(st);
        if start {
            let r = super::lifecycle::cold_start(sim, vmid, false);
            let mut st = lock(&sim.state);
            Sim::task_log(&mut st, &u, "Execute autostart");
            if let Err(e) = r {
                Sim::task_log(&mut st, &u, e);
            }
        }
        sim.finish_task(&u, Ok(()));
    });
    Ok(Reply::data(json!(upid)))
}

/// Allocate the disks in sorted key order (`$foreach_volume_with_alloc`).
fn allocate(
    sim: &Sim,
    node: &str,
    vmid: u32,
    plans: Vec<(String, String, Plan)>,
    config: &mut BTreeMap<String, String>,
    log: &mut Vec<String>,
) -> Result<(), String> {
    let mut next: BTreeMap<String, u32> = BTreeMap::new();
    let mut name = |storage: &str| {
        let n = next.entry(storage.to_string()).or_insert(0);
        *n += 1;
        format!("{storage}:vm-{vmid}-disk-{}", *n - 1)
    };
    let thin = |storage: &str| sim.cfg.storages.iter().any(|s| s.id == storage && s.path.is_none());
    for (key, value, plan) in plans {
        let line = match plan {
            Plan::Keep => value,
            Plan::CloudInit { storage } => format!("{storage}:vm-{vmid}-cloudinit,media=cdrom"),
            Plan::Iso { volid, file } => {
                let len = std::fs::metadata(&file).map_err(|_| format!("volume {volid} does not exist"))?.len();
                format!("{volid}{}", drive_opts(&value, &[("size", ids::format_size_exact(len))]))
            }
            Plan::New { storage, gib } => {
                let size = if key == "efidisk0" {
                    let four_m = props::prop(&value, "efitype").as_deref() == Some("4m");
                    if thin(&storage) {
                        4 << 20
                    } else if four_m {
                        528 << 10
                    } else {
                        128 << 10
                    }
                } else {
                    (gib * (1u64 << 30) as f64) as u64
                };
                format!("{}{}", name(&storage), drive_opts(&value, &[("size", ids::format_size_exact(size))]))
            }
            Plan::Import { storage, source, file } => {
                let shown = file.to_string_lossy();
                let info = crate::image::untrusted(&file, &shown, &crate::image::claimed_format(&file))?;
                let (vsize, data) = (info.virtual_size, info.data);
                let spec = sim.cfg.storages.iter().find(|s| s.id == storage);
                let avail = spec.map(|s| super::storage::usage(sim, node, s).2).unwrap_or(0);
                if data > avail {
                    return Err(format!(
                        "cannot import from '{source}' - qemu-img: error while writing at byte {avail}: No space left on device"
                    ));
                }
                format!("{}{}", name(&storage), drive_opts(&value, &[("size", ids::format_size_exact(vsize))]))
            }
        };
        log.push(format!("{key}: successfully created disk '{line}'"));
        config.insert(key, line);
    }
    Ok(())
}

/// `get_default_bootdevices`: the first disk, the first CD-ROM, the first NIC.
fn default_boot(config: &BTreeMap<String, String>) -> String {
    let order = |k: &str| {
        let (p, n) = k.split_at(k.find(|c: char| c.is_ascii_digit()).unwrap_or(k.len()));
        let rank = ["ide", "scsi", "virtio", "sata"].iter().position(|x| *x == p).unwrap_or(9);
        (rank, n.parse::<u32>().unwrap_or(0))
    };
    let mut drives: Vec<(&String, &String)> = config
        .iter()
        .filter(|(k, _)| {
            props::is_drive_key(k)
                && !k.starts_with("efidisk")
                && !k.starts_with("tpmstate")
                && !k.starts_with("unused")
        })
        .collect();
    drives.sort_by_key(|(k, _)| order(k));
    let is_cd = |v: &str| props::prop(v, "media").as_deref() == Some("cdrom") || v.contains("-cloudinit");
    let mut devs: Vec<String> = Vec::new();
    devs.extend(drives.iter().find(|(_, v)| !is_cd(v)).map(|(k, _)| k.to_string()));
    devs.extend(drives.iter().find(|(_, v)| is_cd(v)).map(|(k, _)| k.to_string()));
    devs.extend(
        config
            .keys()
            .filter(|k| k.starts_with("net") && k.as_str() != "nameserver")
            .min_by_key(|k| k[3..].parse::<u32>().unwrap_or(0))
            .cloned(),
    );
    format!("order={}", devs.join(";"))
}
