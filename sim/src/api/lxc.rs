//! `/nodes/{node}/lxc[/{vmid}[/config]]`: create, list, config GET/PUT of containers
//! (power and destroy are in `lxc_status.rs`).
//!
//! Contract (pve-container `PVE/API2/LXC.pm` `create_vm`, `update_vm`): create checks
//! its parameters (400 map; `ssh-public-keys` that do not parse → 500 `SSH public key
//! validation error`; `ostemplate` must name a `vztmpl/…tar[.gz|.xz|.zst|.bz2]` volume
//! of a dir storage, else `unable to parse directory volume name`, or `unable to use
//! volume V - content type needs to be 'vztmpl'`; the rootfs storage must have `rootdir`
//! content, else 400 `storage 'X' does not support container directories`), then a used
//! VMID fails at once (`CT|VM N already exists on node 'X'`), then the config exists with
//! only `lock: create` and a `vzcreate` task (`timings.create`) extracts the template —
//! a missing file fails the task with `unable to create CT N - can't find file 'V'` and
//! removes the config — allocates `rootfs` (`STORAGE:vm-N-disk-0,size=NG`; on a dir
//! storage `STORAGE:N/vm-N-disk-0.raw`), generates the SSH host key and writes the
//! config. The `password` is never stored or logged. `start=1` then starts it (`vzstart`).
//! Config PUT applies at once (the simulator has no container pending section);
//! `unprivileged` is read-only, `memory`/`rootfs`/`ostype` cannot be deleted, and a
//! stale `digest` or a lock fails with PVE's texts.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{ApiError, ApiResult, Params, Reply};
use crate::model::{ClusterState, Kind, Vm, ct, ids};
use crate::sim::{Sim, lock};

const META: &[&str] = &["vmid", "node", "ostemplate", "storage", "password", "ssh-public-keys", "start"];
const NOT_MODELLED: &[&str] = &["restore", "force", "unique", "pool", "ignore-unpack-errors", "bwlimit", "ha-managed"];
const TEMPLATE_EXT: &[&str] = &[".tar", ".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2"];

/// The container on that node, or PVE's missing-config error (a VM's VMID has no
/// `lxc` config either).
pub fn ct_on<'a>(st: &'a ClusterState, node: &str, vmid: u32) -> Result<&'a Vm, ApiError> {
    st.vms.get(&vmid).filter(|v| v.node == node && v.is_ct()).ok_or_else(|| missing(node, vmid))
}

/// Mutable variant of [`ct_on`].
pub fn ct_on_mut<'a>(st: &'a mut ClusterState, node: &str, vmid: u32) -> Result<&'a mut Vm, ApiError> {
    ct_on(st, node, vmid)?;
    st.vms.get_mut(&vmid).ok_or_else(|| missing(node, vmid))
}

/// PVE's missing-config error for a container.
pub fn missing(node: &str, vmid: u32) -> ApiError {
    ApiError::die(format!("Configuration file '{}' does not exist", Vm::ct_conf_path(node, vmid)))
}

/// `check_lock` of a container (`CT is locked (x)`).
pub fn check_lock(vm: &Vm) -> Result<(), String> {
    match vm.lock() {
        Some(l) => Err(format!("CT is locked ({l})")),
        None => Ok(()),
    }
}

fn config_value(key: &str, v: &str) -> Value {
    if ct::is_integer_key(key)
        && let Ok(n) = v.parse::<i64>()
    {
        return json!(n);
    }
    json!(v)
}

/// The template file an `ostemplate` volid names on `node` (`<path>/template/cache/F`).
fn template_file(sim: &Sim, node: &str, volid: &str) -> Result<std::path::PathBuf, ApiError> {
    let (sid, volname) =
        volid.split_once(':').ok_or_else(|| ApiError::die(format!("unable to parse volume ID '{volid}'")))?;
    if !sim.cfg.storages.iter().any(|s| s.id == sid) {
        return Err(ApiError::die(format!("storage '{sid}' does not exist")));
    }
    let Some(dir) = sim.storage_dir(node, sid) else {
        return Err(ApiError::die(format!("unable to parse lvm volume name '{volname}'")));
    };
    let bad = || ApiError::die(format!("unable to parse directory volume name '{volname}'"));
    let (vtype, file) = volname.split_once('/').ok_or_else(bad)?;
    if file.contains('/') || !super::storage::safe_chars(file) {
        return Err(bad());
    }
    match vtype {
        "vztmpl" if TEMPLATE_EXT.iter().any(|e| file.ends_with(e)) => {}
        "vztmpl" => return Err(bad()),
        "iso" | "images" | "rootdir" | "snippets" | "import" | "backup" => {
            return Err(ApiError::die(format!("unable to use volume {volid} - content type needs to be 'vztmpl'")));
        }
        _ => return Err(bad()),
    }
    Ok(dir.join("template/cache").join(file))
}

fn rootdir_storage(sim: &Sim, id: &str) -> Result<(), ApiError> {
    let s = sim
        .cfg
        .storages
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| ApiError::die(format!("storage '{id}' does not exist")))?;
    if !s.content.split(',').any(|c| c == "rootdir") {
        return Err(ApiError::param("storage", format!("storage '{id}' does not support container directories")));
    }
    Ok(())
}

/// `rootfs` → (storage, GiB) for a new volume (`NEW_DISK_RE`; a bare number uses `storage`).
fn rootfs_plan(value: &str, default: &str) -> Result<(String, f64), ApiError> {
    let vol = value.split(',').next().unwrap_or("");
    let (sid, size) = match vol.rsplit_once(':') {
        Some((s, n)) => (s.to_string(), n),
        None => (default.to_string(), vol),
    };
    let numeric = !size.is_empty() && size.chars().all(|c| c.is_ascii_digit() || c == '.');
    match size.parse::<f64>() {
        Ok(gib) if numeric && gib > 0.0 => Ok((sid, gib)),
        _ => Err(ApiError::die(format!(
            "simulator: rootfs '{value}' is not modelled (only STORAGE:SIZE_GiB allocates a volume)"
        ))),
    }
}

fn parse_keys(raw: &str) -> Result<Vec<String>, ApiError> {
    let mut out = Vec::new();
    for line in raw.lines().map(str::trim).filter(|l| !l.is_empty()) {
        russh::keys::PublicKey::from_openssh(line).map_err(|_| ApiError::die("SSH public key validation error"))?;
        out.push(line.to_string());
    }
    Ok(out)
}

pub fn create(sim: &Arc<Sim>, node: &str, p: &Params) -> ApiResult {
    let mut errors = BTreeMap::new();
    for k in p.map.keys() {
        if NOT_MODELLED.contains(&k.as_str()) {
            return Err(ApiError::die(format!("simulator: create parameter '{k}' is not modelled")));
        }
        if !META.contains(&k.as_str()) && !ct::is_config_key(k) {
            errors.insert(k.clone(), crate::model::props::NOT_IN_SCHEMA.to_string());
        }
    }
    for k in ["vmid", "ostemplate"] {
        if p.get(k).is_none() {
            errors.insert(k.to_string(), "property is missing and it is not optional".into());
        }
    }
    if p.get("password").is_some_and(|pw| pw.chars().count() < 5) {
        errors.insert("password".into(), "value must be at least 5 characters long".into());
    }
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    let vmid = super::params::vmid("vmid", p.required("vmid")?)?;
    let start = p.bool("start", false)?;
    p.bool("unprivileged", true)?;
    let storage = p.get("storage").unwrap_or("local").to_string();
    let keys = p.get("ssh-public-keys").map(parse_keys).transpose()?.unwrap_or_default();
    let ostemplate = p.required("ostemplate")?.to_string();
    let template = template_file(sim, node, &ostemplate)?;
    let (root_storage, gib) = rootfs_plan(p.get("rootfs").unwrap_or("4"), &storage)?;
    rootdir_storage(sim, &root_storage)?;
    let mut st = lock(&sim.state);
    let mut counter = st.id_counter;
    let mut config = BTreeMap::new();
    for (k, v) in p.map.iter().filter(|(k, _)| !META.contains(&k.as_str()) && k.as_str() != "rootfs") {
        super::params::put_normalized(ct::normalize, sim.cfg.seed, vmid, &mut counter, k, v, &mut config, &mut errors);
    }
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    if let Some(other) = st.vms.get(&vmid) {
        return Err(ApiError::die(format!("{} {vmid} already exists on node '{}'", other.type_str(), other.node)));
    }
    st.id_counter = counter;
    // `unprivileged` defaults to 1 on create and is written only when set.
    match config.remove("unprivileged").as_deref() {
        Some("0" | "no" | "off" | "false") => {}
        _ => {
            config.insert("unprivileged".into(), "1".into());
        }
    }
    let locked = BTreeMap::from([("lock".to_string(), "create".to_string())]);
    let mut vm = Vm::stopped(vmid, node.to_string(), locked);
    vm.kind = Kind::Lxc;
    st.vms.insert(vmid, vm);
    let upid = sim.new_task(&mut st, node, "vzcreate", &vmid.to_string(), Some(vmid));
    sim.changed();
    drop(st);
    let u = upid.clone();
    let node = node.to_string();
    sim.after(sim.scaled(sim.cfg.timings.create), move |sim| {
        let result = build(sim, &node, vmid, &ostemplate, &template, (&root_storage, gib), config, &keys);
        let mut st = lock(&sim.state);
        match result {
            Ok((config, disk, log)) => {
                for l in log {
                    Sim::task_log(&mut st, &u, l);
                }
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.config = config;
                    vm.disk = disk;
                }
            }
            Err(e) => {
                st.vms.remove(&vmid);
                Sim::finish_task_in(&mut st, &u, Err(format!("unable to create CT {vmid} - {e}")));
                sim.changed();
                return;
            }
        }
        Sim::finish_task_in(&mut st, &u, Ok(()));
        sim.changed();
        drop(st);
        if start {
            super::lxc_status::start_task(sim, &node, vmid);
        }
    });
    Ok(Reply::data(json!(upid)))
}

type Built = (BTreeMap<String, String>, crate::model::GuestDisk, Vec<String>);

/// The `vzcreate` worker's work: template, rootfs, setup (host keys), defaults.
#[allow(clippy::too_many_arguments, reason = "the worker's inputs, each used once")]
fn build(
    sim: &Sim,
    node: &str,
    vmid: u32,
    ostemplate: &str,
    template: &std::path::Path,
    (storage, gib): (&str, f64),
    mut config: BTreeMap<String, String>,
    keys: &[String],
) -> Result<Built, String> {
    let mut log = Vec::new();
    let size = (gib * (1u64 << 30) as f64) as u64;
    let dir_storage = sim.storage_dir(node, storage).is_some();
    let volid = if dir_storage {
        format!("{storage}:{vmid}/vm-{vmid}-disk-0.raw")
    } else {
        format!("{storage}:vm-{vmid}-disk-0")
    };
    let spec = sim.cfg.storages.iter().find(|s| s.id == storage);
    let avail = spec.map(|s| super::storage::usage(sim, node, s).2).unwrap_or(0);
    if !dir_storage && size > avail {
        return Err(format!(
            "lvcreate 'pve/vm-{vmid}-disk-0' error:   Volume group \"pve\" has insufficient free space"
        ));
    }
    config.insert("rootfs".into(), format!("{volid},size={}", ids::format_size_exact(size)));
    if !template.is_file() {
        return Err(format!("can't find file '{ostemplate}'"));
    }
    log.push(format!("extracting archive '{}'", shown_path(sim, node, template)));
    log.push("Detected container architecture: amd64".into());
    config.entry("hostname".into()).or_insert_with(|| format!("CT{vmid}"));
    config.entry("memory".into()).or_insert_with(|| "512".into());
    config.entry("swap".into()).or_insert_with(|| "512".into());
    config.entry("arch".into()).or_insert_with(|| "amd64".into());
    config.entry("ostype".into()).or_insert_with(|| "debian".into());
    let id = crate::guest::lxc::identity(&config, keys, vmid)?;
    log.extend(id.log);
    Ok((config, id.disk, log))
}

/// The node path of a real file under the node's root (`/var/lib/vz/...`).
fn shown_path(sim: &Sim, node: &str, real: &std::path::Path) -> String {
    let root = sim.node_path(node, "/");
    real.strip_prefix(&root).map(|p| format!("/{}", p.display())).unwrap_or_else(|_| real.display().to_string())
}

pub fn list(sim: &Arc<Sim>, node: &str) -> ApiResult {
    let st = lock(&sim.state);
    let out: Vec<Value> = st
        .vms
        .values()
        .filter(|v| v.node == node && v.is_ct())
        .map(|vm| super::lxc_status::status_json(&st, vm))
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

pub fn index(sim: &Arc<Sim>, node: &str, vmid: u32) -> ApiResult {
    let st = lock(&sim.state);
    ct_on(&st, node, vmid)?;
    let names = ["config", "status", "pending"];
    Ok(Reply::data(Value::Array(names.iter().map(|n| json!({ "subdir": n })).collect())))
}

pub fn config_get(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["current", "snapshot"])?;
    p.bool("current", false)?;
    let st = lock(&sim.state);
    let vm = ct_on(&st, node, vmid)?;
    let mut out: Map<String, Value> = vm.config.iter().map(|(k, v)| (k.clone(), config_value(k, v))).collect();
    out.insert("digest".into(), json!(vm.digest()));
    Ok(Reply::data(Value::Object(out)))
}

const CONFIG_META: &[&str] = &["delete", "revert", "digest"];

pub fn config_set(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    let mut errors = BTreeMap::new();
    let mut st = lock(&sim.state);
    ct_on(&st, node, vmid)?;
    let mut counter = st.id_counter;
    let mut sets = BTreeMap::new();
    for (k, v) in p.map.iter().filter(|(k, _)| !CONFIG_META.contains(&k.as_str())) {
        let mut mac = || {
            counter += 1;
            ids::mac(sim.cfg.seed ^ u64::from(vmid), counter)
        };
        match ct::normalize(k, v, &mut mac) {
            Ok(nv) => {
                sets.insert(k.clone(), nv);
            }
            Err(e) => {
                errors.insert(k.clone(), e);
            }
        }
    }
    let deletes: Vec<String> = p
        .get("delete")
        .map(|d| d.split([',', ';', ' ']).filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    for k in &deletes {
        if !ct::is_config_key(k) {
            errors.insert(k.clone(), crate::model::props::NOT_IN_SCHEMA.into());
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    st.id_counter = counter;
    let vm = ct_on_mut(&mut st, node, vmid)?;
    check_lock(vm).map_err(ApiError::die)?;
    if let Some(d) = p.get("digest")
        && d != vm.digest()
    {
        return Err(ApiError::die("detected modified configuration - file changed by other user? Try again."));
    }
    for k in &deletes {
        if ["memory", "rootfs", "ostype"].contains(&k.as_str()) {
            return Err(ApiError::die(format!("unable to delete required option '{k}'")));
        }
        if k == "unprivileged" {
            return Err(ApiError::die(format!("unable to delete read-only option: '{k}'")));
        }
    }
    for k in sets.keys() {
        if k == "unprivileged" {
            return Err(ApiError::die(format!("unable to modify read-only option: '{k}'")));
        }
        if k == "rootfs" {
            return Err(ApiError::die("simulator: changing 'rootfs' is not modelled"));
        }
    }
    for k in deletes {
        vm.config.remove(&k);
    }
    vm.config.extend(sets);
    sim.changed();
    Ok(Reply::data(Value::Null))
}
