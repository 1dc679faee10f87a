//! Migration (+ precheck) and disk resize as tasks.
//!
//! Contract: a running VM needs `online=1` (`can't migrate running VM without
//! --online`); live migration with local disks needs `with-local-disks=1`; the VM holds
//! `lock: migrate` until the `qmigrate` task ends, then lives on the target. Snippets
//! are not checked (as on PVE). Resize takes `+N[KMGT]` or an absolute size and never
//! shrinks; it returns a `resize` task.

use std::sync::Arc;

use serde_json::{Value, json};

use super::qemu::{check_lock, vm_on, vm_on_mut};
use super::{ApiError, ApiResult, Params, Reply};
use crate::model::{Power, Vm, ids, props};
use crate::sim::{Sim, lock};

fn upid_reply(upid: String) -> ApiResult {
    Ok(Reply::data(json!(upid)))
}

fn local_disks(sim: &Sim, vm: &Vm) -> Vec<Value> {
    vm.config
        .iter()
        .filter(|(k, _)| props::is_drive_key(k))
        .filter(|(_, v)| {
            let store = v.split(':').next().unwrap_or("");
            sim.cfg.storages.iter().any(|s| s.id == store && !s.shared)
        })
        .map(|(k, v)| {
            let volid = v.split(',').next().unwrap_or("");
            let size = props::prop(v, "size").and_then(|s| ids::parse_size(&s)).unwrap_or(4 << 20);
            json!({"volid": volid, "drivename": k, "size": size, "is_unused": 0, "cdrom": u8::from(volid.contains("cloudinit")), "shared": 0, "replicate": 1})
        })
        .collect()
}

pub fn migrate_precheck(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["target"])?;
    let st = lock(&sim.state);
    let vm = vm_on(&st, node, vmid)?;
    let others: Vec<&String> = sim.cfg.nodes.iter().filter(|n| *n != node).collect();
    Ok(Reply::data(json!({
        "running": u8::from(vm.power == Power::Running),
        "allowed_nodes": others,
        "not_allowed_nodes": {},
        "local_disks": local_disks(sim, vm),
        "local_resources": [],
        "mapped-resources": [],
    })))
}

pub fn migrate(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&[
        "target",
        "online",
        "with-local-disks",
        "targetstorage",
        "force",
        "bwlimit",
        "migration_type",
        "migration_network",
        "with-conntrack-state",
    ])?;
    let target = p.required("target")?.to_string();
    // qemu-server e6352be, src/PVE/API2/Qemu.pm:5567 (a parameter error) and :5571
    // (pve-cluster's `check_node_exists`, a plain die: src/PVE/Cluster.pm:807).
    if target == node {
        return Err(ApiError::param("target", "target is local node."));
    }
    if !sim.has_node(&target) {
        return Err(ApiError::die(format!("no such cluster node '{target}'")));
    }
    let online = p.bool("online", false)?;
    let with_local = p.bool("with-local-disks", false)?;
    let mut st = lock(&sim.state);
    let vm = vm_on(&st, node, vmid)?;
    let running = vm.power == Power::Running;
    if running && !online {
        return Err(ApiError::die("can't migrate running VM without --online"));
    }
    if st.ha_of(vmid).is_some() {
        let upid = sim.new_task(&mut st, node, "hamigrate", &vmid.to_string(), Some(vmid));
        Sim::task_log(&mut st, &upid, format!("Requesting HA migration for VM {vmid} to node {target}"));
        Sim::finish_task_in(&mut st, &upid, Ok(()));
        sim.changed();
        drop(st);
        let n = node.to_string();
        sim.after(sim.scaled(sim.cfg.timings.ha_reaction), move |sim| {
            migrate_task(sim, &n, vmid, target);
        });
        return upid_reply(upid);
    }
    if running && !local_disks(sim, vm).is_empty() && !with_local {
        return Err(ApiError::die("can't live migrate attached local disks without with-local-disks option"));
    }
    check_lock(vm).map_err(ApiError::die)?;
    drop(st);
    upid_reply(migrate_task(sim, node, vmid, target))
}

fn migrate_task(sim: &Arc<Sim>, node: &str, vmid: u32, target: String) -> String {
    let mut st = lock(&sim.state);
    let upid = sim.new_task(&mut st, node, "qmigrate", &vmid.to_string(), Some(vmid));
    Sim::task_log(&mut st, &upid, format!("starting migration of VM {vmid} to node '{target}'"));
    Sim::task_arg(&mut st, &upid, "target", target.clone());
    if let Ok(vm) = vm_on_mut(&mut st, node, vmid) {
        vm.config.insert("lock".into(), "migrate".into());
    }
    sim.changed();
    drop(st);
    let u = upid.clone();
    let src = node.to_string();
    sim.after(sim.scaled(sim.cfg.timings.migrate), move |sim| {
        let mut st = lock(&sim.state);
        let r = match vm_on_mut(&mut st, &src, vmid) {
            Ok(vm) => {
                vm.node = target.clone();
                if vm.lock() == Some("migrate") {
                    vm.config.remove("lock");
                }
                Ok(())
            }
            Err(_) => Err(format!("VM {vmid} vanished during migration")),
        };
        Sim::task_log(&mut st, &u, "migration finished successfully (duration 00:00:08)");
        Sim::finish_task_in(&mut st, &u, r);
        sim.changed();
    });
    upid
}

pub fn resize(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["disk", "size", "digest", "skiplock"])?;
    let disk = p.required("disk")?.to_string();
    let size = p.required("size")?.to_string();
    let (relative, num) = match size.strip_prefix('+') {
        Some(s) => (true, s),
        None => (false, size.as_str()),
    };
    let amount = ids::parse_size(num)
        .ok_or_else(|| ApiError::param("size", format!("value does not match the regex pattern: {size}")))?;
    let mut st = lock(&sim.state);
    let vm = vm_on(&st, node, vmid)?;
    if !p.bool("skiplock", false)? {
        check_lock(vm).map_err(ApiError::die)?;
    }
    if let Some(d) = p.get("digest")
        && d != vm.digest()
    {
        return Err(ApiError::die("detected modified configuration - file changed by other user? Try again."));
    }
    let Some(val) = vm.config.get(&disk).cloned() else {
        return Err(ApiError::die(format!("disk '{disk}' does not exist")));
    };
    if val.contains("media=cdrom") {
        return Err(ApiError::die("you can't resize a cdrom"));
    }
    let old = props::prop(&val, "size").and_then(|s| ids::parse_size(&s)).unwrap_or(0);
    let new = if relative { old + amount } else { amount };
    if new < old {
        return Err(ApiError::die(format!(
            "shrinking disks is not supported (old size {}, new size {})",
            ids::format_size(old),
            ids::format_size(new)
        )));
    }
    let upid = sim.new_task(&mut st, node, "resize", &vmid.to_string(), Some(vmid));
    drop(st);
    let u = upid.clone();
    sim.after(sim.scaled(sim.cfg.timings.resize), move |sim| {
        let mut st = lock(&sim.state);
        if let Some(vm) = st.vms.get_mut(&vmid)
            && let Some(v) = vm.config.get_mut(&disk)
        {
            let parts: Vec<String> = v.split(',').filter(|x| !x.starts_with("size=")).map(str::to_string).collect();
            *v = format!("{},size={}", parts.join(","), ids::format_size(new));
        }
        Sim::finish_task_in(&mut st, &u, Ok(()));
        sim.changed();
    });
    upid_reply(upid)
}
