//! `/nodes/{node}/qemu[/{vmid}]`: listing, config GET/POST/PUT, pending, status/current
//! (the guest agent is in `agent.rs`, what a running VM takes live in `hotplug.rs`).
//!
//! Contract (from qemu-server): GET config shows pending values unless `current=1` and
//! carries a `digest`; PUT applies synchronously and fails with HTTP 500 on a lock or a
//! digest mismatch; POST forks a `qmconfig` worker and returns its UPID, so lock errors
//! surface as the task's exit status (or as `failed to update VM N: ...` when
//! `background_delay` waited for it). Every change is written to `[PENDING]` first; a
//! stopped VM's pending is applied at once, a running VM's goes through
//! `hotplug::hotplug_pending` (what stays pending waits for a cold start or an API
//! reboot; a hotplug error is a 400 parameter error — the task's failure for POST —
//! after the pending write). A write of the value a key already has leaves no pending
//! entry (PVE's `cleanup_pending`). `PUT unlink` is `PUT config` with `delete = idlist`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{ApiError, ApiResult, Params, Reply};
use crate::model::{ClusterState, Power, Vm, ids, props};
use crate::sim::{Sim, lock};

/// The VM on that node, or PVE's missing-config error (a container's VMID has no
/// `qemu-server` config either).
pub fn vm_on<'a>(st: &'a ClusterState, node: &str, vmid: u32) -> Result<&'a Vm, ApiError> {
    st.vms.get(&vmid).filter(|v| v.node == node && !v.is_ct()).ok_or_else(|| missing(node, vmid))
}

/// Mutable variant of [`vm_on`].
pub fn vm_on_mut<'a>(st: &'a mut ClusterState, node: &str, vmid: u32) -> Result<&'a mut Vm, ApiError> {
    if vm_on(st, node, vmid).is_err() {
        return Err(missing(node, vmid));
    }
    st.vms.get_mut(&vmid).ok_or_else(|| missing(node, vmid))
}

/// PVE's missing-config error.
pub fn missing(node: &str, vmid: u32) -> ApiError {
    ApiError::die(format!("Configuration file '{}' does not exist", Vm::conf_path(node, vmid)))
}

/// Fail when the VM is locked.
pub fn check_lock(vm: &Vm) -> Result<(), String> {
    match vm.lock() {
        Some(l) => Err(format!("VM is locked ({l})")),
        None => Ok(()),
    }
}

fn config_value(key: &str, v: &str) -> Value {
    if props::is_integer_key(key)
        && let Ok(n) = v.parse::<i64>()
    {
        return json!(n);
    }
    json!(v)
}

pub fn list(sim: &Arc<Sim>, node: &str, p: &Params) -> ApiResult {
    p.only(&["full"])?;
    let st = lock(&sim.state);
    let out: Vec<Value> = st
        .vms
        .values()
        .filter(|v| v.node == node && !v.is_ct())
        .map(|vm| {
            let running = vm.power == Power::Running;
            let mut o = json!({
                "vmid": vm.vmid, "name": vm.name(),
                "status": if running { "running" } else { "stopped" },
                "maxmem": vm.memory_mib() << 20, "mem": 0, "cpus": vm.cpus(), "cpu": 0,
                "maxdisk": vm.maxdisk(), "disk": 0, "uptime": super::cluster::uptime(vm),
                "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
            });
            if let Some(m) = o.as_object_mut() {
                if vm.is_template() {
                    m.insert("template".into(), json!(1));
                }
                if let Some(l) = vm.lock() {
                    m.insert("lock".into(), json!(l));
                }
                if let Some(t) = vm.config.get("tags") {
                    m.insert("tags".into(), json!(t));
                }
                if let Some(pid) = vm.pid.filter(|_| running) {
                    m.insert("pid".into(), json!(pid));
                }
            }
            o
        })
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

pub fn vm_index(sim: &Arc<Sim>, node: &str, vmid: u32) -> ApiResult {
    let st = lock(&sim.state);
    vm_on(&st, node, vmid)?;
    let names = ["config", "pending", "status", "agent", "clone", "migrate", "resize", "unlink"];
    Ok(Reply::data(Value::Array(names.iter().map(|n| json!({ "subdir": n })).collect())))
}

pub fn config_get(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["current", "snapshot"])?;
    let current = p.bool("current", false)?;
    let st = lock(&sim.state);
    let vm = vm_on(&st, node, vmid)?;
    let mut cfg = vm.config.clone();
    if !current {
        for k in &vm.pending_delete {
            cfg.remove(k);
        }
        for (k, v) in &vm.pending {
            cfg.insert(k.clone(), v.clone());
        }
    }
    let mut out: Map<String, Value> = cfg.iter().map(|(k, v)| (k.clone(), config_value(k, v))).collect();
    out.insert("digest".into(), json!(vm.digest()));
    Ok(Reply::data(Value::Object(out)))
}

pub fn pending(sim: &Arc<Sim>, node: &str, vmid: u32) -> ApiResult {
    let st = lock(&sim.state);
    let vm = vm_on(&st, node, vmid)?;
    let mut keys: Vec<&String> = vm.config.keys().chain(vm.pending.keys()).chain(vm.pending_delete.iter()).collect();
    keys.sort();
    keys.dedup();
    let out: Vec<Value> = keys
        .into_iter()
        .map(|k| {
            let mut o = Map::new();
            o.insert("key".into(), json!(k));
            if let Some(v) = vm.config.get(k) {
                o.insert("value".into(), config_value(k, v));
            }
            if let Some(v) = vm.pending.get(k) {
                o.insert("pending".into(), config_value(k, v));
            }
            if vm.pending_delete.contains(k) {
                o.insert("delete".into(), json!(1));
            }
            Value::Object(o)
        })
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

/// Validated sets, deletes and reverts of a config update.
type Update = (BTreeMap<String, String>, Vec<String>, Vec<String>);

const CONFIG_META: &[&str] = &["delete", "revert", "digest", "skiplock", "background_delay", "force"];

/// Validate all parameters (400 before any worker), returning normalised sets.
fn validate(sim: &Sim, node: &str, vmid: u32, p: &Params, counter: &mut u64) -> Result<Update, ApiError> {
    let mut errors = BTreeMap::new();
    let mut sets = BTreeMap::new();
    let seed = sim.cfg.seed;
    for (k, v) in &p.map {
        if CONFIG_META.contains(&k.as_str()) {
            continue;
        }
        let mut mac = || {
            *counter += 1;
            ids::mac(seed ^ u64::from(vmid), *counter)
        };
        match props::normalize(k, v, &mut mac) {
            Ok(mut nv) => {
                if props::is_drive_key(k) {
                    nv = allocate_drive(k, &nv, vmid);
                    match super::cdrom::iso_drive(sim, node, &nv) {
                        Ok(v) => nv = v,
                        Err(e) => {
                            errors.insert(k.clone(), e);
                            continue;
                        }
                    }
                }
                sets.insert(k.clone(), nv);
            }
            Err(e) => {
                errors.insert(k.clone(), e);
            }
        }
    }
    let split = |name: &str| -> Vec<String> {
        p.get(name)
            .map(|d| d.split([',', ';', ' ']).filter(|s| !s.is_empty()).map(str::to_string).collect())
            .unwrap_or_default()
    };
    let deletes = split("delete");
    let reverts = split("revert");
    for k in deletes.iter().chain(reverts.iter()) {
        if !props::is_config_key(k) {
            errors.insert(k.clone(), props::NOT_IN_SCHEMA.to_string());
        }
        if sets.contains_key(k) {
            errors.insert(k.clone(), "unable to delete and set the same option".into());
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    Ok((sets, deletes, reverts))
}

/// `storage:cloudinit` → the cloud-init volume; `storage:N` → a new N GiB volume.
fn allocate_drive(key: &str, v: &str, vmid: u32) -> String {
    let mut parts = v.splitn(2, ',');
    let vol = parts.next().unwrap_or("");
    let rest = parts.next().map(|r| format!(",{r}")).unwrap_or_default();
    if let Some((storage, what)) = vol.split_once(':') {
        if what == "cloudinit" {
            return format!("{storage}:vm-{vmid}-cloudinit,media=cdrom");
        }
        if let Ok(n) = what.parse::<u64>() {
            let idx: String = key.chars().filter(char::is_ascii_digit).collect();
            return format!("{storage}:vm-{vmid}-disk-{idx},size={n}G{rest}");
        }
    }
    v.to_string()
}

/// Why an update was refused or only partly applied.
#[derive(Debug)]
enum Refused {
    /// PVE's `die` before anything was written (lock, digest, ...).
    Die(String),
    /// Hotplug errors, raised as parameter errors after the pending write
    /// (`raise_param_exc($errors)`, Qemu.pm:2588): the values stay pending.
    Hotplug(BTreeMap<String, String>),
}

impl Refused {
    /// The text of a `qmconfig` task's failure: pve-common's `PVE::Exception`
    /// stringified (`400 Parameter verification failed.` then `key: msg` lines),
    /// newlines turned into spaces as `fork_worker` writes `TASK ERROR:`.
    fn task_text(&self) -> String {
        match self {
            Refused::Die(e) => e.clone(),
            Refused::Hotplug(errors) => {
                let mut out = "400 Parameter verification failed.".to_string();
                for (k, v) in errors {
                    out.push_str(&format!(" {k}: {v}"));
                }
                out
            }
        }
    }
}

/// The devices of a `boot` value's `order=` (`pve-qm-boot`, split as
/// `PVE::Tools::split_list` splits: `;`, `,` and whitespace).
fn boot_order(boot: Option<&str>) -> Vec<String> {
    let Some(order) = boot.and_then(|b| props::prop(b, "order")) else { return Vec::new() };
    order.split([';', ',', ' ']).filter(|d| !d.is_empty()).map(str::to_string).collect()
}

/// Apply a validated update under the lock, as qemu-server's `update_vm_api`
/// (e6352be, src/PVE/API2/Qemu.pm:2206-2590) does: checks, then every delete and
/// change written to `[PENDING]` (a `tags` or `unusedN` delete and `cipassword` go
/// straight to the config), `cleanup_pending`, then a stopped VM's pending applied
/// (`vmconfig_apply_pending`) or a running VM's hotplugged as far as it goes
/// (`hotplug::hotplug_pending`, selection = the keys this request named).
fn apply(
    vm: &mut Vm,
    p: &Params,
    mut sets: BTreeMap<String, String>,
    mut deletes: Vec<String>,
    reverts: Vec<String>,
) -> Result<(), Refused> {
    if !p.bool("skiplock", false).unwrap_or(false) {
        check_lock(vm).map_err(Refused::Die)?;
    }
    if let Some(d) = p.get("digest")
        && d != vm.digest()
    {
        // qemu-server e6352be, src/PVE/API2/Qemu.pm:2211 (containers and HA say
        // pve-common's `detected modified configuration`).
        return Err(Refused::Die("checksum mismatch (file change by other user?)".into()));
    }
    if sets.contains_key("lock") {
        return Err(Refused::Die("option 'lock' is not allowed".into()));
    }
    // Qemu.pm:2230-2236: a revert sets the current value again, or deletes a value
    // that is only pending.
    for k in reverts {
        if let Some(v) = vm.config.get(&k) {
            sets.insert(k, v.clone());
        } else if vm.pending.contains_key(&k) {
            deletes.push(k);
        }
    }
    for (k, v) in &sets {
        if k.starts_with("ide") && v.contains("-cloudinit") {
            let other = vm.config.iter().find(|(ok, ov)| *ok != k && ov.contains("-cloudinit"));
            if let Some((ok, _)) = other {
                return Err(Refused::Die(format!("unable to add a second cloudinit drive ('{ok}' is one already)")));
            }
        }
    }
    let mut modified = BTreeSet::new();
    // Qemu.pm:2265-2270: the boot order as the config (not [PENDING]) has it.
    let mut bootorder = boot_order(vm.config.get("boot").map(String::as_str));
    let bootorder_deleted = deletes.iter().any(|k| k == "bootorder");
    // Qemu.pm:2290-2395: deletes.
    for k in deletes {
        if !vm.config.contains_key(&k) && !vm.pending.contains_key(&k) {
            // `cannot delete 'K' - not set in current configuration!` (a warning).
            continue;
        }
        modified.insert(k.clone());
        let pending_value = vm.pending.remove(&k);
        // Qemu.pm:2304-2309: a deleted device leaves the boot order, written to
        // [PENDING] (`print_bootorder`, QemuServer.pm:1036: empty when none is left).
        if !bootorder_deleted && bootorder.contains(&k) {
            bootorder.retain(|d| *d != k);
            let boot = if bootorder.is_empty() { String::new() } else { format!("order={}", bootorder.join(";")) };
            vm.pending.insert("boot".into(), boot);
            modified.insert("boot".into());
        }
        if k.starts_with("unused") {
            // `try_deallocate_drive`: the volume is freed, the key gone at once.
            if let Some(volid) = vm.config.remove(&k) {
                vm.volumes.remove(&volid);
            }
        } else if k == "tags" {
            vm.config.remove(&k);
        } else {
            if props::is_drive_key(&k)
                && let Some(pv) = pending_value
            {
                vm.register_unused(&pv);
            }
            vm.pending_delete.insert(k);
        }
    }
    // Qemu.pm:2397-2560: changes.
    for (k, v) in sets {
        modified.insert(k.clone());
        if vm.pending.get(&k) == Some(&v) {
            continue;
        }
        if k == "cipassword" {
            vm.config.insert(k, v);
            continue;
        }
        if props::is_drive_key(&k)
            && let Some(pv) = vm.pending.get(&k).cloned()
        {
            vm.register_unused(&pv);
        }
        vm.pending_delete.remove(&k);
        vm.pending.insert(k, v);
    }
    cleanup_pending(vm);
    if vm.pending.is_empty() && vm.pending_delete.is_empty() {
        vm.drop_reused_unused();
        return Ok(());
    }
    let errors = if vm.power == Power::Running {
        super::hotplug::hotplug_pending(vm, &modified)
    } else {
        vm.apply_pending();
        BTreeMap::new()
    };
    vm.drop_reused_unused();
    if errors.is_empty() { Ok(()) } else { Err(Refused::Hotplug(errors)) }
}

/// `cleanup_pending` (pve-guest-common 4a8f6cb src/PVE/AbstractConfig.pm:138-167): a
/// pending value equal to the current one and a pending delete of an absent key are
/// dropped, so writing the value a key already has leaves nothing pending.
fn cleanup_pending(vm: &mut Vm) {
    let config = &vm.config;
    vm.pending.retain(|k, v| config.get(k) != Some(v));
    vm.pending_delete.retain(|k| config.contains_key(k));
}

pub fn config_set(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params, asynchronous: bool) -> ApiResult {
    for k in p.map.keys() {
        if !CONFIG_META.contains(&k.as_str()) && !props::is_config_key(k) {
            return Err(ApiError::param(k, props::NOT_IN_SCHEMA));
        }
    }
    let background_delay = p.int("background_delay", 1, 30)?;
    let mut st = lock(&sim.state);
    vm_on(&st, node, vmid)?;
    let mut counter = st.id_counter;
    let (sets, deletes, reverts) = validate(sim, node, vmid, p, &mut counter)?;
    st.id_counter = counter;
    let result = match vm_on_mut(&mut st, node, vmid) {
        Ok(vm) => apply(vm, p, sets, deletes, reverts),
        Err(_) => Err(Refused::Die(format!("Configuration file '{}' does not exist", Vm::conf_path(node, vmid)))),
    };
    if !asynchronous {
        sim.changed();
        return match result {
            Ok(()) => Ok(Reply::data(Value::Null)),
            Err(Refused::Die(e)) => Err(ApiError::die(e)),
            Err(Refused::Hotplug(errors)) => Err(ApiError::Params(errors)),
        };
    }
    let upid = sim.new_task(&mut st, node, "qmconfig", &vmid.to_string(), Some(vmid));
    if let Some(line) = p
        .map
        .iter()
        .find(|(k, _)| !CONFIG_META.contains(&k.as_str()))
        .map(|(k, v)| format!("update VM {vmid}: -{k} {v}"))
    {
        Sim::task_log(&mut st, &upid, line);
    }
    let failed = result.as_ref().err().map(Refused::task_text);
    Sim::finish_task_in(&mut st, &upid, result.map_err(|e| e.task_text()));
    sim.changed();
    match (background_delay, failed) {
        (Some(_), Some(e)) => Err(ApiError::die(format!("failed to update VM {vmid}: {e}"))),
        (Some(_), None) => Ok(Reply::data(Value::Null)),
        (None, _) => Ok(Reply::data(json!(upid))),
    }
}

/// `PUT .../unlink` (`idlist`, optional `force`): qemu-server's `unlink` is
/// `update_vm` with `delete = idlist`, synchronous, returning `null` (no UPID), so
/// it follows the same rules as `PUT config` with `delete` (pending on a running VM
/// for drives). Unused volumes are not modelled, so `force` changes nothing here.
pub fn unlink(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["idlist", "force"])?;
    let idlist = p.required("idlist")?.to_string();
    p.bool("force", false)?;
    let mut as_update = Params::default();
    as_update.map.insert("delete".into(), idlist);
    config_set(sim, node, vmid, &as_update, false)
}

pub fn status_index() -> ApiResult {
    let names = ["current", "start", "stop", "shutdown", "reboot", "reset", "suspend", "resume"];
    Ok(Reply::data(Value::Array(names.iter().map(|n| json!({ "subdir": n })).collect())))
}

pub fn status_current(sim: &Arc<Sim>, node: &str, vmid: u32) -> ApiResult {
    let st = lock(&sim.state);
    let vm = vm_on(&st, node, vmid)?;
    let running = vm.power == Power::Running;
    let mut o = json!({
        "vmid": vmid, "name": vm.name(),
        "status": if running { "running" } else { "stopped" },
        "qmpstatus": if running { "running" } else { "stopped" },
        "uptime": super::cluster::uptime(vm),
        "cpus": vm.cpus(), "cpu": 0, "maxmem": vm.memory_mib() << 20,
        "mem": if running { (vm.memory_mib() << 20) / 3 } else { 0 },
        "maxdisk": vm.maxdisk(), "disk": 0, "diskread": 0, "diskwrite": 0,
        "netin": 0, "netout": 0,
        "ha": match st.ha_of(vmid) {
            Some(r) => json!({"managed": 1, "state": r.state, "request_state": r.state}),
            None => json!({"managed": 0}),
        },
    });
    if let Some(m) = o.as_object_mut() {
        if super::agent::agent_configured(vm) {
            m.insert("agent".into(), json!(1));
        }
        if let Some(l) = vm.lock() {
            m.insert("lock".into(), json!(l));
        }
        if vm.is_template() {
            m.insert("template".into(), json!(1));
        }
        if running {
            if let Some(pid) = vm.pid {
                m.insert("pid".into(), json!(pid));
            }
            m.insert("running-machine".into(), json!("pc-i440fx-9.2+pve1"));
            m.insert("running-qemu".into(), json!("9.2.0"));
        }
    }
    Ok(Reply::data(o))
}
