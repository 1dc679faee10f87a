//! `/nodes/{node}/lxc/{vmid}/status/*` and `DELETE /nodes/{node}/lxc/{vmid}`: a
//! container's status, power tasks and destroy (pve-container
//! `PVE/API2/LXC/Status.pm`, `PVE/API2/LXC.pm` `destroy_vm`, `PVE::LXC::vmstatus`).
//!
//! Contract: the checks PVE makes before forking a worker fail the call (HTTP 500):
//! `CT N already running` (start), `CT N not running` (stop, shutdown), `VM N not
//! running` (reboot: PVE's own wording), `unable to destroy CT N - container is running`
//! (destroy without `force`), `unable to remove CT N - used in HA resources and purge
//! parameter not set.`; a lock fails inside the worker (`CT is locked (create)`). Tasks:
//! `vzstart` (`timings.start`; the setup code re-reads host name and network), `vzstop`
//! (`timings.stop`), `vzshutdown` (`timings.shutdown`), `vzreboot` (shutdown, then start),
//! `vzdestroy` (`timings.destroy`; `force` stops a running container first). The
//! container's sshd is up `timings.boot_ssh` after the start task ends and goes with
//! stop/shutdown.

use std::sync::Arc;

use serde_json::{Value, json};

use super::lxc::{check_lock, ct_on};
use super::{ApiError, ApiResult, Params, Reply};
use crate::model::{ClusterState, Power, Vm, ct, ids};
use crate::sim::{Sim, lock};

/// A container as `vmstatus` reports it (list and status/current).
pub fn status_json(st: &ClusterState, vm: &Vm) -> Value {
    let running = vm.power == Power::Running;
    let mem = vm.memory_mib() << 20;
    let swap: u64 = vm.config.get("swap").and_then(|s| s.parse().ok()).unwrap_or(512);
    let mut o = json!({
        "vmid": vm.vmid, "name": vm.name(), "type": "lxc",
        "status": if running { "running" } else { "stopped" },
        "cpus": vm.cpus(), "cpu": 0,
        "maxmem": mem, "mem": if running { mem / 8 } else { 0 },
        "maxswap": swap << 20, "swap": 0,
        "maxdisk": vm.maxdisk(), "disk": if running { vm.maxdisk() / 10 } else { 0 },
        "diskread": 0, "diskwrite": 0, "netin": 0, "netout": 0,
        "uptime": super::cluster::uptime(vm),
        "ha": match st.ha_of(vm.vmid) {
            Some(r) => json!({"managed": 1, "state": r.state, "request_state": r.state}),
            None => json!({"managed": 0}),
        },
    });
    if let Some(m) = o.as_object_mut() {
        if let Some(l) = vm.lock() {
            m.insert("lock".into(), json!(l));
        }
        if let Some(t) = vm.config.get("tags") {
            m.insert("tags".into(), json!(t));
        }
        if vm.is_template() {
            m.insert("template".into(), json!(1));
        }
        if let Some(pid) = vm.pid.filter(|_| running) {
            m.insert("pid".into(), json!(pid));
        }
    }
    o
}

pub fn status_current(sim: &Arc<Sim>, node: &str, vmid: u32) -> ApiResult {
    let st = lock(&sim.state);
    let vm = ct_on(&st, node, vmid)?;
    Ok(Reply::data(status_json(&st, vm)))
}

pub fn status_index() -> ApiResult {
    let names = ["current", "start", "stop", "shutdown", "reboot", "suspend", "resume"];
    Ok(Reply::data(Value::Array(names.iter().map(|n| json!({ "subdir": n })).collect())))
}

/// Power the container on now (inside a worker): the setup code rewrites host name and
/// network from the config, then its init starts sshd.
fn power_on(sim: &Arc<Sim>, vmid: u32) -> Result<(), String> {
    let mut st = lock(&sim.state);
    let pid = st.pid();
    let vm = st.vms.get_mut(&vmid).ok_or_else(|| format!("CT {vmid} does not exist"))?;
    if vm.power == Power::Running {
        return Err(format!("CT {vmid} already running"));
    }
    if vm.is_template() {
        return Err("you can't start a CT if it's a template".into());
    }
    check_lock(vm)?;
    vm.disk.net = crate::guest::lxc::network(&vm.config);
    vm.disk.address = ct::first_ipv4(&vm.config).map(|(_, ip, _, _)| ip);
    vm.disk.hostname = vm.config.get("hostname").cloned();
    vm.power = Power::Running;
    vm.started_at = Some(ids::now_unix());
    vm.pid = Some(pid);
    sim.changed();
    drop(st);
    crate::guest::lxc::boot(sim, vmid).inspect_err(|_| super::lifecycle::halt(sim, vmid))
}

/// A `vzstart` task on `node` (also the end of `vzcreate` with `start=1`).
pub fn start_task(sim: &Arc<Sim>, node: &str, vmid: u32) -> String {
    let upid = {
        let mut st = lock(&sim.state);
        let upid = sim.new_task(&mut st, node, "vzstart", &vmid.to_string(), Some(vmid));
        sim.changed();
        upid
    };
    let u = upid.clone();
    sim.after(sim.scaled(sim.cfg.timings.start), move |sim| {
        let r = power_on(sim, vmid);
        sim.finish_task(&u, r);
    });
    upid
}

fn stop_task(sim: &Arc<Sim>, node: &str, vmid: u32, kind: &'static str, then_start: bool) -> String {
    let upid = {
        let mut st = lock(&sim.state);
        let upid = sim.new_task(&mut st, node, kind, &vmid.to_string(), Some(vmid));
        sim.changed();
        upid
    };
    let u = upid.clone();
    let d = if kind == "vzstop" { sim.cfg.timings.stop } else { sim.cfg.timings.shutdown };
    let node = node.to_string();
    sim.after(sim.scaled(d), move |sim| {
        let locked = lock(&sim.state).vms.get(&vmid).map(check_lock);
        match locked {
            Some(Ok(())) => {
                super::lifecycle::halt(sim, vmid);
                if then_start {
                    let r = power_on(sim, vmid);
                    sim.finish_task(&u, r);
                } else {
                    sim.finish_task(&u, Ok(()));
                }
            }
            Some(Err(e)) => sim.finish_task(&u, Err(e)),
            None => sim
                .finish_task(&u, Err(format!("Configuration file '{}' does not exist", Vm::ct_conf_path(&node, vmid)))),
        }
    });
    upid
}

pub fn power(sim: &Arc<Sim>, node: &str, vmid: u32, action: &str, p: &Params) -> ApiResult {
    p.only(&["skiplock", "timeout", "forceStop", "overrule-shutdown", "debug"])?;
    p.bool("forceStop", false)?;
    let running = {
        let st = lock(&sim.state);
        ct_on(&st, node, vmid)?.power == Power::Running
    };
    let upid = match action {
        "start" if running => return Err(ApiError::die(format!("CT {vmid} already running"))),
        "start" => start_task(sim, node, vmid),
        "stop" | "shutdown" | "reboot" if !running => {
            let who = if action == "reboot" { "VM" } else { "CT" };
            return Err(ApiError::die(format!("{who} {vmid} not running")));
        }
        "stop" => stop_task(sim, node, vmid, "vzstop", false),
        "shutdown" => stop_task(sim, node, vmid, "vzshutdown", false),
        "reboot" => stop_task(sim, node, vmid, "vzreboot", true),
        other => {
            return Err(ApiError::status(
                501,
                format!("Method 'POST /api2/json/nodes/{node}/lxc/{vmid}/status/{other}' not implemented"),
            ));
        }
    };
    Ok(Reply::data(json!(upid)))
}

pub fn destroy(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["force", "purge", "destroy-unreferenced-disks"])?;
    let force = p.bool("force", false)?;
    let purge = p.bool("purge", false)?;
    let mut st = lock(&sim.state);
    let vm = ct_on(&st, node, vmid)?;
    check_lock(vm).map_err(ApiError::die)?;
    let sid = format!("ct:{vmid}");
    if st.ha_resources.contains_key(&sid) && !purge {
        return Err(ApiError::die(format!(
            "unable to remove CT {vmid} - used in HA resources and purge parameter not set."
        )));
    }
    let running = vm.power == Power::Running;
    if running && !force {
        return Err(ApiError::die(format!("unable to destroy CT {vmid} - container is running")));
    }
    let upid = sim.new_task(&mut st, node, "vzdestroy", &vmid.to_string(), Some(vmid));
    sim.changed();
    drop(st);
    let u = upid.clone();
    sim.after(sim.scaled(sim.cfg.timings.destroy), move |sim| {
        if running {
            {
                let mut st = lock(&sim.state);
                Sim::task_log(&mut st, &u, format!("forced to stop CT {vmid} before destroying!"));
            }
            super::lifecycle::halt(sim, vmid);
        }
        let mut st = lock(&sim.state);
        st.vms.remove(&vmid);
        if purge {
            Sim::task_log(&mut st, &u, format!("purging CT {vmid} from related configurations.."));
        }
        Sim::finish_task_in(&mut st, &u, Ok(()));
        sim.changed();
    });
    Ok(Reply::data(json!(upid)))
}
