//! Long-running VM operations as tasks: start/stop/shutdown/reboot/reset and
//! destroy (clone lives in `clone.rs`, migrate and resize in `migrate.rs`).
//!
//! Contract: each returns a UPID at once and completes after its scaled duration.
//! Start reads the `cicustom` snippets on the
//! node the VM is on when the worker runs, applies pending changes and boots the guest;
//! a missing or oversize snippet fails the task. `qmreboot` ends once the VM stopped and
//! the VM starts again afterwards. Lock checks of power operations and of destroy happen
//! in the worker (the task fails), those of clone and migrate before it (HTTP 500); the
//! checks of resize all run in its worker (`migrate.rs`).
//! HA-managed VMs get `hastart`/`hastop`/`hamigrate` tasks that end before the HA
//! manager acts.

use std::sync::Arc;

use serde_json::json;

pub use super::clone::clone;
use super::qemu::{check_lock, vm_on};
use super::{ApiError, ApiResult, Params, Reply};
use crate::faults::FaultKind;
use crate::model::{Power, ids};
use crate::sim::{Sim, lock};

fn upid_reply(upid: String) -> ApiResult {
    Ok(Reply::data(json!(upid)))
}

/// Cold-start a VM now (inside a worker): snippets, pending, boot. Error = task error.
pub fn cold_start(sim: &Arc<Sim>, vmid: u32, skiplock: bool) -> Result<(), String> {
    let mut st = lock(&sim.state);
    let Some(vm) = st.vms.get_mut(&vmid) else {
        return Err(format!("Configuration file 'nodes/?/qemu-server/{vmid}.conf' does not exist"));
    };
    if vm.power == Power::Running {
        return Err(format!("VM {vmid} already running"));
    }
    if vm.is_template() {
        return Err("you can't start a vm if it's a template".into());
    }
    if !skiplock {
        check_lock(vm)?;
    }
    let mut staged = vm.clone();
    staged.apply_pending();
    super::hotplug::start_check(&staged.config)?;
    let seed = crate::guest::read_seed(sim, &staged)?;
    vm.apply_pending();
    vm.power = Power::Running;
    vm.started_at = Some(ids::now_unix());
    let pid = st.pid();
    if let Some(vm) = st.vms.get_mut(&vmid) {
        vm.pid = Some(pid);
    }
    sim.changed();
    drop(st);
    crate::guest::power_on(sim, vmid, seed).inspect_err(|_| halt(sim, vmid))
}

pub fn halt(sim: &Arc<Sim>, vmid: u32) {
    crate::guest::power_off(sim, vmid);
    let mut st = lock(&sim.state);
    if let Some(vm) = st.vms.get_mut(&vmid) {
        vm.set_stopped();
    }
    sim.changed();
}

/// Start as a task on `node` (also used by HA).
pub fn start_task(sim: &Arc<Sim>, node: &str, vmid: u32, skiplock: bool) -> String {
    let upid = {
        let mut st = lock(&sim.state);
        sim.new_task(&mut st, node, "qmstart", &vmid.to_string(), Some(vmid))
    };
    let u = upid.clone();
    sim.after(sim.scaled(sim.cfg.timings.start), move |sim| {
        let r = cold_start(sim, vmid, skiplock);
        sim.finish_task(&u, r);
    });
    upid
}

/// Stop as a task on `node` (also used by HA).
pub fn stop_task(sim: &Arc<Sim>, node: &str, vmid: u32, kind: &'static str, skiplock: bool, force: bool) -> String {
    let upid = {
        let mut st = lock(&sim.state);
        sim.new_task(&mut st, node, kind, &vmid.to_string(), Some(vmid))
    };
    let u = upid.clone();
    let d = if kind == "qmstop" { sim.cfg.timings.stop } else { sim.cfg.timings.shutdown };
    sim.after(sim.scaled(d), move |sim| {
        let r = (|| {
            let st = lock(&sim.state);
            let vm = st.vms.get(&vmid).ok_or_else(|| format!("VM {vmid} does not exist"))?;
            if !skiplock {
                check_lock(vm)?;
            }
            Ok(vm.power == Power::Running)
        })();
        match r {
            Ok(true) => power_down(sim, vmid, kind == "qmshutdown", force, move |sim, r| sim.finish_task(&u, r)),
            Ok(false) => sim.finish_task(&u, Ok(())),
            Err(e) => sim.finish_task(&u, Err(e)),
        }
    });
    upid
}

/// Stop a running VM, gracefully (the ACPI power button) or not, then `then`. A
/// simulated guest goes down at once (a hung one refuses a graceful shutdown); a qemu
/// guest's power button is pressed and its exit awaited, so `then` runs later.
fn power_down(
    sim: &Arc<Sim>,
    vmid: u32,
    graceful: bool,
    force: bool,
    then: impl FnOnce(&Arc<Sim>, Result<(), String>) + Send + 'static,
) {
    if graceful && crate::guest::qemu::is_running(sim, vmid) {
        let timeout = crate::guest::qemu::settings(sim, vmid).map(|q| q.shutdown_timeout).unwrap_or_default();
        let sim = sim.clone();
        tokio::spawn(async move {
            let r = crate::guest::qemu::powerdown(&sim, vmid, timeout).await;
            let r = if force { Ok(()) } else { r };
            if r.is_ok() {
                halt(&sim, vmid);
            }
            then(&sim, r);
        });
        return;
    }
    if graceful && !force && crate::guest::is_hung(sim, vmid) {
        return then(sim, Err("VM quit/powerdown failed - got timeout".to_string()));
    }
    halt(sim, vmid);
    then(sim, Ok(()));
}

pub fn power(sim: &Arc<Sim>, node: &str, vmid: u32, action: &str, p: &Params) -> ApiResult {
    p.only(&[
        "skiplock",
        "timeout",
        "forceStop",
        "keepActive",
        "machine",
        "migratedfrom",
        "stateuri",
        "targetstorage",
        "force-cpu",
        "migration_type",
        "migration_network",
        "overrule-shutdown",
    ])?;
    let skiplock = p.bool("skiplock", false)?;
    let (running, ha) = {
        let st = lock(&sim.state);
        let vm = vm_on(&st, node, vmid)?;
        (vm.power == Power::Running, st.ha_of(vmid).is_some())
    };
    match action {
        "start" | "stop" | "shutdown" if ha => {
            let want = if action == "start" { "started" } else { "stopped" };
            let kind = if action == "start" { "hastart" } else { "hastop" };
            crate::ha_manager::request_state(sim, vmid, want);
            let mut st = lock(&sim.state);
            let upid = sim.new_task(&mut st, node, kind, &vmid.to_string(), Some(vmid));
            Sim::task_log(&mut st, &upid, format!("Requesting HA {action} for VM {vmid}"));
            Sim::finish_task_in(&mut st, &upid, Ok(()));
            sim.changed();
            upid_reply(upid)
        }
        "start" => upid_reply(start_task(sim, node, vmid, skiplock)),
        "stop" => upid_reply(stop_task(sim, node, vmid, "qmstop", skiplock, true)),
        "shutdown" => {
            let force = p.bool("forceStop", false)?;
            upid_reply(stop_task(sim, node, vmid, "qmshutdown", skiplock, force))
        }
        "reboot" => {
            if !running {
                return Err(ApiError::die(format!("VM {vmid} not running")));
            }
            let upid = {
                let mut st = lock(&sim.state);
                sim.new_task(&mut st, node, "qmreboot", &vmid.to_string(), Some(vmid))
            };
            // Fault `reboot-hang`: the VM restarts (pending changes applied) but
            // the guest never comes back, as after a hung in-guest reboot.
            let hang = sim.faults.fire(FaultKind::RebootHang);
            let u = upid.clone();
            sim.after(sim.scaled(sim.cfg.timings.shutdown), move |sim| {
                let locked = lock(&sim.state).vms.get(&vmid).and_then(|v| v.lock().map(str::to_string));
                if let Some(l) = locked {
                    sim.finish_task(&u, Err(format!("VM is locked ({l})")));
                    return;
                }
                // A simulated guest's reboot never waits on the guest; a qemu guest's
                // waits for its ACPI shutdown as qmreboot does.
                let force = !crate::guest::qemu::is_running(sim, vmid);
                power_down(sim, vmid, true, force, move |sim, r| {
                    let ok = r.is_ok();
                    sim.finish_task(&u, r);
                    let node = lock(&sim.state).vms.get(&vmid).map(|v| v.node.clone());
                    if let (true, Some(node)) = (ok, node) {
                        if hang {
                            lock(&sim.hang_next_boot).insert(vmid);
                        }
                        // qmeventd brings it back; PVE logs this as a start task.
                        start_task(sim, &node, vmid, false);
                    }
                });
            });
            upid_reply(upid)
        }
        "reset" => {
            if !running {
                return Err(ApiError::die(format!("VM {vmid} not running")));
            }
            let mut st = lock(&sim.state);
            let upid = sim.new_task(&mut st, node, "qmreset", &vmid.to_string(), Some(vmid));
            Sim::finish_task_in(&mut st, &upid, Ok(()));
            drop(st);
            crate::guest::guest_reboot(sim, vmid, sim.scaled(sim.cfg.timings.guest_reboot));
            upid_reply(upid)
        }
        other => Err(ApiError::status(
            501,
            format!("Method 'POST /api2/json/nodes/{node}/qemu/{vmid}/status/{other}' not implemented"),
        )),
    }
}

pub fn destroy(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["purge", "destroy-unreferenced-disks", "skiplock"])?;
    let purge = p.bool("purge", false)?;
    let mut st = lock(&sim.state);
    let vm = vm_on(&st, node, vmid)?;
    let skiplock = p.bool("skiplock", false)?;
    // The early checks, in their order (qemu-server e6352be, src/PVE/API2/Qemu.pm:2826-2845),
    // answer HTTP 500 before the worker.
    if st.ha_of(vmid).is_some() && !purge {
        return Err(ApiError::die(format!(
            "unable to remove VM {vmid} - used in HA resources and purge parameter not set."
        )));
    }
    if vm.power == Power::Running {
        return Err(ApiError::die(format!("VM {vmid} is running - destroy failed")));
    }
    // The lock is checked inside the worker (src/PVE/QemuServer.pm:1845-1849, `destroy_vm`,
    // called from the worker at Qemu.pm:2862): a locked VM's destroy is a task that fails
    // `VM is locked (<lock>)`.
    let locked = if skiplock { Ok(()) } else { check_lock(vm) };
    let upid = sim.new_task(&mut st, node, "qmdestroy", &vmid.to_string(), Some(vmid));
    if let Err(e) = locked {
        Sim::finish_task_in(&mut st, &upid, Err(e));
        sim.changed();
        return upid_reply(upid);
    }
    Sim::task_arg(&mut st, &upid, "purge", if purge { "1" } else { "0" });
    sim.changed();
    drop(st);
    let u = upid.clone();
    sim.after(sim.scaled(sim.cfg.timings.destroy), move |sim| {
        crate::guest::qemu::destroy(sim, vmid);
        let mut st = lock(&sim.state);
        st.vms.remove(&vmid);
        let sid = format!("vm:{vmid}");
        if purge && st.ha_resources.remove(&sid).is_some() {
            for r in st.ha_rules.values_mut() {
                r.resources.retain(|s| *s != sid);
            }
            Sim::task_log(&mut st, &u, format!("purging HA resource {sid}"));
        }
        Sim::finish_task_in(&mut st, &u, Ok(()));
        sim.changed();
    });
    upid_reply(upid)
}
