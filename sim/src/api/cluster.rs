//! `/version`, `/cluster/resources`, `/cluster/nextid`, `/cluster/status`.
//!
//! Contract: `nextid` never reserves — two callers get the same answer until a VM with
//! that ID exists; with `?vmid=N` it answers N if free, else 400 `VM N already exists`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{ApiError, ApiResult, Params, Reply};
use crate::model::{ClusterState, Power, Vm};
use crate::sim::{Sim, lock};

/// `GET /version` (pve-manager `PVE/API2.pm`): `version` is the configured
/// `pve_version`, `release` its `MAJOR.MINOR`.
pub fn version(sim: &Sim, p: &Params) -> ApiResult {
    p.only(&[])?;
    let release = sim.cfg.pve_version_parts().map(|(a, b)| format!("{a}.{b}")).unwrap_or_default();
    Ok(Reply::data(json!({
        "version": sim.cfg.pve_version,
        "release": release,
        "repoid": "025864202ebb6109",
    })))
}

/// One VM as `cluster/resources` lists it.
pub fn vm_resource(st: &ClusterState, vm: &Vm) -> Value {
    let running = vm.power == Power::Running;
    let ty = if vm.is_ct() { "lxc" } else { "qemu" };
    let mut v = json!({
        "id": format!("{ty}/{}", vm.vmid),
        "type": ty,
        "vmid": vm.vmid,
        "name": vm.name(),
        "node": vm.node,
        "status": if running { "running" } else { "stopped" },
        "template": u8::from(vm.is_template()),
        "maxmem": vm.memory_mib() << 20,
        "mem": if running { (vm.memory_mib() << 20) / 3 } else { 0 },
        "maxcpu": vm.cpus(),
        "cpu": 0,
        "maxdisk": vm.maxdisk(),
        "disk": 0,
        "diskread": 0,
        "diskwrite": 0,
        "netin": 0,
        "netout": 0,
        "uptime": uptime(vm),
    });
    if let Some(obj) = v.as_object_mut() {
        if let Some(l) = vm.lock() {
            obj.insert("lock".into(), l.into());
        }
        if let Some(t) = vm.config.get("tags") {
            obj.insert("tags".into(), t.clone().into());
        }
        if let Some(ha) = st.ha_of(vm.vmid) {
            obj.insert("hastate".into(), ha.state.clone().into());
        }
    }
    v
}

/// Seconds since start (0 when stopped).
pub fn uptime(vm: &Vm) -> u64 {
    match (vm.power, vm.started_at) {
        (Power::Running, Some(t)) => crate::model::ids::now_unix().saturating_sub(t),
        _ => 0,
    }
}

pub fn resources(sim: &Arc<Sim>, p: &Params) -> ApiResult {
    p.only(&["type"])?;
    let ty = p.get("type");
    if let Some(t) = ty
        && !["vm", "storage", "node", "sdn", "pool"].contains(&t)
    {
        return Err(ApiError::param(
            "type",
            format!("value '{t}' does not have a value in the enumeration 'vm, storage, node, sdn'"),
        ));
    }
    let st = lock(&sim.state);
    let mut out = Vec::new();
    if ty.is_none() || ty == Some("vm") {
        out.extend(st.vms.values().map(|vm| vm_resource(&st, vm)));
    }
    if ty.is_none() || ty == Some("node") {
        for n in &sim.cfg.nodes {
            out.push(json!({
                "id": format!("node/{n}"), "type": "node", "node": n, "status": "online",
                "maxcpu": 16, "cpu": 0.02, "maxmem": 68_719_476_736u64, "mem": 4_294_967_296u64,
                "maxdisk": 100_000_000_000u64, "disk": 10_000_000_000u64, "uptime": 86_400,
                "level": "", "cgroup-mode": 2,
            }));
        }
    }
    if ty.is_none() || ty == Some("storage") {
        drop(st);
        for n in &sim.cfg.nodes {
            for s in &sim.cfg.storages {
                let (total, used, _) = super::storage::usage(sim, n, s);
                out.push(json!({
                    "id": format!("storage/{n}/{}", s.id), "type": "storage", "node": n,
                    "storage": s.id, "status": "available", "plugintype": s.kind,
                    "content": s.content, "shared": u8::from(s.shared),
                    "maxdisk": total, "disk": used,
                }));
            }
        }
    }
    Ok(Reply::data(Value::Array(out)))
}

pub fn nextid(sim: &Arc<Sim>, p: &Params) -> ApiResult {
    p.only(&["vmid"])?;
    let st = lock(&sim.state);
    if let Some(v) = p.get("vmid") {
        let vmid = super::params::vmid("vmid", v)?;
        if st.vms.contains_key(&vmid) {
            return Err(ApiError::param("vmid", format!("VM {vmid} already exists")));
        }
        return Ok(Reply::data(json!(vmid.to_string())));
    }
    Ok(Reply::data(json!(st.next_free_vmid().to_string())))
}

pub fn status(sim: &Arc<Sim>) -> ApiResult {
    let mut out = vec![json!({
        "id": "cluster", "type": "cluster", "name": "sim", "nodes": sim.cfg.nodes.len(),
        "quorate": 1, "version": sim.cfg.nodes.len(),
    })];
    for (i, n) in sim.cfg.nodes.iter().enumerate() {
        out.push(json!({
            "id": format!("node/{n}"), "type": "node", "name": n, "nodeid": i + 1,
            "online": 1, "local": u8::from(i == 0), "level": "",
            "ip": sim.cfg.node_ip(i).to_string(),
        }));
    }
    Ok(Reply::data(Value::Array(out)))
}
