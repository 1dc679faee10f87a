//! What Proxmox VE would have done with the tasks that were running when this
//! simulator stopped.
//!
//! On PVE a task is a worker process that `pvedaemon` forks
//! (`PVE::RESTEnvironment::fork_worker`); it does not depend on the client that
//! asked for it, and it clears the config `lock` it took when it ends
//! (qemu-server `PVE/API2/Qemu.pm`: `clone_vm` sets `lock: clone` on the new
//! config and removes it when the copy is done, a failed clone destroys the new
//! config; `migrate_vm` → `PVE/QemuMigrate.pm` moves the config to the target and
//! removes `lock: migrate`; `create_vm` removes a failed create's config). A
//! client killed mid-task therefore finds, when it comes back, the task ended and
//! the lock gone (docs/SIMULATOR.md; the reference's "Tasks" and "VM lifecycle").
//!
//! The simulator's workers are timers inside its own process. A simulator
//! embedded in cradle (`kind = "sim"`) dies with cradle, and a stopped
//! `cradle sim serve` too: without this module they came back with the task
//! `running` forever and its `lock` set — a VM that neither provisioning nor
//! removal could touch (`VM is locked (migrate)`), and no `qm` to unlock it.
//!
//! Contract: [`finish_interrupted`] (called by `Sim::new` on a loaded state) ends
//! every task still `running`, in the order they started, as its worker would
//! have ended it, and says so in the task's log:
//! - `qmclone`: the clone completes: the new VM gets the config its worker would
//!   have written last (`crate::api::clone::finish_at_load`), without `lock: clone`; OK.
//! - `qmigrate`: the VM lives on the task's target node, `lock: migrate` removed; OK.
//! - `qmstop`, `qmshutdown`: the VM is stopped; OK.
//! - `qmdestroy`: the VM is gone (with `purge`, its HA resource too); OK.
//! - `qmreboot`: the VM is stopped (its pending changes apply at the start); OK;
//!   then PVE's own start follows as a new `qmstart` task, as after every reboot,
//!   under the configured API token (`AccessConfig::api_token`), as the simulator's
//!   reboot starts it while it runs (docs/SIMULATOR.md: real PVE's is `root@pam`'s).
//! - `qmstart` and that follow-up start are returned, still running:
//!   [`start_interrupted`] (from `Cluster::start`, once guests can run)
//!   cold-starts each VM and ends its task with the start's result (a VM that is
//!   already running is OK).
//! - `qmcreate`, `vzcreate`: the request's disks were never kept, so the create
//!   fails as PVE's failed create does (`unable to create VM N - ...`) and the VM,
//!   which only held `lock: create`, is removed.
//! - any other task fails (`interrupted: ...`) and a lock it held is removed.
//!
//! A `lock` that no task of the state file held is left alone: it is really
//! stuck, and `qm unlock VMID` on the node (the simulator's node SSH has it)
//! clears it, as on PVE.

use std::sync::Arc;

use crate::model::{ClusterState, Power, Task};
use crate::sim::{Sim, lock};

/// The log line of a task ended at load.
const NOTE: &str = "the simulator stopped while this task ran; finished when it loaded its state again";

/// A start to run once the guests can (see [`start_interrupted`]): the task's
/// UPID and the VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingStart {
    /// The `qmstart` task, still running.
    pub upid: String,
    /// The VM to start.
    pub vmid: u32,
}

/// The config `lock` a worker of this type holds while it runs, if any.
fn held_lock(kind: &str) -> Option<&'static str> {
    match kind {
        "qmclone" => Some("clone"),
        "qmigrate" | "vzmigrate" => Some("migrate"),
        "qmcreate" | "vzcreate" => Some("create"),
        _ => None,
    }
}

/// Ends the running tasks of a loaded state (see the module docs); returns the
/// starts still to run. `token` (`USER@REALM!TOKENID`) is the simulator's API
/// token: the follow-up start of a reboot is made under it.
pub fn finish_interrupted(st: &mut ClusterState, token: &str) -> Vec<PendingStart> {
    let running: Vec<Task> = st.tasks.iter().filter(|t| t.running()).cloned().collect();
    let mut starts = Vec::new();
    for task in running {
        let Some(vmid) = task.vmid else {
            end(st, &task.upid, Err(interrupted()));
            continue;
        };
        let result = match task.kind.as_str() {
            "qmclone" | "qmigrate" => {
                let target = task.args.get("target").cloned();
                match st.vms.get_mut(&vmid) {
                    Some(vm) if task.kind == "qmclone" => {
                        crate::api::clone::finish_at_load(vm, &task);
                        Ok(())
                    }
                    Some(vm) => {
                        if let Some(target) = target {
                            vm.node = target;
                        }
                        unlock(vm, &task.kind);
                        Ok(())
                    }
                    None => Err(format!("VM {vmid} vanished while the task ran")),
                }
            }
            "qmstop" | "qmshutdown" => {
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.set_stopped();
                }
                Ok(())
            }
            "qmdestroy" => {
                st.vms.remove(&vmid);
                let sid = format!("vm:{vmid}");
                if task.args.get("purge").is_some_and(|p| p == "1") && st.ha_resources.remove(&sid).is_some() {
                    for r in st.ha_rules.values_mut() {
                        r.resources.retain(|s| *s != sid);
                    }
                }
                Ok(())
            }
            "qmreboot" => match st.vms.get_mut(&vmid) {
                Some(vm) if vm.lock().is_some() => Err(format!("VM is locked ({})", vm.lock().unwrap_or_default())),
                Some(vm) => {
                    vm.set_stopped();
                    let node = vm.node.clone();
                    let pid = st.pid();
                    let start = Task::new(&node, pid, "qmstart", &vmid.to_string(), token, Some(vmid));
                    starts.push(PendingStart { upid: start.upid.clone(), vmid });
                    end(st, &task.upid, Ok(()));
                    st.tasks.push(start);
                    continue;
                }
                None => Err(format!("VM {vmid} does not exist")),
            },
            "qmstart" => {
                starts.push(PendingStart { upid: task.upid.clone(), vmid });
                continue;
            }
            "qmcreate" | "vzcreate" => {
                if st.vms.get(&vmid).is_some_and(|vm| vm.lock() == Some("create")) {
                    st.vms.remove(&vmid);
                }
                Err(format!("unable to create VM {vmid} - {}", interrupted()))
            }
            _ => {
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    unlock(vm, &task.kind);
                }
                Err(interrupted())
            }
        };
        end(st, &task.upid, result);
    }
    starts
}

fn interrupted() -> String {
    "interrupted: the simulator stopped while the task ran".to_string()
}

/// Removes the lock the worker `kind` held, not another one.
fn unlock(vm: &mut crate::model::Vm, kind: &str) {
    if held_lock(kind).is_some_and(|l| vm.lock() == Some(l)) {
        vm.config.remove("lock");
    }
}

fn end(st: &mut ClusterState, upid: &str, result: Result<(), String>) {
    Sim::task_log(st, upid, NOTE);
    Sim::finish_task_in(st, upid, result);
}

/// Runs the starts [`finish_interrupted`] left (queued in `Sim::interrupted_starts`):
/// cold start, then the task ends with the start's result.
pub fn start_interrupted(sim: &Arc<Sim>) {
    let starts = std::mem::take(&mut *lock(&sim.interrupted_starts));
    for s in starts {
        let power = lock(&sim.state).vms.get(&s.vmid).map(|vm| vm.power);
        let result = match power {
            Some(Power::Running) => Ok(()),
            Some(Power::Stopped) => crate::api::cold_start(sim, s.vmid),
            None => Err(format!("VM {} does not exist", s.vmid)),
        };
        sim.finish_task(&s.upid, result);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::Vm;

    /// The least-privilege token of `privileges = "cradle"` (not root's).
    const TOKEN: &str = "cradle@pve!cradle";

    fn state_with(vmid: u32, lock_value: Option<&str>, power: Power) -> ClusterState {
        let mut st = ClusterState::default();
        let mut config = BTreeMap::from([("name".to_string(), "vm-1".to_string())]);
        if let Some(l) = lock_value {
            config.insert("lock".into(), l.into());
        }
        let mut vm = Vm::stopped(vmid, "pve1".into(), config);
        vm.power = power;
        st.vms.insert(vmid, vm);
        st
    }

    fn task(st: &mut ClusterState, kind: &str, vmid: u32) -> String {
        let pid = st.pid();
        let t = Task::new("pve1", pid, kind, &vmid.to_string(), TOKEN, Some(vmid));
        let upid = t.upid.clone();
        st.tasks.push(t);
        upid
    }

    fn status(st: &ClusterState, upid: &str) -> Option<String> {
        st.task(upid).and_then(|t| t.exitstatus.clone())
    }

    #[test]
    fn an_interrupted_migration_finishes_on_its_target_and_releases_the_lock() {
        let mut st = state_with(302, Some("migrate"), Power::Stopped);
        let upid = task(&mut st, "qmigrate", 302);
        st.task_mut(&upid).expect("task").args.insert("target".into(), "pve2".into());
        assert!(finish_interrupted(&mut st, TOKEN).is_empty());
        let vm = &st.vms[&302];
        assert_eq!((vm.node.as_str(), vm.lock()), ("pve2", None));
        assert_eq!(status(&st, &upid).as_deref(), Some("OK"));
        assert!(st.task(&upid).expect("task").log.iter().any(|l| l.contains("simulator stopped")));
    }

    #[test]
    fn an_interrupted_clone_completes_and_only_its_own_lock_is_cleared() {
        let mut st = state_with(301, Some("clone"), Power::Stopped);
        let upid = task(&mut st, "qmclone", 301);
        let mut other = state_with(305, Some("backup"), Power::Stopped);
        let vm = other.vms.remove(&305).expect("vm");
        st.vms.insert(305, vm);
        let busy = task(&mut st, "qmclone", 305);
        finish_interrupted(&mut st, TOKEN);
        assert_eq!(st.vms[&301].lock(), None);
        assert_eq!(status(&st, &upid).as_deref(), Some("OK"));
        assert_eq!(st.vms[&305].lock(), Some("backup"), "a lock the task did not take stays");
        assert_eq!(status(&st, &busy).as_deref(), Some("OK"));
    }

    #[test]
    fn an_interrupted_reboot_stops_the_vm_and_queues_pves_own_start() {
        let mut st = state_with(303, None, Power::Running);
        let reboot = task(&mut st, "qmreboot", 303);
        let start = task(&mut st, "qmstart", 304);
        let starts = finish_interrupted(&mut st, TOKEN);
        assert_eq!(status(&st, &reboot).as_deref(), Some("OK"));
        assert_eq!(st.vms[&303].power, Power::Stopped);
        assert_eq!(starts.len(), 2, "{starts:?}");
        assert_eq!(starts[0].vmid, 303);
        assert!(st.task(&starts[0].upid).expect("the follow-up start").running());
        assert_eq!(starts[1], PendingStart { upid: start.clone(), vmid: 304 });
        assert!(st.task(&start).expect("start").running(), "a start ends once it has run");
    }

    /// The follow-up start is the configured token's, as the reboot's own and every
    /// other task the simulator makes (`Sim::new_task`), not root's hard-coded token.
    #[test]
    fn the_follow_up_start_of_an_interrupted_reboot_is_the_configured_tokens_task() {
        let mut st = state_with(308, None, Power::Running);
        task(&mut st, "qmreboot", 308);
        let starts = finish_interrupted(&mut st, TOKEN);
        let start = st.task(&starts[0].upid).expect("the follow-up start");
        assert_eq!(start.user, TOKEN);
        assert!(start.upid.ends_with(":qmstart:308:cradle@pve!cradle:"), "{}", start.upid);
    }

    #[test]
    fn an_interrupted_create_fails_and_its_config_is_removed() {
        let mut st = state_with(306, Some("create"), Power::Stopped);
        let upid = task(&mut st, "qmcreate", 306);
        finish_interrupted(&mut st, TOKEN);
        assert!(!st.vms.contains_key(&306));
        assert!(status(&st, &upid).is_some_and(|s| s.starts_with("unable to create VM 306 - interrupted")));
    }

    #[test]
    fn a_lock_no_task_holds_is_left_for_qm_unlock() {
        let mut st = state_with(307, Some("migrate"), Power::Stopped);
        assert!(finish_interrupted(&mut st, TOKEN).is_empty());
        assert_eq!(st.vms[&307].lock(), Some("migrate"));
    }
}
