//! Reviewed maintenance of an existing VM (wit/maintenance.wit): a saved plan
//! made by `cradle plan`, applied by `cradle apply` in another process.
//!
//! Contract:
//! - `plan-update` needs the VM in the cluster and in its module's state
//!   (ownership, as `remove` checks it). It renders the module as the
//!   inventory now describes it with the lifted attributes out of
//!   `ignore_changes` (`render_lifted`; with `disk` lifted and no `disk_gib`
//!   in the inventory, the boot disk at its live size, so the plan never
//!   drops it), plans, approves the plan (`check_update`: update or no-op;
//!   replacement only with `vm.allow-replacement`; create and delete
//!   refused), keeps it beyond the run (`keep-plan`) and returns the kept id
//!   with the approval's summary. An approved replacement is returned as
//!   such with no id and its plan discarded: maintenance never applies one. Whatever happens, the module on disk is
//!   rendered again WITHOUT lifts before it returns: the saved plan carries
//!   its own copy of the configuration, and the next `provision`'s
//!   `reconcile` must plan from the creation-only module (the disks it never
//!   touches stay ignored).
//! - `apply-update` checks ownership, adopts the kept plan, approves it again
//!   (the host approves it a third time in `apply`) and applies exactly it.
//!   terraform refuses a plan whose state moved on since ("Saved plan is
//!   stale"): that is a `conflict` naming the VM and saying to plan again.
//!   The plan is discarded after an apply or a refusal (it can never apply
//!   after either); after a crash before `apply`, the rerun adopts it again.

use cradle_guest::Error;
use cradle_guest::config::{boot_disk, disk_size_gib, get};
use cradle_guest::lifecycle::{PlanAction, PlanOutcome};
use cradle_guest::log::{self, Level};
use cradle_guest::proxmox::{self, discover};
use cradle_guest::terraform;
use cradle_guest::types::{VmSpec, VmState};
use cradle_terraform_logic::Flavour;
use cradle_terraform_logic::approve::ApprovedAction;
use cradle_terraform_logic::approve::update::check_update;
use cradle_terraform_logic::ownership::Ownership;
use cradle_terraform_logic::render::{self, Lift};

use crate::module;

/// The VM as the cluster has it; it must exist and be in its module's state.
fn owned(vm: &VmSpec, flavour: Flavour) -> Result<VmState, Error> {
    let found = discover(vm)?.ok_or_else(|| {
        Error::NotFound(format!(
            "VM {} (vmid {}) does not exist; maintenance changes existing VMs only: run `cradle provision`",
            vm.name, vm.vmid
        ))
    })?;
    if module::ownership(vm, flavour, true)? != Ownership::Owned {
        return Err(Error::Conflict(format!(
            "{} is not in its module's terraform state; maintenance changes only VMs terraform created",
            vm.name
        )));
    }
    Ok(found)
}

/// `plan-update`: see the module docs.
pub fn plan_update(vm: &VmSpec, lift: &[String]) -> Result<PlanOutcome, Error> {
    let flavour = module::flavour()?;
    let lift = Lift::parse(lift).map_err(|e| Error::Invalid(format!("{}: {e}", vm.name)))?;
    let found = owned(vm, flavour)?;
    let vms = proxmox::list_vms()?;
    let planned = plan_lifted(vm, flavour, &lift, &found, &vms);
    // The creation-only module again, whatever the plan did: the next
    // provision must never see lifted ignore_changes.
    let restored = module::input(vm, &vms, None).and_then(|input| module::write_file(vm, flavour, &input));
    let (action, summary, kept) = planned?;
    restored?;
    for line in &summary {
        log::vm(Level::Info, vm, &format!("terraform maintenance plan: {line}"));
    }
    Ok(PlanOutcome { action, summary, plan_id: kept })
}

fn plan_lifted(
    vm: &VmSpec,
    flavour: Flavour,
    lift: &Lift,
    found: &VmState,
    vms: &[proxmox::VmResource],
) -> Result<(PlanAction, Vec<String>, Option<String>), Error> {
    let mut input = module::input(vm, vms, None)?;
    if lift.disk && input.disk_gib.is_none() {
        // The real providers remove a disk the `disk` list leaves out: render
        // the boot disk the template gave the VM at its live size.
        let config = proxmox::get_config(&found.node, found.vmid)?;
        let live = boot_disk(&config)
            .filter(|slot| slot == "scsi0")
            .and_then(|slot| get(&config, &slot).and_then(disk_size_gib));
        input.disk_gib = live.and_then(|g| u32::try_from(g).ok());
    }
    let file = terraform::ModuleFile {
        name: render::MODULE_FILE.into(),
        content: render::render_lifted(flavour, &input, lift),
    };
    terraform::write_module(&vm.name, &[file])?;
    terraform::init(&vm.name)?;
    let saved = terraform::plan(&vm.name, false)?;
    let approval = terraform::show_plan(&vm.name, &saved.plan_id).and_then(|json| {
        check_update(&json, flavour, vm.allow_replacement, &vm.name).map_err(|e| Error::Conflict(e.to_string()))
    });
    let approval = match approval {
        Ok(a) => a,
        Err(e) => {
            // The refusal is the error worth reporting; the file is the host's to clean up.
            let _ = terraform::discard_plan(&vm.name, &saved.plan_id);
            return Err(e);
        }
    };
    let action = match approval.action {
        ApprovedAction::Update => PlanAction::Update,
        ApprovedAction::Replace => PlanAction::Replace,
        ApprovedAction::NoOp | ApprovedAction::Create | ApprovedAction::Delete => PlanAction::NoOp,
    };
    let action = if saved.has_changes { action } else { PlanAction::NoOp };
    if matches!(action, PlanAction::Replace) {
        // Maintenance never applies a replacement (the workflow blocks it:
        // `cradle provision` rebuilds), so it is reported, never kept.
        terraform::discard_plan(&vm.name, &saved.plan_id)?;
        return Ok((action, approval.summary, None));
    }
    let kept = terraform::keep_plan(&vm.name, &saved.plan_id)?;
    Ok((action, approval.summary, Some(kept)))
}

/// `apply-update`: see the module docs.
pub fn apply_update(vm: &VmSpec, kept: &str) -> Result<(), Error> {
    let flavour = module::flavour()?;
    owned(vm, flavour)?;
    let id = terraform::adopt_plan(&vm.name, kept)?;
    let approval = terraform::show_plan(&vm.name, &id).and_then(|json| {
        check_update(&json, flavour, vm.allow_replacement, &vm.name).map_err(|e| Error::Conflict(e.to_string()))
    });
    let applied = match approval {
        Ok(a) if a.action == ApprovedAction::NoOp => Ok(()),
        Ok(a) => terraform::apply(&vm.name, &id).map(|_| {
            for line in &a.summary {
                log::vm(Level::Info, vm, &format!("terraform maintenance applied: {line}"));
            }
        }),
        Err(e) => Err(e),
    };
    let applied = applied.map_err(|e| stale(vm, kept, e));
    // Applied or refused, the plan can never apply again.
    let discarded = terraform::discard_plan(&vm.name, &id);
    applied.and(discarded)
}

/// terraform's own refusal of a plan whose state moved on, as a `conflict`.
fn stale(vm: &VmSpec, kept: &str, e: Error) -> Error {
    if e.message().contains("Saved plan is stale") {
        Error::Conflict(format!(
            "{}: the terraform maintenance plan `{kept}` is stale: the module's state changed since `cradle plan` \
             (another apply or provision ran); nothing was applied: plan again ({})",
            vm.name,
            e.message()
        ))
    } else {
        e
    }
}
