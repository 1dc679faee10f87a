//! cradle's Terraform backend: each host is a module of its own with its own
//! state; Terraform creates the VM (stopped, on the template's node) and
//! destroys it, and the shared workflow does everything in between through the
//! Proxmox API. Terraform never reverses that work: the rendered resource
//! ignores the node, power state, disks and cloud-init references after
//! creation (docs/TERRAFORM.md).
//!
//! - `discover` finds the VM by name and VMID in the cluster, as the direct
//!   backend does (the same file): name and VMID must agree.
//! - `check-ownership`: the VM (or its absence) must agree with the module's
//!   state by name and VMID; a VM without a matching resource, a resource
//!   without its VM, other resources or an unreadable state fail closed.
//! - `plan` renders the module (without snippet references, which are ignored
//!   after creation anyway), plans, approves and discards: a check before any
//!   side effect.
//! - `create` checks ownership again, renders with the snippets, plans,
//!   approves and applies exactly that plan, and returns the VM stopped. On a
//!   VM whose creation was interrupted after its apply, the plan is a no-op.
//!   A replacement is applied only with `vm.allow-replacement`.
//! - `reconcile` plans the module as the inventory now describes it: no-op,
//!   or an approved in-place update which it applies; a replacement is
//!   refused (the workflow routes an allowed one to `create`). Then `onboot`
//!   and `startup`, which Terraform does not manage, through the API.
//! - `remove` checks ownership, then applies a destroy plan that must hold
//!   exactly the VM's delete.
//! - It also exports `maintenance` (wit/maintenance.wit; [`maintenance`]):
//!   `plan-update` keeps a saved plan of the inventory's changes for
//!   `cradle apply`, whose `apply-update` applies exactly it.

mod maintenance;
mod module;

cradle_guest::export_backend!(TerraformBackend);
cradle_guest::export_maintenance!(TerraformBackend);

cradle_guest::manifest! {
    name: "terraform",
    version: env!("CARGO_PKG_VERSION"),
    description: "Create and destroy VMs through Terraform saved plans that cradle approves",
    needs: ["log", "proxmox", "terraform"],
}

use cradle_guest::config::startup_changes;
use cradle_guest::lifecycle::{PlanAction, PlanOutcome};
use cradle_guest::log::{self, Level};
use cradle_guest::proxmox::{self, discover};
use cradle_guest::types::{Snippets, VmSpec, VmState};
use cradle_guest::{Backend, Error, Maintainer};
use cradle_terraform_logic::approve::{ApprovedAction, Mode};
use cradle_terraform_logic::ownership::Ownership;

struct TerraformBackend;

/// Render the module as the inventory describes it now and write it.
fn render(vm: &VmSpec, flavour: cradle_terraform_logic::Flavour, snippets: Option<&Snippets>) -> Result<(), Error> {
    let input = module::input(vm, &proxmox::list_vms()?, snippets)?;
    module::write(vm, flavour, &input)
}

impl Backend for TerraformBackend {
    fn discover(vm: VmSpec) -> Result<Option<VmState>, Error> {
        discover(&vm)
    }

    fn check_ownership(vm: VmSpec, found: Option<VmState>) -> Result<(), Error> {
        module::ownership(&vm, module::flavour()?, found.is_some()).map(|_| ())
    }

    fn plan(vm: VmSpec) -> Result<PlanOutcome, Error> {
        let flavour = module::flavour()?;
        render(&vm, flavour, None)?;
        let plan = module::plan(&vm, flavour, Mode::Apply, vm.allow_replacement)?;
        let _ = cradle_guest::terraform::discard_plan(&vm.name, &plan.id);
        let action = match plan.approval.action {
            ApprovedAction::Create => PlanAction::Create,
            ApprovedAction::Update => PlanAction::Update,
            ApprovedAction::Replace => PlanAction::Replace,
            ApprovedAction::NoOp | ApprovedAction::Delete => PlanAction::NoOp,
        };
        Ok(PlanOutcome { action, summary: plan.approval.summary, plan_id: None })
    }

    fn create(vm: VmSpec, snippets: Snippets) -> Result<VmState, Error> {
        let flavour = module::flavour()?;
        // Ownership again, right before planning: the run may have waited on
        // its lock, DNS and uploads since the first check.
        let exists = discover(&vm)?.is_some();
        module::ownership(&vm, flavour, exists)?;
        render(&vm, flavour, Some(&snippets))?;
        let plan = module::plan(&vm, flavour, Mode::Apply, vm.allow_replacement)?;
        for line in &plan.approval.summary {
            log::vm(Level::Info, &vm, &format!("terraform plan: {line}"));
        }
        module::apply(&vm, &plan)?;
        let found = discover(&vm)?.ok_or_else(|| {
            Error::Failed(format!(
                "terraform applied the plan for {} (vmid {}) but the cluster has no such VM; inspect the module's state and Proxmox before retrying",
                vm.name, vm.vmid
            ))
        })?;
        Ok(found)
    }

    fn reconcile(vm: VmSpec, found: VmState) -> Result<Vec<String>, Error> {
        let flavour = module::flavour()?;
        render(&vm, flavour, None)?;
        // An allowed replacement goes through `create` (the workflow asks
        // `plan` first), never here: a VM rebuilt here would skip cloud-init.
        let plan = module::plan(&vm, flavour, Mode::Apply, false)?;
        let mut lines = Vec::new();
        if plan.approval.action == ApprovedAction::Update {
            lines.extend(plan.approval.summary.iter().cloned());
        }
        module::apply(&vm, &plan)?;
        let changes = startup_changes(&vm, &proxmox::get_config(&found.node, found.vmid)?);
        if !changes.is_empty() {
            proxmox::set_config(&found.node, found.vmid, &changes, &[], None)?;
            lines.extend(changes.iter().map(|e| format!("set {} = {}", e.key, e.value)));
        }
        if !lines.is_empty() {
            log::vm(Level::Info, &vm, &format!("reconciled: {}", lines.join(", ")));
        }
        Ok(lines)
    }

    fn remove(vm: VmSpec) -> Result<(), Error> {
        let flavour = module::flavour()?;
        if discover(&vm)?.is_none() {
            return Err(Error::NotFound(format!(
                "VM {} (vmid {}) does not exist; nothing was removed (check the name and VMID in the inventory)",
                vm.name, vm.vmid
            )));
        }
        if module::ownership(&vm, flavour, true)? != Ownership::Owned {
            return Err(Error::Conflict(format!(
                "{} is not in its module's terraform state; nothing was removed",
                vm.name
            )));
        }
        let plan = module::plan(&vm, flavour, Mode::Destroy, false)?;
        module::apply(&vm, &plan)?;
        log::vm(Level::Info, &vm, "destroyed by terraform");
        Ok(())
    }
}

impl Maintainer for TerraformBackend {
    fn plan_update(vm: VmSpec, lift: Vec<String>) -> Result<PlanOutcome, Error> {
        maintenance::plan_update(&vm, &lift)
    }

    fn apply_update(vm: VmSpec, plan_id: String) -> Result<(), Error> {
        maintenance::apply_update(&vm, &plan_id)
    }
}
