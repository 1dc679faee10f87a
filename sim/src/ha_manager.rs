//! A minimal HA manager: it drives HA-managed VMs toward their requested state after
//! the configured reaction delay, as the CRM/LRM pair does.
//!
//! Contract: `started` starts a stopped VM (a `qmstart` task on its node), `stopped`
//! shuts a running one down (`qmshutdown`); `disabled` stops it, `ignored` leaves it
//! alone. The request is re-read when the delay ends, so the last request wins.

use std::sync::Arc;

use crate::model::Power;
use crate::sim::{Sim, lock};

/// Set the requested state of `vm:<vmid>` and schedule reconciliation.
pub fn request_state(sim: &Arc<Sim>, vmid: u32, state: &str) {
    {
        let mut st = lock(&sim.state);
        if let Some(r) = st.ha_resources.get_mut(&format!("vm:{vmid}")) {
            r.state = state.to_string();
        }
        sim.changed();
    }
    schedule(sim, vmid);
}

/// Reconcile `vm:<vmid>` after the HA reaction delay.
pub fn schedule(sim: &Arc<Sim>, vmid: u32) {
    sim.after(sim.scaled(sim.cfg.timings.ha_reaction), move |sim| reconcile(sim, vmid));
}

fn reconcile(sim: &Arc<Sim>, vmid: u32) {
    let (want, power, node) = {
        let st = lock(&sim.state);
        let Some(r) = st.ha_of(vmid) else { return };
        let Some(vm) = st.vms.get(&vmid) else { return };
        if vm.lock().is_some() {
            return;
        }
        (r.state.clone(), vm.power, vm.node.clone())
    };
    match (want.as_str(), power) {
        ("started", Power::Stopped) => {
            crate::api::lifecycle_start(sim, &node, vmid);
        }
        ("stopped" | "disabled", Power::Running) => {
            crate::api::lifecycle_shutdown(sim, &node, vmid);
        }
        _ => {}
    }
}
