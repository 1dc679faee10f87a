//! cradle's direct backend (the Ansible-style path): clone the template and
//! configure the VM through the `proxmox` capability.
//!
//! - `discover` finds the VM by canonical name and VMID; a name on another
//!   VMID, a VMID under another name, or a template is a `conflict`.
//! - `check-ownership` accepts: `discover` already checks the identity.
//! - `plan` reports the clone for a missing VM, else the `onboot`/`startup`
//!   changes.
//! - `create` clones (waiting for the clone task before touching the config),
//!   then sets cores, memory, each NIC, `cicustom`, the cloud-init drive, the
//!   extra disks, tags, `onboot` and `startup`, grows the boot disk when
//!   `disk_gib` is larger (it never shrinks: smaller is `invalid`), and returns
//!   the VM stopped. A clone that fails ambiguously (timeout, reset connection)
//!   is never retried blindly: the VM and the task list are re-read first (see
//!   `create.rs`).
//! - `reconcile` re-applies `onboot`/`startup` on every run (self-healing).
//! - `remove` waits for the VM's running tasks (a lock a task holds), then
//!   stops and destroys with purge; a missing VM or a mismatched identity fails
//!   closed, a lock no task holds fails naming how to clear it.

mod config;
mod create;

cradle_guest::export_backend!(Direct);

cradle_guest::manifest! {
    name: "direct",
    version: env!("CARGO_PKG_VERSION"),
    description: "Clone the template and configure the VM through the Proxmox API",
    needs: ["log", "proxmox"],
}

use cradle_guest::config::startup_changes;
use cradle_guest::lifecycle::{PlanAction, PlanOutcome};
use cradle_guest::log::{self, Level};
use cradle_guest::proxmox::{self, PowerAction, TASK_TIMEOUT_MS};
use cradle_guest::types::{Snippets, VmSpec, VmState};
use cradle_guest::{Backend, Error};

struct Direct;

/// Wait for a task of this backend (15 minutes at most).
fn wait(node: &str, upid: &str, what: &str) -> Result<(), Error> {
    proxmox::wait(node, upid, what, TASK_TIMEOUT_MS)
}

impl Backend for Direct {
    fn discover(vm: VmSpec) -> Result<Option<VmState>, Error> {
        proxmox::discover(&vm)
    }

    fn check_ownership(_vm: VmSpec, _found: Option<VmState>) -> Result<(), Error> {
        // The direct path keeps no state of its own: identity is checked by
        // `discover` (name and VMID must agree), so there is nothing more to own.
        Ok(())
    }

    fn plan(vm: VmSpec) -> Result<PlanOutcome, Error> {
        let vms = proxmox::list_vms()?;
        match proxmox::discover_in(&vms, &vm)? {
            None => {
                let template = proxmox::template_in(&vms, &vm)?;
                Ok(PlanOutcome {
                    action: PlanAction::Create,
                    summary: vec![
                        format!(
                            "clone template {} ({}) on {} to {} (vmid {})",
                            vm.template, template.vmid, template.node, vm.name, vm.vmid
                        ),
                        format!("{} cores, {} MiB, storage {}", vm.cores, vm.memory_mib, vm.storage),
                    ],
                    plan_id: None,
                })
            }
            Some(found) => {
                let changes = startup_changes(&vm, &proxmox::get_config(&found.node, found.vmid)?);
                let action = if changes.is_empty() { PlanAction::NoOp } else { PlanAction::Update };
                Ok(PlanOutcome {
                    action,
                    summary: changes.iter().map(|e| format!("set {} = {}", e.key, e.value)).collect(),
                    plan_id: None,
                })
            }
        }
    }

    fn create(vm: VmSpec, snippets: Snippets) -> Result<VmState, Error> {
        create::create(&vm, &snippets)
    }

    fn reconcile(vm: VmSpec, found: VmState) -> Result<Vec<String>, Error> {
        let current = proxmox::get_config(&found.node, found.vmid)?;
        let changes = startup_changes(&vm, &current);
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        proxmox::set_config(&found.node, found.vmid, &changes, &[], None)?;
        let lines: Vec<String> = changes.iter().map(|e| format!("set {} = {}", e.key, e.value)).collect();
        log::vm(Level::Info, &vm, &format!("reconciled: {}", lines.join(", ")));
        Ok(lines)
    }

    fn remove(vm: VmSpec) -> Result<(), Error> {
        let Some(found) = proxmox::discover(&vm)? else {
            return Err(Error::NotFound(format!(
                "VM {} (vmid {}) does not exist; nothing was removed (check the name and VMID in the inventory)",
                vm.name, vm.vmid
            )));
        };
        // A run killed mid-task left the VM locked by a task that runs on
        // (PVE) or was finished at load (the simulator): wait for it, so the
        // stop and destroy below are not refused with `VM is locked`.
        let found = create::settle_tasks(&vm, found)?;
        if found.status == "running" {
            let upid = proxmox::power(&found.node, found.vmid, PowerAction::Stop)?;
            wait(&found.node, &upid, &format!("stop {}", vm.name))?;
        }
        let upid = proxmox::destroy(&found.node, found.vmid, true)?;
        wait(&found.node, &upid, &format!("destroy {}", vm.name))?;
        log::vm(Level::Info, &vm, "destroyed");
        Ok(())
    }
}
